"""Launching compiled variants: targets, launch plans, kernels loaded per device, and
``Compiled.__call__``.

Expects a :class:`~pyfuse.runtime.compiled.Compiled` (from a compile, or restored from the
variant cache: only its PTX, launch shapes, argument mapping, workspace sizes and a matmul
kernel's planned tensor maps, ``Kernel.matmul_launch``, are read; never the kernel IR).
Guarantees:

- :class:`Plan`: the device-independent facts (buffer numbering, one workspace allocation
  for the intermediates, which output may be allocated like the first input), computed once;
- :class:`Loaded`: the variant's kernels loaded on one device once per process (cubins
  through the disk cache, :mod:`pyfuse.runtime.cache`, waiting for a JIT started ahead),
  with launchers whose argument packing is built once;
- :class:`CompiledRuntime` (``compiled.runtime``): the bound plan per (device, array kind)
  and, for ``Compiled.__call__`` (:func:`run_compiled`), the call keys already checked against
  the compiled signature; arguments that do not fit raise ``InputError``.

Nothing here compiles: the compile driver and the per-function caches above it
(:mod:`pyfuse.runtime.calls`) call in. The driver loads with the first launch, not with this
module.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from pyfuse.errors import InputError, LaunchError
from pyfuse.ir.dtypes import DType
from pyfuse.ir.params import MatmulParams
from pyfuse.ir.records import record
from pyfuse.ir.target import HOPPER, TargetInfo
from pyfuse.runtime.arrays import ArgumentError, Bound, Kind, call_key, describe_arguments
from pyfuse.runtime.location import user_location
from pyfuse.runtime.spec import ArrayInfo, Spec, spec

Number = bool | int | float


# ---- targets -----------------------------------------------------------------------------------


def target_for(device: int | None, aligned: bool = True) -> TargetInfo:
    """The device's TargetInfo (HOPPER without a driver); ``aligned`` False: unvectorized."""
    from pyfuse.backend_ptx import driver

    if device is None and driver.available():
        device = 0
    if device is None:
        target = HOPPER
    else:
        info = driver.device_info(device)
        target = TargetInfo(
            arch=info.arch,
            sm_count=info.sm_count,
            warp_size=info.warp_size,
            max_threads_per_block=info.max_threads_per_block,
            registers_per_sm=info.regs_per_sm,
            max_smem_per_block=info.smem_per_block_optin,
            default_smem_per_block=info.smem_per_block,
        )
    return target if aligned else dataclasses.replace(target, vector_bytes=1)


# ---- what a variant is compiled for -------------------------------------------------------


@record(frozen=True)
class Signature:
    """What a compiled variant is specialized to; the key of the in-memory compile cache.

    ``arguments`` holds, per argument, ``(shape, dtype, element strides)`` for an array
    (strides of size-1 axes normalized away) or ``(type, value)`` for a Python number. The
    alignment class is in ``target.vector_bytes`` (1 for a variant with misaligned inputs).
    """

    arguments: tuple[tuple[Any, ...], ...]
    matmul: MatmulParams | None
    target: TargetInfo
    # The values of the function's guarded captured places (:meth:`guards.Guard.key`).
    captured: tuple[object, ...] = ()


def normalized(array_spec: Spec) -> Spec:
    """The spec with the strides of size-1 axes (which no index reads) made row-major."""
    if 0 in array_spec.shape:
        return spec(array_spec.shape, array_spec.dtype)
    row_major = spec(array_spec.shape, array_spec.dtype).strides
    strides = [
        expected if extent == 1 else stride
        for extent, stride, expected in zip(
            array_spec.shape, array_spec.strides, row_major, strict=True
        )
    ]
    return spec(array_spec.shape, array_spec.dtype, strides)


def signature_item(argument: Spec | Number) -> tuple[Any, ...]:
    """One argument's part of a compiled signature: ``(shape, dtype, element strides)`` of
    an array's normalized spec, ``(type, value)`` of a Python number."""
    if isinstance(argument, Spec):
        return (argument.shape, argument.dtype, argument.strides)
    return (type(argument), argument)


# ---- loading and launching -----------------------------------------------------------------

_WORKSPACE_ALIGNMENT = 256  # bytes between intermediates in one workspace allocation


@record(frozen=True)
class Plan:
    """Device-independent launch facts of a compiled variant, computed once.

    Buffers are numbered inputs first, then outputs, then intermediates (which share one
    workspace allocation per call); ``kernel_slots[k][i]`` is the buffer number of kernel
    ``k``'s parameter ``i`` (every parameter is a global pointer).
    """

    inputs: int
    outputs: tuple[tuple[tuple[int, ...], DType], ...]
    workspace_bytes: int
    workspace_offsets: tuple[int, ...]
    kernel_slots: tuple[tuple[int, ...], ...]
    # Per output: it has the first input's shape and dtype, and that input is row-major
    # (the output may then be allocated "like" it).
    like_first_input: tuple[bool, ...] = ()

    @classmethod
    def of(cls, compiled: Any) -> Plan:
        inputs = len(compiled.fusion.inputs)
        outputs = tuple((tuple(tv.shape), tv.dtype) for tv in compiled.fusion.outputs)
        slot_of: dict[tuple[str, int | str], int] = {}
        for index in range(inputs):
            slot_of[("input", index)] = index
        for index in range(len(outputs)):
            slot_of[("output", index)] = inputs + index
        offsets = []
        size = 0
        for number, (name, nbytes) in enumerate(sorted(compiled.intermediate_bytes.items())):
            slot_of[("intermediate", name)] = inputs + len(outputs) + number
            offsets.append(size)
            # An empty intermediate takes one slot too: its kernels still get a pointer, and
            # the workspace is allocated whenever there are intermediates to point into.
            size += max(1, -(-nbytes // _WORKSPACE_ALIGNMENT)) * _WORKSPACE_ALIGNMENT
        kernel_slots = []
        for kernel in compiled.kernels:
            slots = []
            for position, source in enumerate(kernel.arguments):
                slot = slot_of.get(tuple(source))
                if slot is None:
                    raise LaunchError(
                        f"kernel {kernel.name}: parameter {position} comes from {source!r}, "
                        "which is no input, output or intermediate of the fusion"
                    )
                slots.append(slot)
            kernel_slots.append(tuple(slots))
        like = tuple(False for _ in outputs)
        if compiled.fusion.inputs:
            first = compiled.fusion.inputs[0]
            layout = normalized(spec(first.shape, first.dtype, first.strides))
            dense = layout.strides == spec(first.shape, first.dtype).strides
            like = tuple(
                dense and tuple(shape) == tuple(first.shape) and dtype == first.dtype
                for shape, dtype in outputs
            )
        return cls(inputs, outputs, size, tuple(offsets), tuple(kernel_slots), like)


def _resident_grid(kernel: Any, function: Any) -> tuple[int, int, int]:
    """``kernel.grid``, except that a persistent cluster kernel launches no more clusters
    than the device can hold at once (GPCs may not fit ``SMs / cluster size``): its tile
    loop strides by the launched cluster count, so fewer clusters only take more tiles."""
    gx, gy, gz = kernel.grid
    grid: tuple[int, int, int] = (int(gx), int(gy), int(gz))
    launch = kernel.matmul_launch
    if launch is None or not launch.persistent or launch.cluster_ctas == 1:
        return grid
    from pyfuse.backend_ptx.driver import max_active_clusters

    size = launch.cluster_ctas
    resident = max_active_clusters(function, kernel.block, kernel.smem_bytes, (size, 1, 1), grid[0])
    if resident is None or resident <= 0 or resident * size >= grid[0]:
        return grid
    return (resident * size, 1, 1)


class _Devices:
    """The devices with kernels loaded in this process. Once there are several, launches
    first make their device's context current (``several``, read on every launch)."""

    __slots__ = ("loaded", "several")

    def __init__(self) -> None:
        self.loaded: set[int] = set()
        self.several = False

    def add(self, device: int) -> None:
        self.loaded.add(device)
        self.several = len(self.loaded) > 1


DEVICES = _Devices()


class Loaded:
    """A compiled variant's kernels loaded on one device: modules (cubins through the disk
    cache), functions with their shared-memory opt-in, and launchers whose argument packing
    is built once. ``compiled.timings["load"]`` adds the time taken.

    Loading a new kernel waits for its driver JIT (started ahead by the compile, or run here):
    every launch, the first included, runs the one optimized build of each kernel."""

    def __init__(self, compiled: Any, plan: Plan, device: int, arch: str) -> None:
        from pyfuse.runtime import cache

        start = time.perf_counter()
        self.device = device
        self.sources: list[str] = []  # where each module came from (cache, jit, ptx)
        launches = []
        for kernel, slots in zip(compiled.kernels, plan.kernel_slots, strict=True):
            module, source = cache.load_module(kernel.ptx, kernel.name, device=device, arch=arch)
            self.sources.append(source)
            launches.append(_launch_entry(kernel, slots, module))
        self._launches = tuple(launches)
        # Launchers write their argument slots in place: one launch sequence at a time.
        self._lock = threading.Lock()
        # The common case, one kernel whose parameters are the buffers in order, launches
        # with the caller's buffer list as is: only when they are all of them (an empty
        # output, written by no kernel, still has a buffer). ``direct(buffers, stream)``
        # takes the lock itself; it does not make the device's context current.
        self.direct: Callable[[list[int], int], None] | None = None
        buffers = plan.inputs + len(plan.outputs) + len(plan.workspace_offsets)
        if (
            len(launches) == 1
            and launches[0][4] == tuple(range(buffers))
            and launches[0][5] is None
            and launches[0][6] is None
        ):
            launcher, grid, block, smem, _, _, _ = launches[0]
            self.direct = launcher.bound(grid, block, smem, self._lock)
        from pyfuse.backend_ptx import driver

        self._context = driver.context
        self._memset = driver.memset_d8_async
        compiled.timings["load"] = compiled.timings.get("load", 0.0) + time.perf_counter() - start
        DEVICES.add(device)

    def launch(self, buffers: list[int], stream: Any) -> None:
        """Launch every kernel in order on ``stream`` with the numbered buffers."""
        if DEVICES.several:
            self._context(self.device)
        if self.direct is not None:
            self.direct(buffers, stream)
            return
        lock = self._lock
        lock.acquire()  # cheaper than ``with`` on the hot path
        try:
            for launcher, grid, block, smem, slots, maps, zeroed in self._launches:
                arguments: list[Any] = [buffers[slot] for slot in slots]
                if zeroed is not None:  # stream-K's flags, in the launch's stream order
                    position, nbytes = zeroed
                    self._memset(arguments[position], 0, nbytes, stream or 0)
                if maps is not None:
                    arguments += maps(arguments)
                launcher.launch(grid, block, smem, stream, arguments)
        finally:
            lock.release()


def _launch_entry(kernel: Any, slots: tuple[int, ...], module: Any) -> tuple[Any, ...]:
    """How :meth:`Loaded.launch` runs one kernel of ``module``: (launcher, grid, block, shared
    memory bytes, buffer slots, tensor-map encoder or None, the workspace bytes zeroed before
    it as ``(argument position, bytes)`` or None)."""
    from pyfuse.backend_ptx import driver
    from pyfuse.backend_ptx.abi import ParamKind

    function = driver.get_function(module, kernel.name)
    if kernel.smem_bytes > driver.DEFAULT_DYNAMIC_SMEM_LIMIT:
        driver.set_max_dynamic_smem(function, kernel.smem_bytes)
    kinds = [ParamKind.PTR] * len(slots)
    maps = None
    if kernel.matmul_launch is not None:
        from pyfuse.backend_ptx import tensor_maps  # loads with the first matmul kernel

        # A TMA kernel takes its tensor maps by value after the pointers, encoded from the
        # maps planned at compile time (no kernel IR: a restored variant has none loaded).
        maps = tensor_maps.encoder(kernel.matmul_launch)
        kinds += [ParamKind.TENSOR_MAP] * len(kernel.matmul_launch.maps)
    launcher = driver.Launcher(function, kinds)
    grid = _resident_grid(kernel, function)
    zeroed = kernel.matmul_launch.zeroed if kernel.matmul_launch is not None else None
    return (launcher, grid, kernel.block, kernel.smem_bytes, slots, maps, zeroed)


# ---- Compiled --------------------------------------------------------------------------------


class CompiledRuntime:
    """What running one :class:`~pyfuse.runtime.compiled.Compiled` needs, kept on it as
    ``compiled.runtime``: the launch plan, the kernels loaded per device (once per process),
    the bound plan per (device, array kind), and the call keys already checked against the
    compiled signature (for ``Compiled.__call__``)."""

    def __init__(self, compiled: Any, signature: Signature | None) -> None:
        self.compiled = compiled
        self.signature = signature
        self.plan = Plan.of(compiled)
        self.lock = threading.RLock()
        self.loaded: dict[int, Loaded] = {}
        self.bound: dict[tuple[int, Kind], Bound] = {}
        self.accepted: dict[tuple[Any, ...], Bound] = {}

    @property
    def target(self) -> TargetInfo | None:
        return self.signature.target if self.signature is not None else None

    def loaded_on(self, device: int) -> Loaded:
        loaded = self.loaded.get(device)
        if loaded is None:
            with self.lock:
                loaded = self.loaded.get(device)
                if loaded is None:
                    target = self.target or target_for(device)
                    loaded = Loaded(self.compiled, self.plan, device, target.arch)
                    self.loaded[device] = loaded
        return loaded

    def bound_for(self, device: int | None, kind: Kind) -> Bound:
        device = 0 if device is None else device
        bound = self.bound.get((device, kind))
        if bound is None:
            with self.lock:
                bound = self.bound.get((device, kind))
                if bound is None:
                    bound = kind.bind(self.loaded_on(device), self.plan)
                    self.bound[(device, kind)] = bound
        return bound

    def expected(self) -> list[tuple[Any, ...]]:
        """Per argument: ``(shape, dtype, strides)`` or ``(type, value)``."""
        if self.signature is not None:
            return list(self.signature.arguments)
        return [
            signature_item(normalized(spec(tv.shape, tv.dtype, tv.strides)))
            for tv in self.compiled.fusion.inputs
        ]

    def accept(self, arrays: Sequence[object], key: tuple[Any, ...]) -> Bound:
        """Check arguments against the compiled signature (InputError) and bind them."""
        described = describe_arguments(arrays)
        expected = self.expected()
        if len(expected) != len(described.arguments):
            raise ArgumentError(
                f"this Compiled takes {len(expected)} arguments, got {len(described.arguments)}"
            )
        for index, (want, got) in enumerate(zip(expected, described.arguments, strict=True)):
            _check_argument(index, want, got)
        target = self.target
        vectorized = target is None or target.vector_bytes > 1
        for index, got in enumerate(described.arguments):
            if vectorized and isinstance(got, ArrayInfo) and got.pointer % 16:
                raise ArgumentError(
                    f"argument {index}: address {got.pointer:#x} is not 16-byte aligned, and "
                    "this Compiled was vectorized for aligned inputs; call the fused function "
                    "instead (it compiles an unvectorized variant)"
                )
        bound = self.bound_for(described.device, described.kind)
        self.accepted[key] = bound
        return bound


def _describe_expected(want: tuple[Any, ...]) -> str:
    if isinstance(want[0], type):
        return f"the number {want[1]!r}"
    shape, dtype, strides = want
    return f"a {dtype.name} array of shape {shape} and element strides {strides}"


def _check_argument(index: int, want: tuple[Any, ...], got: ArrayInfo | Number) -> None:
    if isinstance(want[0], type):  # a Python number, a constant of the trace
        if type(got) is not want[0] or got != want[1]:
            raise ArgumentError(
                f"argument {index}: compiled for the {want[0].__name__} {want[1]!r}, "
                f"got {got!r}; call the fused function to compile for another value"
            )
        return
    if not isinstance(got, ArrayInfo):
        raise ArgumentError(f"argument {index}: expected {_describe_expected(want)}, got {got!r}")
    shape, dtype, strides = want
    if got.dtype != dtype:
        raise ArgumentError(f"argument {index}: expected dtype {dtype.name}, got {got.dtype.name}")
    if len(got.shape) != len(shape):
        raise ArgumentError(
            f"argument {index}: expected rank {len(shape)} {shape}, got rank {len(got.shape)} "
            f"{got.shape}"
        )
    if got.shape != shape:
        raise ArgumentError(f"argument {index}: expected shape {shape}, got {got.shape}")
    got_strides = normalized(spec(got.shape, got.dtype, got.strides)).strides
    if got_strides != strides:
        raise ArgumentError(
            f"argument {index}: expected element strides {strides}, got {got_strides}"
        )


def input_error(name: str, error: ArgumentError) -> InputError:
    """The InputError a call of ``name`` raises for arguments that do not fit."""
    return InputError(str(error), op=name, where=user_location())


def runtime_of(compiled: Any) -> CompiledRuntime:
    """``compiled.runtime``, made on first use for a variant that no call compiled (one from
    :func:`~pyfuse.runtime.compile.compile_fusion` directly): it then knows no signature and
    checks arguments against the fusion's inputs."""
    runtime: CompiledRuntime | None = compiled.runtime
    if runtime is None:
        runtime = CompiledRuntime(compiled, None)
        compiled.runtime = runtime
    return runtime


def run_compiled(compiled: Any, arrays: Sequence[object]) -> Any:
    """``Compiled.__call__``: run this variant; arguments that do not fit raise InputError."""
    runtime = runtime_of(compiled)
    try:
        key, pointers, stream = call_key(arrays)
        bound = runtime.accepted.get(key)
        if bound is None:
            bound = runtime.accept(arrays, key)
    except ArgumentError as error:
        raise input_error(compiled.name, error) from None
    return bound.run(arrays, pointers, stream)
