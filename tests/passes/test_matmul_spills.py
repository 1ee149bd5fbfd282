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
