"""Checks shared by several test folders: ptxas by policy, GPU results against the reference,
the matmul kernel of a fusion."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from pyfuse import knobs
from pyfuse.backend_ptx import ptxas


def require_ptxas() -> None:
    """Skip without ptxas, or fail when ``PYFUSE_REQUIRE_PTXAS=1`` says it must be there."""
    if ptxas.ptxas_available():
        return
    if knobs.require_ptxas():
        pytest.fail(f"ptxas not found ({knobs.ptxas_path()!r}) and PYFUSE_REQUIRE_PTXAS=1")
    pytest.skip(f"ptxas not found ({knobs.ptxas_path()!r}); set PYFUSE_PTXAS to assemble")


def to_host(torch: Any, tensor: Any) -> np.ndarray:
    """A torch tensor as a NumPy array (bf16 as ml_dtypes.bfloat16)."""
    tensor = tensor.contiguous()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).cpu().numpy().view(ml_dtypes.bfloat16)
    return tensor.cpu().numpy()


def sample_rows(count: int, rng: np.random.Generator) -> np.ndarray:
    """Row indices to compare on a huge output: the edges and 250 random rows."""
    edges = [0, 1, 2, count // 2, count - 2, count - 1]
    return np.unique(np.concatenate([edges, rng.integers(0, count, 250)]).clip(0, count - 1))


def _is_float(dtype: Any) -> bool:
    return bool(np.issubdtype(dtype, np.floating)) or dtype == ml_dtypes.bfloat16


def assert_close(got: np.ndarray, want: np.ndarray, *, atol: float, rtol: float, what: str) -> None:
    """Float results within ``atol + rtol |want|`` (NaN where NaN is wanted), others exact;
    the message names the first wrong element and the largest errors."""
    assert got.shape == want.shape and got.dtype == want.dtype, (
        f"{what}: got {got.dtype}{got.shape}, want {want.dtype}{want.shape}"
    )
    if not _is_float(want.dtype):
        bad = got != want
    else:
        got64, want64 = got.astype(np.float64), want.astype(np.float64)
        error = np.abs(got64 - want64)
        bad = ~(error <= atol + rtol * np.abs(want64))
        bad &= ~(np.isnan(got64) & np.isnan(want64))
    if not bad.any():
        return
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    detail = ""
    if _is_float(got.dtype):
        g64, w64 = got.astype(np.float64), want.astype(np.float64)
        finite = np.isfinite(w64) & np.isfinite(g64)
        abs_error = np.abs(g64 - w64)[finite]
        rel_error = abs_error / np.maximum(np.abs(w64[finite]), 1e-30)
        detail = (
            f"; max abs error {np.max(abs_error, initial=0):.3g}, "
            f"max rel error {np.max(rel_error, initial=0):.3g}"
        )
    raise AssertionError(
        f"{what}: {int(bad.sum())} of {bad.size} elements differ; first at {index}: got "
        f"{got[index]!r}, want {want[index]!r}{detail}"
    )


def run_twice(torch: Any, fused: Any, inputs: list[Any]) -> list[tuple[Any, ...]]:
    """Two calls of ``fused`` (a result that moves between them is a race), synchronized, each
    call's outputs as a tuple."""
    runs = []
    for _ in range(2):
        out = fused(*inputs)
        torch.cuda.synchronize()
        runs.append(out if isinstance(out, tuple) else (out,))
    return runs


def assert_runs_close(
    torch: Any,
    runs: list[tuple[Any, ...]],
    want: Any,
    gather: Any,
    *,
    atol: float,
    rtol: float,
    what: str,
    seed: int,
) -> None:
    """Every output of every run against the reference ``want`` (one array or a tuple); with
    ``gather`` (GPU row indices) only those rows of each output are compared."""
    want = want if isinstance(want, tuple) else (want,)
    for number, outputs in enumerate(runs):
        for position, (got, expected) in enumerate(zip(outputs, want, strict=True)):
            if gather is not None:
                got = got.index_select(0, gather)
            try:
                label = f"{what} run {number} output {position}"
                assert_close(to_host(torch, got), expected, atol=atol, rtol=rtol, what=label)
            except AssertionError as error:
                raise AssertionError(f"{error} (seed {seed})") from None


REPO = Path(__file__).resolve().parents[1]


def run_fresh_process(script: str, folder: Path, *args: str) -> dict[str, Any]:
    """Run ``script`` in a new Python process with pyfuse from this checkout and no PYFUSE_
    setting of the caller's but caches on (under ``folder / "cache"``, shared by every run
    given the same folder); the JSON object its last line of output prints."""
    path = folder / "script.py"
    path.write_text(script)
    env = {name: value for name, value in os.environ.items() if not name.startswith("PYFUSE_")}
    env.update(PYFUSE_CACHE_DIR=str(folder / "cache"), PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, str(path), *args], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def matmul_kernel(fn: Any, specs: list[Any], params: Any = None) -> tuple[Any, Any]:
    """The one tensor-core kernel of ``fn`` traced on ``specs`` (passes only, no emission):
    its ``KernelStages`` and its ``MatmulMainLoop``."""
    import pyfuse as pf
    from pyfuse.ir.target import HOPPER
    from pyfuse.passes import pipeline

    fusion = pf.fuse(fn).trace(*specs)
    result = pipeline.run(fusion, HOPPER, params)
    (stage,) = [st for st in result.kernels if st.plan.scheduler == "matmul"]
    loop = stage.kernel_ir.main_loop()
    assert loop is not None
    return stage, loop
