"""Array kinds at call time, and :class:`DeviceArray`, the array pyfuse allocates itself.

A *kind* is a family of arguments (torch tensors, CuPy arrays, pyfuse's DeviceArrays,
``__cuda_array_interface__`` objects, DLPack objects, Python numbers, host arrays): it knows
how to describe one (an :class:`~pyfuse.runtime.spec.ArrayInfo`, read from metadata only)
and how to run a bound variant for it: where outputs are allocated and on which stream the
kernels launch. Outputs follow the kind of the first array argument.

:func:`call_key` is the hot path's single pass over the arguments; :func:`describe_arguments`
is the cold path's, which checks everything. Nothing here imports torch or CuPy until an
argument of that kind arrives.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

from pyfuse.ir import dtypes
from pyfuse.ir.dtypes import DType
from pyfuse.ir.records import record
from pyfuse.runtime.spec import (
    TORCH_DTYPE_NAMES,
    ArrayFormatError,
    ArrayInfo,
    contiguous_strides,
    describe_cuda_array_interface,
    describe_dlpack,
    describe_numpy_like,
    torch_dtype,
)

# ---- DeviceArray -------------------------------------------------------------------------------


def _release(pointer: int) -> None:
    from pyfuse.backend_ptx import driver

    driver.mem_free(pointer)


class DeviceArray:
    """A row-major GPU array allocated by pyfuse through the driver.

    Returned for inputs that are neither torch tensors nor CuPy arrays. It exposes
    ``__cuda_array_interface__`` (v3, with the stream that wrote it), ``shape``, ``dtype``
    (a NumPy dtype; ``ml_dtypes.bfloat16`` for bf16), byte ``strides``, and
    :meth:`numpy` to copy it to the host. The memory is freed when the object is collected,
    with that of the launch's intermediates that made it.
    """

    def __init__(
        self,
        shape: Sequence[int],
        dtype: DType,
        *,
        device: int = 0,
        stream: int = 0,
    ) -> None:
        from pyfuse.backend_ptx import driver

        self.shape = tuple(int(extent) for extent in shape)
        self.pf_dtype = dtype
        self.dtype = dtype.numpy()
        self.device = device
        self.stream = stream
        self.size = math.prod(self.shape)
        self.nbytes = self.size * dtype.itemsize
        self.strides = tuple(s * dtype.itemsize for s in contiguous_strides(self.shape))
        self.pointer = driver.mem_alloc(self.nbytes, device=device)
        # Other device memory (a launch's intermediates) kept until this array goes.
        self._keepalive: tuple[object, ...] = ()
        self._finalizer = weakref.finalize(self, _release, self.pointer)
        # At exit the context may already be gone; the process's memory goes with it.
        self._finalizer.atexit = False

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {
            "version": 3,
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.pointer, False),
            "strides": None,
            # v3 numbers the legacy default stream 1; pyfuse launches on handle 0 for it.
            "stream": self.stream if self.stream else 1,
        }

    def pyfuse_array_info(self) -> ArrayInfo:
        elements = contiguous_strides(self.shape)
        return ArrayInfo(self.pointer, self.shape, elements, self.pf_dtype, self.device)

    def numpy(self) -> np.ndarray[Any, Any]:
        """A host copy, after the stream that wrote this array has finished."""
        from pyfuse.backend_ptx import driver

        host = np.empty(self.shape, dtype=self.dtype)
        if self.nbytes:
            driver.context(self.device)
            driver.stream_synchronize(self.stream)
            driver.memcpy_dtoh(host, self.pointer, self.nbytes)
        return host

    def free(self) -> None:
        """Free the memory now (it is freed at collection otherwise)."""
        self._finalizer()
        self._keepalive = ()

    def __repr__(self) -> str:
        return (
            f"<pyfuse.DeviceArray shape={self.shape} dtype={self.pf_dtype.name} cuda:{self.device}>"
        )


# ---- array kinds: describing arguments, allocating outputs, choosing the stream -----------------


class ArgumentError(Exception):
    """An argument the runtime cannot take (its message names the argument index); the
    runtime re-raises it as ``InputError`` naming the function and the caller's line."""


class LoadedKernels(Protocol):
    """A compiled variant's kernels loaded on one device (``runtime.launch.Loaded``)."""

    device: int
    # One kernel whose parameters are the buffers in order: ``direct(buffers, stream)``
    # launches it (without making the device's context current); None otherwise.
    direct: Callable[[list[int], int], None] | None

    def launch(self, buffers: list[int], stream: Any) -> None: ...


class LaunchPlan(Protocol):
    """Per-variant facts the kinds allocate from (``runtime.launch.Plan``)."""

    @property
    def outputs(self) -> tuple[tuple[tuple[int, ...], DType], ...]: ...

    @property
    def workspace_bytes(self) -> int: ...

    @property
    def workspace_offsets(self) -> tuple[int, ...]: ...

    @property
    def like_first_input(self) -> tuple[bool, ...]: ...


class Bound(Protocol):
    """A variant bound to one device and array kind: ``run`` allocates and launches.

    ``arrays`` are the call's arguments (the first array among them is of the bound kind),
    ``pointers`` the addresses of its arrays in order."""

    def run(self, arrays: Sequence[object], pointers: list[int], stream: int | None) -> Any: ...


class Kind:
    """A family of arguments: how to describe one and how to run a variant for it."""

    name = "kind"

    def describe(self, array: Any) -> ArrayInfo:
        """Address, shape, element strides, dtype, device; ArrayFormatError when unusable."""
        raise NotImplementedError

    def bind(self, loaded: LoadedKernels, plan: LaunchPlan) -> Bound:
        """A runner that allocates outputs of this kind and launches ``loaded``."""
        return DeviceArrayBound(loaded, plan)

    def launch_stream(self, device: int, stream: int | None) -> int:
        """The stream a bound variant of this kind launches on, for a call whose arrays were
        written on ``stream`` (the call key's; None: the legacy default stream)."""
        return 0 if stream is None else stream

    def __repr__(self) -> str:
        return f"<array kind {self.name}>"


class TorchKind(Kind):
    """torch tensors: outputs from ``torch.empty`` (the caching allocator), launched on
    ``torch.cuda.current_stream(device)``."""

    name = "torch"

    def describe(self, array: Any) -> ArrayInfo:
        dtype = torch_dtype(array.dtype)
        device = array.get_device()
        if device < 0:
            raise ArrayFormatError(
                "a torch tensor on the CPU; move it to the GPU (x.cuda()) or use "
                "fused.reference(...) to evaluate on the host"
            )
        shape, strides = tuple(array.shape), tuple(array.stride())
        return ArrayInfo(array.data_ptr(), shape, strides, dtype, device)

    def bind(self, loaded: LoadedKernels, plan: LaunchPlan) -> Bound:
        return TorchBound(loaded, plan)

    def launch_stream(self, device: int, stream: int | None) -> int:
        return _torch_stream_handle(device)


class DirectParts(NamedTuple):
    """A bound plan of one directly launched kernel and one output, taken apart for the warm
    path's shortcut (:mod:`pyfuse.runtime.repeat_call`): ``allocate(*layout)`` makes the
    output, ``stream(device)`` is the current stream's handle, ``launch(pointers, stream)``
    launches."""

    allocate: Callable[..., Any]
    layout: tuple[Any, ...]
    stream: Callable[[int], int]
    device: int
    launch: Callable[[list[int], int], None]


class TorchBound:
    def __init__(self, loaded: LoadedKernels, plan: LaunchPlan) -> None:
        import torch

        # The torch dtype of each pyfuse dtype: the inverse of spec's table of torch names.
        table = {
            dtype: getattr(torch, name[len("torch.") :])
            for name, dtype in TORCH_DTYPE_NAMES.items()
        }
        self._loaded = loaded
        self._empty = torch.empty
        self._uint8 = torch.uint8
        self._index = loaded.device
        self._device = torch.device("cuda", loaded.device)
        self._outputs = tuple((shape, table[dtype]) for shape, dtype in plan.outputs)
        self._single = len(self._outputs) == 1
        # Outputs come from the first input tensor's allocator entry points, cheaper than
        # torch.empty's argument parsing: empty_like where the output has its shape, dtype and
        # row-major layout, else new_empty (contiguous, on its device).
        self._like = plan.like_first_input
        self._empty_like = torch.empty_like
        # Faster still (docs/performance.md, "Measured design choices"): the allocator entry
        # point torch.compile's generated code uses, which allocates on the current device;
        # so only where there is one device.
        fast = _fast_allocator(torch)
        self._allocate = None
        if fast is not None:
            self._allocate = fast
            self._layouts = tuple(
                (shape, contiguous_strides(shape), dtype) for shape, dtype in self._outputs
            )
        self._workspace_bytes = plan.workspace_bytes
        self._workspace_offsets = plan.workspace_offsets
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        self._stream = raw if raw is not None else _torch_stream_handle

    def direct_parts(self) -> DirectParts | None:
        """What the warm path's shortcut runs inline instead of :meth:`run`, where this plan
        is one kernel launched directly (``LoadedKernels.direct``) writing one output from the
        fast allocator, with no workspace; None otherwise."""
        direct = self._loaded.direct
        if direct is None or self._allocate is None or not self._single or self._workspace_bytes:
            return None
        return DirectParts(self._allocate, self._layouts[0], self._stream, self._index, direct)

    def run(self, arrays: Sequence[object], pointers: list[int], stream: int | None) -> Any:
        allocate = self._allocate
        if allocate is not None and self._single:
            output = allocate(*self._layouts[0])
            pointers.append(output.data_ptr())
        elif allocate is not None:
            outputs = [allocate(*layout) for layout in self._layouts]
            pointers += [output.data_ptr() for output in outputs]
        elif self._single:
            first = _first_array(arrays)
            shape, dtype = self._outputs[0]
            if self._like[0]:
                output = self._empty_like(first)
            else:
                output = first.new_empty(shape, dtype=dtype)
            pointers.append(output.data_ptr())
        else:
            first = _first_array(arrays)
            outputs = [
                self._empty_like(first) if like else first.new_empty(shape, dtype=dtype)
                for (shape, dtype), like in zip(self._outputs, self._like, strict=True)
            ]
            pointers += [output.data_ptr() for output in outputs]
        if self._workspace_bytes:
            # Freed when this returns: the allocator reuses it only in this stream's order.
            workspace = self._empty(self._workspace_bytes, dtype=self._uint8, device=self._device)
            base = workspace.data_ptr()
            pointers += [base + offset for offset in self._workspace_offsets]
        self._loaded.launch(pointers, self._stream(self._index))
        return output if self._single else tuple(outputs)


def _fast_allocator(torch: Any) -> Callable[..., Any] | None:
    """torch's ``_empty_strided_cuda(shape, strides, dtype)`` where this process sees one
    CUDA device (it allocates on the current one) and the build has it; else None."""
    guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
    allocate = getattr(guards, "_empty_strided_cuda", None)
    if allocate is None or torch.cuda.device_count() != 1:
        return None
    fast: Callable[..., Any] = allocate
    return fast


def _first_array(arrays: Sequence[object]) -> Any:
    """The first argument that is not a Python number (the one that decided the kind)."""
    for array in arrays:
        if kind_of(array) is not NUMBER:
            return array
    raise ArgumentError("no array among the arguments")


def _torch_stream_handle(device: int) -> int:
    import torch

    return int(torch.cuda.current_stream(device).cuda_stream)


class CupyKind(Kind):
    """CuPy arrays: outputs from ``cupy.empty`` (its memory pool), launched on CuPy's
    current stream."""

    name = "cupy"

    def describe(self, array: Any) -> ArrayInfo:
        shape, dtype, strides = describe_numpy_like(array)
        return ArrayInfo(int(array.data.ptr), shape, strides, dtype, int(array.device.id))

    def bind(self, loaded: LoadedKernels, plan: LaunchPlan) -> Bound:
        return CupyBound(loaded, plan)

    def launch_stream(self, device: int, stream: int | None) -> int:
        import cupy

        return int(cupy.cuda.get_current_stream().ptr)


class CupyBound:
    def __init__(self, loaded: LoadedKernels, plan: LaunchPlan) -> None:
        import cupy

        for _, dtype in plan.outputs:
            if dtype is dtypes.bfloat16:
                raise ArgumentError(
                    "CuPy has no bfloat16 arrays for the bf16 output; cast the output inside "
                    "the fused function or pass torch tensors"
                )
        self._cupy = cupy
        self._loaded = loaded
        self._device = cupy.cuda.Device(loaded.device)
        self._outputs = tuple((shape, dtype.numpy()) for shape, dtype in plan.outputs)
        self._single = len(self._outputs) == 1
        self._workspace_bytes = plan.workspace_bytes
        self._workspace_offsets = plan.workspace_offsets

    def run(self, arrays: Sequence[object], pointers: list[int], stream: int | None) -> Any:
        cupy = self._cupy
        with self._device:
            outputs = [cupy.empty(shape, dtype=dtype) for shape, dtype in self._outputs]
            buffers = pointers + [int(output.data.ptr) for output in outputs]
            if self._workspace_bytes:
                workspace = cupy.empty(self._workspace_bytes, dtype=cupy.uint8)
                base = int(workspace.data.ptr)
                buffers += [base + offset for offset in self._workspace_offsets]
            self._loaded.launch(buffers, cupy.cuda.get_current_stream().ptr)
        return outputs[0] if self._single else tuple(outputs)


class DeviceArrayBound:
    """Outputs as :class:`DeviceArray`; launched on the inputs' stream (CUDA array interface
    v3), else on the legacy default stream."""

    def __init__(self, loaded: LoadedKernels, plan: LaunchPlan) -> None:
        self._loaded = loaded
        self._outputs = plan.outputs
        self._single = len(plan.outputs) == 1
        self._workspace_bytes = plan.workspace_bytes
        self._workspace_offsets = plan.workspace_offsets

    def run(self, arrays: Sequence[object], pointers: list[int], stream: int | None) -> Any:
        handle = 0 if stream is None else stream  # 1 and 2 are the driver's handles as well
        device = self._loaded.device
        keepalive: tuple[object, ...] = ()
        buffers = list(pointers)
        outputs = [
            DeviceArray(shape, dtype, device=device, stream=handle)
            for shape, dtype in self._outputs
        ]
        buffers += [output.pointer for output in outputs]
        if self._workspace_bytes:
            workspace = DeviceArray((self._workspace_bytes,), dtypes.bool_, device=device)
            buffers += [workspace.pointer + offset for offset in self._workspace_offsets]
            keepalive = (workspace,)
        self._loaded.launch(buffers, handle)
        for output in outputs:
            output._keepalive = keepalive  # intermediates live until the outputs go
        return outputs[0] if self._single else tuple(outputs)


class DeviceArrayKind(Kind):
    name = "pyfuse"

    def describe(self, array: Any) -> ArrayInfo:
        return array.pyfuse_array_info()  # type: ignore[no-any-return]


class InterfaceKind(Kind):
    """Anything with ``__cuda_array_interface__`` (Numba, JAX, ...)."""

    name = "cuda_array_interface"

    def describe(self, array: Any) -> ArrayInfo:
        return describe_cuda_array_interface(array.__cuda_array_interface__)


class DLPackKind(Kind):
    """Anything with ``__dlpack__`` and ``__dlpack_device__``; producers order their work
    before the legacy default stream, where pyfuse launches for them."""

    name = "dlpack"

    def describe(self, array: Any) -> ArrayInfo:
        return describe_dlpack(array, stream=1)


class HostKind(Kind):
    name = "numpy"

    def describe(self, array: Any) -> ArrayInfo:
        raise ArrayFormatError(
            f"a NumPy array ({array.dtype}{list(array.shape)}) lives in host memory; move it "
            "to the GPU (torch.from_numpy(x).cuda(), cupy.asarray(x)) or use "
            "fused.reference(...) to evaluate on the host"
        )


class UnsupportedKind(Kind):
    name = "unsupported"

    def describe(self, array: Any) -> ArrayInfo:
        raise ArrayFormatError(
            f"cannot use a {type(array).__name__}: pass GPU arrays (torch, CuPy, "
            "__cuda_array_interface__ or __dlpack__ objects) or Python numbers"
        )


class NumberKind(Kind):
    """Python numbers: constants of the trace, keyed by type and value."""

    name = "number"


TORCH = TorchKind()
CUPY = CupyKind()
PYFUSE = DeviceArrayKind()
INTERFACE = InterfaceKind()
DLPACK = DLPackKind()
HOST = HostKind()
UNSUPPORTED = UnsupportedKind()
NUMBER = NumberKind()

_KIND_OF_TYPE: dict[type, Kind] = {bool: NUMBER, int: NUMBER, float: NUMBER, DeviceArray: PYFUSE}


def _classify(array: object) -> Kind:
    """The kind of arguments of ``array``'s type, decided once per type (from the first
    instance: some objects set ``__cuda_array_interface__`` per instance)."""
    cls = type(array)
    module = cls.__module__ or ""
    if issubclass(cls, (bool, int, float)):
        kind: Kind = NUMBER
    elif issubclass(cls, DeviceArray):
        kind = PYFUSE
    elif module.startswith("torch") and _is_torch_tensor(cls):
        kind = TORCH
    elif module.startswith("cupy") and hasattr(cls, "__cuda_array_interface__"):
        kind = CUPY
    elif issubclass(cls, np.ndarray) or issubclass(cls, np.generic):
        kind = HOST
    elif hasattr(array, "__cuda_array_interface__"):
        kind = INTERFACE
    elif hasattr(cls, "__dlpack__") and hasattr(cls, "__dlpack_device__"):
        kind = DLPACK
    else:
        kind = UNSUPPORTED
    _KIND_OF_TYPE[cls] = kind
    return kind


def _is_torch_tensor(cls: type) -> bool:
    import torch  # the caller holds a torch object, so torch is already imported

    return issubclass(cls, torch.Tensor)


def kind_of(array: object) -> Kind:
    return _KIND_OF_TYPE.get(type(array)) or _classify(array)


def call_key(arrays: Sequence[object]) -> tuple[tuple[Any, ...], list[int], int | None]:
    """The hot path's look at the arguments: (call key, array addresses, producer stream).

    Per array the key holds shape, strides, dtype and device (torch tensors read inline, the
    common case); per Python number its type and value; last, the alignment class (all
    addresses multiples of 16 bytes). Nothing is validated here: a key that was never bound
    goes to the cold path, which checks everything.
    """
    items: list[Any] = []
    pointers: list[int] = []
    aligned = True
    stream: int | None = None
    for index, array in enumerate(arrays):
        kind = _KIND_OF_TYPE.get(type(array)) or _classify(array)
        if kind is TORCH:
            pointer = array.data_ptr()  # type: ignore[attr-defined]
            items.append(
                (array.shape, array.stride(), array.dtype, array.get_device())  # type: ignore[attr-defined]
            )
        elif kind is NUMBER:
            items.append((type(array), array))
            continue
        else:
            try:
                info = kind.describe(array)
            except ArrayFormatError as error:
                raise ArgumentError(f"argument {index}: {error}") from None
            pointer = info.pointer
            items.append((kind, info.shape, info.strides, info.dtype, info.device))
            if stream is None:
                stream = info.stream
        pointers.append(pointer)
        if pointer & 15:
            aligned = False
    items.append(aligned)
    return tuple(items), pointers, stream


@record(frozen=True)
class Described:
    """The cold path's look at the arguments, checked: ``kind`` (of the first array) decides
    the outputs; ``device`` is the arrays' common device (None: none of them says)."""

    arguments: tuple[ArrayInfo | bool | int | float, ...]
    kind: Kind
    device: int | None
    aligned: bool


def describe_arguments(arrays: Sequence[object]) -> Described:
    """Describe and check every argument: host memory, unsupported dtypes, negative strides
    and arrays on different devices raise ArgumentError naming the argument."""
    arguments: list[ArrayInfo | bool | int | float] = []
    first_kind: Kind | None = None
    device: int | None = None
    device_from = -1
    for index, array in enumerate(arrays):
        kind = kind_of(array)
        if kind is NUMBER:
            arguments.append(array)  # type: ignore[arg-type]
            continue
        try:
            info = kind.describe(array)
        except ArrayFormatError as error:
            raise ArgumentError(f"argument {index}: {error}") from None
        if info.device == -1:
            raise ArgumentError(
                f"argument {index}: a {kind.name} array in host memory; move it to the GPU "
                "or use fused.reference(...) to evaluate on the host"
            )
        if any(stride < 0 for stride in info.strides):
            raise ArgumentError(
                f"argument {index}: negative strides {info.strides} are not supported; pass a copy"
            )
        if info.device is not None:
            if device is None:
                device, device_from = info.device, index
            elif info.device != device:
                raise ArgumentError(
                    f"argument {index} is on cuda:{info.device} but argument {device_from} is "
                    f"on cuda:{device}; all arrays must be on one device"
                )
        first_kind = first_kind or kind
        arguments.append(info)
    aligned = all(a.pointer % 16 == 0 for a in arguments if isinstance(a, ArrayInfo))
    return Described(tuple(arguments), first_kind or PYFUSE, device, aligned)


def gpu_info(array: object) -> ArrayInfo | None:
    """An array's description when it is a GPU-side kind that describes cleanly, else None."""
    kind = kind_of(array)
    if kind in (NUMBER, HOST, UNSUPPORTED):
        return None
    try:
        return kind.describe(array)
    except ArrayFormatError:
        return None
