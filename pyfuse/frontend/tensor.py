"""The symbolic :class:`Tensor` a fused function is traced with: shape and dtype, Python's
operators and the core methods (``x @ w.T + b``, ``x.sum(-1)``, ``x.reshape(2, -1)``).

A Tensor wraps one IR :class:`TensorView`. Its operators and methods call the ops of
:mod:`pyfuse.frontend.ops` (and the other op modules) through the registry of
:mod:`~pyfuse.frontend.tensor_methods`, by name, so that ``x + 1`` and ``pf.add(x, 1)`` trace
the same IR and this module stands under the ops, which wrap their results in a Tensor.
The methods beyond these live in its base class,
:class:`~pyfuse.frontend.tensor_methods.TensorMethods`. A method called with arguments that
do not fit its signature is a FusionError at the user's line
(:func:`~pyfuse.frontend.location.checked_calls`).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyfuse.errors import FusionError
from pyfuse.frontend.arguments import Dims, Keepdims, Number, normalize_dim
from pyfuse.frontend.location import checked_calls, refuse
from pyfuse.frontend.tensor_methods import (
    TensorMethods,
    ValuesAndIndices,
    _implementation,
    shape_arguments,
)
from pyfuse.ir.dtypes import DType
from pyfuse.ir.tensor import TensorView
from pyfuse.runtime.location import user_location


@checked_calls
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
    def __add__(self, other: TensorLike) -> Tensor:
        return _implementation(self, "add")(self, other)

    def __radd__(self, other: Number) -> Tensor:
        return _implementation(self, "add")(other, self)

    def __sub__(self, other: TensorLike) -> Tensor:
        return _implementation(self, "sub")(self, other)

    def __rsub__(self, other: Number) -> Tensor:
        return _implementation(self, "sub")(other, self)

    def __mul__(self, other: TensorLike) -> Tensor:
        return _implementation(self, "mul")(self, other)

    def __rmul__(self, other: Number) -> Tensor:
        return _implementation(self, "mul")(other, self)

    def __truediv__(self, other: TensorLike) -> Tensor:
        return _implementation(self, "div")(self, other)

    def __rtruediv__(self, other: Number) -> Tensor:
        return _implementation(self, "div")(other, self)

    def __pow__(self, other: TensorLike) -> Tensor:
        return _implementation(self, "pow")(self, other)

    def __rpow__(self, other: Number) -> Tensor:
        return _implementation(self, "pow")(other, self)

    def __matmul__(self, other: Tensor) -> Tensor:
        return _implementation(self, "matmul")(self, other)

    def __neg__(self) -> Tensor:
        return _implementation(self, "neg")(self)

    def __abs__(self) -> Tensor:
        return _implementation(self, "abs")(self)

    def __lt__(self, other: TensorLike) -> Tensor:
        return _implementation(self, "lt")(self, other)

    def __le__(self, other: TensorLike) -> Tensor:
        return _implementation(self, "le")(self, other)

    def __gt__(self, other: TensorLike) -> Tensor:
        return _implementation(self, "gt")(self, other)

    def __ge__(self, other: TensorLike) -> Tensor:
        return _implementation(self, "ge")(self, other)

    def __eq__(self, other: object) -> Tensor:  # type: ignore[override]
        return _implementation(self, "eq")(self, other)

    def __ne__(self, other: object) -> Tensor:  # type: ignore[override]
        return _implementation(self, "ne")(self, other)

    __hash__ = object.__hash__

    # -- methods ------------------------------------------------------------------------------
    @property
    def T(self) -> Tensor:  # noqa: N802 - torch's name
        return _implementation(self, "t")(self)

    def to(self, dtype: DType | Tensor) -> Tensor:
        """``x.to(pf.bfloat16)``, or ``x.to(other)`` for other's dtype (as torch)."""
        target = dtype.dtype if isinstance(dtype, Tensor) else dtype
        return _implementation(self, "cast")(self, target)

    # -- reductions: NumPy's names are torch's too (``x.sum(axis=1, keepdims=True)``) ----------
    def sum(
        self,
        dim: Dims = None,
        keepdim: bool = False,
        *,
        axis: Dims = None,
        keepdims: Keepdims = None,
    ) -> Tensor:
        return _implementation(self, "sum")(self, dim, keepdim, axis=axis, keepdims=keepdims)

    def mean(
        self,
        dim: Dims = None,
        keepdim: bool = False,
        *,
        axis: Dims = None,
        keepdims: Keepdims = None,
    ) -> Tensor:
        return _implementation(self, "mean")(self, dim, keepdim, axis=axis, keepdims=keepdims)

    def prod(
        self,
        dim: Dims = None,
        keepdim: bool = False,
        *,
        axis: Dims = None,
        keepdims: Keepdims = None,
    ) -> Tensor:
        return _implementation(self, "prod")(self, dim, keepdim, axis=axis, keepdims=keepdims)

    # torch's x.max(dim) is a (values, indices) pair; x.max() and x.max(other) are tensors.
    def max(
        self,
        dim: Dims | Tensor = None,
        keepdim: bool = False,
        *,
        axis: Dims = None,
        keepdims: Keepdims = None,
    ) -> Tensor | ValuesAndIndices[Tensor]:
        return self._extremum("max", dim, keepdim, axis, keepdims)

    def min(
        self,
        dim: Dims | Tensor = None,
        keepdim: bool = False,
        *,
        axis: Dims = None,
        keepdims: Keepdims = None,
    ) -> Tensor | ValuesAndIndices[Tensor]:
        return self._extremum("min", dim, keepdim, axis, keepdims)

    def _extremum(
        self, op: str, dim: Dims | Tensor, keepdim: bool, axis: Dims, keepdims: Keepdims
    ) -> Tensor | ValuesAndIndices[Tensor]:
        # The op reads (and checks) the arguments; the pair's indices take the dim it was given.
        values = _implementation(self, op)(self, dim, keepdim, axis=axis, keepdims=keepdims)
        chosen = dim if axis is None else axis
        if chosen is None or isinstance(chosen, Tensor):
            return values
        return ValuesAndIndices(values, op, self, chosen, keepdim if keepdims is None else keepdims)

    def amax(
        self,
        dim: Dims = None,
        keepdim: bool = False,
        *,
        axis: Dims = None,
        keepdims: Keepdims = None,
    ) -> Tensor:
        return _implementation(self, "amax")(self, dim, keepdim, axis=axis, keepdims=keepdims)

    def amin(
        self,
        dim: Dims = None,
        keepdim: bool = False,
        *,
        axis: Dims = None,
        keepdims: Keepdims = None,
    ) -> Tensor:
        return _implementation(self, "amin")(self, dim, keepdim, axis=axis, keepdims=keepdims)

    def argmax(
        self,
        dim: int | None = None,
        keepdim: bool = False,
        *,
        axis: int | None = None,
        keepdims: Keepdims = None,
    ) -> Tensor:
        return _implementation(self, "argmax")(self, dim, keepdim, axis=axis, keepdims=keepdims)

    def argmin(
        self,
        dim: int | None = None,
        keepdim: bool = False,
        *,
        axis: int | None = None,
        keepdims: Keepdims = None,
    ) -> Tensor:
        return _implementation(self, "argmin")(self, dim, keepdim, axis=axis, keepdims=keepdims)

    def any(
        self,
        dim: Dims = None,
        keepdim: bool = False,
        *,
        axis: Dims = None,
        keepdims: Keepdims = None,
    ) -> Tensor:
        return _implementation(self, "any")(self, dim, keepdim, axis=axis, keepdims=keepdims)

    def all(
        self,
        dim: Dims = None,
        keepdim: bool = False,
        *,
        axis: Dims = None,
        keepdims: Keepdims = None,
    ) -> Tensor:
        return _implementation(self, "all")(self, dim, keepdim, axis=axis, keepdims=keepdims)

    def var(
        self,
        dim: Dims | bool = None,
        unbiased: bool | None = None,
        keepdim: bool = False,
        *,
        correction: float | None = None,
        axis: Dims = None,
        keepdims: Keepdims = None,
    ) -> Tensor:
        return _implementation(self, "var")(
            self, dim, unbiased, keepdim, correction=correction, axis=axis, keepdims=keepdims
        )

    def std(
        self,
        dim: Dims | bool = None,
        unbiased: bool | None = None,
        keepdim: bool = False,
        *,
        correction: float | None = None,
        axis: Dims = None,
        keepdims: Keepdims = None,
    ) -> Tensor:
        return _implementation(self, "std")(
            self, dim, unbiased, keepdim, correction=correction, axis=axis, keepdims=keepdims
        )

    def logsumexp(
        self,
        dim: Dims = None,
        keepdim: bool = False,
        *,
        axis: Dims = None,
        keepdims: Keepdims = None,
    ) -> Tensor:
        return _implementation(self, "logsumexp")(self, dim, keepdim, axis=axis, keepdims=keepdims)

    # -- elementwise and shape methods --------------------------------------------------------
    def exp(self) -> Tensor:
        return _implementation(self, "exp")(self)

    def log(self) -> Tensor:
        return _implementation(self, "log")(self)

    def sqrt(self) -> Tensor:
        return _implementation(self, "sqrt")(self)

    # torch's shape methods take the sizes either way: ``x.reshape(2, 3)`` or ``x.reshape((2, 3))``.
    def reshape(self, *shape: int | Sequence[int]) -> Tensor:
        return _implementation(self, "reshape")(self, shape_arguments(shape, "reshape", "shape"))

    def view(self, *shape: int | Sequence[int]) -> Tensor:
        return _implementation(self, "reshape")(self, shape_arguments(shape, "view", "shape"))

    def permute(self, *dims: int | Sequence[int]) -> Tensor:
        return _implementation(self, "permute")(self, shape_arguments(dims, "permute", "dims"))

    def transpose(self, dim0: int, dim1: int) -> Tensor:
        return _implementation(self, "transpose")(self, dim0, dim1)

    def unsqueeze(self, dim: int) -> Tensor:
        return _implementation(self, "unsqueeze")(self, dim)

    def squeeze(self, dim: Dims = None) -> Tensor:
        return _implementation(self, "squeeze")(self, dim)

    def broadcast_to(self, shape: Sequence[int]) -> Tensor:
        return _implementation(self, "broadcast_to")(self, shape)

    def expand(self, *shape: int | Sequence[int]) -> Tensor:
        sizes = shape_arguments(shape, "expand", "size")
        return _implementation(self, "broadcast_to")(self, sizes)


TensorLike = Tensor | Number


def tensor_view(value: object, what: str = "input") -> TensorView:
    """The IR tensor of an op's traced-tensor argument ``what``; a FusionError for any other
    value."""
    if isinstance(value, Tensor):
        return value.tv
    raise FusionError(f"{what} must be a traced tensor, got {type(value).__name__}")
