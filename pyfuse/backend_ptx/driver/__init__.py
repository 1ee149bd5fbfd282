"""The one place that talks to the CUDA driver (``cuda.bindings.driver``).

Split by concern: ``core`` (bootstrap, errors, contexts, device facts), ``modules``
(loading, attributes, cubins, tensor maps), ``launch`` (:class:`Launcher`) and
``memory`` (allocations, copies, streams). Import this package, not the files.

Everything is lazy: the bindings are imported on the first call that needs
them, so ``import pyfuse`` works on machines without a GPU. Without a driver
(CI, this project's CPU machines) the driver library does not load: a ``dlopen``
probe says so before the bindings are imported (they would raise
``DynamicLibNotFoundError`` at ``cuInit``); every such failure becomes
``LaunchError("no CUDA driver: ...")`` and :func:`available` returns False.

Contexts: pyfuse uses each device's *primary* context, the same one the CUDA
runtime (and therefore torch and CuPy) uses, so retaining it shares torch's
context rather than creating a rival one. The current context is per host thread;
:func:`context` makes it current when needed. The launch fast path skips that
check and, if the driver answers with a context error, makes the context current
and retries once.

Tests inject a fake driver module with :func:`use_driver` to check argument
packing and error handling without a GPU.
"""

from pyfuse.backend_ptx.driver.core import (
    DeviceInfo,
    available,
    context,
    device_count,
    device_info,
    driver_version,
    use_driver,
)
from pyfuse.backend_ptx.driver.launch import (
    DEFAULT_DYNAMIC_SMEM_LIMIT,
    Launcher,
    max_active_clusters,
)
from pyfuse.backend_ptx.driver.memory import (
    DeviceBuffer,
    Event,
    mem_alloc,
    mem_free,
    memcpy_dtoh,
    memcpy_htod,
    memset_d8,
    memset_d8_async,
    memset_d32,
    stream_create,
    stream_destroy,
    stream_synchronize,
    synchronize,
)
from pyfuse.backend_ptx.driver.modules import (
    Function,
    Module,
    capture_tolerant,
    cubin_from_ptx,
    encode_tensor_map_tiled,
    function_attribute,
    get_function,
    load_kernel,
    load_module,
    set_max_dynamic_smem,
)

__all__ = [
    "DEFAULT_DYNAMIC_SMEM_LIMIT",
    "DeviceBuffer",
    "Event",
    "DeviceInfo",
    "Function",
    "Launcher",
    "Module",
    "available",
    "capture_tolerant",
    "context",
    "cubin_from_ptx",
    "device_count",
    "device_info",
    "driver_version",
    "encode_tensor_map_tiled",
    "function_attribute",
    "get_function",
    "load_kernel",
    "load_module",
    "max_active_clusters",
    "mem_alloc",
    "mem_free",
    "memcpy_dtoh",
    "memcpy_htod",
    "memset_d32",
    "memset_d8",
    "memset_d8_async",
    "set_max_dynamic_smem",
    "stream_create",
    "stream_destroy",
    "stream_synchronize",
    "synchronize",
    "use_driver",
]
