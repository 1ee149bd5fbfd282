"""Residuals loaded by TMA into the staging buffers (passes/matmul_residuals) on the GPU:
``linear(x, w, b) + r`` under each kernel kind, ragged and whole, against torch in float32 on
fresh random data, twice per case (a moving error is a race), and the same values as the
global-load path. Marked ``gpu``: skipped without one."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import pyfuse as pf

pytestmark = pytest.mark.gpu

PARAMS = {
    "default": None,
    "128x256": pf.MatmulParams(tile_m=128, tile_n=256),
    "256x128": pf.MatmulParams(tile_m=256, tile_n=128),
    "pingpong": pf.MatmulParams(pingpong=True, tma_residuals=True),
    "persistent_192": pf.MatmulParams(persistent=True, tile_m=128, tile_n=192),
    "cluster2x1": pf.MatmulParams(persistent=True, cluster_m=2),
}
SHAPES = [(504, 136, 1024), (1000, 1000, 256), (2048, 4096, 512), (64, 14336, 512)]


@pytest.mark.parametrize("name", sorted(PARAMS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_linear_bias_residual(name: str, shape: tuple[int, int, int]) -> None:
    torch = pytest.importorskip("torch")
    m, n, k = shape
    params = PARAMS[name]
    fused = pf.fuse(lambda x, w, b, r: pf.linear(x, w, b) + r, matmul=params)
    without = dataclasses.replace(params or pf.MatmulParams(), tma_residuals=False)
    global_loads = pf.fuse(lambda x, w, b, r: pf.linear(x, w, b) + r, matmul=without)
    for _ in range(2):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        r = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        got = fused(x, w, b, r)
        want = torch.nn.functional.linear(x.float(), w.float(), b.float()) + r.float()
        _close(torch, got, want)
        assert torch.equal(got, global_loads(x, w, b, r)), "the TMA and global loads differ"


def _close(torch: Any, got: Any, want: Any) -> None:
    assert torch.isfinite(got.float()).all()
    error = (got.float() - want).abs().max().item()
    assert error <= 2e-2 * (want.abs().max().item() + 1), error
