"""Register budgets of a reduction's rows: what a thread keeps across a reduction (a
persistent row), stages across its serial loop (64-bit tensors), and streams through
per-vector arrays, each measured with ptxas -v where the numbers say so.

Expects math-IR kernel fusions (the reduction scheduler's, before caches are inserted).
Guarantees nothing by itself: it counts; :mod:`schedule_reduction` chooses threads and
vectors from these counts, and :mod:`register_budget` checks the lowered kernel.
"""

from __future__ import annotations

from pyfuse.ir.exprs import ReductionOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.hopper import SM90
from pyfuse.ir.tensor import TensorView
from pyfuse.passes.dividing_rows import DIVIDING_ROW_BUDGET
from pyfuse.passes.register_budget import STREAMING_ARRAY_WORDS_AT_1024
from pyfuse.passes.reread_rows import nest_cones
from pyfuse.passes.scheduler_utils import upstream


def reductions(fusion: Fusion) -> list[ReductionOp]:
    """The fusion's sum/max/min reductions, in topological order."""
    return [e for e in fusion.exprs() if isinstance(e, ReductionOp)]


# Register budget of a persistent row: elements one thread keeps per persistent tensor.
MAX_PERSISTENT_PER_THREAD = 48  # 56 bf16 elements of an rms_norm row spilled (ptxas -v)


def held_counts(rows: list[tuple[list[TensorView], int]]) -> list[tuple[int, int]]:
    """Per reduction: how many tensors a row keeps across it (computed or read before it and
    read after it) and how many inputs it reads to compute the reduction's input, from
    :func:`kept_and_read`."""
    return [(len(kept), read) for kept, read in rows]


def register_words(rows: list[tuple[list[TensorView], int]]) -> int:
    """Registers one element of a kept tensor takes (``rows`` from :func:`kept_and_read`):
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


def staged_wide(fusion: Fusion) -> int:
    """How many 64-bit tensors a row may stage in registers across its serial loop: those
    computed on the way into a reduction whose row also leaves by another path (an output
    stored on the way, a value read off the reduction's input), where loop nests of their
    own keep the row's elements (counted for every 64-bit tensor of that input cone)."""
    most = 0
    for reduction in reductions(fusion):
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


def staged_budget(threads: int) -> int:
    """Registers a thread of ``threads`` may spend on staged 64-bit tensors."""
    return STAGED_WIDE_WORDS_AT_1024 * SM90.max_threads_per_block // threads


def row_budget(pressure: int, vector: int, words: int, dividing: bool) -> int:
    """:func:`persistent_budget`, and at most DIVIDING_ROW_BUDGET for a dividing row
    (:func:`~pyfuse.passes.dividing_rows.divides_on_the_way_in`)."""
    budget = persistent_budget(pressure, vector, words)
    if dividing:
        return min(budget, DIVIDING_ROW_BUDGET // words)
    return budget


def kept_and_read(fusion: Fusion) -> list[tuple[list[TensorView], int]]:
    """Per reduction: the tensors computed or read before it that an expr after it reads
    (what a persistent row keeps across it), and how many fusion inputs its input reads."""
    held: list[tuple[list[TensorView], int]] = []
    for reduction in reductions(fusion):
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
    return most_held(held_counts(kept_and_read(fusion)))


def most_held(held: list[tuple[int, int]]) -> int:
    """The most tensors a row holds around one reduction (``held`` from held_counts)."""
    return max((max(kept, read) for kept, read in held), default=0)


def persistent_budget(pressure: int, vector: int, words: int = 1) -> int:
    """Elements per thread of each persistent tensor of a row holding ``pressure`` tensors
    (:func:`row_pressure`) read in vectors of ``vector``: MAX_PERSISTENT_PER_THREAD for one
    tensor; for more, 32 elements when vectorized and 40 words shared among the tensors when
    not (measured with ptxas -v on the CPU fuzzer's finds, seed 223: an unvectorized
    layer_norm of a max of two inputs took about 5 registers per element and spilled past
    128 at 22, a min over 22528 elements beside a subtraction spilled at 44 in vectors of 4;
    a 16384-wide layer_norm of a residual holds 32 in vectors of 8 without spills). Elements
    of ``words`` registers each (:func:`register_words`) get that share of the budget."""
    if pressure <= 1:
        return MAX_PERSISTENT_PER_THREAD // words
    return (32 if vector > 1 else 40 // pressure) // words


def streaming_words(fusion: Fusion, vector: int, reread: bool = False) -> int:
    """Registers a streaming row's per-vector register arrays take: one array of ``vector``
    elements per tensor of the reductions' input cones (with ``reread``, of the largest loop
    nest's cone: reread_rows.nest_cones), counted as the lowering's budget counts them
    (register_budget.py: 16-bit inputs, vector-loaded, two to a register)."""
    if reread:
        return max((_array_words(cone, vector) for cone in nest_cones(fusion)), default=0)
    cone: dict[int, TensorView] = {}
    for reduction in reductions(fusion):
        cone.update(upstream([reduction.input]))
    return _array_words(list(cone.values()), vector)


def _array_words(tensors: list[TensorView], vector: int) -> int:
    words = 0
    for tv in tensors:
        if tv.dtype.is_bool:
            continue
        if tv.definition is None and tv.dtype.itemsize == 2:
            words += -(-vector // 2)
        else:
            words += vector * -(-tv.dtype.itemsize // 4)
    return words


def streaming_budget(threads: int) -> int:
    """Registers a streaming row's thread of ``threads`` may spend on per-vector arrays."""
    return STREAMING_ARRAY_WORDS_AT_1024 * SM90.max_threads_per_block // threads
