"""Residuals loaded by TMA into the staging buffers (backend_ptx/matmul_residuals) on the
Hopper simulator: a persistent kernel whose one CTA takes every tile lands the right result
in several interleavings, and each protocol step taken out of its PTX is reported or gives a
wrong result."""

from __future__ import annotations

import re

import numpy as np
import pytest
from sim_cases import CASES

import pyfuse as pf
from pyfuse.backend_ptx.emit import emit_ptx
from pyfuse.ir.target import HOPPER
from pyfuse.passes import pipeline
from pyfuse.testing.ptx_sim import SimulationError, run_kernel
from pyfuse.testing.simulator import poison, random_inputs

# Three chunks a tile: a chunk's buffer alternates from one tile to the next.
_CASE = "persistent_tma_residual_three_chunks"


def _kernel() -> tuple[pf.FusedFunction, pf.Fusion, pipeline.KernelStages]:
    fn, specs, params = CASES[_CASE]
    fused = pf.fuse(fn)
    fusion = fused.trace(*specs)
    result = pipeline.run(
        fusion, HOPPER, params, emit=lambda st: pipeline.Emitted(emit_ptx(st.kernel_ir, HOPPER))
    )
    (stages,) = result.kernels
    loop = stages.kernel_ir.main_loop()
    assert loop is not None and [r.store for r in loop.residuals] == [0]
    return fused, fusion, stages


def _run(ptx: str, order: str, seed: int) -> None:
    fused, fusion, stages = _kernel()
    arrays = random_inputs(CASES[_CASE][1], seed)
    out = poison(fusion.outputs[0].shape, fusion.outputs[0].dtype)
    # One CTA: it walks all six tiles, 18 chunks through the two buffers.
    run_kernel(stages.kernel_ir, ptx, arrays, [out], grid=(1, 1, 1), order=order, seed=seed)
    want = np.asarray(fused.reference(*arrays), dtype=np.float64)
    if not np.allclose(out.astype(np.float64), want, rtol=2e-2, atol=2e-2):
        raise SimulationError("wrong result")


@pytest.mark.parametrize(("order", "seed"), [("late", 0), ("eager", 1), ("eager", 2)])
def test_one_cta_takes_every_tile_and_its_residual_chunks(order: str, seed: int) -> None:
    _run(_kernel()[2].emitted.ptx, order, seed)


@pytest.mark.parametrize(
    ("bug", "pattern", "replacement", "message"),
    [
        (
            # Refilling a buffer its TMA store has not read yet.
            "no wait before a refill",
            r"^\s*@%p\d+ cp\.async\.bulk\.wait_group\.read 0;\n",
            "",
            "TMA load|has not yet read|wrong result",
        ),
        (
            # Reading a chunk before its copy lands.
            "no wait for the residual",
            r"^\$L__residual_wait_\d+:\n.*try_wait.*\n.*bra \$L__residual_wait_\d+;\n",
            "",
            "not yet written|wrong result",
        ),
        (
            "the wrong parity",
            r"(\$L__residual_wait_\d+:\n\s*mbarrier\.try_wait\.parity[^,]*, \[[^\]]*\]), %r\d+;",
            r"\1, 1;",
            "not yet written|deadlock|wrong result",
        ),
    ],
)
def test_a_residual_protocol_step_taken_out_is_caught(
    bug: str, pattern: str, replacement: str, message: str
) -> None:
    ptx, count = re.subn(pattern, replacement, _kernel()[2].emitted.ptx, flags=re.M)
    assert count, f"{bug}: the pattern is not in the kernel"
    found = []
    for order, seed in (("late", 0), ("eager", 1), ("eager", 2)):
        try:
            _run(ptx, order, seed)
        except SimulationError as error:
            found.append(str(error))
    assert found, f"{bug}: no interleaving caught it"
    assert any(re.search(message, text) for text in found), f"{bug}: {found}"
