"""Register-array budgets of lowered kernels: the checks that reject a plan whose register
arrays ptxas would spill, so that the segment falls back to a simpler plan.

Expects a lowered :class:`~pyfuse.ir.kernel_ir.Kernel` and its plan's params. Guarantees: a
:class:`~pyfuse.errors.ScheduleError` naming the kernel where an outer reduction keeps more
than ``MAX_COLUMN_ARRAY_ELEMENTS`` elements per thread, where a streaming (not persistent)
inner reduction's arrays hold more than ``MAX_STREAMING_PREDICATES`` bools or more than
``STREAMING_ARRAY_WORDS_AT_1024`` registers' worth (scaled by the block; a row read again
per loop nest, ``params["reread"]``, counts each outermost loop's arrays apart), or where a
vectorized kernel's arrays, 64-bit ones among them, take more than ``WIDE_ARRAY_SHARE`` of a
thread's registers; nothing otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from pyfuse.errors import ScheduleError
from pyfuse.ir import kernel_ir as k
from pyfuse.ir.target import HOPPER
from pyfuse.ir.tensor import MemoryType


def check_register_arrays(kernel: k.Kernel, params: Mapping[str, object]) -> None:
    """Raise where the kernel's register arrays would spill (see the module doc)."""
    if params.get("kind") == "outer":
        _check_column_arrays(kernel)
    elif params.get("kind") == "inner" and not params.get("persistent"):
        _check_streaming_arrays(kernel, bool(params.get("reread")))
    elif params.get("vector_width") not in (None, 1):
        _check_wide_vector_arrays(kernel)


# The share of a thread's registers that a vectorized kernel's register arrays may take when
# some hold 64-bit values. ptxas keeps 32-bit arrays that are not live together in the same
# registers (72 words of a layer_norm's arrays took 52 registers at 1024 threads), but two
# 16-element int64 arrays read in vectors of 2 and kept across loop nests at 1024 threads
# spilled 20 bytes (CPU fuzzer, seed 379), where the same kernel without vectors did not.
WIDE_ARRAY_SHARE = 0.75


def _check_wide_vector_arrays(kernel: k.Kernel) -> None:
    arrays = [b for b in kernel.buffers.values() if b.memory == MemoryType.LOCAL and b.size > 1]
    if not any(b.dtype.itemsize == 8 for b in arrays):
        return
    words = sum(b.size * -(-b.dtype.itemsize // 4) for b in arrays)
    threads = math.prod(kernel.block)
    available = min(HOPPER.max_registers_per_thread, HOPPER.registers_per_sm // threads)
    if words > available * WIDE_ARRAY_SHARE:
        raise ScheduleError(
            f"kernel {kernel.name}: its register arrays, 64-bit ones among them, take {words} "
            f"registers per thread of the {available} a block of {threads} threads has; "
            "vectors keep them from sharing registers"
        )


# Register-array elements an outer reduction's thread may keep: it walks a whole column
# one element per access, and ptxas spilled 4 to 12 bytes of such kernels keeping columns
# of 24 to 62 elements (a 24-row f32 column kept for two loop nests, two 31-row f16 ones, a
# 31-row bool one). Inner reductions are not limited so: their rows of up to 96 words
# (odd-width layer_norms at 1024 threads) assembled without spills.
MAX_COLUMN_ARRAY_ELEMENTS = 16


def _check_column_arrays(kernel: k.Kernel) -> None:
    elements = sum(
        buffer.size
        for buffer in kernel.buffers.values()
        if buffer.memory == MemoryType.LOCAL and buffer.size > 1
    )
    if elements > MAX_COLUMN_ARRAY_ELEMENTS:
        raise ScheduleError(
            f"kernel {kernel.name}: an outer reduction keeping {elements} elements per thread "
            f"in register arrays (at most {MAX_COLUMN_ARRAY_ELEMENTS}): ptxas would spill them"
        )


# Bool elements a streaming reduction's register arrays may hold: they live in predicate
# registers, of which a thread has 7; a 14-element bool array held across two loop nests at
# 1024 threads spilled 336 bytes (CPU fuzzer, seed 457: a bool output beside a logsumexp of
# all of it).
MAX_STREAMING_PREDICATES = 7


# Registers a streaming reduction's thread may spend on register arrays (8- to 32-bit
# elements take one each, 64-bit two, vector-loaded 16-bit ones half) at 1024 threads, twice
# that at 512: an int8 and a float32 array of 33 each, kept across the loop nests of a row
# that stores one and reduces the other, spilled 52 to 176 bytes at 64 registers (CPU
# fuzzer, seed 523). The reduction scheduler narrows a streaming row's vectors to fit it.
STREAMING_ARRAY_WORDS_AT_1024 = 40


def _vector_loaded_16_bit(kernel: k.Kernel) -> set[str]:
    """The 16-bit register arrays that vector loads fill: the loads leave them two to a
    32-bit register, and ptxas keeps them so (a GEMV's rows of 18944 bf16 at 1024 threads,
    two arrays of 24 elements loaded in vectors of 8, took 39 registers without spills)."""
    return {
        stmt.target.name
        for stmt in k.walk(kernel.body)
        if isinstance(stmt, k.VectorLoad) and stmt.target.dtype.itemsize == 2
    }


def _words(buffer: k.Buffer, packed: bool) -> int:
    """Registers of a register array: one an element up to 32 bits, two for 64-bit ones,
    half of one for packed 16-bit ones (:func:`_vector_loaded_16_bit`)."""
    if packed:
        return -(-buffer.size // 2)
    return buffer.size * -(-buffer.dtype.itemsize // 4)


def _check_streaming_arrays(kernel: k.Kernel, per_nest: bool = False) -> None:
    """``per_nest``: the row's loop nests hold arrays of their own (passes/reread_rows.py),
    dead once the nest ends, so each nest's arrays, with those allocated outside every
    loop, are counted apart; otherwise all arrays count together."""
    for arrays in _array_groups(kernel, per_nest):
        _check_arrays(kernel, arrays)


def _array_groups(kernel: k.Kernel, per_nest: bool) -> list[list[k.Buffer]]:
    """The register arrays counted together: all of them, or (``per_nest``) those of each
    outermost loop with those allocated outside every loop."""
    local = [b for b in kernel.buffers.values() if b.memory == MemoryType.LOCAL and b.size > 1]
    if not per_nest:
        return [local]
    nests = [
        {s.buffer.name for s in k.walk([loop]) if isinstance(s, k.Alloc)}
        for loop in _outermost_loops(kernel.body)
    ]
    nested = set().union(*nests)
    outside = [b for b in local if b.name not in nested]
    return [outside + [b for b in local if b.name in names] for names in nests] or [outside]


def _outermost_loops(body: list[k.Stmt]) -> list[k.For]:
    """The loops of ``body`` that no other loop holds (through ifs)."""
    loops: list[k.For] = []
    for stmt in body:
        if isinstance(stmt, k.For):
            loops.append(stmt)
        else:
            for child in stmt.children():
                loops.extend(_outermost_loops(child))
    return loops


def _check_arrays(kernel: k.Kernel, arrays: list[k.Buffer]) -> None:
    predicates = sum(b.size for b in arrays if b.dtype.is_bool)
    if predicates > MAX_STREAMING_PREDICATES:
        raise ScheduleError(
            f"kernel {kernel.name}: a streaming reduction keeps {predicates} bools per thread "
            f"in register arrays (at most {MAX_STREAMING_PREDICATES} predicate registers)"
        )
    packed = _vector_loaded_16_bit(kernel)
    words = sum(_words(b, b.name in packed) for b in arrays if not b.dtype.is_bool)
    threads = math.prod(kernel.block)
    budget = STREAMING_ARRAY_WORDS_AT_1024 * HOPPER.max_threads_per_block // threads
    if words > budget:
        raise ScheduleError(
            f"kernel {kernel.name}: a streaming reduction keeps {words} registers of arrays per "
            f"thread (at most {budget} at {threads} threads)"
        )
