"""Lowering of a scheduled Hopper matmul kernel to kernel IR.

Expects a :class:`KernelPlan` from the matmul scheduler, after ``remove_broadcasts``: MMA
operands are shared-memory caches loaded by TMA from aliases of fusion inputs, the MMA
outputs are fp32 register accumulators, everything downstream is a pointwise epilogue.

Guarantees: the kernel body is one :class:`MatmulMainLoop`:

- one :class:`TmaOperand` per distinct operand, described from the *input's* memory (the
  alias chain is followed, so broadcast and permute ops cost nothing): dims in memory order
  with their M/N/K/batch roles (adjacent dims of one role whose strides allow it are
  collapsed into one; roles per use, so one input may be both operands), element strides,
  the box (``tile_m``/``tile_n`` x ``tile_k``, the contiguous dim one swizzle row), the
  swizzle (128, 64 or 32 bytes, ``operand_swizzle_bytes``), and its place in the circular
  shared-memory buffer;
- one accumulator register buffer per MMA;
- an epilogue run per accumulator element with ``row``/``col``/``batch_index`` bound: every
  epilogue expr lowered with the pointwise machinery of :mod:`pyfuse.passes.lower` (indices
  derived from the accumulator's logical axes), guarded by ``row < M and col < N``, or,
  where every output is staged for a TMA store (which clips the edges), unguarded with its
  reads clamped to ``min(row, M - 1)``, ``min(col, N - 1)``;
- the launch: ``block = (128, consumer warpgroups + 1)`` (warpgroup 0 produces), the grid
  for a persistent schedule 1-D, the fewest CTAs (or clusters) that take every tile in as
  many waves as one per SM would (``matmul_tiles.persistent_ctas``), else ``(N tiles *
  swizzle, M tiles / swizzle, batch)``; the dynamic shared memory holds the barriers, every
  stage, the output staging and the epilogue vectors; residuals the size of the output
  (:mod:`matmul_residuals`) are loaded into the staging buffers, taking no more. With a
  ``cluster_m x cluster_n`` cluster the grid is 1-D, ``cluster`` CTAs per cluster tile
  (persistent: as above) and ``Kernel.cluster = (cluster_m * cluster_n, 1, 1)``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pyfuse.errors import ScheduleError
from pyfuse.ir import dtypes
from pyfuse.ir import kernel_ir as k
from pyfuse.ir.exprs import LoadStoreKind, LoadStoreOp
from pyfuse.ir.hopper import SM90
from pyfuse.ir.params import MatmulParams
from pyfuse.ir.target import TargetInfo
from pyfuse.ir.tensor import MemoryType, TensorView
from pyfuse.passes.lower_matmul_epilogue import MatmulEpilogueLowering
from pyfuse.passes.matmul_epilogue import (
    STAGING_ROWS,
    chunk_cols,
    staged_outputs,
    staging_shape,
)
from pyfuse.passes.matmul_handoff import handoff_tensors
from pyfuse.passes.matmul_operands import (
    BARRIER_REGION_BYTES,
    operand_memory,
    operand_memory_roles,
    operand_swizzle_bytes,
)
from pyfuse.passes.matmul_residuals import EpilogueResiduals
from pyfuse.passes.matmul_tiles import (
    cluster_tiles,
    consumer_warpgroups,
    persistent_ctas,
    row_blocks,
)
from pyfuse.passes.matmul_vectors import EpilogueVectors
from pyfuse.passes.plan import KernelPlan

# Every swizzled tile starts on its pattern boundary: that of the widest swizzle (1024 bytes)
# is a multiple of every narrower one's.
SMEM_ALIGN = SM90.max_swizzle_pattern_bytes


# The fewest K tiles a stream-K worker takes (fewer workers are launched for a small problem).
STREAM_K_MIN_RUN = 2
# The partial sums start past the flags on this boundary (16-byte vector stores, L2 sectors).
STREAM_K_ALIGN = 256


def _align(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


class _MatmulLowering(MatmulEpilogueLowering):
    def __init__(self, plan: KernelPlan, name: str, target: TargetInfo) -> None:
        super().__init__(plan, name)
        self.target = target
        self.aligned_inputs = target.vector_bytes >= 16
        fields = MatmulParams.__dataclass_fields__
        values: dict[str, Any] = {key: plan.params[key] for key in fields}
        self.matmul = MatmulParams(**values)

    # -- operands ------------------------------------------------------------------------------
    def _operand(self, cache: TensorView, offset: int) -> k.TmaOperand:
        definition = cache.definition
        assert isinstance(definition, LoadStoreOp) and definition.kind == LoadStoreKind.TMA_LOAD
        source = definition.tensor_inputs[0]
        root = source.alias_of if source.alias_of is not None else source
        if not self.fusion.is_input(root):
            raise ScheduleError(f"kernel {self.name}: operand T{cache.name} does not view an input")
        buffer = self._buffer(root)
        # The input's memory as the MMA reads it (through a split-K reshape, if any), with
        # the roles of this use: one input may be read as both operands.
        memory = operand_memory(self.fusion, source) or root
        mma = next(m for m in self.mmas if cache is m.a or cache is m.b)
        collapsed = operand_memory_roles(mma, source, memory)
        if collapsed is None:
            raise ScheduleError(f"kernel {self.name}: operand T{cache.name}'s memory has no roles")
        tile = {"m": self.matmul.tile_m, "n": self.matmul.tile_n, "k": self.matmul.tile_k}
        # The contiguous box dim is one swizzle row, the widest that tiles the contiguous
        # tile; a wider tile takes several copies side by side.
        contiguous_tile = tile[collapsed[-1][2]] or 1
        swizzle_bytes = operand_swizzle_bytes(contiguous_tile, cache.dtype.itemsize)
        if swizzle_bytes is None:
            raise ScheduleError(
                f"kernel {self.name}: operand T{cache.name}'s contiguous tile of "
                f"{contiguous_tile} elements is no whole number of swizzle rows"
            )
        # Boxes are whole tiles even past a small extent: TMA zero-fills what lies outside,
        # which is what ragged (and tiny) M, N and K need.
        box = [tile.get(role, 1) or 1 for _, _, role in collapsed]
        box[-1] = swizzle_bytes // cache.dtype.itemsize
        stage_bytes = cache.dtype.itemsize
        for _, _, role in collapsed:
            stage_bytes *= tile.get(role, 1) or 1
        return k.TmaOperand(
            buffer_name=buffer.name,
            dtype=cache.dtype,
            shape=tuple(extent for extent, _, _ in collapsed),
            strides=tuple(stride for _, stride, _ in collapsed),
            box=tuple(box),
            roles=tuple(role for _, _, role in collapsed),
            swizzle_bytes=swizzle_bytes,
            smem_offset=offset,
            stage_bytes=_align(stage_bytes, SMEM_ALIGN),
            stage_tile_bytes=stage_bytes,
        )

    # -- the kernel ----------------------------------------------------------------------------
    def lower(self) -> k.Kernel:
        params = self.matmul
        assert params.tile_m and params.tile_n and params.tile_k and params.stages
        caches: list[TensorView] = []
        for tv in self.fusion.tensors():
            definition = tv.definition
            if isinstance(definition, LoadStoreOp) and definition.kind == LoadStoreKind.TMA_LOAD:
                caches.append(tv)
        offset = _align(BARRIER_REGION_BYTES, SMEM_ALIGN)
        operands: list[k.TmaOperand] = []
        operand_index: dict[int, int] = {}
        for cache in caches:
            operand = self._operand(cache, offset)
            operand_index[id(cache)] = len(operands)
            operands.append(operand)
            offset += operand.stage_bytes
        stage_total = offset - _align(BARRIER_REGION_BYTES, SMEM_ALIGN)
        operands = [dataclasses.replace(o, stage_bytes=stage_total) for o in operands]
        smem_bytes = _align(BARRIER_REGION_BYTES, SMEM_ALIGN) + stage_total * params.stages
        stores = self._stores(smem_bytes) if params.smem_epilogue else []
        self.staged = {store.buffer_name: index for index, store in enumerate(stores)}
        staging = sum(
            consumer_warpgroups(params.tile_m, params.pingpong) * store.warpgroup_bytes
            for store in stores
        )
        handoff_tv, handoff = self._handoff(stores)
        if handoff is not None:
            staging = handoff.nbytes  # the output is staged over the handoff, box by box
        if smem_bytes + staging > self.target.max_smem_per_block:
            raise ScheduleError(
                f"kernel {self.name}: {params.stages} stages of {stage_total} bytes"
                + (f" and {staging} bytes of output staging" if staging else "")
                + f" need {smem_bytes + staging} bytes of shared memory, more than "
                f"{self.target.max_smem_per_block}"
            )
        smem_bytes += staging
        for tv in self.fusion.inputs + self.fusion.outputs:
            self._buffer(tv)

        warpgroups = consumer_warpgroups(params.tile_m, params.pingpong)
        blocks = row_blocks(params.tile_m, params.pingpong)
        operand_buffers = {operand.buffer_name for operand in operands}
        self.vectors = EpilogueVectors(
            row=self.row,
            cols={self.col: 0, self.pair_col: 1},
            sizes=self.sizes,
            spans={"m": SM90.wgmma_m * blocks, "n": params.tile_n},
            warpgroups=warpgroups,
            smem_start=smem_bytes,
            smem_limit=self.target.max_smem_per_block,
            index_dtype=self.index_dtype,
            inputs=frozenset(
                param.buffer_name
                for param in self.params
                if param.role == k.ParamRole.INPUT and param.buffer_name not in operand_buffers
            ),
        )
        mmas: list[tuple[int, int, k.Buffer]] = []
        for mma in self.mmas:
            out = mma.output
            # Each consumer warpgroup holds its row blocks of the tile: N/2 fp32 registers a
            # thread per 64-row block (MatmulMainLoop.accumulator_registers).
            registers = params.tile_n // 2 * blocks
            accumulator = k.Buffer(f"T{out.name}", dtypes.float32, MemoryType.LOCAL, registers)
            self.accumulators[id(out)] = accumulator
            self.buffers[id(out)] = accumulator
            mmas.append((operand_index[id(mma.a)], operand_index[id(mma.b)], accumulator))

        sizes = self.sizes
        # Every output staged for a TMA store, whose tensor map clips the ragged edges: the
        # epilogue then runs on every element unguarded, its reads clamped into the problem
        # (no branch per column pair; loads of one column share an address across rows).
        self.unguarded = bool(stores) and all(
            self._buffer(out).name in self.staged for out in self.fusion.outputs
        )
        staged_tvs = {self._buffer(out).name: out for out in self.fusion.outputs}
        if (
            self.unguarded
            and handoff is None
            and not params.stream_k
            # Off by default in ping-pong kernels: there the global loads ran faster (600
            # against 540 TFLOP/s at 8192^3 on the H100, 619 against 558 at 4096x4096x14336:
            # docs/performance.md, "Residuals by TMA").
            and (params.tma_residuals or (params.tma_residuals is None and not params.pingpong))
            and all(store.buffers == 2 for store in stores)
        ):
            self.residuals = EpilogueResiduals(
                self.fusion,
                self.mmas[0],
                self.id_model,
                sizes["batch"],
                stores,
                [staged_tvs[store.buffer_name] for store in stores],
            )
        late_epilogue: list[k.Stmt] = []
        handoff_values: list[k.Buffer] = []
        if handoff_tv is not None:
            epilogue, late_epilogue, handoff_values = self._handoff_epilogues(sizes, handoff_tv)
        else:
            epilogue = self._epilogue(sizes)
        vectors = self.vectors
        smem_bytes = max(smem_bytes, vectors.smem_end)
        loop = k.MatmulMainLoop(
            operands=operands,
            mmas=mmas,
            m=sizes["m"],
            n=sizes["n"],
            k=sizes["k"],
            batch=sizes["batch"],
            tile_m=params.tile_m,
            tile_n=params.tile_n,
            tile_k=params.tile_k,
            stages=params.stages,
            consumer_warpgroups=warpgroups,
            grid_swizzle=params.grid_swizzle or 1,
            persistent=bool(params.persistent),
            row=self.row,
            col=self.col,
            batch_index=self.batch_index,
            element=self.element,
            epilogue=epilogue,
            pair_col=self.pair_col if self.paired else None,
            pair_element=self.pair_element if self.paired else None,
            cluster_m=params.cluster_m or 1,
            cluster_n=params.cluster_n or 1,
            stores=stores,
            pingpong=bool(params.pingpong),
            vectors=vectors.vectors,
            warpgroup=vectors.warpgroup if vectors.vectors else None,
            tile_row=vectors.tile_row if vectors.vectors else None,
            tile_col=vectors.tile_col if vectors.vectors else None,
            handoff=handoff,
            late_epilogue=late_epilogue,
            handoff_values=handoff_values,
            residuals=self.residuals.residuals if self.residuals is not None else [],
        )
        m_tiles = -(-sizes["m"] // params.tile_m)
        n_tiles = -(-sizes["n"] // params.tile_n)
        cluster = loop.cluster_size
        if params.stream_k:
            ctas = self._stream_k(loop, m_tiles, n_tiles)
            grid = (ctas, 1, 1)
        elif params.persistent:
            # As many CTAs as take every tile in the fewest waves (1-D clusters of CTAs).
            ctas = persistent_ctas(
                m_tiles,
                n_tiles,
                sizes["batch"],
                loop.cluster_m,
                loop.cluster_n,
                self.target.sm_count,
            )
            grid = (ctas, 1, 1)
        elif cluster > 1:
            # One 1-D cluster of CTAs per cluster tile.
            work = cluster_tiles(m_tiles, n_tiles, sizes["batch"], loop.cluster_m, loop.cluster_n)
            grid = (work * cluster, 1, 1)
        else:
            swizzle = params.grid_swizzle or 1
            grid = (n_tiles * swizzle, -(-m_tiles // swizzle), sizes["batch"])
        params_sorted = sorted(self.params, key=lambda p: (p.role != k.ParamRole.INPUT, p.index))
        if loop.stream_k is not None:
            params_sorted.append(
                k.TensorParam(
                    buffer_name=loop.stream_k.buffer_name,
                    dtype=dtypes.int32,
                    role=k.ParamRole.INTERMEDIATE,
                    index=0,
                    shape=(loop.stream_k.nbytes // 4,),
                )
            )
        return k.Kernel(
            name=self.name,
            params=params_sorted,
            buffers={b.name: b for b in self.buffers.values()},
            body=[loop],
            grid=grid,
            block=(SM90.warpgroup_threads, warpgroups + 1, 1),
            smem_bytes=smem_bytes,
            index_dtype=self.index_dtype,
            cluster=(cluster, 1, 1),
        )

    def _stream_k(self, loop: k.MatmulMainLoop, m_tiles: int, n_tiles: int) -> int:
        """Set ``loop.stream_k`` and return the CTAs to launch: a worker (CTA or cluster) per
        SM's worth of CTAs, no more than give each at least ``STREAM_K_MIN_RUN`` K tiles."""
        params = self.matmul
        if not params.persistent or params.pingpong or loop.handoff is not None:
            # The heuristic refuses stream-K wherever this could happen.
            raise ScheduleError(
                f"kernel {self.name}: stream-K needs a persistent cooperative kernel without "
                "epilogue warps"
            )
        cluster = loop.cluster_size
        work = cluster_tiles(m_tiles, n_tiles, loop.batch, loop.cluster_m, loop.cluster_n)
        k_tiles = -(-loop.k // loop.tile_k)
        workers = max(1, min(self.target.sm_count // cluster, work * k_tiles // STREAM_K_MIN_RUN))
        ctas = workers * cluster
        registers = loop.accumulator_registers * len(loop.mmas)
        flags = ctas * loop.consumer_warpgroups
        loop.stream_k = k.StreamK(
            buffer_name=f"{self.name}_stream_k",
            slots=ctas,
            warpgroups=loop.consumer_warpgroups,
            flag_bytes=_align(flags * 4, STREAM_K_ALIGN),
            partial_bytes=registers * SM90.warpgroup_threads * 4,
        )
        return ctas

    def _handoff(
        self, stores: list[k.TmaStore]
    ) -> tuple[list[TensorView] | None, k.EpilogueHandoff | None]:
        """The handoff tensors and tiles for the epilogue warps (``epilogue_warps``, which
        the heuristic keeps only where :func:`matmul_handoff.handoff_tensors` finds them),
        from the one staged output's buffer on."""
        params = self.matmul
        if not params.epilogue_warps:
            return None, None
        assert params.tile_m and params.tile_n
        handoff_tv = handoff_tensors(self.fusion, self.mmas, self.sizes["batch"], self.id_model)
        if handoff_tv is None or len(stores) != 1 or not self.paired or params.pingpong:
            # The heuristic refuses epilogue warps wherever this could happen.
            raise ScheduleError(
                f"kernel {self.name}: epilogue warps need a handoff tensor, one TMA-stored "
                f"output and paired columns (found {len(stores)} stores, paired {self.paired})"
            )
        (store,) = stores
        handoff = k.EpilogueHandoff(
            smem_offset=store.smem_offset,
            dtype=handoff_tv[0].dtype,
            chunk_cols=store.chunk_cols,
            row_blocks=params.tile_m // SM90.wgmma_m,
            chunks=params.tile_n // store.chunk_cols,
            tensors=len(handoff_tv),
        )
        return handoff_tv, handoff

    def _stores(self, offset: int) -> list[k.TmaStore]:
        """The outputs staged for TMA stores (:mod:`matmul_epilogue`), their buffers from
        ``offset`` on; none unless every store of the epilogue is a pair of columns."""
        params = self.matmul
        assert params.tile_m and params.tile_n
        if not self.paired:
            return []
        staged = staged_outputs(self.fusion, self.mmas[0], self.sizes["batch"], self.id_model)
        buffers, widest_row = staging_shape(bool(params.epilogue_warps))
        cols = chunk_cols([out.dtype.itemsize for out, _ in staged], params.tile_n, widest_row)
        if cols is None:
            return []
        stores = []
        offset = _align(offset, SMEM_ALIGN)
        box_of = {"batch": 1, "m": STAGING_ROWS, "n": cols}
        for out, layout in staged:
            store = k.TmaStore(
                buffer_name=self._buffer(out).name,
                dtype=out.dtype,
                shape=tuple(extent for extent, _, _ in layout),
                strides=tuple(stride for _, stride, _ in layout),
                box=tuple(box_of[role] for _, _, role in layout),
                roles=tuple(role for _, _, role in layout),
                swizzle_bytes=cols * out.dtype.itemsize,
                smem_offset=offset,
                buffers=buffers,
            )
            stores.append(store)
            offset += consumer_warpgroups(params.tile_m, params.pingpong) * store.warpgroup_bytes
        return stores


def lower_matmul(plan: KernelPlan, name: str, target: TargetInfo) -> k.Kernel:
    """Kernel IR of one scheduled matmul kernel (see the module docstring)."""
    with plan.fusion:
        return _MatmulLowering(plan, name, target).lower()
