"""The matmul epilogue's residuals: loaded by TMA into the staging buffers they are read from.

For a :class:`~pyfuse.ir.kernel_ir.MatmulMainLoop` with ``residuals`` (chosen by
:mod:`pyfuse.passes.matmul_residuals`), a residual's chunk (64 rows by ``chunk_cols``, the
box of its store) lands in the staging buffer its store's output for that chunk will be
written to (:mod:`.matmul_staging`: two buffers per consumer warpgroup, used by chunks in
turn). Each consumer warpgroup ``w`` has one mbarrier per buffer, ``residual full[w][b]``,
after the vectors' barriers; its one arrival is the leader's ``arrive.expect_tx`` of every
residual's box bytes. With ``T`` chunks a tile (row blocks times chunks a row):

1. once the tile's first K tile's wgmmas are issued, the leader waits
   ``cp.async.bulk.wait_group.read 0`` (every store has read its buffer: the last tile's
   were issued a main-loop start ago, and the wgmmas run meanwhile) and loads chunks 0 and
   1 (both buffers); they land while the rest of the main loop runs;
2. per chunk ``g``, every thread waits its buffer's barrier (a parity bit per buffer, kept
   in one register: the buffer of a chunk depends on the tile count when ``T`` is odd),
   reads its pairs at the addresses its stores use (``StagedLoad``), and writes its outputs
   over them: a thread's write of a pair depends on its read of the same pair;
3. after chunk ``g``'s store is issued, the leader waits ``wait_group.read 0`` (that store
   has read the buffer) and loads chunk ``g + 2`` into it, while the warpgroup computes
   chunk ``g + 1``.

This takes the place of the staging's own buffer waits (the first chunk's, and the one
before each store): a buffer is refilled only after its store has read it, and nobody
writes it before its barrier says the residual has landed, which happens after that.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyfuse.backend_ptx.emitter import KernelBuilder
from pyfuse.backend_ptx.instructions import arith, logic, mbarrier, tma
from pyfuse.backend_ptx.operands import Address, Reg, RegClass
from pyfuse.ir.hopper import SM90
from pyfuse.ir.kernel_ir import MatmulMainLoop

BUFFERS = 2  # staging buffers per consumer warpgroup, one barrier each


def barrier_offset(stmt: MatmulMainLoop, warpgroup: int, buffer: int) -> int:
    """Byte offset of ``residual full[warpgroup][buffer]``: after the stages' full and empty
    barriers and the vectors' (one per consumer warpgroup, reserved whether used or not)."""
    index = 2 * stmt.stages + stmt.consumer_warpgroups + BUFFERS * warpgroup + buffer
    return SM90.mbarrier_bytes * index


def check_residuals(stmt: MatmulMainLoop, lowest_tile: int) -> None:
    """Refuse residuals the code below cannot load (a lowering bug)."""
    if not stmt.residuals:
        return
    if not stmt.stores or stmt.handoff is not None or stmt.stream_k is not None:
        raise ValueError("residuals are loaded into TMA-store staging, without handoff or stream-K")
    if any(store.buffers != BUFFERS for store in stmt.stores):
        raise ValueError(f"residuals need {BUFFERS} staging buffers a warpgroup")
    if barrier_offset(stmt, stmt.consumer_warpgroups, 0) > lowest_tile:
        raise ValueError(f"the residuals' mbarriers do not fit below smem offset {lowest_tile}")
    hosts = [residual.store for residual in stmt.residuals]
    if len(set(hosts)) != len(hosts):
        raise ValueError("two residuals in one store's staging buffers")
    for residual in stmt.residuals:
        if not 0 <= residual.store < len(stmt.stores):
            raise ValueError(f"{residual.buffer_name}: no store {residual.store}")
        store = stmt.stores[residual.store]
        same = (
            residual.dtype.itemsize == store.dtype.itemsize
            and residual.box == store.box
            and residual.roles == store.roles
            and residual.shape == store.shape
            and residual.swizzle_bytes == store.swizzle_bytes
        )
        if not same:
            raise ValueError(
                f"{residual.buffer_name}: a residual's chunk must be its store's box "
                f"({store.buffer_name})"
            )


def init_barriers(kb: KernelBuilder, stmt: MatmulMainLoop, smem: Reg, leader: Reg) -> None:
    """One arrival (the leader's expect-tx) per phase of each buffer's barrier."""
    for warpgroup in range(stmt.consumer_warpgroups if stmt.residuals else 0):
        for buffer in range(BUFFERS):
            offset = barrier_offset(stmt, warpgroup, buffer)
            kb.emit(mbarrier.init(Address(smem, offset), 1).guarded(leader))


class ResidualLoads:
    """The per-thread state of one consumer warpgroup's residual loads (see the module).

    ``buffer_base[s]`` and ``offset[s]`` are the staging's registers for store ``s``: its
    warpgroup's buffer 0 and the byte offset of the buffer the current chunk fills."""

    def __init__(
        self,
        kb: KernelBuilder,
        stmt: MatmulMainLoop,
        map_addresses: Sequence[Reg],
        smem: Reg,
        consumer_index: Reg,
        leader: Reg,
        buffer_base: Sequence[Reg],
        offset: Sequence[Reg],
    ) -> None:
        self.kb, self.stmt, self.maps = kb, stmt, list(map_addresses)
        self.leader, self.buffer_base, self.offset = leader, buffer_base, offset
        self.chunk_cols = stmt.stores[0].chunk_cols
        self.chunks_a_row = stmt.tile_n // self.chunk_cols
        self.tile_chunks = stmt.row_blocks * self.chunks_a_row
        self.bytes = sum(residual.box_bytes for residual in stmt.residuals)
        host = stmt.stores[stmt.residuals[0].store]
        self.host = stmt.residuals[0].store
        self.buffer_shift = host.buffer_bytes.bit_length() - 1  # a power of two
        self.barrier0, self.phases = kb.regs(RegClass.B32, 2)
        kb.emit(
            arith.mad("u32", self.barrier0, consumer_index, BUFFERS * SM90.mbarrier_bytes, smem),
            arith.add("u32", self.barrier0, self.barrier0, barrier_offset(stmt, 0, 0)),
            arith.mov("u32", self.phases, 0),
        )
        self.batch: Reg | None = None
        self.first_row: Reg | None = None
        self.n0: Reg | None = None

    def _buffer_index(self, ahead: int) -> Reg:
        """0 or 1: the buffer of the current chunk (``ahead`` 0) or the next (1)."""
        kb = self.kb
        index = kb.reg(RegClass.B32)
        kb.emit(logic.shr("u32", index, self.offset[self.host], self.buffer_shift))
        if ahead:
            kb.emit(logic.xor("b32", index, index, 1))
        return index

    def _barrier(self, index: Reg) -> Reg:
        barrier = self.kb.reg(RegClass.B32)
        self.kb.emit(arith.mad("u32", barrier, index, SM90.mbarrier_bytes, self.barrier0))
        return barrier

    def _load(self, chunk: int, ahead: int, issuer: Reg) -> None:
        """The copies of the tile's chunk ``chunk`` into the current buffer (``ahead`` 0) or
        the next (1), by the thread for which ``issuer`` holds (the leader)."""
        kb, stmt = self.kb, self.stmt
        assert self.batch is not None and self.first_row is not None and self.n0 is not None
        barrier = self._barrier(self._buffer_index(ahead))
        block, column = divmod(chunk, self.chunks_a_row)
        row0, col0 = kb.regs(RegClass.B32, 2)
        kb.emit(
            arith.add("u32", row0, self.first_row, block * SM90.wgmma_m),
            arith.add("u32", col0, self.n0, column * self.chunk_cols),
            mbarrier.arrive_expect_tx(barrier, self.bytes).guarded(issuer),
        )
        starts = {"m": row0, "n": col0, "batch": self.batch}
        for residual, tensor_map in zip(stmt.residuals, self.maps, strict=True):
            store = stmt.stores[residual.store]
            target = kb.reg(RegClass.B32)
            offset = self.offset[residual.store]
            if ahead:  # the other buffer: the offset's buffer bit flipped
                kb.emit(logic.xor("b32", target, offset, store.buffer_bytes))
                offset = target
            kb.emit(arith.add("u32", target, self.buffer_base[residual.store], offset))
            coords = [starts[role] for role in reversed(residual.roles)]
            kb.emit(tma.load_tile(target, tensor_map, coords, barrier).guarded(issuer))

    def prefetch(self, batch: Reg, first_row: Reg, n0: Reg, issuer: Reg) -> None:
        """Step 1: in the tile's main loop, its first two chunks, by the thread for which
        ``issuer`` holds (the leader, in the first K tile)."""
        self.batch, self.first_row, self.n0 = batch, first_row, n0
        self.kb.emit(tma.wait_group(0, read=True).guarded(issuer))
        for chunk in range(min(BUFFERS, self.tile_chunks)):
            self._load(chunk, ahead=chunk, issuer=issuer)

    def wait(self) -> None:
        """Step 2: the current chunk's residuals have landed in its buffer."""
        kb = self.kb
        index = self._buffer_index(0)
        parity, flip, ready = kb.reg(RegClass.B32), kb.reg(RegClass.B32), kb.reg(RegClass.PRED)
        kb.emit(
            logic.shr("u32", parity, self.phases, index),
            logic.and_("b32", parity, parity, 1),
            mbarrier.wait_parity(
                ready, self._barrier(index), parity, kb.new_label("residual_wait")
            ),
            arith.mov("b32", flip, 1),
            logic.shl("b32", flip, flip, index),
            logic.xor("b32", self.phases, self.phases, flip),
        )

    def refill(self, chunk: int) -> None:
        """Step 3: after chunk ``chunk``'s store is issued (before the buffers turn), chunk
        ``chunk + 2`` of the tile into its buffer, if there is one."""
        if chunk + BUFFERS >= self.tile_chunks:
            return
        self.kb.emit(tma.wait_group(0, read=True).guarded(self.leader))
        self._load(chunk + BUFFERS, ahead=0, issuer=self.leader)
