"""Autotuning on the GPU: the first process times the candidates of a matmul (linear + bias +
gelu at a small-K shape, and a plain GEMM), both tuned variants give the float64 reference's
answer on fresh random inputs, and a second process sharing the cache directory compiles the
remembered winner without timing anything."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from check_utils import run_fresh_process

_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    import torch
    import pyfuse as pf
    from pyfuse.runtime import autotune

    torch.manual_seed(int(sys.argv[1]))
    timed = []
    original = autotune._Timer.measure
    def counting(self, run, estimate_ms):
        timed.append(estimate_ms)
        return original(self, run, estimate_ms)
    autotune._Timer.measure = counting
    cases = [
        ("lbg", pf.fuse(lambda x, w, b: pf.gelu(pf.linear(x, w, b), approximate="tanh"),
                        name="at_lbg", autotune=True),
         lambda x, w, b: torch.nn.functional.gelu(x @ w.T + b, approximate="tanh"),
         [(1000, 128), (3000, 128), (3000,)]),
        ("gemm", pf.fuse(lambda a, b: a @ b, name="at_gemm", autotune=True),
         lambda a, b: a @ b, [(512, 1024), (1024, 768)]),
    ]
    report = {}
    for name, fused, reference, shapes in cases:
        inputs = [torch.randn(s, device="cuda", dtype=torch.bfloat16) / 4 for s in shapes]
        before = len(timed)
        if name == "gemm":  # compiled without arrays first: the first call still tunes
            fused.compile(*inputs)
        start = time.perf_counter()
        out = fused(*inputs)
        torch.cuda.synchronize()
        first = time.perf_counter() - start
        errors = []
        for _ in range(2):
            inputs = [torch.randn(s, device="cuda", dtype=torch.bfloat16) / 4 for s in shapes]
            out = fused(*inputs)
            torch.cuda.synchronize()
            want = reference(*[x.double() for x in inputs])
            scale = max(1.0, want.abs().max().item())
            errors.append((out.double() - want).abs().max().item() / scale)
        (compiled,) = fused.__dict__["_pyfuse_runtime"].compiled.values()
        report[name] = {"errors": errors, "timed": len(timed) - before, "first_s": first,
                        "params": compiled.kernels[0].params}
    print(json.dumps(report))
    """
)


@pytest.mark.gpu
def test_autotuning_times_once_and_a_second_process_reuses_the_winner(tmp_path: Path) -> None:
    first, second = (run_fresh_process(_SCRIPT, tmp_path, str(seed)) for seed in (1, 2))
    for name in ("lbg", "gemm"):
        assert first[name]["timed"] >= 2, (name, first[name])
        assert second[name]["timed"] == 0, (name, second[name])
        assert second[name]["params"] == first[name]["params"], name
        assert first[name]["first_s"] < 10.0, first[name]
        for report in (first[name], second[name]):
            assert max(report["errors"]) <= 2e-2, (name, report["errors"])
    records = list((tmp_path / "cache" / "autotune").glob("*.json"))
    assert len(records) == 2
