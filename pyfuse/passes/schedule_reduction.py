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
  elements per thread;
- **outer** reductions (reduced axes outermost) give each thread one output column
  and a serial loop down the column (coalesced across threads);
- ``params`` records the kind, the threads, the vector width and the per-thread
  persistent elements.
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
from pyfuse.passes.dividing_rows import DIVIDING_ROW_BUDGET, divides_on_the_way_in
from pyfuse.passes.register_budget import STREAMING_ARRAY_WORDS_AT_1024
from pyfuse.passes.scheduler_utils import (
    cache_inputs_and_outputs,
    replay_everywhere,
    uncovered_axis,
    upstream,
    vector_width,
    window_width,
)

NAME = "reduction"
# Register budget of a persistent row: elements one thread keeps per persistent tensor.
MAX_PERSISTENT_PER_THREAD = 48  # 56 bf16 elements of an rms_norm row spilled (ptxas -v)
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
        return shown


def _reductions(fusion: Fusion) -> list[ReductionOp]:
    return [e for e in fusion.exprs() if isinstance(e, ReductionOp)]


def reference_tensor(fusion: Fusion) -> TensorView:
    """The input of the largest reduction: a full tensor of the iteration space."""
    return max((r.input for r in _reductions(fusion)), key=lambda tv: tv.numel)


def _reduced_flags(fusion: Fusion, reference: TensorView, id_model: IdModel) -> list[bool] | None:
    """Which axes of the reference every reduction reduces (None if reductions disagree)."""
    flags: list[bool] | None = None
    for reduction in _reductions(fusion):
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
    is :func:`_held` of the fusion's rows."""
    return any(
        kept and broadcast_back(fusion, reduction)
        for reduction, (kept, _) in zip(_reductions(fusion), held, strict=True)
    )


def _held(rows: list[tuple[list[TensorView], int]]) -> list[tuple[int, int]]:
    """Per reduction: how many tensors a row keeps across it (computed or read before it and
    read after it) and how many inputs it reads to compute the reduction's input, from
    :func:`_kept_and_read`."""
    return [(len(kept), read) for kept, read in rows]


def _register_words(rows: list[tuple[list[TensorView], int]]) -> int:
    """Registers one element of a kept tensor takes (``rows`` from :func:`_kept_and_read`):
    2 when any tensor a row keeps across a reduction is 64-bit (int64 after a bool or
    integer op), else 1 (16-bit values are kept in f32 registers). An int64 row kept at 32
    per thread in vectors of 2 spilled 20 bytes at 128 registers (CPU fuzzer, seed 379)."""
    return 2 if any(tv.dtype.itemsize == 8 for kept, _ in rows for tv in kept) else 1


# Registers a thread of a 1024-thread row (64 registers) may spend on 64-bit tensors staged
# across its serial loop; a block of half the threads, twice that. One int64 tensor of 29
# per thread, stored as an output and summed, spilled 56 bytes at 1024 threads; two of 16
# per thread (an output and the tensor it was computed from) filled all 64 (CPU fuzzer,
# seeds 419 and 379).
STAGED_WIDE_WORDS_AT_1024 = 40


def _staged_wide(fusion: Fusion) -> int:
    """How many 64-bit tensors a row may stage in registers across its serial loop: those
    computed on the way into a reduction whose row also leaves by another path (an output
    stored on the way, a value read off the reduction's input), where loop nests of their
    own keep the row's elements (counted for every 64-bit tensor of that input cone)."""
    most = 0
    for reduction in _reductions(fusion):
        cone = upstream([reduction.input])
        computed = [tv for tv in cone.values() if tv.definition is not None]
        exits = any(
            fusion.is_output(tv)
            or any(
                use is not reduction and id(use.output) not in cone
                for use in fusion.uses_in_fusion(tv)
            )
            for tv in computed
        )
        if exits:
            most = max(most, sum(1 for tv in computed if tv.dtype.itemsize == 8))
    return most


def _staged_budget(threads: int) -> int:
    return STAGED_WIDE_WORDS_AT_1024 * SM90.max_threads_per_block // threads


def _row_budget(pressure: int, vector: int, words: int, dividing: bool) -> int:
    """:func:`persistent_budget`, and at most DIVIDING_ROW_BUDGET for a dividing row
    (:func:`~pyfuse.passes.dividing_rows.divides_on_the_way_in`)."""
    budget = persistent_budget(pressure, vector, words)
    if dividing:
        return min(budget, DIVIDING_ROW_BUDGET // words)
    return budget


def _kept_and_read(fusion: Fusion) -> list[tuple[list[TensorView], int]]:
    held: list[tuple[list[TensorView], int]] = []
    for reduction in _reductions(fusion):
        before = upstream([reduction.input])
        after: set[int] = {id(reduction.output)}
        kept: dict[int, TensorView] = {}
        for expr in fusion.exprs():
            inputs = expr.tensor_inputs
            if any(id(tv) in after for tv in inputs):
                after.update(id(out) for out in expr.outputs)
                kept.update((id(tv), tv) for tv in inputs if id(tv) in before)
        read = sum(1 for tv in fusion.inputs if id(tv) in before)
        held.append((list(kept.values()), read))
    return held


def row_pressure(fusion: Fusion) -> int:
    """The most tensors a row holds around one reduction: kept across it (softmax keeps one
    across each of its reductions) or read from memory to compute its input (a layer_norm of
    a residual reads two rows)."""
    return _pressure(_held(_kept_and_read(fusion)))


def _pressure(held: list[tuple[int, int]]) -> int:
    return max((max(kept, read) for kept, read in held), default=0)


def decline_reason(fusion: Fusion, target: TargetInfo) -> str | None:
    reductions = _reductions(fusion)
    if not reductions:
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
    row_tensors = _kept_and_read(fusion)
    pressure = _pressure(_held(row_tensors))
    budget = _row_budget(
        pressure,
        params.vector_width,
        _register_words(row_tensors),
        divides_on_the_way_in(fusion),
    )
    staged = _staged_wide(fusion)
    staged_words = 2 * staged * params.serial * params.vector_width
    if params.kind == "inner" and staged and staged_words > _staged_budget(params.threads):
        return (
            f"a row of {_extent(reference, flags, True)} elements stages {staged} 64-bit "
            f"tensors in {staged_words} registers per thread (at most "
            f"{_staged_budget(params.threads)} at {params.threads} threads)"
        )
    if params.persistent and params.serial * params.vector_width > budget:
        return (
            f"a row of {_extent(reference, flags, True)} elements needs "
            f"{params.serial * params.vector_width} registers per thread per persistent "
            f"tensor (at most {budget} for a row holding {pressure} tensors)"
        )
    return None


def persistent_budget(pressure: int, vector: int, words: int = 1) -> int:
    """Elements per thread of each persistent tensor of a row holding ``pressure`` tensors
    (:func:`row_pressure`) read in vectors of ``vector``: MAX_PERSISTENT_PER_THREAD for one
    tensor; for more, 32 elements when vectorized and 40 words shared among the tensors when
    not (measured with ptxas -v on the CPU fuzzer's finds, seed 223: an unvectorized
    layer_norm of a max of two inputs took about 5 registers per element and spilled past
    128 at 22, a min over 22528 elements beside a subtraction spilled at 44 in vectors of 4;
    a 16384-wide layer_norm of a residual holds 32 in vectors of 8 without spills). Elements
    of ``words`` registers each (:func:`_register_words`) get that share of the budget."""
    if pressure <= 1:
        return MAX_PERSISTENT_PER_THREAD // words
    return (32 if vector > 1 else 40 // pressure) // words


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
    held = _held(_kept_and_read(fusion))
    persistent = _is_persistent(fusion, held)
    cols = _extent(reference, flags, True)
    if _is_inner(reference, flags):
        innermost = reference.no_reductions[-1]
        vector = 1
        if flags[-1] and vectorize:
            # A vector must stay inside one run of the innermost axis.
            vector = vector_width(fusion, innermost, innermost.logical_extent, target)
            widest = row_window_width(fusion, reference, flags, target)
            if widest > vector:
                params = _inner_params(fusion, target, cols, widest, True, persistent, held)
                if params.window and not _window_over_budget(params):
                    return params
        return _inner_params(fusion, target, cols, vector, False, persistent, held)
    rows = _extent(reference, flags, False)
    threads = max(MIN_THREADS, min(256, _power_of_two_at_least(rows)))
    return ReductionParams("outer", threads, 1, cols, persistent)


def _inner_params(
    fusion: Fusion,
    target: TargetInfo,
    cols: int,
    vector: int,
    window: bool,
    persistent: bool,
    held: list[tuple[int, int]],
) -> ReductionParams:
    cap = target.max_threads_per_block
    while True:
        # A window holds up to one vector more than the row: its first starts before it.
        span = cols + vector - 1 if window else cols
        threads, serial = _inner_threads(fusion, target, span, vector, persistent, held, cap)
        if persistent or vector == 1:
            break
        if _streaming_words(fusion, vector) <= _streaming_budget(threads):
            break
        # The row's per-vector arrays do not fit: fewer threads first (each gets more
        # registers, and keeps its 16-byte loads), down to STREAMING_MIN_THREADS; then
        # narrower vectors.
        if STREAMING_MIN_THREADS < threads <= cap:
            cap = threads // 2
        else:
            vector //= 2
            cap = target.max_threads_per_block
    return ReductionParams("inner", threads, vector, serial, persistent, window and vector > 1)


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


def _streaming_words(fusion: Fusion, vector: int) -> int:
    """Registers a streaming row's per-vector register arrays take: one array of ``vector``
    elements per tensor of the reductions' input cones, counted as the lowering's budget
    counts them (register_budget.py: 16-bit inputs, vector-loaded, two to a register)."""
    cone: dict[int, TensorView] = {}
    for reduction in _reductions(fusion):
        cone.update(upstream([reduction.input]))
    words = 0
    for tv in cone.values():
        if tv.dtype.is_bool:
            continue
        if tv.definition is None and tv.dtype.itemsize == 2:
            words += -(-vector // 2)
        else:
            words += vector * -(-tv.dtype.itemsize // 4)
    return words


# The fewest threads a streaming row is narrowed to before its vectors are: a 512-thread
# block still makes a whole SM's threads with four blocks.
STREAMING_MIN_THREADS = 256


def _streaming_budget(threads: int) -> int:
    return STREAMING_ARRAY_WORDS_AT_1024 * SM90.max_threads_per_block // threads


def _inner_threads(
    fusion: Fusion,
    target: TargetInfo,
    cols: int,
    vector: int,
    persistent: bool,
    held: list[tuple[int, int]],
    cap: int,
) -> tuple[int, int]:
    """Threads and serial vectors per thread of an inner reduction's row of ``cols``, at
    most ``cap`` threads before the staging of 64-bit tensors asks for more."""
    pressure = _pressure(held)
    words = _register_words(_kept_and_read(fusion))
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
        budget = _row_budget(pressure, vector, words, dividing)
        while threads < most and -(-vectors // threads) * vector > budget:
            threads *= 2
    staged = _staged_wide(fusion)
    while (
        staged
        and threads < target.max_threads_per_block
        and 2 * staged * -(-vectors // threads) * vector > _staged_budget(threads)
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
    the block's largest size reads its 1-D inputs at the row's rank (broadcast_first.py).
    Narrower rows keep their plans (and the golden PTX) as they are."""
    broadcasts = broadcast_candidates(fusion)
    if not broadcasts or not _reductions(fusion):
        return  # nothing to move: the row's plan is not needed
    reference = reference_tensor(fusion)
    flags = _reduced_flags(fusion, reference, IdModel(fusion))
    if flags is None or not any(flags) or not _is_inner(reference, flags):
        return
    params = choose_params(fusion, reference, flags, target)
    wide = params.serial * params.vector_width > WIDE_ROW_ELEMENTS
    if params.persistent and params.threads >= target.max_threads_per_block and wide:
        broadcast_first(fusion, broadcasts)


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
