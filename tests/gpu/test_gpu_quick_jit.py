"""The quick first JIT on the GPU: a new kernel's first launches run its -O0 build, which
gives the same bits as the optimized build swapped in later, also when the swap happens
inside a CUDA graph capture, and a graph captured on the quick build keeps replaying.

Every fusion gets a name no earlier run used, so its PTX is new to the driver's own JIT
cache as well as to pyfuse's (a cache hit would make both builds instant).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from check_utils import assert_close, to_host

import pyfuse as pf
from pyfuse import knobs
from pyfuse.frontend import cache

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path: Path) -> Iterator[None]:
    with knobs.overrides(cache_dir=tmp_path, quick_jit=True):
        yield
    cache.wait_for_jits()


def _fresh(fn: Callable[..., Any], what: str) -> Any:
    return pf.fuse(fn, name=f"quick_{what}_{uuid.uuid4().hex[:8]}")


def _sources(fused: Any) -> list[str]:
    (compiled,) = fused.__dict__["_pyfuse_runtime"].compiled.values()
    return list(compiled.runtime.loaded[0].sources)


# name, function, torch reference (float64), input shapes, dtype, tolerance (relative to max)
Case = tuple[str, Callable[..., Any], Callable[..., Any], list[tuple[int, ...]], str, float]
CASES: list[Case] = [
    (
        "gelu",
        lambda x, y, z: pf.gelu(x * y + z),
        lambda t, x, y, z: t.nn.functional.gelu(x * y + z),
        [(1000, 1000)] * 3,
        "bfloat16",
        2e-2,
    ),
    (
        "softmax",
        lambda x: pf.softmax(x, -1),
        lambda t, x: t.softmax(x, -1),
        [(513, 4099)],
        "bfloat16",
        1e-2,
    ),
    (
        "layer_norm",
        lambda x, w, b: pf.layer_norm(x, w, b),
        lambda t, x, w, b: t.nn.functional.layer_norm(x, (x.shape[-1],), w, b),
        [(777, 4096), (4096,), (4096,)],
        "bfloat16",
        2e-2,
    ),
    (
        "rms_norm",
        lambda x, w: pf.rms_norm(x, w),
        lambda t, x, w: x * t.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w,
        [(777, 4096), (4096,)],
        "bfloat16",
        2e-2,
    ),
    (
        "long_sum",
        lambda x: x.sum(-1),
        lambda t, x: x.sum(-1),
        [(7, 32769)],
        "float32",
        1e-5,
    ),
    (
        "tanh_exp",
        lambda x, y: pf.tanh(x) * pf.exp(y * 0.5) - x / (y * y + 1.0),
        lambda t, x, y: t.tanh(x) * t.exp(y * 0.5) - x / (y * y + 1.0),
        [(1001, 997), (1001, 997)],
        "float32",
        1e-5,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_the_quick_and_the_optimized_build_give_the_same_bits(torch: Any, case: Any) -> None:
    name, fn, reference, shapes, dtype, tolerance = case
    seed = int(torch.randint(0, 2**31 - 1, ()).item())
    torch.manual_seed(seed)
    inputs = [torch.randn(shape, device="cuda", dtype=getattr(torch, dtype)) for shape in shapes]
    fused = _fresh(fn, name)
    first = fused(*inputs)
    torch.cuda.synchronize()
    assert set(_sources(fused)) == {cache.FROM_QUICK_JIT}, name  # long_sum has two kernels
    cache.wait_for_jits()
    second = fused(*inputs)
    torch.cuda.synchronize()
    assert set(_sources(fused)) == {cache.FROM_JIT}, name
    # Identical bits: every floating-point operation in the PTX states its rounding.
    assert torch.equal(first, second), f"{name}: the builds differ (seed {seed})"
    want = reference(torch, *[x.double() for x in inputs])
    scale = max(1.0, want.abs().max().item())
    expected = to_host(torch, want.to(first.dtype))
    assert_close(
        to_host(torch, first), expected, atol=tolerance * scale, rtol=tolerance,
        what=f"{name} (seed {seed})",
    )  # fmt: skip


def test_the_swap_inside_a_graph_capture_leaves_the_capture_valid(torch: Any) -> None:
    x = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16)
    fused = _fresh(lambda a, b: pf.gelu(a * b) + a, "graph_swap")
    fused(x, y)  # the quick build
    torch.cuda.synchronize()
    assert _sources(fused) == [cache.FROM_QUICK_JIT]
    cache.wait_for_jits()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # global capture mode, torch's default
        out = fused(x, y)  # loads the optimized module while capturing
    assert _sources(fused) == [cache.FROM_JIT]
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    want = torch.nn.functional.gelu(x.double() * y.double()) + x.double()
    assert_close(
        to_host(torch, out), to_host(torch, want.to(torch.bfloat16)), atol=2e-2, rtol=2e-2,
        what="graph replay after the swap",
    )  # fmt: skip


def test_a_graph_captured_on_the_quick_build_replays_after_the_swap(torch: Any) -> None:
    x = torch.randn(2048, 2048, device="cuda", dtype=torch.float32)
    fused = _fresh(lambda a: pf.softmax(a * 2.0, -1), "graph_quick")
    fused(x)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fused(x)
    # Softmax's optimized JIT takes 50-100 ms; the first call and the capture take a few.
    assert _sources(fused) == [cache.FROM_QUICK_JIT]
    cache.wait_for_jits()
    fused(x)  # the swap: the graph keeps the quick module, which stays loaded
    assert _sources(fused) == [cache.FROM_JIT]
    for _ in range(2):
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        want = torch.softmax(x.double() * 2.0, -1)
        assert_close(
            to_host(torch, out), to_host(torch, want.float()), atol=1e-6, rtol=1e-5,
            what="graph captured on the quick build",
        )  # fmt: skip
