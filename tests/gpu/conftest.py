"""Fixtures of the GPU tests."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="module")
def torch() -> Any:
    """torch, imported only where a GPU test runs (the CPU suite never needs it)."""
    import torch as torch_module

    return torch_module
