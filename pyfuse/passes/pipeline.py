"""The pass pipeline, in order. Read this file to follow a fusion from math IR to kernel IR.

    ── math IR ──────────────────────────────────────────────────────────────────────────
    split_k               K split into a batch of partial products summed after, where asked
                          (MatmulParams.splitk) or where few output tiles leave SMs idle
    translate_patterns    MatmulOp / LinearOp / mul-sum -> MmaOp, operand broadcasts kept
    decompose_matmuls     matmuls refused for tensor cores (fp32, 1-D, layouts TMA cannot
                          load) -> multiply + sum, a reduction
    split_long_reductions few long rows -> two reductions (a grid-wide first pass)
    copy_strided_reshape_inputs  a reshape of a strided input reads a contiguous copy
    fold_empty_reductions a reduction over no elements is its identity (a full tensor)
    ── segmentation ─────────────────────────────────────────────────────────────────────
    segment               kernels, each with the scheduler that accepts it (where none
                          accepts a kernel with an MMA, the MMAs run as multiply+sum)
    ── scheduling (per kernel) ──────────────────────────────────────────────────────────
    skip_intermediates    metadata ops right after inputs become aliases, not copies
    schedule_<name>       loop domains, memory types, caches, parallel types
    inline                inline positions from the IdModel
    validate              parallel-type and memory consistency, before lowering
    ── lowering (per kernel) ────────────────────────────────────────────────────────────
    remove_broadcasts     (matmul) operand broadcasts/permutes aliased: TMA reads the inputs
    lower / lower_matmul  kernel IR: loops, allocations, indices, predicates, syncs
    ── fallback ─────────────────────────────────────────────────────────────────────────
    a kernel whose plan fails (scheduling, lowering, or the frontend's emission) is built
    again by a simpler plan (fallback.py), or cut into one kernel per expr

Emission (kernel IR -> PTX) belongs to ``backend_ptx``; the frontend runs it after this.
The matmul-only passes (pattern translation, the matmul scheduler and lowering) are imported
when a fusion first needs them, which keeps them out of a pointwise fusion's first call.
Each stage's artifact is kept in :class:`PipelineResult` by name, and the same record
drives dumps and ``Kernel.ir``.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import field

from pyfuse import knobs
from pyfuse.errors import ScheduleError
from pyfuse.ir.exprs import LinearOp, MatmulOp, MmaOp, ReductionOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.id_model import IdModel
from pyfuse.ir.kernel_ir import Kernel
from pyfuse.ir.params import MatmulParams
from pyfuse.ir.printer import scheduled_to_str
from pyfuse.ir.records import record
from pyfuse.ir.target import TargetInfo
from pyfuse.ir.verify import verify_fusion
from pyfuse.passes import inline
from pyfuse.passes.decompose_matmul import (
    decompose_matmuls,
    decompose_unschedulable_mmas,
)
from pyfuse.passes.empty_reductions import fold_empty_reductions
from pyfuse.passes.fallback import (
    ATTEMPTS,
    Attempt,
    attempts_for,
    failure_summary,
    mmas_to_multiply_sum,
)
from pyfuse.passes.lower import kernel_name
from pyfuse.passes.plan import KernelPlan, SegmentedFusion, has_mma
from pyfuse.passes.reshape_inputs import copy_strided_reshape_inputs
from pyfuse.passes.schedulers import scheduler_named
from pyfuse.passes.segment import cut, replan, segment
from pyfuse.passes.skip_intermediates import skip_intermediates
from pyfuse.passes.split_k import split_k
from pyfuse.passes.split_reductions import split_long_reductions
from pyfuse.passes.validate import validate


@record
class KernelStages:
    """What the pipeline made for one kernel."""

    plan: KernelPlan
    scheduled_ir: str
    kernel_ir: Kernel


@record
class PipelineResult:
    math_ir: str
    segmented: SegmentedFusion
    kernels: list[KernelStages]
    timings: dict[str, float] = field(default_factory=dict)


class _Timer:
    def __init__(self) -> None:
        self.timings: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - start


def _check(fusion: Fusion, after: str, boundary: bool) -> None:
    """The IR verifier: at the pipeline's boundaries (level 1) or after every pass (level 2)."""
    level = knobs.verify_level()
    if level >= 2 or (level == 1 and boundary):
        verify_fusion(fusion, after=after)


def schedule_kernel(
    plan: KernelPlan,
    target: TargetInfo,
    matmul: MatmulParams | None,
    attempt: Attempt = ATTEMPTS[0],
) -> IdModel:
    """Run the plan's scheduler on its fusion in place and record its choices; returns the
    IdModel validation built of the scheduled fusion, for lowering to reuse. ``attempt``
    says what the scheduler may use (a fallback plan's limits, passes/fallback.py)."""
    fusion = plan.fusion
    with fusion:
        # Slices are aliased even without aliases: reading in place is how a slice is read.
        skip_intermediates(fusion, slices_only=not attempt.alias_inputs)
        _check(fusion, "skip_intermediates", boundary=False)
        scheduler = scheduler_named(plan.scheduler)
        plan.reference, params = scheduler.schedule(fusion, target, matmul, attempt.vectorize)
        plan.params.update(params)
        _check(fusion, f"schedule_{plan.scheduler}", boundary=False)
        inline.inline_most(fusion)
        _check(fusion, "inline", boundary=True)
        return validate(fusion, plan.reference if scheduler.indexes_from_reference else None)


def _lower_kernel(plan: KernelPlan, name: str, target: TargetInfo, id_model: IdModel) -> Kernel:
    return scheduler_named(plan.scheduler).lower(plan, name, target, id_model)


# What a compile does with a lowered kernel before it counts as built (the frontend emits
# its PTX): a failure there falls back like one of the pipeline's own.
EmitHook = Callable[[int, "KernelStages"], None]


def _build_kernel(
    fusion: Fusion,
    segmented: SegmentedFusion,
    index: int,
    target: TargetInfo,
    matmul: MatmulParams | None,
    timer: _Timer,
    emit: EmitHook | None,
) -> KernelStages | Exception:
    """Kernel ``index`` scheduled, lowered and (through ``emit``) emitted by the first plan
    that works (passes/fallback.py), or the first plan's error when none does."""
    name = kernel_name(fusion.name, index)
    failures: list[tuple[Attempt, Exception]] = []
    for attempt in attempts_for(has_mma(segmented.kernels[index].fusion)):
        try:
            if failures:
                rewrite = None if attempt.tensor_cores else mmas_to_multiply_sum
                plan = replan(fusion, segmented, index, target, rewrite)
            else:
                plan = segmented.kernels[index]
            with timer.stage("schedule"):
                id_model = schedule_kernel(plan, target, matmul, attempt)
                scheduled = scheduled_to_str(plan.fusion)
            with timer.stage("lower"):
                kernel = _lower_kernel(plan, name, target, id_model)
            stages = KernelStages(plan, scheduled, kernel)
            if emit is not None:
                emit(index, stages)
        except Exception as error:  # any failure of a plan: the next, simpler one runs
            failures.append((attempt, error))
            continue
        if failures:
            plan.fallback = "; ".join(
                f"{failed.name}: {failure_summary(error)}" for failed, error in failures
            )
            plan.params["fallback"] = attempt.name
            if matmul is not None and not attempt.tensor_cores:
                # The user asked for these params: say why they were not used.
                warnings.warn(
                    f"pyfuse: kernel {name} runs as multiply+sum: its tensor-core plan with "
                    f"{matmul} failed ({failure_summary(failures[0][1])})",
                    UserWarning,
                    stacklevel=2,
                )
        return stages
    return failures[0][1]


def _segment_or_decompose(fusion: Fusion, target: TargetInfo) -> SegmentedFusion:
    """The fusion's kernels; where no scheduler accepts some kernel and the fusion holds
    MMAs (an operand an earlier kernel computes, written with rows TMA cannot load; an MMA
    whose output is read in ways its epilogue cannot take), every MMA runs as
    multiply+sum, which the reduction path always takes."""
    try:
        return segment(fusion, target)
    except ScheduleError:
        if not mmas_to_multiply_sum(fusion):
            raise
        _check(fusion, "decompose_matmuls", boundary=False)
        return segment(fusion, target)


Pass = Callable[[Fusion], object]

# What translate_patterns rewrites or describes: matmuls, and reductions (multiply-then-sum).
_PATTERN_OPS = (MatmulOp, LinearOp, MmaOp, ReductionOp)


def _has_pattern_ops(fusion: Fusion) -> bool:
    return any(isinstance(expr, _PATTERN_OPS) for expr in fusion.exprs())


def run(
    fusion: Fusion,
    target: TargetInfo,
    matmul: MatmulParams | None = None,
    emit: EmitHook | None = None,
) -> PipelineResult:
    """All passes on a copy of ``fusion``: math IR to one kernel IR per kernel. A kernel
    whose plan fails (``emit``, given, is part of the plan) takes a simpler one
    (passes/fallback.py); only a fusion no plan can build raises."""
    timer = _Timer()
    fusion, _ = fusion.clone()
    _check(fusion, "trace", boundary=True)

    # ── math IR
    requested = matmul.splitk if matmul is not None else None  # None: the heuristic's
    if requested is None or requested > 1:
        with timer.stage("split_k"):
            skipped = split_k(fusion, requested, target)
        _check(fusion, "split_k", boundary=False)
        if skipped:
            warnings.warn(
                f"pyfuse: MatmulParams(splitk={requested}) not applied to " + "; ".join(skipped),
                UserWarning,
                stacklevel=2,
            )
    if matmul is not None:
        # The split is in the math now: each matmul kernel reduces its whole (part of) K.
        matmul = dataclasses.replace(matmul, splitk=1)
    with timer.stage("translate_patterns"), fusion:
        if _has_pattern_ops(fusion):
            # Matmul patterns (and the modules that find them) load with the first fusion
            # that could hold one.
            from pyfuse.passes.translate_patterns import translate_patterns

            translate_patterns(fusion)
    _check(fusion, "translate_patterns", boundary=False)
    with timer.stage("decompose_matmuls"):
        # What translation left (fp32, 1-D operands) becomes multiply-sum: a reduction.
        decompose_matmuls(fusion)
        decompose_unschedulable_mmas(fusion, target)
    _check(fusion, "decompose_matmuls", boundary=False)
    with timer.stage("split_long_reductions"), fusion:
        split_long_reductions(fusion, target)
    _check(fusion, "split_long_reductions", boundary=False)
    copy_strided_reshape_inputs(fusion)
    _check(fusion, "copy_strided_reshape_inputs", boundary=False)
    with fusion:
        fold_empty_reductions(fusion)
    _check(fusion, "fold_empty_reductions", boundary=False)
    math_ir = str(fusion)

    # ── segmentation
    with timer.stage("segment"):
        segmented = _segment_or_decompose(fusion, target)

    kernels: list[KernelStages] = []
    first_failure: Exception | None = None  # what the user hears if no cut helps either
    index = 0
    while index < len(segmented.kernels):
        built = _build_kernel(fusion, segmented, index, target, matmul, timer, emit)
        if isinstance(built, Exception):
            first_failure = first_failure or built
            # No plan fits the whole segment: one kernel per expr, and build them all again
            # (the kernels' names and arguments change with the cut).
            with timer.stage("segment"):
                pieces = cut(fusion, segmented, index, target)
            if pieces is None:
                raise first_failure
            segmented, kernels, index = pieces, [], 0
            continue
        kernels.append(built)
        index += 1
    return PipelineResult(math_ir, segmented, kernels, timer.timings)
