"""Every case of tests/lowering_cases.py on the GPU: two calls with fresh random data each,
against the float64 reference (outputs poisoned before each call)."""

from __future__ import annotations

import pytest
from lowering_cases import CASES

from pyfuse.testing.run import run_function_gpu


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CASES))
def test_case_runs_right_on_the_gpu(name: str) -> None:
    fn, specs = CASES[name]
    for data_seed in (0, 1):
        outcome = run_function_gpu(fn, specs, data_seed=data_seed)
        assert outcome.cls == "ok", f"{name} (data {data_seed}): {outcome}"
