"""A stand-in for ``cuda.bindings.driver``, for testing the driver layer without a GPU.

It mimics the binding's conventions (every call returns ``(CUresult, *outputs)``,
enums are constructible from ints, ``cuuint32_t``/``cuuint64_t`` wrappers) and
records what it was asked. ``cuLaunchKernel`` decodes the ``void*[]`` it gets,
following ``expect_params``, exactly as the real driver reads argument memory.
"""

from __future__ import annotations

import ctypes
import enum
import threading
from dataclasses import dataclass, field
from typing import Any

from pyfuse.backend_ptx.abi import TENSOR_MAP_BYTES, ParamKind


class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_NO_DEVICE = 100
    CUDA_ERROR_INVALID_CONTEXT = 201
    CUDA_ERROR_INVALID_PTX = 218
    CUDA_ERROR_CONTEXT_IS_DESTROYED = 709
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900


class CUjit_option(enum.IntEnum):  # noqa: N801 (binding name)
    CU_JIT_INFO_LOG_BUFFER = 3
    CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4
    CU_JIT_ERROR_LOG_BUFFER = 5
    CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6
    CU_JIT_OPTIMIZATION_LEVEL = 7
    CU_JIT_LOG_VERBOSE = 12


class CUstreamCaptureMode(enum.IntEnum):
    CU_STREAM_CAPTURE_MODE_GLOBAL = 0
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1
    CU_STREAM_CAPTURE_MODE_RELAXED = 2


class CUjitInputType(enum.IntEnum):
    CU_JIT_INPUT_PTX = 1


class CUfunction_attribute(enum.IntEnum):  # noqa: N801
    CU_FUNC_ATTRIBUTE_NUM_REGS = 4
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
    CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14


class CUdevice_attribute(enum.IntEnum):  # noqa: N801
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8
    CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10
    CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK = 12
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
    CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81
    CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR = 82
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
    CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH = 120


H200_ATTRIBUTES = {
    CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: 1024,
    CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: 49152,
    CUdevice_attribute.CU_DEVICE_ATTRIBUTE_WARP_SIZE: 32,
    CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: 65536,
    CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: 132,
    CUdevice_attribute.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: 62914560,
    CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: 9,
    CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: 0,
    CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: 233472,
    CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: 65536,
    CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: 232448,
    CUdevice_attribute.CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: 1,
}


class CUlaunchAttributeID(enum.IntEnum):
    CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4


class CUstream_flags(enum.IntEnum):  # noqa: N801
    CU_STREAM_NON_BLOCKING = 1


class CUtensorMapDataType(enum.IntEnum):
    CU_TENSOR_MAP_DATA_TYPE_UINT16 = 1  # an epilogue vector of 16-bit elements
    CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9
    CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7


class CUtensorMapInterleave(enum.IntEnum):
    CU_TENSOR_MAP_INTERLEAVE_NONE = 0


class CUtensorMapSwizzle(enum.IntEnum):
    CU_TENSOR_MAP_SWIZZLE_NONE = 0
    CU_TENSOR_MAP_SWIZZLE_128B = 3


class CUtensorMapL2promotion(enum.IntEnum):
    CU_TENSOR_MAP_L2_PROMOTION_L2_128B = 2


class CUtensorMapFloatOOBfill(enum.IntEnum):
    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0


@dataclass(frozen=True)
class Handle:
    """Opaque handles (CUcontext, CUmodule, CUfunction, CUstream, CUdeviceptr)."""

    kind: str
    value: int

    def __int__(self) -> int:
        return self.value


@dataclass
class cuuint32_t:  # noqa: N801
    value: int


@dataclass
class cuuint64_t:  # noqa: N801
    value: int


class _Dim3:
    x = y = z = 1


class _AttributeValue:
    def __init__(self) -> None:
        self.clusterDim = _Dim3()


class CUlaunchAttribute:
    def __init__(self) -> None:
        self.id: Any = None
        self.value = _AttributeValue()


class CUlaunchConfig:
    gridDimX = gridDimY = gridDimZ = blockDimX = blockDimY = blockDimZ = 0
    sharedMemBytes = numAttrs = 0
    hStream: Any = None
    attrs: list[Any] = []  # noqa: RUF012


class FakeTensorMap:
    """128 bytes with a recognizable pattern, exposing getPtr() like CUtensorMap."""

    def __init__(self, seed: int) -> None:
        self.storage = (ctypes.c_uint8 * TENSOR_MAP_BYTES)(*[(seed + i) % 256 for i in range(128)])

    def getPtr(self) -> int:
        return ctypes.addressof(self.storage)

    def bytes(self) -> bytes:
        return bytes(self.storage)


_READERS = {
    ParamKind.PTR: ctypes.c_uint64,
    ParamKind.U64: ctypes.c_uint64,
    ParamKind.U32: ctypes.c_uint32,
    ParamKind.S32: ctypes.c_int32,
    ParamKind.S64: ctypes.c_int64,
    ParamKind.F32: ctypes.c_float,
}


def decode_params(address: int | None, kinds: list[ParamKind]) -> list[Any]:
    """Read kernel arguments the way the driver does: through the void*[] array."""
    if address is None:
        return []
    values: list[Any] = []
    for index, kind in enumerate(kinds):
        slot = ctypes.c_void_p.from_address(address + 8 * index).value
        assert slot is not None
        if kind is ParamKind.TENSOR_MAP:
            values.append(ctypes.string_at(slot, TENSOR_MAP_BYTES))
        else:
            values.append(_READERS[kind].from_address(slot).value)
    return values


@dataclass
class FakeDriver:
    """The module object handed to ``driver.use_driver``."""

    expect_params: list[ParamKind] = field(default_factory=list)
    launch_results: list[CUresult] = field(default_factory=list)
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    launches: list[dict[str, Any]] = field(default_factory=list)
    current: Any = None
    init_result: CUresult = CUresult.CUDA_SUCCESS
    jit_error_log: bytes = b"ptxas application ptx input, line 7; error   : Unknown symbol 'x'"
    cubin: bytes = b"\x7fELF fake cubin"
    # Set by a test: the JIT info log of each link in turn (a spill report, say).
    link_logs: list[bytes] = field(default_factory=list)
    # Set by a test to hold every link (cuLinkComplete) until the event is set.
    link_gate: threading.Event | None = None
    # Set by a test while a CUDA graph capture in the global mode is under way: module loads
    # and links from a thread whose capture mode is not relaxed then fail, as the driver's
    # "unsafe" calls do, and invalidate the capture.
    capturing: bool = False
    capture_invalidated: bool = False
    modules_loaded: int = 0

    CUresult = CUresult
    CUjit_option = CUjit_option
    CUstreamCaptureMode = CUstreamCaptureMode
    CUjitInputType = CUjitInputType
    CUfunction_attribute = CUfunction_attribute
    CUdevice_attribute = CUdevice_attribute
    CUlaunchAttributeID = CUlaunchAttributeID
    CUstream_flags = CUstream_flags
    CUtensorMapDataType = CUtensorMapDataType
    CUtensorMapInterleave = CUtensorMapInterleave
    CUtensorMapSwizzle = CUtensorMapSwizzle
    CUtensorMapL2promotion = CUtensorMapL2promotion
    CUtensorMapFloatOOBfill = CUtensorMapFloatOOBfill
    CUlaunchAttribute = CUlaunchAttribute
    CUlaunchConfig = CUlaunchConfig
    cuuint32_t = cuuint32_t
    cuuint64_t = cuuint64_t

    def __post_init__(self) -> None:
        self._cubin_buffer = ctypes.create_string_buffer(self.cubin, len(self.cubin))
        # Each thread's capture mode, by thread id (the driver's is per thread).
        self._capture_modes: dict[int, CUstreamCaptureMode] = {}

    @staticmethod
    def CUstream(value: int) -> Handle:
        return Handle("stream", int(value))

    @staticmethod
    def CUdeviceptr(value: int) -> Handle:
        return Handle("ptr", int(value))

    def names(self) -> list[str]:
        return [call[0] for call in self.calls]

    def _record(self, name: str, *args: Any) -> None:
        self.calls.append((name, *args))

    def capture_mode(self) -> CUstreamCaptureMode:
        """The calling thread's capture mode."""
        default = CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL
        return self._capture_modes.get(threading.get_ident(), default)

    def _refused_in_capture(self) -> bool:
        """Whether an unsafe call of this thread is refused (a global capture under way and
        this thread's mode not relaxed); a refusal invalidates the capture."""
        relaxed = CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
        if self.capturing and self.capture_mode() != relaxed:
            self.capture_invalidated = True
            return True
        return False

    # ---- bootstrap -------------------------------------------------------------------------

    def cuInit(self, flags: int) -> tuple[Any, ...]:
        self._record("cuInit", flags)
        return (self.init_result,)

    def cuGetErrorName(self, err: CUresult) -> tuple[Any, ...]:
        return (CUresult.CUDA_SUCCESS, CUresult(err).name.encode())

    def cuGetErrorString(self, err: CUresult) -> tuple[Any, ...]:
        return (CUresult.CUDA_SUCCESS, b"fake description")

    def cuDeviceGetCount(self) -> tuple[Any, ...]:
        return (CUresult.CUDA_SUCCESS, 1)

    def cuDriverGetVersion(self) -> tuple[Any, ...]:
        return (CUresult.CUDA_SUCCESS, 13000)

    def cuDeviceGet(self, ordinal: int) -> tuple[Any, ...]:
        return (CUresult.CUDA_SUCCESS, Handle("device", ordinal))

    def cuDevicePrimaryCtxRetain(self, device: Handle) -> tuple[Any, ...]:
        self._record("cuDevicePrimaryCtxRetain", device)
        return (CUresult.CUDA_SUCCESS, Handle("context", 100 + device.value))

    def cuCtxGetCurrent(self) -> tuple[Any, ...]:
        return (CUresult.CUDA_SUCCESS, self.current)

    def cuCtxSetCurrent(self, ctx: Handle) -> tuple[Any, ...]:
        self._record("cuCtxSetCurrent", ctx)
        self.current = ctx
        return (CUresult.CUDA_SUCCESS,)

    def cuDeviceGetAttribute(self, attr: CUdevice_attribute, device: Handle) -> tuple[Any, ...]:
        self._record("cuDeviceGetAttribute", attr)
        return (CUresult.CUDA_SUCCESS, H200_ATTRIBUTES[attr])

    def cuDeviceGetName(self, length: int, device: Handle) -> tuple[Any, ...]:
        return (CUresult.CUDA_SUCCESS, b"Fake H200\0\0\0")

    # ---- modules ---------------------------------------------------------------------------

    def cuModuleLoadDataEx(
        self, image: bytes, count: int, options: list[Any], values: list[Any]
    ) -> tuple[Any, ...]:
        # Numbered by load (from 1, whatever a test cleared), so a test can tell which module
        # a launch used: the number ends the record.
        self.modules_loaded += 1
        self._record(
            "cuModuleLoadDataEx", image, count, list(options), list(values), self.modules_loaded
        )
        if self._refused_in_capture():
            return (CUresult.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, None)
        if b"bad" in image:
            error_log = values[options.index(CUjit_option.CU_JIT_ERROR_LOG_BUFFER)]
            error_log[: len(self.jit_error_log)] = self.jit_error_log
            return (CUresult.CUDA_ERROR_INVALID_PTX, None)
        info_log = values[options.index(CUjit_option.CU_JIT_INFO_LOG_BUFFER)]
        info = b"ptxas info    : Used 12 registers, used 0 barriers"
        info_log[: len(info)] = info
        return (CUresult.CUDA_SUCCESS, Handle("module", self.modules_loaded))

    def cuModuleGetFunction(self, module: Handle, name: bytes) -> tuple[Any, ...]:
        self._record("cuModuleGetFunction", name)
        return (CUresult.CUDA_SUCCESS, Handle("function", module.value))

    def cuFuncSetAttribute(self, fn: Handle, attr: Any, value: int) -> tuple[Any, ...]:
        self._record("cuFuncSetAttribute", attr, value)
        return (CUresult.CUDA_SUCCESS,)

    def cuLinkCreate(self, count: int, options: list[Any], values: list[Any]) -> tuple[Any, ...]:
        self._record("cuLinkCreate", count, dict(zip(options, values, strict=True)))
        if self._refused_in_capture():
            return (CUresult.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, None)
        if self.link_logs:
            log = self.link_logs.pop(0)
            values[options.index(CUjit_option.CU_JIT_INFO_LOG_BUFFER)][: len(log)] = log
        return (CUresult.CUDA_SUCCESS, Handle("link", 1))

    def links(self) -> int:
        """How many links (driver JITs) were made so far."""
        return self.names().count("cuLinkCreate")

    def cuLinkAddData(self, state: Handle, kind: Any, data: bytes, *rest: Any) -> tuple[Any, ...]:
        self._record("cuLinkAddData", kind, data)
        if b"bad" in data:
            return (CUresult.CUDA_ERROR_INVALID_PTX,)
        return (CUresult.CUDA_SUCCESS,)

    def cuLinkComplete(self, state: Handle) -> tuple[Any, ...]:
        if self.link_gate is not None:
            self.link_gate.wait()
        if self._refused_in_capture():
            return (CUresult.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, 0, 0)
        return (CUresult.CUDA_SUCCESS, ctypes.addressof(self._cubin_buffer), len(self.cubin))

    def cuLinkDestroy(self, state: Handle) -> tuple[Any, ...]:
        self._record("cuLinkDestroy", state)
        return (CUresult.CUDA_SUCCESS,)

    def cuThreadExchangeStreamCaptureMode(self, mode: CUstreamCaptureMode) -> tuple[Any, ...]:
        self._record("cuThreadExchangeStreamCaptureMode", mode, threading.current_thread().name)
        previous = self.capture_mode()
        self._capture_modes[threading.get_ident()] = CUstreamCaptureMode(mode)
        return (CUresult.CUDA_SUCCESS, previous)

    def cuTensorMapEncodeTiled(self, *args: Any) -> tuple[Any, ...]:
        self._record("cuTensorMapEncodeTiled", *args)
        return (CUresult.CUDA_SUCCESS, FakeTensorMap(1))

    # ---- memory ----------------------------------------------------------------------------

    def cuMemsetD8Async(self, ptr: Handle, value: int, nbytes: int, stream: Any) -> tuple[Any]:
        """Recorded with the number of launches before it (stream-K zeroes its flags before
        each launch)."""
        self._record("cuMemsetD8Async", int(ptr.value), value, nbytes, len(self.launches))
        return (CUresult.CUDA_SUCCESS,)

    # ---- launches --------------------------------------------------------------------------

    def _next_result(self) -> CUresult:
        return self.launch_results.pop(0) if self.launch_results else CUresult.CUDA_SUCCESS

    def cuLaunchKernel(self, fn: Handle, *args: Any) -> tuple[Any, ...]:
        gx, gy, gz, bx, by, bz, smem, stream, params, _extra = args
        self.launches.append(
            {
                "function": fn,
                "grid": (gx, gy, gz),
                "block": (bx, by, bz),
                "smem": smem,
                "stream": stream,
                "params_address": params,
                "args": decode_params(params, self.expect_params),
            }
        )
        return (self._next_result(),)

    def cuLaunchKernelEx(
        self, config: CUlaunchConfig, fn: Handle, params: Any, extra: Any
    ) -> tuple[Any, ...]:
        attribute = config.attrs[0]
        dims = attribute.value.clusterDim
        self.launches.append(
            {
                "function": fn,
                "grid": (config.gridDimX, config.gridDimY, config.gridDimZ),
                "block": (config.blockDimX, config.blockDimY, config.blockDimZ),
                "smem": config.sharedMemBytes,
                "stream": config.hStream,
                "cluster": (dims.x, dims.y, dims.z),
                "attribute_id": attribute.id,
                "args": decode_params(params, self.expect_params),
            }
        )
        return (self._next_result(),)
