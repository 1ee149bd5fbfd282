"""Stream-K matmul kernels (MatmulParams(stream_k=True)) as PTX on the Hopper simulator: every
tile covered and summed once on any number of CTAs (the walk reads the grid at run time),
in clusters, with two MMAs and batches, against the reference and against the plain
persistent kernel; a fixup whose flag is never raised or whose partial sums are never added
is reported or gives a wrong result."""

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


def _kernel(
    name: str, params: pf.MatmulParams | None = None
) -> tuple[pf.FusedFunction, pf.Fusion, pipeline.KernelStages]:
    fn, specs, case_params = CASES[name]
    fused = pf.fuse(fn)
    fusion = fused.trace(*specs)
    result = pipeline.run(
        fusion,
        HOPPER,
        params or case_params,
        emit=lambda st: pipeline.Emitted(emit_ptx(st.kernel_ir, HOPPER)),
    )
    (stages,) = result.kernels
    return fused, fusion, stages


def _run(name: str, ctas: int, ptx: str | None = None, seed: int = 0) -> tuple[np.ndarray, ...]:
    fused, fusion, stages = _kernel(name)
    assert stages.emitted is not None
    _, specs, _ = CASES[name]
    arrays = random_inputs(specs, seed)
    out = poison(fusion.outputs[0].shape, fusion.outputs[0].dtype)
    kernel_ptx = ptx if ptx is not None else stages.emitted.ptx
    run_kernel(stages.kernel_ir, kernel_ptx, arrays, [out], grid=(ctas, 1, 1), seed=seed)
    return out, fused.reference(*arrays)


def _close(got: np.ndarray, want: np.ndarray) -> None:
    g, w = got.astype(np.float64), want.astype(np.float64)
    assert np.allclose(g, w, rtol=1e-2, atol=1e-2), float(np.nanmax(np.abs(g - w)))


def test_the_heuristic_kernel_has_a_workspace_whose_flags_the_launch_zeroes() -> None:
    from pyfuse.backend_ptx.matmul_host import matmul_launch

    _, _, stages = _kernel("stream_k")
    loop = stages.kernel_ir.main_loop()
    assert loop is not None and loop.stream_k is not None
    plan = loop.stream_k
    # 9 tiles of 8 K tiles: 36 CTAs of 2 K tiles each; a flag per CTA and warpgroup.
    assert stages.kernel_ir.grid == (36, 1, 1) and plan.slots == 36
    assert plan.flag_bytes >= 36 * 2 * 4 and plan.flag_bytes % 16 == 0
    workspace = stages.kernel_ir.params[-1]
    assert workspace.buffer_name == plan.buffer_name
    assert workspace.shape[0] * 4 == plan.nbytes
    launch = matmul_launch(stages.kernel_ir)
    assert launch.zeroed == (len(stages.kernel_ir.params) - 1, plan.flag_bytes)


@pytest.mark.parametrize("ctas", [1, 2, 4, 5, 7, 11, 20])
def test_every_tile_is_summed_once_on_any_number_of_ctas(ctas: int) -> None:
    # 9 tiles: whole waves (1, 3 CTAs: none split); 2 and 5 CTAs split only the last wave
    # (at least half full), 4 and 7 the last two (1 and 2 tiles left over); under one wave
    # (11, 20: an owner adds three partial sums).
    out, want = _run("stream_k", ctas, seed=ctas)
    _close(out, want)


@pytest.mark.parametrize("ctas", [2, 4])  # the launch never exceeds the grid (4)
def test_clusters_split_their_cluster_tiles_alike(ctas: int) -> None:
    out, want = _run("stream_k_cluster_bias", ctas, seed=ctas)
    _close(out, want)


@pytest.mark.parametrize("ctas", [6, 10, 14])
def test_several_clusters_split_their_cluster_tiles(ctas: int) -> None:
    # 512x192 in 64x64 tiles, 2x1 clusters: 12 cluster tiles of 5 K tiles over 3 clusters
    # (whole waves), 5 (the last two waves split) and 7 (only the last, over half full).
    specs = [pf.spec((512, 320), pf.bfloat16), pf.spec((192, 320), pf.bfloat16)]
    params = pf.MatmulParams(stream_k=True, cluster_m=2, tile_m=64, tile_n=64)
    fused = pf.fuse(lambda a, b: a @ b.T)
    fusion = fused.trace(*specs)
    result = pipeline.run(
        fusion, HOPPER, params, emit=lambda st: pipeline.Emitted(emit_ptx(st.kernel_ir, HOPPER))
    )
    (stages,) = result.kernels
    assert stages.emitted is not None and stages.kernel_ir.cluster[0] == 2
    assert stages.kernel_ir.grid[0] >= ctas
    arrays = random_inputs(specs, ctas)
    out = poison(fusion.outputs[0].shape, fusion.outputs[0].dtype)
    run_kernel(stages.kernel_ir, stages.emitted.ptx, arrays, [out], grid=(ctas, 1, 1), seed=ctas)
    _close(out, fused.reference(*arrays))


def test_the_split_kernel_matches_the_plain_persistent_one() -> None:
    # The same tiles and K order within each piece: only the fp32 sum of the pieces differs.
    fn, specs, _ = CASES["stream_k"]
    arrays = random_inputs(specs, 4)
    outs = []
    for params in (
        pf.MatmulParams(stream_k=True, tile_m=128, tile_n=64),
        pf.MatmulParams(persistent=True, tile_m=128, tile_n=64),
    ):
        fusion = pf.fuse(fn).trace(*specs)
        result = pipeline.run(
            fusion, HOPPER, params, emit=lambda st: pipeline.Emitted(emit_ptx(st.kernel_ir, HOPPER))
        )
        (stages,) = result.kernels
        assert stages.emitted is not None
        out = poison(fusion.outputs[0].shape, fusion.outputs[0].dtype)
        run_kernel(stages.kernel_ir, stages.emitted.ptx, arrays, [out], grid=(7, 1, 1))
        outs.append(out.astype(np.float64))
    ulp = np.abs(outs[1]) * 2.0**-7  # bf16 outputs: one rounding either way
    assert np.all(np.abs(outs[0] - outs[1]) <= ulp + 1e-6)


def test_a_flag_never_raised_is_a_deadlock() -> None:
    _, _, stages = _kernel("stream_k")
    assert stages.emitted is not None
    ptx, n = re.subn(
        r"^\s*@%p\d+ red\.release\.gpu\.global\.add\.u32[^\n]*\n",
        "",
        stages.emitted.ptx,
        flags=re.MULTILINE,
    )
    assert n == 1
    with pytest.raises(SimulationError, match="no CTA raised"):
        _run("stream_k", 5, ptx=ptx)


def test_partial_sums_never_added_give_a_wrong_result() -> None:
    _, _, stages = _kernel("stream_k")
    assert stages.emitted is not None
    # The fold: four additions after each vector load of a partial; drop them.
    ptx, n = re.subn(
        r"^(\s*ld\.global\.cg\.v4\.f32 [^\n]*\n)(?:\s*add\.f32 [^\n]*\n){4}",
        r"\1",
        stages.emitted.ptx,
        flags=re.MULTILINE,
    )
    assert n == 8  # 64x64 accumulators of a warpgroup: 32 registers a thread
    out, want = _run("stream_k", 5, ptx=ptx)
    with pytest.raises(AssertionError):
        _close(out, want)


@pytest.mark.parametrize(
    "name, shapes, params",
    [
        ("128x256_2x1", [(3888, 2768), (3224, 2768)], pf.MatmulParams(stream_k=True)),
        ("gate_up", [(3000, 4096), (4608, 4096), (4608, 4096)], pf.MatmulParams(stream_k=True)),
    ],
)
def test_stream_k_kernels_assemble_without_spills(
    name: str, shapes: list[tuple[int, int]], params: pf.MatmulParams
) -> None:
    from check_utils import require_ptxas

    from pyfuse.backend_ptx import ptxas

    require_ptxas()
    if name == "gate_up":
        fn = lambda x, w1, w3: pf.silu(x @ w1.T) * (x @ w3.T)  # noqa: E731
    else:
        fn = lambda a, b: a @ b.T  # noqa: E731
    fusion = pf.fuse(fn).trace(*(pf.spec(shape, pf.bfloat16) for shape in shapes))
    result = pipeline.run(
        fusion, HOPPER, params, emit=lambda st: pipeline.Emitted(emit_ptx(st.kernel_ir, HOPPER))
    )
    (stages,) = result.kernels
    assert stages.emitted is not None and stages.plan.params["stream_k"]
    assembled = ptxas.assemble(stages.emitted.ptx)
    assert assembled.problems() == [], "\n".join(assembled.problems())
    resources = assembled.kernel(stages.kernel_ir.name)
    assert resources.spill_store_bytes == resources.local_bytes == 0
