"""Symbolic inputs: :func:`spec` and how arrays are described by one.

A :class:`Spec` is what tracing needs of an argument: shape, dtype and element strides.
Arrays (NumPy, torch, CuPy, anything with ``__cuda_array_interface__``) are turned into
specs without touching their data, so ``trace`` and ``compile`` need no GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyfuse.errors import FusionError
from pyfuse.ir import dtypes
from pyfuse.ir.dtypes import DType


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides = []
    running = 1
    for extent in reversed(shape):
        strides.append(running)
        running *= max(extent, 1)
    return tuple(reversed(strides))


@dataclass(frozen=True)
class Spec:
    """A symbolic input: shape, dtype and element strides (row-major when not given)."""

    shape: tuple[int, ...]
    dtype: DType
    strides: tuple[int, ...]

    @property
    def is_contiguous(self) -> bool:
        significant = [
            (stride, expected)
            for extent, stride, expected in zip(
                self.shape, self.strides, contiguous_strides(self.shape), strict=True
            )
            if extent != 1
        ]
        return all(stride == expected for stride, expected in significant)


def spec(shape: Sequence[int], dtype: DType, strides: Sequence[int] | None = None) -> Spec:
    """A symbolic input of ``shape`` and ``dtype``; ``strides`` in elements (default row-major)."""
    shape_tuple = tuple(int(extent) for extent in shape)
    if any(extent < 0 for extent in shape_tuple):
        raise FusionError(f"spec: sizes must be >= 0, got {shape_tuple}")
    if not isinstance(dtype, DType):
        raise FusionError(f"spec: dtype must be a pyfuse dtype such as pf.float32, got {dtype!r}")
    if strides is None:
        stride_tuple = contiguous_strides(shape_tuple)
    else:
        stride_tuple = tuple(int(stride) for stride in strides)
        if len(stride_tuple) != len(shape_tuple):
            raise FusionError(
                f"spec: {len(stride_tuple)} strides for a shape of rank {len(shape_tuple)}"
            )
        if any(stride < 0 for stride in stride_tuple):
            raise FusionError(f"spec: negative strides are not supported, got {stride_tuple}")
    return Spec(shape_tuple, dtype, stride_tuple)


def _torch_dtype(array: Any) -> DType:
    name = str(array.dtype).removeprefix("torch.")
    table = {
        "float32": dtypes.float32,
        "float16": dtypes.float16,
        "bfloat16": dtypes.bfloat16,
        "float64": dtypes.float64,
        "int32": dtypes.int32,
        "int64": dtypes.int64,
        "bool": dtypes.bool_,
    }
    if name not in table:
        raise FusionError(f"unsupported tensor dtype {name}")
    return table[name]


def spec_of(argument: object) -> Spec:
    """The :class:`Spec` describing ``argument`` (a Spec, or an array of a supported kind)."""
    if isinstance(argument, Spec):
        return argument
    module = type(argument).__module__
    if module.startswith("torch"):
        tensor: Any = argument
        return spec(tuple(tensor.shape), _torch_dtype(tensor), tuple(tensor.stride()))
    shape = getattr(argument, "shape", None)
    dtype = getattr(argument, "dtype", None)
    strides = getattr(argument, "strides", None)
    if shape is None or dtype is None:
        raise FusionError(
            f"argument of type {type(argument).__name__} is not an array or a pf.spec"
        )
    try:
        pf_dtype = dtypes.from_numpy(dtype)
    except (ValueError, TypeError) as error:
        raise FusionError(str(error)) from None
    element_strides = None
    if strides is not None:
        itemsize = pf_dtype.itemsize
        element_strides = [stride // itemsize for stride in strides]
        if any(stride % itemsize for stride in strides):
            raise FusionError(f"strides {tuple(strides)} are not multiples of the item size")
    return spec(tuple(shape), pf_dtype, element_strides)
