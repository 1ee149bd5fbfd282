"""The epilogue warps of a Hopper matmul kernel (``MatmulMainLoop.handoff``).

The consumers compute the epilogue only up to the handoff tensor (chosen by
:mod:`pyfuse.passes.matmul_handoff`) and write it for the whole tile into the *handoff tile*
in shared memory, laid out as the output's TMA-store staging: boxes of 64 rows (consumer
warpgroup ``w``'s) by ``chunk_cols`` columns, 128-byte swizzled rows, box ``(w, c)`` at
``(w * chunks + c) * box_bytes``. Then they start their next tile's main loop, while the
producer warpgroup's three idle warps (warp 0 issues the TMA loads) compute the rest of the
epilogue from the tile. (A fourth warpgroup cannot do it: 512 threads leave 128 registers a
thread at entry, and ptxas compiles an m64n256 wgmma only with 154 or more.) The producer
warpgroup then keeps ``pyfuse.ir.target.EPILOGUE_REGISTERS`` a thread instead of 40, and
the consumers the rest.

Two mbarriers after the stages' (and the vectors') carry the tile between them:

- ``handoff full``: one arrival per consumer thread (``mbarrier.arrive`` releases its
  ``st.shared``), so a phase completes when the whole tile is written;
- ``handoff empty``: one arrival, the epilogue leader's (warp 1, lane 0), once every box of
  the tile has been read by its TMA store (``cp.async.bulk.wait_group.read 0``).

Per tile, a consumer thread waits ``empty`` (the phase before the tile's: the first wait
passes at once), writes its pairs, arrives on ``full``. The epilogue warps wait ``full``;
the tile's 64-row blocks are ``4 * blocks`` *virtual warps* of 16 rows, the rows a consumer
warp holds, and epilogue warp ``e`` takes virtual warps ``e, e + 3, ...``: for each it plays
that consumer warp's threads (the same rows and columns, so the same addresses), reading
every pair, computing the late epilogue and writing the output over it. Then
``fence.proxy.async`` and named barrier ``EPILOGUE_BARRIER`` (the 96 epilogue threads), and
the leader stores every box of the tile inside the output with TMA, commits them as one bulk
group, waits until they have read the tile and arrives on ``empty``. Before it exits it
waits for the stores to complete.
"""

from __future__ import annotations

from collections.abc import Callable

from pyfuse.backend_ptx.emitter import KernelBuilder
from pyfuse.backend_ptx.instructions import arith, control, logic, mbarrier, tma
from pyfuse.backend_ptx.matmul_staging import block_addresses, swizzled_row, wait_phase
from pyfuse.backend_ptx.operands import Address, Reg, RegClass
from pyfuse.ir.hopper import SM90
from pyfuse.ir.kernel_ir import MatmulMainLoop

# Named barrier of the epilogue warps: after the CTA's (0), the consumers' staging and
# vector barriers (1 + w) and the ping-pong turns (3 + w), which a handoff kernel never has.
EPILOGUE_BARRIER = 5
EPILOGUE_WARPS = SM90.warps_per_warpgroup - 1  # the producer warpgroup's but the TMA warp's
ELEMENTS_PER_BLOCK = 4  # accumulator registers per 8-column block of a thread's two rows
ROWS_PER_WARP = SM90.wgmma_m // SM90.warps_per_warpgroup


def barrier_offsets(stmt: MatmulMainLoop) -> tuple[int, int]:
    """Byte offsets of ``handoff full`` and ``handoff empty``: after the stages' full and
    empty barriers and the consumers' vector barriers."""
    full = SM90.mbarrier_bytes * (2 * stmt.stages + stmt.consumer_warpgroups)
    return full, full + SM90.mbarrier_bytes


def check_handoff(stmt: MatmulMainLoop, smem_bytes: int, lowest_tile: int) -> None:
    """Refuse a handoff the code below cannot carry out (a lowering bug)."""
    handoff = stmt.handoff
    if handoff is None:
        return
    if len(stmt.handoff_values) != handoff.tensors or stmt.pingpong or len(stmt.stores) != 1:
        raise ValueError(
            "epilogue warps need a value per handoff tensor and one TMA store, no ping-pong"
        )
    (store,) = stmt.stores
    if store.chunk_cols != handoff.chunk_cols or store.smem_offset != handoff.smem_offset:
        raise ValueError("the output is staged over the handoff tile, box for box")
    if store.dtype != handoff.dtype or handoff.dtype.itemsize != 2:
        raise ValueError(f"a 16-bit handoff of the output's dtype, got {handoff.dtype.name}")
    if handoff.row_blocks != stmt.consumer_warpgroups:
        raise ValueError("one 64-row block of the handoff per consumer warpgroup")
    if 1 + stmt.consumer_warpgroups >= EPILOGUE_BARRIER:
        raise ValueError(
            f"{stmt.consumer_warpgroups} consumer warpgroups' named barriers reach the epilogue "
            f"warps' ({EPILOGUE_BARRIER})"
        )
    if handoff.chunks * handoff.chunk_cols != stmt.tile_n:
        raise ValueError(f"{handoff.chunks} chunks of {handoff.chunk_cols} are not tile_n")
    if barrier_offsets(stmt)[1] + SM90.mbarrier_bytes > lowest_tile:
        raise ValueError(f"the handoff's mbarriers do not fit below smem offset {lowest_tile}")
    end = handoff.smem_offset + handoff.nbytes
    if handoff.smem_offset % SM90.max_swizzle_pattern_bytes or end > smem_bytes:
        raise ValueError(
            f"handoff tile [{handoff.smem_offset}, {end}) misplaced in {smem_bytes} B of "
            "shared memory"
        )


def init_barriers(kb: KernelBuilder, stmt: MatmulMainLoop, smem: Reg, leader: Reg) -> None:
    if stmt.handoff is None:
        return
    full, empty = barrier_offsets(stmt)
    consumers = SM90.warpgroup_threads * stmt.consumer_warpgroups
    kb.emit(
        mbarrier.init(Address(smem, full), consumers).guarded(leader),
        mbarrier.init(Address(smem, empty), 1).guarded(leader),
    )


class HandoffTile:
    """Where a thread's pairs sit in the handoff tile, as consumer thread ``lane`` of warp
    ``warp`` holds them: rows ``16 warp + lane / 4`` and ``+ 8`` of a box, columns ``8 j + 2
    (lane % 4)``, each 8-column block's offset inside a box computed once (the 128-byte
    swizzle XORs the 16-byte chunk with the row's bits 7..)."""

    def __init__(
        self, kb: KernelBuilder, stmt: MatmulMainLoop, smem: Reg, lane: Reg, warp: Reg
    ) -> None:
        handoff = stmt.handoff
        assert handoff is not None
        self.kb, self.handoff = kb, handoff
        size = handoff.dtype.itemsize
        self.span = handoff.chunk_cols * size  # one staged row
        self.blocks = handoff.chunk_cols // 8
        self.tile = self.u32()
        kb.emit(arith.add("u32", self.tile, smem, handoff.smem_offset))
        row, lane_bytes = self.u32(), self.u32()
        kb.emit(logic.shr("u32", row, lane, 2), arith.mad("u32", row, warp, ROWS_PER_WARP, row))
        row_bytes, xor = swizzled_row(kb, row, self.span)
        kb.emit(
            logic.and_("b32", lane_bytes, lane, 3),
            arith.mul("u32", lane_bytes, lane_bytes, 2 * size),
        )
        self.offsets = block_addresses(kb, lane_bytes, xor, row_bytes, size, self.blocks)

    def u32(self) -> Reg:
        return self.kb.reg(RegClass.B32)

    @property
    def elements_per_chunk(self) -> int:
        return self.blocks * ELEMENTS_PER_BLOCK

    def start(self, block_row: Reg, chunk: int, tensor: int = 0) -> Reg:
        """Where box ``(block_row, chunk)`` of handoff tensor ``tensor`` starts."""
        base = self.u32()
        handoff = self.handoff
        offset = tensor * handoff.tile_bytes + chunk * handoff.box_bytes
        self.kb.emit(
            arith.mad("u32", base, block_row, handoff.chunks * handoff.box_bytes, self.tile),
            arith.add("u32", base, base, offset),
        )
        return base

    def box(self, block_row: Reg, chunk: int, tensor: int = 0) -> list[Reg]:
        """The thread's 8-column block addresses in box ``(block_row, chunk)`` of handoff
        tensor ``tensor``."""
        base = self.start(block_row, chunk, tensor)
        addresses = []
        for offset in self.offsets:
            address = self.u32()
            self.kb.emit(arith.add("u32", address, base, offset))
            addresses.append(address)
        return addresses

    def address(self, box: list[Reg], element: int) -> Address:
        """The pair of accumulator registers ``element``, ``element + 1`` in ``box``."""
        block = (element // ELEMENTS_PER_BLOCK) % self.blocks
        second_row = (element >> 1) & 1
        return Address(box[block], second_row * 8 * self.span)


class ConsumerHandoff:
    """A consumer thread's side: its pairs of the tile into its warpgroup's boxes."""

    def __init__(
        self,
        kb: KernelBuilder,
        stmt: MatmulMainLoop,
        smem: Reg,
        lane: Reg,
        warp: Reg,
        consumer_index: Reg,
    ) -> None:
        self.kb = kb
        self.tile = HandoffTile(kb, stmt, smem, lane, warp)
        self.consumer_index = consumer_index
        full, empty = barrier_offsets(stmt)
        self.full, self.empty, self.phase = kb.regs(RegClass.B32, 3)
        kb.emit(
            arith.add("u32", self.full, smem, full),
            arith.add("u32", self.empty, smem, empty),
            arith.mov("u32", self.phase, 1),  # the phase before the first: passes at once
        )
        self.tensors = stmt.handoff.tensors if stmt.handoff is not None else 1
        self.boxes: dict[tuple[int, int], list[Reg]] = {}

    def begin(self) -> None:
        """Wait until the epilogue warps are done with the last tile's handoff."""
        wait_phase(self.kb, self.empty, self.phase, "handoff_empty")
        self.boxes = {}

    def addresses(self, element: int) -> dict[int, Address]:
        """Where ``StageStore`` t puts handoff tensor t's pair ``element``, ``element + 1``."""
        chunk = element // self.tile.elements_per_chunk
        addresses = {}
        for tensor in range(self.tensors):
            if (chunk, tensor) not in self.boxes:
                self.boxes[chunk, tensor] = self.tile.box(self.consumer_index, chunk, tensor)
            addresses[tensor] = self.tile.address(self.boxes[chunk, tensor], element)
        return addresses

    def end(self) -> None:
        """The tile is written: every thread's arrival releases its stores."""
        self.kb.emit(mbarrier.arrive(self.full))


# Emits the late epilogue of the virtual warp's pairs: (the block row, the virtual warp,
# the first row of its block); the caller binds the coordinates.
EmitVirtualWarp = Callable[[Reg, Reg, Reg], None]


class EpilogueWarps:
    """The epilogue warps' side (see the module): per tile, wait for the handoff, run the
    late epilogue over this warp's virtual warps, store the tile."""

    def __init__(
        self,
        kb: KernelBuilder,
        stmt: MatmulMainLoop,
        smem: Reg,
        tid: Reg,
        warp: Reg,
        store_map: Reg,
    ) -> None:
        handoff = stmt.handoff
        assert handoff is not None
        self.kb, self.stmt, self.handoff, self.store_map = kb, stmt, handoff, store_map
        self.leader = kb.reg(RegClass.PRED)
        self.first, self.full, self.empty, self.phase = kb.regs(RegClass.B32, 4)
        full, empty = barrier_offsets(stmt)
        self.smem = smem
        kb.emit(
            arith.setp("eq", "u32", self.leader, tid, SM90.warp_size),  # warp 1, lane 0
            arith.sub("u32", self.first, warp, 1),  # this warp's first virtual warp
            arith.add("u32", self.full, smem, full),
            arith.add("u32", self.empty, smem, empty),
            arith.mov("u32", self.phase, 0),
        )
        self.virtual_warps = handoff.row_blocks * SM90.warps_per_warpgroup

    def tile(self, batch: Reg, m0: Reg, n0: Reg, emit_virtual_warp: EmitVirtualWarp) -> None:
        """One tile: wait for its handoff, the late epilogue of each of this warp's virtual
        warps (a loop), then the tile's TMA stores."""
        kb = self.kb
        more = kb.reg(RegClass.PRED)
        virtual, block_row, warp_in_block, first_row = (kb.reg(RegClass.B32) for _ in range(4))
        wait_phase(kb, self.full, self.phase, "handoff_full")
        top, done = kb.new_label("virtual_warp"), kb.new_label("virtual_warps_done")
        kb.emit(arith.mov("u32", virtual, self.first))
        kb.place(top)
        kb.emit(
            arith.setp("ge", "u32", more, virtual, self.virtual_warps),
            control.bra(done, uni=True).guarded(more),
            logic.shr("u32", block_row, virtual, 2),
            logic.and_("b32", warp_in_block, virtual, SM90.warps_per_warpgroup - 1),
            arith.mad("u32", first_row, block_row, SM90.wgmma_m, m0),
        )
        emit_virtual_warp(block_row, warp_in_block, first_row)
        kb.emit(
            arith.add("u32", virtual, virtual, EPILOGUE_WARPS),
            control.bra(top, uni=True),
        )
        kb.place(done)
        self.store_tile(batch, m0, n0)

    def store_tile(self, batch: Reg, m0: Reg, n0: Reg) -> None:
        """Publish the tile to the TMA unit, store every box inside the output, and hand
        the tile back once the stores have read it."""
        kb, stmt, handoff = self.kb, self.stmt, self.handoff
        (store,) = stmt.stores
        kb.emit(
            mbarrier.fence_proxy_async("shared::cta"),
            control.bar_sync(EPILOGUE_BARRIER, EPILOGUE_WARPS * SM90.warp_size),
        )
        tile = kb.reg(RegClass.B32)
        kb.emit(arith.add("u32", tile, self.smem, handoff.smem_offset))
        for block_row in range(handoff.row_blocks):
            row0, rows_inside = kb.reg(RegClass.B32), kb.reg(RegClass.PRED)
            kb.emit(
                arith.add("u32", row0, m0, block_row * SM90.wgmma_m),
                arith.setp("lt", "u32", rows_inside, row0, stmt.m),
            )
            for chunk in range(handoff.chunks):
                col0, source = kb.reg(RegClass.B32), kb.reg(RegClass.B32)
                inside, store_now = kb.reg(RegClass.PRED), kb.reg(RegClass.PRED)
                offset = (block_row * handoff.chunks + chunk) * handoff.box_bytes
                kb.emit(
                    arith.add("u32", col0, n0, chunk * store.chunk_cols),
                    arith.setp("lt", "u32", inside, col0, stmt.n, bool_op="and", c=rows_inside),
                    logic.and_("pred", store_now, inside, self.leader),
                    arith.add("u32", source, tile, offset),
                )
                starts = {"m": row0, "n": col0, "batch": batch}
                coords = [starts[role] for role in reversed(store.roles)]
                kb.emit(tma.store_tile(self.store_map, coords, source).guarded(store_now))
        kb.emit(
            tma.commit_group().guarded(self.leader),
            tma.wait_group(0, read=True).guarded(self.leader),
            mbarrier.arrive(self.empty).guarded(self.leader),
        )

    def drain(self) -> None:
        self.kb.emit(tma.wait_group(0).guarded(self.leader))
