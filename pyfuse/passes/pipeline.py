"""The compile's stages, in order, and the one runner that applies them. Read this file to
follow a fusion from math IR to PTX.

    ── math IR (MATH_PASSES: each rewrites the fusion in place) ──────────────────────────
    split_k               K split into a batch of partial products summed after, where asked
                          (MatmulParams.splitk) or where few output tiles leave SMs idle
    translate_patterns    MatmulOp / LinearOp / mul-sum -> MmaOp, operand broadcasts kept
    decompose_matmuls     matmuls refused for tensor cores (fp32, 1-D, layouts TMA cannot
                          load) -> multiply + sum, a reduction
    merge_common_reductions  one reduction where the trace made two of the same values
    split_long_reductions few long rows -> two reductions (a grid-wide first pass)
    copy_strided_reshape_inputs  a reshape of a strided input reads a contiguous copy
    fold_empty_reductions a reduction over no elements is its identity (a full tensor)
    ── segmentation ─────────────────────────────────────────────────────────────────────
    segment               kernels, each with the scheduler that accepts it (where none
                          accepts a kernel with an MMA, the MMAs run as multiply+sum; a
                          normalization too wide for one kernel: a kernel per reduction,
                          each recomputing its pointwise inputs, segment_recompute)
    ── scheduling (per kernel) ──────────────────────────────────────────────────────────
    prepare               the scheduler's rewrite before aliasing, if it has one (reduction:
                          a wide row's weights broadcast before their casts, broadcast_first)
    skip_intermediates    metadata ops right after inputs become aliases, not copies
    schedule_<name>       loop domains, memory types, caches, parallel types
    inline                inline positions from the IdModel
    validate              parallel-type and memory consistency, before lowering
    ── lowering (per kernel) ────────────────────────────────────────────────────────────
    remove_broadcasts     (matmul) operand broadcasts/permutes aliased: TMA reads the inputs
    lower / lower_matmul  kernel IR: loops, allocations, indices, predicates, syncs
    ── emission (per kernel) ────────────────────────────────────────────────────────────
    emit                  PTX, by the driver's emitter (backend_ptx, which passes do not
                          import); then the driver's JIT makes the cubin (runtime/cache.py)
    ── fallback ─────────────────────────────────────────────────────────────────────────
    a kernel whose plan fails (scheduling, lowering or emission) is built again by a
    simpler plan (fallback.py), or cut into one kernel per expr

``STAGES`` names every stage and where its artifact is kept; :func:`run` applies them
through one :class:`_StageRunner` (timing, and the verifier where ``PYFUSE_VERIFY`` asks)
and returns the :class:`PipelineResult` record from which the driver makes ``Compiled``,
``Kernel``, the dumps and the variant record. The matmul-only passes (pattern translation,
the matmul scheduler and lowering) are imported when a fusion first needs them, which keeps
them out of a pointwise fusion's first call.
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
from pyfuse.passes.broadcast_first import broadcasts_before_casts
from pyfuse.passes.common_reductions import merge_common_reductions
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


# What the driver's emitter makes of one lowered kernel: its PTX, and for a matmul kernel the
# tensor-map plan its launch needs (``backend_ptx.tensor_maps.MatmulLaunch``, opaque here).
@record
class Emitted:
    ptx: str
    launch: object | None = None


@record
class KernelStages:
    """One kernel's artifacts, by stage: its plan (scheduler, params, the fallback taken), the
    scheduled IR as text, the kernel IR, and what the emitter made of it."""

    plan: KernelPlan
    scheduled_ir: str
    kernel_ir: Kernel
    emitted: Emitted | None = None


# The emit stage, given by the driver: a failure there falls back like the pipeline's own.
Emitter = Callable[[KernelStages], Emitted]


@record
class PipelineResult:
    """The compile's record: each stage's artifact (``STAGES`` says where), the time each
    stage took, and the traced fusion the stages started from (left unchanged)."""

    traced: Fusion
    math_ir: str
    segmented: SegmentedFusion
    kernels: list[KernelStages]
    timings: dict[str, float] = field(default_factory=dict)


class _StageRunner:
    """Applies every stage the same way: timed (``timings`` by stage name, summed over kernels
    and fallback plans) and, where ``PYFUSE_VERIFY`` asks, the fusion verified after it: at
    the pipeline's boundaries at level 1, after every stage at level 2."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}
        self.verify_level = knobs.verify_level()

    @contextmanager
    def stage(
        self, name: str, fusion: Fusion | None = None, boundary: bool = False
    ) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - start
        if fusion is not None:
            self.verify(fusion, name, boundary)

    def verify(self, fusion: Fusion, after: str, boundary: bool = False) -> None:
        if self.verify_level >= 2 or (self.verify_level == 1 and boundary):
            verify_fusion(fusion, after=after)


# ── math IR ─────────────────────────────────────────────────────────────────────────────


@record(eq=False)
class _MathContext:
    target: TargetInfo
    matmul: MatmulParams | None


def _split_k(fusion: Fusion, context: _MathContext) -> None:
    matmul = context.matmul
    requested = matmul.splitk if matmul is not None else None  # None: the heuristic's
    if requested is None or requested > 1:
        skipped = split_k(fusion, requested, context.target)
        if skipped:
            warnings.warn(
                f"pyfuse: MatmulParams(splitk={requested}) not applied to " + "; ".join(skipped),
                UserWarning,
                stacklevel=3,
            )
    if matmul is not None:
        # The split is in the math now: each matmul kernel reduces its whole (part of) K.
        context.matmul = dataclasses.replace(matmul, splitk=1)


# What translate_patterns rewrites or describes: matmuls, and reductions (multiply-then-sum).
_PATTERN_OPS = (MatmulOp, LinearOp, MmaOp, ReductionOp)


def _translate_patterns(fusion: Fusion, context: _MathContext) -> None:
    if any(isinstance(expr, _PATTERN_OPS) for expr in fusion.exprs()):
        # Matmul patterns (and the modules that find them) load with the first fusion that
        # could hold one.
        from pyfuse.passes.translate_patterns import translate_patterns

        translate_patterns(fusion)


def _decompose_matmuls(fusion: Fusion, context: _MathContext) -> None:
    # What translation left (fp32, 1-D operands) becomes multiply-sum: a reduction.
    decompose_matmuls(fusion)
    decompose_unschedulable_mmas(fusion, context.target)


MathPass = Callable[[Fusion, _MathContext], object]

# In order; each runs inside ``with fusion`` (new tensors are named by the fusion).
MATH_PASSES: tuple[tuple[str, MathPass], ...] = (
    ("split_k", _split_k),
    ("translate_patterns", _translate_patterns),
    ("decompose_matmuls", _decompose_matmuls),
    ("merge_common_reductions", lambda fusion, _: merge_common_reductions(fusion)),
    (
        "split_long_reductions",
        lambda fusion, context: split_long_reductions(fusion, context.target),
    ),
    ("copy_strided_reshape_inputs", lambda fusion, _: copy_strided_reshape_inputs(fusion)),
    ("fold_empty_reductions", lambda fusion, _: fold_empty_reductions(fusion)),
)

# Every stage of a compile, in order, and where its artifact is kept.
STAGES: tuple[tuple[str, str], ...] = (
    ("trace", "PipelineResult.traced (the frontend traced it)"),
    *((name, "PipelineResult.math_ir, after the last") for name, _ in MATH_PASSES),
    ("segment", "PipelineResult.segmented"),
    ("schedule", "KernelStages.plan, KernelStages.scheduled_ir"),
    ("lower", "KernelStages.kernel_ir"),
    ("emit", "KernelStages.emitted"),
    ("cubin", "the driver's JIT, on disk by the PTX's hash (runtime/cache.py)"),
)


# ── scheduling and lowering, per kernel ─────────────────────────────────────────────────


def schedule_kernel(
    plan: KernelPlan,
    target: TargetInfo,
    matmul: MatmulParams | None,
    attempt: Attempt = ATTEMPTS[0],
    runner: _StageRunner | None = None,
) -> IdModel:
    """Run the plan's scheduler on its fusion in place and record its choices; returns the
    IdModel validation built of the scheduled fusion, for lowering to reuse. ``attempt``
    says what the scheduler may use (a fallback plan's limits, passes/fallback.py)."""
    runner = runner or _StageRunner()
    fusion = plan.fusion
    scheduler = scheduler_named(plan.scheduler)
    with fusion:
        if scheduler.prepare is not None:
            scheduler.prepare(fusion, target)
        # Slices are aliased even without aliases: reading in place is how a slice is read.
        skip_intermediates(fusion, slices_only=not attempt.alias_inputs)
        runner.verify(fusion, "skip_intermediates")
        given = matmul if attempt.user_params else None
        plan.reference, params = scheduler.schedule(fusion, target, given, attempt.vectorize)
        plan.params.update(params)
        runner.verify(fusion, f"schedule_{plan.scheduler}")
        inline.inline_most(fusion)
        runner.verify(fusion, "inline", boundary=True)
        return validate(fusion, plan.reference if scheduler.indexes_from_reference else None)


def _counting(moved: list[int]) -> Callable[[Fusion], None]:
    """broadcasts_before_casts as a replan rewrite that appends how many it moved."""
    return lambda fusion: moved.append(broadcasts_before_casts(fusion))


def _build_kernel(
    fusion: Fusion,
    segmented: SegmentedFusion,
    index: int,
    target: TargetInfo,
    matmul: MatmulParams | None,
    runner: _StageRunner,
    emit: Emitter | None,
) -> KernelStages | Exception:
    """Kernel ``index`` scheduled, lowered and (through ``emit``) emitted by the first plan
    that works (passes/fallback.py), or the first plan's error when none does."""
    name = kernel_name(fusion.name, index)
    failures: list[tuple[Attempt, Exception]] = []
    for attempt in attempts_for(has_mma(segmented.kernels[index].fusion), matmul is not None):
        try:
            if failures and attempt.broadcasts_first:
                moved: list[int] = []
                plan = replan(fusion, segmented, index, target, _counting(moved))
                if not moved[0]:
                    continue  # nothing moved: the plan would be the first one again
            elif failures:
                rewrite = None if attempt.tensor_cores else mmas_to_multiply_sum
                plan = replan(fusion, segmented, index, target, rewrite)
            else:
                plan = segmented.kernels[index]
            with runner.stage("schedule"):
                id_model = schedule_kernel(plan, target, matmul, attempt, runner)
                scheduled = scheduled_to_str(plan.fusion)
            with runner.stage("lower"):
                kernel = scheduler_named(plan.scheduler).lower(plan, name, target, id_model)
            stages = KernelStages(plan, scheduled, kernel)
            if emit is not None:
                with runner.stage("emit"):
                    stages.emitted = emit(stages)
        except Exception as error:  # any failure of a plan: the next, simpler one runs
            failures.append((attempt, error))
            continue
        if failures:
            plan.fallback = "; ".join(
                f"{failed.name}: {failure_summary(error)}" for failed, error in failures
            )
            plan.params["fallback"] = attempt.name
            if matmul is not None and not (attempt.tensor_cores and attempt.user_params):
                # The user asked for these params: say why they were not used.
                how = (
                    "as multiply+sum" if not attempt.tensor_cores else "with the heuristic's params"
                )
                warnings.warn(
                    f"pyfuse: kernel {name} runs {how}: its tensor-core plan with "
                    f"{matmul} failed ({failure_summary(failures[0][1])})",
                    UserWarning,
                    stacklevel=2,
                )
        return stages
    return failures[0][1]


def _segment_or_decompose(
    fusion: Fusion, target: TargetInfo, runner: _StageRunner
) -> SegmentedFusion:
    """The fusion's kernels; where no scheduler accepts some kernel and the fusion holds
    MMAs (an operand an earlier kernel computes, written with rows TMA cannot load; an MMA
    whose output is read in ways its epilogue cannot take), every MMA runs as
    multiply+sum, which the reduction path always takes."""
    try:
        return segment(fusion, target)
    except ScheduleError:
        if not mmas_to_multiply_sum(fusion):
            raise
        runner.verify(fusion, "decompose_matmuls")
        return segment(fusion, target)


# ── the runner ──────────────────────────────────────────────────────────────────────────


def run(
    fusion: Fusion,
    target: TargetInfo,
    matmul: MatmulParams | None = None,
    emit: Emitter | None = None,
) -> PipelineResult:
    """Every stage of ``STAGES`` up to ``emit`` (given) on a copy of ``fusion``. A kernel
    whose plan fails takes a simpler one (passes/fallback.py); only a fusion no plan can
    build raises."""
    runner = _StageRunner()
    traced = fusion
    fusion, _ = fusion.clone()
    runner.verify(fusion, "trace", boundary=True)
    context = _MathContext(target, matmul)
    for name, apply in MATH_PASSES:
        with runner.stage(name, fusion), fusion:
            apply(fusion, context)
    math_ir = str(fusion)

    with runner.stage("segment"):
        segmented = _segment_or_decompose(fusion, target, runner)
    kernels: list[KernelStages] = []
    first_failure: Exception | None = None  # what the user hears if no cut helps either
    index = 0
    while index < len(segmented.kernels):
        built = _build_kernel(fusion, segmented, index, target, context.matmul, runner, emit)
        if isinstance(built, Exception):
            first_failure = first_failure or built
            if segmented.recomputed:
                # Kernels that share recomputed exprs are not cut (each piece would make
                # the others write what it reads): the greedy kernels instead.
                with runner.stage("segment"):
                    segmented = segment(fusion, target, recompute=False)
                kernels, index = [], 0
                continue
            # No plan fits the whole segment: one kernel per expr, and build them all again
            # (the kernels' names and arguments change with the cut).
            with runner.stage("segment"):
                pieces = cut(fusion, segmented, index, target)
            if pieces is None:
                raise first_failure
            segmented, kernels, index = pieces, [], 0
            continue
        kernels.append(built)
        index += 1
    return PipelineResult(traced, math_ir, segmented, kernels, runner.timings)
