"""Stream-K matmuls on the GPU (``MatmulParams(stream_k=True)`` and the heuristic's choice):
every layout and pattern against a float32 torch reference on fresh random data, every case
run twice and compared bit for bit (the fixup adds the pieces in a fixed order, so a moving
result is a race), under a CUDA graph (the flags are zeroed by a captured memset), and on
another stream. Marked ``gpu``: skipped without one."""

from __future__ import annotations

from typing import Any

import pytest

import pyfuse as pf

pytestmark = pytest.mark.gpu

STREAM_K = {
    "stream_k": pf.MatmulParams(stream_k=True),
    "stream_k_2x1": pf.MatmulParams(stream_k=True, cluster_m=2),
    "stream_k_64x128": pf.MatmulParams(stream_k=True, tile_m=64, tile_n=128),
}
# (M, N, K): under a wave, a wave and a half, several waves with a ragged last one, tiny.
SHAPES = [(1000, 1000, 1000), (2304, 2560, 2048), (3888, 3224, 2768), (64, 64, 64)]


@pytest.fixture(scope="module")
def torch() -> Any:
    return pytest.importorskip("torch")


def _rand(torch: Any, *shape: int) -> Any:
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)


def _check(got: Any, want: Any, k: int) -> None:
    got32, want32 = got.float(), want.float()
    scale = want32.abs().max().item() + 1.0
    error = (got32 - want32).abs().max().item()
    assert got32.isfinite().all()
    assert error <= 1e-2 * scale + 1e-3 * k**0.5, f"max error {error} (scale {scale})"


def _twice(torch: Any, fused: Any, *args: Any) -> Any:
    first, second = fused(*args), fused(*args)
    assert torch.equal(first, second), "results moved between runs (a race in the fixup)"
    return first


@pytest.mark.parametrize("schedule", sorted(STREAM_K))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_every_layout(torch: Any, shape: tuple[int, int, int], schedule: str) -> None:
    m, n, k = shape
    a_km, a_mk = _rand(torch, k, m), _rand(torch, m, k)
    b_kn, b_nk = _rand(torch, k, n), _rand(torch, n, k)
    for fn, a, b in (
        (lambda a, b: a @ b.T, a_mk, b_nk),
        (lambda a, b: a @ b, a_mk, b_kn),
        (lambda a, b: a.T @ b.T, a_km, b_nk),
        (lambda a, b: a.T @ b, a_km, b_kn),
    ):
        fused = pf.fuse(fn, matmul=STREAM_K[schedule])
        _check(_twice(torch, fused, a, b), fn(a.float(), b.float()), k)


@pytest.mark.parametrize("schedule", sorted(STREAM_K))
def test_every_pattern(torch: Any, schedule: str) -> None:
    """A batch, LinearOp with a bias and gelu, multiply-sum and the gate/up pair (two
    accumulators summed through the workspace)."""
    params = STREAM_K[schedule]
    a, b = _rand(torch, 3, 1000, 1024), _rand(torch, 1024, 504)
    batched = pf.fuse(lambda a, b: a @ b, matmul=params)
    _check(_twice(torch, batched, a, b), a.float() @ b.float(), 1024)
    x, w, bias = _rand(torch, 3000, 1040), _rand(torch, 514, 1040), _rand(torch, 514)
    linear = pf.fuse(lambda x, w, b: pf.gelu(pf.linear(x, w, b), approximate="tanh"), matmul=params)
    want = torch.nn.functional.gelu(
        torch.nn.functional.linear(x.float(), w.float(), bias.float()), approximate="tanh"
    )
    got = _twice(torch, linear, x, w, bias)
    assert (got.float() - want).abs().max().item() <= 2e-2 * (want.abs().max().item() + 1)
    mul_sum = pf.fuse(lambda a, b: pf.sum(a.unsqueeze(1) * b.unsqueeze(0), -1), matmul=params)
    _check(_twice(torch, mul_sum, x, w), x.float() @ w.float().T, 1040)
    w1, w3 = _rand(torch, 1000, 1040) / 16, _rand(torch, 1000, 1040) / 16
    gate_up = pf.fuse(lambda x, w1, w3: pf.silu(x @ w1.T) * (x @ w3.T), matmul=params)
    want = torch.nn.functional.silu(x.float() @ w1.float().T) * (x.float() @ w3.float().T)
    got = _twice(torch, gate_up, x, w1, w3)
    assert (got.float() - want).abs().max().item() <= 2e-2 * (want.abs().max().item() + 1)


def test_a_ragged_last_wave_in_clusters(torch: Any) -> None:
    # 3888x3224 in 128x256 tiles and 2x1 clusters: 208 cluster tiles, 3.2 waves of 66.
    a, b = _rand(torch, 3888, 2768), _rand(torch, 2768, 3224)
    fused = pf.fuse(lambda a, b: a @ b, matmul=pf.MatmulParams(stream_k=True))
    got = _twice(torch, fused, a, b)
    _check(got, a.float() @ b.float(), 2768)
    (kernel,) = fused.compile(a, b).kernels
    assert kernel.params["stream_k"] and kernel.matmul_launch.zeroed is not None


def test_under_a_cuda_graph_and_on_another_stream(torch: Any) -> None:
    fused = pf.fuse(lambda a, b: a @ b.T, matmul=pf.MatmulParams(stream_k=True))
    a, b = _rand(torch, 2304, 2048), _rand(torch, 2560, 2048)
    want = fused(a, b)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        other = fused(a, b)
    stream.synchronize()
    assert torch.equal(other, want)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = fused(a, b)
    for _ in range(3):  # the captured memset zeroes the flags before every replay
        a.copy_(_rand(torch, 2304, 2048))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, fused(a, b))
