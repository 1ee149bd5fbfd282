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


def test_a_normalization_too_tall_for_registers_is_cut_after_its_first_reduction() -> None:
    """argmax over dim 0 of a (37, 45) tensor: the reduction scheduler takes it as one outer
    normalization, whose 37-element rows do not fit the register arrays; the cut keeps the
    max in one kernel and everything after it in another (it used to be one per expr: 8)."""
    import pyfuse as pf

    compiled = pf.fuse(lambda x: pf.argmax(x, 0)).compile(pf.spec((37, 45), pf.float32))
    assert len(compiled.kernels) == 2
    outcome = run_function(lambda x: pf.argmax(x, 0), [pf.spec((37, 45), pf.float32)])
    assert outcome.cls == "ok", outcome


def test_a_decode_gemv_is_one_reduction_kernel() -> None:
    """x[1, K] @ W.T: x's size-1 M is a broadcast merged with N's broadcast where the
    reduction's reference merges its rows; inlining x's cast there keeps one kernel (it was
    nine, the [N, K] product written to memory)."""
    import pyfuse as pf

    specs = [pf.spec((1, 3584), pf.bfloat16), pf.spec((4608, 3584), pf.bfloat16)]
    compiled = pf.fuse(lambda x, w: x @ w.T).compile(*specs)
    assert [k.scheduler for k in compiled.kernels] == ["reduction"]


def test_a_long_gemv_row_takes_fewer_threads_to_keep_its_vectors() -> None:
    """A decode GEMV with K = 18944: at 1024 threads, vectors of 8 would keep 48 registers of
    arrays a thread (more than the streaming budget of 40 there), and the plan fell back to
    scalar loads (0.19x cuBLAS); the scheduler halves the threads instead, where the budget
    doubles, and keeps its 16-byte loads (assembled without spills by
    test_case_runs_right_on_the_interpreter's long_gemv_decode)."""
    import pyfuse as pf

    specs = (pf.spec((1, 18944), pf.bfloat16), pf.spec((3584, 18944), pf.bfloat16))
    (kernel,) = pf.fuse(lambda x, w: x @ w.T).compile(*specs).kernels
    assert kernel.params["vector_width"] == 8 and kernel.params["threads"] == 512
    assert "fallback" not in kernel.params
