"""The matmul main loop's tile walk: which tiles (and, with stream-K, which pieces of tiles)
a CTA computes, in the same order in its producer and its consumers.

:class:`TileWalk` is a base of the main loop (:mod:`.matmul_template`): it reads the
loop's builder, statement, tile order and, in a cluster, the CTA's rank in its cluster tile,
and emits the decode of a tile number into ``(batch, m0, n0)`` (the grid swizzle's M-tile
groups, ragged last group included), the persistent walk over tile numbers
``blockIdx.x + j gridDim.x`` (cluster ids in a cluster), and stream-K's walk: whole tiles,
then runs of K tiles over the split ones (:mod:`.matmul_stream_k` says how the work is
divided and emits the fixup of the pieces).
"""

from __future__ import annotations

from collections.abc import Callable

from pyfuse.backend_ptx.emitter import KernelBuilder
from pyfuse.backend_ptx.instructions import arith, control, special
from pyfuse.backend_ptx.matmul_host import TileOrder
from pyfuse.backend_ptx.matmul_stream_k import Piece, WorkBody
from pyfuse.backend_ptx.operands import Label, Reg, RegClass
from pyfuse.ir.kernel_ir import MatmulMainLoop


class TileWalk:
    """The tile walk of one main loop; the loop sets these attributes before emitting."""

    kb: KernelBuilder
    stmt: MatmulMainLoop
    order: TileOrder
    k_tiles: int
    # Where the whole CTA goes when a one-tile CTA's position is past a ragged group.
    end: Label
    # A non-persistent CTA's one tile; in a cluster, this CTA's place in the cluster tile.
    cta_tile: tuple[Reg, Reg, Reg]
    rank_m: Reg
    rank_n: Reg

    def u32(self) -> Reg:
        return self.kb.reg(RegClass.B32)

    def pred(self) -> Reg:
        return self.kb.reg(RegClass.PRED)

    def sreg(self, name: str) -> Reg:
        reg = self.u32()
        self.kb.emit(special.read_sreg(reg, name))
        return reg

    def decode(
        self, batch: Reg, group: Reg, within: Reg, *, check: bool = False
    ) -> tuple[Reg, Reg, Reg]:
        """(batch, m0, n0) in elements for position ``within`` of M-tile group ``group``;
        with ``check``, the whole CTA leaves when the position is past a ragged group."""
        kb, order, stmt = self.kb, self.order, self.stmt
        m_tile, n_tile = self.u32(), self.u32()
        swizzle, last = order.swizzle, order.last_rows
        if check and last != swizzle:
            is_last, outside = self.pred(), self.pred()
            kb.emit(
                arith.setp("eq", "u32", is_last, group, order.groups - 1),
                arith.setp(
                    "ge", "u32", outside, within, last * order.n_tiles, bool_op="and", c=is_last
                ),
                control.bra(self.end, uni=True).guarded(outside),
            )
        if swizzle == 1:
            kb.emit(arith.mov("u32", m_tile, group), arith.mov("u32", n_tile, within))
        else:
            kb.emit(
                arith.rem("u32", m_tile, within, swizzle), arith.div("u32", n_tile, within, swizzle)
            )
            if last != swizzle:
                is_last = self.pred()
                ragged_m, ragged_n = self.u32(), self.u32()
                kb.emit(
                    arith.setp("eq", "u32", is_last, group, order.groups - 1),
                    arith.rem("u32", ragged_m, within, last),
                    arith.div("u32", ragged_n, within, last),
                    arith.selp("u32", m_tile, ragged_m, m_tile, is_last),
                    arith.selp("u32", n_tile, ragged_n, n_tile, is_last),
                )
            kb.emit(arith.mad("u32", m_tile, group, swizzle, m_tile))
        m0, n0 = self.u32(), self.u32()
        if stmt.cluster_size > 1:
            # Cluster tile (m_tile, n_tile); this CTA's tile inside it by its rank.
            kb.emit(
                arith.mad("u32", m_tile, m_tile, stmt.cluster_m, self.rank_m),
                arith.mad("u32", n_tile, n_tile, stmt.cluster_n, self.rank_n),
            )
        kb.emit(
            arith.mul("u32", m0, m_tile, stmt.tile_m), arith.mul("u32", n0, n_tile, stmt.tile_n)
        )
        return batch, m0, n0

    def decode_linear(self, t: Reg) -> tuple[Reg, Reg, Reg]:
        """(batch, m0, n0) of tile (or cluster tile) number ``t`` of the order."""
        kb, order = self.kb, self.order
        per_batch, per_group = order.m_tiles * order.n_tiles, order.swizzle * order.n_tiles
        batch, rest, group, within = (self.u32() for _ in range(4))
        kb.emit(
            arith.div("u32", batch, t, per_batch),
            arith.rem("u32", rest, t, per_batch),
            arith.div("u32", group, rest, per_group),
            arith.rem("u32", within, rest, per_group),
        )
        return self.decode(batch, group, within)

    def tile_loop(self, body: Callable[[Reg, Reg, Reg], None]) -> None:
        """Run ``body(batch, m0, n0)`` for each of this CTA's tiles, in the same order in
        every role (persistent: tile ids from blockIdx.x stepping by gridDim.x)."""
        if not self.stmt.persistent:
            body(*self.cta_tile)
            return
        self.tile_ids(lambda t, stride: body(*self.decode_linear(t)))

    def work_loop(self, body: WorkBody) -> None:
        """Run ``body(batch, m0, n0, piece)`` for each of this CTA's tiles (``piece`` None:
        all of K) and, with stream-K, its pieces of split tiles (:mod:`.matmul_stream_k`)."""
        if self.stmt.stream_k is None:
            self.tile_loop(lambda batch, m0, n0: body(batch, m0, n0, None))
        else:
            self.stream_k_walk(body)

    def tile_ids(
        self,
        body: Callable[[Reg, Reg], None],
        first: Reg | None = None,
        every: int = 1,
        limit: Reg | None = None,
    ) -> None:
        """Run ``body(t, stride)`` for the persistent tile ids ``t = blockIdx.x + (first + j
        every) gridDim.x`` below the tile count, or ``limit`` (clusters walk cluster tiles,
        every CTA of one the same: it multicasts to its peers)."""
        kb, order = self.kb, self.order
        clustered = self.stmt.cluster_size > 1
        t = self.sreg("clusterid.x" if clustered else "ctaid.x")
        stride = self.sreg("nclusterid.x" if clustered else "nctaid.x")
        if first is not None:
            kb.emit(arith.mad("u32", t, first, stride, t))
        step = stride
        if every != 1:
            step = self.u32()
            kb.emit(arith.mul("u32", step, stride, every))
        top, done = kb.new_label("tile"), kb.new_label("tiles_done")
        finished = self.pred()
        kb.place(top)
        kb.emit(
            arith.setp("ge", "u32", finished, t, order.tiles if limit is None else limit),
            control.bra(done, uni=True).guarded(finished),
        )
        body(t, stride)
        kb.emit(arith.add("u32", t, t, step), control.bra(top, uni=True))
        kb.place(done)

    def stream_k_walk(self, body: WorkBody) -> None:
        """Run ``body(batch, m0, n0, piece)`` over this worker's whole tiles (``piece`` None),
        then its pieces of split tiles, in the same order in every role."""
        kb, stmt = self.kb, self.stmt
        clustered = stmt.cluster_size > 1
        worker = self.sreg("clusterid.x" if clustered else "ctaid.x")
        workers = self.sreg("nclusterid.x" if clustered else "nctaid.x")
        tiles, waves, rest, split, whole, twice = (self.u32() for _ in range(6))
        no_rest, one_wave, half_wave = self.pred(), self.pred(), self.pred()
        kb.comment("stream-K: whole tiles, then runs of K tiles over the split ones")
        kb.emit(
            arith.mov("u32", tiles, self.order.tiles),
            arith.div("u32", waves, tiles, workers),
            arith.rem("u32", rest, tiles, workers),
            arith.add("u32", split, rest, workers),
            arith.add("u32", twice, rest, rest),
            arith.setp("ge", "u32", half_wave, twice, workers),
            arith.selp("u32", split, rest, split, half_wave),
            arith.setp("eq", "u32", one_wave, waves, 0),  # reused below: under one wave
            arith.selp("u32", split, tiles, split, one_wave),
            arith.setp("eq", "u32", no_rest, rest, 0),
            arith.selp("u32", split, 0, split, no_rest),
            arith.sub("u32", whole, tiles, split),
        )
        self.tile_ids(lambda t, stride: body(*self.decode_linear(t), None), limit=whole)

        k_tiles = self.k_tiles
        iterations, share, extra, start, end, longer = (self.u32() for _ in range(6))
        kb.emit(
            arith.mul("u32", iterations, split, k_tiles),
            arith.div("u32", share, iterations, workers),
            arith.rem("u32", extra, iterations, workers),
            arith.min_("u32", start, worker, extra),
            arith.mad("u32", start, worker, share, start),
            arith.setp("lt", "u32", one_wave, worker, extra),  # reused: this run is one longer
            arith.selp("u32", longer, 1, 0, one_wave),
            arith.add("u32", end, start, share),
            arith.add("u32", end, end, longer),
        )
        # The run's pieces last first: a run that crosses a tile's start begins at that tile's
        # first K tile, and after that piece every such worker is at the same K offset of its
        # next piece (``KT - run + elapsed``), so the operand panels they read at once overlap
        # in L2 as the plain kernel's do; run in order, each would start at its own offset.
        at = self.u32()
        top, done = kb.new_label("stream_k_piece"), kb.new_label("stream_k_done")
        finished = self.pred()
        kb.emit(arith.mov("u32", at, end))
        kb.place(top)
        kb.emit(
            arith.setp("le", "u32", finished, at, start),
            control.bra(done, uni=True).guarded(finished),
        )
        local, tile_start, piece_start, begin, piece_k_end = (self.u32() for _ in range(5))
        t = self.u32()
        kb.emit(
            arith.sub("u32", local, at, 1),
            arith.div("u32", local, local, k_tiles),
            arith.mul("u32", tile_start, local, k_tiles),
            arith.max_("u32", piece_start, start, tile_start),
            arith.sub("u32", begin, piece_start, tile_start),
            arith.sub("u32", piece_k_end, at, tile_start),
            arith.add("u32", t, whole, local),
        )
        body(*self.decode_linear(t), Piece(begin, piece_k_end, tile_start, worker, share, extra))
        kb.emit(arith.mov("u32", at, piece_start), control.bra(top, uni=True))
        kb.place(done)
