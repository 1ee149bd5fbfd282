"""Ping-pong matmul kernels on the Hopper simulator: two consumer warpgroups taking a CTA's
tiles in turn through one stage ring, with TMA-stored and register-stored epilogues, ragged
edges, a gate/up pair and a cluster, on fewer CTAs than tiles so that both warpgroups work
(and each skips the other's stages) under several interleavings."""

from __future__ import annotations

import numpy as np
import pytest

import pyfuse as pf
from pyfuse.backend_ptx.emit import emit_ptx
from pyfuse.ir.target import HOPPER
from pyfuse.passes import pipeline
from pyfuse.testing.ptx_sim import run_kernel
from pyfuse.testing.simulator import poison, random_inputs

S, bf16 = pf.spec, pf.bfloat16
P = pf.MatmulParams

CASES = {
    # 2 x 3 tiles of 128x64 on one CTA: warpgroup 0 takes tiles 0, 2, 4, warpgroup 1 1, 3, 5.
    "staged_one_cta": (
        lambda a, b: a @ b.T,
        [S((200, 128), bf16), S((136, 128), bf16)],
        P(pingpong=True, tile_m=128, tile_n=64, stages=3),
        (1, 1, 1),
    ),
    "registers_two_ctas": (
        lambda a, b: a @ b.T,
        [S((200, 64), bf16), S((136, 64), bf16)],
        P(pingpong=True, tile_m=64, tile_n=64, stages=2, smem_epilogue=False),
        (2, 1, 1),
    ),
    "gate_up_bias": (
        # (inputs in the order the kernel takes them: run_kernel binds them by position)
        lambda x, w1, b, w3: pf.silu(x @ w1.T + b) * (x @ w3.T),
        [S((96, 64), bf16), S((136, 64), bf16), S((136,), bf16), S((136, 64), bf16)],
        P(pingpong=True, tile_m=64, tile_n=64, stages=4),
        (1, 1, 1),
    ),
    "cluster_2x1": (
        lambda a, b: a @ b.T,
        [S((256, 64), bf16), S((128, 64), bf16)],
        P(pingpong=True, tile_m=64, tile_n=64, stages=2, cluster_m=2),
        (2, 1, 1),
    ),
}


def _close(got: np.ndarray, want: np.ndarray) -> None:
    g, w = got.astype(np.float64), want.astype(np.float64)
    assert np.allclose(g, w, rtol=1e-2, atol=1e-2), float(np.nanmax(np.abs(g - w)))


@pytest.mark.parametrize("name", sorted(CASES))
def test_pingpong_kernels_match_the_reference_under_interleavings(name: str) -> None:
    fn, specs, params, grid = CASES[name]
    fused = pf.fuse(fn, matmul=params)
    fusion = fused.trace(*specs)
    result = pipeline.run(
        fusion, HOPPER, params, emit=lambda st: pipeline.Emitted(emit_ptx(st.kernel_ir, HOPPER))
    )
    (stage,) = [st for st in result.kernels if st.plan.scheduler == "matmul"]
    loop = stage.kernel_ir.main_loop()
    assert loop is not None and loop.pingpong and loop.consumer_warpgroups == 2
    inputs = [p.index for p in stage.kernel_ir.params if p.role.name == "INPUT"]
    assert inputs == list(range(len(specs)))  # the kernel's inputs are the fusion's, in order
    out_tv = fusion.outputs[0]
    for seed, order in ((0, "eager"), (3, "late")):
        arrays = random_inputs(specs, seed)
        out = poison(out_tv.shape, out_tv.dtype)
        run_kernel(
            stage.kernel_ir, stage.emitted.ptx, arrays, [out], grid=grid, seed=seed, order=order
        )
        _close(out, fused.reference(*arrays))
