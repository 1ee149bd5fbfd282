"""The quick first JIT on the GPU: a new kernel's first launch runs its -O0 build, which
gives the same bits as the optimized build that every later launch waits for, also when
that wait and the swap happen inside a CUDA graph capture; a graph captured on the quick
build keeps replaying; launches right after a first call already run at full speed.

Every fusion gets a name no earlier run used, so its PTX is new to the driver's own JIT
cache as well as to pyfuse's (a cache hit would make both builds instant).
"""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from check_utils import assert_close, run_fresh_process, to_host

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
    second = fused(*inputs)  # waits for the optimized builds and swaps them in
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
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # global capture mode, torch's default
        # Waits for the optimized build (still running on the JIT thread, or just done) and
        # loads its module while capturing.
        out = fused(x, y)
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
    graph = torch.cuda.CUDAGraph()
    # Only a kernel's first launch runs its quick build, so the graph captures the first call
    # (relaxed: that call compiles and loads its module during the capture). Softmax's
    # optimized JIT takes 50-100 ms after its quick build, so the first call gets the quick one.
    with torch.cuda.graph(graph, capture_error_mode="relaxed"):
        out = fused(x)
    assert _sources(fused) == [cache.FROM_QUICK_JIT]
    fused(x)  # waits and swaps: the graph keeps the quick module, which stays loaded
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


# In a fresh process: a first call, then at once launches timed one by one with CUDA events
# (as a benchmark right after a first call would), then again once everything is built. The
# launches right after the first call must run the optimized build: the -O0 one ran
# softmax over 16384x4096 bf16 at 0.19 TB/s and layer_norm at 0.08 TB/s, the optimized one at
# 3.26 and 3.78.
_RIGHT_AFTER_A_FIRST_CALL = textwrap.dedent(
    """
    import json, statistics, sys, uuid
    import torch
    import pyfuse as pf
    from pyfuse.frontend import cache

    def median_ms(fn, count=20):
        pairs = []
        for _ in range(count):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            pairs.append((start, end))
        torch.cuda.synchronize()
        return statistics.median(start.elapsed_time(end) for start, end in pairs)

    case, tag = sys.argv[1], uuid.uuid4().hex[:8]
    x = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16)
    if case == "softmax":
        fused = pf.fuse(lambda x: pf.softmax(x, -1), name=f"after_first_{case}_{tag}")
        args = (x,)
    else:
        w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
        fused = pf.fuse(lambda x, w, b: pf.layer_norm(x, w, b), name=f"after_first_{case}_{tag}")
        args = (x, w, b)
    fused(*args)
    (compiled,) = fused.__dict__["_pyfuse_runtime"].compiled.values()
    first_sources = list(compiled.runtime.loaded[0].sources)
    right_after = median_ms(lambda: fused(*args))
    cache.wait_for_jits()
    for _ in range(20):
        fused(*args)
    later = median_ms(lambda: fused(*args))
    print(json.dumps({
        "first_sources": first_sources,
        "sources": list(compiled.runtime.loaded[0].sources),
        "right_after_ms": right_after,
        "later_ms": later,
    }))
    """
)


@pytest.mark.parametrize("case", ["softmax", "layer_norm"])
def test_launches_right_after_a_first_call_run_at_full_speed(tmp_path: Path, case: str) -> None:
    report = run_fresh_process(_RIGHT_AFTER_A_FIRST_CALL, tmp_path, case)
    assert report["sources"] == [cache.FROM_JIT], report
    # The first call ran the quick build unless its optimized one was done first (the check
    # holds either way; first_sources says which was measured).
    assert report["right_after_ms"] <= 1.1 * report["later_ms"], report
