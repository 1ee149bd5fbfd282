"""Shared test setup: the ``gpu`` marker skips cleanly where no CUDA driver answers."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

# Test helpers shared by several test folders (sim_utils) import as top-level modules.
sys.path.insert(0, str(Path(__file__).resolve().parent))

# Every test session starts from empty kernel and variant caches: a record left by an earlier
# run (or by the user's own work) must not stand in for the compile a test means to check.
_SESSION_CACHE = tempfile.mkdtemp(prefix="pyfuse-test-cache-")
os.environ["PYFUSE_CACHE_DIR"] = _SESSION_CACHE
atexit.register(shutil.rmtree, _SESSION_CACHE, ignore_errors=True)


@functools.cache
def _gpu_available() -> bool:
    try:
        from pyfuse.backend_ptx import driver
    except ImportError:
        return False
    try:
        return bool(driver.available())
    except Exception:  # any driver failure means: no usable GPU here
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _gpu_available():
        return
    skip = pytest.mark.skip(reason="no CUDA driver or GPU on this machine")
    for item in items:
        # The marker, not the keyword: tests/gpu/ also holds CPU tests (PTX assembly checks).
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)
