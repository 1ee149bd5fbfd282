"""The scheduler registry: what each kernel scheduler is to the rest of the compiler.

Every scheduler is one :class:`Scheduler` record: its name, why it declines a segment, how it
schedules and lowers a kernel it took, optionally a ``prepare`` step that rewrites the
kernel's fusion before skip_intermediates, and two facts the rest of pyfuse branches on, so that
the segmenter, the pipeline, the fuzzer and the runtime ask the record instead of comparing
scheduler names:

- ``indexes_from_reference``: its lowering derives every index from the reference tensor's
  loop indices (the SIMT schedulers), which validation rule 6 protects;
- ``interpreted``: the kernel-IR interpreter (:mod:`pyfuse.ir.kernel_interpreter`) runs its
  kernels; it simulates SIMT kernels, not the matmul kernel's TMA loads and wgmma, which the
  testing package runs as PTX on its Hopper simulator (``pyfuse.testing.ptx_sim``). Every
  scheduler's kernels launch without their IR: a
  matmul kernel's tensor maps are planned when it is built (``Kernel.matmul_launch``).

:data:`SCHEDULERS` lists them in order of preference (the segmenter takes the first that
accepts). Expects nothing at import beyond the SIMT schedulers; the matmul scheduler, its
lowering and what they import load with the first fusion that has an MMA.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pyfuse.errors import ScheduleError
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.records import record
from pyfuse.ir.target import TargetInfo
from pyfuse.ir.tensor import TensorView
from pyfuse.passes import schedule_cat, schedule_pointwise, schedule_reduction
from pyfuse.passes.lower import lower
from pyfuse.passes.plan import MATMUL_SCHEDULER, KernelPlan, has_mma

if TYPE_CHECKING:
    from pyfuse.ir.id_model import IdModel
    from pyfuse.ir.kernel_ir import Kernel
    from pyfuse.ir.params import MatmulParams

# None when the scheduler accepts the fusion, else its reason.
DeclineCheck = Callable[[Fusion, TargetInfo], "str | None"]
# (fusion, target, the user's matmul params, vectorize) -> (reference, the params to show).
ScheduleStep = Callable[
    [Fusion, TargetInfo, "MatmulParams | None", bool], "tuple[TensorView, dict[str, object]]"
]
LowerStep = Callable[[KernelPlan, str, TargetInfo, "IdModel"], "Kernel"]
# Rewrites a kernel's fusion before skip_intermediates (for the plan the scheduler will make).
PrepareStep = Callable[[Fusion, TargetInfo], None]


@record(frozen=True)
class Scheduler:
    """One kernel scheduler (see the module docstring)."""

    name: str
    decline: DeclineCheck
    schedule: ScheduleStep
    lower: LowerStep
    indexes_from_reference: bool
    interpreted: bool
    prepare: PrepareStep | None = None


def _no_cat(decline: DeclineCheck) -> DeclineCheck:
    """``decline``, after refusing a fusion that holds a CatOp: a cat is a kernel of its own
    (the cat scheduler's)."""

    def check(fusion: Fusion, target: TargetInfo) -> str | None:
        cat = schedule_cat.cat_op(fusion)
        if cat is not None:
            return f"T{cat.output.name} is a cat: it runs as a kernel of its own"
        return decline(fusion, target)

    return check


# ---- cat ------------------------------------------------------------------------------------


def _cat_decline(fusion: Fusion, target: TargetInfo) -> str | None:
    del target
    return schedule_cat.decline_reason(fusion)


def _cat_schedule(
    fusion: Fusion, target: TargetInfo, matmul: MatmulParams | None, vectorize: bool
) -> tuple[TensorView, dict[str, object]]:
    del target, matmul, vectorize  # one element per thread
    return schedule_cat.schedule(fusion)


def _cat_lower(plan: KernelPlan, name: str, target: TargetInfo, id_model: IdModel) -> Kernel:
    del target, id_model
    return schedule_cat.lower(plan, name)


# ---- pointwise ------------------------------------------------------------------------------


def _pointwise_decline(fusion: Fusion, target: TargetInfo) -> str | None:
    del target
    return schedule_pointwise.decline_reason(fusion)


def _pointwise_schedule(
    fusion: Fusion, target: TargetInfo, matmul: MatmulParams | None, vectorize: bool
) -> tuple[TensorView, dict[str, object]]:
    del matmul
    reference = schedule_pointwise.reference_output(fusion)
    params = schedule_pointwise.schedule(fusion, target, vectorize)
    return reference, params.as_dict()


def _simt_lower(plan: KernelPlan, name: str, target: TargetInfo, id_model: IdModel) -> Kernel:
    del target
    return lower(plan, name, id_model)


# ---- reduction ------------------------------------------------------------------------------


def _reduction_schedule(
    fusion: Fusion, target: TargetInfo, matmul: MatmulParams | None, vectorize: bool
) -> tuple[TensorView, dict[str, object]]:
    del matmul
    reference, params = schedule_reduction.schedule(fusion, target, vectorize)
    return reference, params.as_dict()


# ---- matmul (loads with the first MMA) ------------------------------------------------------


def _matmul_decline(fusion: Fusion, target: TargetInfo) -> str | None:
    if not has_mma(fusion):
        return "no MMA"
    from pyfuse.passes import schedule_matmul

    return schedule_matmul.decline_reason(fusion, target)


def _matmul_schedule(
    fusion: Fusion, target: TargetInfo, matmul: MatmulParams | None, vectorize: bool
) -> tuple[TensorView, dict[str, object]]:
    from dataclasses import asdict

    from pyfuse.passes import schedule_matmul

    del vectorize  # a matmul schedule has no vector switch: its fallback is multiply+sum
    reference, params = schedule_matmul.schedule(fusion, matmul, target)
    return reference, asdict(params)


def _matmul_lower(plan: KernelPlan, name: str, target: TargetInfo, id_model: IdModel) -> Kernel:
    from pyfuse.passes.lower_matmul import lower_matmul
    from pyfuse.passes.remove_broadcasts import remove_broadcasts

    del id_model
    with plan.fusion:
        remove_broadcasts(plan.fusion)
    return lower_matmul(plan, name, target)


CAT = Scheduler(
    schedule_cat.NAME,
    _cat_decline,
    _cat_schedule,
    _cat_lower,
    indexes_from_reference=False,
    interpreted=True,
)
MATMUL = Scheduler(
    MATMUL_SCHEDULER,
    _no_cat(_matmul_decline),
    _matmul_schedule,
    _matmul_lower,
    indexes_from_reference=False,
    interpreted=False,
)
REDUCTION = Scheduler(
    schedule_reduction.NAME,
    _no_cat(schedule_reduction.decline_reason),
    _reduction_schedule,
    _simt_lower,
    indexes_from_reference=True,
    interpreted=True,
    prepare=schedule_reduction.prepare,
)
POINTWISE = Scheduler(
    schedule_pointwise.NAME,
    _no_cat(_pointwise_decline),
    _pointwise_schedule,
    _simt_lower,
    indexes_from_reference=True,
    interpreted=True,
)

# In order of preference.
SCHEDULERS: tuple[Scheduler, ...] = (MATMUL, REDUCTION, POINTWISE, CAT)
_BY_NAME = {scheduler.name: scheduler for scheduler in SCHEDULERS}


def scheduler_named(name: str) -> Scheduler:
    """The registered scheduler called ``name``."""
    found = _BY_NAME.get(name)
    if found is None:
        raise ScheduleError(f"unknown scheduler {name!r}")
    return found
