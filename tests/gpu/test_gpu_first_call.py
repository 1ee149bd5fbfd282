"""A new kernel's first call on the GPU: its launch waits for the driver's optimized JIT, so
that call and every one after it run the same build; a CUDA graph can capture the first call;
launches right after a first call already run at full speed.

Every fusion gets a name no earlier run used, so its PTX is new to the driver's own JIT
cache as well as to pyfuse's.
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
from pyfuse.runtime import cache

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path: Path) -> Iterator[None]:
    with knobs.overrides(cache_dir=tmp_path):
        yield


def _fresh(fn: Callable[..., Any], what: str) -> Any:
    return pf.fuse(fn, name=f"first_{what}_{uuid.uuid4().hex[:8]}")


def _sources(fused: Any) -> list[str]:
    (compiled,) = fused.__dict__["_pyfuse_runtime"].compiled.values()
    return list(compiled.runtime.loaded[0].sources)


def test_a_graph_captured_on_the_first_call_replays(torch: Any) -> None:
    x = torch.randn(2048, 2048, device="cuda", dtype=torch.float32)
    fused = _fresh(lambda a: pf.softmax(a * 2.0, -1), "graph")
    graph = torch.cuda.CUDAGraph()
    # Relaxed: the first call compiles, JITs and loads its module during the capture.
    with torch.cuda.graph(graph, capture_error_mode="relaxed"):
        out = fused(x)
    assert _sources(fused) == [cache.FROM_JIT]
    for _ in range(2):
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        want = torch.softmax(x.double() * 2.0, -1)
        assert_close(
            to_host(torch, out), to_host(torch, want.float()), atol=1e-6, rtol=1e-5,
            what="graph captured on the first call",
        )  # fmt: skip


# In a fresh process: a first call, then at once launches timed one by one with CUDA events
# (as a benchmark right after a first call would), then again after more calls. Every launch
# runs the optimized build, so the two agree.
_RIGHT_AFTER_A_FIRST_CALL = textwrap.dedent(
    """
    import json, statistics, sys, uuid
    import torch
    import pyfuse as pf

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
    right_after = median_ms(lambda: fused(*args))
    for _ in range(20):
        fused(*args)
    later = median_ms(lambda: fused(*args))
    print(json.dumps({
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
    assert report["right_after_ms"] <= 1.1 * report["later_ms"], report
