"""The public ops, ``pf.add`` ... ``pf.linear``, as called inside a fused function.

Each op unwraps its :class:`~pyfuse.frontend.tensor.Tensor` arguments, calls the IR builder
in :mod:`pyfuse.ir.ops` and wraps the result. :func:`user_op` gives every error the op's
name and the user's line. The Tensor's operators and methods call these ops by name, through
the registry of :mod:`~pyfuse.frontend.tensor_methods` (:func:`tensor_method`), so that
``x @ w.T + b`` and ``pf.add(pf.matmul(x, ...), b)`` trace the same IR and the Tensor's
module stands under this one. The composites (softmax, layer_norm, clamp, var...) live in
:mod:`pyfuse.frontend.composites`, traced from these ops.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence

from pyfuse.errors import FusionError
from pyfuse.frontend.arguments import (
    Dims,
    Keepdims,
    check_scalars_fit,
    reduction_arguments,
    reduction_dims,
    scalar_value,
)
from pyfuse.frontend.location import user_op

# ``pyfuse/__init__.py`` takes every public op, and the Tensor, from this module: those of
# shape_ops and tensor are re-exported here.
from pyfuse.frontend.shape_ops import broadcast_to as broadcast_to
from pyfuse.frontend.shape_ops import cat as cat
from pyfuse.frontend.shape_ops import permute as permute
from pyfuse.frontend.shape_ops import reshape as reshape
from pyfuse.frontend.shape_ops import squeeze as squeeze
from pyfuse.frontend.shape_ops import stack as stack
from pyfuse.frontend.shape_ops import transpose as transpose
from pyfuse.frontend.shape_ops import unsqueeze as unsqueeze
from pyfuse.frontend.tensor import Tensor as Tensor
from pyfuse.frontend.tensor import TensorLike, tensor_view
from pyfuse.frontend.tensor_methods import ValuesAndIndices, tensor_method
from pyfuse.ir import ops as ir_ops
from pyfuse.ir.dtypes import DType
from pyfuse.ir.exprs import BinaryOpType, ReductionOpType, UnaryOpType
from pyfuse.ir.tensor import TensorView

Number = bool | int | float


def _operand(value: object) -> TensorView | Number:
    if isinstance(value, Tensor):
        return value.tv
    number = scalar_value(value)
    if number is not None:
        return number
    if isinstance(value, ValuesAndIndices):
        raise FusionError(
            f"x.{value.op}(dim) is a (values, indices) pair, as in torch: use its .values or "
            ".indices"
        )
    if type(value).__module__ == "numpy":
        raise FusionError(
            f"a NumPy {type(value).__name__} is not a traced tensor: pass it to the fused "
            "function as an argument"
        )
    raise FusionError(f"operand must be a tensor or a Python number, got {type(value).__name__}")


def _unary(op: UnaryOpType, x: Tensor) -> Tensor:
    return Tensor(ir_ops.unary(op, tensor_view(x)))


# Ops whose math is not the operands' result type: true division is float, logic is bool.
_NOT_PROMOTED = (BinaryOpType.DIV, BinaryOpType.LOGICAL_AND, BinaryOpType.LOGICAL_OR)


def _binary(op: BinaryOpType, lhs: TensorLike, rhs: TensorLike) -> Tensor:
    operands = (_operand(lhs), _operand(rhs))
    if op not in _NOT_PROMOTED:
        check_scalars_fit(operands)
    return Tensor(ir_ops.binary(op, *operands))


# ---- pointwise ------------------------------------------------------------------------------
# Binary ops broadcast like NumPy and promote like torch (``int32 + 2.5`` is float32,
# ``bf16 * 2.0`` stays bf16); either side may be a Python number.


@tensor_method
@user_op("add")
def add(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """``lhs + rhs`` elementwise (torch.add without alpha): ``pf.add(x, 1.0)``."""
    return _binary(BinaryOpType.ADD, lhs, rhs)


@tensor_method
@user_op("sub")
def sub(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """``lhs - rhs`` elementwise (torch.sub): ``pf.sub(x, y)``."""
    return _binary(BinaryOpType.SUB, lhs, rhs)


@tensor_method
@user_op("mul")
def mul(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """``lhs * rhs`` elementwise (torch.mul): ``pf.mul(x, 0.5)``."""
    return _binary(BinaryOpType.MUL, lhs, rhs)


@tensor_method
@user_op("div")
def div(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """True division (integer inputs give a float result, like torch's ``/``): ``pf.div(x, y)``."""
    return _binary(BinaryOpType.DIV, lhs, rhs)


@tensor_method
@user_op("pow")
def pow(base: TensorLike, exponent: TensorLike) -> Tensor:  # noqa: A001 - torch's name
    """``base ** exponent`` elementwise (torch.pow): ``pf.pow(x, 2.0)``."""
    return _binary(BinaryOpType.POW, base, exponent)


@tensor_method
@user_op("maximum")
def maximum(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """Elementwise maximum, NaN if either is NaN (torch.maximum): ``pf.maximum(x, 0.0)``."""
    return _binary(BinaryOpType.MAXIMUM, lhs, rhs)


@tensor_method
@user_op("minimum")
def minimum(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """Elementwise minimum, NaN if either is NaN (torch.minimum): ``pf.minimum(x, y)``."""
    return _binary(BinaryOpType.MINIMUM, lhs, rhs)


@tensor_method
@user_op("eq")
def eq(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """``lhs == rhs`` as a bool tensor (torch.eq): ``pf.eq(x, 0)``."""
    return _binary(BinaryOpType.EQ, lhs, rhs)


@tensor_method
@user_op("ne")
def ne(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """``lhs != rhs`` as a bool tensor, True for NaN (torch.ne): ``pf.ne(x, y)``."""
    return _binary(BinaryOpType.NE, lhs, rhs)


@tensor_method
@user_op("lt")
def lt(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """``lhs < rhs`` as a bool tensor (torch.lt): ``pf.lt(x, 0.5)``."""
    return _binary(BinaryOpType.LT, lhs, rhs)


@tensor_method
@user_op("le")
def le(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """``lhs <= rhs`` as a bool tensor (torch.le): ``pf.le(x, y)``."""
    return _binary(BinaryOpType.LE, lhs, rhs)


@tensor_method
@user_op("gt")
def gt(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """``lhs > rhs`` as a bool tensor (torch.gt): ``pf.gt(x, 0)``."""
    return _binary(BinaryOpType.GT, lhs, rhs)


@tensor_method
@user_op("ge")
def ge(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """``lhs >= rhs`` as a bool tensor (torch.ge): ``pf.ge(x, y)``."""
    return _binary(BinaryOpType.GE, lhs, rhs)


@tensor_method
@user_op("logical_and")
def logical_and(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """Both nonzero, as a bool tensor (torch.logical_and): ``pf.logical_and(x > 0, y > 0)``."""
    return _binary(BinaryOpType.LOGICAL_AND, lhs, rhs)


@tensor_method
@user_op("logical_or")
def logical_or(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """Either nonzero, as a bool tensor (torch.logical_or): ``pf.logical_or(x > 0, m)``."""
    return _binary(BinaryOpType.LOGICAL_OR, lhs, rhs)


@tensor_method
@user_op("logical_not")
def logical_not(x: Tensor) -> Tensor:
    """``x == 0`` as a bool tensor (torch.logical_not): ``pf.logical_not(mask)``."""
    return _unary(UnaryOpType.LOGICAL_NOT, x)


@tensor_method
@user_op("neg")
def neg(x: Tensor) -> Tensor:
    """``-x`` (torch.neg; not for bool tensors): ``pf.neg(x)``."""
    return _unary(UnaryOpType.NEG, x)


@tensor_method
@user_op("abs")
def abs(x: Tensor) -> Tensor:  # noqa: A001 - torch's name
    """``|x|`` elementwise (torch.abs): ``pf.abs(x)``."""
    return _unary(UnaryOpType.ABS, x)


@tensor_method
@user_op("exp")
def exp(x: Tensor) -> Tensor:
    """``e ** x`` (torch.exp; integers compute in float32): ``pf.exp(x)``."""
    return _unary(UnaryOpType.EXP, x)


@tensor_method
@user_op("log")
def log(x: Tensor) -> Tensor:
    """Natural logarithm, NaN below 0 and -inf at 0 (torch.log): ``pf.log(x)``."""
    return _unary(UnaryOpType.LOG, x)


@tensor_method
@user_op("tanh")
def tanh(x: Tensor) -> Tensor:
    """Hyperbolic tangent (torch.tanh): ``pf.tanh(x)``."""
    return _unary(UnaryOpType.TANH, x)


@tensor_method
@user_op("sigmoid")
def sigmoid(x: Tensor) -> Tensor:
    """``1 / (1 + exp(-x))`` (torch.sigmoid): ``pf.sigmoid(x)``."""
    return _unary(UnaryOpType.SIGMOID, x)


@tensor_method
@user_op("relu")
def relu(x: Tensor) -> Tensor:
    """``max(x, 0)``, NaN stays NaN (torch.relu): ``pf.relu(x)``."""
    return _unary(UnaryOpType.RELU, x)


@user_op("gelu")
def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """GELU; ``approximate="tanh"`` is the tanh form (torch's names): ``pf.gelu(x)``."""
    if approximate == "none":
        return _unary(UnaryOpType.GELU, x)
    if approximate == "tanh":
        return _unary(UnaryOpType.GELU_TANH, x)
    raise FusionError(f'approximate must be "none" or "tanh", got {approximate!r}')


@user_op("silu")
def silu(x: Tensor) -> Tensor:
    """``x * sigmoid(x)`` (torch.nn.functional.silu): ``pf.silu(x)``."""
    return _unary(UnaryOpType.SILU, x)


@tensor_method
@user_op("sqrt")
def sqrt(x: Tensor) -> Tensor:
    """Square root, NaN below 0 (torch.sqrt): ``pf.sqrt(x)``."""
    return _unary(UnaryOpType.SQRT, x)


@tensor_method
@user_op("rsqrt")
def rsqrt(x: Tensor) -> Tensor:
    """``1 / sqrt(x)`` (torch.rsqrt): ``pf.rsqrt(var + 1e-5)``."""
    return _unary(UnaryOpType.RSQRT, x)


@tensor_method
@user_op("reciprocal")
def reciprocal(x: Tensor) -> Tensor:
    """``1 / x`` (torch.reciprocal; integers give float32): ``pf.reciprocal(x)``."""
    return _unary(UnaryOpType.RECIPROCAL, x)


@tensor_method
@user_op("sin")
def sin(x: Tensor) -> Tensor:
    """Sine (torch.sin): ``pf.sin(x)``."""
    return _unary(UnaryOpType.SIN, x)


@tensor_method
@user_op("cos")
def cos(x: Tensor) -> Tensor:
    """Cosine (torch.cos): ``pf.cos(x)``."""
    return _unary(UnaryOpType.COS, x)


@user_op("where")
def where(condition: TensorLike, if_true: TensorLike, if_false: TensorLike) -> Tensor:
    """``if_true`` where the bool ``condition`` holds, else ``if_false`` (torch.where):
    ``pf.where(x > 0, x, 0.0)``."""
    mask = _operand(condition)
    _check_condition(mask)
    values = (_operand(if_true), _operand(if_false))
    if builtins.any(isinstance(value, TensorView) for value in values):
        check_scalars_fit(values)
    return Tensor(ir_ops.where(mask, *values))


def _check_condition(condition: TensorView | Number) -> None:
    """torch.where's rule: the condition is a bool tensor (a Python bool here too). Another
    dtype would be read as ``!= 0``, which torch refuses; its uint8, deprecated, too."""
    if isinstance(condition, TensorView):
        if condition.dtype.is_bool:
            return
        got = f"a tensor of {condition.dtype.name}"
        if condition.dtype.name == "uint8":
            got += " (torch takes uint8 with a deprecation warning; pyfuse does not)"
    elif isinstance(condition, bool):
        return
    else:
        got = f"{type(condition).__name__} {condition!r}"
    raise FusionError(
        f"the condition must be a bool tensor, as in torch, got {got}: compare it "
        "(x != 0, x > 0.5) or convert it (x.bool())"
    )


@tensor_method
@user_op("cast")
def cast(x: Tensor, dtype: DType) -> Tensor:
    """``x`` converted to ``dtype`` (torch's ``x.to(dtype)``; float to int truncates):
    ``pf.cast(x, pf.bfloat16)``."""
    if not isinstance(dtype, DType):
        raise FusionError(f"dtype must be a pyfuse dtype such as pf.bfloat16, got {dtype!r}")
    return Tensor(ir_ops.cast(tensor_view(x), dtype))


# ---- reductions -----------------------------------------------------------------------------
# ``dim`` and ``keepdim`` also go by NumPy's names, ``axis`` and ``keepdims``, as torch's
# argument parser accepts them (``x.sum(axis=1, keepdims=True)``); both names at once raise.


def _reduce(
    op: ReductionOpType, x: Tensor, dim: Dims, keepdim: bool, axis: Dims, keepdims: Keepdims
) -> Tensor:
    dim, keep = reduction_arguments(dim, keepdim, axis, keepdims)
    return Tensor(ir_ops.reduce(op, tensor_view(x), reduction_dims(x, dim), keep))


@tensor_method
@user_op("sum")
def sum(  # noqa: A001 - torch's name
    x: Tensor,
    dim: Dims = None,
    keepdim: bool = False,
    *,
    axis: Dims = None,
    keepdims: Keepdims = None,
) -> Tensor:
    """Sum over ``dim`` (all by default); ints and bools sum in int64 (torch.sum):
    ``pf.sum(x, -1, keepdim=True)``."""
    return _reduce(ReductionOpType.SUM, x, dim, keepdim, axis, keepdims)


@tensor_method
@user_op("prod")
def prod(
    x: Tensor,
    dim: Dims = None,
    keepdim: bool = False,
    *,
    axis: Dims = None,
    keepdims: Keepdims = None,
) -> Tensor:
    """The product over ``dim`` (all by default); ints and bools multiply in int64, 16-bit
    floats in float32 (torch.prod, also over several dims): ``pf.prod(x, -1)``."""
    return _reduce(ReductionOpType.PROD, x, dim, keepdim, axis, keepdims)


@tensor_method
@user_op("max")
def max(  # noqa: A001 - torch's name
    x: Tensor,
    dim: Dims | Tensor = None,
    keepdim: bool = False,
    *,
    axis: Dims = None,
    keepdims: Keepdims = None,
) -> Tensor:
    """The largest value over ``dim`` (NaN propagates), or with a tensor second argument the
    elementwise maximum like torch.max(x, other): ``pf.max(x, 1)``. Unlike torch.max(x, dim),
    gives the values only (``x.max(dim)`` gives torch's pair; ``pf.argmax`` the indices);
    ``pf.amax`` is the same reduction."""
    if isinstance(dim, Tensor):
        return maximum(x, dim)
    return _reduce(ReductionOpType.MAX, x, dim, keepdim, axis, keepdims)


@tensor_method
@user_op("min")
def min(  # noqa: A001 - torch's name
    x: Tensor,
    dim: Dims | Tensor = None,
    keepdim: bool = False,
    *,
    axis: Dims = None,
    keepdims: Keepdims = None,
) -> Tensor:
    """The smallest value over ``dim`` (NaN propagates), or with a tensor second argument the
    elementwise minimum like torch.min(x, other): ``pf.min(x, 0)``. Values only, as
    ``pf.amin``."""
    if isinstance(dim, Tensor):
        return minimum(x, dim)
    return _reduce(ReductionOpType.MIN, x, dim, keepdim, axis, keepdims)


@tensor_method
@user_op("mean")
def mean(
    x: Tensor,
    dim: Dims = None,
    keepdim: bool = False,
    *,
    axis: Dims = None,
    keepdims: Keepdims = None,
) -> Tensor:
    """Mean over ``dim`` of a float tensor; NaN over no elements (torch.mean):
    ``pf.mean(x, -1)``."""
    dim, keep = reduction_arguments(dim, keepdim, axis, keepdims)
    return Tensor(ir_ops.mean(tensor_view(x), reduction_dims(x, dim), keep))


# ---- matmul ---------------------------------------------------------------------------------


@tensor_method
@user_op("matmul")
def matmul(a: Tensor, b: Tensor) -> Tensor:
    """torch.matmul semantics: batch axes broadcast; 1-D operands are vectors; the product
    accumulates in fp32: ``pf.matmul(x, w)`` (``x @ w``)."""
    return Tensor(ir_ops.matmul(tensor_view(a, "a"), tensor_view(b, "b")))


@user_op("linear")
def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight.T + bias`` (torch.nn.functional.linear): ``pf.linear(x, w, b)``; the bias
    has shape ``(N,)`` for ``weight [N, K]``, or ``()`` or ``(1,)``, broadcast as in torch. A
    weight ``[K]`` gives ``x @ weight``, without x's last dim, and a bias ``()``."""
    x_tv, weight_tv = tensor_view(x, "x"), tensor_view(weight, "weight")
    bias_tv = None if bias is None else tensor_view(bias, "bias")
    if weight_tv.ndim == 1:
        return Tensor(_vector_linear(x_tv, weight_tv, bias_tv))
    if bias_tv is not None and weight_tv.ndim == 2:  # else the IR's linear says what is wrong
        features = weight_tv.shape[0]
        if bias_tv.shape not in ((), (1,), (features,)):
            raise FusionError(
                f"bias must have shape ({features},), (1,) or () for a weight of shape "
                f"{weight_tv.shape}, got {bias_tv.shape}"
            )
        # The LinearOp takes a bias [N] (its epilogue reads one value per output column):
        # one value is broadcast to N, and the IR's linear reads a copy of that broadcast.
        bias_tv = ir_ops.broadcast_to(bias_tv, (features,))
    return Tensor(ir_ops.linear(x_tv, weight_tv, bias_tv))


def _vector_linear(x: TensorView, weight: TensorView, bias: TensorView | None) -> TensorView:
    """F.linear of a weight ``[K]``: ``x @ weight`` (a matmul with a vector, as ``x @ v``,
    which the passes run as a multiply-then-sum), plus the bias of shape ``()`` torch's
    documentation gives it (torch's own eager call refuses a bias for a 2-D x, pytorch#188891;
    a 3-D x takes it)."""
    if bias is not None:
        if bias.shape != ():
            raise FusionError(
                f"bias must have shape () for a weight of shape {weight.shape}, got {bias.shape}"
            )
        if bias.dtype != x.dtype:
            raise FusionError(f"bias dtype {bias.dtype.name} differs from input's {x.dtype.name}")
    if x.ndim == 0:
        raise FusionError(f"input must have rank >= 1, got shape {x.shape}")
    if x.shape[-1] != weight.shape[0]:
        raise FusionError(
            f"input's last size {x.shape[-1]} differs from the weight's K = {weight.shape[0]}"
        )
    product = ir_ops.matmul(x, weight)
    return product if bias is None else ir_ops.binary(BinaryOpType.ADD, product, bias)


# ---- IR ops without a public op of their own ------------------------------------------------
# A repro script (``pyfuse.ir.script``) spells these: the builders insert them (keepdim's
# broadcast, the copy of a returned input, the copy of an expanded tensor), and rebuilding the
# fusion exactly needs them one for one.


@user_op("broadcast")
def broadcast(x: Tensor, is_new: Sequence[bool]) -> Tensor:
    """Insert size-1 broadcast axes where ``is_new`` is True (one BroadcastOp)."""
    return Tensor(ir_ops.broadcast(tensor_view(x), [bool(flag) for flag in is_new]))


@user_op("set_copy")
def set_copy(x: Tensor) -> Tensor:
    """A copy of ``x`` (a new tensor with the same values and axes)."""
    return Tensor(ir_ops.set_copy(tensor_view(x)))


@user_op("materialize")
def materialize(x: Tensor) -> Tensor:
    """A copy of ``x`` whose expanded broadcast axes are real axes."""
    return Tensor(ir_ops.materialize(tensor_view(x)))
