"""What a user sees right after a first call: time to the first result, the speed of a
benchmark started at once, and the time until every launch runs at full speed.

Run on a GPU machine with torch and triton installed:

    PYTHONPATH=. python3 benchmarks/first_call.py [--only NAME ...] [--reps N] [--json FILE]

Each measurement is a fresh process (the driver's own JIT cache off, ``CUDA_CACHE_DISABLE=1``,
so every build is paid), once with an empty pyfuse cache and once with the cache an earlier
process filled. In a ``bench`` process: ``f(*args)`` and a synchronize (the first result),
then at once ``do_bench(lambda: f(*args))`` as a user would time it, then after the
background JITs settle the same ``do_bench`` again (the steady speed); the report gives
right-after / steady. In a ``trace`` process: after the first call, launches one after
another for two seconds, each timed with CUDA events; full speed is the first launch from
which the median of 20 launches is within 1.1x of the median of the second second.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Any

from common import commit

# name -> (inputs as torch code, the fused function's body)
CASES: dict[str, tuple[str, str]] = {
    "gelu": (
        "args = tuple(torch.randn(4096, 4096, device='cuda', dtype=torch.bfloat16)\n"
        "             for _ in range(3))",
        "lambda x, y, z: pf.gelu(x * y + z)",
    ),
    "softmax": (
        "args = (torch.randn(16384, 4096, device='cuda', dtype=torch.bfloat16),)",
        "lambda x: pf.softmax(x, -1)",
    ),
    "layer_norm": (
        "args = (torch.randn(16384, 4096, device='cuda', dtype=torch.bfloat16),\n"
        "        torch.randn(4096, device='cuda', dtype=torch.bfloat16),\n"
        "        torch.randn(4096, device='cuda', dtype=torch.bfloat16))",
        "lambda x, w, b: pf.layer_norm(x, w, b, 1e-5)",
    ),
    "linear_gelu": (
        "args = (torch.randn(4096, 4096, device='cuda', dtype=torch.bfloat16),\n"
        "        torch.randn(4096, 4096, device='cuda', dtype=torch.bfloat16) / 64,\n"
        "        torch.randn(4096, device='cuda', dtype=torch.bfloat16))",
        "lambda x, w, b: pf.gelu(pf.linear(x, w, b), approximate='tanh')",
    ),
    # The rest of benchmarks/run.py's speed cases, at their shapes there.
    "bias_gelu": (
        "args = (torch.randn(16384, 4096, device='cuda', dtype=torch.bfloat16),\n"
        "        torch.randn(16384, 1, device='cuda', dtype=torch.bfloat16),\n"
        "        torch.randn(4096, device='cuda', dtype=torch.bfloat16))",
        "lambda x, s, b: pf.gelu(x * s + b)",
    ),
    "rms_norm": (
        "args = (torch.randn(16384, 4096, device='cuda', dtype=torch.bfloat16),\n"
        "        torch.randn(4096, device='cuda', dtype=torch.bfloat16))",
        "lambda x, w: pf.rms_norm(x, w, 1e-6)",
    ),
    "rope": (
        "args = (torch.randn(32, 4096, 128, device='cuda', dtype=torch.bfloat16),\n"
        "        torch.randn(4096, 128, device='cuda', dtype=torch.bfloat16),\n"
        "        torch.randn(4096, 128, device='cuda', dtype=torch.bfloat16))",
        "lambda x, c, s: x * c + pf.cat([-x[..., 64:], x[..., :64]], -1) * s",
    ),
    "gemm": (
        "args = tuple(torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)\n"
        "             for _ in range(2))",
        "lambda a, b: a @ b.T",
    ),
    "gemm_long_k": (
        "args = (torch.randn(512, 32768, device='cuda', dtype=torch.bfloat16),\n"
        "        torch.randn(512, 32768, device='cuda', dtype=torch.bfloat16) / 8)",
        "lambda a, b: a @ b.T",
    ),
    "gate_up": (
        "args = (torch.randn(4096, 4096, device='cuda', dtype=torch.bfloat16),\n"
        "        torch.randn(14336, 4096, device='cuda', dtype=torch.bfloat16) / 64,\n"
        "        torch.randn(14336, 4096, device='cuda', dtype=torch.bfloat16) / 64)",
        "lambda x, w1, w3: pf.silu(x @ w1.T) * (x @ w3.T)",
    ),
}

_CHILD = """
import json, sys, time
import torch
import pyfuse as pf
from triton.testing import do_bench
{inputs}
fused = pf.fuse({body})
torch.cuda.synchronize()
start = time.perf_counter()
fused(*args)
torch.cuda.synchronize()
first = time.perf_counter() - start
report = {{"first_ms": first * 1e3}}
if "{mode}" == "bench":
    report["right_after_ms"] = do_bench(lambda: fused(*args), warmup=25, rep=200)
    time.sleep(1.0)
    from pyfuse.runtime.cache import wait_for_jits
    wait_for_jits()
    fused(*args)
    report["steady_ms"] = do_bench(lambda: fused(*args), warmup=25, rep=200)
else:
    launches = []
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    while time.perf_counter() - start < 2.0:
        at = time.perf_counter() - start
        begin.record()
        fused(*args)
        end.record()
        end.synchronize()
        launches.append((at, begin.elapsed_time(end)))
    times = [ms for _, ms in launches]
    steady = sorted(times[len(times) // 2 :])[len(times) // 4]  # median of the second second
    window = 20
    report["full_speed_ms"] = launches[-1][0] * 1e3
    for i in range(len(times) - window):
        if sorted(times[i : i + window])[window // 2] <= 1.1 * steady:
            report["full_speed_ms"] = launches[i][0] * 1e3
            break
print(json.dumps(report))
"""


def _child(case: str, mode: str, env: dict[str, str]) -> dict[str, Any]:
    inputs, body = CASES[case]
    script = _CHILD.format(inputs=inputs, body=body, mode=mode)
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=240
    )
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def measure(
    case: str,
    reps: int,
    extra_env: dict[str, str],
    caches: tuple[str, ...] = ("empty", "filled"),
    modes: tuple[str, ...] = ("bench", "trace"),
) -> dict[str, Any]:
    """One case, for each cache state and process kind asked, ``reps`` processes each."""
    rows: dict[str, Any] = {}
    for cache_state in caches:
        runs: dict[str, list[dict[str, Any]]] = {"bench": [], "trace": []}
        for mode in modes:
            for _ in range(reps):
                with tempfile.TemporaryDirectory() as cache:
                    env = dict(os.environ, PYFUSE_CACHE_DIR=cache, CUDA_CACHE_DISABLE="1")
                    env.update(extra_env)
                    if cache_state == "filled":
                        _child(case, "bench", env)
                    runs[mode].append(_child(case, mode, env))
        rows[cache_state] = runs
    return rows


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def summarize(case: str, label: str, rows: dict[str, Any]) -> list[str]:
    lines = []
    for cache_state, runs in rows.items():
        bench = [r for r in runs["bench"] if "error" not in r]
        trace = [r for r in runs["trace"] if "error" not in r]
        errors = [r["error"] for r in runs["bench"] + runs["trace"] if "error" in r]
        first = _median([r["first_ms"] for r in bench + trace])
        ratio = _median([r["steady_ms"] / r["right_after_ms"] for r in bench])
        steady = _median([r["steady_ms"] for r in bench])
        full = _median([r["full_speed_ms"] for r in trace])
        lines.append(
            f"| {case} | {label} | {cache_state} | {first:.1f} | {full:.1f} | "
            f"{steady * 1e3:.1f} | {ratio:.3f} |" + (f" errors: {errors}" if errors else "")
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=list(CASES))
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument(
        "--env",
        nargs="*",
        default=[""],
        help="settings to compare, each a comma list of NAME=VALUE ('' for the defaults)",
    )
    parser.add_argument(
        "--caches", nargs="*", default=["empty", "filled"], choices=["empty", "filled"]
    )
    parser.add_argument(
        "--modes", nargs="*", default=["bench", "trace"], choices=["bench", "trace"]
    )
    parser.add_argument("--json")
    args = parser.parse_args()
    print(f"commit {commit()}")
    print(
        "| case | settings | cache | first result (ms) | full speed at (ms) | "
        "steady (us) | speed right after / steady |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    record: dict[str, Any] = {}
    for case in args.only:
        for setting in args.env:
            extra = dict(item.split("=", 1) for item in setting.split(",") if item)
            rows = measure(case, args.reps, extra, tuple(args.caches), tuple(args.modes))
            record[f"{case} {setting}"] = rows
            for line in summarize(case, setting or "defaults", rows):
                print(line, flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(record, handle, indent=1)


if __name__ == "__main__":
    main()
