"""Reading the arguments of the public ops the way torch does: dims, Python and NumPy numbers.

:func:`reduction_dims` reads a ``dim`` argument (negative dims, a 0-d tensor's 0 and -1,
torch's "Dimension out of range" error), :func:`scalar_value` accepts a NumPy scalar where
a Python number goes, and :func:`check_scalars_fit` refuses a Python int that the op's
integer dtype cannot hold, as torch does. Each raises :class:`FusionError`; the op that
called it adds its name and the user's line. It imports no other frontend module (a traced
Tensor is recognised by its ``tv``), so every one of them may use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

from pyfuse.errors import FusionError
from pyfuse.ir import dtypes
from pyfuse.ir.dtypes import DType
from pyfuse.ir.tensor import TensorView

Number = bool | int | float
Dims = int | Sequence[int] | None  # a ``dim`` argument: one axis, several, or all (None)


class Ranked(Protocol):
    @property
    def ndim(self) -> int: ...


@runtime_checkable
class _Traced(Protocol):
    """What a traced Tensor has (read structurally: this module stands under the Tensor)."""

    tv: TensorView


def reduction_dims(x: Ranked, dims: Dims) -> list[int]:
    """torch's reading of ``dim``: None is every axis, negative dims count from the end, and
    a 0-d tensor takes 0 and -1 (reducing nothing); FusionError in torch's words otherwise."""
    rank = x.ndim
    if dims is None:
        return list(range(rank))
    if isinstance(dims, _Traced) or not isinstance(dims, int | Iterable):
        raise FusionError(f"dim must be an int or a sequence of ints, got {type(dims).__name__}")
    listed = [dims] if isinstance(dims, int) else list(dims)
    bound = max(rank, 1)
    normalized: list[int] = []
    for dim in listed:
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise FusionError(f"dim must be an int or a sequence of ints, got {dims!r}")
        if not -bound <= dim < bound:
            raise FusionError(
                f"Dimension out of range (expected to be in range of [{-bound}, {bound - 1}], "
                f"but got {dim})"
            )
        if dim % bound in normalized:
            raise FusionError(f"dim {dim % bound} appears multiple times in the list of dims")
        normalized.append(dim % bound)
    return sorted(normalized) if rank else []


def scalar_value(value: object) -> Number | None:
    """``value`` as a Python number: itself, or a NumPy scalar's (or 0-d array's) value;
    None for anything else. Read without importing NumPy (``import pyfuse`` stays light)."""
    if isinstance(value, bool | int | float):
        return value
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:
        item = value.item()  # type: ignore[attr-defined]
        if isinstance(item, bool | int | float):
            return item
    return None


# The range of each integer dtype: a Python int operand must fit the dtype the op computes
# in, or torch raises ("value cannot be converted to type int32_t without overflow").
_INTEGER_RANGE = {
    dtypes.int8.name: (-(2**7), 2**7 - 1),
    dtypes.uint8.name: (0, 2**8 - 1),
    dtypes.int16.name: (-(2**15), 2**15 - 1),
    dtypes.int32.name: (-(2**31), 2**31 - 1),
    dtypes.int64.name: (-(2**63), 2**63 - 1),
}


def check_scalars_fit(operands: Sequence[TensorView | Number], math: DType | None = None) -> None:
    """A FusionError for a Python int operand that does not fit the integer dtype of the
    math (by default torch's result type of the operands)."""
    views = [value for value in operands if isinstance(value, TensorView)]
    scalars = [value for value in operands if not isinstance(value, TensorView)]
    if not views or not scalars:
        return
    zero_dim = [view.ndim == 0 for view in views]
    math = math or dtypes.result_type([view.dtype for view in views], scalars, zero_dim)
    for value in scalars:
        check_scalar_fits(value, math)


def check_scalar_fits(value: Number, dtype: DType) -> None:
    """A FusionError for a Python int outside the range of the integer ``dtype``."""
    bounds = _INTEGER_RANGE.get(dtype.name)
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if bounds is not None and is_int and not bounds[0] <= value <= bounds[1]:
        raise FusionError(
            f"value {value} cannot be converted to type {dtype.name} without overflow"
        )
