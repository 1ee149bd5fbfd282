"""Pointwise scheduler: a vectorized, coalesced loop over the largest output, either flat or,
when a global input is broadcast on one side of a break point, two-dimensional.

Expects a kernel fusion of pointwise and metadata ops only (no reduction, no matmul).
Guarantees, on success:

- every global input read by a compute op is read through a local cache tensor, and
  every output is written from one, so global traffic is plain (vector) copies;
- **flat** schedule: the reference output's axes are merged into one and split as
  ``[BIDx, U (unrolled), TIDx, V (vectorized)]``; every other tensor replays that;
- **2-D** schedule (nvFuser's "break point"): the reference's axes left of the break point
  merge into ``rows``, the rest into ``cols``, split as
  ``[BIDx (rows / R), BIDy (cols / (T * V)), TIDx, R (unrolled rows), V]``: each thread
  owns one vector of columns and walks ``R`` rows, so an input broadcast along the rows
  (``bias[N]`` of ``x[M, N] + bias[N]``) is loaded once per thread, before the row loop
  (the inline pass stops a tensor that is broadcast along an unrolled loop before that
  loop), and an input broadcast along the columns (``scale[M, 1]``) once per row and
  thread instead of once per element;
- ``params`` records ``vector_width`` (1 when the layout forbids vectors), ``threads``,
  ``unroll`` (the unrolled loop's trip count: U, or R in 2-D), ``break_point`` (0 for the
  flat schedule) and ``alignment_bytes`` (the base-pointer alignment the vectorized
  variant assumes, checked at call time).

Vectorizing needs every global tensor that has the innermost axis to hold it innermost and
contiguous, and the innermost extent divisible by the width, so no vector crosses a row.

The 2-D heuristic (:func:`choose_break_point`, :func:`rows_per_thread`): a break point
``b`` is *useful* when some global input read by the kernel is broadcast along every
reference axis left of ``b`` and varies along every axis right of it (outer broadcast),
or the reverse (inner broadcast). It is *feasible* when there are at least two rows and
the columns' ``cols / V`` vectors fill blocks of ``T = 128`` threads with at most
``cols / V / 8`` idle threads, in at most ``max_grid_yz`` blocks (rows narrower than
about ``T * V`` keep the flat schedule). The useful, feasible break point with the most
outer-broadcast inputs wins (then inner-broadcast inputs, then the rightmost); without
one the flat schedule stays. ``R`` is the most rows per thread of 4, 2 that still
gives ``MIN_BLOCKS_PER_SM`` blocks per SM and leaves at most 1/8 of the rows ragged;
else 1 (4 rows ran fastest on the H200: docs/performance.md, "Measured design choices").
"""

from __future__ import annotations

import math

from pyfuse.ir.exprs import LinearOp, MatmulOp, MmaOp, ReductionOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.id_model import IdModel
from pyfuse.ir.iterdomain import ParallelType, ceil_div
from pyfuse.ir.records import record
from pyfuse.ir.target import TargetInfo
from pyfuse.ir.tensor import TensorView
from pyfuse.passes.scheduler_utils import (
    cache_inputs_and_outputs,
    dense_flat_width,
    global_sources,
    replay_everywhere,
    uncovered_axis,
    varying_axes,
    vector_width,
    window_width,
)

NAME = "pointwise"
THREADS = 128
# Rows one thread walks in the 2-D schedule, most first.
ROWS_PER_THREAD = (4, 2)
# The flat schedule unrolls to at most this many elements per thread (and at most 4 vectors).
# More loads in flight bought nothing on the H200 (8, 16 and 32 elements of a bf16
# gelu(x*y+z) within a few percent), while the PTX, and with it the driver's JIT of a new
# kernel, grows with the unrolled body (docs/performance.md, "Cold-start run: commit 5345497").
FLAT_ELEMENTS_PER_THREAD = 16
FLAT_MAX_UNROLL = 4
# ... and only when every SM gets at least this many of the unrolled blocks. Unrolled bodies
# pay off only on very large tensors: on the H200 a bf16 gelu(x*y+z) with 16 elements per
# thread ran as fast as with 8 up to 124 unrolled blocks per SM and faster only at 248.
# Below that the unrolled kernel takes the driver's JIT about twice as long, which a new
# fusion's first call waits for (docs/performance.md, "Cold-start run: commit 5345497").
FLAT_MIN_UNROLLED_BLOCKS_PER_SM = 128
# Fewer blocks than this per SM leave SMs idle; more rows per thread are not worth that.
MIN_BLOCKS_PER_SM = 4
# At most 1/IDLE_FRACTION of a block's column threads (or of the rows) may be padding.
IDLE_FRACTION = 8


@record(frozen=True)
class PointwiseParams:
    """The pointwise schedule's choices (Kernel.params shows them)."""

    vector_width: int
    threads: int
    unroll: int
    break_point: int = 0  # 0: the flat schedule; b: rows = axes[:b], cols = axes[b:]
    # 2-D over one odd-width column axis: vectors over aligned windows of each row
    # (iterdomain.Split's ``window``, passes/lower_windows.py).
    window: bool = False

    @property
    def two_dimensional(self) -> bool:
        return self.break_point > 0

    def as_dict(self) -> dict[str, object]:
        shown: dict[str, object] = {
            "vector_width": self.vector_width,
            "threads": self.threads,
            "unroll": self.unroll,
            "break_point": self.break_point,
        }
        if self.window:
            shown["window"] = True
        return shown


@record(frozen=True)
class BreakPoint:
    """A candidate split of the reference's axes into rows (left) and columns (right)."""

    position: int
    rows: int
    cols: int
    outer_broadcast: int  # inputs broadcast along every row axis, varying along every column
    inner_broadcast: int  # inputs varying along every row axis, broadcast along every column


def decline_reason(fusion: Fusion) -> str | None:
    """Why this scheduler cannot take ``fusion`` (None when it can)."""
    for expr in fusion.exprs():
        if isinstance(expr, ReductionOp):
            return f"T{expr.output.name} is a reduction"
        if isinstance(expr, MatmulOp | LinearOp | MmaOp):
            return f"T{expr.output.name} is a matmul"
    sizes = {tv.numel for tv in fusion.outputs}
    if len(sizes) > 1:
        # One loop nest covers one iteration space; outputs of other sizes go to other kernels.
        return f"outputs have different sizes {sorted(sizes)}"
    if fusion.outputs:
        return uncovered_axis(fusion, reference_output(fusion))
    return None


def reference_output(fusion: Fusion) -> TensorView:
    """The output with the most elements: its loop covers every other tensor's."""
    return max(fusion.outputs, key=lambda tv: tv.numel)


def break_points(fusion: Fusion, reference: TensorView) -> list[BreakPoint]:
    """Every break point of ``reference``'s axes with the broadcast inputs it separates."""
    axes = reference.loop
    id_model = IdModel(fusion)
    # The tensors the kernel reads from global memory (an alias read in place, not the input
    # it views), each as: does it vary along reference axis i.
    sources = [
        tv
        for tv in global_sources(fusion)
        if any(use.output.alias_of is None for use in fusion.uses_in_fusion(tv))
    ]
    varying = [varying_axes(tv, axes, id_model) for tv in sources]
    real = [not axis.is_broadcast for axis in axes]
    result = []
    for position in range(1, len(axes)):
        left = [i for i in range(position) if real[i]]
        right = [i for i in range(position, len(axes)) if real[i]]
        outer = inner = 0
        if left and right:
            for flags in varying:
                if not any(flags[i] for i in left) and all(flags[i] for i in right):
                    outer += 1
                elif all(flags[i] for i in left) and not any(flags[i] for i in right):
                    inner += 1
        rows = math.prod(axis.extent for axis in axes[:position])
        cols = math.prod(axis.extent for axis in axes[position:])
        result.append(BreakPoint(position, rows, cols, outer, inner))
    return result


def _fills_block_row(cols: int, vector: int, threads: int, target: TargetInfo) -> bool:
    """``cols`` gives nearly every thread of its blocks a vector (the padding of the last
    block is at most 1/IDLE_FRACTION of the vectors), in at most ``max_grid_yz`` blocks."""
    vectors = cols // vector
    blocks = ceil_div(vectors, threads)
    padding = blocks * threads - vectors
    return vectors > 0 and padding <= vectors // IDLE_FRACTION and blocks <= target.max_grid_yz


def choose_break_point(
    fusion: Fusion, reference: TensorView, vector: int, threads: int, target: TargetInfo
) -> BreakPoint | None:
    """The break point of the 2-D schedule, or None for the flat one (module docstring)."""
    candidates = [
        point
        for point in break_points(fusion, reference)
        if (point.outer_broadcast or point.inner_broadcast)
        and point.rows >= 2
        and _fills_block_row(point.cols, vector, threads, target)
    ]
    if not candidates:
        return None
    return max(candidates, key=lambda p: (p.outer_broadcast, p.inner_broadcast, p.position))


def rows_per_thread(point: BreakPoint, vector: int, threads: int, target: TargetInfo) -> int:
    """Rows each thread walks: the most that keep the GPU filled (module docstring)."""
    col_blocks = ceil_div(point.cols // vector, threads)
    for rows in ROWS_PER_THREAD:
        row_blocks = ceil_div(point.rows, rows)
        padding = row_blocks * rows - point.rows
        if (
            row_blocks * col_blocks >= MIN_BLOCKS_PER_SM * target.sm_count
            and padding <= point.rows // IDLE_FRACTION
            and row_blocks <= target.max_grid_x
        ):
            return rows
    return 1


def choose_params(
    fusion: Fusion, reference: TensorView, target: TargetInfo, vectorize: bool = True
) -> PointwiseParams:
    axes = reference.no_reductions
    vector = 1
    if axes and vectorize:
        vector = vector_width(fusion, axes[-1], axes[-1].logical_extent, target)
    threads = THREADS
    point = choose_break_point(fusion, reference, vector, threads, target)
    if point is not None:
        window = False
        if vectorize and point.position == len(axes) - 1 and not point.outer_broadcast:
            # Rows of one odd-width axis (a log_softmax's output beside its row statistics)
            # take aligned windows. Not beside inputs broadcast along the rows (a bias[N]):
            # those load once per thread before the row loop, where no row is known to shift
            # their columns by.
            widest = window_width(fusion, axes[-1], target)
            if widest > vector:
                vector, window = widest, True
        rows = rows_per_thread(point, vector, threads, target)
        return PointwiseParams(vector, threads, rows, point.position, window)
    if vectorize and axes:
        # Dense tensors of one shape: vectors may cross rows (an odd-width row divides no
        # vector, but the whole tensor may).
        vector = max(vector, dense_flat_width(fusion, reference, target))
    vectors = max(1, reference.numel // vector)
    # Unroll as far as FLAT_ELEMENTS_PER_THREAD allows while the unrolled blocks still number
    # FLAT_MIN_UNROLLED_BLOCKS_PER_SM per SM (see there): more loads in flight per thread.
    unroll = max(1, min(FLAT_MAX_UNROLL, FLAT_ELEMENTS_PER_THREAD // vector))
    while unroll > 1 and vectors < threads * unroll * target.sm_count * (
        FLAT_MIN_UNROLLED_BLOCKS_PER_SM
    ):
        unroll //= 2
    return PointwiseParams(vector, threads, unroll)


def schedule(fusion: Fusion, target: TargetInfo, vectorize: bool = True) -> PointwiseParams:
    """Schedule ``fusion`` in place (see the module docstring); ``vectorize=False`` moves
    one element per access (a fallback plan's)."""
    reason = decline_reason(fusion)
    if reason is not None:
        raise ValueError(f"pointwise scheduler cannot take this fusion: {reason}")
    reference = reference_output(fusion)
    params = choose_params(fusion, reference, target, vectorize)
    cache_inputs_and_outputs(fusion)

    if not reference.loop:
        return params
    if params.two_dimensional:
        _schedule_2d(reference, params)
    else:
        _schedule_flat(reference, params)
    replay_everywhere(fusion, reference)
    return params


def _schedule_flat(reference: TensorView, params: PointwiseParams) -> None:
    """``[BIDx, U, TIDx, V]`` over all axes merged."""
    for _ in range(len(reference.loop) - 1):
        reference.merge(0)
    if params.vector_width > 1:
        reference.split(0, params.vector_width)
    reference.split(0, params.threads)
    if params.unroll > 1:
        reference.split(0, params.unroll)
    reference.parallelize(0, ParallelType.BIDX)
    if params.unroll > 1:
        reference.parallelize(1, ParallelType.UNROLL)
    thread_axis = 2 if params.unroll > 1 else 1
    reference.parallelize(thread_axis, ParallelType.TIDX)
    if params.vector_width > 1:
        reference.parallelize(-1, ParallelType.VECTORIZE)


def _schedule_2d(reference: TensorView, params: PointwiseParams) -> None:
    """``[BIDx (rows / R), BIDy (cols / (T * V)), TIDx, R, V]`` around the break point."""
    for _ in range(params.break_point - 1):
        reference.merge(0)
    for _ in range(len(reference.loop) - 2):
        reference.merge(1)  # [rows, cols]
    if params.vector_width > 1:
        reference.split(1, params.vector_width, window=params.window)
    reference.split(1, params.threads)  # [rows, cols / (T * V), T, (V)]
    if params.unroll > 1:
        reference.split(0, params.unroll)  # [rows / R, R, cols / (T * V), T, (V)]
        # The row loop goes inside the thread index: [rows / R, cols / (T * V), T, R, (V)].
        reference.reorder({1: 3})
    reference.parallelize(0, ParallelType.BIDX)
    reference.parallelize(1, ParallelType.BIDY)
    reference.parallelize(2, ParallelType.TIDX)
    if params.unroll > 1:
        reference.parallelize(3, ParallelType.UNROLL)
    if params.vector_width > 1:
        reference.parallelize(-1, ParallelType.VECTORIZE)
