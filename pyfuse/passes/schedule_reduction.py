"""Reduction scheduler: row (inner) and column (outer) reductions and normalizations.

Expects a kernel fusion with at least one sum/max/min reduction and no matmul, where
every reduction reduces the same axes of one iteration space (the reference: the
largest tensor that feeds a reduction). Guarantees, on success:

- global inputs are read through local caches and outputs written from one;
- **inner** reductions (the reduced axes are innermost in memory) run one block per
  row: the reference is merged to ``[rows, cols]`` and split to
  ``[BIDx, S, TIDx, V]`` with ``col = (s * threads + t) * V + v``, so each thread reads
  vectors, threads read consecutive vectors, and the reduction finishes with a
  cross-thread all-reduce;
- a **normalization** (a tensor read both by a reduction and after it, as softmax or
  layer_norm read the row twice) keeps that tensor in registers: the inline pass stops
  it before the reduction loops, in blocks of at most ``MAX_PERSISTENT_THREADS``, and this
  scheduler declines when the row would take more than ``MAX_PERSISTENT_PER_THREAD``
  elements per thread, unless the row exceeds it over at least ``REREAD_MIN_ROWS_PER_SM``
  rows per SM: then each reduction and output streams the row in a loop nest of its own,
  reading it again (``params.reread``, :mod:`reread_rows`);
- **outer** reductions (reduced axes outermost) give each thread one output column
  and a serial loop down the column (coalesced across threads);
- ``params`` records the kind, the threads, the vector width and the per-thread
  persistent elements. Register counts come from :mod:`row_registers`.
"""

from __future__ import annotations

from pyfuse.ir.exprs import (
    BroadcastOp,
    LinearOp,
    MatmulOp,
    MmaOp,
    ReductionOp,
)
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.hopper import SM90
from pyfuse.ir.id_model import IdMappingMode, IdModel
from pyfuse.ir.iterdomain import ParallelType
from pyfuse.ir.records import record
from pyfuse.ir.target import TargetInfo
from pyfuse.ir.tensor import TensorView
from pyfuse.passes.broadcast_first import broadcast_first
from pyfuse.passes.broadcast_first import candidates as broadcast_candidates
from pyfuse.passes.dividing_rows import divides_on_the_way_in
from pyfuse.passes.reread_rows import reason_not_split, split_nests
from pyfuse.passes.row_registers import (
    MAX_PERSISTENT_PER_THREAD,
    held_counts,
    kept_and_read,
    most_held,
    reductions,
    register_words,
    row_budget,
    staged_budget,
    staged_wide,
    streaming_budget,
    streaming_words,
)
from pyfuse.passes.scheduler_utils import (
    ROWS_PER_SM_TO_FILL,
    cache_inputs_and_outputs,
    replay_everywhere,
    uncovered_axis,
    vector_width,
    window_width,
)

NAME = "reduction"
MAX_THREADS = SM90.max_threads_per_block
# Threads of a persistent row's block: at 1024 threads ptxas has 64 registers per thread
# (65536 per SM / 1024), and rows of 8 to 32 elements per tensor spilled there when a row
# holds two tensors (a 32768-wide layer_norm of a residual; odd-width layer_norms with long
# epilogues: the CPU fuzzer, seed 151); at 512 each thread has 128, where
# MAX_PERSISTENT_PER_THREAD was measured. A row holding one tensor (softmax, rms_norm,
# layer_norm of an input: see row_pressure) takes 1024 threads when 512 would hold too
# many elements: such rows of 32768 bf16 assemble at 64 registers without spills; rows
# holding more past 512 * 48 = 24576 elements are not kept in registers.
MAX_PERSISTENT_THREADS = 512
MIN_THREADS = SM90.warp_size  # blocks of whole warps


@record(frozen=True)
class ReductionParams:
    """The reduction schedule's choices (Kernel.params shows them)."""

    kind: str  # "inner" or "outer"
    threads: int
    vector_width: int
    serial: int  # elements per thread along the reduction (inner) or the column (outer)
    persistent: bool
    # Vectors over aligned windows of rows that start anywhere (an odd-width row): the
    # column's split is a window split (iterdomain.Split, passes/lower_windows.py).
    window: bool = False
    # A normalization whose row does not fit the registers: one streaming loop nest per
    # reduction and output, each reading the row again (passes/reread_rows.py).
    reread: bool = False

    def as_dict(self) -> dict[str, object]:
        shown: dict[str, object] = {
            "kind": self.kind,
            "threads": self.threads,
            "vector_width": self.vector_width,
            "serial": self.serial,
            "persistent": self.persistent,
        }
        if self.window:
            shown["window"] = True
        if self.reread:
            shown["reread"] = True
        return shown


def reference_tensor(fusion: Fusion) -> TensorView:
    """The input of the largest reduction: a full tensor of the iteration space."""
    return max((r.input for r in reductions(fusion)), key=lambda tv: tv.numel)


def _reduced_flags(fusion: Fusion, reference: TensorView, id_model: IdModel) -> list[bool] | None:
    """Which axes of the reference every reduction reduces (None if reductions disagree)."""
    flags: list[bool] | None = None
    for reduction in reductions(fusion):
        mine = []
        for ref_axis in reference.no_reductions:
            reduced = any(
                axis.is_reduction and id_model.mapped(axis, ref_axis, IdMappingMode.EXACT)
                for axis in reduction.output.logical
            )
            mine.append(reduced)
        if flags is None:
            flags = mine
        elif mine != flags:
            return None
    return flags


def broadcast_back(fusion: Fusion, reduction: ReductionOp) -> bool:
    """The reduction's result is broadcast again downstream and read there (a normalization
    reads the row before and after it); a keepdim result that is only returned is not."""
    frontier = list(fusion.uses_in_fusion(reduction.output))
    seen: set[int] = set()
    while frontier:
        use = frontier.pop()
        if id(use) in seen:
            continue
        seen.add(id(use))
        if isinstance(use, BroadcastOp) and fusion.uses_in_fusion(use.output):
            return True
        frontier.extend(fusion.uses_in_fusion(use.output))
    return False


def _is_persistent(fusion: Fusion, held: list[tuple[int, int]]) -> bool:
    """Some reduction's result is broadcast back to a row that also holds a tensor from
    before the reduction (softmax's ``x - max``); a result broadcast only onto other inputs
    (``sum(x) + y``) holds nothing, and its row streams through the serial loop. ``held``
    is :func:`held_counts` of the fusion's rows."""
    return any(
        kept and broadcast_back(fusion, reduction)
        for reduction, (kept, _) in zip(reductions(fusion), held, strict=True)
    )


def decline_reason(fusion: Fusion, target: TargetInfo) -> str | None:
    if not reductions(fusion):
        return "no reduction"
    for expr in fusion.exprs():
        if isinstance(expr, MatmulOp | LinearOp | MmaOp):
            return f"T{expr.output.name} is a matmul"
    reference = reference_tensor(fusion)
    id_model = IdModel(fusion)
    flags = _reduced_flags(fusion, reference, id_model)
    if flags is None:
        return "reductions over different axes need separate kernels"
    if not any(flags):
        return "the reductions reduce no axis of the reference"
    for tv in fusion.outputs:
        # (An empty reference runs no thread: a non-empty output needs a kernel of its own.)
        if tv.numel > reference.numel:
            return f"output T{tv.name} is larger than the reduced tensor"
    uncovered = uncovered_axis(fusion, reference)
    if uncovered is not None:
        return uncovered
    broadcast_only = _output_axis_on_a_broadcast(fusion, reference, id_model)
    if broadcast_only is not None:
        return broadcast_only
    params = choose_params(fusion, reference, flags, target)
    return _over_budget(fusion, reference, flags, params)


def _over_budget(
    fusion: Fusion, reference: TensorView, flags: list[bool], params: ReductionParams
) -> str | None:
    """Why ``params`` would keep more of a row in registers than a thread holds without
    spilling, or None."""
    pressure = most_held(held_counts(kept_and_read(fusion)))
    budget = _budget_of(fusion, params)
    # (A row read again by each loop nest stages nothing across them: reread_rows.py.)
    staged = 0 if params.reread else staged_wide(fusion)
    staged_words = 2 * staged * params.serial * params.vector_width
    if params.kind == "inner" and staged and staged_words > staged_budget(params.threads):
        return (
            f"a row of {_extent(reference, flags, True)} elements stages {staged} 64-bit "
            f"tensors in {staged_words} registers per thread (at most "
            f"{staged_budget(params.threads)} at {params.threads} threads)"
        )
    if _persistent_over(params, budget):
        return (
            f"a row of {_extent(reference, flags, True)} elements needs "
            f"{params.serial * params.vector_width} registers per thread per persistent "
            f"tensor (at most {budget} for a row holding {pressure} tensors)"
        )
    return None


def _persistent_over(params: ReductionParams, budget: int) -> bool:
    """A persistent row keeps more elements a thread than ``budget``."""
    return params.persistent and params.serial * params.vector_width > budget


def _budget_of(fusion: Fusion, params: ReductionParams) -> int:
    """The elements a thread may keep of each persistent tensor of ``fusion``'s rows."""
    row_tensors = kept_and_read(fusion)
    return row_budget(
        most_held(held_counts(row_tensors)),
        params.vector_width,
        register_words(row_tensors),
        divides_on_the_way_in(fusion),
    )


def _output_axis_on_a_broadcast(
    fusion: Fusion, reference: TensorView, id_model: IdModel
) -> str | None:
    """An output axis that only a broadcast of the reference covers (``(a @ b) * a`` with one
    column: the output's columns are the matmul's size-1 N, broadcast), described; None when
    every output axis is one the reference iterates. Its loop would run the broadcast's one
    trip: the epilogue needs a kernel of its own."""
    real = [axis for axis in reference.logical if not axis.is_broadcast]
    for tv in fusion.outputs:
        for axis in tv.logical:
            if axis.is_broadcast or axis.is_reduction:
                continue
            if not any(id_model.mapped(axis, ref, IdMappingMode.EXACT) for ref in real):
                return f"T{tv.name}'s axis {axis} meets only a broadcast of T{reference.name}"
    return None


def _extent(reference: TensorView, flags: list[bool], reduced: bool) -> int:
    count = 1
    for axis, flag in zip(reference.no_reductions, flags, strict=True):
        if flag == reduced:
            count *= axis.logical_extent
    return count


def _is_inner(reference: TensorView, flags: list[bool]) -> bool:
    """The innermost memory axis of the reference is reduced."""
    allocation = [a for a in reference.maybe_allocation if not a.is_broadcast]
    if not allocation:
        return True
    innermost = allocation[-1]
    index = reference.no_reductions.index(innermost)
    return flags[index]


def _power_of_two_at_least(value: int) -> int:
    result = 1
    while result < value:
        result *= 2
    return result


def choose_params(
    fusion: Fusion,
    reference: TensorView,
    flags: list[bool],
    target: TargetInfo,
    vectorize: bool = True,
) -> ReductionParams:
    """The schedule of ``fusion`` whose reductions reduce ``flags`` of ``reference``: inner
    rows (persistent where a tensor is read across a reduction; read again per loop nest where
    such a row exceeds the registers over enough rows) or outer columns."""
    held = held_counts(kept_and_read(fusion))
    persistent = _is_persistent(fusion, held)
    cols = _extent(reference, flags, True)
    if _is_inner(reference, flags):
        params = _inner_choice(fusion, reference, flags, target, vectorize, persistent, held)
        if (
            params.persistent
            and _persistent_over(params, _budget_of(fusion, params))
            and _extent(reference, flags, False) >= REREAD_MIN_ROWS_PER_SM * target.sm_count
            and reason_not_split(fusion) is None
        ):
            # Past the registers, each loop nest reads the row again instead.
            return _inner_choice(fusion, reference, flags, target, vectorize, False, held, True)
        return params
    rows = _extent(reference, flags, False)
    threads = max(MIN_THREADS, min(256, _power_of_two_at_least(rows)))
    return ReductionParams("outer", threads, 1, cols, persistent)


# Rows a normalization too wide for registers needs per SM before one block per row reads
# it again in each loop nest (reread_rows.py): fewer rows leave SMs idle, and the kernels
# of segment_recompute.py spread each reduction over many blocks instead (split_reductions.py
# splits below the same count).
REREAD_MIN_ROWS_PER_SM = ROWS_PER_SM_TO_FILL


def _inner_choice(
    fusion: Fusion,
    reference: TensorView,
    flags: list[bool],
    target: TargetInfo,
    vectorize: bool,
    persistent: bool,
    held: list[tuple[int, int]],
    reread: bool = False,
) -> ReductionParams:
    """An inner row's params: aligned windows where they are wider than the plain vectors
    and fit, else plain vectors (``reread``: a streaming row read again per loop nest)."""
    cols = _extent(reference, flags, True)
    innermost = reference.no_reductions[-1]
    vector = 1
    if flags[-1] and vectorize:
        # A vector must stay inside one run of the innermost axis.
        vector = vector_width(fusion, innermost, innermost.logical_extent, target)
        widest = row_window_width(fusion, reference, flags, target)
        if widest > vector:
            params = _inner_params(fusion, target, cols, widest, True, persistent, held, reread)
            if params.window and not _window_over_budget(params):
                return params
    return _inner_params(fusion, target, cols, vector, False, persistent, held, reread)


def _inner_params(
    fusion: Fusion,
    target: TargetInfo,
    cols: int,
    vector: int,
    window: bool,
    persistent: bool,
    held: list[tuple[int, int]],
    reread: bool = False,
) -> ReductionParams:
    cap = target.max_threads_per_block
    while True:
        # A window holds up to one vector more than the row: its first starts before it.
        span = cols + vector - 1 if window else cols
        threads, serial = _inner_threads(
            fusion, target, span, vector, persistent, held, cap, reread
        )
        if persistent or vector == 1:
            break
        if streaming_words(fusion, vector, reread) <= streaming_budget(threads):
            break
        # The row's per-vector arrays do not fit: fewer threads first (each gets more
        # registers, and keeps its 16-byte loads), down to STREAMING_MIN_THREADS; then
        # narrower vectors.
        if STREAMING_MIN_THREADS < threads <= cap:
            cap = threads // 2
        else:
            vector //= 2
            cap = target.max_threads_per_block
    return ReductionParams(
        "inner", threads, vector, serial, persistent, window and vector > 1, reread
    )


# Elements a thread of a 1024-thread persistent row may hold in windows: the window's partial
# vectors' code takes registers where there are 64 a thread, and rows of 40 in vectors of 8
# spilled 8-24 B (bf16 softmax and log_softmax of 33001 and 40001; ptxas -v); 32 held.
WINDOW_ELEMENTS_AT_1024 = 32


def _window_over_budget(params: ReductionParams) -> bool:
    return (
        params.persistent
        and params.threads > MAX_PERSISTENT_THREADS
        and params.serial * params.vector_width > WINDOW_ELEMENTS_AT_1024
    )


def row_window_width(
    fusion: Fusion, reference: TensorView, flags: list[bool], target: TargetInfo
) -> int:
    """The width of aligned windows over an inner reduction's rows (scheduler_utils.
    window_width), or 1 where more than the innermost axis is reduced."""
    if sum(flags) != 1 or not flags[-1]:
        return 1
    return window_width(fusion, reference.no_reductions[-1], target)


# The fewest threads a streaming row is narrowed to before its vectors are: a 512-thread
# block still makes a whole SM's threads with four blocks.
STREAMING_MIN_THREADS = 256


def _inner_threads(
    fusion: Fusion,
    target: TargetInfo,
    cols: int,
    vector: int,
    persistent: bool,
    held: list[tuple[int, int]],
    cap: int,
    reread: bool = False,
) -> tuple[int, int]:
    """Threads and serial vectors per thread of an inner reduction's row of ``cols``, at
    most ``cap`` threads before the staging of 64-bit tensors asks for more."""
    pressure = most_held(held)
    words = register_words(kept_and_read(fusion))
    vectors = -(-cols // vector)
    # Aim for about 4 vectors per thread, 32 to 1024 threads (whole warps).
    threads = _power_of_two_at_least(max(1, vectors // 4))
    most = MAX_THREADS
    dividing = divides_on_the_way_in(fusion)
    if dividing:
        most = MAX_PERSISTENT_THREADS  # see DIVIDING_ROW_BUDGET
    if persistent and (
        pressure > 1
        or words > 1  # 64 registers at 1024 threads spilled 16 int64 (seed 379)
        or -(-vectors // MAX_PERSISTENT_THREADS) * vector <= MAX_PERSISTENT_PER_THREAD // words
    ):
        most = MAX_PERSISTENT_THREADS
    most = min(most, target.max_threads_per_block, cap)
    threads = max(MIN_THREADS, min(most, threads))
    if persistent:
        # More threads where the row's tensors would not fit the budget per thread.
        budget = row_budget(pressure, vector, words, dividing)
        while threads < most and -(-vectors // threads) * vector > budget:
            threads *= 2
    staged = 0 if reread else staged_wide(fusion)
    while (
        staged
        and threads < target.max_threads_per_block
        and 2 * staged * -(-vectors // threads) * vector > staged_budget(threads)
    ):
        threads *= 2
    serial = -(-vectors // threads)
    return threads, serial


# Elements a thread of a 1024-thread persistent row holds per tensor past which its 1-D
# inputs are broadcast before their casts (broadcast_first.py): the cast of a weight, hoisted
# into a per-thread array of the whole row, spilled from ragged rows of 25,000 (32 a thread).
WIDE_ROW_ELEMENTS = 24


def prepare(fusion: Fusion, target: TargetInfo) -> None:
    """Before skip_intermediates: a persistent row of more than WIDE_ROW_ELEMENTS a thread at
    the block's largest size reads its 1-D inputs at the row's rank (broadcast_first.py), and
    a row read again (reread_rows.py) does so through every chain of unary ops and casts.
    Narrower rows keep their plans (and the golden PTX) as they are."""
    broadcasts = broadcast_candidates(fusion)
    if not broadcasts or not reductions(fusion):
        return  # nothing to move: the row's plan is not needed
    reference = reference_tensor(fusion)
    flags = _reduced_flags(fusion, reference, IdModel(fusion))
    if flags is None or not any(flags) or not _is_inner(reference, flags):
        return
    params = choose_params(fusion, reference, flags, target)
    wide = params.serial * params.vector_width > WIDE_ROW_ELEMENTS
    if params.persistent and params.threads >= target.max_threads_per_block and wide:
        broadcast_first(fusion, broadcasts)
    elif params.reread:
        # Each loop nest streams the row, but a 1-D input's cast, computed before its
        # broadcast, would fill an array of the whole row (a layer_norm's weight of 33000
        # kept 136 elements a thread): broadcast it first, so it is cast per vector; a
        # chain of such ops moves one op a round (reread_rows.reason_not_split counts on it).
        while broadcast_first(fusion):
            pass


def schedule(
    fusion: Fusion, target: TargetInfo, vectorize: bool = True
) -> tuple[TensorView, ReductionParams]:
    """Schedule ``fusion`` in place; returns the reference tensor and the params.
    ``vectorize=False`` moves one element per access (a fallback plan's)."""
    reason = decline_reason(fusion, target)
    if reason is not None:
        raise ValueError(f"reduction scheduler cannot take this fusion: {reason}")
    reference = reference_tensor(fusion)
    id_model = IdModel(fusion)
    flags = _reduced_flags(fusion, reference, id_model)
    assert flags is not None  # checked by decline_reason
    params = choose_params(fusion, reference, flags, target, vectorize)
    if not vectorize:
        # One element per access takes more of them per thread than the vectorized params
        # decline_reason checked (a row of 10752 dividing on the way in: 21 a thread at the
        # 512 threads a dividing row may have, where 20 fit; it spilled 84 B, CPU fuzzer
        # seed 1405): the next plan runs instead (at last, one kernel per expr).
        over = _over_budget(fusion, reference, flags, params)
        if over is not None:
            raise ValueError(f"reduction scheduler without vectors: {over}")
    if params.reread:
        split_nests(fusion)
    else:
        cache_inputs_and_outputs(fusion)
    # The reference must be a computed tensor: an input read by a reduction now has a cache.
    reference = reference_tensor(fusion)

    # Order the reference's axes as [kept..., reduced...] and merge each group into one.
    kept = [a for a, f in zip(reference.loop, flags, strict=True) if not f]
    reduced = [a for a, f in zip(reference.loop, flags, strict=True) if f]
    order = {reference.loop.index(axis): position for position, axis in enumerate(kept + reduced)}
    reference.reorder(order)
    for _ in range(len(kept) - 1):
        reference.merge(0)
    has_rows = bool(kept)
    first_reduced = 1 if has_rows else 0
    for _ in range(len(reduced) - 1):
        reference.merge(first_reduced)

    if params.kind == "inner":
        column = first_reduced
        if params.vector_width > 1:
            reference.split(column, params.vector_width, window=params.window)
        reference.split(column, params.threads)  # [rows, S, T, (V)]
        if has_rows:
            reference.parallelize(0, ParallelType.BIDX)
        reference.parallelize(column + 1, ParallelType.TIDX)
        if params.vector_width > 1:
            reference.parallelize(column + 2, ParallelType.VECTORIZE)
    else:
        # [kept, reduced] -> [kept / T, T, reduced]: a thread per output element, walking its
        # column serially; neighbouring threads read neighbouring addresses.
        reference.split(0, params.threads)
        reference.parallelize(0, ParallelType.BIDX)
        reference.parallelize(1, ParallelType.TIDX)
    replay_everywhere(fusion, reference)
    return reference, params
