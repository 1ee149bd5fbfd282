"""Stream-K in the Hopper matmul main loop (``MatmulMainLoop.stream_k``): how the work is
divided (the walk both roles take, emitted by ``matmul_tile_walk.TileWalk.stream_k_walk``),
and the consumers' fixup of tiles split along K.

**The walk.** Workers are the launched CTAs, or clusters (the CTAs of one take the same
work: they multicast to each other): ``W`` of them, worker ``w`` = ``ctaid.x`` (or
``clusterid.x``), read at run time, since a cluster launch may get fewer. Of the order's
``T`` tiles, the last ``S`` are split: none when ``W`` divides ``T``, all when ``T < W``,
else ``T mod W`` when that is at least half of ``W`` (each worker then takes between half a
tile's and a tile's worth of K tiles of them), else ``T mod W + W`` (between one and one and
a half tiles' worth), so that past one wave no run is much shorter than half a tile and
few runs hold a whole tile between their pieces (under one wave, lowering keeps runs of at
least ``lower_matmul.STREAM_K_MIN_RUN`` K tiles by launching fewer workers). The first
``T - S`` tiles go whole, tile ``t`` to worker ``t mod W``, as in the plain persistent
kernel. Then the ``S x KT`` K iterations of the split tiles (``KT`` K tiles each) are cut
into ``W`` runs, worker ``w``'s from ``s_w = w q + min(w, r)`` (``q, r = divmod(S KT, W)``),
the first ``r`` one longer. A
run crosses tiles: each piece is the part of it inside one tile, K tiles ``[begin, end)``.
A worker takes its run's pieces last first. So a worker whose run crosses a tile's start
begins its split work at K tile 0 of that tile, and after that first piece every such worker
is at the same K offset of its next piece (``KT - L`` plus the time since, for runs of ``L``
K tiles): the operand panels read at the same time overlap in L2, as in the plain kernel. (In
run order each worker would start at its own offset, and the L2 reuse is lost: measured in
docs/performance.md, "Stream-K last piece first".)

**The fixup.** A piece without the tile's last K tile (``end < KT``) stores each consumer
warpgroup's accumulators at its slot (the CTA's number in the grid, per warpgroup) and, after
a warpgroup barrier, raises the slot's flag (a release at GPU scope); it runs no epilogue. The
piece with the last K tile, when it starts inside the tile, takes the flags of the workers
before it whose runs end inside the tile, nearest first: its leader thread spins on the flag
(an acquire at GPU scope), the warpgroup meets at its barrier, and every thread adds the
partial sums to its accumulators; then it runs the epilogue. Only a run's last piece can end
inside a tile, so each slot is written once per launch; the launch zeroes the flags. Every
wait is on a worker of a lower number, for its run's last piece, which that worker takes
first and which waits for nothing: the waits form no cycle, and a worker whose CTAs are not
yet resident only delays the ones after it, which do not hold it back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyfuse.backend_ptx.emitter import KernelBuilder
from pyfuse.backend_ptx.instructions import arith, control, memory, special
from pyfuse.backend_ptx.operands import Address, Reg, RegClass
from pyfuse.ir.hopper import SM90
from pyfuse.ir.kernel_ir import MatmulMainLoop

# Named barrier STREAM_K_BARRIER + w: consumer warpgroup w around its flags (the template's
# barriers are 0 for the CTA, 1 + w for the output staging, 3 + w for ping-pong turns).
STREAM_K_BARRIER = 5
# Bytes between a thread's consecutive groups of four partial sums: one 16-byte vector per
# thread of the warpgroup, so that each store and load instruction is coalesced.
GROUP_STRIDE = 16 * SM90.warpgroup_threads


@dataclass(frozen=True)
class Piece:
    """K tiles ``[begin, end)`` of one split tile, and what its fixup needs: where the tile
    starts in the split iterations' numbering, this worker's number, and ``q, r``."""

    begin: Reg
    end: Reg
    tile_start: Reg
    worker: Reg
    share: Reg
    extra: Reg


WorkBody = Callable[[Reg, Reg, Reg, "Piece | None"], None]


class Fixup:
    """The consumers' side of the fixup, for one consumer warpgroup's threads."""

    def __init__(
        self,
        kb: KernelBuilder,
        stmt: MatmulMainLoop,
        workspace: Reg,
        tid: Reg,
        consumer_index: Reg,
    ) -> None:
        assert stmt.stream_k is not None
        self.kb, self.stmt, self.plan = kb, stmt, stmt.stream_k
        self.k_tiles = -(-stmt.k // stmt.tile_k)
        self.workspace, self.consumer_index = workspace, consumer_index
        self.leader = kb.reg(RegClass.PRED)
        self.barrier = kb.reg(RegClass.B32)
        self.thread_offset = kb.reg(RegClass.B64)
        kb.emit(
            arith.setp("eq", "u32", self.leader, tid, 0),
            arith.add("u32", self.barrier, consumer_index, STREAM_K_BARRIER),
            arith.mul("u32", self.thread_offset, tid, 16, mode="wide"),
        )
        self.rank: Reg | None = None
        if stmt.cluster_size > 1:
            self.rank = kb.reg(RegClass.B32)
            kb.emit(special.read_sreg(self.rank, "cluster_ctarank"))

    def emit(
        self, piece: Piece, accumulators: Sequence[Sequence[Reg]], epilogue: Callable[[], None]
    ) -> None:
        """After a piece's main loop: store and flag (a piece without the last K tile), or
        add the earlier pieces' sums (one starting inside the tile), then the epilogue."""
        kb = self.kb
        contributes, whole = kb.reg(RegClass.PRED), kb.reg(RegClass.PRED)
        owner, run_epilogue, done = (
            kb.new_label(hint) for hint in ("sk_owner", "sk_epilogue", "sk_done")
        )
        kb.emit(
            arith.setp("ne", "u32", contributes, piece.end, self.k_tiles),
            control.bra(owner, uni=True).guarded(contributes, negate=True),
        )
        self.store_partial(accumulators)
        kb.emit(control.bra(done, uni=True))
        kb.place(owner)
        kb.emit(
            arith.setp("eq", "u32", whole, piece.begin, 0),
            control.bra(run_epilogue, uni=True).guarded(whole),
        )
        self.add_partials(piece, accumulators)
        kb.place(run_epilogue)
        epilogue()
        kb.place(done)

    # -- addresses -------------------------------------------------------------------------

    def slot_index(self, worker: Reg) -> Reg:
        """The flag number of ``worker``'s CTA of this rank, this warpgroup's."""
        kb, size = self.kb, self.stmt.cluster_size
        index = kb.reg(RegClass.B32)
        if self.rank is not None:
            kb.emit(arith.mad("u32", index, worker, size, self.rank))
        else:
            kb.emit(arith.mov("u32", index, worker))
        kb.emit(arith.mad("u32", index, index, self.plan.warpgroups, self.consumer_index))
        return index

    def flag(self, index: Reg) -> Reg:
        address = self.kb.reg(RegClass.B64)
        self.kb.emit(arith.mad("u32", address, index, 4, self.workspace, mode="wide"))
        return address

    def partials(self, index: Reg) -> Reg:
        """This thread's first partial sum of slot ``index``."""
        kb = self.kb
        address = kb.reg(RegClass.B64)
        kb.emit(
            arith.mul("u32", address, index, self.plan.partial_bytes, mode="wide"),
            arith.add("s64", address, address, self.workspace),
            arith.add("s64", address, address, self.thread_offset),
        )
        return address

    # -- the two sides -----------------------------------------------------------------------

    def store_partial(self, accumulators: Sequence[Sequence[Reg]]) -> None:
        kb = self.kb
        # The slot of this CTA: worker ctaid.x / cluster size, rank in it; as a CTA number
        # that is ctaid.x itself (1-D clusters along x).
        cta = kb.reg(RegClass.B32)
        kb.emit(special.read_sreg(cta, "ctaid.x"))
        index = kb.reg(RegClass.B32)
        kb.emit(arith.mad("u32", index, cta, self.plan.warpgroups, self.consumer_index))
        base = self.partials(index)
        for group, registers in enumerate(_groups(accumulators)):
            offset = self.plan.flag_bytes + group * GROUP_STRIDE
            kb.emit(memory.st("global", "f32", Address(base, offset), registers))
        flag = self.flag(index)
        kb.emit(
            control.bar_sync(self.barrier, SM90.warpgroup_threads),
            memory.red("global", "add", "u32", flag, 1, sem="release", scope="gpu").guarded(
                self.leader
            ),
        )

    def add_partials(self, piece: Piece, accumulators: Sequence[Sequence[Reg]]) -> None:
        kb = self.kb
        other, start = kb.reg(RegClass.B32), kb.reg(RegClass.B32)
        top, folded = kb.new_label("sk_fold"), kb.new_label("sk_folded")
        inside = kb.reg(RegClass.PRED)
        # Worker w - 1's run ends inside the tile (this piece starts past the tile's first K
        # tile, where w's run starts); each worker before it whose run also starts inside the
        # tile adds the one before it.
        kb.emit(arith.sub("u32", other, piece.worker, 1))
        kb.place(top)
        index = self.slot_index(other)
        flag = self.flag(index)
        value, waiting = kb.reg(RegClass.B32), kb.reg(RegClass.PRED)
        spin, landed = kb.new_label("sk_spin"), kb.new_label("sk_landed")
        kb.emit(control.bra(landed).guarded(self.leader, negate=True))
        kb.place(spin)
        kb.emit(
            memory.ld("global", "u32", value, Address(flag, 0), sem="acquire", scope="gpu"),
            arith.setp("eq", "u32", waiting, value, 0),
            control.bra(spin).guarded(waiting),
        )
        kb.place(landed)
        kb.emit(control.bar_sync(self.barrier, SM90.warpgroup_threads))
        base = self.partials(index)
        for group, registers in enumerate(_groups(accumulators)):
            offset = self.plan.flag_bytes + group * GROUP_STRIDE
            values = kb.regs(RegClass.F32, 4)
            kb.emit(memory.ld("global", "f32", list(values), Address(base, offset), cache="cg"))
            for register, value_reg in zip(registers, values, strict=True):
                kb.emit(arith.add("f32", register, register, value_reg))
        kb.emit(
            arith.min_("u32", start, other, piece.extra),
            arith.mad("u32", start, other, piece.share, start),
            arith.setp("gt", "u32", inside, start, piece.tile_start),
            control.bra(folded, uni=True).guarded(inside, negate=True),
            arith.sub("u32", other, other, 1),
            control.bra(top, uni=True),
        )
        kb.place(folded)


def _groups(accumulators: Sequence[Sequence[Reg]]) -> list[Sequence[Reg]]:
    """Every MMA's accumulator registers in fours, in order."""
    groups = []
    for registers in accumulators:
        groups += [registers[i : i + 4] for i in range(0, len(registers), 4)]
    return groups
