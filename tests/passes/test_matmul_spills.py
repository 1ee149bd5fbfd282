"""Every matmul kernel the heuristic or the autotuner may build for the benchmark's fused
patterns assembles without spills, or its params are refused with a warning (the autotuner
skips those): the scan behind docs/performance.md's fourth session of 2026-12-06."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
from check_utils import require_ptxas

import pyfuse as pf
from pyfuse.backend_ptx.emit import emit_ptx
from pyfuse.backend_ptx.ptxas import assemble
from pyfuse.ir.target import HOPPER
from pyfuse.passes import pipeline

S, bf16, P = pf.spec, pf.bfloat16, pf.MatmulParams
M, N, K = 4096, 14336, 4096

PATTERNS: dict[str, tuple[Callable[..., Any], list[pf.Spec]]] = {
    "gemm": (lambda a, b: a @ b.T, [S((M, K), bf16), S((N, K), bf16)]),
    "linear_bias_gelu": (
        lambda x, w, b: pf.gelu(pf.linear(x, w, b), approximate="tanh"),
        [S((M, K), bf16), S((N, K), bf16), S((N,), bf16)],
    ),
    "linear_plus_bias_gelu": (
        lambda x, w, b: pf.gelu(pf.linear(x, w) + b, approximate="tanh"),
        [S((M, K), bf16), S((N, K), bf16), S((N,), bf16)],
    ),
    "gate_up": (
        lambda x, w1, w3: pf.silu(x @ w1.T) * (x @ w3.T),
        [S((M, K), bf16), S((N, K), bf16), S((N, K), bf16)],
    ),
    "residual_row_scale": (
        lambda a, b, r, s: (a @ b.T + r) * s,
        [S((M, K), bf16), S((N, K), bf16), S((M, N), bf16), S((M, 1), bf16)],
    ),
}
PARAMS = {
    "default": None,
    "pingpong": P(pingpong=True),
    "64x256": P(tile_m=64, tile_n=256),
    "256x128": P(tile_m=256, tile_n=128),
    "128x192_epilogue_warps": P(tile_m=128, tile_n=192, epilogue_warps=True),
}
# Kernels known to spill (strict xfails). The residual epilogue spilled 24-52 B where a
# warpgroup holds two 64-row blocks until its reads became one pair load per column pair.
KNOWN_SPILLS: set[tuple[str, str]] = set()
# The gate/up pair's tiles whose two accumulators crowd the registers (matmul_params).
CROWDED = {("gate_up", "64x256"), ("gate_up", "256x128"), ("gate_up", "128x192_epilogue_warps")}


CASES = [
    pytest.param(
        pattern,
        params,
        id=f"{pattern}-{params}",
        marks=[pytest.mark.xfail(strict=True, reason="spills")]
        if (pattern, params) in KNOWN_SPILLS
        else [],
    )
    for pattern in sorted(PATTERNS)
    for params in sorted(PARAMS)
]


@pytest.mark.parametrize(("pattern", "params"), CASES)
def test_the_kernel_does_not_spill_or_its_params_are_refused(pattern: str, params: str) -> None:
    require_ptxas()
    fn, specs = PATTERNS[pattern]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = pipeline.run(pf.fuse(fn).trace(*specs), HOPPER, PARAMS[params])
    refused = [w for w in caught if "not applied" in str(w.message)]
    if params == "default":
        assert not caught, [str(w.message) for w in caught]
    crowded = any("accumulator registers" in str(w.message) for w in refused)
    assert crowded == ((pattern, params) in CROWDED), [str(w.message) for w in refused]
    for stage in result.kernels:
        assert stage.plan.scheduler == "matmul" and "fallback" not in stage.plan.params
        resources = assemble(emit_ptx(stage.kernel_ir, HOPPER)).kernels[stage.kernel_ir.name]
        spilled = resources.spill_store_bytes + resources.local_bytes
        assert spilled == 0, (stage.plan.params, [str(w.message) for w in refused])


# Layouts, batches and a wider residual at a decode and a ragged shape, under the configs
# that change the kernel's structure most (a scan of 633 kernels over 4 shapes, 9 patterns
# and 13 configs found none that spilled: docs/performance.md, 2026-12-07).
def _layouts(m: int, n: int, k: int) -> dict[str, tuple[Callable[..., Any], list[pf.Spec]]]:
    f32 = pf.float32
    return {
        "nn": (lambda a, b: a @ b, [S((m, k), bf16), S((k, n), bf16)]),
        "tn": (lambda a, b: a.T @ b, [S((k, m), bf16), S((k, n), bf16)]),
        "batched": (lambda a, b: a @ b, [S((3, m, k), bf16), S((3, k, n), bf16)]),
        "f32_residual": (
            lambda a, b, r: a @ b.T + r,
            [S((m, k), bf16), S((n, k), bf16), S((m, n), f32)],
        ),
    }


WIDE_PARAMS = {
    "default": None,
    "pingpong": P(pingpong=True),
    "256x128": P(tile_m=256, tile_n=128),
    "stream_k": P(stream_k=True),
    "split_k": P(splitk=2),
    "register_stores": P(smem_epilogue=False),
}


@pytest.mark.parametrize("shape", [(16, 4096, 4096), (300, 136, 264)], ids=["decode", "ragged"])
@pytest.mark.parametrize("pattern", ["nn", "tn", "batched", "f32_residual"])
def test_other_layouts_do_not_spill(shape: tuple[int, int, int], pattern: str) -> None:
    require_ptxas()
    fn, specs = _layouts(*shape)[pattern]
    for name, params in WIDE_PARAMS.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a refused param is the first test's subject
            result = pipeline.run(pf.fuse(fn).trace(*specs), HOPPER, params)
        for stage in result.kernels:
            resources = assemble(emit_ptx(stage.kernel_ir, HOPPER)).kernels[stage.kernel_ir.name]
            spilled = resources.spill_store_bytes + resources.local_bytes
            assert spilled == 0, (name, stage.plan.scheduler, resources.warnings)
