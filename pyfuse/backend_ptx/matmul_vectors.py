"""The matmul epilogue's vectors: a bias or row scale loaded per tile by TMA.

For a :class:`~pyfuse.ir.kernel_ir.MatmulMainLoop` with ``vectors`` (chosen by
:mod:`pyfuse.passes.matmul_vectors`), each consumer warpgroup ``w`` keeps one shared buffer
per vector and one mbarrier, ``vectors full[w]``, after the stages' ``full`` and ``empty``
barriers. Per tile:

1. before the main loop, ``bar.sync 1 + w`` (the warpgroup's named barrier; every thread
   has read the previous tile's copy), then the warpgroup's leader (``tid.x == 0``)
   expects every vector's box bytes on ``full[w]`` and issues one TMA load per vector (a
   box of one row): the tile's columns from ``n0`` for a bias along N, the warpgroup's
   rows from its first for a vector along M; TMA zero-fills what lies past the input;
2. the main loop runs while the copies land;
3. before the epilogue every thread waits ``full[w]``'s phase, which flips per tile; the
   epilogue then reads the buffer (``ld.shared``) instead of global memory.

The barrier's one arrival is the leader's ``arrive.expect_tx``, so a phase completes when
the leader has arrived and every byte has landed. Nothing is multicast: each CTA of a
cluster loads its own copy.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyfuse.backend_ptx.emitter import KernelBuilder, Param
from pyfuse.backend_ptx.instructions import arith, control, mbarrier, memory, tma
from pyfuse.backend_ptx.matmul_staging import wait_phase
from pyfuse.backend_ptx.operands import Address, Reg, RegClass
from pyfuse.ir.hopper import SM90
from pyfuse.ir.kernel_ir import MatmulMainLoop

# Named barrier of warpgroup ``w``: 1 + w, shared with the TMA-store staging (same threads).
FIRST_WARPGROUP_BARRIER = 1


def barrier_offset(stmt: MatmulMainLoop, warpgroup: int) -> int:
    """Byte offset of ``vectors full[warpgroup]``: after the stages' full and empty
    barriers."""
    return SM90.mbarrier_bytes * (2 * stmt.stages + warpgroup)


def check_vectors(stmt: MatmulMainLoop, smem_bytes: int, lowest_tile: int) -> None:
    """Refuse vectors the code below cannot load (a lowering bug)."""
    if not stmt.vectors:
        return
    if None in (stmt.warpgroup, stmt.tile_row, stmt.tile_col):
        raise ValueError("epilogue vectors need the warpgroup, tile_row and tile_col variables")
    if barrier_offset(stmt, stmt.consumer_warpgroups) > lowest_tile:
        raise ValueError(f"the vectors' mbarriers do not fit below smem offset {lowest_tile}")
    spans = {"n": stmt.tile_n, "m": SM90.wgmma_m * stmt.row_blocks}
    for vector in stmt.vectors:
        end = vector.smem_offset + stmt.consumer_warpgroups * vector.buffer_bytes
        if vector.role not in spans or vector.span != spans[vector.role]:
            raise ValueError(
                f"{vector.buffer_name}: a vector along {vector.role!r} of span "
                f"{vector.span}, the tile takes {spans.get(vector.role)}"
            )
        if vector.smem_offset % SM90.tma_smem_alignment or end > smem_bytes:
            raise ValueError(
                f"{vector.buffer_name}: vector buffers [{vector.smem_offset}, {end}) misplaced "
                f"in {smem_bytes} B of shared memory"
            )
        if vector.span * vector.dtype.itemsize % SM90.tma_alignment:
            raise ValueError(
                f"{vector.buffer_name}: a box of {vector.span} elements is no "
                f"whole number of {SM90.tma_alignment}-byte rows"
            )


def init_barriers(kb: KernelBuilder, stmt: MatmulMainLoop, smem: Reg, leader: Reg) -> None:
    """One arrival (the leader's expect-tx) per phase of each warpgroup's barrier."""
    for warpgroup in range(stmt.consumer_warpgroups if stmt.vectors else 0):
        kb.emit(mbarrier.init(Address(smem, barrier_offset(stmt, warpgroup)), 1).guarded(leader))


class VectorLoads:
    """The per-thread state of one consumer warpgroup's vector loads."""

    def __init__(
        self,
        kb: KernelBuilder,
        stmt: MatmulMainLoop,
        map_addresses: Sequence[Reg],
        smem: Reg,
        tid: Reg,
        consumer_index: Reg,
    ) -> None:
        self.kb, self.stmt, self.maps = kb, stmt, list(map_addresses)
        self.leader = kb.reg(RegClass.PRED)
        self.named_barrier, self.barrier, self.phase = kb.regs(RegClass.B32, 3)
        kb.emit(
            arith.setp("eq", "u32", self.leader, tid, 0),
            arith.add("u32", self.named_barrier, consumer_index, FIRST_WARPGROUP_BARRIER),
            arith.mad("u32", self.barrier, consumer_index, SM90.mbarrier_bytes, smem),
            arith.add("u32", self.barrier, self.barrier, barrier_offset(stmt, 0)),
            arith.mov("u32", self.phase, 0),
        )
        self.buffers: list[Reg] = []
        for vector in stmt.vectors:
            buffer = kb.reg(RegClass.B32)
            kb.emit(
                arith.mad("u32", buffer, consumer_index, vector.buffer_bytes, smem),
                arith.add("u32", buffer, buffer, vector.smem_offset),
            )
            self.buffers.append(buffer)
        self.bytes = sum(v.span * v.dtype.itemsize for v in stmt.vectors)

    def issue(self, first_row: Reg, n0: Reg) -> None:
        """Step 1: this tile's copies, once every thread is done with the last tile's."""
        kb = self.kb
        kb.emit(
            control.bar_sync(self.named_barrier, SM90.warpgroup_threads),
            mbarrier.arrive_expect_tx(self.barrier, self.bytes).guarded(self.leader),
        )
        for vector, buffer, tensor_map in zip(
            self.stmt.vectors, self.buffers, self.maps, strict=True
        ):
            start = n0 if vector.role == "n" else first_row
            kb.emit(
                tma.load_tile(buffer, tensor_map, [start, 0], self.barrier).guarded(self.leader)
            )

    def wait(self) -> None:
        """Step 3: this tile's copies have landed; the next tile waits the other phase."""
        wait_phase(self.kb, self.barrier, self.phase, "vectors_wait")


def tensor_map_addresses(kb: KernelBuilder, params: Sequence[Param]) -> list[Reg]:
    """The generic address of each of ``params``' tensor maps."""
    addresses = []
    for param in params:
        address = kb.reg(RegClass.B64)
        kb.emit(memory.tensor_map_address(address, param))
        addresses.append(address)
    return addresses
