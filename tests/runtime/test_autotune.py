"""Autotuning's CPU-side guarantees: the candidates vary only what the user left open and
what the output can use; a stored winner is read back (a damaged record is a miss); a
function that autotunes compiles with the remembered params; bad arguments are clear errors.
The timing itself runs on the GPU (tests/gpu/test_gpu_autotune.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import pyfuse as pf
from pyfuse import knobs
from pyfuse.ir.params import MatmulParams
from pyfuse.runtime import autotune
from pyfuse.runtime.launch import target_for

WIDE = {
    "tile_m": 128,
    "tile_n": 256,
    "tile_k": 64,
    "stages": 4,
    "grid_swizzle": 16,
    "persistent": True,
    "splitk": 1,
    "cluster_m": 2,
    "cluster_n": 1,
    "smem_epilogue": False,
}


def test_candidates_start_with_the_heuristic_and_are_distinct() -> None:
    found = autotune.candidates(WIDE, None, sm_count=132, grid_ctas=132)
    assert found[0] == MatmulParams()
    assert len(found) == len(set(found)) <= autotune.MAX_CANDIDATES
    tiles = {(c.tile_m, c.tile_n) for c in found if c.tile_m}
    assert (128, 128) in tiles and (256, 128) in tiles and (128, 256) not in tiles
    assert MatmulParams(cluster_m=1) in found and MatmulParams(grid_swizzle=8) in found
    assert all(c.splitk is None for c in found)  # a persistent grid fills the SMs
    assert MatmulParams(stream_k=True) in found
    # Where the heuristic chose stream-K, the plain persistent kernel is the candidate.
    streamed = autotune.candidates(dict(WIDE, stream_k=True), None, sm_count=132, grid_ctas=132)
    assert MatmulParams(stream_k=False) in streamed and MatmulParams(stream_k=True) not in streamed


def test_candidates_keep_the_users_fields_and_the_outputs_width() -> None:
    narrow = dict(WIDE, tile_m=64, tile_n=40, persistent=False, cluster_m=1, grid_swizzle=1)
    found = autotune.candidates(narrow, MatmulParams(grid_swizzle=1), sm_count=132, grid_ctas=3)
    assert all(c.grid_swizzle is None for c in found)  # the user's field is never varied
    assert all(c.tile_n is None or c.tile_n <= 128 for c in found)
    assert all(c.tile_m in (None, 64) for c in found)  # 64 rows: M is at most 64
    assert MatmulParams(splitk=2) in found and MatmulParams(splitk=4) in found


def test_a_stored_winner_is_remembered_and_a_damaged_record_is_a_miss(tmp_path: Path) -> None:
    with knobs.overrides(cache_dir=tmp_path):
        autotune.forget()
        path = autotune.record_path("k1")
        path.parent.mkdir(parents=True)
        params = {"tile_m": 128, "tile_n": 128, "grid_swizzle": 8}
        path.write_text(json.dumps({"format": autotune.FORMAT, "params": params}))
        assert autotune.remembered("k1") == MatmulParams(**params)
        autotune.record_path("k2").write_text("{not json")
        assert autotune.remembered("k2") is None
        autotune.record_path("k3").write_text(json.dumps({"format": 0, "params": params}))
        assert autotune.remembered("k3") is None
        assert autotune.remembered(None) is None
        autotune.forget()


def _linear() -> pf.FusedFunction:
    return pf.fuse(lambda x, w: pf.linear(x, w), name="tuned_linear", autotune=True)


def test_a_function_that_autotunes_compiles_with_the_remembered_params(tmp_path: Path) -> None:
    args = (pf.spec((2048, 512), pf.bfloat16), pf.spec((4096, 512), pf.bfloat16))
    fused = _linear()
    with knobs.overrides(cache_dir=tmp_path):
        autotune.forget()
        assert fused.compile(*args).kernels[0].params["tile_n"] == 256  # nothing stored yet
        key = autotune.tune_key(fused.trace(*args), target_for(None), "no GPU", None)
        assert key is not None
        path = autotune.record_path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"format": autotune.FORMAT, "params": {"tile_n": 128}}))
        tuned = _linear().compile(*args)  # a new function: its own in-memory variants
        assert tuned.kernels[0].params["tile_n"] == 128
        untuned = pf.fuse(lambda x, w: pf.linear(x, w), name="tuned_linear").compile(*args)
        assert untuned.kernels[0].params["tile_n"] == 256
        with knobs.overrides(autotune=False):
            assert _linear().compile(*args).kernels[0].params["tile_n"] == 256
        autotune.forget()


def test_autotune_must_be_a_bool() -> None:
    with pytest.raises(pf.FusionError, match="autotune must be True or False"):
        pf.fuse(lambda x: x, autotune="yes")  # type: ignore[arg-type]


def test_tiles_that_fill_the_waves_are_tried_where_the_default_leaves_them_empty() -> None:
    # 3000x1600 at 128x256: 168 tiles, 2 waves on 132 SMs with 56% of them computing;
    # 128x160 makes 240 tiles (89%), 128x112 420 (85%).
    assert autotune.filling_widths((3000, 1600, 1), 128, 256, 132) == [160, 112]
    assert autotune.filling((3000, 1600, 1), 128, 160, 132) > 0.88
    # 8192^3 fills its 16 waves nearly whole already: nothing to add.
    assert autotune.filling_widths((8192, 8192, 1), 128, 256, 132) == []
    found = autotune.candidates(WIDE, None, sm_count=132, grid_ctas=132, problem=(3000, 1600, 1))
    assert MatmulParams(tile_m=128, tile_n=160) in found
    assert len(found) <= autotune.MAX_CANDIDATES
    # A decode output: 112 tiles of 64x128 leave 20 SMs idle, 128 of 64x112 nearly none.
    decode = dict(WIDE, tile_m=64, tile_n=128, persistent=False, cluster_m=1)
    found = autotune.candidates(decode, None, sm_count=132, grid_ctas=112, problem=(16, 14336, 1))
    assert MatmulParams(tile_m=64, tile_n=112) in found
    assert all(c.tile_m in (None, 64) for c in found)


def test_a_trial_records_what_its_matmul_kernel_computes() -> None:
    """The autotune record's facts of a trial (the cost model's data): the resolved params,
    the matmul kernel's M, N, K and batch (split-K's parts are its batch: the params say
    ``splitk=1``) and the kernels launched."""
    import warnings

    import pyfuse as pf
    from pyfuse.runtime import autotune

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        split = pf.fuse(lambda a, b: a @ b.T).compile(
            pf.spec((256, 8192), pf.bfloat16), pf.spec((3072, 8192), pf.bfloat16)
        )
        whole = pf.fuse(lambda a, b: a @ b.T).compile(
            pf.spec((4096, 1024), pf.bfloat16), pf.spec((4096, 1024), pf.bfloat16)
        )
    facts = autotune._trial_facts(split)
    assert facts is not None
    assert facts["kernel_problem"] == [256, 3072, 2048, 4] and facts["kernels"] == 2
    assert facts["splitk"] == 1 and facts["tile_m"] == 128
    facts = autotune._trial_facts(whole)
    assert facts is not None
    assert facts["kernel_problem"] == [4096, 4096, 1024, 1] and facts["kernels"] == 1
