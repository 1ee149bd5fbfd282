"""Kernel launches with argument packing built once per kernel (see :class:`Launcher`)."""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from threading import Lock
from typing import Any

from pyfuse.backend_ptx.abi import TENSOR_MAP_BYTES, ParamKind
from pyfuse.backend_ptx.driver.core import call, context, driver_module, fail
from pyfuse.backend_ptx.driver.modules import Function, set_max_dynamic_smem
from pyfuse.errors import LaunchError
from pyfuse.ir.hopper import SM90
from pyfuse.ir.target import HOPPER

# Above this a kernel must opt in per function. Every CUDA device reports the same 48 KB
# (the target's default_smem_per_block); the name stays for the callers that compare with it.
DEFAULT_DYNAMIC_SMEM_LIMIT = HOPPER.default_smem_per_block

_SLOT_TYPES: dict[ParamKind, Any] = {
    ParamKind.PTR: ctypes.c_uint64,
    ParamKind.U32: ctypes.c_uint32,
    ParamKind.S32: ctypes.c_int32,
    ParamKind.U64: ctypes.c_uint64,
    ParamKind.S64: ctypes.c_int64,
    ParamKind.F32: ctypes.c_float,
    # 8-byte elements keep the by-value copy source aligned; the driver copies 128 B.
    ParamKind.TENSOR_MAP: ctypes.c_uint64 * (TENSOR_MAP_BYTES // 8),
}


def _set_integer(slot: Any, value: Any) -> None:
    slot.value = int(value)  # int() also accepts CUdeviceptr and DeviceBuffer


def _set_float(slot: Any, value: Any) -> None:
    slot.value = float(value)


def _set_tensor_map(slot: Any, value: Any) -> None:
    get_ptr = getattr(value, "getPtr", None)
    if get_ptr is not None:  # a CUtensorMap from encode_tensor_map_tiled
        ctypes.memmove(slot, get_ptr(), TENSOR_MAP_BYTES)
        return
    data = bytes(value)
    if len(data) != TENSOR_MAP_BYTES:
        raise ValueError(f"a tensor map is {TENSOR_MAP_BYTES} bytes, got {len(data)}")
    ctypes.memmove(slot, data, TENSOR_MAP_BYTES)


_SETTERS: dict[ParamKind, Any] = {
    ParamKind.PTR: _set_integer,
    ParamKind.U32: _set_integer,
    ParamKind.S32: _set_integer,
    ParamKind.U64: _set_integer,
    ParamKind.S64: _set_integer,
    ParamKind.F32: _set_float,
    ParamKind.TENSOR_MAP: _set_tensor_map,
}

Dims = Sequence[int]
_PACKABLE = frozenset({ParamKind.PTR, ParamKind.U64, ParamKind.S64})


def _dims3(dims: Dims, what: str) -> tuple[int, int, int]:
    values = tuple(int(d) for d in dims)
    if not 1 <= len(values) <= 3 or any(v < 1 for v in values):
        raise LaunchError(f"{what} must be 1 to 3 positive extents, got {tuple(dims)!r}")
    padded = (*values, 1, 1)
    return padded[0], padded[1], padded[2]


class Launcher:
    """Launches one kernel with argument packing built once and updated in place.

    The ``void*[]`` that ``cuLaunchKernel`` reads points at one pre-allocated
    ctypes slot per parameter; a launch only writes the new values into the
    slots (tensor maps are copied in by value) and calls the driver, so the
    Python overhead is a few microseconds. Argument ranges are not re-checked
    here: the runtime validates user inputs before it gets this far.
    """

    def __init__(
        self,
        function: Function,
        params: Sequence[ParamKind],
        *,
        cluster: Dims | None = None,
    ) -> None:
        cu = driver_module()
        for kind in params:
            if not isinstance(kind, ParamKind):
                raise LaunchError(
                    f"kernel {function.name}: param kinds must be ParamKind, got {kind!r}"
                )
        self._cu = cu
        self.function = function
        self.name = function.name
        self.params = tuple(params)
        self._device = function.module.device
        self._handle = function.handle
        self._success = cu.CUresult.CUDA_SUCCESS
        self._context_errors = (
            cu.CUresult.CUDA_ERROR_INVALID_CONTEXT,
            cu.CUresult.CUDA_ERROR_CONTEXT_IS_DESTROYED,
        )
        # Kernels whose parameters are all 8-byte integers (every fusion kernel: pointers)
        # keep them in one array, written by one slice assignment per launch.
        self._packed: Any = None
        if self.params and all(kind in _PACKABLE for kind in self.params):
            self._packed = (ctypes.c_uint64 * len(self.params))()
            size = ctypes.sizeof(ctypes.c_uint64)
            base = ctypes.addressof(self._packed)
            self._slots = [
                ctypes.c_uint64.from_address(base + i * size) for i in range(len(self.params))
            ]
        else:
            self._slots = [_SLOT_TYPES[kind]() for kind in self.params]
        self._setters = [_SETTERS[kind] for kind in self.params]
        pointer_array = ctypes.c_void_p * max(len(self._slots), 1)
        self._pointers = pointer_array(*[ctypes.addressof(slot) for slot in self._slots])
        self._kernel_params: int | None = ctypes.addressof(self._pointers) if self._slots else None
        self._smem_opt_in = DEFAULT_DYNAMIC_SMEM_LIMIT
        self.cluster = _dims3(cluster, "cluster dims") if cluster is not None else None
        self._config: Any = None
        if self.cluster is not None:
            self._config = self._cluster_config(cu, self.cluster)

    def _cluster_config(self, cu: Any, cluster: tuple[int, int, int]) -> Any:
        size = cluster[0] * cluster[1] * cluster[2]
        if size > SM90.max_portable_cluster_ctas:
            # Portable clusters stop at 8 CTAs; H100/H200 allow 16 with this opt-in.
            attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
            call(cu, cu.cuFuncSetAttribute(self._handle, attr, 1), "cuFuncSetAttribute", self.name)
        return _cluster_launch_config(cu, cluster)

    def _bad_argument(self, args: Sequence[Any], exc: Exception) -> LaunchError:
        for index, (kind, value) in enumerate(zip(self.params, args, strict=True)):
            try:
                _SETTERS[kind](_SLOT_TYPES[kind](), value)
            except (TypeError, ValueError, OverflowError) as err:
                return LaunchError(
                    f"kernel {self.name}: argument {index} ({kind.name}) cannot take "
                    f"{value!r}: {err}"
                )
        return LaunchError(f"kernel {self.name}: bad arguments: {exc}")

    def _opt_in_smem(self, smem: int) -> None:
        set_max_dynamic_smem(self.function, smem)
        self._smem_opt_in = smem

    def _submit(self, grid: Dims, block: Dims, smem: int, stream: Any) -> Any:
        gx, gy, gz = grid if len(grid) == 3 else _dims3(grid, "grid")
        bx, by, bz = block if len(block) == 3 else _dims3(block, "block")
        if self._config is None:
            # cuda.bindings' cuLaunchKernel: faster than libcuda's entry point through ctypes,
            # whose argument conversion costs more (docs/performance.md, "Measured design
            # choices").
            return self._cu.cuLaunchKernel(
                self._handle, gx, gy, gz, bx, by, bz, smem, stream, self._kernel_params, 0
            )[0]
        assert self.cluster is not None  # a launch config exists only for a cluster
        cx, cy, cz = self.cluster
        if gx % cx or gy % cy or gz % cz:
            raise LaunchError(
                f"kernel {self.name}: grid {(gx, gy, gz)} is not a multiple of the cluster "
                f"{self.cluster}"
            )
        config = self._config
        config.gridDimX, config.gridDimY, config.gridDimZ = gx, gy, gz
        config.blockDimX, config.blockDimY, config.blockDimZ = bx, by, bz
        config.sharedMemBytes = smem
        config.hStream = stream if not isinstance(stream, int) else self._cu.CUstream(stream)
        return self._cu.cuLaunchKernelEx(config, self._handle, self._kernel_params, 0)[0]

    def bound(
        self, grid: Dims, block: Dims, smem: int, lock: Lock
    ) -> Callable[[list[int], int], None]:
        """``run(args, stream)``: :meth:`launch` with this grid, block and shared memory fixed,
        for the warm-call path, holding ``lock`` (launches write the argument slots in place,
        and the driver reads them with the GIL released: one launch at a time). Kernels with
        packed (all 8-byte integer) parameters and no launch attributes get a closure that
        writes the arguments and calls the driver, nothing else; others go through
        :meth:`launch`."""
        grid3, block3 = _dims3(grid, "grid"), _dims3(block, "block")
        if self._packed is None or self._config is not None:

            def run_general(args: list[int], stream: int) -> None:
                with lock:
                    self.launch(grid3, block3, smem, stream, args)

            return run_general
        if smem > self._smem_opt_in:
            self._opt_in_smem(smem)
        packed, count = self._packed, len(self._slots)
        handle, params = self._handle, self._kernel_params
        launch, success = self._cu.cuLaunchKernel, self._success
        acquire, release = lock.acquire, lock.release
        gx, gy, gz = grid3
        bx, by, bz = block3

        def run(args: list[int], stream: int) -> None:
            acquire()  # cheaper than ``with`` on the hot path
            try:
                if len(args) == count:
                    try:
                        packed[:] = args
                    except TypeError:  # DeviceBuffer or CUdeviceptr arguments
                        pass
                    else:
                        err = launch(handle, gx, gy, gz, bx, by, bz, smem, stream, params, 0)[0]
                        if err == success:
                            return
                # The general path: raises naming the params, or retries (another context).
                self.launch(grid3, block3, smem, stream, args)
            finally:
                release()

        return run

    def launch(self, grid: Dims, block: Dims, smem: int, stream: Any, args: Sequence[Any]) -> None:
        """Launch asynchronously on ``stream`` (an int handle, a CUstream, or 0/None)."""
        if len(args) != len(self._slots):
            raise LaunchError(
                f"kernel {self.name}: expects {len(self._slots)} arguments "
                f"({', '.join(k.name for k in self.params)}), got {len(args)}"
            )
        try:
            if self._packed is not None:
                self._packed[:] = args  # ints; a DeviceBuffer or CUdeviceptr goes by int()
            else:
                for setter, slot, value in zip(self._setters, self._slots, args, strict=True):
                    setter(slot, value)
        except (TypeError, ValueError, OverflowError) as exc:
            if self._packed is None:
                raise self._bad_argument(args, exc) from exc
            try:  # objects with __int__ (DeviceBuffer, CUdeviceptr) take the slow path
                for setter, slot, value in zip(self._setters, self._slots, args, strict=True):
                    setter(slot, value)
            except (TypeError, ValueError, OverflowError) as slow_error:
                raise self._bad_argument(args, slow_error) from slow_error
        if smem > self._smem_opt_in:
            self._opt_in_smem(smem)
        if stream is None:
            stream = 0
        err = self._submit(grid, block, smem, stream)
        if err != self._success:
            if err in self._context_errors:
                # Another library switched this thread's context; make ours current, retry.
                context(self._device)
                err = self._submit(grid, block, smem, stream)
            if err != self._success:
                raise fail(
                    self._cu,
                    err,
                    f"launch grid={tuple(grid)} block={tuple(block)} smem={smem}",
                    self.name,
                )


def _cluster_launch_config(cu: Any, cluster: tuple[int, int, int]) -> Any:
    """A ``CUlaunchConfig`` carrying the cluster dimension attribute (grid, block and shared
    memory are the caller's to fill in)."""
    attribute = cu.CUlaunchAttribute()
    attribute.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attribute.value.clusterDim.x, attribute.value.clusterDim.y, attribute.value.clusterDim.z = (
        cluster
    )
    config = cu.CUlaunchConfig()
    config.attrs = [attribute]
    config.numAttrs = 1
    return config


def max_active_clusters(
    function: Function, block: Dims, smem: int, cluster: Dims, grid_x: int
) -> int | None:
    """How many clusters of ``function`` can be resident at once (``cuOccupancyMaxActive
    Clusters``), for sizing a persistent grid; None when the driver cannot say."""
    cu = driver_module()
    query = getattr(cu, "cuOccupancyMaxActiveClusters", None)
    if query is None:
        return None
    if smem > DEFAULT_DYNAMIC_SMEM_LIMIT:
        set_max_dynamic_smem(function, smem)
    config = _cluster_launch_config(cu, _dims3(cluster, "cluster dims"))
    config.gridDimX, config.gridDimY, config.gridDimZ = grid_x, 1, 1
    config.blockDimX, config.blockDimY, config.blockDimZ = _dims3(block, "block")
    config.sharedMemBytes = smem
    result = query(function.handle, config)
    if result[0] != cu.CUresult.CUDA_SUCCESS:
        return None
    return int(result[1])
