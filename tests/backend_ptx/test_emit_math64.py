"""The f64 expansions of :mod:`pyfuse.backend_ptx.emit_math64` on NumPy float64 arrays with the
PTX instructions' semantics, against float64 libm (NumPy, ``math``) and C's special values."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from numpy_float_ops import NumpyF64

from pyfuse.backend_ptx import emit_math64
from pyfuse.ir.exprs import ACTIVATION_TAIL_FLUSH

Array = npt.NDArray[Any]
ULP = 2.0**-52
_erf = np.frompyfunc(math.erf, 1, 1)
_erfc = np.frompyfunc(math.erfc, 1, 1)


def _exact(name: str, v: Array) -> Array:
    with np.errstate(all="ignore"):
        if name in ("exp", "log", "tanh", "sin", "cos"):
            return np.asarray(getattr(np, name)(v))
        if name == "sigmoid":
            return np.where(v < 0, np.exp(v) / (1 + np.exp(v)), 1 / (1 + np.exp(-v)))
        if name == "silu":
            return v * _exact("sigmoid", v)
        if name == "erf":
            return np.asarray(_erf(v), dtype=np.float64)
        if name == "gelu":
            return 0.5 * v * np.asarray(_erfc(-v / math.sqrt(2)), dtype=np.float64)
        u = math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)
        return v / (1 + np.exp(-2 * u))  # gelu_tanh


def _reference(name: str, v: Array) -> Array:
    exact = _exact(name, v)
    if name in ("silu", "gelu", "gelu_tanh"):
        return np.where(np.abs(exact) < ACTIVATION_TAIL_FLUSH, np.copysign(0.0, v), exact)
    return exact


_GRID = np.linspace(-1, 1, 4001)
INPUTS = {
    "exp": np.concatenate([np.linspace(-745, 709.7, 20001), 0.5 * _GRID]),
    "log": np.concatenate([np.geomspace(5e-324, 1.7e308, 20001), 1 + 0.5 * _GRID]),
    "tanh": np.concatenate([25 * _GRID, 0.6 * _GRID, np.geomspace(1e-300, 1, 1001)]),
    "sigmoid": 740 * _GRID,
    "silu": 740 * _GRID,
    "gelu": np.concatenate([40 * _GRID, 3 * _GRID]),
    "gelu_tanh": np.concatenate([40 * _GRID, 3 * _GRID]),
    "erf": np.concatenate([6 * _GRID, 1.6 * _GRID, np.geomspace(1e-300, 1, 501)]),
    "sin": np.concatenate([7 * _GRID, 1e5 * _GRID, 2e6 * _GRID, np.geomspace(1e6, 1.7e308, 4001)]),
    "cos": np.concatenate([7 * _GRID, 1e5 * _GRID, 2e6 * _GRID, -np.geomspace(1e6, 1.7e308, 4001)]),
}
# (ulps relative, absolute) of each expansion against float64 libm.
TOLERANCE = {
    "exp": (2, 1e-323), "log": (2, 0.0), "tanh": (4, 0.0), "sigmoid": (4, 1e-323),
    "silu": (4, 1e-323), "gelu": (64, 1e-300), "gelu_tanh": (16, 1e-300), "erf": (4, 1e-300),
    "sin": (3, 1e-300), "cos": (3, 1e-300),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_f64_expansion_accuracy(name: str) -> None:
    x = INPUTS[name]
    with np.errstate(all="ignore"):
        got = emit_math64.EXPANSIONS[name](NumpyF64(), x)
    want = _reference(name, x)
    ulps, absolute = TOLERANCE[name]
    if name in ("gelu", "gelu_tanh"):
        # The references round the argument of erfc or exp first, which moves them by about
        # the argument's square in ulps (the kernels take it exactly where it matters).
        ulps = ulps + 2 * x**2
    excess = np.abs(got - want) - (ulps * ULP * np.abs(want) + absolute)
    worst = int(np.argmax(excess))
    assert excess[worst] <= 0, f"{name}({x[worst]!r}) = {got[worst]!r}, want {want[worst]!r}"


def test_f64_expansions_special_values() -> None:
    x = np.array([-np.inf, np.inf, np.nan, 0.0, -0.0, 5e-324, -1e-310, -800.0, 800.0])
    with np.errstate(all="ignore"):
        for name, expansion in emit_math64.EXPANSIONS.items():
            got = expansion(NumpyF64(), x)
            want = _reference(name, x)
            close = np.isclose(got, want, rtol=1e-15, atol=0, equal_nan=True)
            assert close.all(), (name, x[~close], got[~close], want[~close])
            zeros = want == 0
            assert (np.signbit(got[zeros]) == np.signbit(want[zeros])).all(), name


def test_f64_pow_accuracy_and_c_special_values() -> None:
    rng = np.random.default_rng(1)
    x, y = rng.uniform(0.01, 20, 5000), rng.uniform(-30, 30, 5000)
    got = emit_math64.pow_(NumpyF64(), x, y)
    want = np.power(x, y)
    limit = (4e-16 * np.abs(y * np.log(x)) + 4 * ULP) * np.abs(want)
    assert (np.abs(got - want) <= limit).all()
    bases = [-np.inf, -2.0, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0, np.inf, np.nan]
    exponents = [-np.inf, -3.0, -2.0, -3.25, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0, 3.25, np.inf, np.nan]
    bx = np.array([b for b in bases for _ in exponents])
    ey = np.array([e for _ in bases for e in exponents])
    with np.errstate(all="ignore"):
        got, want = emit_math64.pow_(NumpyF64(), bx, ey), np.power(bx, ey)
    close = np.isclose(got, want, rtol=1e-15, equal_nan=True)
    assert close.all(), list(zip(bx[~close], ey[~close], got[~close], want[~close], strict=True))
    zeros = want == 0
    assert (np.signbit(got[zeros]) == np.signbit(want[zeros])).all()


def test_constants_are_their_values() -> None:
    from fractions import Fraction

    bits = 26 * emit_math64.TWO_OVER_PI_CHUNK_COUNT
    two_over_pi = Fraction(emit_math64.two_over_pi_scaled(bits), 1 << bits)
    chunks = sum(Fraction(c) for c in emit_math64.TWO_OVER_PI_CHUNKS)
    assert chunks / 2**emit_math64.CHUNK_SCALE == two_over_pi
    for chunk in emit_math64.TWO_OVER_PI_CHUNKS:  # normal, 26 bits at most
        mantissa, exponent = math.frexp(chunk)
        assert exponent > -1021 and (mantissa * 2**26).is_integer()
    parts = sum(Fraction(p) for p in emit_math64.PIO2_PARTS)
    assert abs(parts - 1 / two_over_pi) < Fraction(1, 2**160)
    ln2 = Fraction(emit_math64.LN2_HI) + Fraction(emit_math64.LN2_LO)
    true_ln2 = Fraction(math.log(2)) + Fraction(2.3190468138462996e-17)  # to about 1e-33
    assert abs(ln2 - true_ln2) < Fraction(1, 2**84)  # LN2_LO's own rounding
