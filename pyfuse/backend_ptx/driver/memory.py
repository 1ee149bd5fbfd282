"""Device memory, copies and streams: what tests and the runtime need around a launch."""

from __future__ import annotations

from typing import Any

from pyfuse.backend_ptx.driver.core import call, context, driver_module


def _host_buffer(obj: Any, *, writable: bool, what: str) -> tuple[int, int]:
    import numpy as np

    if isinstance(obj, (bytes, bytearray, memoryview)):
        array = np.frombuffer(obj, dtype=np.uint8)
    elif isinstance(obj, np.ndarray):
        array = obj
    elif writable:
        raise ValueError(f"{what} must be a numpy array, bytearray or memoryview")
    else:
        array = np.asarray(obj)
    if not array.flags.c_contiguous:
        raise ValueError(f"{what} must be C-contiguous")
    if writable and not array.flags.writeable:
        raise ValueError(f"{what} must be writable")
    return int(array.ctypes.data), int(array.nbytes)


def _byte_count(requested: int | None, available_bytes: int, what: str) -> int:
    if requested is None:
        return available_bytes
    if not 0 <= requested <= available_bytes:
        raise ValueError(
            f"{what}: {requested} bytes requested, host buffer holds {available_bytes}"
        )
    return requested


def mem_alloc(nbytes: int, *, device: int = 0) -> int:
    """Allocate device memory; returns the address as an int."""
    cu = driver_module()
    context(device)
    return int(call(cu, cu.cuMemAlloc(max(int(nbytes), 1)), f"cuMemAlloc({nbytes})"))


def mem_free(ptr: int) -> None:
    cu = driver_module()
    call(cu, cu.cuMemFree(cu.CUdeviceptr(int(ptr))), "cuMemFree")


def memcpy_htod(dst: int, src: Any, nbytes: int | None = None) -> None:
    """Copy ``nbytes`` (all of ``src`` by default) from a host buffer to ``dst``; synchronous."""
    cu = driver_module()
    address, size = _host_buffer(src, writable=False, what="memcpy_htod source")
    count = _byte_count(nbytes, size, "memcpy_htod")
    call(cu, cu.cuMemcpyHtoD(cu.CUdeviceptr(int(dst)), address, count), "cuMemcpyHtoD")


def memcpy_dtoh(dst: Any, src: int, nbytes: int | None = None) -> None:
    """Copy ``nbytes`` (all of ``dst`` by default) from ``src`` into a host buffer;
    synchronous."""
    cu = driver_module()
    address, size = _host_buffer(dst, writable=True, what="memcpy_dtoh destination")
    count = _byte_count(nbytes, size, "memcpy_dtoh")
    call(cu, cu.cuMemcpyDtoH(address, cu.CUdeviceptr(int(src)), count), "cuMemcpyDtoH")


def memset_d8(ptr: int, value: int, nbytes: int) -> None:
    cu = driver_module()
    call(cu, cu.cuMemsetD8(cu.CUdeviceptr(int(ptr)), value, nbytes), "cuMemsetD8")


def memset_d32(ptr: int, value: int, count: int) -> None:
    """Fill ``count`` 32-bit words, e.g. 0x7FC00000 to poison f32 outputs with NaN."""
    cu = driver_module()
    call(cu, cu.cuMemsetD32(cu.CUdeviceptr(int(ptr)), value, count), "cuMemsetD32")


def synchronize(device: int = 0) -> None:
    """Wait for all work on ``device``; asynchronous launch errors surface here."""
    cu = driver_module()
    context(device)
    call(cu, cu.cuCtxSynchronize(), "cuCtxSynchronize")


def stream_create(*, device: int = 0, non_blocking: bool = True) -> Any:
    cu = driver_module()
    context(device)
    flags = cu.CUstream_flags.CU_STREAM_NON_BLOCKING if non_blocking else 0
    return call(cu, cu.cuStreamCreate(flags), "cuStreamCreate")


def stream_synchronize(stream: Any) -> None:
    cu = driver_module()
    call(cu, cu.cuStreamSynchronize(stream), "cuStreamSynchronize")


def stream_destroy(stream: Any) -> None:
    cu = driver_module()
    call(cu, cu.cuStreamDestroy(stream), "cuStreamDestroy")


def memset_d8_async(ptr: int, value: int, nbytes: int, stream: int) -> None:
    """Fill ``nbytes`` bytes in ``stream``'s order (an L2 flush between timed runs)."""
    cu = driver_module()
    call(
        cu,
        cu.cuMemsetD8Async(cu.CUdeviceptr(int(ptr)), value, nbytes, stream),
        "cuMemsetD8Async",
    )


class Event:
    """A CUDA event that records timing: ``record(stream)``, then ``elapsed_ms(later)``
    once both have completed (``synchronize``)."""

    def __init__(self, *, device: int = 0) -> None:
        cu = driver_module()
        context(device)
        self._cu = cu
        self.handle = call(cu, cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DEFAULT), "cuEventCreate")

    def record(self, stream: int) -> None:
        call(self._cu, self._cu.cuEventRecord(self.handle, stream), "cuEventRecord")

    def synchronize(self) -> None:
        call(self._cu, self._cu.cuEventSynchronize(self.handle), "cuEventSynchronize")

    def elapsed_ms(self, later: Event) -> float:
        """Milliseconds from this event to ``later`` (both recorded and completed)."""
        cu = self._cu
        return float(
            call(cu, cu.cuEventElapsedTime(self.handle, later.handle), "cuEventElapsedTime")
        )

    def destroy(self) -> None:
        if self.handle is not None:
            call(self._cu, self._cu.cuEventDestroy(self.handle), "cuEventDestroy")
            self.handle = None


class DeviceBuffer:
    """An owned device allocation; ``int(buf)`` is its address (a valid PTR argument)."""

    def __init__(self, nbytes: int, *, device: int = 0) -> None:
        self.nbytes = int(nbytes)
        self.device = device
        self.ptr = mem_alloc(self.nbytes, device=device)

    @classmethod
    def from_host(cls, host: Any, *, device: int = 0) -> DeviceBuffer:
        _, size = _host_buffer(host, writable=False, what="DeviceBuffer.from_host source")
        buffer = cls(size, device=device)
        buffer.upload(host)
        return buffer

    def __int__(self) -> int:
        return self.ptr

    def upload(self, host: Any) -> None:
        _, size = _host_buffer(host, writable=False, what="upload source")
        if size > self.nbytes:
            raise ValueError(f"upload of {size} bytes into a {self.nbytes}-byte buffer")
        memcpy_htod(self.ptr, host)

    def download(self, host: Any) -> Any:
        memcpy_dtoh(
            host,
            self.ptr,
            min(self.nbytes, _host_buffer(host, writable=True, what="download destination")[1]),
        )
        return host

    def free(self) -> None:
        if self.ptr:
            mem_free(self.ptr)
            self.ptr = 0

    def __enter__(self) -> DeviceBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()
