"""The float division-like ops' PTX (``backend_ptx/emit_divide.py``) run on the PTX simulator
against the reference's (torch's) results, bit for bit and signed zeros included, on
operands whose quotients span the whole f32 range: the exact f64 reduction must hold at
every step, with the scale taken from the exponents. (GPU fuzzer, seed 561: a zero
remainder given the divisor's sign divided a number into the other infinity.)"""

from __future__ import annotations

import numpy as np
import pytest

import pyfuse as pf
from pyfuse.backend_ptx.emit import emit_ptx
from pyfuse.ir import reference_math
from pyfuse.ir.target import HOPPER
from pyfuse.passes import pipeline
from pyfuse.testing.simulator import run_on_simulator

# The reference interpreter's (torch's): NumPy's but for a zero remainder's sign.
OPS = {"fmod": np.fmod, "remainder": reference_math.remainder, "floor_divide": np.floor_divide}

# NaN payloads from random bits warn as they are cast; they are meant.
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered in cast")


def _hard_f32_pairs(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random signs, mantissas and exponents over the whole f32 range (denormals included),
    with zeros, infinities and NaNs mixed in."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**32, count * 2, dtype=np.uint64).astype(np.uint32)
    values = bits.view(np.float32).copy()
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3.4e38, 1.0], np.float32)
    picks = rng.random(count * 2) < 0.1
    values[picks] = rng.choice(special, int(picks.sum()))
    return values[:count], values[count:]


def _run(op: str, x: np.ndarray, y: np.ndarray, dtype: pf.DType) -> np.ndarray:
    specs = [pf.spec(x.shape, dtype), pf.spec(y.shape, dtype)]
    fusion = pf.fuse(lambda a, b: getattr(pf, op)(a, b)).trace(*specs)
    result = pipeline.run(
        fusion, HOPPER, None, emit=lambda st: pipeline.Emitted(emit_ptx(st.kernel_ir, HOPPER))
    )
    (got,) = run_on_simulator(result, [x, y], [(x.shape, dtype)], as_ptx=True)
    return got


@pytest.mark.parametrize("op", sorted(OPS))
def test_float32_division_ops_match_the_reference_bit_for_bit(op: str) -> None:
    x, y = _hard_f32_pairs(512, seed=len(op))
    got = _run(op, x, y, pf.float32)
    with np.errstate(all="ignore"):
        want = OPS[op](x, y)
    np.testing.assert_array_equal(got, want)
    # Signed zeros too: assert_array_equal counts -0.0 equal to 0.0.
    both_zero = (got == 0) & (want == 0)
    np.testing.assert_array_equal(np.signbit(got[both_zero]), np.signbit(want[both_zero]))


def test_bfloat16_remainder_across_exponents() -> None:
    """The fuzzer's seed 549 class (bf16 operands, f32 compute): far exponents apart."""
    import ml_dtypes

    x, y = _hard_f32_pairs(256, seed=549)
    x, y = x.astype(ml_dtypes.bfloat16), y.astype(ml_dtypes.bfloat16)
    got = _run("remainder", x, y, pf.bfloat16)
    with np.errstate(all="ignore"):
        want = reference_math.remainder(x.astype(np.float32), y.astype(np.float32))
    want = want.astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


@pytest.mark.parametrize("op", sorted(OPS))
def test_float64_division_ops_match_the_reference(op: str) -> None:
    """f64 operands keep the quotient-derived scale (denormal divisors need it): quotients up
    to 2**306 are exact."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal(256) * np.exp2(rng.integers(-140, 140, 256).astype(np.float64))
    y = rng.standard_normal(256) * np.exp2(rng.integers(-140, 140, 256).astype(np.float64))
    y[:4] = [5e-324, -1e-310, 0.0, np.inf]
    got = _run(op, x, y, pf.float64)
    with np.errstate(all="ignore"):
        want = OPS[op](x, y)
    close = np.isclose(got, want, rtol=0, atol=0, equal_nan=True)
    assert close[4:].all(), (x[4:][~close[4:]], y[4:][~close[4:]])


def test_a_quotient_by_a_zero_remainder_has_the_reference_sign() -> None:
    """GPU fuzzer, seed 561, replayed on the simulator: ``x / cat([i8 % f16, ...])`` where
    the remainder is an exact zero; a zero of the divisor's sign made the quotient the other
    infinity."""
    x = np.array([-4.0, 4.0, -3.0, 3.0, 6.0, -6.0], np.float16)
    y = np.array([2.0, -2.0, 1.5, -1.5, -3.0, 3.0], np.float16)
    got = _run("remainder", x, y, pf.float16)
    want = reference_math.remainder(x, y)
    assert np.all(got == 0) and np.array_equal(np.signbit(got), np.signbit(want))
    assert np.array_equal(np.signbit(got), np.signbit(x))


@pytest.mark.parametrize("error", [2.0**-14, -(2.0**-14)])
def test_float32_fmod_is_exact_with_a_crude_reciprocal(
    monkeypatch: pytest.MonkeyPatch, error: float
) -> None:
    """f32 operands take their quotients from ``rcp.approx.ftz.f64`` and Newton steps, not
    a division (whose IEEE slow path ptxas compiles as a subroutine call: 768 of them in a
    persistent matmul epilogue took ptxas 115 s). The SFU's precision is not specified:
    with every approximate reciprocal off by 2**-14 either way, the results stay exact."""
    from pyfuse.testing.ptx_sim import alu

    exact = alu._SPECIAL["rcp"]
    monkeypatch.setitem(alu._SPECIAL, "rcp", lambda v: exact(v) * (1.0 + error))
    x, y = _hard_f32_pairs(512, seed=3)
    got = _run("fmod", x, y, pf.float32)
    with np.errstate(all="ignore"):
        want = np.fmod(x, y)
    np.testing.assert_array_equal(got, want)


def test_a_float32_fmod_divides_nothing_in_ieee_mode() -> None:
    """No ``div.rn.f64`` in an f32 fmod: its slow path is a call ptxas compiles slowly
    inside a persistent loop (the GPU fuzzer's seed 701 case 216 took 115 s to assemble)."""
    fusion = pf.fuse(lambda a, b: pf.fmod(a, b)).trace(
        pf.spec((64,), pf.float32), pf.spec((64,), pf.float32)
    )
    result = pipeline.run(
        fusion, HOPPER, None, emit=lambda st: pipeline.Emitted(emit_ptx(st.kernel_ir, HOPPER))
    )
    (stages,) = result.kernels
    assert stages.emitted is not None
    assert "div.rn.f64" not in stages.emitted.ptx
    assert "rcp.approx.ftz.f64" in stages.emitted.ptx


@pytest.mark.parametrize("op", ["floor_divide", "remainder"])
def test_int64_division_at_the_extremes(op: str) -> None:
    """Every pair of edge values, INT64_MIN included (the simulator's ``div.s64`` took
    ``|INT64_MIN|`` as negative and made ``-1 // INT64_MIN`` -2: CPU fuzzer, seed 1422). A
    zero divisor gives 0; ``INT64_MIN // -1`` wraps to INT64_MIN, as torch's does."""
    low, high = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)
    edges = [low, low + 1, -(2**62), -7, -2, -1, 0, 1, 2, 7, 2**62, high - 1, high]
    pairs = [(a, b) for a in edges for b in edges]
    x = np.array([a for a, _ in pairs], np.int64)
    y = np.array([b for _, b in pairs], np.int64)
    got = _run(op, x, y, pf.int64)

    def expected(a: int, b: int) -> int:
        if b == 0:
            return 0
        value = a // b if op == "floor_divide" else a % b
        return (value + 2**63) % 2**64 - 2**63  # two's complement wrap

    np.testing.assert_array_equal(got, np.array([expected(a, b) for a, b in pairs], np.int64))
