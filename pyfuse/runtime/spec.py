"""Symbolic inputs (:func:`spec`) and how arrays are described, without touching their data.

A :class:`Spec` is what tracing needs of an argument: shape, dtype and element strides.
Arrays are turned into specs so ``trace`` and ``compile`` need no GPU. The runtime needs a
little more of a GPU array (address, device, stream): an :class:`ArrayInfo`, read from

- torch tensors and NumPy-style arrays (NumPy, CuPy) through their attributes;
- ``__cuda_array_interface__`` (versions 2 and 3): a dict with ``data``, ``shape``,
  ``typestr``, byte ``strides`` and, in v3, the ``stream`` the consumer must order after;
- DLPack: ``__dlpack_device__()`` and a ``__dlpack__()`` capsule, read with ctypes as a
  ``DLManagedTensor`` (capsule ``"dltensor"``) or a ``DLManagedTensorVersioned``
  (``"dltensor_versioned"``). The capsule is only read, never consumed: its destructor gives
  the export back to the producer, whose array the caller still holds.

Nothing here imports torch or CuPy.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Mapping, Sequence
from typing import Any

from pyfuse.errors import FusionError
from pyfuse.ir import dtypes
from pyfuse.ir.dtypes import DType
from pyfuse.ir.records import record

SUPPORTED_DTYPES = "float32, float16, bfloat16, float64, int8, uint8, int16, int32, int64, bool"


class ArrayFormatError(ValueError):
    """An array pyfuse cannot describe; the message says what and why, without an arg index."""


@record(frozen=True)
class ArrayInfo:
    """What pyfuse needs of a GPU array: ``device`` is a CUDA ordinal, -1 for host memory, or
    None when the producer does not say (the caller's current device); ``stream`` is the
    producer's stream handle (CUDA array interface v3) or None."""

    pointer: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: DType
    device: int | None
    stream: int | None = None


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major element strides of ``shape``."""
    strides = []
    running = 1
    for extent in reversed(shape):
        strides.append(running)
        running *= max(extent, 1)
    return tuple(reversed(strides))


def _element_strides(byte_strides: Sequence[int], itemsize: int) -> tuple[int, ...]:
    if any(stride % itemsize for stride in byte_strides):
        raise ArrayFormatError(
            f"byte strides {tuple(byte_strides)} are not multiples of the item size {itemsize}"
        )
    return tuple(stride // itemsize for stride in byte_strides)


@record(frozen=True)
class Spec:
    """A symbolic input: shape, dtype and element strides (row-major when not given), as
    :func:`spec` makes it: ``pf.spec((8, 64), pf.float32)``."""

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
    """A symbolic input of ``shape`` and ``dtype``; ``strides`` in elements (default row-major):
    ``fused.compile(pf.spec((8, 64), pf.bfloat16))``."""
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


# ---- __cuda_array_interface__ ------------------------------------------------------------------

# typestr without its byte-order character -> dtype. bfloat16 has no typestr of its own.
_TYPESTR = {
    "f4": dtypes.float32,
    "f2": dtypes.float16,
    "f8": dtypes.float64,
    "i1": dtypes.int8,
    "u1": dtypes.uint8,
    "i2": dtypes.int16,
    "i4": dtypes.int32,
    "i8": dtypes.int64,
    "b1": dtypes.bool_,
}


def _dtype_of_typestr(typestr: str) -> DType:
    if not isinstance(typestr, str) or len(typestr) < 2:
        raise ArrayFormatError(f"typestr {typestr!r} is not a NumPy type string")
    order, code = typestr[0], typestr[1:]
    if order == ">" and code != "b1":
        raise ArrayFormatError(f"big-endian typestr {typestr!r} is not supported")
    dtype = _TYPESTR.get(code)
    if dtype is None:
        raise ArrayFormatError(
            f"typestr {typestr!r} is not a supported dtype (supported: {SUPPORTED_DTYPES})"
        )
    return dtype


def describe_cuda_array_interface(interface: Mapping[str, Any]) -> ArrayInfo:
    """Read a ``__cuda_array_interface__`` dict (v2 or v3)."""
    try:
        shape = tuple(int(extent) for extent in interface["shape"])
        typestr = interface["typestr"]
        data = interface["data"]
    except (KeyError, TypeError) as error:
        raise ArrayFormatError(f"__cuda_array_interface__ lacks a field: {error}") from None
    if interface.get("mask") is not None:
        raise ArrayFormatError("masked arrays (__cuda_array_interface__ 'mask') are not supported")
    dtype = _dtype_of_typestr(typestr)
    pointer = int(data[0]) if data is not None and data[0] is not None else 0
    byte_strides = interface.get("strides")
    if byte_strides is None:
        strides = contiguous_strides(shape)
    else:
        if len(byte_strides) != len(shape):
            raise ArrayFormatError(f"{len(byte_strides)} strides for a shape of rank {len(shape)}")
        strides = _element_strides([int(s) for s in byte_strides], dtype.itemsize)
    stream = interface.get("stream")
    if stream is not None:
        stream = int(stream)
        if stream == 0:
            # v3 forbids 0 (ambiguous between the legacy and the per-thread default stream).
            raise ArrayFormatError("__cuda_array_interface__ stream 0 is not allowed; use 1 or 2")
    return ArrayInfo(pointer, shape, strides, dtype, None, stream)


# ---- DLPack ------------------------------------------------------------------------------------

DL_CPU = 1
DL_CUDA = 2
DL_CUDA_HOST = 3
DL_CUDA_MANAGED = 13

# (type code, bits) -> dtype, for lanes == 1: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4,
# kDLBool 6.
_DL_DTYPES = {
    (0, 8): dtypes.int8,
    (1, 8): dtypes.uint8,
    (0, 16): dtypes.int16,
    (0, 32): dtypes.int32,
    (0, 64): dtypes.int64,
    (2, 16): dtypes.float16,
    (2, 32): dtypes.float32,
    (2, 64): dtypes.float64,
    (4, 16): dtypes.bfloat16,
    (6, 8): dtypes.bool_,
}


class DLDevice(ctypes.Structure):
    _fields_ = (("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32))


class DLDataType(ctypes.Structure):
    _fields_ = (("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16))


class DLTensor(ctypes.Structure):
    _fields_ = (
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    )


DLDeleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = (
        ("dl_tensor", DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", DLDeleter),
    )


class DLPackVersion(ctypes.Structure):
    _fields_ = (("major", ctypes.c_uint32), ("minor", ctypes.c_uint32))


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = (
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", DLDeleter),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    )


@functools.cache
def _capsule_api() -> tuple[Any, Any]:
    """``PyCapsule_GetName`` and ``PyCapsule_GetPointer`` as private prototypes: setting
    argtypes on ``ctypes.pythonapi``'s shared attributes would change them for every other
    library in the process."""
    get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
        ("PyCapsule_GetName", ctypes.pythonapi)
    )
    get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", ctypes.pythonapi)
    )
    return get_name, get_pointer


def _dl_tensor_of(capsule: object) -> DLTensor:
    if type(capsule).__name__ != "PyCapsule":
        raise ArrayFormatError(f"__dlpack__ returned a {type(capsule).__name__}, not a capsule")
    get_name, get_pointer = _capsule_api()
    name = get_name(capsule)
    if name == b"dltensor":
        address = get_pointer(capsule, name)
        tensor: DLTensor = DLManagedTensor.from_address(address).dl_tensor
        return tensor
    if name == b"dltensor_versioned":
        address = get_pointer(capsule, name)
        managed = DLManagedTensorVersioned.from_address(address)
        if managed.version.major != 1:
            raise ArrayFormatError(f"DLPack version {managed.version.major} is not supported")
        versioned: DLTensor = managed.dl_tensor
        return versioned
    shown = name.decode(errors="replace") if name is not None else None
    raise ArrayFormatError(f"a DLPack capsule named {shown!r} (already consumed?)")


def describe_dlpack_capsule(capsule: object) -> ArrayInfo:
    """Read a DLPack capsule's DLTensor: address + byte offset, shape, strides, dtype, device."""
    tensor = _dl_tensor_of(capsule)
    code, bits, lanes = tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes
    dtype = _DL_DTYPES.get((code, bits))
    if dtype is None or lanes != 1:
        raise ArrayFormatError(
            f"DLPack dtype (code {code}, {bits} bits, {lanes} lanes) is not supported "
            f"(supported: {SUPPORTED_DTYPES})"
        )
    ndim = tensor.ndim
    shape = tuple(int(tensor.shape[i]) for i in range(ndim))
    if tensor.strides:
        strides = tuple(int(tensor.strides[i]) for i in range(ndim))
    else:
        strides = contiguous_strides(shape)
    device_type, device_id = tensor.device.device_type, tensor.device.device_id
    if device_type in (DL_CUDA, DL_CUDA_MANAGED):
        device: int = device_id
    elif device_type in (DL_CPU, DL_CUDA_HOST):
        device = -1
    else:
        raise ArrayFormatError(f"DLPack device type {device_type} is not a CUDA device")
    pointer = (tensor.data or 0) + tensor.byte_offset
    return ArrayInfo(pointer, shape, strides, dtype, device)


def describe_dlpack(obj: Any, stream: int = 1) -> ArrayInfo:
    """Describe an object with ``__dlpack__``; a CUDA producer orders its work before
    ``stream`` (DLPack's numbering: 1 is the legacy default stream)."""
    device_type, _ = obj.__dlpack_device__()
    if int(device_type) in (DL_CUDA, DL_CUDA_MANAGED):
        try:
            capsule = obj.__dlpack__(stream=stream)
        except TypeError:  # a producer without the stream keyword
            capsule = obj.__dlpack__()
    else:
        capsule = obj.__dlpack__()
    return describe_dlpack_capsule(capsule)


TORCH_DTYPE_NAMES = {
    "torch.float32": dtypes.float32,
    "torch.float16": dtypes.float16,
    "torch.bfloat16": dtypes.bfloat16,
    "torch.float64": dtypes.float64,
    "torch.int8": dtypes.int8,
    "torch.uint8": dtypes.uint8,
    "torch.int16": dtypes.int16,
    "torch.int32": dtypes.int32,
    "torch.int64": dtypes.int64,
    "torch.bool": dtypes.bool_,
}


def torch_dtype(dtype: Any) -> DType:
    """The pyfuse dtype of a torch dtype (read by name: torch is not imported here)."""
    found = TORCH_DTYPE_NAMES.get(str(dtype))
    if found is None:
        name = str(dtype).removeprefix("torch.")
        raise ArrayFormatError(f"dtype {name} is not supported (supported: {SUPPORTED_DTYPES})")
    return found


def describe_numpy_like(obj: Any) -> tuple[tuple[int, ...], DType, tuple[int, ...]]:
    """Shape, dtype and element strides of an object with NumPy-style ``shape``, ``dtype``
    and (optional) byte ``strides`` (NumPy, CuPy)."""
    try:
        dtype = dtypes.from_numpy(obj.dtype)
    except (ValueError, TypeError):
        raise ArrayFormatError(
            f"dtype {obj.dtype} is not supported (supported: {SUPPORTED_DTYPES})"
        ) from None
    shape = tuple(int(extent) for extent in obj.shape)
    byte_strides = getattr(obj, "strides", None)
    if byte_strides is None:
        return shape, dtype, contiguous_strides(shape)
    return shape, dtype, _element_strides([int(s) for s in byte_strides], dtype.itemsize)


def spec_of(argument: object) -> Spec:
    """The :class:`Spec` describing ``argument``: a Spec, or an array of a supported kind (torch,
    NumPy, CuPy, :class:`~pyfuse.runtime.arrays.DeviceArray`, anything with
    ``__cuda_array_interface__`` or ``__dlpack__``). Reads metadata only, never data."""
    if isinstance(argument, Spec):
        return argument
    try:
        shape, dtype, strides = _describe(argument)
    except ArrayFormatError as error:
        raise FusionError(str(error)) from None
    return spec(shape, dtype, strides)


def _describe(argument: Any) -> tuple[tuple[int, ...], DType, tuple[int, ...]]:
    module = type(argument).__module__
    if module.startswith("torch"):
        return tuple(argument.shape), torch_dtype(argument.dtype), tuple(argument.stride())
    if module.startswith("cupy"):
        return describe_numpy_like(argument)  # its interface property may synchronize
    pyfuse_info = getattr(argument, "pyfuse_array_info", None)
    if pyfuse_info is not None:  # a DeviceArray: bf16 has no __cuda_array_interface__ typestr
        info = pyfuse_info()
        return info.shape, info.dtype, info.strides
    interface = getattr(argument, "__cuda_array_interface__", None)
    if interface is not None:
        info = describe_cuda_array_interface(interface)
        return info.shape, info.dtype, info.strides
    if hasattr(argument, "shape") and hasattr(argument, "dtype"):
        return describe_numpy_like(argument)
    if hasattr(argument, "__dlpack__") and hasattr(argument, "__dlpack_device__"):
        info = describe_dlpack(argument)
        return info.shape, info.dtype, info.strides
    raise ArrayFormatError(
        f"argument of type {type(argument).__name__} is not an array or a pf.spec"
    )
