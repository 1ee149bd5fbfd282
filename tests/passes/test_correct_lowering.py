"""Every case of tests/lowering_cases.py compiles (no plan may fail a valid fusion), assembles
with ptxas without spills, and matches the reference on the kernel interpreter, on two sets of
fresh random inputs."""

from __future__ import annotations

import pytest
from check_utils import require_ptxas
from lowering_cases import CASES

from pyfuse.testing.run import run_function


@pytest.mark.parametrize("name", sorted(CASES))
def test_case_runs_right_on_the_interpreter(name: str) -> None:
    require_ptxas()
    fn, specs = CASES[name]
    for data_seed in (0, 1):
        outcome = run_function(fn, specs, data_seed=data_seed)
        assert outcome.cls in ("ok", "compiled"), f"{name} (data {data_seed}): {outcome}"
