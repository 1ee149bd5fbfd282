"""The matmul epilogue's TMA stores: outputs staged in shared memory, a chunk at a time.

For a :class:`~pyfuse.ir.kernel_ir.MatmulMainLoop` with ``stores`` (chosen by
:mod:`pyfuse.passes.matmul_epilogue`), each consumer warpgroup writes its 64 rows of a tile
``chunk_cols`` columns at a time into one of its ``B`` staging buffers per output
(``TmaStore.buffers``: 2 by default, or 4 of half-width rows), and one
thread stores the chunk with a TMA store while the warpgroup goes on to the next chunk (or
tile, or its next tile's main loop). Per chunk, with named barrier ``1 + w`` of warpgroup
``w`` (128 threads; barrier 0 stays the CTA's):

1. the buffer about to be written (used ``B`` chunks ago) must be free. For a tile's first
   chunk the warpgroup's leader (``tid.x == 0``) waits ``cp.async.bulk.wait_group.read
   B - 1`` (at most the newer stores still read) and ``bar.sync`` publishes that to the
   warpgroup; for the others step 3 of the chunk before did it;
2. every thread runs the epilogue for the chunk's accumulator registers; ``StageStore``
   writes each pair of columns with one ``st.shared`` at :meth:`Staging.addresses` (or
   hands it over for the chunk's ``stmatrix``, below);
3. unless the chunk is its tile's last, the leader waits ``cp.async.bulk.wait_group.read
   B - 2`` (the store ``B - 1`` chunks back has read its buffer, the one the next chunk
   fills; with two buffers, the previous chunk's store); then
   ``fence.proxy.async.shared::cta`` (the generic-proxy writes become visible to the TMA
   unit) and one ``bar.sync`` publish both; the leader issues one ``cp.async.bulk.tensor``
   store per output (none for a chunk past the ragged edge of N or rows past M: the map
   clips the rest) and commits them as one bulk group; the next buffer is filled. (The last chunk
   does not wait: the warpgroup goes on to its next main loop, and the next tile's first
   chunk waits instead.) One named barrier per chunk, plus one per tile;
4. before the warpgroup leaves the kernel its leader waits ``cp.async.bulk.wait_group 0``.

With residuals (:mod:`.matmul_residuals`) the buffers are filled by TMA loads first, and the
waits of steps 1 and 3 give way to theirs: each chunk begins by waiting for its buffer's
residual, and each store is followed by the refill of its buffer.

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

**stmatrix.** Where every staged output has 2-byte elements, chunks are a multiple of 16
columns and the epilogue is straight code, a thread's pair of columns is one 32-bit word of
an 8x8 matrix's fragment (row ``lane / 4``, columns ``2 (lane % 4)``, ``+ 1``: the
accumulator's layout). Four words are collected (:class:`MatrixWord`) and stored, as soon
as they are all computed, by ``stmatrix.m8n8.x4``, one per two column blocks: matrices
(block ``2j``, rows 0-7), (``2j``, rows 8-15), (``2j + 1``, rows 0-7), (``2j + 1``, rows
8-15) of the warp's 16 rows, lane ``l`` giving the address of row ``l % 8`` of matrix
``l / 8``. That is a quarter of the store instructions, every 16-byte row in its own
swizzled chunk.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyfuse.backend_ptx.emit_memory import StagingTarget
from pyfuse.backend_ptx.emitter import KernelBuilder
from pyfuse.backend_ptx.instructions import arith, control, logic, mbarrier, memory, tma
from pyfuse.backend_ptx.matmul_residuals import ResidualLoads
from pyfuse.backend_ptx.operands import Address, Reg, RegClass
from pyfuse.ir import kernel_ir as kir
from pyfuse.ir.hopper import SM90
from pyfuse.ir.kernel_ir import MatmulMainLoop

ROWS = SM90.wgmma_m
ELEMENTS_PER_BLOCK = 4  # accumulator registers per 8-column block of a thread's rows
MATRIX_BYTES = 16  # one row of an 8x8 matrix of 2-byte elements: stmatrix's unit


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
    if len({store.buffers for store in stmt.stores}) != 1 or stmt.stores[0].buffers not in (2, 4):
        raise ValueError("TMA-stored outputs need 2 or 4 staging buffers each, all alike")
    if stmt.handoff is not None and stmt.stores[0].buffers != 2:
        raise ValueError("epilogue warps stage through two buffers")
    if 1 + stmt.consumer_warpgroups > SM90.named_barriers:
        raise ValueError("one named barrier per consumer warpgroup does not fit")
    for store in stmt.stores:
        if store.swizzle_bytes not in SM90.swizzle_spans:
            raise ValueError(f"{store.buffer_name}: staged rows of {store.swizzle_bytes} B")
        if stmt.handoff is not None:
            continue  # staged over the handoff tile (matmul_handoff.check_handoff)
        end = store.smem_offset + stmt.consumer_warpgroups * store.warpgroup_bytes
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


class MatrixWord:
    """Where an epilogue's ``StageStore`` puts its pair in a stmatrix chunk: the pair packed
    in one 32-bit word, stored with the three others of its ``stmatrix`` as soon as they are
    all there (see the module)."""

    __slots__ = ("index", "staging", "store")

    def __init__(self, staging: Staging, store: int, index: int) -> None:
        self.staging, self.store, self.index = staging, store, index

    def put(self, word: Reg) -> None:
        self.staging.put_word(self.store, self.index, word)


def uses_stmatrix(stmt: MatmulMainLoop) -> bool:
    """Whether the staged stores go through ``stmatrix`` (see the module): 2-byte outputs,
    chunks of 16k columns, and no branch in the epilogue (every thread of a warp reaches
    every ``StageStore``)."""
    return (
        bool(stmt.stores)
        and stmt.handoff is None
        and all(store.dtype.itemsize == 2 for store in stmt.stores)
        and stmt.stores[0].chunk_cols % 16 == 0
        and not any(isinstance(s, kir.If) for s in kir.walk(stmt.epilogue))
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
        self.buffers = stmt.stores[0].buffers
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
        self.offset: list[Reg] = []  # b * buffer_bytes: the buffer b being filled
        for store in self.stores:
            span, size = store.swizzle_bytes, store.dtype.itemsize
            base = self.u32()
            kb.emit(
                arith.add("u32", base, smem, store.smem_offset),
                arith.mad("u32", base, consumer_index, store.warpgroup_bytes, base),
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
        # Residuals loaded into the buffers (matmul_residuals, set by the template): they
        # take over the buffer waits; per hosting store, this chunk's pair addresses.
        self.residuals: ResidualLoads | None = None
        self.hosts = sorted({residual.store for residual in stmt.residuals})
        self.reading: dict[int, list[Reg]] = {}
        self.matrix = uses_stmatrix(stmt)
        # stmatrix: per store, per pair of column blocks, this lane's row address (module).
        self.matrix_address: list[list[Reg]] = []
        self.words: list[list[Reg | None]] = []
        if self.matrix:
            self.matrix_address = self._matrix_addresses(lane, warp)

    def _matrix_addresses(self, lane: Reg, warp: Reg) -> list[list[Reg]]:
        kb = self.kb
        # Lane l gives row l % 8 of matrix l / 8: warp row 8 ((l / 8) % 2) + l % 8, column
        # block 2j + l / 16.
        row, half, block_bytes = self.u32(), self.u32(), self.u32()
        kb.emit(
            logic.and_("b32", row, lane, 7),
            logic.shr("u32", half, lane, 3),
            logic.and_("b32", half, half, 1),
            arith.mad("u32", row, half, 8, row),
            arith.mad("u32", row, warp, 16, row),
            logic.shr("u32", block_bytes, lane, 4),
            logic.shl("b32", block_bytes, block_bytes, MATRIX_BYTES.bit_length() - 1),
        )
        # block_addresses steps 8 * itemsize bytes a block: here a pair of column blocks.
        pair_itemsize = 2 * MATRIX_BYTES // 8
        per_store = []
        for base, store in zip(self.buffer_base, self.stores, strict=True):
            row_bytes, xor = swizzled_row(kb, row, store.swizzle_bytes)
            thread_base = self.u32()
            kb.emit(arith.add("u32", thread_base, base, row_bytes))
            per_store.append(
                block_addresses(kb, block_bytes, xor, thread_base, pair_itemsize, self.blocks // 2)
            )
        return per_store

    def u32(self) -> Reg:
        return self.kb.reg(RegClass.B32)

    def pred(self) -> Reg:
        return self.kb.reg(RegClass.PRED)

    @property
    def elements_per_chunk(self) -> int:
        return self.blocks * ELEMENTS_PER_BLOCK

    def begin_chunk(self, first: bool) -> None:
        """Point the addresses into this chunk's buffers; for the ``first`` chunk of a tile,
        wait for them first (step 1)."""
        kb = self.kb
        if self.residuals is not None:
            self.residuals.wait()
        elif first:
            # The buffer was filled ``buffers`` chunks ago: at most the newer stores still read.
            kb.emit(
                tma.wait_group(self.buffers - 1, read=True).guarded(self.leader),
                control.bar_sync(self.barrier, SM90.warpgroup_threads),
            )
        self.reading = {}
        for store in self.hosts:
            if not self.matrix:
                continue  # the pair addresses are self.current's
            moved = []
            for address in self.block_address[store]:
                register = self.u32()
                kb.emit(arith.add("u32", register, address, self.offset[store]))
                moved.append(register)
            self.reading[store] = moved
        self.current = []
        if self.matrix:
            self.words = [[None] * (2 * self.blocks) for _ in self.stores]
        chunk_addresses = self.matrix_address if self.matrix else self.block_address
        for addresses, offset in zip(chunk_addresses, self.offset, strict=True):
            moved = []
            for address in addresses:
                register = self.u32()
                kb.emit(arith.add("u32", register, address, offset))
                moved.append(register)
            self.current.append(moved)

    def addresses(self, element: int) -> Mapping[int, StagingTarget]:
        """Per store, where the pair of accumulator registers ``element``, ``element + 1``
        goes in the buffer being filled (with stmatrix: its word of the chunk)."""
        block = (element // ELEMENTS_PER_BLOCK) % self.blocks
        second_row = (element >> 1) & 1
        if self.matrix:
            return {
                index: MatrixWord(self, index, 2 * block + second_row)
                for index in range(len(self.stores))
            }
        return {
            index: Address(self.current[index][block], second_row * 8 * store.swizzle_bytes)
            for index, store in enumerate(self.stores)
        }

    def read_addresses(self, element: int) -> Mapping[int, Address]:
        """Per store hosting a residual, where the residual's pair for accumulator registers
        ``element``, ``element + 1`` lies in the buffer being filled (its own pair's place)."""
        block = (element // ELEMENTS_PER_BLOCK) % self.blocks
        second_row = (element >> 1) & 1
        reads = {}
        for store in self.hosts:
            addresses = self.reading[store] if self.matrix else self.current[store]
            offset = second_row * 8 * self.stores[store].swizzle_bytes
            reads[store] = Address(addresses[block], offset)
        return reads

    def end_chunk(
        self, chunk: int, batch: Reg, row0: Reg, n0: Reg, last: bool, tile_chunk: int
    ) -> None:
        """Publish chunk ``chunk`` of the 64 rows from ``row0`` (the tile's chunk
        ``tile_chunk``) to the TMA unit and store it (step 3); unless it is the ``last`` of
        its tile, free the next chunk's buffers in the same barrier (step 1 for the next
        chunk)."""
        kb, stmt = self.kb, self.stmt
        col0 = self.u32()
        inside, rows_inside = self.pred(), self.pred()
        if self.matrix:
            self._check_stored()
        if not last and self.residuals is None:
            # The next chunk's buffer was filled ``buffers - 1`` chunks before this one; this
            # chunk's store is not issued yet, so ``buffers - 2`` newer ones may still read.
            kb.emit(tma.wait_group(self.buffers - 2, read=True).guarded(self.leader))
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
        if self.residuals is not None:
            self.residuals.refill(tile_chunk)
        for index, store in enumerate(self.stores):
            offset = self.offset[index]
            if self.buffers == 2:
                kb.emit(logic.xor("b32", offset, offset, store.buffer_bytes))
            else:  # a power of two of buffers of a power of two of bytes: wrap by a mask
                kb.emit(
                    arith.add("u32", offset, offset, store.buffer_bytes),
                    logic.and_("b32", offset, offset, store.warpgroup_bytes - 1),
                )

    def put_word(self, store: int, index: int, word: Reg) -> None:
        """Word ``index`` of store ``store``'s chunk; the ``stmatrix`` of its four matrices
        once they are all there (a word is live only until its group of four is stored)."""
        words = self.words[store]
        if words[index] is not None:
            raise ValueError(f"{self.stores[store].buffer_name}: a staged pair stored twice")
        words[index] = word
        pair = index // 4
        group = words[4 * pair : 4 * pair + 4]
        if all(w is not None for w in group):
            address = Address(self.current[store][pair])
            self.kb.emit(memory.stmatrix(address, [w for w in group if w is not None]))

    def _check_stored(self) -> None:
        """Every word of the chunk was put (so every ``stmatrix`` was issued)."""
        for store, words in zip(self.stores, self.words, strict=True):
            if any(word is None for word in words):
                raise ValueError(f"{store.buffer_name}: a staged chunk missing some of its pairs")

    def drain(self) -> None:
        """The leader's last wait: every store of the warpgroup complete (step 4)."""
        self.kb.emit(tma.wait_group(0).guarded(self.leader))
