"""What the benchmark scripts share: the commit a report names."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

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
