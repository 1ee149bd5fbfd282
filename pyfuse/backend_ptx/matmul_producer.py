"""The producer warpgroup of the Hopper matmul main loop (``matmul_template``).

One elected thread of warp 0 walks the CTA's tiles in the consumers' order and, per K tile,
waits the stage's ``empty`` barrier, expects the stage's bytes on its ``full`` barrier and
issues the TMA loads of every operand box (in a cluster: its slice of a shared tile,
multicast to every CTA sharing it). Out-of-bounds boxes are zero-filled, so ragged M, N and K
need no code here. The other producer threads leave at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from pyfuse.backend_ptx.emitter import KernelBuilder, Param
from pyfuse.backend_ptx.instructions import (
    arith,
    control,
    convert,
    logic,
    mbarrier,
    memory,
    special,
    tma,
)
from pyfuse.backend_ptx.matmul_host import OperandLayout
from pyfuse.backend_ptx.matmul_stream_k import Piece, WorkBody
from pyfuse.backend_ptx.operands import Address, Label, Reg, RegClass
from pyfuse.ir.kernel_ir import MatmulMainLoop


class Ring:
    """Stage index and phase parity of the circular buffer, advanced the same in both roles."""

    def __init__(self, kb: KernelBuilder, stages: int) -> None:
        self.kb, self.stages = kb, stages
        self.stage, self.phase = kb.regs(RegClass.B32, 2)
        kb.emit(arith.mov("u32", self.stage, 0), arith.mov("u32", self.phase, 0))

    def advance(self) -> None:
        wrapped = self.kb.reg(RegClass.PRED)
        self.kb.emit(
            arith.add("u32", self.stage, self.stage, 1),
            arith.setp("eq", "u32", wrapped, self.stage, self.stages),
            arith.mov("u32", self.stage, 0).guarded(wrapped),
            logic.xor("b32", self.phase, self.phase, 1).guarded(wrapped),
        )

    def skip(self, count: Reg | int) -> None:
        """Advance by ``count`` stages at once (the other ping-pong warpgroup's K tiles)."""
        kb = self.kb
        total, wraps = kb.regs(RegClass.B32, 2)
        kb.emit(
            arith.add("u32", total, self.stage, count),
            arith.div("u32", wraps, total, self.stages),
            arith.rem("u32", self.stage, total, self.stages),
            logic.and_("b32", wraps, wraps, 1),
            logic.xor("b32", self.phase, self.phase, wraps),
        )


class MainLoopView(Protocol):
    """What the producer reads of the main loop it is part of."""

    kb: KernelBuilder
    stmt: MatmulMainLoop
    layouts: list[OperandLayout]
    maps: list[Param]
    smem: Reg
    tid: Reg
    rank_m: Reg
    rank_n: Reg
    end: Label
    idle_warps: Label  # where warps 1..3 go: the epilogue warps' code, or the end
    stage_tx: int

    def u32(self) -> Reg: ...
    def pred(self) -> Reg: ...
    def full_barrier(self, stage: Reg) -> Reg: ...
    def empty_barrier(self, stage: Reg) -> Address: ...
    def work_loop(self, body: WorkBody) -> None: ...
    def k_loop(self, body: Callable[[Reg], None], piece: Piece | None = None) -> None: ...


class Producer:
    def __init__(self, loop: MainLoopView) -> None:
        self.loop = loop

    def emit(self) -> None:
        kb = self.loop.kb
        warp, elected, other_warp = self.loop.u32(), self.loop.pred(), self.loop.pred()
        kb.emit(
            logic.shr("u32", warp, self.loop.tid, 5),
            arith.setp("ne", "u32", other_warp, warp, 0),
            control.bra(self.loop.idle_warps, uni=True).guarded(other_warp),
            special.elect_sync(elected),
            control.bra(self.loop.end).guarded(elected, negate=True),
        )
        self.map_addresses = []
        for param in self.loop.maps[: len(self.loop.stmt.operands)]:
            address = kb.reg(RegClass.B64)
            kb.emit(memory.tensor_map_address(address, param), tma.prefetch_tensormap(address))
            self.map_addresses.append(address)
        self.slices = [self.slice_of(layout) for layout in self.loop.layouts]
        self.ring = Ring(kb, self.loop.stmt.stages)
        self.loop.work_loop(self.produce_tile)

    def slice_of(self, layout: OperandLayout) -> tuple[Reg, Reg, Reg] | None:
        """For a multicast operand: (byte offset, coordinate offset along the slice dim,
        16-bit CTA mask) of this CTA's slice; None when the CTA loads the whole tile."""
        if layout.slices == 1:
            return None
        kb, stmt = self.loop.kb, self.loop.stmt
        cm, cn = stmt.cluster_m, stmt.cluster_n
        if layout.role == "n":
            # The B tile is shared by the cluster_m CTAs of rank_n's column (ranks rn*cm + i).
            index = self.loop.rank_m
            pattern, shift_by, shift_scale = (1 << cm) - 1, self.loop.rank_n, cm
        else:
            # The A tile is shared by the cluster_n CTAs of rank_m's row (ranks j*cm + rm).
            index = self.loop.rank_n
            pattern = sum(1 << (j * cm) for j in range(cn))
            shift_by, shift_scale = self.loop.rank_m, 1
        shift, mask32, offset, coord = (
            self.loop.u32(),
            self.loop.u32(),
            self.loop.u32(),
            self.loop.u32(),
        )
        mask = kb.reg(RegClass.B16)
        kb.emit(
            arith.mul("u32", shift, shift_by, shift_scale),
            arith.mov("u32", mask32, pattern),
            logic.shl("b32", mask32, mask32, shift),
            convert.cvt("u16", "u32", mask, mask32),
            arith.mul("u32", offset, index, layout.slice_bytes),
            arith.mul("u32", coord, index, max(layout.slice_coords)),
        )
        return offset, coord, mask

    def produce_tile(self, batch: Reg, m0: Reg, n0: Reg, piece: Piece | None) -> None:
        def produce(kt: Reg) -> None:
            kb, ring, stmt = self.loop.kb, self.ring, self.loop.stmt
            k0, parity, stage_smem = self.loop.u32(), self.loop.u32(), self.loop.u32()
            waited = self.loop.pred()
            full = self.loop.full_barrier(ring.stage)
            kb.emit(logic.xor("b32", parity, ring.phase, 1))  # a fresh barrier passes parity 1
            kb.emit(
                mbarrier.wait_parity(
                    waited, self.loop.empty_barrier(ring.stage), parity, kb.new_label("empty_wait")
                )
            )
            kb.emit(
                mbarrier.arrive_expect_tx(full, self.loop.stage_tx),
                arith.mul("u32", k0, kt, stmt.tile_k),
                arith.mad(
                    "u32", stage_smem, ring.stage, stmt.operands[0].stage_bytes, self.loop.smem
                ),
            )
            starts = {"m": m0, "n": n0, "k": k0}
            for layout, tensor_map, slice_ in zip(
                self.loop.layouts, self.map_addresses, self.slices, strict=True
            ):
                self.load_operand(layout, tensor_map, starts, batch, stage_smem, full, slice_)
            ring.advance()

        self.loop.k_loop(produce, piece)

    def batch_coordinates(self, layout: OperandLayout, batch: Reg) -> dict[int, Reg | int]:
        operand = layout.operand
        dims = [i for i, role in enumerate(operand.roles) if role == "batch"]
        wide = [i for i in dims if operand.shape[i] > 1]
        if not wide:
            return dict.fromkeys(dims, 0)
        if len(wide) > 1 or operand.shape[wide[0]] != self.loop.stmt.batch:
            raise ValueError(
                f"operand {operand.buffer_name}: batch dims {[operand.shape[i] for i in dims]} "
                f"cannot be indexed by one batch index of {self.loop.stmt.batch}; the lowering "
                "must collapse them into one (or broadcast them entirely)"
            )
        return {i: (batch if i in wide else 0) for i in dims}

    def load_operand(
        self,
        layout: OperandLayout,
        tensor_map: Reg,
        starts: dict[str, Reg],
        batch: Reg,
        stage_smem: Reg,
        full: Reg,
        slice_: tuple[Reg, Reg, Reg] | None,
    ) -> None:
        """This CTA's TMA loads of ``layout``'s operand into stage ``stage_smem``: every box,
        or with multicast its slice of them, written to every CTA sharing the tile."""
        kb, operand = self.loop.kb, layout.operand
        batch_coords = self.batch_coordinates(layout, batch)
        base = stage_smem
        mask = None
        slice_coord: Reg | None = None
        if slice_ is not None:
            offset, slice_coord, mask = slice_
            base = self.loop.u32()
            kb.emit(arith.add("u32", base, stage_smem, offset))
        for byte_offset, coord_offsets in layout.loads:
            coords: list[Reg | int] = []
            for dim, role in enumerate(operand.roles):
                if role == "batch":
                    coords.append(batch_coords[dim])
                    continue
                start: Reg = starts[role]
                if slice_coord is not None and layout.slice_coords[dim]:
                    shifted = self.loop.u32()
                    kb.emit(arith.add("u32", shifted, start, slice_coord))
                    start = shifted
                if coord_offsets[dim]:
                    shifted = self.loop.u32()
                    kb.emit(arith.add("u32", shifted, start, coord_offsets[dim]))
                    start = shifted
                coords.append(start)
            destination = Address(base, operand.smem_offset + byte_offset)
            kb.emit(tma.load_tile(destination, tensor_map, coords[::-1], full, multicast_mask=mask))
