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
its guards take registers too). Then:

- where every computed kept tensor is a short pointwise chain (at most
  :data:`MAX_RECOMPUTED_EXPRS`) from global loads and per-row values (a mean, a max), and
  those loads fit in shared memory, each read of such a tensor after its reduction gets a
  fresh copy of the chain, and the row keeps the loads alone (the projection of persistent
  buffers onto inputs nvFuser makes): layer_norm of a 16-bit row then keeps the row itself,
  half the bytes of its f32 cast, instead of that cast and ``x - mean``;
- the kept tensors move to shared memory, the last kept first (it is live beside the
  epilogue's own loads), as many as fit in the block's shared memory less
  :data:`RESERVED_BYTES` for the reductions' workspaces; a kept global load moves through a
  copy of its register cache (global vector loads fill registers).

Values are unchanged: a recomputed chain computes the same exprs on the same inputs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pyfuse.ir.caching import cache_after
from pyfuse.ir.exprs import (
    BinaryOp,
    CastOp,
    Expr,
    LoadStoreOp,
    ReductionOp,
    TernaryOp,
    UnaryOp,
)
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.id_model import IdModel
from pyfuse.ir.target import TargetInfo
from pyfuse.ir.tensor import MemoryType, TensorView, Val, new_axes_like
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
        and not _is_per_row(tv)  # a mean or a max: one value a row, not worth moving
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
    module docstring); ``per_thread`` is the kept elements a thread (serial x vector).
    Returns how many tensors the row keeps in shared memory."""
    if threads < target.max_threads_per_block:
        return 0  # at fewer threads each has 128 registers or more: the register budget held
    ragged = cols != threads * per_thread
    if per_thread <= (RAGGED_REGISTER_ROW if ragged else REGISTER_ROW):
        return 0
    budget = target.max_smem_per_block - RESERVED_BYTES

    def row_bytes(tensors: Iterable[TensorView]) -> int:
        # A shared buffer holds the whole block's elements.
        return sum(threads * per_thread * tv.dtype.itemsize for tv in tensors)

    projected = _projection(fusion)
    if projected is not None and row_bytes(projected.kept) <= budget:
        _recompute_late_reads(fusion, reference, projected)
    used = moved = 0
    for tv in reversed(kept_tensors(fusion)):
        size = row_bytes([tv])
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


# The longest chain of pointwise exprs recomputed for a late read of a kept tensor.
MAX_RECOMPUTED_EXPRS = 8
_POINTWISE = (UnaryOp, CastOp, BinaryOp, TernaryOp, LoadStoreOp)


@dataclass
class _Projection:
    """What a row keeps once its computed kept tensors are recomputed from loads: ``kept``,
    the loads (and the kept tensors that cannot be recomputed); ``late``, per recomputed
    kept tensor, the exprs that read it after a reduction it feeds."""

    kept: list[TensorView]
    late: list[tuple[TensorView, list[Expr]]]


def _projection(fusion: Fusion) -> _Projection | None:
    """The kept tensors computed by short pointwise chains from global loads and per-row
    values (a mean, a max: nothing along the row) recomputed where they are read after
    their reductions, as nvFuser projects persistent buffers to inputs: layer_norm then
    keeps its 16-bit input instead of ``x`` and ``x - mean`` in f32. None when that keeps
    no less."""
    kept = kept_tensors(fusion)
    loads: dict[int, TensorView] = {}
    late: list[tuple[TensorView, list[Expr]]] = []
    for tv in kept:
        if _loaded_from_global(fusion, tv):
            loads[id(tv)] = tv
            continue
        leaves = _recomputable_from(fusion, tv)
        if leaves is None:
            return None  # it would stay kept beside the loads: nothing is saved
        loads.update((id(leaf), leaf) for leaf in leaves)
        late.append((tv, _late_uses(fusion, tv)))
    if not late or any(leaf.dtype.is_bool for leaf in loads.values()):
        return None
    return _Projection(list(loads.values()), late)


def _recomputable_from(fusion: Fusion, tv: TensorView) -> list[TensorView] | None:
    """The global loads ``tv``'s pointwise chain starts from, or None when the chain is
    longer than MAX_RECOMPUTED_EXPRS or reads a row-long value that is not a load."""
    leaves: dict[int, TensorView] = {}
    exprs = 0
    frontier = [tv]
    while frontier:
        current = frontier.pop()
        if _loaded_from_global(fusion, current):
            leaves[id(current)] = current
            continue
        if _is_per_row(current):
            continue
        definition = current.definition
        exprs += 1
        if (
            not isinstance(definition, _POINTWISE)
            or exprs > MAX_RECOMPUTED_EXPRS
            or fusion.is_input(current)
            or current.alias_of is not None
        ):
            return None
        frontier.extend(definition.tensor_inputs)
    return list(leaves.values())


def _is_per_row(tv: TensorView) -> bool:
    """``tv`` holds one value a row (every loop axis but the block's is a broadcast)."""
    return all(
        axis.parallel_type.is_block_dim or axis.is_broadcast or axis.extent == 1 for axis in tv.loop
    )


def _late_uses(fusion: Fusion, tv: TensorView) -> list[Expr]:
    """The exprs reading ``tv`` whose output also depends on a reduction ``tv`` feeds."""
    reached = _downstream(fusion, tv)
    after: set[int] = set()
    for expr in fusion.exprs():
        if isinstance(expr, ReductionOp) and (expr.input is tv or id(expr.input) in reached):
            after |= _downstream(fusion, expr.output)
    return [use for use in fusion.uses_in_fusion(tv) if id(use.output) in after]


def _downstream(fusion: Fusion, start: TensorView) -> set[int]:
    """Ids of the tensors computed from ``start``."""
    seen: set[int] = set()
    frontier = [start]
    while frontier:
        for use in fusion.uses_in_fusion(frontier.pop()):
            if id(use.output) not in seen:
                seen.add(id(use.output))
                frontier.append(use.output)
    return seen


def _recompute_late_reads(fusion: Fusion, reference: TensorView, projected: _Projection) -> None:
    """Give each late read of a recomputed kept tensor a fresh copy of its chain."""
    clones: list[TensorView] = []
    for tv, uses in projected.late:
        for use in uses:
            use.replace_input(tv, _clone_chain(fusion, tv, clones))
    id_model = IdModel(fusion)
    for clone in clones:
        replay_like(clone, reference, id_model)


def _clone_chain(fusion: Fusion, tv: TensorView, clones: list[TensorView]) -> TensorView:
    if _loaded_from_global(fusion, tv) or _is_per_row(tv):
        return tv
    definition = tv.definition
    assert isinstance(definition, _POINTWISE)  # checked by _recomputable_from
    inputs: list[Val] = [
        _clone_chain(fusion, val, clones) if isinstance(val, TensorView) else val
        for val in definition.inputs
    ]
    with fusion:
        out = TensorView(new_axes_like(tv.logical), tv.dtype)
        if isinstance(definition, UnaryOp):
            clone: Expr = UnaryOp(definition.op, out, _tensor(inputs[0]))
        elif isinstance(definition, BinaryOp):
            clone = BinaryOp(definition.op, out, inputs[0], inputs[1])
        elif isinstance(definition, CastOp):
            clone = CastOp(out, _tensor(inputs[0]))
        elif isinstance(definition, TernaryOp):
            clone = TernaryOp(out, *inputs)
        else:
            clone = LoadStoreOp(out, _tensor(inputs[0]), definition.kind)
    clone.source = definition.source
    clones.append(out)
    return out


def _tensor(val: Val) -> TensorView:
    assert isinstance(val, TensorView)
    return val


def _loaded_from_global(fusion: Fusion, tv: TensorView) -> bool:
    definition = tv.definition
    return isinstance(definition, LoadStoreOp) and any(
        t.memory_type == MemoryType.GLOBAL for t in definition.tensor_inputs
    )
