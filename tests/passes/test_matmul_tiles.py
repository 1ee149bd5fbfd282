"""The matmul heuristic's tile shape and persistent grid (passes/matmul_tiles.py)."""

from __future__ import annotations

import pytest

from pyfuse.ir.target import HOPPER
from pyfuse.passes.matmul_tiles import default_tiles, filling_tiles, persistent_ctas


@pytest.mark.parametrize(
    "m_tiles, n_tiles, batch, cluster_m, ctas",
    [
        (64, 32, 1, 2, 128),  # 8192^3 at 128x256, 2x1 clusters: 16 waves of 64 clusters
        (64, 32, 1, 1, 128),  # the same tiles, one CTA each: 16 waves of 128
        (133, 1, 1, 1, 67),  # one tile past a wave: two waves of 67 and 66
        (132, 1, 1, 1, 132),  # exactly one wave
        (5, 2, 1, 1, 10),  # under a wave: one CTA per tile
        (3, 5, 3, 2, 60),  # 2 x 5 cluster tiles in each of 3 batches: one wave of 30 clusters
    ],
)
def test_a_persistent_grid_takes_whole_waves(
    m_tiles: int, n_tiles: int, batch: int, cluster_m: int, ctas: int
) -> None:
    got = persistent_ctas(m_tiles, n_tiles, batch, cluster_m, 1, HOPPER.sm_count)
    assert got == ctas


def test_no_fewer_ctas_would_take_as_few_waves() -> None:
    for tiles in range(1, 3 * HOPPER.sm_count):
        ctas = persistent_ctas(tiles, 1, 1, 1, 1, HOPPER.sm_count)
        waves = -(-tiles // min(tiles, HOPPER.sm_count))
        assert ctas <= HOPPER.sm_count and -(-tiles // ctas) == waves
        assert ctas == 1 or -(-tiles // (ctas - 1)) > waves


def test_the_default_tile_and_smaller_ones_that_fill_the_last_wave() -> None:
    assert default_tiles(4096, 14336, single_mma=True) == (128, 256)
    assert default_tiles(4096, 14336, single_mma=False) == (128, 128)  # a gate/up pair
    assert default_tiles(16, 24, single_mma=True) == (64, 24)
    # 256 x 8192: 64 tiles of 128x256 fill half the SMs; 128 of 128x128 nearly all.
    shape = {"m": 256, "n": 8192, "k": 4096, "batch": 1}
    assert filling_tiles(shape, 128, 256, HOPPER) == (128, 128)
    # 8192 x 8192 fills 15.5 waves either way: the default stays.
    shape = {"m": 8192, "n": 8192, "k": 8192, "batch": 1}
    assert filling_tiles(shape, 128, 256, HOPPER) == (128, 256)


def test_a_wave_left_a_third_empty_takes_narrower_tiles() -> None:
    """256 x 10240: 80 tiles of 128x256 leave 52 SMs idle; 128 of 128x160 fill nearly all of
    the one wave (on the H100: 1.01x torch, where 128x192 ran 0.96x and 128x256 0.86x)."""
    shape = {"m": 256, "n": 10240, "k": 8192, "batch": 1}
    assert filling_tiles(shape, 128, 256, HOPPER) == (128, 160)
    # An N-major B operand's XOR swizzle needs a power-of-two tile width.
    assert filling_tiles(shape, 128, 256, HOPPER, n_major_b=True) == (128, 256)


def test_160_wide_tiles_fill_the_waves_of_a_narrow_n() -> None:
    """3000 x 1600: 168 tiles of 128x256 take two waves, the second a quarter full; 240 of
    128x160 take two nearly full ones of 5/8 the work (on the H100: 0.89x torch, 128x192
    0.80x). Not for an N-major B."""
    shape = {"m": 3000, "n": 1600, "k": 6400, "batch": 1}
    assert filling_tiles(shape, 128, 256, HOPPER) == (128, 160)
    assert filling_tiles(shape, 128, 256, HOPPER, n_major_b=True)[1] in (128, 256)


def test_an_n_major_b_operand_keeps_a_tensor_core_plan() -> None:
    """3888x3224x2768 with B stored (K, N): 128x192 would fit the waves, but its swizzle
    cannot split 192 columns, and the failed plan ran as multiply+sum."""
    import pyfuse as pf
    from pyfuse.passes import pipeline

    specs = (pf.spec((3888, 2768), pf.bfloat16), pf.spec((2768, 3224), pf.bfloat16))
    result = pipeline.run(pf.fuse(lambda a, b: a @ b).trace(*specs), HOPPER)
    ((stages),) = result.kernels
    assert stages.plan.scheduler == "matmul" and "fallback" not in stages.plan.params


def test_a_matmul_config_the_kernel_cannot_take_falls_back_to_the_heuristic() -> None:
    import pyfuse as pf
    from pyfuse.passes import pipeline

    specs = (pf.spec((512, 256), pf.bfloat16), pf.spec((256, 768), pf.bfloat16))
    fusion = pf.fuse(lambda a, b: a @ b).trace(*specs)
    with pytest.warns(UserWarning, match="runs with the heuristic's params"):
        result = pipeline.run(fusion, HOPPER, pf.MatmulParams(tile_m=128, tile_n=192))
    ((stages),) = result.kernels
    assert stages.plan.scheduler == "matmul"
    assert stages.plan.params["fallback"] == "heuristic matmul"


def _params_of(params: object | None, shape: tuple[int, int, int] = (3000, 4608, 3584)) -> dict:
    import pyfuse as pf
    from pyfuse.passes import pipeline

    m, n, k = shape
    specs = (pf.spec((m, k), pf.bfloat16), pf.spec((n, k), pf.bfloat16))
    fusion = pf.fuse(lambda a, b: a @ b.T).trace(*specs)
    ((stages),) = pipeline.run(fusion, HOPPER, params).kernels  # type: ignore[arg-type]
    assert stages.plan.scheduler == "matmul"
    return dict(stages.plan.params) | {"grid": stages.kernel_ir.grid}


def test_stream_k_is_asked_for_and_makes_the_kernel_persistent_on_every_sm() -> None:
    import pyfuse as pf

    assert _params_of(None)["stream_k"] is False  # the heuristic does not choose it
    chosen = _params_of(pf.MatmulParams(stream_k=True))
    assert chosen["stream_k"] is True and chosen["persistent"] is True
    assert chosen["grid"] == (HOPPER.sm_count, 1, 1)  # 66 workers of 2x1 clusters
    small = _params_of(pf.MatmulParams(stream_k=True, tile_n=64), (64, 64, 256))
    assert small["grid"] == (2, 1, 1)  # one tile of 4 K tiles: two workers of two


def test_stream_k_with_ping_pong_is_refused_with_a_warning() -> None:
    import pyfuse as pf

    with pytest.warns(UserWarning, match="stream_k=True"):
        chosen = _params_of(pf.MatmulParams(stream_k=True, pingpong=True))
    assert chosen["stream_k"] is False and chosen["pingpong"] is True


@pytest.mark.parametrize("tile", [(64, 256, False), (256, 128, False), (128, 192, True)])
def test_a_tile_whose_accumulators_crowd_the_registers_is_refused_and_does_not_spill(
    tile: tuple[int, int, bool],
) -> None:
    """The gate/up pair keeps two accumulators a tile: 64x256 and 256x128 (256 registers a
    thread) and 128x192 (192 of the 200 left beside the epilogue warps) spilled 4 B to
    3.5 KB; the heuristic's tile does not. (128x192 without the epilogue warps, 192 of 232,
    does not spill.)"""
    import warnings

    from check_utils import require_ptxas

    import pyfuse as pf
    from pyfuse.backend_ptx.emit import emit_ptx
    from pyfuse.backend_ptx.ptxas import assemble
    from pyfuse.passes import pipeline

    specs = [pf.spec((4096, 4096), pf.bfloat16)] + 2 * [pf.spec((14336, 4096), pf.bfloat16)]
    fusion = pf.fuse(lambda x, w1, w3: pf.silu(x @ w1.T) * (x @ w3.T)).trace(*specs)
    params = pf.MatmulParams(tile_m=tile[0], tile_n=tile[1], epilogue_warps=tile[2] or None)
    with pytest.warns(UserWarning, match="accumulator registers a thread"):
        ((stage),) = pipeline.run(fusion, HOPPER, params).kernels
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ((heuristic),) = pipeline.run(fusion, HOPPER).kernels
    assert stage.plan.params == heuristic.plan.params
    assert stage.plan.params["epilogue_warps"] is True  # the heuristic's, for this shape
    require_ptxas()
    resources = assemble(emit_ptx(stage.kernel_ir, HOPPER)).kernels[stage.kernel_ir.name]
    assert resources.spill_store_bytes == resources.local_bytes == 0


def test_a_users_tile_that_fits_without_the_heuristics_epilogue_warps_keeps_them_off() -> None:
    """gate/up at 128x192: 192 accumulators a thread fit the 232 registers of the consumers
    alone, not the 200 left beside the epilogue warps the heuristic would add; the user's
    tile wins, without a warning and without spills."""
    import warnings

    from check_utils import require_ptxas

    import pyfuse as pf
    from pyfuse.backend_ptx.emit import emit_ptx
    from pyfuse.backend_ptx.ptxas import assemble
    from pyfuse.passes import pipeline

    specs = [pf.spec((4096, 4096), pf.bfloat16)] + 2 * [pf.spec((14336, 4096), pf.bfloat16)]
    fusion = pf.fuse(lambda x, w1, w3: pf.silu(x @ w1.T) * (x @ w3.T)).trace(*specs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ((stage),) = pipeline.run(fusion, HOPPER, pf.MatmulParams(tile_m=128, tile_n=192)).kernels
    params = stage.plan.params
    assert (params["tile_m"], params["tile_n"], params["epilogue_warps"]) == (128, 192, False)
    require_ptxas()
    resources = assemble(emit_ptx(stage.kernel_ir, HOPPER)).kernels[stage.kernel_ir.name]
    assert resources.spill_store_bytes == resources.local_bytes == 0
