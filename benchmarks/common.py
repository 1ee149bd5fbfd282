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
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")
