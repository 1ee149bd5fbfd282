"""The cat scheduler: ``torch.cat`` with the elementwise ops around it, in one kernel.

A CatOp's inputs have their own extents along the joined axis, so no loop nest of the SIMT
schedulers covers them: the cat runs in a kernel of its own scheduler. That kernel also
computes the elementwise ops (unary, binary, where, casts, broadcasts) that make its pieces
from the segment's inputs and those that use its result, reading inputs and their views in
place (aliases): ``x * cos + cat([-x2, x1]) * sin`` (rotary embeddings) is one kernel. Every
other scheduler declines a fusion holding a CatOp; this one declines a segment with any
other op (a reduction, a matmul, a view of a computed tensor), a second cat, an output that
feeds the cat, or an output whose shape is not the cat's. The segmenter's greedy walk grows
such a segment around the cat.

Lowering builds the kernel IR directly: one thread per element of the cat's shape, its index
split into logical indices. Along the joined axis a chain of branches assigns the cat's
value from the piece that holds the element: the piece's expression tree, each input read at
its own strides (an alias's through its view chain) and offset, its index mapped through
each op's axis pairs (broadcast axes read index 0). Every output is then the expression tree
of its ops over the cat's value and the inputs, at the same index. Each op keeps its dtype,
so values round as in the other kernels (16-bit floats in f32, rounded per op).

Expects a segment as described; guarantees a kernel that writes every output element once.
"""

from __future__ import annotations

from collections.abc import Callable

from pyfuse.errors import ScheduleError
from pyfuse.ir import dtypes
from pyfuse.ir import kernel_ir as k
from pyfuse.ir.dtypes import DType
from pyfuse.ir.exprs import (
    BinaryOp,
    BroadcastOp,
    CastOp,
    CatOp,
    Expr,
    LoadStoreKind,
    LoadStoreOp,
    TernaryOp,
    UnaryOp,
)
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.tensor import MemoryType, Scalar, TensorView, Val
from pyfuse.passes.plan import KernelPlan
from pyfuse.passes.scheduler_utils import upstream
from pyfuse.passes.skip_intermediates import (
    alias_strides,
    reads_in_place,
    view_offset,
    view_source,
)

NAME = "cat"
THREADS = 256  # one element per thread: bound by memory
_ELEMENTWISE = (UnaryOp, BinaryOp, TernaryOp, CastOp, BroadcastOp)

Index = dict[int, k.KExpr]  # logical axis id -> index


def cat_op(fusion: Fusion) -> CatOp | None:
    """The fusion's first CatOp, or None."""
    return next((e for e in fusion.exprs() if isinstance(e, CatOp)), None)


def _is_elementwise(expr: Expr) -> bool:
    if isinstance(expr, LoadStoreOp):
        return expr.kind == LoadStoreKind.SET
    return isinstance(expr, _ELEMENTWISE)


def decline_reason(fusion: Fusion) -> str | None:
    """Why this scheduler cannot take ``fusion`` (see the module docstring)."""
    cats = [e for e in fusion.exprs() if isinstance(e, CatOp)]
    if not cats:
        return "no cat"
    if len(cats) > 1:
        return "more than one cat: each runs as a kernel of its own"
    cat = cats[0]
    for expr in fusion.exprs():
        if expr is cat or reads_in_place(fusion, expr) or _is_elementwise(expr):
            continue
        return f"T{expr.output.name} = {expr.op_name}(...): a cat kernel computes elementwise ops"
    feeding = upstream(cat.tensor_inputs)  # the pieces and what they are computed from
    shape = tuple(cat.output.shape)
    for tv in fusion.outputs:
        if id(tv) in feeding:
            return f"output T{tv.name} feeds the cat"
        if tv.definition is None or tv.alias_of is not None:
            return f"output T{tv.name} is an input or a view of one"
        if tuple(tv.shape) != shape:
            return f"output T{tv.name} of shape {list(tv.shape)} is not the cat's {list(shape)}"
    return None


def schedule(fusion: Fusion) -> tuple[TensorView, dict[str, object]]:
    cat = cat_op(fusion)
    if cat is None:
        raise ScheduleError("the cat scheduler needs a CatOp")
    return cat.output, {"pieces": len(cat.tensor_inputs), "threads": THREADS}


def _span(fusion: Fusion) -> int:
    """Elements the kernel's largest index may reach: outputs, inputs, strided spans."""
    span = max((tv.numel for tv in [*fusion.inputs, *fusion.outputs]), default=1)
    for tv in fusion.inputs:
        if tv.strides is not None:
            extents = zip(tv.shape, tv.strides, strict=True)
            span = max(span, sum((e - 1) * stride for e, stride in extents) + 1)
    return span


class _Values:
    """Expression trees of the segment's tensors at an index (memoized per scope: one index
    per tensor within a branch of the cat, or within the outputs' part)."""

    def __init__(
        self, fusion: Fusion, index_dtype: DType, buffer_of: Callable[[TensorView], k.Buffer]
    ) -> None:
        self.fusion = fusion
        self.index_dtype = index_dtype
        self.buffer_of = buffer_of

    def const(self, value: int) -> k.Const:
        return k.const(value, self.index_dtype)

    def value(self, tv: TensorView, index: Index, memo: dict[int, k.KExpr]) -> k.KExpr:
        found = memo.get(id(tv))
        if found is not None:
            return found
        if self.fusion.is_input(tv) or tv.alias_of is not None:
            result: k.KExpr = self._load(tv, index)
        else:
            result = self._compute(tv, index, memo)
        memo[id(tv)] = result
        return result

    def _load(self, tv: TensorView, index: Index) -> k.KExpr:
        offset: k.KExpr = self.const(view_offset(tv))
        for axis, stride in alias_strides(tv):
            position = index.get(id(axis))
            if position is not None and stride:
                offset = k.add(offset, k.mul(position, self.const(stride)))
        return k.Load(self.buffer_of(view_source(tv)), offset, tv.dtype)

    def _compute(self, tv: TensorView, index: Index, memo: dict[int, k.KExpr]) -> k.KExpr:
        expr = tv.definition
        if expr is None or not _is_elementwise(expr):
            op = "no op" if expr is None else expr.op_name
            raise ScheduleError(f"the cat kernel cannot compute T{tv.name} ({op})")

        def read(val: Val) -> k.KExpr:
            if isinstance(val, Scalar):
                return k.Const(val.value, val.dtype)
            assert isinstance(val, TensorView)
            return self.value(val, self._producer_index(expr, val, index), memo)

        if isinstance(expr, UnaryOp):
            return k.Unary(expr.op.value, read(expr.inputs[0]), tv.dtype)
        if isinstance(expr, BinaryOp):
            return k.Binary(expr.op.value, read(expr.inputs[0]), read(expr.inputs[1]), tv.dtype)
        if isinstance(expr, TernaryOp):
            condition, if_true, if_false = (read(val) for val in expr.inputs)
            return k.Select(condition, if_true, if_false, tv.dtype)
        if isinstance(expr, CastOp):
            return k.Cast(read(expr.inputs[0]), tv.dtype)
        return read(expr.inputs[0])  # a copy or a broadcast

    def _producer_index(self, expr: Expr, producer: TensorView, index: Index) -> Index:
        """``producer``'s logical indices from its consumer's: paired axes share the index,
        a broadcast axis reads 0."""
        result: Index = {id(axis): self.const(0) for axis in producer.no_reductions}
        for p_axis, c_axis in expr.logical_pairs(producer):
            if not (p_axis.is_broadcast and p_axis.expanded_extent is None):
                result[id(p_axis)] = index.get(id(c_axis), self.const(0))
        return result


def lower(plan: KernelPlan, name: str) -> k.Kernel:
    """The cat kernel (see the module docstring)."""
    fusion = plan.fusion
    cat = cat_op(fusion)
    if cat is None:
        raise ScheduleError(f"kernel {name}: the cat scheduler got no CatOp")
    shape = tuple(cat.output.shape)
    numel = cat.output.numel
    index_dtype = dtypes.int32 if _span(fusion) < 2**31 else dtypes.int64
    params: list[k.TensorParam] = []
    buffers: dict[str, k.Buffer] = {}

    def buffer_of(tv: TensorView, role: k.ParamRole = k.ParamRole.INPUT) -> k.Buffer:
        buffer = buffers.get(f"T{tv.name}")
        if buffer is None:
            buffer = k.Buffer(f"T{tv.name}", tv.dtype, MemoryType.GLOBAL, tv.numel)
            buffers[buffer.name] = buffer
            index = (fusion.inputs if role == k.ParamRole.INPUT else fusion.outputs).index(tv)
            params.append(k.TensorParam(buffer.name, tv.dtype, role, index, tuple(tv.shape)))
        return buffer

    outputs = [(tv, buffer_of(tv, k.ParamRole.OUTPUT)) for tv in fusion.outputs]
    body: list[k.Stmt] = []
    blocks = max(1, -(-numel // THREADS))
    if numel:
        body = _element_body(cat, outputs, shape, blocks, _Values(fusion, index_dtype, buffer_of))
    params.sort(key=lambda p: (p.role != k.ParamRole.INPUT, p.index))
    return k.Kernel(
        name=name,
        params=params,
        buffers=buffers,
        body=body,
        grid=(blocks, 1, 1),
        block=(THREADS, 1, 1),
        smem_bytes=0,
        index_dtype=index_dtype,
    )


def _element_body(
    cat: CatOp,
    outputs: list[tuple[TensorView, k.Buffer]],
    shape: tuple[int, ...],
    blocks: int,
    values: _Values,
) -> list[k.Stmt]:
    """One thread's statements: its element's indices, the cat's value, every output."""
    index_dtype = values.index_dtype
    bx = k.Var("bx1", index_dtype, blocks)
    tx = k.Var("tx2", index_dtype, THREADS)
    body: list[k.Stmt] = []
    for var, kind, extent in (
        (bx, k.SpecialKind.CTAID_X, blocks),
        (tx, k.SpecialKind.TID_X, THREADS),
    ):
        special: k.KExpr = k.Special(kind, extent, dtypes.int32)
        if index_dtype != dtypes.int32:
            special = k.Cast(special, index_dtype)
        body.append(k.Let(var, special))
    linear = k.Var("i3", index_dtype, None)
    body.append(k.Let(linear, k.add(k.mul(bx, values.const(THREADS)), tx)))
    numel = cat.output.numel
    indices: list[k.KExpr] = []  # row-major
    inner = 1
    for extent in reversed(shape):
        index = k.floordiv(linear, values.const(inner)) if inner > 1 else linear
        if extent != numel // inner:  # the outermost axis needs no modulo
            index = k.mod(index, values.const(extent))
        indices.append(index)
        inner *= extent
    indices.reverse()

    element: list[k.Stmt] = []
    joined = indices[cat.dim]
    dtype = cat.output.dtype
    cat_value = k.Var("cat4", dtype, None)
    element.append(k.Let(cat_value, k.Const(_zero(dtype), dtype)))
    branches: list[tuple[k.KExpr, k.Stmt]] = []
    for piece, start in zip(cat.tensor_inputs, cat.offsets, strict=True):
        extent = piece.shape[cat.dim]
        if extent == 0:
            continue
        at = [
            k.add(joined, values.const(-start)) if d == cat.dim else indices[d]
            for d in range(len(shape))
        ]
        value = values.value(piece, _index_of(piece, at), {})
        if piece.dtype != dtype:
            value = k.Cast(value, dtype)
        end = values.const(start + extent)
        branches.append((k.less_than(joined, end), k.Assign(cat_value, value)))
    chain: list[k.Stmt] = []
    for condition, assign in reversed(branches):
        chain = [assign] if not chain else [k.If(condition, [assign], chain)]
    element.extend(chain)
    memo: dict[int, k.KExpr] = {id(cat.output): cat_value}
    for tv, buffer in outputs:
        element.append(k.Store(buffer, linear, values.value(tv, _index_of(tv, indices), memo)))
    if cat.output.numel % THREADS:
        element = [k.If(k.less_than(linear, values.const(cat.output.numel)), element)]
    body.extend(element)
    return body


def _zero(dtype: DType) -> bool | int | float:
    return False if dtype.is_bool else 0.0 if dtype.is_floating else 0


def _index_of(tv: TensorView, indices: list[k.KExpr]) -> Index:
    return {id(axis): index for axis, index in zip(tv.no_reductions, indices, strict=True)}
