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
  stage, the output staging and the epilogue vectors. With a ``cluster_m x cluster_n``
  cluster the grid is 1-D, ``cluster`` CTAs per cluster tile (persistent: as above) and
  ``Kernel.cluster = (cluster_m * cluster_n, 1, 1)``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pyfuse.errors import ScheduleError
from pyfuse.ir import dtypes
from pyfuse.ir import kernel_ir as k
from pyfuse.ir.exprs import Expr, LoadStoreKind, LoadStoreOp, MmaOp
from pyfuse.ir.hopper import SM90
from pyfuse.ir.id_model import IdMappingMode
from pyfuse.ir.iterdomain import IdTransform, IterDomain, Merge, Split
from pyfuse.ir.params import MatmulParams
from pyfuse.ir.target import TargetInfo
from pyfuse.ir.tensor import MemoryType, TensorView, Val
from pyfuse.passes.lower import _Lowering
from pyfuse.passes.matmul_epilogue import STAGING_ROWS, chunk_cols, staged_outputs
from pyfuse.passes.matmul_operands import (
    BARRIER_REGION_BYTES,
    operand_memory,
    operand_memory_roles,
    operand_swizzle_bytes,
)
from pyfuse.passes.matmul_tiles import consumer_warpgroups, persistent_ctas
from pyfuse.passes.matmul_vectors import EpilogueVectors
from pyfuse.passes.plan import KernelPlan

# Every swizzled tile starts on its pattern boundary: that of the widest swizzle (1024 bytes)
# is a multiple of every narrower one's.
SMEM_ALIGN = SM90.max_swizzle_pattern_bytes


def _align(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


class _MatmulLowering(_Lowering):
    def __init__(self, plan: KernelPlan, name: str, target: TargetInfo) -> None:
        super().__init__(plan, name)
        self.target = target
        fields = MatmulParams.__dataclass_fields__
        values: dict[str, Any] = {key: plan.params[key] for key in fields}
        self.matmul = MatmulParams(**values)
        self.mmas = [e for e in self.fusion.exprs() if isinstance(e, MmaOp)]
        self.accumulators: dict[int, k.Buffer] = {}
        first = self.mmas[0]
        self.roles = first.roles()
        self.row = k.Var("row", self.index_dtype)
        self.col = k.Var("col", self.index_dtype)
        self.batch_index = k.Var("batch", self.index_dtype)
        self.element = k.Var("element", dtypes.int32)
        self.pair_col = k.Var("col_b", self.index_dtype)
        self.pair_element = k.Var("element_b", dtypes.int32)
        self.col_current, self.element_current = self.col, self.element
        self.suffix_current = ""
        self.results_current: dict[int, k.Buffer] = {}
        self.locals_: dict[tuple[int, str], k.Buffer] = {}
        self.staged: dict[str, int] = {}
        self.unguarded = False  # set by lower(): see there
        self.vectors: EpilogueVectors | None = None  # set by lower(), before the epilogue
        # The problem's extent per role (m, n, k, batch).
        self.sizes = {"m": 1, "n": 1, "k": 1, "batch": 1}
        for axis, role in zip(self.reference.logical, self.roles, strict=True):
            self.sizes[role] *= axis.logical_extent
        # Adjacent accumulator columns pair up when N is even and every output stores them
        # side by side (not transposed, not split between rows by a reshape): then a pair is
        # in bounds together and 4-byte aligned, and each output takes one 2-element store.
        self.paired = self.sizes["n"] % 2 == 0 and all(
            self._columns_adjacent(out) for out in self.fusion.outputs
        )

    def _columns_adjacent(self, out: TensorView) -> bool:
        """Whether accumulator columns ``col`` and ``col + 1`` (``col`` even) land in adjacent
        elements of ``out``: its contiguous memory axis is the innermost N axis, or the inner
        part of a reshape of it (a split's inner axis, a merge's output) with even extents."""
        strides = self._strides(out)
        if not strides or strides[-1][1] != 1:
            return False
        n_axes = [a for a, r in zip(self.reference.logical, self.roles, strict=True) if r == "n"]
        steps: list[tuple[IterDomain, IterDomain]] = []  # (view axis, the axis it keeps)
        for tv in self.fusion.tensors():
            for transform in _root_to_logical(tv):
                if isinstance(transform, Split):
                    steps.append((transform.inner, transform.input))
                elif isinstance(transform, Merge):
                    steps.append((transform.output, transform.inner))
        axis = strides[-1][0]
        for _ in range(len(steps) + 1):
            if axis.extent % 2:
                return False
            if self.id_model.mapped(axis, n_axes[-1], IdMappingMode.EXACT):
                return True
            exact = IdMappingMode.EXACT
            kept = [src for made, src in steps if self.id_model.mapped(axis, made, exact)]
            if not kept:
                return False
            axis = kept[0]
        return False

    # -- epilogue tensors reshaped from the accumulator ----------------------------------------
    def _logical_index(self, tv: TensorView, ref_index: dict[int, k.KExpr]) -> dict[int, k.KExpr]:
        """As for any kernel when ``tv``'s axes map to the accumulator's; else (an epilogue
        reshape of the result, split heads, and what is computed from it) derived from the
        producers computed in this kernel, through the op's axis pairs and the reshape's
        root-to-logical splits and merges."""
        definition = tv.definition
        if definition is None or self._covered(tv) or self.fusion.is_input(tv):
            return super()._logical_index(tv, ref_index)
        zero = k.const(0, self.index_dtype)
        result: dict[int, k.KExpr] = {}
        for producer in definition.tensor_inputs:
            if self.fusion.is_input(producer) or producer.alias_of is not None:
                continue  # read in place, indexed from this consumer
            produced = self._logical_index(producer, ref_index)
            for p_axis, c_axis in definition.logical_pairs(producer):
                if id(p_axis) in produced:
                    result.setdefault(id(c_axis), produced[id(p_axis)])
        for axis in tv.maybe_root:
            result.setdefault(id(axis), zero)  # a broadcast axis
        for transform in _root_to_logical(tv):
            if isinstance(transform, Split):
                value = result[id(transform.input)]
                extent = k.const(transform.inner.extent, self.index_dtype)
                result[id(transform.outer)] = k.floordiv(value, extent)
                result[id(transform.inner)] = k.mod(value, extent)
            elif isinstance(transform, Merge):
                extent = k.const(transform.inner.extent, self.index_dtype)
                outer, inner = result[id(transform.outer)], result[id(transform.inner)]
                result[id(transform.output)] = k.add(k.mul(outer, extent), inner)
        for axis in tv.logical:
            result.setdefault(id(axis), zero)
        return result

    def _covered(self, tv: TensorView) -> bool:
        """Every real logical axis of ``tv`` maps to an axis of the accumulator."""
        return all(
            axis.is_broadcast
            or any(
                self.id_model.mapped(axis, ref_axis, mode)
                for ref_axis in self.reference.logical
                for mode in (IdMappingMode.EXACT, IdMappingMode.BROADCAST)
            )
            for axis in tv.logical
        )

    # -- the accumulator's logical indices come from the fragment coordinates ------------------
    def _reference_indices(self, by_position: dict[int, k.KExpr]) -> dict[int, k.KExpr]:
        del by_position
        index: dict[int, k.KExpr] = {}
        by_role: dict[str, k.KExpr] = {
            "m": self.row,
            "n": self.col_current,
            "batch": self.batch_index,
        }
        if self.unguarded:
            for role in ("m", "n"):
                last = k.const(self.sizes[role] - 1, self.index_dtype)
                by_role[role] = k.Binary("min", by_role[role], last, self.index_dtype)
        for role, combined in by_role.items():
            axes = [a for a, r in zip(self.reference.logical, self.roles, strict=True) if r == role]
            remaining: k.KExpr = combined
            for axis in reversed(axes):  # the merged index, innermost axis fastest
                extent = k.const(axis.logical_extent, self.index_dtype)
                index[id(axis)] = k.mod(remaining, extent) if axis is not axes[0] else remaining
                remaining = k.floordiv(remaining, extent)
        zero = k.const(0, self.index_dtype)
        for axis, role in zip(self.reference.logical, self.roles, strict=True):
            if role == "k":
                index[id(axis)] = zero
        return index

    def _read(self, expr, val: Val, consumer_index, by_position, compute_dtype):  # type: ignore[no-untyped-def,override]
        if isinstance(val, TensorView) and id(val) in self.accumulators:
            return k.Load(self.accumulators[id(val)], self.element_current, val.dtype)
        if isinstance(val, TensorView) and id(val) in self.results_current:
            # An output read by a later epilogue op: use its register, its store comes last.
            return k.Load(self.results_current[id(val)], k.const(0, self.index_dtype), val.dtype)
        if isinstance(val, TensorView) and val.memory_type == MemoryType.LOCAL:
            buffer = self._local(val, self.suffix_current)
            return k.Load(buffer, k.const(0, self.index_dtype), val.dtype)
        value = super()._read(expr, val, consumer_index, by_position, compute_dtype)
        # A bias or a row scale: read from the tile's copy in shared memory.
        return value if self.vectors is None else self.vectors.read(value)

    def _buffer_index(self, tv: TensorView, by_position: dict[int, k.KExpr]) -> k.KExpr:
        # Epilogue values are one register per accumulator element: the element loop is the
        # MatmulMainLoop's, unrolled by the emitter.
        return k.const(0, self.index_dtype)

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
            2 * consumer_warpgroups(params.tile_m, params.pingpong) * store.buffer_bytes
            for store in stores
        )
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
        row_blocks = params.tile_m // SM90.wgmma_m if params.pingpong else 1
        operand_buffers = {operand.buffer_name for operand in operands}
        self.vectors = EpilogueVectors(
            row=self.row,
            cols={self.col: 0, self.pair_col: 1},
            sizes=self.sizes,
            spans={"m": SM90.wgmma_m * row_blocks, "n": params.tile_n},
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
            # Each consumer warpgroup holds 64 rows of the tile: N/2 fp32 registers a thread
            # (MatmulMainLoop.accumulator_registers).
            registers = params.tile_n // 2 * row_blocks
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
        )
        m_tiles = -(-sizes["m"] // params.tile_m)
        n_tiles = -(-sizes["n"] // params.tile_n)
        cluster = loop.cluster_size
        if params.persistent:
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
            cluster_tiles = (
                -(-m_tiles // loop.cluster_m) * -(-n_tiles // loop.cluster_n) * sizes["batch"]
            )
            grid = (cluster_tiles * cluster, 1, 1)
        else:
            swizzle = params.grid_swizzle or 1
            grid = (n_tiles * swizzle, -(-m_tiles // swizzle), sizes["batch"])
        params_sorted = sorted(self.params, key=lambda p: (p.role != k.ParamRole.INPUT, p.index))
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

    def _stores(self, offset: int) -> list[k.TmaStore]:
        """The outputs staged for TMA stores (:mod:`matmul_epilogue`), their buffers from
        ``offset`` on; none unless every store of the epilogue is a pair of columns."""
        params = self.matmul
        assert params.tile_m and params.tile_n
        if not self.paired:
            return []
        staged = staged_outputs(self.fusion, self.mmas[0], self.sizes["batch"], self.id_model)
        cols = chunk_cols([out.dtype.itemsize for out, _ in staged], params.tile_n)
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
            )
            stores.append(store)
            offset += 2 * consumer_warpgroups(params.tile_m, params.pingpong) * store.buffer_bytes
        return stores

    def _epilogue_exprs(self) -> list[Expr]:
        exprs = []
        for expr in self.fusion.exprs():
            if isinstance(expr, MmaOp) or expr.output.alias_of is not None:
                continue
            if isinstance(expr, LoadStoreOp) and expr.kind == LoadStoreKind.TMA_LOAD:
                continue
            exprs.append(expr)
        return exprs

    def _epilogue_copy(
        self, col: k.Var, element: k.Var, suffix: str, statements: list[k.Stmt]
    ) -> tuple[list[k.Stmt], dict[int, k.Buffer]]:
        """The epilogue for one accumulator element: its statements, and for each output the
        register it leaves the value in (the stores come after, vectorized when paired)."""
        self.col_current, self.element_current = col, element
        self.suffix_current = suffix
        body: list[k.Stmt] = []
        results: dict[int, k.Buffer] = {}
        self.results_current = results
        for expr in self._epilogue_exprs():
            out = expr.output
            consumer_index = self._logical_index(out, self._reference_indices({}))
            value = self._value(expr, consumer_index, {})
            if self.fusion.is_output(out):
                buffer = k.Buffer(f"T{out.name}_out{suffix}", out.dtype, MemoryType.LOCAL, 1)
                results[id(out)] = buffer
            else:
                buffer = self._local(out, suffix)
            statements.append(k.Alloc(buffer))
            body.append(k.Store(buffer, k.const(0, self.index_dtype), value))
        return body, results

    def _local(self, tv: TensorView, suffix: str) -> k.Buffer:
        key = (id(tv), suffix)
        buffer = self.locals_.get(key)
        if buffer is None:
            buffer = k.Buffer(f"T{tv.name}{suffix}", tv.dtype, MemoryType.LOCAL, 1)
            self.locals_[key] = buffer
        return buffer

    def _epilogue(self, sizes: dict[str, int]) -> list[k.Stmt]:
        """Per accumulator element, or per pair of adjacent columns when N is even (both
        columns are then in bounds together and the stores are one vector per output)."""
        statements: list[k.Stmt] = []
        guard = k.all_of(
            [
                k.less_than(self.row, k.const(sizes["m"], self.index_dtype)),
                k.less_than(self.col, k.const(sizes["n"], self.index_dtype)),
            ]
        )
        first, first_results = self._epilogue_copy(self.col, self.element, "", statements)
        body = list(first)
        outputs = [tv for tv in self.fusion.outputs]
        if self.paired:
            second, second_results = self._epilogue_copy(
                self.pair_col, self.pair_element, "_b", statements
            )
            body += second
            for out in outputs:
                pair = k.Buffer(f"T{out.name}_pair", out.dtype, MemoryType.LOCAL, 2)
                statements.append(k.Alloc(pair))
                zero, one = k.const(0, self.index_dtype), k.const(1, self.index_dtype)
                for slot, results in ((zero, first_results), (one, second_results)):
                    value = k.Load(results[id(out)], zero, out.dtype)
                    body.append(k.Store(pair, slot, value))
                staged = self.staged.get(self._buffer(out).name)
                if staged is not None:
                    body.append(k.StageStore(staged, pair, 2))
                    continue
                index = self._output_offset(out, self.col)
                body.append(k.VectorStore(self._buffer(out), index, pair, zero, 2))
        else:
            for out in outputs:
                zero = k.const(0, self.index_dtype)
                value = k.Load(first_results[id(out)], zero, out.dtype)
                body.append(k.Store(self._buffer(out), self._output_offset(out, self.col), value))
        if self.unguarded:
            statements.extend(body)
        else:
            statements.append(k.If(guard, body))
        return statements

    def _output_offset(self, out: TensorView, col: k.Var) -> k.KExpr:
        self.col_current = col
        consumer_index = self._logical_index(out, self._reference_indices({}))
        return self._global_offset(out, consumer_index)


def _root_to_logical(tv: TensorView) -> list[IdTransform]:
    """The splits and merges from a reshape output's root to its logical domain, in an order
    that computes every input before its use (none for a tensor without a root)."""
    if tv.root is None:
        return []
    known = {id(axis) for axis in tv.root}
    pending: list[IdTransform] = []
    stack = list(tv.logical)
    while stack:
        axis = stack.pop()
        definition = axis.definition
        if id(axis) in known or definition is None or definition in pending:
            continue
        pending.append(definition)
        stack.extend(definition.inputs)
    ordered: list[IdTransform] = []
    while pending:
        ready = [t for t in pending if all(id(axis) in known for axis in t.inputs)]
        if not ready:
            break  # not reached from the root: nothing to derive
        for transform in ready:
            pending.remove(transform)
            ordered.append(transform)
            known.update(id(axis) for axis in transform.outputs)
    return ordered


def lower_matmul(plan: KernelPlan, name: str, target: TargetInfo) -> k.Kernel:
    """Kernel IR of one scheduled matmul kernel (see the module docstring)."""
    with plan.fusion:
        return _MatmulLowering(plan, name, target).lower()
