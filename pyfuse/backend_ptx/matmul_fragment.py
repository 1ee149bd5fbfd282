"""The epilogue side of the Hopper matmul main loop (:mod:`.matmul_template`).

- :func:`fragment`: the kernel-IR variables of the epilogue bound for each accumulator
  register of a consumer thread (hopper-ptx-notes 4.4): register ``i`` of a 64-row block is
  row ``16 warp + lane / 4 + 8 ((i >> 1) & 1)`` and column ``8 (i >> 2) + 2 (lane % 4) + (i
  & 1)``; a ping-pong warpgroup's blocks follow each other, 64 rows apart; with epilogue
  vectors also the warpgroup and the row and column inside its tile;
- :func:`consumer_epilogue`: the consumers' epilogue once per register, or per pair of
  adjacent columns, its outputs stored from registers, staged chunk by chunk for TMA
  stores (:mod:`.matmul_staging`), or written into the handoff tile (:mod:`.matmul_handoff`);
- :func:`epilogue_warps`: the producer warpgroup's warps 1..3 running the late epilogue
  over the handoff tile, per tile in the consumers' order.

Registers for an offset are made once, at their first use, so every caller emits the
same instructions for the same epilogue.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from pyfuse.backend_ptx.emit_memory import StagingTarget
from pyfuse.backend_ptx.emitter import KernelBuilder, Param
from pyfuse.backend_ptx.instructions import arith, convert, logic
from pyfuse.backend_ptx.matmul_handoff import ConsumerHandoff, EpilogueWarps, HandoffTile
from pyfuse.backend_ptx.matmul_staging import Staging
from pyfuse.backend_ptx.matmul_vectors import tensor_map_addresses
from pyfuse.backend_ptx.operands import Address, Reg, RegClass
from pyfuse.ir.hopper import SM90
from pyfuse.ir.kernel_ir import MatmulMainLoop, Var

# (bindings, accumulator element, per TMA-stored output where the element's pair is staged,
# per store hosting a residual where the residual's pair is: matmul_residuals)
EmitEpilogue = Callable[
    [dict[Var, Reg], int, Mapping[int, StagingTarget], Mapping[int, Address]], None
]
# The epilogue warps': (bindings, accumulator element, the pair's address in each handoff
# tensor's tile; the output goes over the first).
EmitLateEpilogue = Callable[[dict[Var, Reg], int, Sequence[Address]], None]
# The bindings of accumulator register ``i`` of 64-row block ``block``.
Bindings = Callable[[int, int], dict[Var, Reg]]


class MainLoopView(Protocol):
    """What the epilogue warps read of the main loop they are part of."""

    kb: KernelBuilder
    stmt: MatmulMainLoop
    maps: list[Param]
    smem: Reg
    tid: Reg

    def tile_loop(self, body: Callable[[Reg, Reg, Reg], None]) -> None: ...


def index_value(kb: KernelBuilder, var: Var, base: Reg, offset: int, cache: dict[int, Reg]) -> Reg:
    """``base + offset`` in a register of ``var``'s index type (made once per offset)."""
    if offset in cache:
        return cache[offset]
    value = base
    if offset:
        value = kb.reg(RegClass.B32)
        kb.emit(arith.add("u32", value, base, offset))
    if var.dtype.itemsize == 8:
        wide = kb.reg(RegClass.B64)
        kb.emit(convert.cvt("u64", "u32", wide, value))
        value = wide
    elif var.dtype.itemsize != 4:
        raise ValueError(f"index variable {var} must be int32 or int64, got {var.dtype.name}")
    cache[offset] = value
    return value


def fragment(
    kb: KernelBuilder,
    stmt: MatmulMainLoop,
    lane: Reg,
    warp: Reg,
    coordinates: tuple[Reg, Reg, Reg],
    warpgroup: Reg,
) -> Bindings:
    """The bindings of a consumer thread's registers (see the module) for the tile whose
    ``(batch, first row of the warpgroup's rows, first column)`` are ``coordinates``; the
    thread is ``lane`` of ``warp`` in consumer warpgroup ``warpgroup``."""
    batch, first_row, n0 = coordinates

    def u32() -> Reg:
        return kb.reg(RegClass.B32)

    row0, col0, quad = u32(), u32(), u32()
    local_row0 = local_col0 = row0  # inside the warpgroup's tile: with vectors only
    if stmt.vectors:
        local_row0, local_col0 = u32(), u32()
        kb.emit(
            logic.shr("u32", quad, lane, 2),
            arith.mad("u32", local_row0, warp, 16, quad),
            arith.add("u32", row0, local_row0, first_row),
            logic.and_("b32", local_col0, lane, 3),
            arith.mul("u32", local_col0, local_col0, 2),
            arith.add("u32", col0, local_col0, n0),
        )
    else:
        kb.emit(
            arith.mad("u32", row0, warp, 16, first_row),
            logic.shr("u32", quad, lane, 2),
            arith.add("u32", row0, row0, quad),
            logic.and_("b32", col0, lane, 3),
            arith.mad("u32", col0, col0, 2, n0),
        )
    rows: dict[int, Reg] = {}
    cols: dict[int, Reg] = {}
    local_rows: dict[int, Reg] = {}
    local_cols: dict[int, Reg] = {}
    fixed: dict[Var, Reg] = {stmt.batch_index: index_value(kb, stmt.batch_index, batch, 0, {})}
    if stmt.warpgroup is not None:
        fixed[stmt.warpgroup] = index_value(kb, stmt.warpgroup, warpgroup, 0, {})

    def bindings(block: int, i: int) -> dict[Var, Reg]:
        row_offset = block * SM90.wgmma_m + 8 * ((i >> 1) & 1)
        col_offset = 8 * (i >> 2) + (i & 1)
        row = index_value(kb, stmt.row, row0, row_offset, rows)
        col = index_value(kb, stmt.col, col0, col_offset, cols)
        bound = {stmt.row: row, stmt.col: col, **fixed}
        if stmt.tile_row is not None and stmt.tile_col is not None:
            bound[stmt.tile_row] = index_value(
                kb, stmt.tile_row, local_row0, row_offset, local_rows
            )
            bound[stmt.tile_col] = index_value(
                kb, stmt.tile_col, local_col0, col_offset, local_cols
            )
        if stmt.pair_col is not None:
            bound[stmt.pair_col] = index_value(kb, stmt.pair_col, col0, col_offset + 1, cols)
        return bound

    return bindings


def consumer_epilogue(
    kb: KernelBuilder,
    stmt: MatmulMainLoop,
    bindings: Bindings,
    coordinates: tuple[Reg, Reg, Reg],
    stores: Staging | ConsumerHandoff | None,
    emit: EmitEpilogue,
) -> None:
    """The consumers' epilogue of one tile (see the module): ``emit`` once per accumulator
    register, or pair of them, with ``bindings``' coordinates and where its stores go."""
    batch, first_row, n0 = coordinates
    staging = stores if isinstance(stores, Staging) else None
    handoff = stores if isinstance(stores, ConsumerHandoff) else None
    # A paired epilogue takes registers i and i + 1 (adjacent columns) in one call.
    step = 2 if stmt.pair_col is not None else 1
    per_block = stmt.tile_n // 2
    if handoff is not None:
        handoff.begin()
    for block in range(stmt.row_blocks):
        block_row = first_row
        if block:
            block_row = kb.reg(RegClass.B32)
            kb.emit(arith.add("u32", block_row, first_row, block * SM90.wgmma_m))
        for i in range(0, per_block, step):
            element = block * per_block + i
            if staging is not None and i % staging.elements_per_chunk == 0:
                staging.begin_chunk(first=element == 0)
            addresses: Mapping[int, StagingTarget] = {}
            reads: Mapping[int, Address] = {}
            if staging is not None:
                addresses, reads = staging.addresses(i), staging.read_addresses(i)
            elif handoff is not None:
                addresses = handoff.addresses(i)
            emit(bindings(block, i), element, addresses, reads)
            if staging is not None and (i + step) % staging.elements_per_chunk == 0:
                last = element + step == stmt.row_blocks * per_block
                chunk = i // staging.elements_per_chunk
                tile_chunk = element // staging.elements_per_chunk
                staging.end_chunk(chunk, batch, block_row, n0, last, tile_chunk)
    if handoff is not None:
        handoff.end()


def epilogue_warps(loop: MainLoopView, emit_late: EmitLateEpilogue) -> None:
    """The producer warpgroup's warps 1..3, per tile in the consumers' order: the late
    epilogue of their virtual warps from the handoff tile, then its TMA stores
    (:mod:`.matmul_handoff`)."""
    kb, stmt = loop.kb, loop.stmt
    handoff = stmt.handoff
    assert handoff is not None
    lane, warp = kb.reg(RegClass.B32), kb.reg(RegClass.B32)
    kb.emit(logic.and_("b32", lane, loop.tid, 31), logic.shr("u32", warp, loop.tid, 5))
    first_store = len(stmt.operands)
    (store_map,) = tensor_map_addresses(kb, loop.maps[first_store : first_store + 1])
    late = EpilogueWarps(kb, stmt, loop.smem, loop.tid, warp, store_map)
    per_block = stmt.tile_n // 2

    def tile(batch: Reg, m0: Reg, n0: Reg) -> None:
        def virtual_warp(block_row: Reg, warp_in_block: Reg, first_row: Reg) -> None:
            # This thread plays lane `lane` of consumer warp `warp_in_block`.
            place = HandoffTile(kb, stmt, loop.smem, lane, warp_in_block)
            coordinates = (batch, first_row, n0)
            bindings = fragment(kb, stmt, lane, warp_in_block, coordinates, block_row)
            per_chunk = place.elements_per_chunk
            for chunk in range(handoff.chunks):
                boxes = [place.box(block_row, chunk, t) for t in range(handoff.tensors)]
                for i in range(chunk * per_chunk, min((chunk + 1) * per_chunk, per_block), 2):
                    emit_late(bindings(0, i), i, [place.address(box, i) for box in boxes])

        late.tile(batch, m0, n0, virtual_warp)

    loop.tile_loop(tile)
    late.drain()
