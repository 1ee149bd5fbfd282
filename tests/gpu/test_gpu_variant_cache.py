"""A variant restored from the on-disk variant cache runs and gives the right answer: two fresh
processes share one cache directory; the second launches the first's kernels (cubins) without
running the passes or the emitter, on new random inputs, against a float64 reference. The
matmul case (linear + bias + gelu) launches its TMA kernel from the tensor maps stored in the
record, with neither the compiler nor the kernel IR loaded."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from check_utils import run_fresh_process

_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    import pyfuse as pf

    torch.manual_seed(int(sys.argv[1]))
    cases = [
        ("gelu", pf.fuse(lambda x, y, z: pf.gelu(x * y + z), name="vc_gelu"),
         lambda x, y, z: torch.nn.functional.gelu(x * y + z), [(7, 1000)] * 3, 2e-2),
        ("bias", pf.fuse(lambda x, b: pf.silu(x + b), name="vc_bias"),
         lambda x, b: torch.nn.functional.silu(x + b), [(1000, 1000), (1000,)], 2e-2),
        ("long_sum", pf.fuse(lambda x: x.sum(-1), name="vc_sum"),
         lambda x: x.sum(-1), [(7, 32769)], 2e-2),
        ("softmax", pf.fuse(lambda x: pf.softmax(x, -1), name="vc_softmax"),
         lambda x: torch.softmax(x, -1), [(3, 4099)], 1e-2),
        # A TMA matmul kernel: the second process encodes its tensor maps from the record.
        ("linear_bias_gelu",
         pf.fuse(lambda x, w, b: pf.gelu(pf.linear(x, w, b), approximate="tanh"), name="vc_mm"),
         lambda x, w, b: torch.nn.functional.gelu(x @ w.T + b, approximate="tanh"),
         [(256, 512), (1024, 512), (1024,)], 2e-2),
    ]
    report = {}
    for name, fused, reference, shapes, tolerance in cases:
        dtype = torch.float32 if name == "long_sum" else torch.bfloat16
        inputs = [torch.randn(shape, device="cuda", dtype=dtype) for shape in shapes]
        errors = []
        for _ in range(2):  # twice: a moving error is a race
            out = fused(*inputs)
            torch.cuda.synchronize()
            want = reference(*[x.double() for x in inputs])
            scale = max(1.0, want.abs().max().item())
            errors.append((out.double() - want).abs().max().item() / scale)
        (compiled,) = fused.__dict__["_pyfuse_runtime"].compiled.values()
        report[name] = {
            "errors": errors,
            "tolerance": tolerance,
            "timings": sorted(compiled.timings),
            "sources": list(compiled.runtime.loaded[0].sources),
        }
    report["compiler_loaded"] = "pyfuse.passes.pipeline" in sys.modules
    report["compiler_modules"] = sorted(
        name for name in sys.modules
        if name.startswith(("pyfuse.passes", "pyfuse.backend_ptx.emit"))
        or name in ("pyfuse.ir.kernel_ir", "pyfuse.backend_ptx.matmul_template",
                    "pyfuse.backend_ptx.matmul_host")
    )
    print(json.dumps(report))
    """
)


@pytest.mark.gpu
def test_a_restored_variant_runs_correctly_in_a_fresh_process(tmp_path: Path) -> None:
    first, second = (run_fresh_process(_SCRIPT, tmp_path, str(seed)) for seed in (1, 2))
    assert first["compiler_loaded"] and not second["compiler_loaded"]
    assert second["compiler_modules"] == []
    for name in ("gelu", "bias", "long_sum", "softmax", "linear_bias_gelu"):
        assert "emit" in first[name]["timings"], name
        assert second[name]["timings"] == ["load", "trace", "variant_cache"], name
        # The first process JITs, and the second loads those cubins from the disk cache.
        assert set(first[name]["sources"]) == {"jit"}, name
        assert set(second[name]["sources"]) == {"cache"}, name
        for report in (first[name], second[name]):
            assert max(report["errors"]) <= report["tolerance"], (name, report["errors"])
