"""A fusion as a Python script that rebuilds it: nvFuser's ``repr(fd)``, for pyfuse.

:func:`fusion_to_script` renders a traced fusion (math IR) as a fused function of ``pf.*``
calls, one per expr and named after the IR's tensors (``T3 = pf.sum(T2, 1)``, so a message's
T-numbers name script lines), each with the user's line as a comment; its inputs as
``pf.spec`` s (shape, dtype, strides); and a ``.compile`` of them when run as a program::

    import pyfuse as pf


    @pf.fuse(name="softmax")
    def fusion(T0):
        T1 = pf.max(T0, 1)  # model.py:12
        ...
        return T8


    inputs = [pf.spec((4, 8), pf.float32)]

    if __name__ == "__main__":
        print(fusion.compile(*inputs))

Tracing the script gives a fusion equal to the original in :func:`structure`: the builders
are deterministic, and each IR expr has one call that makes exactly it. Three exprs only the
builders insert (keepdim's broadcast of several axes, the copy of a returned input, the copy
that materializes an expanded tensor) are spelled with ``pyfuse.frontend.ops``'s
``broadcast``, ``set_copy`` and ``materialize``. :class:`pyfuse.errors.InternalError`
carries this script.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pyfuse.ir.dtypes import DType
from pyfuse.ir.exprs import (
    BinaryOp,
    BroadcastOp,
    CastOp,
    CatOp,
    ExpandOp,
    Expr,
    IotaOp,
    LinearOp,
    LoadStoreKind,
    LoadStoreOp,
    MatmulOp,
    PermuteOp,
    ReductionOp,
    ReshapeOp,
    SliceOp,
    SqueezeOp,
    TernaryOp,
    UnaryOp,
    UnaryOpType,
)
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.iterdomain import IterDomain
from pyfuse.ir.tensor import Scalar, TensorView, Val

# The dtypes ``import pyfuse`` exports, by DType.name -> the attribute of ``pf``.
_PUBLIC_DTYPES = {
    "float32": "float32",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "int8": "int8",
    "uint8": "uint8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "bool": "bool",
}
_IR_OPS = "ir_ops"  # the script's name for pyfuse.frontend.ops (its IR-only ops)


def literal(value: object) -> str:
    """``value`` as Python source: a number (inf and nan included), a dtype, a sequence."""
    if isinstance(value, bool | int):
        return repr(value)
    if isinstance(value, float):
        if math.isnan(value):
            return 'float("nan")'
        if math.isinf(value):
            return 'float("inf")' if value > 0 else 'float("-inf")'
        return repr(value)
    if isinstance(value, DType):
        return dtype_literal(value)
    if isinstance(value, tuple):
        items = [literal(item) for item in value]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    if isinstance(value, list):
        return f"[{', '.join(literal(item) for item in value)}]"
    return repr(value)


def dtype_literal(dtype: DType) -> str:
    public = _PUBLIC_DTYPES.get(dtype.name)
    return f"pf.{public}" if public is not None else f"dtypes.{dtype.name}"


def _dims(dims: Sequence[int]) -> str:
    """One dim as an int, several as a list (both mean the same to the ops)."""
    return str(dims[0]) if len(dims) == 1 else literal(list(dims))


def _materializes(expr: LoadStoreOp) -> bool:
    """A copy made by ``materialize``: an expanded broadcast input axis is real in the output."""
    return any(
        axis.expanded_extent is not None and not out_axis.is_broadcast
        for axis, out_axis in zip(expr.input.no_reductions, expr.output.logical, strict=True)
    )


def expr_call(expr: Expr, operand: dict[int, str] | None = None) -> str:
    """The ``pf.*`` call that traces exactly ``expr``; ``operand`` names tensors by ``id``
    (default ``T<n>``). ValueError for an expr no call makes (one a pass created)."""

    def name(val: Val) -> str:
        if isinstance(val, Scalar):
            return literal(val.value)
        assert isinstance(val, TensorView)  # an expr's operands are tensors or scalars
        if operand is not None and id(val) in operand:
            return operand[id(val)]
        return f"T{val.name}"

    args = [name(val) for val in expr.inputs]
    out = expr.output
    if isinstance(expr, UnaryOp):
        if expr.op == UnaryOpType.GELU_TANH:
            return f'pf.gelu({args[0]}, approximate="tanh")'
        return f"pf.{expr.op.value}({args[0]})"
    if isinstance(expr, BinaryOp):
        return f"pf.{expr.op.value}({args[0]}, {args[1]})"
    if isinstance(expr, TernaryOp):
        return f"pf.where({', '.join(args)})"
    if isinstance(expr, CastOp):
        return f"pf.cast({args[0]}, {dtype_literal(out.dtype)})"
    if isinstance(expr, BroadcastOp):
        new = [index for index, flag in enumerate(expr.is_new) if flag]
        if len(new) == 1:
            return f"pf.unsqueeze({args[0]}, {new[0]})"
        return f"{_IR_OPS}.broadcast({args[0]}, {literal(list(expr.is_new))})"
    if isinstance(expr, ExpandOp):
        return f"pf.broadcast_to({args[0]}, {literal(out.shape)})"
    if isinstance(expr, SqueezeOp):
        return f"pf.squeeze({args[0]}, {_dims(expr.dims)})"
    if isinstance(expr, PermuteOp):
        return f"pf.permute({args[0]}, {literal(expr.perm)})"
    if isinstance(expr, ReshapeOp):
        return f"pf.reshape({args[0]}, {literal(out.shape)})"
    if isinstance(expr, CatOp):
        return f"pf.cat([{', '.join(args)}], {expr.dim})"
    if isinstance(expr, SliceOp):
        windows = [
            f"{start}:{start + step * axis.logical_extent}:{step}"
            for axis, start, step in zip(out.logical, expr.starts, expr.steps, strict=True)
        ]
        return f"{args[0]}[{', '.join(windows)}]"
    if isinstance(expr, ReductionOp):
        return f"pf.{expr.op.value}({args[0]}, {_dims(expr.axes)})"
    if isinstance(expr, MatmulOp):
        return f"pf.matmul({args[0]}, {args[1]})"
    if isinstance(expr, IotaOp):
        return f"pf.iota({literal(out.shape)}, {expr.dim}, {dtype_literal(out.dtype)})"
    if isinstance(expr, LinearOp):
        return f"pf.linear({', '.join(args)})"
    if isinstance(expr, LoadStoreOp) and expr.kind == LoadStoreKind.SET:
        function = "materialize" if _materializes(expr) else "set_copy"
        return f"{_IR_OPS}.{function}({args[0]})"
    raise ValueError(f"no pf call makes {expr.op_name} (T{out.name}); is it a pass's expr?")


def input_spec(tv: TensorView) -> str:
    shape = literal(tv.shape)
    if tv.strides is None:
        return f"pf.spec({shape}, {dtype_literal(tv.dtype)})"
    return f"pf.spec({shape}, {dtype_literal(tv.dtype)}, strides={literal(tv.strides)})"


def fusion_to_script(
    fusion: Fusion,
    *,
    matmul: str | None = None,
    last_call: str | None = None,
    header: Sequence[str] = (),
) -> str:
    """The script that rebuilds ``fusion`` (see the module docstring). ``matmul``: the
    ``pf.MatmulParams(...)`` source to fuse with; ``last_call``: a call the function returns
    after the fusion's exprs (the op that failed while a fusion was being traced), in place
    of its outputs; ``header``: comment lines to put first."""
    body = []
    for expr in fusion.exprs():
        line = f"    T{expr.output.name} = {expr_call(expr)}"
        if expr.source:
            line += f"  # {expr.source}"
        body.append(line)
    if last_call is not None:
        body.append(f"    return {last_call}")
    else:
        body.append(f"    return {', '.join(f'T{tv.name}' for tv in fusion.outputs)}")
    code = "\n".join(body)
    options = [f"name={fusion.name!r}"]
    if matmul is not None:
        options.append(f"matmul={matmul}")
    params = ", ".join(f"T{tv.name}" for tv in fusion.inputs)
    lines = [f"# {line}" for line in header]
    lines.append("import pyfuse as pf")
    if f"{_IR_OPS}." in code:
        lines.append(f"from pyfuse.frontend import ops as {_IR_OPS}")
    specs = [input_spec(tv) for tv in fusion.inputs]
    if "dtypes." in code or any("dtypes." in text for text in specs):
        lines.append("from pyfuse.ir import dtypes")
    lines += ["", "", f"@pf.fuse({', '.join(options)})", f"def fusion({params}):", code, ""]
    lines.append("")
    lines.append("inputs = [")
    lines += [f"    {text}," for text in specs]
    lines += ["]", "", 'if __name__ == "__main__":', "    print(fusion.compile(*inputs))", ""]
    return "\n".join(lines)


def structure(fusion: Fusion) -> str:
    """The fusion with its tensors and axes numbered by first appearance: two fusions with
    equal structures differ only in the names their values were given (a fusion and the
    trace of its script)."""
    tensors: dict[int, str] = {}
    axes: dict[int, str] = {}

    def axis_text(axis: IterDomain) -> str:
        number = axes.setdefault(id(axis), str(len(axes)))
        extent = str(axis.extent)
        if axis.expanded_extent is not None:
            extent += f" ex {axis.expanded_extent}"
        return f"{axis.iter_type.value}{axis.parallel_type.value}{number}{{{extent}}}"

    def domain(tv: TensorView) -> str:
        text = f"{tv.dtype.short}[{', '.join(axis_text(axis) for axis in tv.logical)}]"
        if tv.root is not None:
            text += f" root[{', '.join(axis_text(axis) for axis in tv.root)}]"
        if tv.allocation is not None:
            flags = ["-" if f is None else ("t" if f else "f") for f in tv.maybe_contiguity]
            allocation = ", ".join(axis_text(axis) for axis in tv.allocation)
            text += f" allocation[{allocation}] contiguity({' '.join(flags)})"
        if tv.strides is not None:
            text += f" strides{tv.strides}"
        return text

    def tensor(tv: TensorView) -> str:
        return tensors.setdefault(id(tv), f"t{len(tensors)}")

    def operand(val: Val) -> str:
        if isinstance(val, TensorView):
            return tensor(val)
        if isinstance(val, Scalar):
            return f"{val.value!r}:{val.dtype.short}"
        return "?"

    lines = []
    for tv in fusion.inputs:
        lines.append(f"input {tensor(tv)} {domain(tv)} {tv.memory_type.name}")
    for expr in fusion.exprs():
        inputs = ", ".join(operand(val) for val in expr.inputs)
        outputs = ", ".join(
            f"{operand(val)} {domain(val)} {val.memory_type.name}"
            if isinstance(val, TensorView)
            else operand(val)
            for val in expr.outputs
        )
        kind = type(expr).__name__
        lines.append(f"{outputs} = {kind}.{expr.op_name}({inputs}) {expr.attributes()}")
    lines.append(f"outputs {', '.join(tensor(tv) for tv in fusion.outputs)}")
    return "\n".join(lines)
