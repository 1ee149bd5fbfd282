"""What the benchmark scripts share: the commit a report names, the host-time timer."""

from __future__ import annotations

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
