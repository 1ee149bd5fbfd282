"""What the benchmark scripts share: the commit a report names, the host-time timer, and the
warm tiny fusion the host-overhead scripts take apart."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def commit() -> str:
    """The checkout's short commit, ``+dirty`` when tracked files changed; ``PYFUSE_BENCH_COMMIT``
    wins (the repository's .git may not travel to the GPU machine)."""
    if os.environ.get("PYFUSE_BENCH_COMMIT"):
        return os.environ["PYFUSE_BENCH_COMMIT"]
    try:
        head = _git("rev-parse", "--short", "HEAD")
        dirty = _git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def host_seconds_per_call(fn: Callable[[], Any], count: int = 2000, trials: int = 9) -> float:
    """Median over trials of the mean wall time per call of ``fn`` (seconds). Each trial
    starts with an idle GPU, and is short enough that the launch queue never fills (a full
    queue would time the GPU, not the host); the median drops trials a busy host slowed."""
    import torch

    fn()
    means = []
    for _ in range(trials):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(count):
            fn()
        means.append((time.perf_counter() - start) / count)
    torch.cuda.synchronize()
    return statistics.median(means)


def per_call_us(fn: Callable[[], Any], count: int) -> float:
    """:func:`host_seconds_per_call` in microseconds."""
    return host_seconds_per_call(fn, count) * 1e6


def host_options(description: str) -> argparse.Namespace:
    """``--count`` (calls per trial) and ``--json`` (a file for the figures)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--json")
    return parser.parse_args()


def warm_tiny_add() -> tuple[Any, Any, Any]:
    """Two 16-element float32 CUDA tensors and ``x + y`` fused, called once and synchronized
    (so every later call is warm): ``(x, y, fused)``."""
    import torch

    import pyfuse as pf

    x, y = torch.randn(16, device="cuda"), torch.randn(16, device="cuda")
    fused = pf.fuse(lambda x, y: x + y, name="tiny_add")
    fused(x, y)
    torch.cuda.synchronize()
    return x, y, fused


def report(figures: dict[str, float], json_path: str | None, width: int = 32) -> None:
    """Print ``figures`` (microseconds) one per line, and write them to ``json_path``."""
    for name, value in figures.items():
        print(f"{name:{width}s} {value:7.2f} us")
    if json_path:
        with open(json_path, "w") as file:
            json.dump(figures, file, indent=1)
