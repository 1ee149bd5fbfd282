"""The runtime without a GPU: signatures and variants, argument checks, interop parsing, launches.

Launches go to the fake driver of ``tests/backend_ptx`` (extended here with memory calls);
torch is a small fake module standing in for ``sys.modules["torch"]``, so the torch path
(allocation through ``torch.empty``, torch's current stream) is checked on the CPU too.
The PTX emitter is stubbed: these tests are about the runtime, not the PTX.
"""

from __future__ import annotations

import ctypes
import gc
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backend_ptx"))
from ptx_fake_driver import CUresult, FakeDriver

import pyfuse as pf
from pyfuse import knobs
from pyfuse.backend_ptx import driver
from pyfuse.backend_ptx.abi import ParamKind
from pyfuse.ir.target import HOPPER
from pyfuse.runtime import calls, launch
from pyfuse.runtime import compile as compile_module
from pyfuse.runtime.arrays import DeviceArray
from pyfuse.runtime.spec import (
    ArrayFormatError,
    DLDataType,
    DLDevice,
    DLManagedTensor,
    DLManagedTensorVersioned,
    DLTensor,
    contiguous_strides,
    describe_cuda_array_interface,
    describe_dlpack_capsule,
    spec_of,
)

# ---- fixtures: stub emitter, fake driver with memory, fake torch -------------------------------


def stub_emit(kernel: Any, target: Any) -> str:
    return f"// {kernel.name} vector_bytes={target.vector_bytes}\n.entry {kernel.name}()\n"


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setattr(compile_module, "emit_ptx", stub_emit)
    with knobs.overrides(cache_dir=tmp_path / "cache"):
        yield


class MemoryDriver(FakeDriver):
    """The fake driver plus device memory backed by host buffers (addresses are real host
    addresses, so copies work) and stream synchronization."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.buffers: dict[int, Any] = {}

    def cuMemAlloc(self, nbytes: int) -> tuple[Any, ...]:
        buffer = ctypes.create_string_buffer(nbytes + 256)
        address = (ctypes.addressof(buffer) + 255) // 256 * 256
        self.buffers[address] = buffer
        self._record("cuMemAlloc", nbytes)
        return (CUresult.CUDA_SUCCESS, address)

    def cuMemFree(self, pointer: Any) -> tuple[Any, ...]:
        self._record("cuMemFree", int(pointer))
        self.buffers.pop(int(pointer))
        return (CUresult.CUDA_SUCCESS,)

    def cuMemcpyDtoH(self, host: int, device: Any, nbytes: int) -> tuple[Any, ...]:
        ctypes.memmove(host, int(device), nbytes)
        return (CUresult.CUDA_SUCCESS,)

    def cuStreamSynchronize(self, stream: Any) -> tuple[Any, ...]:
        self._record("cuStreamSynchronize", stream)
        return (CUresult.CUDA_SUCCESS,)


@pytest.fixture
def fake() -> Iterator[MemoryDriver]:
    fake_driver = MemoryDriver()
    with driver.use_driver(fake_driver):
        yield fake_driver


class FakeTorchDtype:
    def __init__(self, name: str, itemsize: int) -> None:
        self.name = name
        self.itemsize = itemsize

    def __repr__(self) -> str:
        return f"torch.{self.name}"


def make_fake_torch() -> types.ModuleType:
    torch = types.ModuleType("torch")
    allocations: list[tuple[Any, ...]] = []
    next_address = [0x7000_0000]

    class Tensor:
        def __init__(
            self,
            shape: tuple[int, ...],
            dtype: FakeTorchDtype,
            *,
            device: int = 0,
            strides: tuple[int, ...] | None = None,
            pointer: int | None = None,
        ) -> None:
            self.shape = tuple(shape)
            self.dtype = dtype
            self._device = device
            self._strides = strides or contiguous_strides(self.shape)
            if pointer is None:
                pointer = next_address[0]
                next_address[0] += 1 << 20
            self._pointer = pointer

        def data_ptr(self) -> int:
            return self._pointer

        def stride(self) -> tuple[int, ...]:
            return self._strides

        def get_device(self) -> int:
            return self._device

        def new_empty(self, shape: Any, *, dtype: FakeTorchDtype) -> Any:
            return empty(shape, dtype=dtype, device=("cuda", self._device))

    Tensor.__module__ = "torch"
    torch.Tensor = Tensor  # type: ignore[attr-defined]
    for name, size in [
        ("float32", 4),
        ("float16", 2),
        ("bfloat16", 2),
        ("float64", 8),
        ("int32", 4),
        ("int64", 8),
        ("bool", 1),
        ("int8", 1),
        ("uint8", 1),
        ("int16", 2),
        ("uint16", 2),
    ]:
        setattr(torch, name, FakeTorchDtype(name, size))

    def empty(shape: Any, *, dtype: FakeTorchDtype, device: Any) -> Any:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        tensor = Tensor(shape, dtype, device=device[1])
        allocations.append((shape, dtype.name, device))
        return tensor

    def empty_like(like: Any) -> Any:
        return empty(like.shape, dtype=like.dtype, device=("cuda", like._device))

    torch.empty = empty  # type: ignore[attr-defined]
    torch.empty_like = empty_like  # type: ignore[attr-defined]
    torch.device = lambda kind, index: (kind, index)  # type: ignore[attr-defined]
    torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda index: 0x5000 + index)  # type: ignore[attr-defined]
    torch.allocations = allocations  # type: ignore[attr-defined]
    return torch


@pytest.fixture
def torch(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    fake_torch = make_fake_torch()
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    # Types are classified once; a fresh fake Tensor class is a new type, so nothing leaks.
    return fake_torch


def tensor(torch: Any, shape: tuple[int, ...], dtype: str = "float32", **kwargs: Any) -> Any:
    return torch.Tensor(shape, getattr(torch, dtype), **kwargs)


def add_mul(x: Any, y: Any, scale: Any = 2.0) -> Any:
    return x * y + scale


# ---- import hygiene ---------------------------------------------------------------------------


def test_import_pyfuse_imports_no_torch_or_cupy() -> None:
    code = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('torch', 'cupy'):
            raise AssertionError('imported ' + name)
        return None
sys.meta_path.insert(0, Block())
import pyfuse as pf
import pyfuse.runtime.calls, pyfuse.runtime.launch, pyfuse.runtime.arrays, pyfuse.runtime.cache
f = pf.fuse(lambda x: x + 1)
f.trace(pf.spec((4,), pf.float32))
print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'cupy', 'cuda')))
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# ---- compile_for and signatures ---------------------------------------------------------------


def test_same_signature_hits_and_timings_start_with_trace() -> None:
    f = pf.fuse(add_mul)
    first = f.compile(pf.spec((16,), pf.float32), pf.spec((16,), pf.float32))
    assert f.compile(pf.spec((16,), pf.float32), pf.spec((16,), pf.float32)) is first
    host = np.ones(16, np.float32)
    assert f.compile(host, host) is first
    assert next(iter(first.timings)) == "trace"
    assert {"trace", "segment", "schedule", "lower", "emit"} <= set(first.timings)
    assert first.runtime.signature.target == HOPPER


@pytest.mark.parametrize(
    "other",
    [
        pf.spec((17,), pf.float32),
        pf.spec((16,), pf.bfloat16),
        pf.spec((8, 2), pf.float32),
    ],
)
def test_new_shape_or_dtype_compiles_a_new_variant(other: pf.Spec) -> None:
    f = pf.fuse(lambda x: x + 1)
    first = f.compile(pf.spec((16,), pf.float32))
    second = f.compile(other)
    assert second is not first
    assert f.compile(other) is second


def test_strides_are_part_of_the_signature_except_on_size_one_axes() -> None:
    f = pf.fuse(lambda x: x * 2)
    row_major = f.compile(pf.spec((4, 6), pf.float32))
    transposed = f.compile(pf.spec((4, 6), pf.float32, strides=(1, 4)))
    assert transposed is not row_major
    # A size-1 axis is a broadcast: its stride is never read.
    assert f.compile(pf.spec((1, 6), pf.float32, strides=(99, 1))) is f.compile(
        pf.spec((1, 6), pf.float32)
    )


def test_python_numbers_are_keyed_by_type_and_value() -> None:
    f = pf.fuse(add_mul)
    x = pf.spec((8,), pf.float32)
    two = f.compile(x, x, 2.0)
    assert f.compile(x, x, 2.0) is two
    assert f.compile(x, x, 3.0) is not two
    assert f.compile(x, x, 2) is not two  # int 2 == float 2.0, but another trace


def test_disabled_cache_compiles_afresh() -> None:
    f = pf.fuse(lambda x: x + 1)
    x = pf.spec((8,), pf.float32)
    with knobs.overrides(disable_cache=True):
        assert f.compile(x) is not f.compile(x)


def test_compile_errors_name_the_argument() -> None:
    f = pf.fuse(lambda x: x + 1)
    with pytest.raises(pf.FusionError, match=r"argument 0: .*uint16 is not supported"):
        f.compile(np.ones(4, np.uint16))
    with pytest.raises(pf.FusionError, match="negative strides"):
        f.compile(np.ones(4, np.float32)[::-1])


# ---- interop parsing: __cuda_array_interface__ -----------------------------------------------


def test_cuda_array_interface_v2_contiguous() -> None:
    info = describe_cuda_array_interface(
        {"version": 2, "shape": (3, 5), "typestr": "<f4", "data": (0x1000, False), "strides": None}
    )
    assert (info.pointer, info.shape, info.strides, info.dtype) == (
        0x1000,
        (3, 5),
        (5, 1),
        pf.float32,
    )
    assert info.device is None and info.stream is None


def test_cuda_array_interface_v3_strides_and_stream() -> None:
    info = describe_cuda_array_interface(
        {
            "version": 3,
            "shape": (5, 3),
            "typestr": "<i8",
            "data": (0x2008, True),
            "strides": (8, 40),
            "stream": 0xABC,
        }
    )
    assert info.strides == (1, 5) and info.dtype == pf.int64 and info.stream == 0xABC
    assert (
        describe_cuda_array_interface(
            {"shape": (2,), "typestr": "|b1", "data": (16, False), "version": 3}
        ).dtype
        == pf.bool
    )


@pytest.mark.parametrize(
    ("interface", "message"),
    [
        (
            {"shape": (2,), "typestr": "<u2", "data": (0, False)},
            "typestr '<u2' is not a supported dtype",
        ),
        ({"shape": (2,), "typestr": ">f4", "data": (0, False)}, "big-endian"),
        ({"shape": (2,), "typestr": "<f4", "data": (0, False), "strides": (6,)}, "multiples"),
        ({"shape": (2,), "typestr": "<f4", "data": (0, False), "mask": object()}, "masked"),
        ({"shape": (2,), "typestr": "<f4", "data": (0, False), "stream": 0}, "stream 0"),
        ({"shape": (2,), "data": (0, False)}, "lacks a field"),
    ],
)
def test_cuda_array_interface_rejections(interface: dict[str, Any], message: str) -> None:
    with pytest.raises(ArrayFormatError, match=message):
        describe_cuda_array_interface(interface)


# ---- interop parsing: DLPack ------------------------------------------------------------------

_new_capsule = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p
)(("PyCapsule_New", ctypes.pythonapi))


class SyntheticDLPack:
    """A DLPack producer built with ctypes: the structs live as long as this object."""

    def __init__(
        self,
        shape: tuple[int, ...],
        *,
        code: int = 2,
        bits: int = 32,
        lanes: int = 1,
        strides: tuple[int, ...] | None = None,
        data: int = 0x10000,
        byte_offset: int = 0,
        device: tuple[int, int] = (2, 0),
        versioned: bool = False,
    ) -> None:
        ndim = len(shape)
        self.shape = (ctypes.c_int64 * max(ndim, 1))(*shape)
        self.strides = (ctypes.c_int64 * max(ndim, 1))(*(strides or ()))
        tensor = DLTensor(
            data=data,
            device=DLDevice(*device),
            ndim=ndim,
            dtype=DLDataType(code, bits, lanes),
            shape=ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64)),
            strides=ctypes.cast(self.strides, ctypes.POINTER(ctypes.c_int64))
            if strides is not None
            else None,
            byte_offset=byte_offset,
        )
        self.versioned = versioned
        if versioned:
            self.managed: Any = DLManagedTensorVersioned(dl_tensor=tensor)
            self.managed.version.major, self.managed.version.minor = 1, 0
        else:
            self.managed = DLManagedTensor(dl_tensor=tensor)
        self.device = device
        self.streams: list[Any] = []

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device

    def __dlpack__(self, stream: Any = None) -> Any:
        self.streams.append(stream)
        name = b"dltensor_versioned" if self.versioned else b"dltensor"
        return _new_capsule(ctypes.addressof(self.managed), name, None)


@pytest.mark.parametrize("versioned", [False, True])
def test_dlpack_capsule_strided_with_offset(versioned: bool) -> None:
    producer = SyntheticDLPack(
        (4, 3), strides=(1, 4), byte_offset=64, data=0x20000, versioned=versioned
    )
    info = describe_dlpack_capsule(producer.__dlpack__())
    assert info.pointer == 0x20000 + 64
    assert (info.shape, info.strides, info.dtype, info.device) == ((4, 3), (1, 4), pf.float32, 0)


@pytest.mark.parametrize(
    ("code", "bits", "dtype"),
    [
        (4, 16, pf.bfloat16),
        (6, 8, pf.bool),
        (0, 32, pf.int32),
        (0, 64, pf.int64),
        (2, 16, pf.float16),
    ],
)
def test_dlpack_dtypes_and_null_strides(code: int, bits: int, dtype: pf.DType) -> None:
    producer = SyntheticDLPack((2, 5), code=code, bits=bits)
    info = describe_dlpack_capsule(producer.__dlpack__())
    assert info.dtype == dtype and info.strides == (5, 1)


def test_dlpack_rejections() -> None:
    # Each producer is kept in a name: the capsule points into it.
    uint16 = SyntheticDLPack((2,), code=1, bits=16)
    with pytest.raises(ArrayFormatError, match="code 1, 16 bits"):
        describe_dlpack_capsule(uint16.__dlpack__())
    vector = SyntheticDLPack((2,), lanes=2)
    with pytest.raises(ArrayFormatError, match="2 lanes"):
        describe_dlpack_capsule(vector.__dlpack__())
    with pytest.raises(ArrayFormatError, match="not a capsule"):
        describe_dlpack_capsule(object())
    used = SyntheticDLPack((2,))
    capsule = _new_capsule(ctypes.addressof(used.managed), b"used_dltensor", None)
    with pytest.raises(ArrayFormatError, match="already consumed"):
        describe_dlpack_capsule(capsule)
    host = SyntheticDLPack((2,), device=(1, 0))
    assert describe_dlpack_capsule(host.__dlpack__()).device == -1


def test_numpy_dlpack_capsule_matches_its_strides() -> None:
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    view = base[1:, ::2]
    info = describe_dlpack_capsule(view.__dlpack__())
    assert info.shape == (3, 3) and info.strides == (6, 2) and info.device == -1
    assert info.pointer == view.ctypes.data


def test_spec_of_reads_interface_and_dlpack_objects() -> None:
    class Interface:
        __cuda_array_interface__ = {  # noqa: RUF012
            "shape": (2, 3),
            "typestr": "<f2",
            "data": (0x100, False),
            "strides": (2, 4),
            "version": 3,
        }

    assert spec_of(Interface()) == pf.spec((2, 3), pf.float16, (1, 2))
    producer = SyntheticDLPack((6, 2), code=4, bits=16)
    assert spec_of(producer) == pf.spec((6, 2), pf.bfloat16)


# ---- argument checks at call time -------------------------------------------------------------


def test_numpy_inputs_raise_input_error_pointing_at_reference() -> None:
    f = pf.fuse(lambda x: x + 1)
    with pytest.raises(pf.InputError, match=r"argument 0: a NumPy array .* fused\.reference"):
        f(np.ones(4, np.float32))


def test_unsupported_argument_type() -> None:
    f = pf.fuse(lambda x: x)
    with pytest.raises(pf.InputError, match="argument 0: cannot use a str"):
        f("x")


def test_torch_cpu_and_bad_dtypes(torch: Any) -> None:
    f = pf.fuse(lambda x, y: x + y)
    cuda = tensor(torch, (4,))
    with pytest.raises(pf.InputError, match="argument 1: a torch tensor on the CPU"):
        f(cuda, tensor(torch, (4,), device=-1))
    with pytest.raises(pf.InputError, match="argument 0: dtype uint16 is not supported"):
        f(tensor(torch, (4,), "uint16"), cuda)


def test_arrays_on_different_devices(torch: Any) -> None:
    f = pf.fuse(lambda x, y: x + y)
    with pytest.raises(pf.InputError, match="argument 1 is on cuda:1 but argument 0 is on cuda:0"):
        f(tensor(torch, (4,)), tensor(torch, (4,), device=1))


def test_negative_strides_are_rejected() -> None:
    class Reversed:
        __cuda_array_interface__ = {  # noqa: RUF012
            "shape": (4,),
            "typestr": "<f4",
            "data": (0x1000, False),
            "strides": (-4,),
            "version": 3,
        }

    f = pf.fuse(lambda x: x + 1)
    with pytest.raises(pf.InputError, match=r"argument 0: negative strides \(-1,\)"):
        f(Reversed())


# ---- launches through the fake driver ---------------------------------------------------------


def test_torch_call_launches_on_the_current_stream_and_caches(
    fake: MemoryDriver, torch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.expect_params = [ParamKind.PTR] * 3
    f = pf.fuse(add_mul)
    x, y = tensor(torch, (16,)), tensor(torch, (16,))
    out = f(x, y)
    assert isinstance(out, torch.Tensor) and out.shape == (16,) and out.dtype is torch.float32
    assert torch.allocations == [((16,), "float32", ("cuda", 0))]
    (launch,) = fake.launches
    assert launch["stream"] == 0x5000
    assert launch["args"] == [x.data_ptr(), y.data_ptr(), out.data_ptr()]
    loads = fake.names().count("cuModuleLoadDataEx")

    # Warm: no description, no compile, no load; new output, same kernel.
    def fail(*args: Any) -> Any:
        raise AssertionError("the warm path described the arguments again")

    monkeypatch.setattr(calls, "describe_arguments", fail)
    x2 = tensor(torch, (16,))
    out2 = f(x2, y)
    assert fake.launches[-1]["args"] == [x2.data_ptr(), y.data_ptr(), out2.data_ptr()]
    assert fake.names().count("cuModuleLoadDataEx") == loads
    state = f.__dict__[calls._STATE]
    assert len(state.compiled) == 1 and len(state.bound) == 1


@pytest.mark.parametrize(
    ("fn", "first", "like"),
    [
        (lambda x, y: x * y, (4, 8), (True,)),  # same shape and dtype: empty_like
        (lambda x, y: (x * y).to(pf.bfloat16), (4, 8), (False,)),  # another dtype
        (lambda x, y: pf.sum(x * y, -1), (4, 8), (False,)),  # another shape
        (lambda x, y: (x * y, x + y), (4, 8), (True, True)),
        (lambda s, y: s + y, (1, 8), (False,)),  # the first input is broadcast
    ],
)
def test_outputs_are_allocated_like_the_first_input_when_they_match_it(
    fn: Any, first: tuple[int, ...], like: tuple[bool, ...]
) -> None:
    compiled = pf.fuse(fn).compile(pf.spec(first, pf.float32), pf.spec((4, 8), pf.float32))
    assert launch.Plan.of(compiled).like_first_input == like


def test_outputs_of_a_transposed_first_input_are_row_major(fake: MemoryDriver, torch: Any) -> None:
    fake.expect_params = [ParamKind.PTR] * 3
    f = pf.fuse(lambda x, y: x * y)
    x = tensor(torch, (4, 8), strides=(1, 4))  # a transposed view: not "like" material
    out = f(x, tensor(torch, (4, 8)))
    assert out.shape == (4, 8) and out.stride() == (8, 1)
    (compiled,) = f.__dict__[calls._STATE].compiled.values()
    assert launch.Plan.of(compiled).like_first_input == (False,)


def test_misaligned_input_compiles_an_unvectorized_variant(fake: MemoryDriver, torch: Any) -> None:
    fake.expect_params = [ParamKind.PTR] * 2
    f = pf.fuse(lambda x: x + 1)
    aligned = tensor(torch, (64,), pointer=0x1000_0000)
    offset = tensor(torch, (64,), pointer=0x1000_0004)  # x[1:] of a float32 tensor
    f(aligned)
    f(offset)
    state = f.__dict__[calls._STATE]
    targets = sorted(c.runtime.signature.target.vector_bytes for c in state.compiled.values())
    assert targets == [1, 16]
    vector = {c.runtime.signature.target.vector_bytes: c for c in state.compiled.values()}
    assert vector[1].kernels[0].params["vector_width"] == 1
    assert vector[16].kernels[0].params["vector_width"] == 4
    assert fake.launches[-1]["args"][0] == 0x1000_0004


def test_strided_view_compiles_its_own_variant(fake: MemoryDriver, torch: Any) -> None:
    f = pf.fuse(lambda x: x * 2)
    f(tensor(torch, (4, 6)))
    f(tensor(torch, (4, 6), strides=(1, 4)))  # x.T of a (6, 4) tensor
    f(tensor(torch, (4, 6), strides=(1, 4)))
    state = f.__dict__[calls._STATE]
    assert len(state.compiled) == 2 and len(fake.launches) == 3


def test_intermediates_share_one_workspace(fake: MemoryDriver, torch: Any) -> None:
    # Reductions over different axes: the row means pass to the second kernel, which
    # recomputes x - mean from x (segment_recompute) rather than reading it back.
    f = pf.fuse(lambda x: (x - x.mean(1, keepdim=True)).sum(0))
    x = tensor(torch, (8, 40000))
    compiled = f.compile(pf.spec((8, 40000), pf.float32))
    assert len(compiled.kernels) == 2 and compiled.global_intermediates
    fake.expect_params = [ParamKind.PTR] * 2
    out = f(x)
    workspace_shape = torch.allocations[-1][0]
    assert torch.allocations[-1][1] == "uint8" and workspace_shape[0] >= 8 * 4
    first, second = fake.launches
    assert compiled.kernels[1].arguments[:2] == [("intermediate", "T1"), ("input", 0)]
    assert first["args"][0] == x.data_ptr() == second["args"][1]
    assert first["args"][1] == second["args"][0]  # the intermediate written, then read
    assert out.shape == (40000,)


def test_large_dynamic_shared_memory_opts_in(fake: MemoryDriver, torch: Any) -> None:
    f = pf.fuse(lambda x: x + 1)
    compiled = f.compile(pf.spec((64,), pf.float32))
    compiled.kernels[0].smem_bytes = 100_000  # as a persistent normalization kernel might ask
    f(tensor(torch, (64,)))
    attribute = FakeDriver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    assert ("cuFuncSetAttribute", attribute, 100_000) in fake.calls
    assert fake.launches[-1]["smem"] == 100_000


def test_load_time_is_reported(fake: MemoryDriver, torch: Any) -> None:
    from pyfuse.runtime import cache

    f = pf.fuse(lambda x: x + 1)
    f(tensor(torch, (8,)))
    (compiled,) = f.__dict__[calls._STATE].compiled.values()
    assert compiled.timings["load"] > 0
    assert compiled.runtime.loaded[0].sources == [cache.FROM_JIT]


def test_interface_inputs_get_device_array_outputs_on_their_stream(fake: MemoryDriver) -> None:
    class Interface:
        def __init__(self, pointer: int) -> None:
            self.__cuda_array_interface__ = {
                "shape": (2, 3),
                "typestr": "<f4",
                "data": (pointer, False),
                "strides": None,
                "version": 3,
                "stream": 0x77,
            }

    f = pf.fuse(lambda x, y: (x + y, x > y))
    added, greater = f(Interface(0x1000), Interface(0x2000))
    assert isinstance(added, DeviceArray) and added.shape == (2, 3)
    assert added.dtype == np.float32 and greater.dtype == np.bool_
    assert fake.launches[-1]["stream"] == 0x77
    assert added.__cuda_array_interface__["stream"] == 0x77
    assert added.__cuda_array_interface__["data"] == (added.pointer, False)


def test_dlpack_inputs_pass_the_launch_stream(fake: MemoryDriver) -> None:
    producer = SyntheticDLPack((8,), code=4, bits=16, data=0x40000)
    f = pf.fuse(lambda x: x * 2)
    out = f(producer)
    assert isinstance(out, DeviceArray) and out.pf_dtype == pf.bfloat16
    # DLPack's number for the legacy default stream, where pyfuse launches for DLPack inputs.
    assert producer.streams and set(producer.streams) == {1}
    assert fake.launches[-1]["stream"] == 0


def test_device_array_copies_to_host_and_frees(fake: MemoryDriver) -> None:
    array = DeviceArray((2, 3), pf.float32, stream=0x99)
    ctypes.memmove(array.pointer, np.arange(6, dtype=np.float32).ctypes.data, 24)
    np.testing.assert_array_equal(array.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3))
    assert ("cuStreamSynchronize", 0x99) in fake.calls
    assert spec_of(array) == pf.spec((2, 3), pf.float32)
    pointer = array.pointer
    del array
    gc.collect()
    assert ("cuMemFree", pointer) in fake.calls


def test_device_array_can_be_an_input(fake: MemoryDriver) -> None:
    fake.expect_params = [ParamKind.PTR] * 2
    f = pf.fuse(lambda x: x + 1)
    x = DeviceArray((4,), pf.bfloat16)
    out = f(x)
    assert isinstance(out, DeviceArray)
    assert fake.launches[-1]["args"] == [x.pointer, out.pointer]


# ---- Compiled.__call__ ------------------------------------------------------------------------


def test_compiled_call_checks_the_signature(fake: MemoryDriver, torch: Any) -> None:
    f = pf.fuse(add_mul)
    compiled = f.compile(pf.spec((4, 8), pf.float32), pf.spec((4, 8), pf.float32), 3.0)
    x = tensor(torch, (4, 8))
    out = compiled(x, x, 3.0)
    assert out.shape == (4, 8)
    cases = [
        (
            (tensor(torch, (4, 8), "bfloat16"), x, 3.0),
            "argument 0: expected dtype float32, got bfloat16",
        ),
        ((x, tensor(torch, (32,)), 3.0), r"argument 1: expected rank 2 \(4, 8\), got rank 1"),
        ((x, tensor(torch, (4, 9)), 3.0), r"argument 1: expected shape \(4, 8\), got \(4, 9\)"),
        ((x, tensor(torch, (4, 8), strides=(1, 4)), 3.0), "argument 1: expected element strides"),
        ((x, x, 4.0), "argument 2: compiled for the float 3.0, got 4.0"),
        ((x, x), "takes 3 arguments, got 2"),
        (
            (x, tensor(torch, (4, 8), pointer=0x1008), 3.0),
            "argument 1: address 0x1008 is not 16-byte",
        ),
    ]
    for arguments, message in cases:
        with pytest.raises(pf.InputError, match=message):
            compiled(*arguments)


def test_compiled_from_compile_fusion_runs_without_a_signature(
    fake: MemoryDriver, torch: Any
) -> None:
    fake.expect_params = [ParamKind.PTR] * 2
    f = pf.fuse(lambda x: x + 1)
    compiled = compile_module.compile_fusion(f.trace(pf.spec((8,), pf.float32)), HOPPER)
    x = tensor(torch, (8,))
    out = compiled(x)
    assert fake.launches[-1]["args"][:1] == [x.data_ptr()] and out.shape == (8,)
    with pytest.raises(pf.InputError, match="expected shape"):
        compiled(tensor(torch, (9,)))


# ---- CuPy (a fake module: CuPy is on neither the CPU nor the GPU machines) ---------------------


def make_fake_cupy() -> types.ModuleType:
    cupy = types.ModuleType("cupy")
    next_address = [0x9000_0000]

    class ndarray:  # noqa: N801 - CuPy's name
        def __init__(self, shape: tuple[int, ...], dtype: Any, device: int = 0) -> None:
            self.shape = tuple(shape)
            self.dtype = np.dtype(dtype)
            self.strides = tuple(s * self.dtype.itemsize for s in contiguous_strides(self.shape))
            self.data = types.SimpleNamespace(ptr=next_address[0])
            self.device = types.SimpleNamespace(id=device)
            next_address[0] += 1 << 20

        @property
        def __cuda_array_interface__(self) -> dict[str, Any]:
            raise AssertionError("the CuPy path reads attributes, not the interface")

    ndarray.__module__ = "cupy"

    class Device:
        def __init__(self, index: int) -> None:
            self.index = index

        def __enter__(self) -> Device:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

    cupy.ndarray = ndarray  # type: ignore[attr-defined]
    cupy.uint8 = np.uint8  # type: ignore[attr-defined]
    cupy.empty = lambda shape, dtype: ndarray(  # type: ignore[attr-defined]
        (shape,) if isinstance(shape, int) else shape, dtype
    )
    cupy.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        Device=Device,
        get_current_stream=lambda: types.SimpleNamespace(ptr=0xC0DE),
    )
    return cupy


def test_cupy_arrays_get_cupy_outputs_on_cupys_stream(
    fake: MemoryDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    cupy = make_fake_cupy()
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    fake.expect_params = [ParamKind.PTR] * 3
    f = pf.fuse(lambda x, y: x * y)
    x, y = cupy.ndarray((8, 4), np.float32), cupy.ndarray((8, 4), np.float32)
    out = f(x, y)
    assert isinstance(out, cupy.ndarray) and out.shape == (8, 4) and out.dtype == np.float32
    launch = fake.launches[-1]
    assert launch["stream"] == 0xC0DE
    assert launch["args"] == [x.data.ptr, y.data.ptr, out.data.ptr]
    with pytest.raises(pf.InputError, match="CuPy has no bfloat16"):
        pf.fuse(lambda x: x.to(pf.bfloat16))(x)


def test_an_empty_intermediate_gets_a_workspace_pointer() -> None:
    """A kernel passing an empty intermediate to the next still gets a pointer for it, and the
    workspace is allocated (two reductions of an empty tensor: the GPU fuzzer, seed 251)."""
    from pyfuse.runtime.launch import Plan

    tensor = types.SimpleNamespace(shape=(0, 8), dtype=pf.float32, strides=(8, 1))
    kernels = [
        types.SimpleNamespace(arguments=[("input", 0), ("intermediate", "T3")]),
        types.SimpleNamespace(arguments=[("intermediate", "T3"), ("output", 0)]),
    ]
    compiled = types.SimpleNamespace(
        fusion=types.SimpleNamespace(inputs=[tensor], outputs=[tensor]),
        intermediate_bytes={"T3": 0},
        kernels=kernels,
    )
    plan = Plan.of(compiled)
    assert plan.workspace_bytes > 0 and plan.workspace_offsets == (0,)
    assert plan.kernel_slots == ((0, 2), (2, 1))


@pytest.mark.parametrize("devices", [1, 2])
def test_outputs_come_from_the_fast_allocator_only_on_one_device(
    fake: MemoryDriver, torch: Any, devices: int
) -> None:
    """torch.compile's allocator entry point allocates on the current device, so a warm call
    takes it only where the process sees one device; elsewhere outputs come like the input."""
    fast: list[tuple[Any, ...]] = []

    def empty_strided_cuda(shape: Any, strides: Any, dtype: Any) -> Any:
        fast.append((shape, strides, dtype.name))
        return torch.empty(shape, dtype=dtype, device=("cuda", 0))

    torch._C._dynamo = types.SimpleNamespace(
        guards=types.SimpleNamespace(_empty_strided_cuda=empty_strided_cuda)
    )
    torch.cuda = types.SimpleNamespace(device_count=lambda: devices)
    f = pf.fuse(lambda x: (x * 2, pf.sum(x, 1)))
    doubled, summed = f(tensor(torch, (3, 5)))
    assert doubled.shape == (3, 5) and summed.shape == (3,)
    if devices == 1:
        assert fast == [((3, 5), (5, 1), "float32"), ((3,), (1,), "float32")]
    else:
        assert fast == []


def test_a_numpy_scalar_before_the_first_tensor_is_a_number(fake: MemoryDriver, torch: Any) -> None:
    """Outputs come like the first argument that is not a number; a NumPy float scalar is a
    number to the call key (``float`` subclass), so it is one here too (two devices: no fast
    allocator, outputs made from that argument)."""
    np = pytest.importorskip("numpy")
    torch.cuda = types.SimpleNamespace(device_count=lambda: 2)
    fake.expect_params = [ParamKind.PTR] * 2
    f = pf.fuse(lambda s, y: y * s)
    out = f(np.float64(2.0), tensor(torch, (4, 8)))
    assert out.shape == (4, 8)
