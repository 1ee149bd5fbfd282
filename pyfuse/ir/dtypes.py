"""Data types and torch-like type promotion.

Promotion follows torch: categories rank bool < integer < floating. Between two
tensors the higher category wins; within a category the wider type wins, and the
two 16-bit floats (bf16, f16) meet at f32; uint8 with a signed type no wider meets at
int16 (``uint8 + int8`` is int16, as in torch). A Python scalar only changes the result
when its category is higher than every tensor's (``int32_tensor * 2.5`` is f32,
``bf16_tensor * 2.5`` stays bf16).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pyfuse.ir.records import record

if TYPE_CHECKING:
    import numpy as np


class Category(enum.IntEnum):
    BOOL = 0
    INTEGER = 1
    FLOATING = 2


@record(frozen=True)
class DType:
    """A tensor element type (``pf.float32``, ``pf.bfloat16``, ``pf.int32``...):
    ``x.to(pf.bfloat16)``. ``short`` is the printer's name, ``ptx`` the PTX type suffix."""

    name: str
    short: str
    itemsize: int
    category: Category
    ptx: str

    @property
    def is_floating(self) -> bool:
        return self.category == Category.FLOATING

    @property
    def is_integer(self) -> bool:
        return self.category == Category.INTEGER

    @property
    def is_bool(self) -> bool:
        return self.category == Category.BOOL

    @property
    def bits(self) -> int:
        return self.itemsize * 8

    @property
    def is_unsigned(self) -> bool:
        return self.ptx.startswith("u")

    @property
    def is_narrow_integer(self) -> bool:
        """An integer of 1 or 2 bytes: kept and computed in 32-bit registers, wrapped to its
        width after every op (as 16-bit floats are computed in f32 and rounded)."""
        return self.category == Category.INTEGER and self.itemsize < 4

    def numpy(self) -> np.dtype[Any]:
        """The NumPy dtype of host arrays of this type (bf16 through ml_dtypes)."""
        import numpy as np  # loads with the first host array, not with pyfuse

        if self is bfloat16:
            import ml_dtypes

            bf16: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
            return bf16
        return np.dtype(_NUMPY_NAMES[self.name])

    def __repr__(self) -> str:
        return f"pf.{self.name}"

    # A dtype is a singleton: copies of the IR (Fusion.clone) share it, so identity checks hold.
    def __copy__(self) -> DType:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> DType:
        return self


float32 = DType("float32", "f32", 4, Category.FLOATING, "f32")
float16 = DType("float16", "f16", 2, Category.FLOATING, "f16")
bfloat16 = DType("bfloat16", "bf16", 2, Category.FLOATING, "bf16")
float64 = DType("float64", "f64", 8, Category.FLOATING, "f64")
int8 = DType("int8", "i8", 1, Category.INTEGER, "s8")
uint8 = DType("uint8", "u8", 1, Category.INTEGER, "u8")
int16 = DType("int16", "i16", 2, Category.INTEGER, "s16")
int32 = DType("int32", "i32", 4, Category.INTEGER, "s32")
int64 = DType("int64", "i64", 8, Category.INTEGER, "s64")
bool_ = DType("bool", "b", 1, Category.BOOL, "pred")

ALL_DTYPES: tuple[DType, ...] = (
    float32, float16, bfloat16, float64, int8, uint8, int16, int32, int64, bool_
)  # fmt: skip

_NUMPY_NAMES = {
    "float32": "float32",
    "float16": "float16",
    "float64": "float64",
    "int8": "int8",
    "uint8": "uint8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "bool": "bool",
}

# Default dtypes a Python scalar takes when it decides the category (torch's defaults).
DEFAULT_FLOAT = float32
DEFAULT_INT = int64


def from_numpy(dtype: Any) -> DType:
    """The pyfuse dtype of a NumPy (or ml_dtypes) dtype; ``ValueError`` if unsupported."""
    import numpy as np

    np_dtype = np.dtype(dtype)
    if np_dtype.name == "bfloat16":
        return bfloat16
    for candidate in ALL_DTYPES:
        if candidate is not bfloat16 and _NUMPY_NAMES[candidate.name] == np_dtype.name:
            return candidate
    raise ValueError(f"unsupported array dtype {np_dtype.name}")


def scalar_category(value: object) -> Category:
    if isinstance(value, bool):
        return Category.BOOL
    if isinstance(value, int):
        return Category.INTEGER
    if isinstance(value, float):
        return Category.FLOATING
    raise TypeError(f"not a Python scalar: {type(value).__name__}")


def promote_pair(a: DType, b: DType) -> DType:
    """The result type of a binary op on two tensors of types ``a`` and ``b``."""
    if a == b:
        return a
    if a.category != b.category:
        return a if a.category > b.category else b
    if a.is_floating:
        if a.itemsize != b.itemsize:
            return a if a.itemsize > b.itemsize else b
        return float32  # bf16 with f16: neither holds the other
    if a.is_unsigned != b.is_unsigned:
        unsigned, signed = (a, b) if a.is_unsigned else (b, a)
        # A signed type wider than the unsigned one holds it; else the next wider signed.
        return signed if signed.itemsize > unsigned.itemsize else int16
    return a if a.itemsize > b.itemsize else b


def result_type(
    tensor_dtypes: Sequence[DType], scalars: Sequence[object], zero_dim: Sequence[bool] = ()
) -> DType:
    """torch's result_type of tensors and Python scalars. ``zero_dim`` flags the 0-d tensors
    (all False when empty): as in torch, dimensioned tensors promote; a 0-d tensor decides the
    type only where its category is higher (``bf16[4] + f32[]`` is bf16, ``i32[4] + f64[]``
    is f64); a scalar never widens its category."""
    if not tensor_dtypes:
        raise ValueError("result_type needs at least one tensor dtype")
    flags = list(zero_dim) or [False] * len(tensor_dtypes)
    dimensioned = [d for d, zero in zip(tensor_dtypes, flags, strict=True) if not zero]
    zeros = [d for d, zero in zip(tensor_dtypes, flags, strict=True) if zero]
    result = _promote_all(dimensioned) if dimensioned else None
    if zeros:
        zero_result = _promote_all(zeros)
        if result is None or zero_result.category > result.category:
            result = zero_result
    assert result is not None
    for value in scalars:
        category = scalar_category(value)
        if category > result.category:
            result = DEFAULT_FLOAT if category == Category.FLOATING else DEFAULT_INT
    return result


def _promote_all(dtypes_: Sequence[DType]) -> DType:
    result = dtypes_[0]
    for dtype in dtypes_[1:]:
        result = promote_pair(result, dtype)
    return result


def scalar_dtype(value: object) -> DType:
    """The dtype a Python scalar has on its own."""
    category = scalar_category(value)
    if category == Category.BOOL:
        return bool_
    if category == Category.INTEGER:
        return DEFAULT_INT
    return DEFAULT_FLOAT
