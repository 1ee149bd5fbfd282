"""The ways a warm call could allocate its output and launch its kernel, each timed alone on
the same tiny kernel, beside one torch ``x + y``: the measurements behind the warm path's
choices (``pyfuse.runtime.arrays.TorchBound``, ``pyfuse.backend_ptx.driver.launch``).

Run on a GPU machine with torch installed:

    PYTHONPATH=. python3 benchmarks/launch_paths.py [--count N] [--json FILE]

Each figure is the median over 9 trials of the mean wall time per call of ``count`` calls
(16-element float32 tensors, so the GPU never holds the host up).
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch
from common import host_options, per_call_us, report, warm_tiny_add

from pyfuse.backend_ptx.driver.core import driver_module
from pyfuse.runtime import calls
from pyfuse.runtime.arrays import call_key


def main() -> None:
    options = host_options(__doc__.splitlines()[0])
    x, y, fused = warm_tiny_add()
    state = fused.__dict__[calls._STATE]
    key, _, _ = call_key((x, y))
    loaded = state.bound[key]._loaded
    launcher, grid, block, smem = loaded._launches[0][:4]
    out = torch.empty_like(x)
    cu = driver_module()
    handle, params = launcher._handle, launcher._kernel_params
    packed = launcher._packed
    gx, gy, gz = grid
    bx, by, bz = block
    raw_stream = torch._C._cuda_getCurrentRawStream
    stream_objects: dict[int, Any] = {}

    def bindings_int_stream() -> None:
        packed[:] = [x.data_ptr(), y.data_ptr(), out.data_ptr()]
        cu.cuLaunchKernel(handle, gx, gy, gz, bx, by, bz, smem, raw_stream(0), params, 0)

    def bindings_stream_object() -> None:
        packed[:] = [x.data_ptr(), y.data_ptr(), out.data_ptr()]
        raw = raw_stream(0)
        stream = stream_objects.get(raw)
        if stream is None:
            stream = stream_objects[raw] = cu.CUstream(raw)
        cu.cuLaunchKernel(handle, gx, gy, gz, bx, by, bz, smem, stream, params, 0)

    libcuda = ctypes.CDLL("libcuda.so.1")
    entry = libcuda.cuLaunchKernel
    entry.restype = ctypes.c_int
    entry.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    function_address = int(handle)

    def ctypes_with_argtypes() -> None:
        packed[:] = [x.data_ptr(), y.data_ptr(), out.data_ptr()]
        entry(function_address, gx, gy, gz, bx, by, bz, smem, raw_stream(0), params, None)

    plain = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
    plain.restype = ctypes.c_int
    fixed = [ctypes.c_void_p(function_address)] + [
        ctypes.c_uint(v) for v in (gx, gy, gz, bx, by, bz, smem)
    ]
    params_arg = ctypes.c_void_p(params)

    def ctypes_prebuilt() -> None:
        packed[:] = [x.data_ptr(), y.data_ptr(), out.data_ptr()]
        plain(*fixed, ctypes.c_void_p(raw_stream(0)), params_arg, None)

    empty_strided_cuda = getattr(
        getattr(getattr(torch._C, "_dynamo", None), "guards", None), "_empty_strided_cuda", None
    )
    shape, stride, dtype = tuple(x.shape), tuple(x.stride()), x.dtype
    figures = {
        "torch x + y": per_call_us(lambda: x + y, options.count),
        "pyfuse call": per_call_us(lambda: fused(x, y), options.count),
        "call key": per_call_us(lambda: call_key((x, y)), options.count),
        "empty_like": per_call_us(lambda: torch.empty_like(x), options.count),
        "new_empty": per_call_us(lambda: x.new_empty(shape), options.count),
        "torch.empty_strided": per_call_us(
            lambda: torch.empty_strided(shape, stride, dtype=dtype, device="cuda"), options.count
        ),
        "launch: pyfuse loaded.launch": per_call_us(
            lambda: loaded.launch([x.data_ptr(), y.data_ptr(), out.data_ptr()], raw_stream(0)),
            options.count,
        ),
        "launch: bindings, int stream": per_call_us(bindings_int_stream, options.count),
        "launch: bindings, CUstream kept": per_call_us(bindings_stream_object, options.count),
        "launch: ctypes with argtypes": per_call_us(ctypes_with_argtypes, options.count),
        "launch: ctypes, prebuilt arguments": per_call_us(ctypes_prebuilt, options.count),
        "data_ptr x3": per_call_us(
            lambda: [x.data_ptr(), y.data_ptr(), out.data_ptr()], options.count
        ),
        "raw stream": per_call_us(lambda: raw_stream(0), options.count),
        "empty call (Python floor)": per_call_us(lambda: None, options.count),
    }
    if empty_strided_cuda is not None:
        figures["_empty_strided_cuda"] = per_call_us(
            lambda: empty_strided_cuda(shape, stride, dtype), options.count
        )
    report(figures, options.json, width=36)


if __name__ == "__main__":
    main()
