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


@pytest.mark.gpu
def test_a_spilling_kernel_is_built_again_with_one_blocks_budget() -> None:
    """The driver's JIT spilled this 512-thread max over a 3-D view (CUDA 13's ptxas on the
    CPU host: 40 registers, 8 bytes of stack) while one block per SM's budget holds it:
    ``cubin_from_ptx`` keeps the build that spills less, so the loaded kernel has no local
    memory."""
    import pyfuse as pf
    from pyfuse.backend_ptx import driver

    def body(v: pf.Tensor) -> pf.Tensor:
        w = pf.reshape(v, (4, 25, 128))
        return w - pf.max(w, None, keepdim=True)

    (kernel,) = pf.fuse(body).compile(pf.spec((100, 128), pf.bfloat16)).kernels
    cubin = driver.cubin_from_ptx(kernel.ptx, kernel.name)
    function = driver.get_function(driver.load_module(cubin, kernel.name), kernel.name)
    assert driver.function_attribute(function, "LOCAL_SIZE_BYTES") == 0
