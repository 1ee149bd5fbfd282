"""One pyfuse GEMM and the cuBLAS GEMM of the same shape and layout, each launched a few
times after a warm-up, for a profiler to compare kernel against kernel:

    PYTHONPATH=. ncu --clock-control none --profile-from-start off --set full \\
        python3 benchmarks/profile_gemm.py [--shape M N K] [--layout "a @ b.T"] [VARIANT ...]

A VARIANT is ``field=value,...`` of :class:`pyfuse.MatmulParams` (as in
``matmul_sweep.py``); each runs as its own fusion after the default. Every result is checked
against an fp32 product first. The script prints each GEMM's time measured with CUDA events
(the profiler replays kernels, so these are measured before it starts), then runs cuBLAS
and each variant ``--launches`` times, in that order, between ``cudaProfilerStart`` and
``cudaProfilerStop``: the only kernels a ``--profile-from-start off`` profile holds.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import torch
from matmul_sweep import parse_variant

import pyfuse as pf

LAYOUTS: dict[str, Callable[[Any, Any], Any]] = {
    "a @ b.T": lambda a, b: a @ b.T,
    "a @ b": lambda a, b: a @ b,
    "a.T @ b.T": lambda a, b: a.T @ b.T,
    "a.T @ b": lambda a, b: a.T @ b,
}


def _operands(layout: str, m: int, n: int, k: int) -> tuple[Any, Any]:
    a_shape = (k, m) if layout.startswith("a.T") else (m, k)
    b_shape = (n, k) if layout.endswith("b.T") else (k, n)
    scale = k**-0.25  # products of unit size: fresh random data, never zeros
    a = torch.randn(a_shape, device="cuda", dtype=torch.bfloat16) * scale
    b = torch.randn(b_shape, device="cuda", dtype=torch.bfloat16) * scale
    return a, b


def _time_ms(fn: Callable[[], Any], reps: int = 10) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(end)) / reps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=int, nargs=3, default=(8192, 8192, 8192))
    parser.add_argument("--layout", choices=sorted(LAYOUTS), default="a @ b.T")
    parser.add_argument("--launches", type=int, default=2, help="profiled launches of each")
    parser.add_argument("variants", nargs="*")
    args = parser.parse_args()
    m, n, k = args.shape
    fn = LAYOUTS[args.layout]
    a, b = _operands(args.layout, m, n, k)
    want = fn(a.float(), b.float())
    runs: list[tuple[str, Callable[[], Any]]] = [("cublas", lambda: fn(a, b))]
    for text in ["default", *args.variants]:
        fused = pf.fuse(fn, name="gemm", matmul=parse_variant(text))
        got = fused(a, b).float()
        error = float((got - want).abs().max() / want.abs().max())
        if error > 2e-2:
            raise SystemExit(f"{text}: wrong result (relative error {error:.3g})")
        runs.append((f"pyfuse {text}", lambda fused=fused: fused(a, b)))
    flops = 2.0 * m * n * k
    for name, run in runs:
        for _ in range(3):
            run()
        ms = _time_ms(run)
        print(f"{name:40s} {ms * 1e3:9.1f} us  {flops / ms / 1e9:7.1f} TFLOP/s", flush=True)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for _, run in runs:
        for _ in range(args.launches):
            run()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()
