"""Driver bootstrap: lazy import, ``cuInit``, error text, primary contexts, device facts.

Every other file of this package reaches the bindings through :func:`driver_module`,
so the "no CUDA driver" conversion and the test hook :func:`use_driver` live here once.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

from pyfuse.errors import LaunchError
from pyfuse.ir.records import record


class _State:
    """Per-driver-module state; replaced wholesale when a test injects a fake driver."""

    def __init__(self, module: Any = None) -> None:
        self.module: Any = module
        self.ready = False
        self.error: LaunchError | None = None
        self.contexts: dict[int, Any] = {}
        self.devices: dict[int, DeviceInfo] = {}


_lock = threading.RLock()
_state = _State()


@contextlib.contextmanager
def use_driver(module: Any) -> Iterator[None]:
    """Run with ``module`` standing in for ``cuda.bindings.driver`` (tests only)."""
    global _state
    with _lock:
        saved = _state
        _state = _State(module)
    try:
        yield
    finally:
        with _lock:
            _state = saved


# The driver library as cuda.bindings loads it (the system's dynamic-loader search alone).
_DRIVER_LIBRARY = {"linux": "libcuda.so.1"}


def _probe_driver_library() -> None:
    """LaunchError('no CUDA driver: ...') when the driver library does not load.

    Importing cuda.bindings costs tens of milliseconds; a machine without a driver (where
    ``compile`` asks only whether there is one) learns it from one ``dlopen`` instead. Loading
    the library as the bindings would (``RTLD_NOW | RTLD_GLOBAL``) leaves them nothing new to
    do. Platforms not in ``_DRIVER_LIBRARY`` skip the probe.
    """
    name = _DRIVER_LIBRARY.get(sys.platform)
    if name is None:
        return
    try:
        ctypes.CDLL(name, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
    except OSError as exc:
        raise LaunchError(f"no CUDA driver: cannot load {name} ({exc})") from exc


def _import_bindings() -> Any:
    _probe_driver_library()
    try:
        from cuda.bindings import driver as cu
    except Exception as exc:  # ImportError, or a broken install
        raise LaunchError(
            f"no CUDA driver: cannot import cuda.bindings.driver ({type(exc).__name__}: {exc}); "
            "install cuda-bindings"
        ) from exc
    return cu


def error_text(cu: Any, err: Any) -> str:
    """``CUDA_ERROR_X: description`` for a CUresult, tolerating a half-working driver."""
    try:
        name = cu.cuGetErrorName(err)[1]
        text = cu.cuGetErrorString(err)[1]
        return f"{name.decode()}: {text.decode()}"
    except Exception:
        return str(err)


def fail(cu: Any, err: Any, what: str, kernel: str | None = None) -> LaunchError:
    prefix = f"kernel {kernel}: " if kernel else ""
    return LaunchError(f"{prefix}{what} failed with {error_text(cu, err)}")


def call(cu: Any, result: tuple[Any, ...], what: str, kernel: str | None = None) -> Any:
    """Check a binding's (CUresult, *outputs) tuple; return the single output, if any."""
    if result[0] != cu.CUresult.CUDA_SUCCESS:
        raise fail(cu, result[0], what, kernel)
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


def driver_module() -> Any:
    """The initialized driver module, or LaunchError('no CUDA driver: ...')."""
    state = _state
    if state.ready:
        return state.module
    with _lock:
        if state.ready:
            return state.module
        if state.error is not None:
            # The same error each time, without the tracebacks of earlier raises (re-raising
            # the stored object would append each raise's frames to it, without end).
            raise state.error.with_traceback(None)
        try:
            cu = state.module if state.module is not None else _import_bindings()
            result = cu.cuInit(0)
        except LaunchError as exc:
            state.error = exc
            raise
        except Exception as exc:  # DynamicLibNotFoundError (cuda.pathfinder), OSError, ...
            state.error = LaunchError(f"no CUDA driver: {type(exc).__name__}: {exc}")
            raise state.error from exc
        if result[0] != cu.CUresult.CUDA_SUCCESS:
            state.error = LaunchError(
                f"no CUDA driver: cuInit failed with {error_text(cu, result[0])}"
            )
            raise state.error
        state.module = cu
        state.ready = True
        return cu


def available() -> bool:
    """True when a CUDA driver loads and reports at least one device. Never raises."""
    try:
        return device_count() > 0
    except LaunchError:
        return False


def device_count() -> int:
    cu = driver_module()
    return int(call(cu, cu.cuDeviceGetCount(), "cuDeviceGetCount"))


def driver_version() -> int:
    """The driver's CUDA version as 1000*major + 10*minor (13000 for CUDA 13.0)."""
    cu = driver_module()
    return int(call(cu, cu.cuDriverGetVersion(), "cuDriverGetVersion"))


def context(device: int = 0) -> Any:
    """The primary context of ``device``, retained once and made current on this thread."""
    cu = driver_module()
    state = _state
    ctx = state.contexts.get(device)
    if ctx is None:
        with _lock:
            ctx = state.contexts.get(device)
            if ctx is None:
                count = device_count()
                if not isinstance(device, int) or not 0 <= device < count:
                    raise LaunchError(f"device {device!r} does not exist ({count} device(s))")
                handle = call(cu, cu.cuDeviceGet(device), "cuDeviceGet")
                ctx = call(cu, cu.cuDevicePrimaryCtxRetain(handle), "cuDevicePrimaryCtxRetain")
                state.contexts[device] = ctx
    current = call(cu, cu.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if current != ctx:
        call(cu, cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return ctx


@record(frozen=True)
class DeviceInfo:
    """Hardware facts a scheduler may ask for; read once per device and cached."""

    ordinal: int
    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    max_threads_per_block: int
    smem_per_block: int
    smem_per_block_optin: int
    smem_per_sm: int
    regs_per_block: int
    regs_per_sm: int
    l2_bytes: int
    warp_size: int
    cluster_launch: bool

    @property
    def arch(self) -> str:
        """The ptxas target: Hopper gets the arch-specific ``sm_90a`` (wgmma, setmaxnreg)."""
        major, minor = self.compute_capability
        suffix = "a" if (major, minor) == (9, 0) else ""
        return f"sm_{major}{minor}{suffix}"


_DEVICE_ATTRIBUTES = {
    "sm_count": "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT",
    "max_threads_per_block": "CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK",
    "smem_per_block": "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK",
    "smem_per_block_optin": "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
    "smem_per_sm": "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
    "regs_per_block": "CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK",
    "regs_per_sm": "CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR",
    "l2_bytes": "CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE",
    "warp_size": "CU_DEVICE_ATTRIBUTE_WARP_SIZE",
    "cc_major": "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR",
    "cc_minor": "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR",
    "cluster_launch": "CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH",
}


def device_info(device: int = 0) -> DeviceInfo:
    cached = _state.devices.get(device)
    if cached is not None:
        return cached
    cu = driver_module()
    context(device)
    handle = call(cu, cu.cuDeviceGet(device), "cuDeviceGet")
    values: dict[str, int] = {}
    for key, attr_name in _DEVICE_ATTRIBUTES.items():
        attr = getattr(cu.CUdevice_attribute, attr_name)
        values[key] = int(call(cu, cu.cuDeviceGetAttribute(attr, handle), attr_name))
    raw_name = call(cu, cu.cuDeviceGetName(256, handle), "cuDeviceGetName")
    info = DeviceInfo(
        ordinal=device,
        name=bytes(raw_name).split(b"\0", 1)[0].decode(errors="replace"),
        compute_capability=(values.pop("cc_major"), values.pop("cc_minor")),
        cluster_launch=bool(values.pop("cluster_launch")),
        **values,
    )
    _state.devices[device] = info
    return info
