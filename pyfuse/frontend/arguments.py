"""Reading the arguments of the public ops the way torch does: dims, sizes, flags, dtypes,
Python and NumPy numbers.

:func:`normalize_dim` reads one ``dim`` and :func:`reduction_dims` a ``dim`` argument of a
reduction (negative dims, a 0-d tensor's 0 and -1, torch's "Dimension out of range" error),
:func:`reduction_arguments` a reduction's ``dim`` and ``keepdim`` under their NumPy names too;
:func:`int_argument`, :func:`sizes` and :func:`flag` read an int, a shape and a bool as
torch's argument parser does (a NumPy integer is an int; a float, a bool where an int goes
or a string never is); :func:`dtype_argument` a pyfuse dtype. :func:`check_traced` refuses what
is no traced tensor where one goes, :func:`scalar_value` accepts a NumPy scalar where a
Python number goes, and :func:`check_scalars_fit` refuses a Python
int that the op's integer dtype cannot hold, as torch does. Each raises
:class:`FusionError`; the op that called it adds its name and the user's line. It imports
no other frontend module (a traced Tensor is recognised by its ``tv``), so every one of
them may use it.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from typing import Protocol, TypeGuard, TypeVar

from pyfuse.errors import FusionError
from pyfuse.ir import dtypes
from pyfuse.ir.dtypes import DType
from pyfuse.ir.tensor import TensorView

Number = bool | int | float
Dims = int | Sequence[int] | None  # a ``dim`` argument: one axis, several, or all (None)
Keepdims = bool | None  # ``keepdims``, NumPy's name for ``keepdim``: None where not given
DimArgument = TypeVar("DimArgument")  # what a reduction's ``dim`` takes (pf.max's also a tensor)


class Ranked(Protocol):
    @property
    def ndim(self) -> int: ...


class _Traced(Protocol):
    """What a traced Tensor has (read structurally: this module stands under the Tensor)."""

    tv: TensorView


def _is_traced(value: object) -> TypeGuard[_Traced]:
    # What isinstance of a runtime-checkable Protocol tests, without its cost: that check
    # walked the protocol's attributes on every call, a fifth of the tracing time once every
    # op checked its tensor arguments.
    return hasattr(value, "tv")


def _describe(value: object) -> str:
    return f"{type(value).__name__} {value!r}"


def index_value(value: object) -> int | None:
    """``value`` as a Python int where torch reads it as one: an int or a NumPy integer
    (anything with ``__index__``); None for a bool (torch refuses ``dim=True``, and Python
    would read it as 1), a float (``int(1.5)`` would truncate it silently), a string or a
    traced tensor (whose ``__index__`` refuses: it has no value while tracing)."""
    if isinstance(value, bool) or _is_traced(value) or not hasattr(type(value), "__index__"):
        return None
    try:
        return operator.index(value)  # type: ignore[arg-type]  # it has __index__
    except TypeError:  # a NumPy bool, or an array of more than one element
        return None


def int_argument(value: object, what: str) -> int:
    """``value`` read as an int (see :func:`index_value`), or a FusionError naming ``what``."""
    number = index_value(value)
    if number is None:
        raise FusionError(f"{what} must be an int, got {_describe(value)}")
    return number


def normalize_dim(dim: object, rank: int, what: str = "dim") -> int:
    """One dim of a tensor of ``rank`` dims as an index in ``[0, rank)``: negative dims count
    from the end, and a 0-d tensor takes 0 and -1 (giving 0); torch's error otherwise."""
    index = int_argument(dim, what)
    bound = max(rank, 1)
    if not -bound <= index < bound:
        raise FusionError(
            f"Dimension out of range (expected to be in range of [{-bound}, {bound - 1}], "
            f"but got {index})"
        )
    return index % bound


def reduction_dims(x: Ranked, dims: Dims, *, empty_is_all: bool = True) -> list[int]:
    """torch's reading of a reduction's ``dim``: None is every axis, and so is an empty
    sequence (torch.sum(x, ()) reduces every axis, pytorch#29137; ``squeeze`` passes
    ``empty_is_all=False``: it squeezes nothing); negative dims count from the end, and a 0-d
    tensor takes 0 and -1 (reducing nothing); FusionError in torch's words otherwise."""
    rank = x.ndim
    if dims is None:
        return list(range(rank))
    if index_value(dims) is not None:
        listed: list[object] = [dims]
    elif isinstance(dims, Iterable) and not isinstance(dims, str) and not _is_traced(dims):
        listed = list(dims)
    else:
        raise FusionError(f"dim must be an int or a sequence of ints, got {_describe(dims)}")
    if not listed and empty_is_all:
        return list(range(rank))
    normalized: list[int] = []
    for dim in listed:
        if index_value(dim) is None:
            raise FusionError(f"dim must be an int or a sequence of ints, got {dims!r}")
        axis = normalize_dim(dim, rank)
        if axis in normalized:
            raise FusionError(f"dim {axis} appears multiple times in the list of dims")
        normalized.append(axis)
    return sorted(normalized) if rank else []


def reduction_arguments(
    dim: DimArgument | None, keepdim: object, axis: DimArgument | None, keepdims: object
) -> tuple[DimArgument | None, bool]:
    """A reduction's ``dim`` and ``keepdim`` (read as a flag), given under torch's names or
    NumPy's, ``axis`` and ``keepdims``, which torch's argument parser accepts for every
    ``dim`` and ``keepdim`` (``x.sum(axis=1, keepdims=True)``). One argument given under both
    names is refused, as torch refuses it; a name left at its default counts as not given
    (``dim=None, axis=1`` reads as ``axis=1``)."""
    if axis is not None:
        if dim is not None:
            raise FusionError(
                f"dim and axis name one argument (axis is NumPy's name for dim): give one, "
                f"got dim={dim!r} and axis={axis!r}"
            )
        dim = axis
    if keepdims is None:
        return dim, flag(keepdim, "keepdim")
    if keepdim is not False:
        raise FusionError(
            f"keepdim and keepdims name one argument (keepdims is NumPy's name for keepdim): "
            f"give one, got keepdim={keepdim!r} and keepdims={keepdims!r}"
        )
    return dim, flag(keepdims, "keepdims")


def sizes(value: object, what: str = "size") -> tuple[int, ...]:
    """A shape argument as torch reads one: one int, or a sequence of ints (NumPy integers
    too). A float is refused rather than truncated (``x.reshape(4.9, 6)`` is no (4, 6));
    the caller checks the signs (reshape and expand take -1, full does not)."""
    one = index_value(value)
    if one is not None:
        return (one,)
    if isinstance(value, Iterable) and not isinstance(value, str) and not _is_traced(value):
        listed = list(value)
        read = [index_value(item) for item in listed]
        if all(number is not None for number in read):
            return tuple(number for number in read if number is not None)
    raise FusionError(f"{what} must be an int or a sequence of ints, got {_describe(value)}")


def flag(value: object, what: str) -> bool:
    """A bool argument (``keepdim``): a Python or NumPy bool. Anything else is refused, as
    torch does: ``keepdim="no"`` is truthy and would keep the dims."""
    if isinstance(value, bool):
        return value
    numpy_bool = getattr(getattr(value, "dtype", None), "kind", None) == "b"
    if type(value).__module__ == "numpy" and numpy_bool and getattr(value, "ndim", None) == 0:
        return bool(value)
    raise FusionError(f"{what} must be a bool, got {_describe(value)}")


def dtype_argument(value: object, example: str = "pf.float32") -> DType:
    """A pyfuse dtype argument, or a FusionError that says which kind of value goes there."""
    if not isinstance(value, DType):
        raise FusionError(f"dtype must be a pyfuse dtype such as {example}, got {value!r}")
    return value


def check_traced(value: object, what: str) -> None:
    """A FusionError unless ``value`` is a traced tensor (the op's argument ``what``), with a
    hint for the values a user passes there by mistake."""
    if _is_traced(value):
        return
    hint = ""
    if hasattr(value, "values") and hasattr(value, "indices"):
        hint = ": x.max(dim) is a (values, indices) pair, as in torch; use its .values"
    elif type(value).__module__ == "numpy":
        hint = ": pass NumPy arrays to the fused function as arguments"
    raise FusionError(f"{what} must be a traced tensor, got {type(value).__name__}{hint}")


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
