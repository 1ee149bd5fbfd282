"""float64 on the GPU: every transcendental expansion (backend_ptx/emit_math64.py) against
NumPy's float64 libm on fresh inputs, special values and huge arguments included, and f32
sin/cos past 2**22 against torch."""

from __future__ import annotations

import math

import numpy as np
import pytest

import pyfuse as pf

_erf = np.frompyfunc(math.erf, 1, 1)


def _want(name: str, v: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        if name == "erf":
            return np.asarray(_erf(v), dtype=np.float64)
        if name == "sigmoid":
            return np.where(v < 0, np.exp(v) / (1 + np.exp(v)), 1 / (1 + np.exp(-v)))
        return np.asarray(getattr(np, name)(v))


def _inputs(rng: np.random.Generator) -> np.ndarray:
    return np.concatenate([
        rng.uniform(-30, 30, 3000), rng.uniform(-1, 1, 1000), np.geomspace(1e-300, 700, 500),
        -np.geomspace(1e6, 1e300, 300), np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324]),
    ])  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["exp", "log", "tanh", "sigmoid", "erf", "sin", "cos"])
def test_float64_math_matches_libm(name: str) -> None:
    import torch

    x = _inputs(np.random.default_rng(11))
    if name == "log":
        x = np.abs(x)
    fused = pf.fuse(getattr(pf, name))
    got = fused(torch.from_numpy(x).cuda()).cpu().numpy()
    want = _want(name, x)
    assert got.dtype == np.float64
    close = np.isclose(got, want, rtol=8 * 2.0**-52, atol=1e-300, equal_nan=True)
    assert close.all(), (x[~close][:5], got[~close][:5], want[~close][:5])


@pytest.mark.gpu
def test_float64_pow_gelu_and_promotion() -> None:
    import torch

    rng = np.random.default_rng(12)
    x, y = rng.uniform(0.1, 10, 4096), rng.uniform(-8, 8, 4096)
    tx, ty = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
    power, gelu, mixed = pf.fuse(lambda a, b: (a**b, pf.gelu(b), a + b.float()))(tx, ty)
    assert np.allclose(power.cpu().numpy(), x**y, rtol=1e-13, atol=0)
    # Not torch's gelu: its 1 + erf(x/sqrt2) cancels for x < 0 (0.8% off at x = -7.7).
    erfc = np.frompyfunc(math.erfc, 1, 1)
    want_gelu = 0.5 * y * np.asarray(erfc(-y / math.sqrt(2)), dtype=np.float64)
    assert np.allclose(gelu.cpu().numpy(), want_gelu, rtol=2e-14, atol=1e-300)
    assert mixed.dtype == torch.float64


@pytest.mark.gpu
def test_float32_sine_past_2p22_matches_torch() -> None:
    import torch

    rng = np.random.default_rng(13)
    x = (rng.uniform(1, 2, 100000) * 2.0 ** rng.integers(22, 127, 100000)).astype(np.float32)
    x[::2] *= -1
    tx = torch.from_numpy(x).cuda()
    sine, cosine = pf.fuse(lambda v: (pf.sin(v), pf.cos(v)))(tx)
    exact = x.astype(np.float64)
    assert np.abs(sine.cpu().numpy() - np.sin(exact)).max() < 3e-7
    assert np.abs(cosine.cpu().numpy() - np.cos(exact)).max() < 3e-7


@pytest.mark.gpu
def test_float32_division_and_reciprocal_are_bitwise_numpys() -> None:
    """f32 division (``div.rn.f32``), reciprocal and division by a constant give NumPy's
    correctly rounded quotient for every bit pattern: subnormals, zeros, infinities, NaNs."""
    import torch

    rng = np.random.default_rng(14)
    a = rng.integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32)
    b = rng.integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32)
    b[: 1 << 16] = rng.uniform(1, 2, 1 << 16).astype(np.float32)  # quotients of ordinary size
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    quotient, reciprocal, by_three = pf.fuse(lambda x, y: (x / y, pf.reciprocal(y), x / 3.0))(
        ta, tb
    )
    with np.errstate(all="ignore"):
        wants = (a / b, np.float32(1) / b, a / np.float32(3))
    for got, want in zip((quotient, reciprocal, by_three), wants, strict=True):
        got = got.cpu().numpy()
        same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
        assert same.all(), (a[~same][:4], b[~same][:4], got[~same][:4], want[~same][:4])
