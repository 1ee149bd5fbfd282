"""The cheaper expansions used when a sigmoid, silu or gelu_tanh result is rounded to 16 bits:
checked in float32 emulation with every approximate instruction at its worst documented error."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from numpy_float_ops import NumpyF32

from pyfuse.backend_ptx import emit_math


def _reference(name: str, x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        if name == "sigmoid":
            return 1.0 / (1.0 + np.exp(-x))
        if name == "silu":
            return x / (1.0 + np.exp(-x))
        u = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
        return x / (1.0 + np.exp(-2.0 * u))  # gelu_tanh without cancellation


@pytest.mark.parametrize("bias", [-1.0, 0.0, 1.0])
@pytest.mark.parametrize(
    ("name", "expansion"),
    [
        ("sigmoid", emit_math.sigmoid_16),
        ("silu", emit_math.silu_16),
        ("gelu_tanh", emit_math.gelu_tanh_16),
    ],
)
def test_sixteen_bit_forms_round_like_float64(name: str, expansion, bias: float) -> None:  # type: ignore[no-untyped-def]
    x = np.linspace(-30.0, 30.0, 120001).astype(np.float32)
    got = np.asarray(expansion(NumpyF32(bias), x)).astype(np.float64)
    want = _reference(name, x.astype(np.float64))
    significant = np.abs(want) > 1e-30
    relative = np.abs(got - want)[significant] / np.abs(want[significant])
    assert relative.max() < 2e-5
    # Rounded to bf16, a result lands one ulp away only near a rounding tie (under 0.2%).
    got16 = got[significant].astype(ml_dtypes.bfloat16)
    want16 = want[significant].astype(ml_dtypes.bfloat16)
    assert np.mean(got16 != want16) < 2e-3
    assert not np.isnan(got).any()
