"""The matmul epilogue's TMA stores: outputs staged in shared memory, a chunk at a time.

For a :class:`~pyfuse.ir.kernel_ir.MatmulMainLoop` with ``stores`` (chosen by
:mod:`pyfuse.passes.matmul_epilogue`), each consumer warpgroup writes its 64 rows of a tile
``chunk_cols`` columns at a time into one of its two staging buffers per output, and one
thread stores the chunk with a TMA store while the warpgroup goes on to the next chunk (or
tile, or its next tile's main loop). Per chunk, with named barrier ``1 + w`` of warpgroup
``w`` (128 threads; barrier 0 stays the CTA's):

1. the warpgroup's leader (``tid.x == 0``) waits ``cp.async.bulk.wait_group.read 1``: at
   most the previous chunk's store still reads, so the buffer about to be written (used two
   chunks ago) is free; ``bar.sync`` publishes that to the warpgroup;
2. every thread runs the epilogue for the chunk's accumulator registers; ``StageStore``
   writes each pair of columns with one ``st.shared`` at :meth:`Staging.address`;
3. ``fence.proxy.async.shared::cta`` (the generic-proxy writes become visible to the TMA
   unit) and ``bar.sync``; the leader issues one ``cp.async.bulk.tensor`` store per output
   (none for a chunk past the ragged edge of N or rows past M: the map clips the rest) and
   commits them as one bulk group; the buffers swap;
4. before the warpgroup leaves the kernel its leader waits ``cp.async.bulk.wait_group 0``.

**Layout.** A staging buffer is 64 rows of ``S = chunk_cols * itemsize`` bytes (32, 64 or
128: the tensor map's swizzle), on a 1024-byte boundary. The swizzle XORs the 16-byte chunk
index (address bits 4..) with address bits 7.. of the row start; for the accumulator
fragment (hopper-ptx-notes 4.4) thread ``lane`` of warp ``q`` holds rows ``16 q + lane / 4``
and ``+ 8`` and columns ``8 j + 2 (lane % 4)`` (``+ 1``). The XOR term ``((row S) >> 7) mod
(S / 16)`` is the same for both rows (``8 S`` bytes apart shift bits 7.. by a multiple of
``S / 16``) and for every ``j``, so each thread computes one address per column block ``j``
once, and a pair's address is that plus the buffer's offset plus ``8 S`` for the second row.
The eight rows of a warp's store then fall in eight different 16-byte chunks of a 128-byte
span (or in two spans of four): ``st.shared`` of a pair is free of bank conflicts.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyfuse.backend_ptx.emitter import KernelBuilder
from pyfuse.backend_ptx.instructions import arith, control, logic, mbarrier, tma
from pyfuse.backend_ptx.operands import Address, Reg, RegClass
from pyfuse.ir.hopper import SM90
from pyfuse.ir.kernel_ir import MatmulMainLoop

ROWS = SM90.wgmma_m
ELEMENTS_PER_BLOCK = 4  # accumulator registers per 8-column block of a thread's rows


def check_stores(stmt: MatmulMainLoop, smem_bytes: int) -> None:
    """Refuse stores the staging code below cannot carry out (a lowering bug)."""
    if not stmt.stores:
        return
    cols = {store.chunk_cols for store in stmt.stores}
    if len(cols) != 1:
        raise ValueError(f"TMA-stored outputs disagree on the chunk width: {sorted(cols)}")
    (chunk,) = cols
    if stmt.pair_col is None or chunk % 8 or stmt.tile_n % chunk:
        raise ValueError(
            f"TMA stores need paired columns and chunks of 8k columns dividing tile_n "
            f"{stmt.tile_n}, got {chunk}"
        )
    if 1 + stmt.consumer_warpgroups > SM90.named_barriers:
        raise ValueError("one named barrier per consumer warpgroup does not fit")
    for store in stmt.stores:
        if store.swizzle_bytes not in SM90.swizzle_spans:
            raise ValueError(f"{store.buffer_name}: staged rows of {store.swizzle_bytes} B")
        if stmt.handoff is not None:
            continue  # staged over the handoff tile (matmul_handoff.check_handoff)
        end = store.smem_offset + 2 * stmt.consumer_warpgroups * store.buffer_bytes
        if store.smem_offset % SM90.max_swizzle_pattern_bytes or end > smem_bytes:
            raise ValueError(
                f"{store.buffer_name}: staging buffers [{store.smem_offset}, {end}) misplaced "
                f"in {smem_bytes} B of shared memory"
            )


def swizzled_row(kb: KernelBuilder, row: Reg, span: int) -> tuple[Reg, Reg]:
    """(bytes before staged row ``row`` of ``span`` bytes, the XOR its swizzle applies to a
    byte offset inside it): the 16-byte chunk index is XORed with the row offset's bits 7..,
    modulo the span's chunks (see the module)."""
    row_bytes, xor = kb.reg(RegClass.B32), kb.reg(RegClass.B32)
    kb.emit(
        arith.mul("u32", row_bytes, row, span),
        logic.shr("u32", xor, row_bytes, 7),
        logic.and_("b32", xor, xor, span // 16 - 1),
        logic.shl("b32", xor, xor, 4),
    )
    return row_bytes, xor


def block_addresses(
    kb: KernelBuilder, lane_bytes: Reg, xor: Reg, base: Reg, itemsize: int, blocks: int
) -> list[Reg]:
    """Per 8-column block of a staged row: ``base`` plus the thread's pair's byte offset in
    the block, swizzled by ``xor`` (:func:`swizzled_row`)."""
    addresses = []
    for block in range(blocks):
        address = kb.reg(RegClass.B32)
        kb.emit(
            arith.add("u32", address, lane_bytes, 8 * itemsize * block),
            logic.xor("b32", address, address, xor),
            arith.add("u32", address, address, base),
        )
        addresses.append(address)
    return addresses


def wait_phase(kb: KernelBuilder, barrier: Reg, phase: Reg, label: str) -> None:
    """Wait for the phase of ``barrier`` with parity ``phase``, then flip ``phase`` for the
    next (a barrier that completes once per tile)."""
    ready = kb.reg(RegClass.PRED)
    kb.emit(
        mbarrier.wait_parity(ready, barrier, phase, kb.new_label(label)),
        logic.xor("b32", phase, phase, 1),
    )


class Staging:
    """The per-thread state of the staged stores of one consumer warpgroup's thread."""

    def __init__(
        self,
        kb: KernelBuilder,
        stmt: MatmulMainLoop,
        map_addresses: Sequence[Reg],
        smem: Reg,
        tid: Reg,
        lane: Reg,
        warp: Reg,
        consumer_index: Reg,
    ) -> None:
        self.kb, self.stmt, self.stores = kb, stmt, stmt.stores
        self.maps = list(map_addresses)
        self.chunk_cols = stmt.stores[0].chunk_cols
        self.blocks = self.chunk_cols // 8  # 8-column blocks per chunk
        self.leader = self.pred()
        kb.emit(arith.setp("eq", "u32", self.leader, tid, 0))
        self.barrier = self.u32()
        kb.emit(arith.add("u32", self.barrier, consumer_index, 1))
        row = self.u32()  # the thread's first row inside the warpgroup's 64
        kb.emit(logic.shr("u32", row, lane, 2), arith.mad("u32", row, warp, 16, row))
        pair_col = self.u32()  # lane % 4: which pair of the 8-column block
        kb.emit(logic.and_("b32", pair_col, lane, 3))
        self.buffer_base: list[Reg] = []  # the warpgroup's buffer 0, per store
        self.block_address: list[list[Reg]] = []  # per store, per column block
        self.offset: list[Reg] = []  # 0 or buffer_bytes: the buffer being filled
        for store in self.stores:
            span, size = store.swizzle_bytes, store.dtype.itemsize
            base = self.u32()
            kb.emit(
                arith.add("u32", base, smem, store.smem_offset),
                arith.mad("u32", base, consumer_index, 2 * store.buffer_bytes, base),
            )
            self.buffer_base.append(base)
            row_bytes, xor = swizzled_row(kb, row, span)
            thread_base, lane_bytes = self.u32(), self.u32()
            kb.emit(
                arith.add("u32", thread_base, base, row_bytes),
                arith.mul("u32", lane_bytes, pair_col, 2 * size),
            )
            self.block_address.append(
                block_addresses(kb, lane_bytes, xor, thread_base, size, self.blocks)
            )
            offset = self.u32()
            kb.emit(arith.mov("u32", offset, 0))
            self.offset.append(offset)
        self.current: list[list[Reg]] = []

    def u32(self) -> Reg:
        return self.kb.reg(RegClass.B32)

    def pred(self) -> Reg:
        return self.kb.reg(RegClass.PRED)

    @property
    def elements_per_chunk(self) -> int:
        return self.blocks * ELEMENTS_PER_BLOCK

    def begin_chunk(self) -> None:
        """Wait for this chunk's buffers (step 1) and point the addresses into them."""
        kb = self.kb
        kb.emit(
            tma.wait_group(1, read=True).guarded(self.leader),
            control.bar_sync(self.barrier, SM90.warpgroup_threads),
        )
        self.current = []
        for addresses, offset in zip(self.block_address, self.offset, strict=True):
            moved = []
            for address in addresses:
                register = self.u32()
                kb.emit(arith.add("u32", register, address, offset))
                moved.append(register)
            self.current.append(moved)

    def addresses(self, element: int) -> dict[int, Address]:
        """Per store, where the pair of accumulator registers ``element``, ``element + 1``
        goes in the buffer being filled."""
        block = (element // ELEMENTS_PER_BLOCK) % self.blocks
        second_row = (element >> 1) & 1
        return {
            index: Address(self.current[index][block], second_row * 8 * store.swizzle_bytes)
            for index, store in enumerate(self.stores)
        }

    def end_chunk(self, chunk: int, batch: Reg, row0: Reg, n0: Reg) -> None:
        """Publish chunk ``chunk`` of the 64 rows from ``row0`` to the TMA unit and store it
        (step 3)."""
        kb, stmt = self.kb, self.stmt
        col0 = self.u32()
        inside, rows_inside = self.pred(), self.pred()
        kb.emit(
            mbarrier.fence_proxy_async("shared::cta"),
            control.bar_sync(self.barrier, SM90.warpgroup_threads),
            arith.add("u32", col0, n0, chunk * self.chunk_cols),
            arith.setp("lt", "u32", rows_inside, row0, stmt.m),
            arith.setp("lt", "u32", inside, col0, stmt.n, bool_op="and", c=rows_inside),
        )
        store_now = self.pred()
        kb.emit(logic.and_("pred", store_now, inside, self.leader))
        starts = {"m": row0, "n": col0, "batch": batch}
        for index, store in enumerate(self.stores):
            source = self.u32()
            kb.emit(arith.add("u32", source, self.buffer_base[index], self.offset[index]))
            coords = [starts[role] for role in reversed(store.roles)]
            kb.emit(tma.store_tile(self.maps[index], coords, source).guarded(store_now))
        kb.emit(tma.commit_group().guarded(self.leader))
        for index, store in enumerate(self.stores):
            offset = self.offset[index]
            kb.emit(logic.xor("b32", offset, offset, store.buffer_bytes))

    def drain(self) -> None:
        """The leader's last wait: every store of the warpgroup complete (step 4)."""
        self.kb.emit(tma.wait_group(0).guarded(self.leader))
