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
import struct
import threading
from typing import Any

import torch
from common import host_options, per_call_us, report, warm_tiny_add

from pyfuse.backend_ptx.driver.core import driver_module
from pyfuse.runtime import calls
from pyfuse.runtime.arrays import call_key


def main() -> None:
    options = host_options(__doc__.splitlines()[0])
    x, y, fused = warm_tiny_add()
    fused(x, y)  # the second call with one key: the shortcut exists from here on
    state = fused.__dict__[calls._STATE]
    key, _, _ = call_key((x, y))
    loaded = state.bound[key]._loaded
    launcher, grid, block, smem = loaded._launches[0][:4]
    out = torch.empty_like(x)
    buffers = [x.data_ptr(), y.data_ptr(), out.data_ptr()]
    cu = driver_module()
    handle, params = launcher._handle, launcher._kernel_params
    packed = launcher._packed
    gx, gy, gz = grid
    bx, by, bz = block
    raw_stream = torch._C._cuda_getCurrentRawStream
    stream = raw_stream(0)
    stream_object = cu.CUstream(stream)
    function_address = int(handle)
    direct = loaded.direct
    arrays = (x, y)
    repeat = state.repeat
    lock = threading.Lock()
    pack_three = struct.Struct("<3Q").pack_into
    packed[:] = buffers

    def library_entry(loader: Any) -> Any:
        entry = loader("libcuda.so.1").cuLaunchKernel
        entry.restype = ctypes.c_int
        return entry

    fixed = [ctypes.c_void_p(function_address)] + [
        ctypes.c_uint(v) for v in (gx, gy, gz, bx, by, bz, smem)
    ]
    tail = [ctypes.c_void_p(stream), ctypes.c_void_p(params), None]
    released, kept = library_entry(ctypes.CDLL), library_entry(ctypes.PyDLL)

    def bindings_int_function() -> Any:
        return cu.cuLaunchKernel(function_address, gx, gy, gz, bx, by, bz, smem, stream, params, 0)

    try:
        bindings_int_function()
    except Exception as exc:  # a binding that takes only CUfunction objects
        print(f"(an int function handle is refused: {exc})")
        bindings_int_function = None  # type: ignore[assignment]

    def lock_pair() -> None:
        lock.acquire()
        lock.release()

    figures = {
        "torch x + y": per_call_us(lambda: x + y, options.count),
        "pyfuse call": per_call_us(lambda: fused(x, y), options.count),
        "the shortcut, whole": per_call_us(lambda: repeat.run(arrays), options.count),
        "launch: bound closure (pack, lock, driver)": per_call_us(
            lambda: direct(buffers, stream), options.count
        ),
        "driver: bindings, CUfunction, int stream": per_call_us(
            lambda: cu.cuLaunchKernel(handle, gx, gy, gz, bx, by, bz, smem, stream, params, 0),
            options.count,
        ),
        "driver: bindings, CUfunction, CUstream": per_call_us(
            lambda: cu.cuLaunchKernel(
                handle, gx, gy, gz, bx, by, bz, smem, stream_object, params, 0
            ),
            options.count,
        ),
        "driver: ctypes CDLL, prebuilt (GIL released)": per_call_us(
            lambda: released(*fixed, *tail), options.count
        ),
        "driver: ctypes PyDLL, prebuilt (GIL kept)": per_call_us(
            lambda: kept(*fixed, *tail), options.count
        ),
        "pack: ctypes slice assignment": per_call_us(
            lambda: packed.__setitem__(slice(None), buffers), options.count
        ),
        "pack: struct pack_into": per_call_us(
            lambda: pack_three(packed, 0, *buffers), options.count
        ),
        "lock: acquire and release": per_call_us(lock_pair, options.count),
        "check: TensorGuards": per_call_us(lambda: repeat._check(x, y), options.count),
        "data_ptr x3": per_call_us(
            lambda: [x.data_ptr(), y.data_ptr(), out.data_ptr()], options.count
        ),
        "raw stream": per_call_us(lambda: raw_stream(0), options.count),
        "empty call (Python floor)": per_call_us(lambda: None, options.count),
    }
    if bindings_int_function is not None:
        figures["driver: bindings, int function"] = per_call_us(
            bindings_int_function, options.count
        )
    empty_strided_cuda = getattr(
        getattr(getattr(torch._C, "_dynamo", None), "guards", None), "_empty_strided_cuda", None
    )
    if empty_strided_cuda is not None:
        shape, stride, dtype = tuple(x.shape), tuple(x.stride()), x.dtype
        figures["_empty_strided_cuda"] = per_call_us(
            lambda: empty_strided_cuda(shape, stride, dtype), options.count
        )
    torch.cuda.synchronize()
    if not torch.allclose(out, x + y):
        raise SystemExit("a timed launch wrote a wrong result")
    report(figures, options.json, width=46)


if __name__ == "__main__":
    main()
