"""The scalar math expansions of :mod:`pyfuse.backend_ptx.emit_math`, run on NumPy arrays with
the PTX instructions' semantics (:mod:`numpy_float_ops`), against float64 (or exact) math."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from numpy_float_ops import NumpyF32

from pyfuse.backend_ptx import emit_math, emit_math64
from pyfuse.ir.exprs import ACTIVATION_TAIL_FLUSH

Array = npt.NDArray[Any]


# ---- math expansions in NumPy float32 emulation ---------------------------------------------

F = np.float32


_erf = np.frompyfunc(math.erf, 1, 1)
_erfc = np.frompyfunc(math.erfc, 1, 1)


def _reference(name: str, x: Array) -> Array:
    exact = _exact(name, x)
    if name in ("silu", "gelu", "gelu_tanh"):
        # Their tails are zero below this (the reference interpreter's rule too).
        return np.where(np.abs(exact) < ACTIVATION_TAIL_FLUSH, 0.0, exact)
    return exact


def _exact(name: str, x: Array) -> Array:
    v = x.astype(np.float64)
    if name == "exp":
        return np.exp(v)
    if name == "log":
        return np.log(v)
    if name == "tanh":
        return np.tanh(v)
    if name == "sigmoid":
        return 1 / (1 + np.exp(-v))
    if name == "silu":
        return v / (1 + np.exp(-v))
    if name == "gelu":
        return 0.5 * v * _erfc(-v / math.sqrt(2)).astype(np.float64)
    if name in ("sin", "cos"):
        return np.sin(v) if name == "sin" else np.cos(v)
    if name == "gelu_tanh":
        u = math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)
        return v / (1 + np.exp(-2 * u))  # the cancellation-free form of 0.5 v (1 + tanh u)
    return np.asarray(_erf(v), dtype=np.float64)


_GRID = np.linspace(-1, 1, 20001)
_HUGE = np.concatenate([np.geomspace(2.0**22, 3.4e38, 20001), -np.geomspace(2.0**22, 3e38, 997)])
INPUTS = {
    "exp": np.concatenate([np.linspace(-87, 88.7, 100001), 20 * _GRID]),
    "log": np.concatenate([np.exp(np.linspace(-87, 88, 100001)), 0.45 + 1.6 * (_GRID + 1)]),
    "tanh": np.concatenate([12 * _GRID, _GRID, np.exp(np.linspace(-30, 0, 1001))]),
    "sigmoid": 87 * _GRID,
    "silu": 87 * _GRID,
    "gelu": np.concatenate([12 * _GRID, 2 * _GRID]),
    "gelu_tanh": 12 * _GRID,
    # Far past 100 pi, where sin.approx has no error bound: positions times frequencies of
    # rotary embeddings reach 1e5 and more.
    # Past 2**22 the exact reduction, up to the largest f32 (sin(3e10) was 0: GPU fuzzer, 443).
    "sin": np.concatenate([7 * _GRID, 1e4 * _GRID, 4e6 * _GRID, _HUGE]),
    "cos": np.concatenate([7 * _GRID, 1e4 * _GRID, 4e6 * _GRID, _HUGE]),
}
# (relative, absolute) tolerance of each f32 expansion against float64 math.
TOLERANCE = {
    "exp": (4e-7, 2e-38), "log": (3.5e-7, 2e-7), "tanh": (4e-7, 1e-30),
    "sigmoid": (5e-7, 2e-38), "silu": (5e-7, 2e-38), "gelu": (1e-6, 1e-30),
    "gelu_tanh": (1.5e-6, 1e-12), "sin": (2e-7, 1.2e-7), "cos": (2e-7, 1.2e-7),
}  # fmt: skip


@pytest.mark.parametrize("bias", [-1.0, 0.0, 1.0])
@pytest.mark.parametrize("name", sorted(INPUTS))
def test_f32_expansion_accuracy(name: str, bias: float) -> None:
    x = INPUTS[name].astype(F)
    function = getattr(emit_math, name)
    got = function(NumpyF32(bias), x).astype(np.float64)
    want = _reference(name, x)
    relative, absolute = TOLERANCE[name]
    excess = np.abs(got - want) - (relative * np.abs(want) + absolute)
    worst = int(np.argmax(excess))
    assert excess[worst] <= 0, f"{name}({x[worst]!r}) = {got[worst]!r}, want {want[worst]!r}"


def test_erf_absolute_error_is_about_1e_7() -> None:
    z = np.concatenate([np.linspace(-12, 12, 200001), np.linspace(-1, 1, 20001)]).astype(F)
    error = np.abs(emit_math.erf(NumpyF32(), z).astype(np.float64) - _reference("erf", z))
    assert error.max() < 1.3e-7  # two f32 ulps at 0.8, where erf's slope is steepest in f32


def test_f32_expansions_special_values() -> None:
    x = np.array([-np.inf, np.inf, np.nan, 0.0, -0.0, 1e-40, -200.0, 200.0], F)
    ops = NumpyF32()
    with np.errstate(all="ignore"):
        for name in INPUTS:
            got = getattr(emit_math, name)(ops, x)
            want = _reference(name, x.astype(np.float64)).astype(F)
            if name == "log":  # lg2 flushes no subnormal input; NumPy agrees
                want[5] = F(math.log(1e-40))
            close = np.isclose(got, want, rtol=1e-5, atol=1e-30, equal_nan=True)
            assert close.all(), (name, x[~close], got[~close], want[~close])
            if name in ("tanh", "sin"):
                # An odd function keeps the sign of a zero: 1 / tanh(-0) is -inf (CPU fuzzer,
                # seed 1414: max(1 / tanh(round(x * 4)), 0) gave inf where torch gives 0).
                zeros = x == 0
                assert (np.signbit(got[zeros]) == np.signbit(x[zeros])).all(), (name, got)


def test_log_keeps_relative_accuracy_next_to_one() -> None:
    """lg2.approx's error is absolute near 1, where log is small: the series keeps it
    relative (the GPU fuzzer, seed 257, divided by a log of nearly 1)."""
    x = 1.0 + np.concatenate([np.linspace(-0.49, 0.49, 100001), np.geomspace(1e-7, 1e-2, 1001)])
    x = x.astype(F)
    want = np.log(x.astype(np.float64))
    got = emit_math.log(NumpyF32(), x).astype(np.float64)
    assert (np.abs(got - want) <= 4e-7 * np.abs(want) + 1e-45).all()


def test_pow_accuracy_and_signs() -> None:
    ops = NumpyF32()
    rng = np.random.default_rng(0)
    x = rng.uniform(0.01, 20, 20000).astype(F)
    y = rng.uniform(-6, 6, 20000).astype(F)
    got = emit_math.pow_(ops, x, y).astype(np.float64)
    want = np.power(x.astype(np.float64), y.astype(np.float64))
    limit = 1.7e-7 * np.abs(y * np.log2(x)) + 4e-7
    assert np.all(np.abs(got - want) <= limit * np.abs(want))
    specials_x = np.array([-2.0, -2.0, -2.0, 0.0, 0.0, 5.0, 1.0, np.nan, -8.0], F)
    specials_y = np.array([3.0, 2.0, 0.5, 2.0, -1.0, 0.0, np.nan, 0.0, 1 / 3], F)
    with np.errstate(all="ignore"):
        got = emit_math.pow_(ops, specials_x, specials_y)
    want = np.array([-8.0, 4.0, np.nan, 0.0, np.inf, 1.0, 1.0, 1.0, np.nan], F)
    assert np.allclose(got, want, rtol=1e-6, equal_nan=True), got


def test_pow_special_values_follow_c() -> None:
    """Every pairing of special bases and exponents gives C's pow (np.power), signs of zero
    and infinity included; (-inf)**3.25 was NaN (GPU fuzzer, seed 389)."""
    bases = [-np.inf, -2.0, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0, np.inf, np.nan]
    exponents = [-np.inf, -3.0, -2.0, -3.25, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0, 3.25, np.inf, np.nan]
    x = np.array([b for b in bases for _ in exponents], F)
    y = np.array([e for _ in bases for e in exponents], F)
    with np.errstate(all="ignore"):
        got = emit_math.pow_(NumpyF32(), x, y)
        want = np.power(x, y)
    same = (got == want) & (np.signbit(got) == np.signbit(want))
    close = np.isclose(got, want, rtol=1e-6) | (np.isnan(got) & np.isnan(want)) | same
    wrong = ~close
    assert close.all(), list(zip(x[wrong], y[wrong], got[wrong], want[wrong], strict=True))
    zeros = want == 0
    assert (np.signbit(got[zeros]) == np.signbit(want[zeros])).all()


def test_two_over_pi_chunks_are_its_bits() -> None:
    chunks = emit_math.TWO_OVER_PI_CHUNKS
    bits = 24 * len(chunks)
    total = sum(Fraction(c) for c in chunks)
    assert total == Fraction(emit_math64.two_over_pi_scaled(bits), 1 << bits)
    for chunk in chunks:  # 24 significant bits at most: x * chunk is exact in f64
        mantissa, _ = math.frexp(chunk)
        assert (mantissa * 2**24).is_integer()


def test_sine_of_huge_f32_arguments_is_the_sine_of_that_float() -> None:
    """Arguments whose multiples of pi/2 lie closest (the worst cases of f32 reduction) keep
    their accuracy: r must come out to 24 bits though x mod pi/2 cancels 30 and more."""
    rng = np.random.default_rng(5)
    x = np.concatenate([
        (rng.uniform(1, 2, 50000) * 2.0 ** rng.integers(22, 128, 50000)).astype(F),
        np.array([16367173 * 2.0**72, 13176795.0, 1.4e38, -2.0**90], F),
    ])  # fmt: skip
    for name, exact in (("sin", np.sin), ("cos", np.cos)):
        got = getattr(emit_math, name)(NumpyF32(), x).astype(np.float64)
        want = exact(x.astype(np.float64))
        error = np.abs(got - want)
        assert (error <= 2e-7 * np.abs(want) + 1.2e-7).all(), x[np.argmax(error)]
