"""The inline f32 division (``emit_math64.divide_f32``): correctly rounded for every f32 pair,
zeros, subnormals, infinities and NaNs included, even from a reciprocal seed far worse than
the hardware's; and no subroutine call in the kernels that use it."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from check_utils import require_ptxas
from numpy_float_ops import CrudeRcpF64, NumpyF32

import pyfuse as pf
from pyfuse.backend_ptx import emit_math64
from pyfuse.backend_ptx.ptxas import assemble

Array = npt.NDArray[Any]
F = np.float32


class _CrudeSeedF32(NumpyF32):
    def __init__(self, bits: int, bias: float) -> None:
        super().__init__()
        self.seed = CrudeRcpF64(bits, bias)

    def widened(self) -> CrudeRcpF64:  # type: ignore[override]
        return self.seed


def _random_bits(rng: np.random.Generator, n: int) -> Array:
    return rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(F)


def _near_midpoints(rng: np.random.Generator, n: int) -> tuple[Array, Array]:
    """Pairs whose quotient lies next to the midpoint of two f32 values."""
    b = rng.uniform(1, 2, n).astype(F) * F(2.0) ** rng.integers(-60, 60, n).astype(F)
    odd = (rng.integers(2**24, 2**25, n) | 1).astype(np.float64)
    midpoint = np.ldexp(odd, rng.integers(-80, 40, n) - 24)
    return (midpoint * b.astype(np.float64)).astype(F), b


def _same(got: Array, want: Array) -> Array:
    return (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))


@pytest.mark.parametrize(("bits", "bias"), [(13, 1.0), (13, -1.0), (30, 1.0)])
def test_divide_f32_is_correctly_rounded(bits: int, bias: float) -> None:
    rng = np.random.default_rng(bits + int(bias))
    a, b = _random_bits(rng, 200_000), _random_bits(rng, 200_000)
    near_a, near_b = _near_midpoints(rng, 100_000)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.2e-38, 3.4e38,
                         1.0, -3.0, 2.0**-149, 2.0**127], F)  # fmt: skip
    sa, sb = (v.ravel() for v in np.meshgrid(specials, specials))
    a, b = np.concatenate([a, near_a, sa]), np.concatenate([b, near_b, sb])
    with np.errstate(all="ignore"):
        got = emit_math64.divide_f32(_CrudeSeedF32(bits, bias), a, b)
        want = np.divide(a, b, dtype=F)
    bad = ~_same(np.asarray(got, F), want)
    assert not bad.any(), list(zip(a[bad][:5], b[bad][:5], np.asarray(got)[bad][:5], strict=True))


def test_division_by_a_constant_takes_its_reciprocal_as_data() -> None:
    rng = np.random.default_rng(5)
    a = _random_bits(rng, 100_000)
    for divisor in (3.0, -7.0, 1e-40, 3e38, 0.1):
        with np.errstate(all="ignore"):
            got = emit_math64.divide_f32(NumpyF32(), a, float(F(divisor)))
            want = np.divide(a, F(divisor), dtype=F)
        assert _same(np.asarray(got, F), want).all(), divisor


def test_a_division_heavy_persistent_row_assembles_without_a_call_or_spill() -> None:
    """CPU fuzzer, seed 473: ``layer_norm(softplus(x), x)`` over one row of 14,442 elements
    at 512 threads spilled in the slow path of ``div.rn.f32``; inline, it takes 84 registers."""
    require_ptxas()
    fused = pf.fuse(lambda v0: pf.layer_norm(pf.softplus(v0), v0))
    (kernel,) = fused.compile(pf.spec((83, 174), pf.float32)).kernels
    assert "div.rn.f32" not in kernel.ptx and "rcp.rn.f32" not in kernel.ptx
    assert not assemble(kernel.ptx).problems()
