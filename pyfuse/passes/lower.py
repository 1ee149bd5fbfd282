"""Lowering: a scheduled kernel fusion becomes kernel IR.

Expects a :class:`KernelPlan` whose fusion is scheduled: every tensor but the inputs
replays the plan's reference tensor (so loop position ``k`` of any tensor is the
reference's loop ``k``), inline positions are set, memory types are chosen, and
metadata ops right after inputs may be aliases (``alias_of``). An ``id_model``, when given,
is the IdModel of that fusion as it stands (the pipeline passes validate's); else one is built.

Guarantees:

- loop nests follow the loop domains: a loop bound to a block or thread index is the
  special register, a loop shared through inlining (the IdModel's LOOP relation) is
  opened once, every other loop is its own ``For``; loops that index register arrays,
  and unrolled or vectorized loops, are unrolled;
- indices come from the domains: the reference's logical indices are derived from
  the loop indices by walking its splits and merges backwards, every tensor's logical
  index follows from the reference's (a broadcast axis reads index 0), a producer's
  from its consumer's through the op's producer-consumer axis map, and a global
  offset from the allocation domain and the strides;
- every global read and write, and every reduction update, is predicated by the
  reference's ragged splits and by launch dimensions larger than the loop they bind
  (predicates that fold to true are dropped);
- an intermediate lives in registers (or shared memory) sized by the loop axes right
  of its inline position, allocated where those loops open; a reduction accumulator
  is initialised there, and its cross-thread step (``ThreadReduce``) follows the
  closing of its serial reduction loops, outside any predicate;
- aliased tensors emit no code: their readers index the aliased input in place;
- a row's side branches (:func:`~pyfuse.passes.lower_order.side_branches`) come before
  its reductions, and what only the exprs after the reductions read
  (:func:`~pyfuse.passes.lower_order.only_after_reductions`) right before its first reader,
  so neither holds registers across the reductions.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import field

from pyfuse.errors import ScheduleError
from pyfuse.ir import dtypes
from pyfuse.ir import kernel_ir as k
from pyfuse.ir.dtypes import DType
from pyfuse.ir.exprs import (
    BinaryOp,
    BroadcastOp,
    CastOp,
    ExpandOp,
    Expr,
    FullOp,
    IotaOp,
    LoadStoreOp,
    PermuteOp,
    ReductionOp,
    ReductionOpType,
    ReshapeOp,
    SqueezeOp,
    TernaryOp,
    UnaryOp,
)
from pyfuse.ir.id_model import IdMappingMode, IdModel
from pyfuse.ir.iterdomain import IterDomain, ParallelType
from pyfuse.ir.records import record
from pyfuse.ir.tensor import MemoryType, Scalar, TensorView, Val
from pyfuse.passes.lower_indexing import IndexDerivation, indexes_registers
from pyfuse.passes.lower_order import lowering_order
from pyfuse.passes.lower_windows import windowed_copy
from pyfuse.passes.plan import KernelPlan
from pyfuse.passes.register_budget import check_register_arrays

SPECIAL_OF = {
    ParallelType.TIDX: k.SpecialKind.TID_X,
    ParallelType.TIDY: k.SpecialKind.TID_Y,
    ParallelType.TIDZ: k.SpecialKind.TID_Z,
    ParallelType.BIDX: k.SpecialKind.CTAID_X,
    ParallelType.BIDY: k.SpecialKind.CTAID_Y,
    ParallelType.BIDZ: k.SpecialKind.CTAID_Z,
}
UNROLLED = (ParallelType.UNROLL, ParallelType.VECTORIZE)
REDUCTION_COMBINE = {
    ReductionOpType.SUM: "add",
    ReductionOpType.PROD: "mul",
    ReductionOpType.MAX: "maximum",
    ReductionOpType.MIN: "minimum",
}
# A loop this short that indexes registers is unrolled; a longer one is a schedule bug.
MAX_UNROLL = 256
# Elements one thread may keep of one tensor in registers: the reduction scheduler's budget
# for a persistent row (row_registers.MAX_PERSISTENT_PER_THREAD); more spills (61
# f32 of an outer softmax's column, kept for two loop nests, spilled 8 bytes).
MAX_REGISTER_ELEMENTS = 48


def kernel_name(base: str, index: int) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", base) or "fusion"
    if not cleaned[0].isalpha():
        cleaned = "f" + cleaned
    return f"{cleaned}_k{index}"


def reduction_init(op: ReductionOpType, dtype: DType) -> bool | int | float:
    if op == ReductionOpType.SUM:
        return 0.0 if dtype.is_floating else 0
    if op == ReductionOpType.PROD:
        return 1.0 if dtype.is_floating else 1
    if dtype.is_floating:
        return -math.inf if op == ReductionOpType.MAX else math.inf
    if dtype.is_bool:
        return op == ReductionOpType.MIN
    if dtype.is_unsigned:
        return 0 if op == ReductionOpType.MAX else 2**dtype.bits - 1
    bits = dtype.bits - 1
    limit: int = 2**bits
    return -limit if op == ReductionOpType.MAX else limit - 1


@record(eq=False)  # loops are told apart by identity
class _Loop:
    """An open loop of the nest being built."""

    key: int
    stmt: k.For | None  # None for the kernel's top level
    body: list[k.Stmt]
    var: k.KExpr | None = None
    # Thread reductions to emit when this loop's body is complete.
    pending: list[TensorView] = field(default_factory=list)


class _Lowering(IndexDerivation):
    def __init__(self, plan: KernelPlan, name: str, id_model: IdModel | None = None) -> None:
        if plan.reference is None:
            raise ScheduleError(f"kernel {name}: the scheduler named no reference tensor")
        self.plan = plan
        self.name = name
        self.fusion = plan.fusion
        self.reference = plan.reference
        self.id_model = id_model or IdModel(self.fusion)
        self.exprs = [e for e in self.fusion.exprs() if e.output.alias_of is None]
        self.tensors = self.fusion.tensors()
        self.launch = self._launch_dims()
        self.index_dtype = self._index_dtype()
        self.buffers: dict[int, k.Buffer] = {}
        self.params: list[k.TensorParam] = []
        self.specials: dict[ParallelType, k.Var] = {}
        self.var_count = 0
        self.smem_bytes = 0
        self.ref_positions: dict[int, list[int | None]] = {}
        self.varies_along: dict[tuple[int, int], bool] = {}
        self.window_anchors: dict[int, TensorView | None] = {}
        # The global tensors the kernel indexes: an input read only through views (the
        # logits of ``reshape(logits, [B * T, V])``) is indexed as its aliases, not itself.
        self.window_candidates = [
            tv
            for tv in self.tensors
            if tv.alias_of is not None
            or self.fusion.is_output(tv)
            or (
                self.fusion.is_input(tv)
                and any(use.output.alias_of is None for use in self.fusion.uses_in_fusion(tv))
            )
        ]

    # -- setup --------------------------------------------------------------------------------
    def _launch_dims(self) -> dict[ParallelType, int]:
        dims: dict[ParallelType, int] = {}
        for tv in self.tensors:
            if self.fusion.is_input(tv) or tv.alias_of is not None:
                continue
            for axis in tv.loop:
                if axis.parallel_type.is_hardware_index:
                    dims[axis.parallel_type] = max(dims.get(axis.parallel_type, 1), axis.extent)
        return dims

    def _index_dtype(self) -> DType:
        largest = max((tv.numel for tv in self.tensors), default=1)
        for tv in self.fusion.inputs:
            if tv.strides is not None:
                span = sum((e - 1) * s for e, s in zip(tv.shape, tv.strides, strict=True)) + 1
                largest = max(largest, span)
        launch = 1
        for extent in self.launch.values():
            launch *= extent
        return dtypes.int32 if max(largest, launch) < 2**31 else dtypes.int64

    def _new_var(self, prefix: str, extent: int | None, dtype: DType | None = None) -> k.Var:
        self.var_count += 1
        return k.Var(f"{prefix}{self.var_count}", dtype or self.index_dtype, extent)

    def _buffer(self, tv: TensorView) -> k.Buffer:
        source = tv.alias_of if tv.alias_of is not None else tv
        buffer = self.buffers.get(id(source))
        if buffer is not None:
            return buffer
        if source.memory_type == MemoryType.GLOBAL:
            buffer = k.Buffer(f"T{source.name}", source.dtype, MemoryType.GLOBAL, source.numel)
            if self.fusion.is_input(source):
                role, index = k.ParamRole.INPUT, self.fusion.inputs.index(source)
            elif self.fusion.is_output(source):
                role, index = k.ParamRole.OUTPUT, self.fusion.outputs.index(source)
            else:
                raise ScheduleError(
                    f"kernel {self.name}: T{source.name} is in global memory but is neither an "
                    "input nor an output of the kernel"
                )
            self.params.append(k.TensorParam(buffer.name, source.dtype, role, index, source.shape))
        else:
            size = 1
            for axis in self._allocated_axes(source):
                size *= axis.extent
            if source.memory_type == MemoryType.LOCAL and size > MAX_REGISTER_ELEMENTS:
                # ptxas would spill such an array to local memory: a plan to fall back from.
                raise ScheduleError(
                    f"kernel {self.name}: T{source.name} would keep {size} elements in "
                    f"registers per thread (at most {MAX_REGISTER_ELEMENTS})"
                )
            buffer = k.Buffer(f"T{source.name}", source.dtype, source.memory_type, size)
            if source.memory_type == MemoryType.SHARED:
                offset = -(-self.smem_bytes // 16) * 16
                buffer.smem_offset = offset
                self.smem_bytes = offset + size * source.dtype.itemsize
        self.buffers[id(source)] = buffer
        return buffer

    # -- values -------------------------------------------------------------------------------
    def _read(
        self,
        expr: Expr,
        val: Val,
        consumer_index: dict[int, k.KExpr],
        by_position: dict[int, k.KExpr],
        compute_dtype: DType,
    ) -> k.KExpr:
        if isinstance(val, Scalar):
            return k.Const(val.value, val.dtype)
        assert isinstance(val, TensorView)
        buffer = self._buffer(val)
        if buffer.memory == MemoryType.GLOBAL:
            logical = self._producer_index(expr, val, consumer_index)
            index = self._global_offset(val, logical)
        else:
            index = self._buffer_index(val, by_position)
        return k.Load(buffer, index, val.dtype)

    def _value(
        self, expr: Expr, consumer_index: dict[int, k.KExpr], by_position: dict[int, k.KExpr]
    ) -> k.KExpr:
        out = expr.output

        def read(val: Val) -> k.KExpr:
            return self._read(expr, val, consumer_index, by_position, out.dtype)

        if isinstance(expr, UnaryOp):
            return k.Unary(expr.op.value, read(expr.inputs[0]), out.dtype)
        if isinstance(expr, BinaryOp):
            lhs, rhs = read(expr.inputs[0]), read(expr.inputs[1])
            return k.Binary(expr.op.value, lhs, rhs, out.dtype)
        if isinstance(expr, TernaryOp):
            condition, if_true, if_false = (read(v) for v in expr.inputs)
            return k.Select(condition, if_true, if_false, out.dtype)
        if isinstance(expr, CastOp):
            return k.Cast(read(expr.inputs[0]), out.dtype)
        if isinstance(expr, FullOp):
            return k.Const(expr.value.value, out.dtype)
        if isinstance(expr, IotaOp):
            index = consumer_index.get(id(out.logical[expr.dim]), k.const(0, self.index_dtype))
            return index if index.dtype == out.dtype else k.Cast(index, out.dtype)
        if isinstance(
            expr, LoadStoreOp | BroadcastOp | SqueezeOp | PermuteOp | ExpandOp | ReshapeOp
        ):
            return read(expr.inputs[0])
        raise ScheduleError(
            f"kernel {self.name}: no lowering for {expr.op_name} (T{out.name}); the "
            f"{self.plan.scheduler} scheduler should have declined it"
        )

    # -- nest construction --------------------------------------------------------------------
    def _loop_key(self, axis: IterDomain) -> int:
        return id(self.id_model.group(axis, IdMappingMode.LOOP)[0])

    def _shares_loops(self, tv: TensorView) -> bool:
        """``tv`` is computed inside a serial loop of its consumers (not only under the same
        block and thread indices)."""
        return any(
            not axis.parallel_type.is_hardware_index for axis in tv.loop[: tv.inline_position]
        )

    def _sorted_exprs(self) -> list[Expr]:
        return lowering_order(self.exprs, self._shares_loops)

    def lower(self) -> k.Kernel:
        top = _Loop(key=0, stmt=None, body=[])
        for ptype, extent in sorted(self.launch.items(), key=lambda item: item[0].value):
            var = self._new_var(ptype.value.lower(), extent)
            self.specials[ptype] = var
            special = k.Special(SPECIAL_OF[ptype], extent, dtypes.int32)
            value: k.KExpr = (
                special if self.index_dtype == dtypes.int32 else k.Cast(special, self.index_dtype)
            )
            top.body.append(k.Let(var, value))
        for tv in self.fusion.inputs + self.fusion.outputs:
            self._buffer(tv)
        stack = [top]
        for expr in self._sorted_exprs():
            stack = self._emit(expr, stack)
        while len(stack) > 1:
            self._close(stack)
        self._flush(top)
        self._mark_unrolled(top.body)
        grid = tuple(
            self.launch.get(p, 1) for p in (ParallelType.BIDX, ParallelType.BIDY, ParallelType.BIDZ)
        )
        block = tuple(
            self.launch.get(p, 1) for p in (ParallelType.TIDX, ParallelType.TIDY, ParallelType.TIDZ)
        )
        params = sorted(self.params, key=lambda p: (p.role != k.ParamRole.INPUT, p.index))
        return k.Kernel(
            name=self.name,
            params=params,
            buffers={b.name: b for b in self.buffers.values()},
            body=top.body,
            grid=grid,  # type: ignore[arg-type]
            block=block,  # type: ignore[arg-type]
            smem_bytes=self.smem_bytes,
            index_dtype=self.index_dtype,
        )

    def _close(self, stack: list[_Loop]) -> None:
        """Close the innermost loop; reductions waiting on it finish in its parent."""
        loop = stack.pop()
        self._flush(loop)
        self._flush(stack[-1])

    def _flush(self, loop: _Loop) -> None:
        for tv in loop.pending:
            self._thread_reduce(tv, loop.body)
        loop.pending.clear()

    def _emit(self, expr: Expr, stack: list[_Loop]) -> list[_Loop]:
        out = expr.output
        axes = out.loop
        positions = self._ref_positions(out)
        serial = [(i, a) for i, a in enumerate(axes) if not a.parallel_type.is_hardware_index]
        vectorized = self._vector_width(expr)
        if vectorized > 1:
            serial = [(i, a) for i, a in serial if a.parallel_type != ParallelType.VECTORIZE]
        keys = [self._loop_key(a) for _, a in serial]
        depth = 0
        while depth < len(keys) and depth + 1 < len(stack) and stack[depth + 1].key == keys[depth]:
            depth += 1
        while len(stack) > depth + 1:
            self._close(stack)
        alloc_depth = sum(1 for i, _ in serial if i < out.inline_position)
        by_position: dict[int, k.KExpr] = {}
        for index, axis in enumerate(axes):
            position = positions[index]
            if position is None:
                continue
            if axis.parallel_type.is_hardware_index:
                by_position[position] = self.specials[axis.parallel_type]
        for level, (index, axis) in enumerate(serial):
            if level < depth:
                var = stack[level + 1].var
                assert var is not None
            else:
                extent = max(axis.extent, self.id_model.loop_promotion(axis).extent)
                loop_var = self._new_var("i", extent)
                loop = k.For(
                    loop_var,
                    k.const(extent, self.index_dtype),
                    [],
                    unroll=axis.parallel_type in UNROLLED,
                )
                stack[-1].body.append(loop)
                stack.append(_Loop(keys[level], loop, loop.body, loop_var))
                var = loop_var
            position = positions[index]
            if position is not None:
                by_position[position] = var
        self._allocate(out, stack, alloc_depth)
        if vectorized > 1:
            for index, axis in enumerate(axes):
                if axis.parallel_type == ParallelType.VECTORIZE and positions[index] is not None:
                    by_position[positions[index]] = k.const(0, self.index_dtype)  # type: ignore[index]
        self._emit_statement(expr, by_position, vectorized, stack)
        return stack

    def _allocate(self, tv: TensorView, stack: list[_Loop], depth: int) -> None:
        """Allocate (and for a reduction, initialise) ``tv`` in the body of the loop at
        ``depth``, before the loop nested in it that computes ``tv``."""
        if tv.memory_type == MemoryType.GLOBAL or id(tv) in self.buffers:
            return
        buffer = self._buffer(tv)
        statements: list[k.Stmt] = [k.Alloc(buffer)]
        definition = tv.definition
        if isinstance(definition, ReductionOp):
            init = k.Const(reduction_init(definition.op, tv.dtype), tv.dtype)
            for element in range(buffer.size):
                statements.append(k.Store(buffer, k.const(element, self.index_dtype), init))
        depth = min(depth, len(stack) - 1)
        body = stack[depth].body
        position = len(body)
        if depth + 1 < len(stack):
            child = stack[depth + 1].stmt
            position = next(i for i, stmt in enumerate(body) if stmt is child)
        body[position:position] = statements

    def _vector_width(self, expr: Expr) -> int:
        """Width of the vector copy ``expr`` is, or 1. Only global<->local copies vectorize."""
        if not isinstance(expr, LoadStoreOp):
            return 1
        out, source = expr.output, expr.inputs[0]
        assert isinstance(source, TensorView)
        source_global = source.memory_type == MemoryType.GLOBAL
        if source_global == (out.memory_type == MemoryType.GLOBAL):
            return 1
        inner = out.loop[-1] if out.loop else None
        if inner is None or inner.parallel_type != ParallelType.VECTORIZE:
            return 1
        memory = source if source_global else out
        if not self._varies_innermost(memory):
            return 1  # the vector's elements would repeat one value: load them one by one
        for split in self._windows():
            if self._varies_along(memory, split.input) and not self._window_aligned(memory, split):
                # Rows that start elsewhere than the anchor's: element by element (the
                # schedulers take windows only where every tensor lays the rows out alike:
                # scheduler_utils.window_width).
                return 1
        return inner.extent

    def _varies_innermost(self, tv: TensorView) -> bool:
        """``tv``'s stride-1 memory axis is the reference's innermost logical axis, so
        consecutive loop elements are consecutive in memory."""
        strides = self._strides(tv)
        if not strides or strides[-1][1] != 1:
            return False
        axis = strides[-1][0]
        innermost = [a for a in self.reference.logical if not a.is_reduction][-1]
        return (
            any(
                self.id_model.mapped(axis, innermost, mode)
                for mode in (IdMappingMode.EXACT, IdMappingMode.BROADCAST)
            )
            and not axis.is_broadcast
        )

    def _emit_statement(
        self, expr: Expr, by_position: dict[int, k.KExpr], width: int, stack: list[_Loop]
    ) -> None:
        out = expr.output
        body = stack[-1].body
        ref_index = self._reference_indices(by_position)
        consumer_index = self._logical_index(out, ref_index)
        out_buffer = self._buffer(out)
        touches_global = out_buffer.memory == MemoryType.GLOBAL or any(
            self._buffer(t).memory == MemoryType.GLOBAL for t in expr.tensor_inputs
        )
        statements: list[k.Stmt]
        needs_thread_reduce = False
        windowed = False
        if width > 1:
            source = expr.tensor_inputs[0]
            source_buffer = self._buffer(source)
            copy: k.VectorLoad | k.VectorStore
            if out_buffer.memory == MemoryType.GLOBAL:
                memory = out
                copy = k.VectorStore(
                    out_buffer,
                    self._global_offset(out, consumer_index),
                    source_buffer,
                    self._buffer_index(source, by_position),
                    width,
                )
            else:
                memory = source
                logical = self._producer_index(expr, source, consumer_index)
                copy = k.VectorLoad(
                    out_buffer,
                    self._buffer_index(out, by_position),
                    source_buffer,
                    self._global_offset(source, logical),
                    width,
                )
            statements = [copy]
            for split in self._windows():
                if self._varies_along(memory, split.input):
                    column = ref_index[id(split.input)]
                    statements = [windowed_copy(copy, column, split.input.extent)]
                    windowed = True
        elif isinstance(expr, ReductionOp):
            index = self._buffer_index(out, by_position)
            current = k.Load(out_buffer, index, out.dtype)
            value = self._read(expr, expr.inputs[0], consumer_index, by_position, out.dtype)
            combined = k.Binary(REDUCTION_COMBINE[expr.op], current, value, out.dtype)
            statements = [k.Store(out_buffer, index, combined)]
            touches_global = True  # a padded element must not join the reduction
            needs_thread_reduce = any(
                a.is_reduction and a.parallel_type.is_thread_dim for a in out.loop
            )
            if any(a.is_reduction and a.parallel_type.is_block_dim for a in out.loop):
                raise ScheduleError(
                    f"kernel {self.name}: T{out.name} reduces across blocks; grid reductions "
                    "are not supported, the scheduler must keep a reduction inside a block"
                )
        else:
            value = self._value(expr, consumer_index, by_position)
            if out_buffer.memory == MemoryType.GLOBAL:
                index = self._global_offset(out, consumer_index)
            else:
                index = self._buffer_index(out, by_position)
            statements = [k.Store(out_buffer, index, value)]
        if touches_global:
            predicate = self._predicate(out, by_position, windows=not windowed)
            if not k.is_true(predicate):
                statements = [k.If(predicate, statements)]
        body.extend(statements)
        if isinstance(expr, ReductionOp) and needs_thread_reduce:
            self._register_thread_reduce(out, stack)

    def _register_thread_reduce(self, tv: TensorView, stack: list[_Loop]) -> None:
        """The cross-thread step runs once the serial reduction loops right of the
        accumulator's allocation have closed (at once when there are none)."""
        level = sum(
            1 for a in tv.loop[: tv.inline_position] if not a.parallel_type.is_hardware_index
        )
        if level >= len(stack) - 1:
            self._thread_reduce(tv, stack[-1].body)
        elif tv not in stack[level].pending:
            stack[level].pending.append(tv)

    def _thread_reduce(self, tv: TensorView, body: list[k.Stmt]) -> None:
        definition = tv.definition
        assert isinstance(definition, ReductionOp)
        buffer = self._buffer(tv)
        threads = 1
        for axis in tv.loop:
            if axis.is_reduction and axis.parallel_type.is_thread_dim:
                if axis.parallel_type != ParallelType.TIDX:
                    raise ScheduleError(
                        f"kernel {self.name}: T{tv.name} reduces over {axis.parallel_type.name}; "
                        "only threadIdx.x reductions are supported"
                    )
                threads *= axis.extent
        block_x = self.launch.get(ParallelType.TIDX, 1)
        if block_x % threads:
            raise ScheduleError(
                f"kernel {self.name}: T{tv.name} reduces over {threads} threads, which does not "
                f"divide the block's {block_x}"
            )
        workspace = None
        if threads > 32:
            workspace = k.Buffer(
                f"T{tv.name}_workspace", tv.dtype, MemoryType.SHARED, block_x // 32
            )
            offset = -(-self.smem_bytes // 16) * 16
            workspace.smem_offset = offset
            self.smem_bytes = offset + workspace.size * tv.dtype.itemsize
            self.buffers[id(workspace)] = workspace
        op = definition.op.value
        for element in range(buffer.size):
            index = k.const(element, self.index_dtype)
            var = self._new_var("red", None, tv.dtype)
            body.append(k.Let(var, k.Load(buffer, index, tv.dtype)))
            body.append(k.ThreadReduce(var, op, threads, workspace))
            body.append(k.Store(buffer, index, var))

    def _mark_unrolled(self, body: Sequence[k.Stmt]) -> None:
        """Unroll every loop whose variable indexes a register array."""
        for stmt in body:
            for block in stmt.children():
                self._mark_unrolled(block)
            if isinstance(stmt, k.For) and not stmt.unroll and indexes_registers(stmt):
                if stmt.var.extent is not None and stmt.var.extent > MAX_UNROLL:
                    raise ScheduleError(
                        f"kernel {self.name}: a loop of {stmt.var.extent} iterations indexes "
                        f"registers; at most {MAX_UNROLL} can be unrolled"
                    )
                stmt.unroll = True


def lower(plan: KernelPlan, name: str, id_model: IdModel | None = None) -> k.Kernel:
    """Kernel IR for one scheduled kernel (see the module docstring)."""
    with plan.fusion:
        kernel = _Lowering(plan, name, id_model).lower()
    check_register_arrays(kernel, plan.params)
    return kernel
