"""The cat scheduler: ``torch.cat`` as a kernel of its own.

A CatOp's inputs have their own extents along the joined axis, so no loop nest of the SIMT
schedulers covers them: the cat runs in a kernel that takes nothing else but the views of
inputs that feed it (read in place, as aliases). The segmenter gives it such a segment:
every other scheduler declines a fusion holding a CatOp, and this one declines anything but
view ops of the segment's inputs followed by one CatOp whose result is the only output.
The inputs of that segment are fusion inputs or tensors earlier kernels wrote; the output
is written contiguously for the kernels after it to read.

Lowering builds the kernel IR directly: one thread per output element, its index split into
the output's logical indices; along the joined axis a chain of branches picks the input that
holds the element, whose memory is read at its own strides (an alias's through its view
chain) and offset, and cast to the output's dtype where cat promoted it.

Expects a segment as described; guarantees a kernel that writes every output element once.
"""

from __future__ import annotations

from pyfuse.errors import ScheduleError
from pyfuse.ir import dtypes
from pyfuse.ir import kernel_ir as k
from pyfuse.ir.exprs import CatOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.tensor import MemoryType, TensorView
from pyfuse.passes.plan import KernelPlan
from pyfuse.passes.skip_intermediates import (
    alias_strides,
    is_view_op,
    view_allocation,
    view_offset,
    view_source,
)

NAME = "cat"
THREADS = 256  # one element per thread: a copy kernel, bound by memory


def cat_op(fusion: Fusion) -> CatOp | None:
    """The fusion's first CatOp, or None."""
    return next((e for e in fusion.exprs() if isinstance(e, CatOp)), None)


def decline_reason(fusion: Fusion) -> str | None:
    """Why this scheduler cannot take ``fusion``: it takes one CatOp, the views of inputs it
    reads, and nothing else."""
    cats = [e for e in fusion.exprs() if isinstance(e, CatOp)]
    if not cats:
        return "no cat"
    if len(cats) > 1:
        return "more than one cat: each runs as a kernel of its own"
    cat = cats[0]
    for expr in fusion.exprs():
        if expr is cat:
            continue
        if not is_view_op(expr) or not fusion.is_input(view_source(expr.output)):
            return f"T{expr.output.name} is computed: a cat kernel only reads views of inputs"
        if view_allocation(expr, expr.tensor_inputs[0]) is None:
            return f"T{expr.output.name} is a view that moves data (no alias reads it in place)"
        if fusion.is_output(expr.output):
            return f"T{expr.output.name} is an output beside the cat"
    if list(fusion.outputs) != [cat.output]:
        return f"the cat's result T{cat.output.name} must be the kernel's only output"
    return None


def schedule(fusion: Fusion) -> tuple[TensorView, dict[str, object]]:
    cat = cat_op(fusion)
    if cat is None:
        raise ScheduleError("the cat scheduler needs a CatOp")
    return cat.output, {"pieces": len(cat.tensor_inputs), "threads": THREADS}


def _strides_of(tv: TensorView) -> dict[int, int]:
    """Element stride of each logical axis of ``tv`` in the memory it reads (0 for axes that
    take none)."""
    return {id(axis): stride for axis, stride in alias_strides(tv)}


def _span(fusion: Fusion) -> int:
    """Elements the kernel's largest index may reach: outputs, inputs, strided spans."""
    span = max((tv.numel for tv in [*fusion.inputs, *fusion.outputs]), default=1)
    for tv in fusion.inputs:
        if tv.strides is not None:
            extents = zip(tv.shape, tv.strides, strict=True)
            span = max(span, sum((e - 1) * stride for e, stride in extents) + 1)
    return span


def lower(plan: KernelPlan, name: str) -> k.Kernel:
    """The cat kernel (see the module docstring)."""
    fusion = plan.fusion
    cat = cat_op(fusion)
    if cat is None:
        raise ScheduleError(f"kernel {name}: the cat scheduler got no CatOp")
    out = cat.output
    numel = out.numel
    span = max([numel, *(view_source(tv).numel for tv in cat.tensor_inputs)])
    for tv in fusion.inputs:
        if tv.strides is not None:
            span = max(
                span, sum((e - 1) * s for e, s in zip(tv.shape, tv.strides, strict=True)) + 1
            )
    index_dtype = dtypes.int32 if span < 2**31 else dtypes.int64
    params: list[k.TensorParam] = []
    buffers: dict[str, k.Buffer] = {}

    def buffer_of(tv: TensorView, role: k.ParamRole) -> k.Buffer:
        buffer = buffers.get(f"T{tv.name}")
        if buffer is None:
            buffer = k.Buffer(f"T{tv.name}", tv.dtype, MemoryType.GLOBAL, tv.numel)
            buffers[buffer.name] = buffer
            index = (fusion.inputs if role == k.ParamRole.INPUT else fusion.outputs).index(tv)
            params.append(k.TensorParam(buffer.name, tv.dtype, role, index, tuple(tv.shape)))
        return buffer

    output = buffer_of(out, k.ParamRole.OUTPUT)
    if numel == 0:
        return k.Kernel(name, params, buffers, [], (1, 1, 1), (THREADS, 1, 1), 0, index_dtype)
    blocks = max(1, -(-numel // THREADS))
    bx = k.Var("bx1", index_dtype, blocks)
    tx = k.Var("tx2", index_dtype, THREADS)
    body: list[k.Stmt] = []
    for var, kind, extent in (
        (bx, k.SpecialKind.CTAID_X, blocks),
        (tx, k.SpecialKind.TID_X, THREADS),
    ):
        special: k.KExpr = k.Special(kind, extent, dtypes.int32)
        body.append(
            k.Let(var, special if index_dtype == dtypes.int32 else k.Cast(special, index_dtype))
        )
    linear = k.Var("i3", index_dtype, None)
    body.append(k.Let(linear, k.add(k.mul(bx, k.const(THREADS, index_dtype)), tx)))
    # The output's logical indices, row-major.
    indices: list[k.KExpr] = []
    inner = 1
    for extent in reversed(out.shape):
        index = k.floordiv(linear, k.const(inner, index_dtype)) if inner > 1 else linear
        indices.append(
            k.mod(index, k.const(extent, index_dtype)) if extent != numel // inner else index
        )
        inner *= extent
    indices.reverse()
    joined = indices[cat.dim]

    branches: list[tuple[k.KExpr, k.Stmt]] = []
    for tv, start in zip(cat.tensor_inputs, cat.offsets, strict=True):
        extent = tv.shape[cat.dim]
        if extent == 0:
            continue
        if tv.definition is not None and tv.alias_of is None:
            raise ScheduleError(f"kernel {name}: T{tv.name} is computed, not a view read in place")
        source = view_source(tv)
        buffer = buffer_of(source, k.ParamRole.INPUT)
        strides = _strides_of(tv)
        offset: k.KExpr = k.const(view_offset(tv), index_dtype)
        for d, axis in enumerate(tv.no_reductions):
            stride = strides.get(id(axis), 0)
            if stride == 0:
                continue
            position = k.add(joined, k.const(-start, index_dtype)) if d == cat.dim else indices[d]
            offset = k.add(offset, k.mul(position, k.const(stride, index_dtype)))
        value: k.KExpr = k.Load(buffer, offset, tv.dtype)
        if tv.dtype != out.dtype:
            value = k.Cast(value, out.dtype)
        branches.append(
            (
                k.less_than(joined, k.const(start + extent, index_dtype)),
                k.Store(output, linear, value),
            )
        )
    chain: list[k.Stmt] = []
    for condition, store in reversed(branches):
        chain = [store] if not chain else [k.If(condition, [store], chain)]
    if numel % THREADS:
        chain = [k.If(k.less_than(linear, k.const(numel, index_dtype)), chain)]
    body.extend(chain)
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
