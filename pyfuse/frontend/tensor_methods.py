"""The Tensor methods and protocols beyond arithmetic: torch's conversions (``x.float()``),
bitwise operators on bools, the composites as methods (``x.clamp(0, 1)``), NumPy's ufuncs
(``np.maximum(x, 0)``), and clear errors for what a traced tensor cannot do (``float(x)``,
``x[0]``, ``x // y``), each naming the user's line.

:class:`TensorMethods` is the base of :class:`~pyfuse.frontend.ops.Tensor`. Its methods call
the modules of the ops and composites, imported at the end of this one: both build on the
Tensor class, which builds on this one.
"""

from __future__ import annotations

import builtins
import os
import sys
import typing
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NoReturn

from pyfuse.errors import FusionError
from pyfuse.ir import dtypes
from pyfuse.ir.dtypes import DType
from pyfuse.runtime.location import PACKAGE_DIR, user_location

if TYPE_CHECKING:
    from pyfuse.frontend.ops import Dims, Tensor, TensorLike


def _outside_libraries() -> str | None:
    """The user's ``file:line``: the innermost frame outside pyfuse and NumPy (a NumPy
    function that converts its argument, ``np.where(x, ...)``, is not the user's line)."""
    numpy = sys.modules.get("numpy")
    skipped = [PACKAGE_DIR + os.sep]
    if numpy is not None and numpy.__file__:
        skipped.append(os.path.dirname(os.path.abspath(numpy.__file__)) + os.sep)
    frame = sys._getframe(1)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not any(filename.startswith(folder) for folder in skipped):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return user_location()


def refuse(op: str, message: str) -> NoReturn:
    """Raise a FusionError for ``op`` at the user's line."""
    raise FusionError(message, op=op, where=_outside_libraries())


_NO_VALUE = "a traced tensor has no value while tracing; compute with pf ops (pf.where for choices)"


def _traced(value: TensorMethods) -> Tensor:
    """``value`` as the Tensor it is (TensorMethods is only ever Tensor's base)."""
    return typing.cast("Tensor", value)


class TensorMethods:
    """Methods of :class:`~pyfuse.frontend.ops.Tensor` (see the module doc)."""

    __slots__ = ()

    if TYPE_CHECKING:  # Tensor's properties

        @property
        def ndim(self) -> builtins.int: ...

        @property
        def shape(self) -> tuple[builtins.int, ...]: ...

        @property
        def dtype(self) -> DType: ...

    # -- Python conversions a traced tensor cannot give ------------------------------------------
    def __float__(self) -> builtins.float:
        refuse("float", _NO_VALUE)

    def __int__(self) -> builtins.int:
        refuse("int", _NO_VALUE)

    def __index__(self) -> builtins.int:
        refuse("index", f"{_NO_VALUE}; a tensor cannot be a Python index or size")

    def __complex__(self) -> complex:
        refuse("complex", _NO_VALUE)

    def __array__(self, *args: object, **kwargs: object) -> NoReturn:
        refuse("numpy", f"{_NO_VALUE}; NumPy functions other than the ufuncs cannot take it")

    def __len__(self) -> builtins.int:
        if self.ndim == 0:
            refuse("len", "len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self) -> Iterator[Tensor]:
        refuse("iter", "iterating over a traced tensor needs indexing, which is not supported yet")

    def __getitem__(self, index: object) -> Tensor:
        return _index(_traced(self), index)

    # -- NumPy ufuncs: np.exp(x), np.maximum(x, 0) -----------------------------------------------
    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: object, **kwargs: object) -> Tensor:
        from pyfuse.frontend.numpy_ufuncs import apply_ufunc

        return apply_ufunc(ufunc, method, inputs, kwargs)

    # -- bitwise operators: logic on bool tensors ----------------------------------------------
    def __and__(self, other: TensorLike) -> Tensor:
        return composites.bitwise("and", _traced(self), other)

    def __rand__(self, other: TensorLike) -> Tensor:
        return composites.bitwise("and", other, _traced(self))

    def __or__(self, other: TensorLike) -> Tensor:
        return composites.bitwise("or", _traced(self), other)

    def __ror__(self, other: TensorLike) -> Tensor:
        return composites.bitwise("or", other, _traced(self))

    def __xor__(self, other: TensorLike) -> Tensor:
        return composites.bitwise("xor", _traced(self), other)

    def __rxor__(self, other: TensorLike) -> Tensor:
        return composites.bitwise("xor", other, _traced(self))

    def __invert__(self) -> Tensor:
        return composites.bitwise_not(_traced(self))

    # torch's floor division and remainder need floor(a / b) rounded exactly (fmod), which
    # no op composes exactly: refuse rather than be off by one at the boundaries.
    def __floordiv__(self, other: TensorLike) -> Tensor:
        refuse("floor_divide", _NO_FLOOR.format("//"))

    def __rfloordiv__(self, other: TensorLike) -> Tensor:
        refuse("floor_divide", _NO_FLOOR.format("//"))

    def __mod__(self, other: TensorLike) -> Tensor:
        refuse("remainder", _NO_FLOOR.format("%"))

    def __rmod__(self, other: TensorLike) -> Tensor:
        refuse("remainder", _NO_FLOOR.format("%"))

    # -- dtype conversions -----------------------------------------------------------------------
    def float(self) -> Tensor:
        return ops.cast(_traced(self), dtypes.float32)

    def half(self) -> Tensor:
        return ops.cast(_traced(self), dtypes.float16)

    def bfloat16(self) -> Tensor:
        return ops.cast(_traced(self), dtypes.bfloat16)

    def int(self) -> Tensor:
        return ops.cast(_traced(self), dtypes.int32)

    def long(self) -> Tensor:
        return ops.cast(_traced(self), dtypes.int64)

    def bool(self) -> Tensor:
        return ops.cast(_traced(self), dtypes.bool_)

    def double(self) -> Tensor:
        refuse("double", "float64 tensors are not supported; use .float()")

    def type_as(self, other: Tensor) -> Tensor:
        return ops.cast(_traced(self), other.dtype)

    # -- the ops as methods ----------------------------------------------------------------------
    def abs(self) -> Tensor:
        return ops.abs(_traced(self))

    def neg(self) -> Tensor:
        return ops.neg(_traced(self))

    def relu(self) -> Tensor:
        return ops.relu(_traced(self))

    def sigmoid(self) -> Tensor:
        return ops.sigmoid(_traced(self))

    def tanh(self) -> Tensor:
        return ops.tanh(_traced(self))

    def sin(self) -> Tensor:
        return ops.sin(_traced(self))

    def cos(self) -> Tensor:
        return ops.cos(_traced(self))

    def rsqrt(self) -> Tensor:
        return ops.rsqrt(_traced(self))

    def reciprocal(self) -> Tensor:
        return ops.reciprocal(_traced(self))

    def pow(self, exponent: TensorLike) -> Tensor:
        return ops.pow(_traced(self), exponent)

    def maximum(self, other: TensorLike) -> Tensor:
        return ops.maximum(_traced(self), other)

    def minimum(self, other: TensorLike) -> Tensor:
        return ops.minimum(_traced(self), other)

    def logical_not(self) -> Tensor:
        return ops.logical_not(_traced(self))

    def logical_and(self, other: TensorLike) -> Tensor:
        return ops.logical_and(_traced(self), other)

    def logical_or(self, other: TensorLike) -> Tensor:
        return ops.logical_or(_traced(self), other)

    def logical_xor(self, other: TensorLike) -> Tensor:
        return composites.logical_xor(_traced(self), other)

    def clamp(
        self,
        min: TensorLike | None = None,  # noqa: A002 - torch's names
        max: TensorLike | None = None,  # noqa: A002
    ) -> Tensor:
        return composites.clamp(_traced(self), min, max)

    clip = clamp

    def sign(self) -> Tensor:
        return composites.sign(_traced(self))

    def isnan(self) -> Tensor:
        return composites.isnan(_traced(self))

    def isinf(self) -> Tensor:
        return composites.isinf(_traced(self))

    def isfinite(self) -> Tensor:
        return composites.isfinite(_traced(self))

    def nan_to_num(
        self,
        nan: builtins.float = 0.0,
        posinf: builtins.float | None = None,
        neginf: builtins.float | None = None,
    ) -> Tensor:
        return composites.nan_to_num(_traced(self), nan, posinf, neginf)

    def exp2(self) -> Tensor:
        return composites.exp2(_traced(self))

    def expm1(self) -> Tensor:
        return composites.expm1(_traced(self))

    def log2(self) -> Tensor:
        return composites.log2(_traced(self))

    def log10(self) -> Tensor:
        return composites.log10(_traced(self))

    def log1p(self) -> Tensor:
        return composites.log1p(_traced(self))

    def var(self, dim: Dims = None, *args: Any, **kwargs: Any) -> Tensor:
        return composites.var(_traced(self), dim, *args, **kwargs)

    def std(self, dim: Dims = None, *args: Any, **kwargs: Any) -> Tensor:
        return composites.std(_traced(self), dim, *args, **kwargs)

    def logsumexp(self, dim: Dims, keepdim: builtins.bool = False) -> Tensor:
        return composites.logsumexp(_traced(self), dim, keepdim)

    def softmax(self, dim: builtins.int) -> Tensor:
        return composites.softmax(_traced(self), dim)

    def log_softmax(self, dim: builtins.int) -> Tensor:
        return composites.log_softmax(_traced(self), dim)

    def amax(self, dim: Dims = None, keepdim: builtins.bool = False) -> Tensor:
        return composites.amax(_traced(self), dim, keepdim)

    def amin(self, dim: Dims = None, keepdim: builtins.bool = False) -> Tensor:
        return composites.amin(_traced(self), dim, keepdim)

    def any(self, dim: Dims = None, keepdim: builtins.bool = False) -> Tensor:
        return composites.any(_traced(self), dim, keepdim)

    def all(self, dim: Dims = None, keepdim: builtins.bool = False) -> Tensor:
        return composites.all(_traced(self), dim, keepdim)


_NO_FLOOR = (
    "'{}' (torch's floor division and remainder) is not supported yet: it needs an exact "
    "floor, which pyfuse has no op for"
)


def _index(x: Tensor, index: object) -> Tensor:
    """``x[...]`` for what needs no data movement: full slices ``:``, ``None`` (a new axis),
    ``...`` and 0 or -1 on a size-1 axis; anything else is refused at the user's line."""
    items = list(index) if isinstance(index, tuple) else [index]
    if sum(item is Ellipsis for item in items) > 1:
        refuse("getitem", "an index can only have a single ellipsis ('...')")
    consuming = [item for item in items if item is not None and item is not Ellipsis]
    if len(consuming) > x.ndim:
        refuse("getitem", f"too many indices for a tensor of rank {x.ndim}: {index!r}")
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at : at + 1] = [slice(None)] * (x.ndim - len(consuming))
    items += [slice(None)] * (x.ndim - sum(item is not None for item in items))
    result, axis, dropped = x, 0, []
    for item in items:
        if item is None:
            result = ops.unsqueeze(result, axis)
            axis += 1
        elif isinstance(item, slice) and _is_full(item, result.shape[axis]):
            axis += 1
        elif _is_int(item) and result.shape[axis] == 1 and item in (0, -1):
            dropped.append(axis)
            axis += 1
        else:
            refuse(
                "getitem",
                f"indexing a traced tensor with {item!r} is not supported yet: only ':', None, "
                "'...' and 0 on a size-1 axis, which need no data movement",
            )
    return ops.squeeze(result, dropped) if dropped else result


def _is_int(item: object) -> bool:
    return isinstance(item, int) and not isinstance(item, bool)


def _is_full(item: slice, extent: int) -> bool:
    start, stop, step = item.indices(extent)
    return step == 1 and start == 0 and stop == extent


class ValuesAndIndices:
    """torch's ``(values, indices)`` of ``x.max(dim)`` and ``x.min(dim)``: ``values`` is the
    reduction; the indices need an argmax, which pyfuse does not have yet, so reading them
    (``.indices``, ``[1]``, unpacking both) raises a FusionError at the user's line."""

    __slots__ = ("op", "values")

    def __init__(self, values: Tensor, op: str) -> None:
        self.values = values
        self.op = op

    @property
    def indices(self) -> NoReturn:
        refuse(
            self.op,
            f"the indices of x.{self.op}(dim) are not supported yet (they need an arg{self.op}); "
            f"use x.{self.op}(dim).values or pf.a{self.op}(x, dim)",
        )

    def __getitem__(self, index: int) -> Tensor:
        if index in (0, -2):
            return self.values
        return self.indices

    def __iter__(self) -> Iterator[Tensor]:
        yield self.values
        yield self.indices

    def __len__(self) -> builtins.int:
        return 2

    def __repr__(self) -> str:
        return f"{self.op}(values={self.values!r}, indices=<not supported>)"


# Last: the ops and composites modules build on Tensor, which builds on TensorMethods above;
# imported here (pyfuse's __init__ loads them first), they find it defined.
from pyfuse.frontend import composites, ops  # noqa: E402
