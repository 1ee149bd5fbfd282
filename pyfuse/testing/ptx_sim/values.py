"""PTX types as NumPy arrays: the register file's bit storage and typed views of it.

A register holds raw bits in an unsigned array as wide as its declaration (``.b16`` -> uint16,
``.b32``/``.f32`` -> uint32, ``.b64``/``.f64`` -> uint64, ``.pred`` -> bool), one element per
thread of a CTA. An instruction reads an operand as its own type (``f32`` -> float32 from the
same bits; a narrower type truncates, a wider one zero-extends, as PTX's relaxed type rules
for registers allow) and writes results back as bits.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt

Array = npt.NDArray[Any]

NUMPY_TYPES: dict[str, Any] = {
    "pred": np.bool_,
    "b8": np.uint8, "u8": np.uint8, "s8": np.int8,
    "b16": np.uint16, "u16": np.uint16, "s16": np.int16, "f16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "b32": np.uint32, "u32": np.uint32, "s32": np.int32, "f32": np.float32,
    "b64": np.uint64, "u64": np.uint64, "s64": np.int64, "f64": np.float64,
    "f16x2": np.uint32, "bf16x2": np.uint32,
}  # fmt: skip
_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
TYPE_NAMES = frozenset(NUMPY_TYPES)


_WIDTHS = {name: int(np.dtype(t).itemsize) for name, t in NUMPY_TYPES.items()}


def width(type_: str) -> int:
    """Bytes of a PTX type (1 for pred)."""
    return _WIDTHS[type_]


def storage_dtype(declared: str) -> Any:
    if declared == "pred":
        return np.bool_
    return _BITS[width(declared)]


def is_float(type_: str) -> bool:
    return type_ in ("f16", "bf16", "f32", "f64")


def is_signed(type_: str) -> bool:
    return type_.startswith("s")


def from_bits(bits: Array, type_: str) -> Array:
    """``bits`` (any unsigned or bool array) read as ``type_``."""
    if type_ == "pred":
        return bits.astype(np.bool_)
    if bits.dtype == np.bool_:
        bits = bits.astype(np.uint8)
    unsigned = _BITS[width(type_)]
    if bits.dtype != unsigned:
        bits = bits.astype(unsigned)  # truncates or zero-extends
    return bits.view(NUMPY_TYPES[type_])


def to_bits(values: Array, type_: str, storage: Any) -> Array:
    """``values`` of ``type_`` as bits of a register stored as ``storage``."""
    if storage == np.bool_:
        return values.astype(np.bool_)
    values = np.asarray(values, dtype=NUMPY_TYPES[type_])
    bits = values.view(_BITS[width(type_)])
    if bits.dtype != storage:
        if is_signed(type_) and np.dtype(storage).itemsize > bits.dtype.itemsize:
            return values.astype(np.int64).astype(storage)  # sign-extends
        bits = bits.astype(storage)
    return bits


def immediate(value: int, float_bits: int, type_: str, count: int) -> Array:
    """An immediate operand as ``count`` lanes of ``type_``."""
    if float_bits:
        raw = np.array([value], dtype=np.uint32 if float_bits == 32 else np.uint64)
        number = raw.view(np.float32 if float_bits == 32 else np.float64)[0]
        if is_float(type_):
            return np.full(count, number, dtype=NUMPY_TYPES[type_])
        return from_bits(np.full(count, value, dtype=raw.dtype), type_)
    if type_ == "pred":
        return np.full(count, bool(value))
    if is_float(type_):
        return np.full(count, float(value), dtype=NUMPY_TYPES[type_])
    bits = _BITS[width(type_)]
    mask = (1 << (8 * width(type_))) - 1
    return np.full(count, value & mask, dtype=bits).view(NUMPY_TYPES[type_])


def round_to(values: Array, type_: str) -> Array:
    """Float64 (or float32) results rounded to a float ``type_`` (16-bit through float32, as
    one rounding from the exact value is what PTX's .rn gives; float64 -> float32 -> 16-bit
    can round twice, within the simulator's tolerance)."""
    with np.errstate(all="ignore"):
        return np.asarray(values).astype(NUMPY_TYPES[type_])


def flush_subnormals(values: Array) -> Array:
    """``.ftz``: float32 subnormal inputs and results are zero (sign kept)."""
    tiny = np.finfo(np.float32).tiny
    return np.where(np.abs(values) < tiny, np.copysign(0.0, values), values).astype(values.dtype)
