"""The warp-specialized Hopper matmul main loop: :class:`MatmulMainLoop` to PTX.

One CTA is ``consumer_warpgroups + 1`` warpgroups (``block = (128, C + 1, 1)``):

- **Shared memory.** ``full[s]`` and ``empty[s]`` mbarriers at bytes ``8 s`` and
  ``8 (stages + s)`` of dynamic shared memory (below the first operand tile, which starts
  on a 1024-byte boundary), then the lowering's ``stages`` ring of operand tiles. Thread
  (0, 0) initializes them (full: 1 arrival plus the stage's bytes; empty: one arrival per
  consumer warp), then ``fence.mbarrier_init`` and ``bar.sync 0``.
- **Producer** (``threadIdx.y == 0``): ``setmaxnreg.dec``; one elected thread of warp 0
  walks this CTA's tiles and their K tiles, waits ``empty[s]``, expects the stage's bytes
  on ``full[s]`` and issues ``copies`` TMA loads per operand. Out-of-bounds boxes are
  zero-filled, so ragged M, N and K need no other code.
- **Consumers** (``threadIdx.y = 1 + w``): ``setmaxnreg.inc``; warpgroup ``w`` owns rows
  ``64 w .. 64 w + 63`` of the tile. Per K tile: wait ``full[s]``, ``wgmma m64nNk16`` over
  the ``tile_k / 16`` k-steps for every MMA (``scale-d = 0`` on the tile's first k-step
  instead of zeroing), commit, ``wait_group 0`` and release the stage at once: the other
  warpgroup's wgmmas keep the tensor cores busy meanwhile, and the producer gets each stage
  back one K tile sooner than with ``wait_group 1`` (faster at every size measured:
  docs/performance.md, "Stages released at once, 256-row tiles as two warpgroups"). After
  the last K tile, the epilogue once per accumulator register (outputs in ``stmt.stores``
  go through shared memory and TMA stores, :mod:`.matmul_staging`).
- **Ping-pong** (``stmt.pingpong``): the two consumer warpgroups each compute whole tiles,
  every 64-row block of one (a wgmma per block per k-step), warpgroup ``w`` the CTA's tiles
  ``w, w + 2, ...``; each skips the other's K tiles in the ring, one warpgroup's warps
  release a stage (a K tile late, after ``wait_group 1``: alone at the tensor cores, a
  warpgroup that waited for its own wgmmas would leave them idle), and their main loops
  take turns through named barriers
  ``PINGPONG_TURN_BARRIER + w`` (see :meth:`_MainLoop.pingpong_tile_loop`).

The tile order (which tiles a CTA computes, persistent or not, with the grid swizzle), the
operands' shared-memory layouts and the descriptor fields that read them (K-major and
MN-major; a 128-, 64- or 32-byte swizzle per operand) are host-side facts in
:mod:`pyfuse.backend_ptx.matmul_host`; this module emits the code that follows them, the
same tile walk in both roles.

The caller (``emit.py``) builds the KernelBuilder with :func:`matmul_directives`, declares
:func:`tensor_map_params_for`'s params, allocates the accumulators with
:func:`allocate_accumulators` (the epilogue reads them), and calls
:func:`emit_matmul_main_loop` with a callback that emits the epilogue statements.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from pyfuse.backend_ptx import matmul_handoff, matmul_residuals, matmul_vectors, smem_desc
from pyfuse.backend_ptx.abi import ParamKind
from pyfuse.backend_ptx.emitter import Directives, KernelBuilder, Param
from pyfuse.backend_ptx.instructions import (
    arith,
    control,
    logic,
    mbarrier,
    memory,
    special,
    wgmma,
)
from pyfuse.backend_ptx.matmul_fragment import (
    EmitEpilogue,
    EmitLateEpilogue,
    consumer_epilogue,
    epilogue_warps,
    fragment,
)
from pyfuse.backend_ptx.matmul_handoff import ConsumerHandoff
from pyfuse.backend_ptx.matmul_host import (
    WGMMA_TYPES,
    TileOrder,
    check_main_loop,
    find_main_loop,
    mapped_buffers,
    operand_layout,
    register_split,
)
from pyfuse.backend_ptx.matmul_producer import Producer, Ring
from pyfuse.backend_ptx.matmul_staging import Staging
from pyfuse.backend_ptx.matmul_stream_k import Fixup, Piece
from pyfuse.backend_ptx.matmul_tile_walk import TileWalk
from pyfuse.backend_ptx.matmul_vectors import VectorLoads
from pyfuse.backend_ptx.operands import Address, Reg, RegClass
from pyfuse.ir.hopper import SM90
from pyfuse.ir.kernel_ir import Buffer, Kernel, MatmulMainLoop

# Named barriers: 0 the CTA's, 1 + w warpgroup w's TMA-store staging (matmul_staging),
# PINGPONG_TURN_BARRIER + w warpgroup w's turn at the main loop in a ping-pong kernel.
PINGPONG_TURN_BARRIER = 3
MBARRIER_BYTES = SM90.mbarrier_bytes  # full[s] and empty[s] are one mbarrier object each


# ---- launch facts the caller needs ----------------------------------------------------------


def matmul_directives(kernel: Kernel) -> Directives:
    """``.maxntid`` + ``.minnctapersm 1``: the register cap at entry setmaxnreg needs; and
    ``.reqnctapercluster`` for a cluster kernel (a plain launch then forms the clusters)."""
    cluster = kernel.cluster if kernel.cluster != (1, 1, 1) else None
    return Directives(maxntid=kernel.block, minnctapersm=1, reqnctapercluster=cluster)


def tensor_map_params_for(kernel: Kernel) -> list[Param]:
    """One by-value CUtensorMap param per TMA operand, in operand order; declare each with
    ``kb.param(p.name, p.kind)`` and pass the maps of ``matmul_host.encode_tensor_maps``."""
    stmt = find_main_loop(kernel)
    return [
        Param(f"tmap{i}_{name}", ParamKind.TENSOR_MAP)
        for i, name in enumerate(mapped_buffers(stmt))
    ]


def allocate_accumulators(kb: KernelBuilder, stmt: MatmulMainLoop) -> dict[Buffer, tuple[Reg, ...]]:
    """f32 registers for every MMA's accumulator; the epilogue reads element ``i`` of
    buffer ``acc`` as ``result[acc][i]``."""
    return {acc: kb.regs(RegClass.F32, stmt.accumulator_registers) for _, _, acc in stmt.mmas}


# ---- emission -------------------------------------------------------------------------------


def emit_matmul_main_loop(
    kb: KernelBuilder,
    stmt: MatmulMainLoop,
    kernel: Kernel,
    tensor_map_params: Sequence[Param],
    emit_epilogue: EmitEpilogue,
    *,
    accumulators: Mapping[Buffer, Sequence[Reg]] | None = None,
    emit_late_epilogue: EmitLateEpilogue | None = None,
    stream_k_workspace: Reg | None = None,
) -> None:
    """Emit the whole warp-specialized main loop into ``kb`` (see the module docstring).

    ``emit_epilogue(bindings, element)`` emits the epilogue for accumulator register
    ``element`` with ``stmt.row``/``stmt.col``/``stmt.batch_index`` bound to registers;
    it reads the accumulators from ``accumulators`` (from :func:`allocate_accumulators`,
    allocated here when not given). With epilogue warps, ``emit_late_epilogue`` emits
    the late epilogue of a pair, its value read from the handoff address given. With stream-K,
    ``stream_k_workspace`` holds the global address of its workspace. Every thread leaves
    through the end of the emitted code.
    """
    if stmt.handoff is not None and emit_late_epilogue is None:
        raise ValueError("a main loop with epilogue warps needs emit_late_epilogue")
    if (stmt.stream_k is None) != (stream_k_workspace is None):
        raise ValueError("a stream-K main loop needs its workspace's address, and only it")
    loop = _MainLoop(kb, stmt, kernel, tensor_map_params, emit_epilogue, accumulators)
    loop.emit_late = emit_late_epilogue
    loop.workspace = stream_k_workspace
    loop.emit()


class _MainLoop(TileWalk):
    def __init__(
        self,
        kb: KernelBuilder,
        stmt: MatmulMainLoop,
        kernel: Kernel,
        tensor_map_params: Sequence[Param],
        emit_epilogue: EmitEpilogue,
        accumulators: Mapping[Buffer, Sequence[Reg]] | None,
    ) -> None:
        self.kb, self.stmt, self.kernel = kb, stmt, kernel
        self.emit_epilogue = emit_epilogue
        self.emit_late: EmitLateEpilogue | None = None
        self.workspace: Reg | None = None
        self.layouts = [operand_layout(stmt, operand) for operand in stmt.operands]
        self.ab_type = WGMMA_TYPES[stmt.operands[0].dtype]  # operand_layout checked the types
        self.wgmma_k = wgmma.WGMMA_K[self.ab_type]
        self.order = TileOrder.of(stmt)
        self.k_tiles = -(-stmt.k // stmt.tile_k)
        self.stage_tx = sum(layout.copies * layout.box_bytes for layout in self.layouts)
        check_main_loop(
            stmt, kernel, kb.directives, kb.params, self.layouts, self.order, tensor_map_params
        )
        self.maps = list(tensor_map_params)
        if accumulators is None:
            accumulators = allocate_accumulators(kb, stmt)
        self.accumulators = {acc: tuple(accumulators[acc]) for _, _, acc in stmt.mmas}
        for acc, registers in self.accumulators.items():
            if len(registers) != stmt.accumulator_registers:
                raise ValueError(
                    f"accumulator {acc.name}: {stmt.accumulator_registers} registers needed "
                    f"(m64n{stmt.tile_n}), got {len(registers)}"
                )
        self.end = kb.new_label("matmul_end")
        # Where the producer warpgroup's warps other than the TMA warp go.
        self.idle_warps = self.end

    # -- small helpers -----------------------------------------------------------------------

    def full_barrier(self, stage: Reg) -> Reg:
        address = self.u32()
        self.kb.emit(arith.mad("u32", address, stage, MBARRIER_BYTES, self.smem))
        return address

    def empty_barrier(self, stage: Reg) -> Address:
        return Address(self.full_barrier(stage), MBARRIER_BYTES * self.stmt.stages)

    def release(self, stage: Reg, guard: Reg) -> None:
        """Arrive (where ``guard``) on ``stage``'s empty barrier: this CTA's, or in a cluster
        every CTA's, since each CTA's producer multicasts into all of them."""
        kb, size = self.kb, self.stmt.cluster_size
        if size == 1:
            kb.emit(mbarrier.arrive(self.empty_barrier(stage)).guarded(guard))
            return
        local = self.full_barrier(stage)
        kb.emit(arith.add("u32", local, local, MBARRIER_BYTES * self.stmt.stages))
        for rank in range(size):
            remote = self.u32()
            # Release at CTA scope, as CUTLASS's ClusterBarrier does: the wgmmas that read the
            # stage have retired (wait_group), and a cluster-scope release would also wait
            # for this thread's epilogue stores to reach L2 (it cost a third of the speed).
            kb.emit(
                memory.mapa(remote, local, rank).guarded(guard),
                mbarrier.arrive(remote, scope="cta", remote=True).guarded(guard),
            )

    # -- the kernel --------------------------------------------------------------------------

    def emit(self) -> None:
        kb, stmt = self.kb, self.stmt
        kb.comment(
            f"matmul main loop: tile {stmt.tile_m}x{stmt.tile_n}x{stmt.tile_k}, "
            f"{stmt.stages} stages, {stmt.consumer_warpgroups} consumer warpgroups, "
            f"swizzle {stmt.grid_swizzle}, {'persistent' if stmt.persistent else 'one tile'}"
        )
        self.smem = self.u32()
        kb.emit(memory.mov_address(self.smem, kb.dynamic_smem()))
        self.tid, self.warpgroup = self.sreg("tid.x"), self.sreg("tid.y")
        if stmt.cluster_size > 1:
            # This CTA's tile inside its cluster tile: (rank % cluster_m, rank / cluster_m).
            rank = self.sreg("cluster_ctarank")
            self.rank_m, self.rank_n = self.u32(), self.u32()
            kb.emit(
                arith.rem("u32", self.rank_m, rank, stmt.cluster_m),
                arith.div("u32", self.rank_n, rank, stmt.cluster_m),
            )
        if not stmt.persistent:
            if stmt.cluster_size > 1:
                self.cta_tile = self.decode_linear(self.sreg("clusterid.x"))
            else:
                self.cta_tile = self.decode(
                    self.sreg("ctaid.z"), self.sreg("ctaid.y"), self.sreg("ctaid.x"), check=True
                )
        self.init_barriers()
        if stmt.handoff is not None:
            self.idle_warps = kb.new_label("epilogue_warps")
        producer_regs, consumer_regs = register_split(stmt, kb.directives)
        consumer = kb.new_label("consumer")
        is_consumer = self.pred()
        kb.emit(
            arith.setp("ne", "u32", is_consumer, self.warpgroup, 0),
            control.bra(consumer, uni=True).guarded(is_consumer),
            special.setmaxnreg("dec", producer_regs),
        )
        Producer(self).emit()
        kb.emit(control.bra(self.end))
        if stmt.handoff is not None:
            kb.place(self.idle_warps)
            assert self.emit_late is not None
            epilogue_warps(self, self.emit_late)
            kb.emit(control.bra(self.end))
        kb.place(consumer)
        kb.emit(special.setmaxnreg("inc", consumer_regs))
        self.consumer()
        kb.place(self.end)
        if stmt.cluster_size > 1:
            # Peers may still arrive on this CTA's barriers: nobody leaves before all are done.
            kb.emit(
                control.barrier_cluster_arrive(aligned=False),
                control.barrier_cluster_wait(aligned=False),
            )

    def init_barriers(self) -> None:
        kb, stmt = self.kb, self.stmt
        leader = self.pred()
        kb.emit(
            arith.setp(
                "eq", "u32", leader, self.tid, 0, bool_op="and", c=self.pred_eq0(self.warpgroup)
            )
        )
        # Every consumer warp of every CTA in the cluster frees a stage (see release()).
        # (In a ping-pong kernel one warpgroup consumes each stage.)
        consumers = 1 if stmt.pingpong else stmt.consumer_warpgroups
        arrivals = SM90.warps_per_warpgroup * consumers * stmt.cluster_size
        for stage in range(stmt.stages):
            kb.emit(
                mbarrier.init(Address(self.smem, MBARRIER_BYTES * stage), 1).guarded(leader),
                mbarrier.init(
                    Address(self.smem, MBARRIER_BYTES * (stmt.stages + stage)), arrivals
                ).guarded(leader),
            )
        matmul_vectors.init_barriers(kb, stmt, self.smem, leader)
        matmul_residuals.init_barriers(kb, stmt, self.smem, leader)
        matmul_handoff.init_barriers(kb, stmt, self.smem, leader)
        kb.emit(mbarrier.fence_init().guarded(leader))
        if stmt.cluster_size > 1:
            # Peers multicast into this CTA and arrive on its barriers: all must be initialized.
            kb.emit(control.barrier_cluster_arrive(), control.barrier_cluster_wait())
        else:
            kb.emit(control.bar_sync(0))

    def pred_eq0(self, value: Reg) -> Reg:
        p = self.pred()
        self.kb.emit(arith.setp("eq", "u32", p, value, 0))
        return p

    def k_loop(self, body: Callable[[Reg], None], piece: Piece | None = None) -> None:
        """``body(kt)`` for kt in range(k_tiles), or the piece's K tiles, as a loop (at least
        one K tile)."""
        kb = self.kb
        kt = self.u32()
        top, more = kb.new_label("k_tile"), self.pred()
        kb.emit(arith.mov("u32", kt, 0 if piece is None else piece.begin))
        kb.place(top)
        body(kt)
        kb.emit(
            arith.add("u32", kt, kt, 1),
            arith.setp("lt", "u32", more, kt, self.k_tiles if piece is None else piece.end),
            control.bra(top, uni=True).guarded(more),
        )

    # -- consumers ---------------------------------------------------------------------------

    def consumer(self) -> None:
        kb, stmt = self.kb, self.stmt
        self.consumer_index, lane, warp = self.u32(), self.u32(), self.u32()
        self.lane0 = self.pred()
        kb.emit(
            arith.sub("u32", self.consumer_index, self.warpgroup, 1),
            logic.and_("b32", lane, self.tid, 31),
            logic.shr("u32", warp, self.tid, 5),
            arith.setp("eq", "u32", self.lane0, lane, 0),
        )
        self.lane, self.warp = lane, warp
        a_operands = {a for a, _, _ in stmt.mmas}
        # Per operand, per 64-row block of A this warpgroup multiplies: the stage-0 descriptor
        # (B: one; cooperative A: the warpgroup's own rows; ping-pong A: every block).
        self.base_descriptors: list[list[Reg]] = []
        for index, layout in enumerate(self.layouts):
            address = self.u32()
            kb.emit(arith.add("u32", address, self.smem, layout.operand.smem_offset))
            if index in a_operands and not stmt.pingpong:  # this warpgroup's row blocks
                share = layout.rows64_bytes * stmt.row_blocks
                kb.emit(arith.mad("u32", address, self.consumer_index, share, address))
            blocks = stmt.row_blocks if index in a_operands else 1
            descriptors = []
            for block in range(blocks):
                block_address = address
                if block:
                    block_address = self.u32()
                    kb.emit(arith.add("u32", block_address, address, block * layout.rows64_bytes))
                descriptors.append(
                    smem_desc.emit_descriptor(
                        kb, block_address, lbo=layout.lbo, sbo=layout.sbo, swizzle=layout.swizzle
                    )
                )
            self.base_descriptors.append(descriptors)
        self.ring = Ring(kb, stmt.stages)
        # Ping-pong: the stage of the K tile whose wgmmas may be pending.
        self.previous_stage = self.u32()
        kb.emit(arith.mov("u32", self.previous_stage, 0))
        self.staging: Staging | None = None
        self.handoff: ConsumerHandoff | None = None
        first_store = len(stmt.operands)
        first_vector = first_store + len(stmt.stores)
        first_residual = first_vector + len(stmt.vectors)
        if stmt.handoff is not None:
            # The epilogue warps store the output; the consumers write the handoff.
            self.handoff = ConsumerHandoff(kb, stmt, self.smem, lane, warp, self.consumer_index)
        elif stmt.stores:
            store_maps = matmul_vectors.tensor_map_addresses(
                kb, self.maps[first_store:first_vector]
            )
            self.staging = Staging(
                kb, stmt, store_maps, self.smem, self.tid, lane, warp, self.consumer_index
            )
            if stmt.residuals:
                residual_maps = matmul_vectors.tensor_map_addresses(kb, self.maps[first_residual:])
                self.staging.residuals = matmul_residuals.ResidualLoads(
                    kb,
                    stmt,
                    residual_maps,
                    self.smem,
                    self.consumer_index,
                    self.staging.leader,
                    self.staging.buffer_base,
                    self.staging.offset,
                )
        self.vectors: VectorLoads | None = None
        if stmt.vectors:
            vector_maps = matmul_vectors.tensor_map_addresses(
                kb, self.maps[first_vector:first_residual]
            )
            self.vectors = VectorLoads(
                kb, stmt, vector_maps, self.smem, self.tid, self.consumer_index
            )
        if stmt.pingpong:
            self.pingpong_tile_loop()
        else:
            self.fixup: Fixup | None = None
            if self.workspace is not None:
                self.fixup = Fixup(kb, stmt, self.workspace, self.tid, self.consumer_index)
            self.work_loop(self.consume_tile)
        if self.staging is not None:
            self.staging.drain()

    def pingpong_tile_loop(self) -> None:
        """Consumer warpgroup ``w`` computes this CTA's tiles ``w, w + 2, ...`` (tile ids
        blockIdx.x + (w + 2 j) gridDim.x) and skips the other's K tiles in the ring."""
        kb, order = self.kb, self.order
        first = self.u32()
        kb.emit(arith.mul("u32", first, self.consumer_index, self.k_tiles))
        self.ring.skip(first)  # warpgroup 1 starts after warpgroup 0's first tile
        # The main loops take turns (named barrier 3 + w: warpgroup w's turn). Besides keeping
        # the tensor cores to one warpgroup, the order makes the parity waits sound: when a
        # warpgroup starts a tile, every stage of the tiles before it has landed, so its
        # full-barrier parity cannot match a phase two uses back.
        mine, other, both = self.u32(), self.u32(), 2 * SM90.warpgroup_threads
        kb.emit(
            arith.add("u32", mine, self.consumer_index, PINGPONG_TURN_BARRIER),
            arith.sub("u32", other, PINGPONG_TURN_BARRIER + 1, self.consumer_index),
        )
        my_turn_given = self.pred_eq0(self.consumer_index)  # warpgroup 0 starts

        def tile(t: Reg, stride: Reg) -> None:
            # (Branches around the barriers, not predicates: the barrier waits per warpgroup.)
            turn_taken = kb.new_label("turn_taken")
            kb.emit(control.bra(turn_taken, uni=True).guarded(my_turn_given))
            kb.emit(control.bar_sync(mine, both))
            kb.place(turn_taken)
            kb.emit(arith.setp("ne", "u32", my_turn_given, t, t))  # false from now on

            def pass_the_turn() -> None:
                # Only when the other warpgroup has a next tile (it waits for this arrival).
                following, last = self.u32(), self.pred()
                passed = kb.new_label("turn_passed")
                kb.emit(
                    arith.add("u32", following, t, stride),
                    arith.setp("ge", "u32", last, following, order.tiles),
                    control.bra(passed, uni=True).guarded(last),
                    control.bar_arrive(other, both),
                )
                kb.place(passed)

            self.consume_tile(*self.decode_linear(t), after_main_loop=pass_the_turn)
            self.ring.skip(self.k_tiles)  # the other warpgroup's next tile

        self.tile_ids(tile, first=self.consumer_index, every=2)

    def consume_tile(
        self,
        batch: Reg,
        m0: Reg,
        n0: Reg,
        piece: Piece | None = None,
        after_main_loop: Callable[[], None] | None = None,
    ) -> None:
        kb, ring, stmt = self.kb, self.ring, self.stmt
        first_k = 0 if piece is None else piece.begin

        def consume(kt: Reg) -> None:
            ready, accumulate = self.pred(), self.pred()
            kb.emit(
                mbarrier.wait_parity(
                    ready, self.full_barrier(ring.stage), ring.phase, kb.new_label("full_wait")
                )
            )
            stage_offset = kb.reg(RegClass.B64)
            kb.emit(
                arith.mul(
                    "u32", stage_offset, ring.stage, stmt.operands[0].stage_bytes >> 4, mode="wide"
                ),
                arith.setp("ne", "u32", accumulate, kt, first_k),
            )
            descriptors = []
            for bases in self.base_descriptors:
                moved = []
                for base in bases:
                    descriptor = kb.reg(RegClass.B64)
                    kb.emit(arith.add("s64", descriptor, base, stage_offset))
                    moved.append(descriptor)
                descriptors.append(moved)
            self.issue_wgmmas(descriptors, accumulate)
            if residuals is not None:
                # The first K tile's wgmmas run while the leader waits for the last tile's
                # stores to read the staging buffers (long done by now) and loads this
                # tile's first residual chunks into them.
                assert first_row is not None
                first = self.pred()
                kb.emit(
                    arith.setp("eq", "u32", first, kt, first_k, bool_op="and", c=residuals.leader)
                )
                residuals.prefetch(batch, first_row, n0, first)
            if not stmt.pingpong:  # this K tile's wgmmas retire, its stage goes back now
                kb.emit(wgmma.wait_group(0))
                self.release(ring.stage, self.lane0)
                ring.advance()
                return
            # The previous K tile's wgmmas have retired: its stage may be refilled.
            release = self.pred()
            kb.emit(
                wgmma.wait_group(1),
                arith.setp("ne", "u32", release, kt, first_k, bool_op="and", c=self.lane0),
            )
            self.release(self.previous_stage, release)
            kb.emit(arith.mov("u32", self.previous_stage, ring.stage))
            ring.advance()

        first_row = None
        if self.vectors is not None:
            first_row = self.first_row(m0)
            self.vectors.issue(first_row, n0)
        residuals = self.staging.residuals if self.staging is not None else None
        if residuals is not None:
            first_row = first_row or self.first_row(m0)
        self.k_loop(consume, piece)
        if after_main_loop is not None:
            after_main_loop()
        if stmt.pingpong:
            kb.emit(wgmma.wait_group(0))
            self.release(self.previous_stage, self.lane0)
        if self.vectors is not None:
            self.vectors.wait()
        coordinates = (batch, first_row or self.first_row(m0), n0)

        def epilogue() -> None:
            bindings = fragment(kb, stmt, self.lane, self.warp, coordinates, self.consumer_index)
            consumer_epilogue(
                kb, stmt, bindings, coordinates, self.staging or self.handoff, self.emit_epilogue
            )

        if piece is None:
            epilogue()
            return
        assert self.fixup is not None
        accumulators = [self.accumulators[acc] for _, _, acc in stmt.mmas]
        self.fixup.emit(piece, accumulators, epilogue)

    def issue_wgmmas(self, descriptors: list[list[Reg]], accumulate: Reg) -> None:
        """Every k-step's wgmmas of one K tile: per MMA, one per 64-row block of A."""
        kb, stmt = self.kb, self.stmt
        per_block = stmt.tile_n // 2
        kb.emit(wgmma.fence())
        for step in range(stmt.tile_k // self.wgmma_k):
            stepped = [
                [
                    descriptor
                    if step == 0
                    else smem_desc.emit_advance(kb, descriptor, layout.k_steps[step])
                    for descriptor in blocks
                ]
                for blocks, layout in zip(descriptors, self.layouts, strict=True)
            ]
            for a, b, acc in stmt.mmas:
                registers = self.accumulators[acc]
                for block, a_descriptor in enumerate(stepped[a]):
                    kb.emit(
                        wgmma.mma_async(
                            stmt.tile_n,
                            registers[block * per_block : (block + 1) * per_block],
                            a_descriptor,
                            stepped[b][0],
                            ab_dtype=self.ab_type,
                            scale_d=accumulate if step == 0 else 1,
                            trans_a=0 if self.layouts[a].k_major else 1,
                            trans_b=0 if self.layouts[b].k_major else 1,
                        )
                    )
        kb.emit(wgmma.commit_group())

    # -- epilogue ----------------------------------------------------------------------------

    def first_row(self, m0: Reg) -> Reg:
        """The first of this warpgroup's rows of the tile at ``m0``: all of them in a ping-pong
        kernel, else its row blocks'."""
        kb = self.kb
        first_row = self.u32()
        if self.stmt.pingpong:
            kb.emit(arith.mov("u32", first_row, m0))
        else:
            rows = SM90.wgmma_m * self.stmt.row_blocks
            kb.emit(arith.mad("u32", first_row, self.consumer_index, rows, m0))
        return first_row
