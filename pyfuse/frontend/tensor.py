"""The symbolic :class:`Tensor` a fused function receives while it is traced.

A Tensor wraps one IR :class:`TensorView`; its operators and methods call the public ops
in :mod:`pyfuse.frontend.ops`, so ``x @ w.T + b`` and ``pf.add(pf.matmul(x, ...), b)``
trace the same IR.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pyfuse.ir.dtypes import DType
from pyfuse.ir.tensor import TensorView

if TYPE_CHECKING:
    from pyfuse.frontend.ops import Number, TensorLike


class Tensor:
    """A symbolic tensor: shape and dtype are known, values are not."""

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
        return self.shape if dim is None else self.shape[dim]

    def __repr__(self) -> str:
        return f"Tensor(T{self.tv.name}, shape={self.shape}, dtype={self.dtype.name})"

    def __bool__(self) -> bool:
        from pyfuse.errors import FusionError
        from pyfuse.frontend.location import user_location

        raise FusionError(
            "a traced tensor has no truth value; use pf.where for data-dependent choices",
            op="bool",
            where=user_location(),
        )

    # -- operators ----------------------------------------------------------------------------
    def __add__(self, other: TensorLike) -> Tensor:
        return ops.add(self, other)

    def __radd__(self, other: Number) -> Tensor:
        return ops.add(other, self)

    def __sub__(self, other: TensorLike) -> Tensor:
        return ops.sub(self, other)

    def __rsub__(self, other: Number) -> Tensor:
        return ops.sub(other, self)

    def __mul__(self, other: TensorLike) -> Tensor:
        return ops.mul(self, other)

    def __rmul__(self, other: Number) -> Tensor:
        return ops.mul(other, self)

    def __truediv__(self, other: TensorLike) -> Tensor:
        return ops.div(self, other)

    def __rtruediv__(self, other: Number) -> Tensor:
        return ops.div(other, self)

    def __pow__(self, other: TensorLike) -> Tensor:
        return ops.pow(self, other)

    def __rpow__(self, other: Number) -> Tensor:
        return ops.pow(other, self)

    def __matmul__(self, other: Tensor) -> Tensor:
        return ops.matmul(self, other)

    def __neg__(self) -> Tensor:
        return ops.neg(self)

    def __abs__(self) -> Tensor:
        return ops.abs(self)

    def __lt__(self, other: TensorLike) -> Tensor:
        return ops.lt(self, other)

    def __le__(self, other: TensorLike) -> Tensor:
        return ops.le(self, other)

    def __gt__(self, other: TensorLike) -> Tensor:
        return ops.gt(self, other)

    def __ge__(self, other: TensorLike) -> Tensor:
        return ops.ge(self, other)

    def __eq__(self, other: object) -> Tensor:  # type: ignore[override]
        return ops.eq(self, other)  # type: ignore[arg-type]

    def __ne__(self, other: object) -> Tensor:  # type: ignore[override]
        return ops.ne(self, other)  # type: ignore[arg-type]

    __hash__ = object.__hash__

    # -- methods ------------------------------------------------------------------------------
    @property
    def T(self) -> Tensor:  # noqa: N802 - torch's name
        return ops.t(self)

    def to(self, dtype: DType) -> Tensor:
        return ops.cast(self, dtype)

    def sum(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        return ops.sum(self, dim, keepdim)

    def max(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        return ops.max(self, dim, keepdim)

    def min(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        return ops.min(self, dim, keepdim)

    def mean(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        return ops.mean(self, dim, keepdim)

    def exp(self) -> Tensor:
        return ops.exp(self)

    def log(self) -> Tensor:
        return ops.log(self)

    def sqrt(self) -> Tensor:
        return ops.sqrt(self)

    def reshape(self, *shape: int | Sequence[int]) -> Tensor:
        return ops.reshape(self, _shape_args(shape))

    def view(self, *shape: int | Sequence[int]) -> Tensor:
        return self.reshape(*shape)

    def permute(self, *dims: int | Sequence[int]) -> Tensor:
        return ops.permute(self, _shape_args(dims))

    def transpose(self, dim0: int, dim1: int) -> Tensor:
        return ops.transpose(self, dim0, dim1)

    def unsqueeze(self, dim: int) -> Tensor:
        return ops.unsqueeze(self, dim)

    def squeeze(self, dim: int | Sequence[int] | None = None) -> Tensor:
        return ops.squeeze(self, dim)

    def broadcast_to(self, shape: Sequence[int]) -> Tensor:
        return ops.broadcast_to(self, shape)

    def expand(self, *shape: int | Sequence[int]) -> Tensor:
        return ops.broadcast_to(self, _shape_args(shape))


def _shape_args(values: tuple[int | Sequence[int], ...]) -> tuple[int, ...]:
    """Accept both ``f(2, 3)`` and ``f((2, 3))`` like torch."""
    if len(values) == 1 and not isinstance(values[0], int):
        return tuple(values[0])
    return tuple(int(v) for v in values)  # type: ignore[arg-type]


# Imported last: ops needs Tensor defined, and Tensor's methods only use ops when called.
from pyfuse.frontend import ops  # noqa: E402
