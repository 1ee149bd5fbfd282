"""Guards on captured Python values: a closure cell, global, default or attribute the traced
function reads is part of every cache key, so a change retraces and a change back reuses.

Calls launch on the fake driver of ``tests/backend_ptx`` (with host-backed memory for the
outputs), as in ``test_runtime.py``; the PTX emitter is stubbed there, and real here only
where a test reads the PTX.
"""

from __future__ import annotations

import ctypes
import math
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backend_ptx"))
from ptx_fake_driver import CUresult, FakeDriver

import pyfuse as pf
from pyfuse import knobs
from pyfuse.backend_ptx import driver
from pyfuse.ir.target import HOPPER
from pyfuse.runtime import calls, variant_cache
from pyfuse.runtime import compile as compile_module
from pyfuse.runtime.guards import guard_for

X = pf.spec((4,), pf.float32)
HOST = np.arange(4, dtype=np.float32)
SCALE = 2.0
USE_SUM = False
LIMIT = 1.0


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path) -> Iterator[None]:
    with knobs.overrides(cache_dir=tmp_path / "cache"):
        yield


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The math IR of every full compile (each a trace that missed every cache)."""
    seen: list[str] = []
    real = compile_module.compile_fusion

    def counting(*args: Any, **kwargs: Any) -> Any:
        compiled = real(*args, **kwargs)
        seen.append(compiled.math_ir)
        return compiled

    monkeypatch.setattr(compile_module, "compile_fusion", counting)
    return seen


class MemoryDriver(FakeDriver):
    """The fake driver plus device memory backed by host buffers, for output allocation."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.buffers: dict[int, Any] = {}

    def cuMemAlloc(self, nbytes: int) -> tuple[Any, ...]:
        buffer = ctypes.create_string_buffer(nbytes + 256)
        address = (ctypes.addressof(buffer) + 255) // 256 * 256
        self.buffers[address] = buffer
        return (CUresult.CUDA_SUCCESS, address)

    def cuMemFree(self, pointer: Any) -> tuple[Any, ...]:
        self.buffers.pop(int(pointer))
        return (CUresult.CUDA_SUCCESS,)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[MemoryDriver]:
    def stub_emit(kernel: Any, target: Any) -> str:
        return f".entry {kernel.name}()\n"

    monkeypatch.setattr(compile_module, "emit_ptx", stub_emit)
    fake_driver = MemoryDriver()
    with driver.use_driver(fake_driver):
        yield fake_driver


class GpuArray:
    """A GPU array by ``__cuda_array_interface__`` (never read: the driver is fake)."""

    def __init__(self, shape: tuple[int, ...], pointer: int = 0x10000) -> None:
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": "<f4",
            "data": (pointer, False),
            "strides": None,
            "version": 3,
        }


def variant_of_call(f: pf.FusedFunction, *arrays: object) -> Any:
    """The compiled variant the call path ran for ``arrays`` (after the call)."""
    state = f.__dict__[calls._STATE]
    bound = state.bound[calls.call_key(arrays)[0]]
    (compiled,) = [c for c in state.compiled.values() if bound in c.runtime.bound.values()]
    return compiled


def scaler() -> tuple[pf.FusedFunction, Callable[[float], None]]:
    scale = 2.0
    f = pf.fuse(lambda x: x * scale)

    def set_scale(value: float) -> None:
        nonlocal scale
        scale = value

    return f, set_scale


# ---- what is guarded ------------------------------------------------------------------------


def test_closure_change_is_seen_by_compile_ptx_and_reference() -> None:
    f, set_scale = scaler()
    first = f.compile(X)
    two_ptx = f.ptx(X)
    np.testing.assert_array_equal(f.reference(HOST), 2 * HOST)
    set_scale(3.0)
    assert f.compile(X) is not first
    assert "mul(T0, 3.0)" in f.compile(X).math_ir
    assert f.ptx(X) != two_ptx
    np.testing.assert_array_equal(f.reference(HOST), 3 * HOST)


def test_global_change_retraces(monkeypatch: pytest.MonkeyPatch) -> None:
    f = pf.fuse(lambda x: x * SCALE)
    assert "mul(T0, 2.0)" in f.compile(X).math_ir
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 5.0)
    assert "mul(T0, 5.0)" in f.compile(X).math_ir
    np.testing.assert_array_equal(f.reference(HOST), 5 * HOST)


def test_default_and_keyword_default_changes_retrace() -> None:
    def shifted(x: Any, shift: float = 1.0, *, scale: float = 2.0) -> Any:
        return x * scale + shift

    f = pf.fuse(shifted)
    assert "2.0" in f.compile(X).math_ir and "1.0" in f.compile(X).math_ir
    shifted.__defaults__ = (7.0,)
    assert "7.0" in f.compile(X).math_ir
    assert shifted.__kwdefaults__ is not None
    shifted.__kwdefaults__["scale"] = 4.0
    assert "4.0" in f.compile(X).math_ir
    np.testing.assert_array_equal(f.reference(HOST), 4 * HOST + 7)


def test_attributes_of_captured_objects_and_of_self_are_guarded() -> None:
    class Norm:
        def __init__(self) -> None:
            self.eps = 0.5

        def forward(self, x: Any) -> Any:
            return x + self.eps

    norm = Norm()
    captured = pf.fuse(lambda x: x * norm.eps)
    method = pf.fuse(norm.forward)
    assert "0.5" in captured.compile(X).math_ir and "0.5" in method.compile(X).math_ir
    norm.eps = 0.25
    assert "0.25" in captured.compile(X).math_ir and "0.25" in method.compile(X).math_ir


def test_attributes_of_user_modules_are_guarded_not_those_of_libraries() -> None:
    config = types.ModuleType("pyfuse_test_user_config")
    config.limit = 1.0  # type: ignore[attr-defined]
    f = pf.fuse(lambda x: pf.minimum(x, config.limit) * math.pi * np.pi)
    guard = guard_for(f.fn)
    assert guard is not None and guard.describe() == ["attribute limit of config"]
    assert "1.0" in f.compile(X).math_ir
    config.limit = 9.0  # type: ignore[attr-defined]
    assert "9.0" in f.compile(X).math_ir


class Limits:
    upper = 1.0


def test_attributes_of_user_classes_are_guarded() -> None:
    f = pf.fuse(lambda x: pf.minimum(x, Limits.upper))
    assert "1.0" in f.compile(X).math_ir
    Limits.upper = 6.0
    try:
        assert "6.0" in f.compile(X).math_ir
    finally:
        Limits.upper = 1.0


def _helper(x: Any) -> Any:
    return pf.minimum(x, LIMIT)


def test_helpers_in_user_modules_are_followed(monkeypatch: pytest.MonkeyPatch) -> None:
    f = pf.fuse(lambda x: _helper(x) * 2)
    guard = guard_for(f.fn)
    assert guard is not None and guard.describe() == [f"global LIMIT of module {__name__}"]
    first = f.compile(X)
    monkeypatch.setattr(sys.modules[__name__], "LIMIT", 3.0)
    assert f.compile(X) is not first and "3.0" in f.compile(X).math_ir


def test_values_are_compared_by_type_and_bits() -> None:
    f, set_scale = scaler()
    variants = {}
    for value in (2.0, 2, True, -0.0, 0.0, float("nan")):
        set_scale(value)  # type: ignore[arg-type]
        variants[repr(value)] = f.compile(X)
    assert len({id(compiled) for compiled in variants.values()}) == len(variants)
    set_scale(float("nan"))  # another NaN object: the same bits
    assert f.compile(X) is variants["nan"]


def test_tuples_and_dtypes_are_guarded() -> None:
    dtype = pf.bfloat16
    shape = (2, 2)
    f = pf.fuse(lambda x: pf.reshape(x, shape).to(dtype))
    assert f.compile(X).fusion.outputs[0].dtype == pf.bfloat16
    dtype, shape = pf.float16, (4, 1)
    out = f.compile(X).fusion.outputs[0]
    assert out.dtype == pf.float16 and tuple(out.shape) == (4, 1)


def test_unguardable_captured_objects_are_left_alone() -> None:
    table = [1.0]
    helpers = {"scale": 2.0}

    def twice(x: Any) -> Any:
        return x * 2

    f = pf.fuse(lambda x: twice(pf.exp(x)) * table[0] * helpers["scale"] + float(np.ones(1)[0]))
    assert guard_for(f.fn) is None
    first = f.compile(X)
    table[0] = 3.0  # in place: not seen, as documented
    assert f.compile(X) is first
    # reference() always traces afresh: it reads the list as it is now.
    np.testing.assert_allclose(f.reference(HOST), np.exp(HOST) * 12 + 1, rtol=1e-6)


def test_a_function_reading_nothing_captured_checks_nothing(fake: MemoryDriver) -> None:
    f = pf.fuse(lambda x: pf.exp(x) * 2)
    f(GpuArray((4,)))
    assert f.__dict__[calls._STATE].check is None


# ---- the call path --------------------------------------------------------------------------


def test_call_retraces_on_change_and_reuses_on_flip_back(
    fake: MemoryDriver, compiles: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    f, set_scale = scaler()
    traces = []
    trace = f.trace

    def counting_trace(*args: object) -> Any:
        traces.append(args)
        return trace(*args)

    monkeypatch.setattr(f, "trace", counting_trace)
    x = GpuArray((4,))
    f(x)
    f(x)
    two = variant_of_call(f, x)
    assert len(compiles) == 1 and len(fake.launches) == 2
    set_scale(3.0)
    f(x)
    three = variant_of_call(f, x)
    assert three is not two and "mul(T0, 3.0)" in three.math_ir
    assert len(compiles) == 2 and len(traces) == 2
    set_scale(2.0)
    f(x)
    assert variant_of_call(f, x) is two
    set_scale(3.0)
    f(x)
    assert variant_of_call(f, x) is three
    # Flipping back and forth neither traces nor compiles again; compile() finds them too.
    assert len(traces) == 2 and len(compiles) == 2 and len(fake.launches) == 5
    assert f.compile(GpuArray((4,))) is three


def test_an_equal_new_object_does_not_recompile(fake: MemoryDriver, compiles: list[str]) -> None:
    f, set_scale = scaler()
    x = GpuArray((4,))
    f(x)
    set_scale(float("2.0"))  # another float object, the same value
    f(x)
    f(x)
    assert len(compiles) == 1
    state = f.__dict__[calls._STATE]
    assert state.check(state.captured)  # the new object is the one checked now


def test_a_value_deciding_shapes_retraces(
    fake: MemoryDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = pf.fuse(lambda x: pf.sum(x, -1) if USE_SUM else x * 2)
    x = GpuArray((4, 8))
    assert f(x).shape == (4, 8)
    monkeypatch.setattr(sys.modules[__name__], "USE_SUM", True)
    assert f(x).shape == (4,)
    monkeypatch.setattr(sys.modules[__name__], "USE_SUM", False)
    assert f(x).shape == (4, 8)


def test_unguardable_objects_do_not_break_calls(fake: MemoryDriver) -> None:
    weights = [2.0]
    f = pf.fuse(lambda x: pf.exp(x) * weights[0] + float(np.ones(1)[0]))
    x = GpuArray((4,))
    f(x)
    weights.append(3.0)
    f(x)
    assert len(fake.launches) == 2


# ---- the variant cache on disk --------------------------------------------------------------


def test_new_values_trace_to_new_variant_keys() -> None:
    f, set_scale = scaler()

    def key() -> str:
        found = variant_cache.variant_key(f.trace(X), HOPPER, None)
        assert found is not None
        # The content digest (the fusion and target): the name also needs the sources'
        # stamp, which a process learns only once some record is stored or found.
        return found.content

    two = key()
    set_scale(3.0)
    three = key()
    set_scale(2.0)
    assert three != two and key() == two
