"""Shared-memory rows: where a persistent row's kept tensors go when registers cannot hold them.

A normalization keeps the tensors it reads both before and after a reduction (softmax's
``x``, layer_norm's ``x`` and ``x - mean``) for the whole row. In registers, a 1024-thread
block has 64 registers a thread, and past about 32 elements a thread of kept tensors ptxas
spills (ptxas 13, rows of 4, on this machine: `rms_norm(x, w)` in f16 12 to 128 B at 25,000,
44,444 and 49,152 columns, `layer_norm(x, w, b)` 76 to 388 B, softmax 24 B at 44,444). In
shared memory the same tensors cost no registers: each thread writes its own elements in the
row's first loop nest and reads the same elements back after the reductions, so no barrier
is needed and nothing crosses threads.

Expects a fusion scheduled by the reduction scheduler (loop domains replayed from the
reference, ``[rows, S, T, V]``) and its params. Guarantees: nothing changes unless the row is
persistent at the block's largest size with more kept elements a thread than
:data:`REGISTER_ROW` (:data:`RAGGED_REGISTER_ROW` for a row the block does not tile exactly:
its guards take registers too); then the kept tensors move to shared memory, the last kept
first (it is live beside the epilogue's own loads), as many as fit in the block's shared
memory (less :data:`RESERVED_BYTES` for the reductions' workspaces). Returns how many moved.
"""

from __future__ import annotations

from pyfuse.ir.caching import cache_after
from pyfuse.ir.exprs import LoadStoreOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.id_model import IdModel
from pyfuse.ir.target import TargetInfo
from pyfuse.ir.tensor import MemoryType, TensorView
from pyfuse.passes.inline import persistent_limit
from pyfuse.passes.transform_replay import replay_like

# Kept elements a thread of a 1024-thread row may hold in registers: rows of 32768 (32 a
# thread in vectors of 8) assemble without spills; 25,000 (32 a thread, ragged) and 44,444
# (44 a thread in vectors of 4) spilled.
REGISTER_ROW = 32
RAGGED_REGISTER_ROW = 24
# Shared memory left to the cross-warp reduction workspaces (32 values of at most 8 bytes
# each per reduction, 16-byte aligned).
RESERVED_BYTES = 4096


def kept_tensors(fusion: Fusion) -> list[TensorView]:
    """The intermediates a persistent row keeps across a reduction, in expr order."""
    return [
        tv
        for tv in fusion.tensors()
        if not fusion.is_input(tv)
        and not fusion.is_output(tv)
        and tv.alias_of is None
        and not tv.dtype.is_bool  # bytes per element the emitter's shared stores may not take
        and persistent_limit(fusion, tv) is not None
    ]


def move_rows_to_shared_memory(
    fusion: Fusion,
    reference: TensorView,
    threads: int,
    per_thread: int,
    cols: int,
    target: TargetInfo,
) -> int:
    """Move the kept tensors of a row too wide for registers to shared memory (see the
    module docstring); ``per_thread`` is the kept elements a thread (serial x vector)."""
    if threads < target.max_threads_per_block:
        return 0  # at fewer threads each has 128 registers or more: the register budget held
    ragged = cols != threads * per_thread
    if per_thread <= (RAGGED_REGISTER_ROW if ragged else REGISTER_ROW):
        return 0
    budget = target.max_smem_per_block - RESERVED_BYTES
    used = moved = 0
    for tv in reversed(kept_tensors(fusion)):
        size = threads * per_thread * tv.dtype.itemsize  # the buffer holds the whole block's
        if used + size > budget:
            continue
        if _loaded_from_global(fusion, tv):
            # A global load fills registers (its vectors go nowhere else): the row goes to
            # shared memory through a copy of that cache, which becomes the kept tensor.
            shared = cache_after(fusion, tv, MemoryType.SHARED)
            replay_like(shared, reference, IdModel(fusion))
        else:
            tv.memory_type = MemoryType.SHARED
        used += size
        moved += 1
    return moved


def _loaded_from_global(fusion: Fusion, tv: TensorView) -> bool:
    definition = tv.definition
    return isinstance(definition, LoadStoreOp) and any(
        t.memory_type == MemoryType.GLOBAL for t in definition.tensor_inputs
    )
