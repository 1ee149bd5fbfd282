"""Modules and functions: PTX/cubin loading with JIT logs, attributes, cubins, tensor maps."""

from __future__ import annotations

import contextlib
import ctypes
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any

from pyfuse.backend_ptx.driver.core import call, context, device_info, driver_module, error_text
from pyfuse.errors import LaunchError
from pyfuse.ir.records import record

if TYPE_CHECKING:
    from pyfuse.backend_ptx.ptxas import KernelResources

JIT_LOG_BYTES = 64 * 1024
_ELF_MAGIC = b"\x7fELF"


@record(frozen=True)
class Module:
    handle: Any = field(repr=False)
    name: str
    device: int
    info_log: str = field(repr=False)

    def resources(self) -> dict[str, KernelResources]:
        """Registers/spills per kernel as the driver's JIT reported them.

        Empty for cubins and when the driver's JIT cache (``~/.nv/ComputeCache``)
        already held this PTX: a cache hit compiles nothing and logs nothing.
        """
        # The ptxas log parser (and its subprocess machinery) loads only when asked: loading
        # and launching a kernel never needs it.
        from pyfuse.backend_ptx.ptxas import parse_log

        return parse_log(self.info_log)[0]


@record(frozen=True)
class Function:
    handle: Any = field(repr=False)
    name: str
    module: Module


def _decode_log(buffer: bytearray) -> str:
    return bytes(buffer).split(b"\0", 1)[0].decode(errors="replace").strip()


def _image_bytes(image: bytes | str) -> bytes:
    data = image.encode() if isinstance(image, str) else bytes(image)
    if not data.startswith(_ELF_MAGIC) and not data.endswith(b"\0"):
        data += b"\0"  # PTX must be NUL-terminated for the driver's JIT
    return data


def _jit_options(cu: Any, error_log: bytearray, info_log: bytearray) -> tuple[list[Any], list[Any]]:
    opt = cu.CUjit_option
    options = [
        opt.CU_JIT_ERROR_LOG_BUFFER,
        opt.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        opt.CU_JIT_INFO_LOG_BUFFER,
        opt.CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
        opt.CU_JIT_LOG_VERBOSE,
    ]
    values = [error_log, len(error_log), info_log, len(info_log), 1]
    return options, values


def load_module(image: bytes | str, name: str, *, device: int = 0) -> Module:
    """Load PTX (JIT-compiled by the driver) or a cubin; ``name`` labels errors.

    A failed load raises LaunchError carrying the driver's message and the JIT
    error log ("line N; error : ..."), which names the offending PTX line.
    """
    cu = driver_module()
    context(device)
    error_log, info_log = bytearray(JIT_LOG_BYTES), bytearray(JIT_LOG_BYTES)
    options, values = _jit_options(cu, error_log, info_log)
    result = cu.cuModuleLoadDataEx(_image_bytes(image), len(options), options, values)
    if result[0] != cu.CUresult.CUDA_SUCCESS:
        log = _decode_log(error_log) or _decode_log(info_log)
        raise LaunchError(
            f"kernel {name}: cuModuleLoadDataEx failed with {error_text(cu, result[0])}"
            + (f"\nJIT log:\n{log}" if log else "")
        )
    return Module(handle=result[1], name=name, device=device, info_log=_decode_log(info_log))


@contextlib.contextmanager
def capture_tolerant() -> Iterator[None]:
    """Let this thread load modules while a CUDA graph capture is under way.

    Under the default (global) capture mode the driver refuses calls it deems unsafe, from
    the capturing thread and from every other thread, and invalidates the capture. Loading
    a module enqueues nothing on any stream, so the capture loses nothing: this thread's
    mode is relaxed for the duration and restored after.
    """
    cu = driver_module()
    exchange = cu.cuThreadExchangeStreamCaptureMode
    relaxed = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    previous = call(cu, exchange(relaxed), "cuThreadExchangeStreamCaptureMode")
    try:
        yield
    finally:
        exchange(previous)


def get_function(module: Module, name: str) -> Function:
    cu = driver_module()
    handle = call(
        cu, cu.cuModuleGetFunction(module.handle, name.encode()), "cuModuleGetFunction", name
    )
    return Function(handle=handle, name=name, module=module)


def load_kernel(image: bytes | str, name: str, *, device: int = 0) -> Function:
    """Load a module and return its entry ``name`` in one step."""
    return get_function(load_module(image, name, device=device), name)


def set_max_dynamic_smem(function: Function, nbytes: int) -> None:
    """Opt a function into more than 48 KB of dynamic shared memory (needed per function)."""
    cu = driver_module()
    limit = device_info(function.module.device).smem_per_block_optin
    if not 0 <= nbytes <= limit:
        raise LaunchError(
            f"kernel {function.name}: {nbytes} B of dynamic shared memory exceeds the "
            f"device's opt-in limit of {limit} B per block"
        )
    attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    call(
        cu,
        cu.cuFuncSetAttribute(function.handle, attr, nbytes),
        "cuFuncSetAttribute",
        function.name,
    )


def function_attribute(function: Function, name: str) -> int:
    """A ``CU_FUNC_ATTRIBUTE_<name>`` value, e.g. ``NUM_REGS`` or ``LOCAL_SIZE_BYTES``."""
    cu = driver_module()
    attr = getattr(cu.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{name}")
    # cuFuncGetAttribute takes the attribute first, unlike cuFuncSetAttribute.
    return int(call(cu, cu.cuFuncGetAttribute(attr, function.handle), "cuFuncGetAttribute"))


# A kernel with a stack frame or spills, in the JIT's verbose log.
_LOCAL_MEMORY_USED = re.compile(r"\b[1-9]\d* bytes (?:stack frame|spill)")


def cubin_from_ptx(
    ptx: bytes | str,
    name: str,
    *,
    device: int = 0,
    on_compile: Callable[[], None] | None = None,
) -> bytes:
    """JIT PTX to a cubin through the driver's linker, so later processes skip the JIT.

    ``cuLinkCreate``/``cuLinkAddData``/``cuLinkComplete`` compile for the current
    context's device; the returned bytes load with :func:`load_module`. ptxas builds at
    the driver's default optimization level (``-O4``). A kernel that spills is built again
    as ``ptxas.rebuilds`` lists (the whole register budget of one block per SM, then a
    lower optimization level), and the build that spills least is kept.
    ``on_compile`` is called just before the compile itself (``cuLinkAddData``) starts.
    """
    cubin, log = _link(ptx, name, device, on_compile)
    # The verbose log reports "0 bytes stack frame, 0 bytes spill stores" for every kernel:
    # only a nonzero count loads the log parser.
    if _LOCAL_MEMORY_USED.search(log) is None:
        return cubin
    from pyfuse.backend_ptx.ptxas import parse_log, rebuilds, spilled_bytes

    least = spilled_bytes(parse_log(log)[0])
    text = ptx.decode() if isinstance(ptx, bytes) else ptx
    for variant, level in rebuilds(text) if least else ():
        other, other_log = _link(variant, name, device, None, optimization=level)
        spilled = spilled_bytes(parse_log(other_log)[0])
        if spilled < least:
            cubin, least = other, spilled
        if not least:
            break
    return cubin


def _link(
    ptx: bytes | str,
    name: str,
    device: int,
    on_compile: Callable[[], None] | None,
    *,
    optimization: int | None = None,
) -> tuple[bytes, str]:
    """One driver JIT of ``ptx`` (at ``optimization``, or the driver's default level): the
    cubin and the JIT's info log."""
    cu = driver_module()
    context(device)
    error_log, info_log = bytearray(JIT_LOG_BYTES), bytearray(JIT_LOG_BYTES)
    options, values = _jit_options(cu, error_log, info_log)
    if optimization is not None:
        options.append(cu.CUjit_option.CU_JIT_OPTIMIZATION_LEVEL)
        values.append(optimization)
    state = call(cu, cu.cuLinkCreate(len(options), options, values), "cuLinkCreate", name)
    try:
        data = _image_bytes(ptx)
        if on_compile is not None:
            on_compile()
        result = cu.cuLinkAddData(
            state, cu.CUjitInputType.CU_JIT_INPUT_PTX, data, len(data), name.encode(), 0, None, None
        )
        if result[0] == cu.CUresult.CUDA_SUCCESS:
            result = cu.cuLinkComplete(state)
        if result[0] != cu.CUresult.CUDA_SUCCESS:
            log = _decode_log(error_log)
            raise LaunchError(
                f"kernel {name}: linking PTX to a cubin failed with {error_text(cu, result[0])}"
                + (f"\nJIT log:\n{log}" if log else "")
            )
        address, size = int(result[1]), int(result[2])
        # The cubin belongs to the link state; copy it out before destroying that.
        return ctypes.string_at(address, size), _decode_log(info_log)
    finally:
        cu.cuLinkDestroy(state)


def encode_tensor_map_tiled(
    *,
    dtype_code: int,
    global_address: int,
    global_dims: Sequence[int],
    global_strides: Sequence[int],
    box_dims: Sequence[int],
    element_strides: Sequence[int],
    interleave: int,
    swizzle: int,
    l2_promotion: int,
    oob_fill: int,
    description: str = "",
) -> Any:
    """``cuTensorMapEncodeTiled``; every list element is wrapped as cuda-bindings requires."""
    cu = driver_module()
    u32, u64 = cu.cuuint32_t, cu.cuuint64_t
    # A rank-1 map has no strides, but cuda.bindings passes an empty list as NULL, which the
    # driver refuses (CUDA_ERROR_INVALID_VALUE on the H200, driver 580, 2026-12-05); with one
    # entry, which it does not read, the same map encodes. The entry is a legal row pitch.
    strides = list(global_strides) or [16 * global_dims[0]]
    result = cu.cuTensorMapEncodeTiled(
        cu.CUtensorMapDataType(dtype_code),
        u32(len(global_dims)),
        global_address,
        [u64(x) for x in global_dims],
        [u64(x) for x in strides],
        [u32(x) for x in box_dims],
        [u32(x) for x in element_strides],
        cu.CUtensorMapInterleave(interleave),
        cu.CUtensorMapSwizzle(swizzle),
        cu.CUtensorMapL2promotion(l2_promotion),
        cu.CUtensorMapFloatOOBfill(oob_fill),
    )
    if result[0] != cu.CUresult.CUDA_SUCCESS:
        raise LaunchError(
            f"cuTensorMapEncodeTiled failed with {error_text(cu, result[0])} for {description}"
        )
    return result[1]
