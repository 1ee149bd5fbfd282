"""The symbolic :class:`Tensor` and the public ops, ``pf.add`` ... ``pf.rms_norm``, as
called inside a fused function.

A Tensor wraps one IR :class:`TensorView`; its operators and methods call the ops below, so
``x @ w.T + b`` and ``pf.add(pf.matmul(x, ...), b)`` trace the same IR. The two live in one
module because each needs the other: an op wraps its result in a Tensor, a Tensor's
operator is an op.

Each op unwraps its :class:`Tensor` arguments, calls the IR builder in
:mod:`pyfuse.ir.ops` and wraps the result. :func:`user_op` gives every error the op's
name and the user's line. The composites (softmax, layer_norm, clamp, var...) live in
:mod:`pyfuse.frontend.composites`, traced from these ops; the Tensor methods beyond the
operators live in :class:`~pyfuse.frontend.tensor_methods.TensorMethods`, the base class,
which stands under this module: the ops those methods call (``x.float()`` is ``cast``) are
registered with :func:`~pyfuse.frontend.tensor_methods.tensor_method`.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence

from pyfuse.errors import FusionError
from pyfuse.frontend.arguments import (
    Dims,
    check_scalars_fit,
    flag,
    int_argument,
    normalize_dim,
    reduction_dims,
    scalar_value,
    sizes,
)
from pyfuse.frontend.location import refuse, user_op
from pyfuse.frontend.tensor_methods import TensorMethods, ValuesAndIndices, tensor_method
from pyfuse.ir import layout_ops
from pyfuse.ir import ops as ir_ops
from pyfuse.ir.dtypes import DType
from pyfuse.ir.exprs import BinaryOpType, ReductionOpType, UnaryOpType
from pyfuse.ir.tensor import TensorView
from pyfuse.runtime.location import user_location

Number = bool | int | float


class Tensor(TensorMethods):
    """A symbolic tensor: shape and dtype are known, values are not.
    ``pf.fuse(lambda x: (x * 2).exp().sum(-1))``: ``x`` is a Tensor while tracing."""

    __slots__ = ("tv",)
    # Make NumPy defer to our reflected operators (np_array + tensor).
    __array_priority__ = 1000

    def __init__(self, tv: TensorView) -> None:
        self.tv = tv

    @property
    def shape(self) -> tuple[int, ...]:
        return self.tv.shape

    @property
    def dtype(self) -> DType:
        return self.tv.dtype

    @property
    def ndim(self) -> int:
        return self.tv.ndim

    def dim(self) -> int:
        return self.tv.ndim

    def size(self, dim: int | None = None) -> int | tuple[int, ...]:
        if dim is None:
            return self.shape
        if self.ndim == 0:
            refuse("size", f"dimension specified as {dim!r} but the tensor has no dimensions")
        try:
            return self.shape[normalize_dim(dim, self.ndim)]
        except FusionError as error:  # not an op: no user_op names it and the user's line
            refuse("size", error.bare_message)

    def __repr__(self) -> str:
        return f"Tensor(T{self.tv.name}, shape={self.shape}, dtype={self.dtype.name})"

    def __bool__(self) -> bool:
        raise FusionError(
            "a traced tensor has no truth value; use pf.where for data-dependent choices",
            op="bool",
            where=user_location(),
        )

    # -- operators ----------------------------------------------------------------------------
    # Each calls the op of this module by its name (``add`` below is the module's ``add``, not
    # a method: a class body does not enclose its methods).
    def __add__(self, other: TensorLike) -> Tensor:
        return add(self, other)

    def __radd__(self, other: Number) -> Tensor:
        return add(other, self)

    def __sub__(self, other: TensorLike) -> Tensor:
        return sub(self, other)

    def __rsub__(self, other: Number) -> Tensor:
        return sub(other, self)

    def __mul__(self, other: TensorLike) -> Tensor:
        return mul(self, other)

    def __rmul__(self, other: Number) -> Tensor:
        return mul(other, self)

    def __truediv__(self, other: TensorLike) -> Tensor:
        return div(self, other)

    def __rtruediv__(self, other: Number) -> Tensor:
        return div(other, self)

    def __pow__(self, other: TensorLike) -> Tensor:
        return pow(self, other)

    def __rpow__(self, other: Number) -> Tensor:
        return pow(other, self)

    def __matmul__(self, other: Tensor) -> Tensor:
        return matmul(self, other)

    def __neg__(self) -> Tensor:
        return neg(self)

    def __abs__(self) -> Tensor:
        return abs(self)

    def __lt__(self, other: TensorLike) -> Tensor:
        return lt(self, other)

    def __le__(self, other: TensorLike) -> Tensor:
        return le(self, other)

    def __gt__(self, other: TensorLike) -> Tensor:
        return gt(self, other)

    def __ge__(self, other: TensorLike) -> Tensor:
        return ge(self, other)

    def __eq__(self, other: object) -> Tensor:  # type: ignore[override]
        return eq(self, other)  # type: ignore[arg-type]

    def __ne__(self, other: object) -> Tensor:  # type: ignore[override]
        return ne(self, other)  # type: ignore[arg-type]

    __hash__ = object.__hash__

    # -- methods ------------------------------------------------------------------------------
    @property
    def T(self) -> Tensor:  # noqa: N802 - torch's name
        return t(self)

    def to(self, dtype: DType | Tensor) -> Tensor:
        """``x.to(pf.bfloat16)``, or ``x.to(other)`` for other's dtype (as torch)."""
        return cast(self, dtype.dtype if isinstance(dtype, Tensor) else dtype)

    def sum(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        return sum(self, dim, keepdim)

    # torch's x.max(dim) is a (values, indices) pair; x.max() and x.max(other) are tensors.
    def max(
        self, dim: Dims | Tensor = None, keepdim: bool = False
    ) -> Tensor | ValuesAndIndices[Tensor]:
        if dim is None or isinstance(dim, Tensor):
            return max(self, dim, keepdim)
        return ValuesAndIndices(max(self, dim, keepdim), "max", self, dim, keepdim)

    def min(
        self, dim: Dims | Tensor = None, keepdim: bool = False
    ) -> Tensor | ValuesAndIndices[Tensor]:
        if dim is None or isinstance(dim, Tensor):
            return min(self, dim, keepdim)
        return ValuesAndIndices(min(self, dim, keepdim), "min", self, dim, keepdim)

    def mean(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        return mean(self, dim, keepdim)

    def exp(self) -> Tensor:
        return exp(self)

    def log(self) -> Tensor:
        return log(self)

    def sqrt(self) -> Tensor:
        return sqrt(self)

    def reshape(self, *shape: int | Sequence[int]) -> Tensor:
        return reshape(self, _shape_args(shape))

    def view(self, *shape: int | Sequence[int]) -> Tensor:
        return self.reshape(*shape)

    def permute(self, *dims: int | Sequence[int]) -> Tensor:
        return permute(self, _shape_args(dims))

    def transpose(self, dim0: int, dim1: int) -> Tensor:
        return transpose(self, dim0, dim1)

    def unsqueeze(self, dim: int) -> Tensor:
        return unsqueeze(self, dim)

    def squeeze(self, dim: int | Sequence[int] | None = None) -> Tensor:
        return squeeze(self, dim)

    def broadcast_to(self, shape: Sequence[int]) -> Tensor:
        return broadcast_to(self, shape)

    def expand(self, *shape: int | Sequence[int]) -> Tensor:
        return broadcast_to(self, _shape_args(shape))


def _shape_args(values: tuple[int | Sequence[int], ...]) -> int | Sequence[int]:
    """Accept both ``f(2, 3)`` and ``f((2, 3))`` like torch: one argument is the shape itself.
    The op reads the sizes (:func:`~pyfuse.frontend.arguments.sizes`), so that a bad one is
    an error naming the op and the user's line."""
    return values[0] if len(values) == 1 else values  # type: ignore[return-value]


TensorLike = Tensor | Number


def _tensor(value: object, what: str = "input") -> TensorView:
    if isinstance(value, Tensor):
        return value.tv
    raise FusionError(f"{what} must be a traced tensor, got {type(value).__name__}")


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
    return Tensor(ir_ops.unary(op, _tensor(x)))


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


@user_op("add")
def add(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """``lhs + rhs`` elementwise (torch.add without alpha): ``pf.add(x, 1.0)``."""
    return _binary(BinaryOpType.ADD, lhs, rhs)


@user_op("sub")
def sub(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """``lhs - rhs`` elementwise (torch.sub): ``pf.sub(x, y)``."""
    return _binary(BinaryOpType.SUB, lhs, rhs)


@user_op("mul")
def mul(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """``lhs * rhs`` elementwise (torch.mul): ``pf.mul(x, 0.5)``."""
    return _binary(BinaryOpType.MUL, lhs, rhs)


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


@user_op("eq")
def eq(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """``lhs == rhs`` as a bool tensor (torch.eq): ``pf.eq(x, 0)``."""
    return _binary(BinaryOpType.EQ, lhs, rhs)


@user_op("ne")
def ne(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """``lhs != rhs`` as a bool tensor, True for NaN (torch.ne): ``pf.ne(x, y)``."""
    return _binary(BinaryOpType.NE, lhs, rhs)


@user_op("lt")
def lt(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """``lhs < rhs`` as a bool tensor (torch.lt): ``pf.lt(x, 0.5)``."""
    return _binary(BinaryOpType.LT, lhs, rhs)


@user_op("le")
def le(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """``lhs <= rhs`` as a bool tensor (torch.le): ``pf.le(x, y)``."""
    return _binary(BinaryOpType.LE, lhs, rhs)


@user_op("gt")
def gt(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """``lhs > rhs`` as a bool tensor (torch.gt): ``pf.gt(x, 0)``."""
    return _binary(BinaryOpType.GT, lhs, rhs)


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


@user_op("exp")
def exp(x: Tensor) -> Tensor:
    """``e ** x`` (torch.exp; integers compute in float32): ``pf.exp(x)``."""
    return _unary(UnaryOpType.EXP, x)


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
    """``if_true`` where ``condition`` holds, else ``if_false`` (torch.where):
    ``pf.where(x > 0, x, 0.0)``."""
    values = (_operand(if_true), _operand(if_false))
    if builtins.any(isinstance(value, TensorView) for value in values):
        check_scalars_fit(values)
    return Tensor(ir_ops.where(_operand(condition), *values))


@tensor_method
@user_op("cast")
def cast(x: Tensor, dtype: DType) -> Tensor:
    """``x`` converted to ``dtype`` (torch's ``x.to(dtype)``; float to int truncates):
    ``pf.cast(x, pf.bfloat16)``."""
    if not isinstance(dtype, DType):
        raise FusionError(f"dtype must be a pyfuse dtype such as pf.bfloat16, got {dtype!r}")
    return Tensor(ir_ops.cast(_tensor(x), dtype))


# ---- reductions -----------------------------------------------------------------------------


@user_op("sum")
def sum(x: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:  # noqa: A001
    """Sum over ``dim`` (all by default); ints and bools sum in int64 (torch.sum):
    ``pf.sum(x, -1, keepdim=True)``."""
    dims = reduction_dims(x, dim)
    return Tensor(ir_ops.reduce(ReductionOpType.SUM, _tensor(x), dims, flag(keepdim, "keepdim")))


@tensor_method
@user_op("prod")
def prod(x: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:
    """The product over ``dim`` (all by default); ints and bools multiply in int64, 16-bit
    floats in float32 (torch.prod, also over several dims): ``pf.prod(x, -1)``."""
    dims = reduction_dims(x, dim)
    return Tensor(ir_ops.reduce(ReductionOpType.PROD, _tensor(x), dims, flag(keepdim, "keepdim")))


@user_op("max")
def max(x: Tensor, dim: Dims | Tensor = None, keepdim: bool = False) -> Tensor:  # noqa: A001
    """The largest value over ``dim`` (NaN propagates), or with a tensor second argument the
    elementwise maximum like torch.max(x, other): ``pf.max(x, 1)``. Unlike torch.max(x, dim),
    gives the values only (``x.max(dim)`` gives torch's pair; ``pf.argmax`` the indices);
    ``pf.amax`` is the same reduction."""
    if isinstance(dim, Tensor):
        return maximum(x, dim)
    dims = reduction_dims(x, dim)
    return Tensor(ir_ops.reduce(ReductionOpType.MAX, _tensor(x), dims, flag(keepdim, "keepdim")))


@user_op("min")
def min(x: Tensor, dim: Dims | Tensor = None, keepdim: bool = False) -> Tensor:  # noqa: A001
    """The smallest value over ``dim`` (NaN propagates), or with a tensor second argument the
    elementwise minimum like torch.min(x, other): ``pf.min(x, 0)``. Values only, as
    ``pf.amin``."""
    if isinstance(dim, Tensor):
        return minimum(x, dim)
    dims = reduction_dims(x, dim)
    return Tensor(ir_ops.reduce(ReductionOpType.MIN, _tensor(x), dims, flag(keepdim, "keepdim")))


@user_op("mean")
def mean(x: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:
    """Mean over ``dim`` of a float tensor; NaN over no elements (torch.mean):
    ``pf.mean(x, -1)``."""
    return Tensor(ir_ops.mean(_tensor(x), reduction_dims(x, dim), flag(keepdim, "keepdim")))


# ---- shape and metadata ---------------------------------------------------------------------


@user_op("broadcast_to")
def broadcast_to(x: Tensor, shape: int | Sequence[int]) -> Tensor:
    """``x`` stretched to ``shape`` without a copy (torch.broadcast_to):
    ``pf.broadcast_to(row, (4, 7))``; -1 keeps an axis's size (``x.expand(-1, 7)``)."""
    tv = _tensor(x)
    shape = sizes(shape)
    if builtins.any(size < -1 for size in shape):
        raise FusionError(f"sizes must be >= 0, or -1 to keep an axis's size, got {shape}")
    leading = len(shape) - tv.ndim
    if leading >= 0:  # else the IR's broadcast_to says why
        if -1 in shape[:leading]:
            raise FusionError(
                f"broadcast_to: -1 keeps an axis's size, and the new leading axes of {shape} "
                f"have none (x is {tuple(tv.shape)})"
            )
        own = zip(shape[leading:], tv.shape, strict=True)
        shape = shape[:leading] + tuple(mine if size == -1 else size for size, mine in own)
    return Tensor(ir_ops.broadcast_to(tv, shape))


@user_op("cat")
def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """The tensors joined along ``dim`` in their promoted dtype (torch.cat): ``pf.cat([a, b],
    -1)``. It runs as a kernel of its own that reads each tensor from memory."""
    if isinstance(tensors, Tensor) or not isinstance(tensors, Sequence):
        raise FusionError("cat takes a list or tuple of tensors")
    views = [_tensor(t, "each tensor of cat") for t in tensors]
    return Tensor(layout_ops.cat(views, int_argument(dim, "dim")))


@user_op("stack")
def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """The tensors, of one shape, joined along a new axis ``dim`` (torch.stack):
    ``pf.stack([a, b], 0)``."""
    if isinstance(tensors, Tensor) or not isinstance(tensors, Sequence) or not tensors:
        raise FusionError("stack takes a non-empty list or tuple of tensors")
    views = [_tensor(t, "each tensor of stack") for t in tensors]
    shapes = {tuple(tv.shape) for tv in views}
    if len(shapes) > 1:
        raise FusionError(f"stack needs tensors of one shape, got {sorted(shapes)}")
    axis = normalize_dim(dim, views[0].ndim + 1)  # the result's rank: one more
    return Tensor(layout_ops.cat([ir_ops.unsqueeze(tv, axis) for tv in views], axis))


@tensor_method
@user_op("getitem")
def slice_axes(
    x: Tensor, starts: Sequence[int], steps: Sequence[int], counts: Sequence[int]
) -> Tensor:
    """Elements ``starts[d] + steps[d] * i`` (``i < counts[d]``) of every axis ``d``: what
    ``x[...]`` traces (a view of an input is read in place)."""
    return Tensor(layout_ops.slice_axes(_tensor(x), starts, steps, counts))


@tensor_method
@user_op("unsqueeze")
def unsqueeze(x: Tensor, dim: int) -> Tensor:
    """A new size-1 axis at ``dim`` (torch.unsqueeze): ``pf.unsqueeze(v, 0)``."""
    return Tensor(ir_ops.unsqueeze(_tensor(x), normalize_dim(dim, x.ndim + 1)))


@tensor_method
@user_op("squeeze")
def squeeze(x: Tensor, dim: Dims = None) -> Tensor:
    """Drop size-1 axes (those of ``dim`` only, when given; other sizes stay, like torch):
    ``pf.squeeze(x, 0)``."""
    dims = None if dim is None else reduction_dims(x, dim, empty_is_all=False)
    return Tensor(ir_ops.squeeze(_tensor(x), dims))


@user_op("permute")
def permute(x: Tensor, dims: int | Sequence[int]) -> Tensor:
    """The axes of ``x`` reordered (torch.permute): ``pf.permute(x, (2, 0, 1))``."""
    return Tensor(layout_ops.permute(_tensor(x), sizes(dims, "dims")))


@user_op("transpose")
def transpose(x: Tensor, dim0: int, dim1: int) -> Tensor:
    """``x`` with axes ``dim0`` and ``dim1`` swapped (torch.transpose):
    ``pf.transpose(x, 0, 1)``."""
    tv = _tensor(x)
    return Tensor(
        layout_ops.transpose(tv, normalize_dim(dim0, tv.ndim), normalize_dim(dim1, tv.ndim))
    )


@user_op("t")
def t(x: Tensor) -> Tensor:
    """``x.T``: reverses the axes (a transpose for 2-D, like torch)."""
    tv = _tensor(x)
    return Tensor(layout_ops.permute(tv, tuple(reversed(range(tv.ndim)))))


@user_op("reshape")
def reshape(x: Tensor, shape: int | Sequence[int]) -> Tensor:
    """``x`` viewed with ``shape``, one size may be -1 (torch.reshape):
    ``pf.reshape(x, (2, -1))``."""
    return Tensor(layout_ops.reshape(_tensor(x), sizes(shape, "shape")))


# ---- matmul ---------------------------------------------------------------------------------


@user_op("matmul")
def matmul(a: Tensor, b: Tensor) -> Tensor:
    """torch.matmul semantics: batch axes broadcast; 1-D operands are vectors; the product
    accumulates in fp32: ``pf.matmul(x, w)`` (``x @ w``)."""
    return Tensor(ir_ops.matmul(_tensor(a, "a"), _tensor(b, "b")))


@user_op("linear")
def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight.T + bias`` (torch.nn.functional.linear): ``pf.linear(x, w, b)``; the bias
    has shape ``(N,)`` for ``weight [N, K]``, or ``()`` or ``(1,)``, broadcast as in torch."""
    x_tv, weight_tv = _tensor(x, "x"), _tensor(weight, "weight")
    bias_tv = None if bias is None else _tensor(bias, "bias")
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


# ---- IR ops without a public op of their own ------------------------------------------------
# A repro script (``pyfuse.ir.script``) spells these: the builders insert them (keepdim's
# broadcast, the copy of a returned input, the copy of an expanded tensor), and rebuilding the
# fusion exactly needs them one for one.


@user_op("broadcast")
def broadcast(x: Tensor, is_new: Sequence[bool]) -> Tensor:
    """Insert size-1 broadcast axes where ``is_new`` is True (one BroadcastOp)."""
    return Tensor(ir_ops.broadcast(_tensor(x), [bool(flag) for flag in is_new]))


@user_op("set_copy")
def set_copy(x: Tensor) -> Tensor:
    """A copy of ``x`` (a new tensor with the same values and axes)."""
    return Tensor(ir_ops.set_copy(_tensor(x)))


@user_op("materialize")
def materialize(x: Tensor) -> Tensor:
    """A copy of ``x`` whose expanded broadcast axes are real axes."""
    return Tensor(ir_ops.materialize(_tensor(x)))
