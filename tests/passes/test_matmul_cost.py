"""The matmul cost model (:mod:`pyfuse.passes.matmul_cost`) and its fit
(``benchmarks/fit_cost_model.py``): features count waves and work as the kernel runs them,
the hand table ranks tiles as the heuristic always has, and a fit to measurements made by a
known model recovers that model's choices."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from pyfuse.ir.target import HOPPER
from pyfuse.passes import matmul_tiles
from pyfuse.passes.matmul_cost import CostModel, Problem, Schedule, features, hand_table
from pyfuse.passes.matmul_tiles import FILL_TILES, filling_tiles

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import fit_cost_model


def test_features_count_waves_and_the_even_share() -> None:
    # 148 tiles of 128x256 on 132 SMs: two waves, the second nearly empty.
    found = features(Problem(256, 18944, 4096), Schedule(128, 256), 132)
    tile_work = 128 * 256 * 4096 / 2**30
    assert found["mma 128x256 waves"] == pytest.approx(2 * tile_work)
    assert found["mma 128x256 share"] == pytest.approx(148 / 132 * tile_work)
    assert found["tiles"] == 2 and found["launches"] == 1 and found["partials"] == 0
    # A 2x1 cluster takes pairs of M tiles on 66 slots; stream-K spreads the work evenly.
    clustered = features(Problem(4096, 4096, 4096), Schedule(128, 256, cluster=2), 132)
    assert clustered["tiles"] == 4 and clustered["mma in a cluster"] > 0
    streamed = features(
        Problem(4096, 4096, 4096),
        Schedule(128, 256, cluster=2, persistent=True, stream_k=True),
        132,
    )
    assert streamed["tiles"] == pytest.approx(256 / 66) and streamed["partials"] > 0
    split = features(Problem(256, 3072, 8192), Schedule(128, 256, splitk=2), 132)
    assert split["launches"] == 2 and split["partials"] == pytest.approx(256 * 3072 * 2 / 2**20)
    assert split["mma 128x256 waves"] == pytest.approx(128 * 256 * 4096 / 2**30)


def test_the_hand_table_ranks_tiles_by_waves_times_area_over_throughput() -> None:
    hand = hand_table({(m, n): value for m, n, value in FILL_TILES})
    problem = Problem(256, 8192, 4096)
    # 64 tiles of 128x256 (one wave) against 128 of 128x128 (one wave, half the area).
    wide = hand.estimate(problem, Schedule(128, 256), 132)
    narrow = hand.estimate(problem, Schedule(128, 128), 132)
    assert narrow / wide == pytest.approx(0.5 / 0.9)
    assert hand.knows(Schedule(128, 192)) and not hand.knows(Schedule(128, 96))


@pytest.mark.parametrize(
    "m, n, k, want",
    [(256, 8192, 4096, (128, 128)), (256, 18944, 3584, (128, 160)), (8192, 8192, 8192, (128, 256))],
)
def test_filling_tiles_picks_by_the_model(m: int, n: int, k: int, want: tuple[int, int]) -> None:
    shape = {"m": m, "n": n, "k": k, "batch": 1}
    assert filling_tiles(shape, 128, 256, HOPPER) == want


def test_a_fitted_model_decides_where_it_knows_every_tile(monkeypatch: pytest.MonkeyPatch) -> None:
    # A model under which 64x128 tiles are nearly free: it picks them wherever it knows all
    # the options, and the hand table decides where it does not.
    weights = {f"mma {m}x{n} waves": 1.0 for m, n, _ in FILL_TILES}
    weights["mma 64x128 waves"] = 1e-3
    monkeypatch.setattr(matmul_tiles, "FITTED", CostModel(weights, "test"))
    shape = {"m": 4096, "n": 4096, "k": 4096, "batch": 1}
    assert filling_tiles(shape, 128, 256, HOPPER) == (64, 128)
    assert filling_tiles(shape, 128, 96, HOPPER) == (128, 96)


def test_nonnegative_least_squares_matches_a_known_solution() -> None:
    rng = np.random.default_rng(0)
    a = rng.random((40, 5))
    truth = np.array([0.0, 2.0, 0.5, 0.0, 1.0])
    b = a @ truth
    assert np.allclose(fit_cost_model.nonnegative_least_squares(a, b), truth, atol=1e-8)
    # An unconstrained optimum with a negative weight is clipped to the best non-negative one.
    x = fit_cost_model.nonnegative_least_squares(a, a @ np.array([1.0, -1.0, 0, 0, 0]))
    assert (x >= 0).all()


SHAPES = (
    (256, 18944, 3584), (4096, 4096, 4096), (512, 5632, 2048), (3000, 4608, 3584),
    (1024, 8192, 1024), (2048, 3072, 8192), (128, 14336, 4096), (8192, 8192, 128),
)  # fmt: skip


def _synthetic(path: Path) -> CostModel:
    """gemm_shapes --autotune JSON whose times a known model made (power capped: a part
    wave costs its share; clusters 4% faster; a tile's fixed cost)."""
    truth = CostModel(
        {
            "mma 128x256 share": 1.0,
            "mma 128x192 share": 1.06,
            "mma 128x128 share": 1.12,
            "mma 64x256 share": 1.3,
            "mma 64x128 share": 1.5,
            "mma 128x256 waves": 0.1,
            "mma 128x192 waves": 0.1,
            "mma 128x128 waves": 0.1,
            "mma 64x256 waves": 0.1,
            "mma 64x128 waves": 0.1,
            "mma in a cluster": -0.04,
            "tiles": 0.002,
            "launches": 0.005,
        },
        "truth",
    )
    rows = []
    for m, n, k in SHAPES:
        trials = []
        for config, schedule in (
            ("heuristic", Schedule(128, 256)),
            ("tile 128x192", Schedule(128, 192)),
            ("tile 128x128", Schedule(128, 128)),
            ("tile 64x256", Schedule(64, 256)),
            ("tile 64x128", Schedule(64, 128)),
            ("cluster_m=2", Schedule(128, 256, cluster=2)),
        ):
            ms = truth.estimate(Problem(m, n, k), schedule, 132)
            params = {"tile_m": schedule.tile_m, "tile_n": schedule.tile_n, "tile_k": 64,
                      "cluster_m": schedule.cluster, "cluster_n": 1}  # fmt: skip
            trials.append([config, params, ms])
        rows.append({"shape": f"{m}x{n}x{k} NT", "trials": trials})
    path.write_text(json.dumps({"rows": rows}))
    return truth


def test_the_fit_recovers_a_known_models_choices(tmp_path: Path) -> None:
    path = tmp_path / "tuned.json"
    truth = _synthetic(path)
    trials = fit_cost_model.read_trials([path])
    assert len(trials) == 48
    model = fit_cost_model.fit(trials, frozenset({"mma in a cluster"}), "test")
    for trial in trials:
        estimate = model.estimate(trial.problem, trial.schedule, 132)
        assert estimate == pytest.approx(trial.ms, rel=1e-6)
    assert model.weights["mma in a cluster"] == pytest.approx(truth.weights["mma in a cluster"])
    results = fit_cost_model.held_out(trials, frozenset({"mma in a cluster"}))
    assert len(results) == 8
    assert fit_cost_model.geomean([e["fit"] for e in results.values()]) < 1.01
    assert fit_cost_model.main([str(path)]) == 0


@pytest.mark.parametrize(
    "m, n, k",
    [
        (8192, 8192, 1024),
        (3888, 3224, 2768),
        (256, 18944, 3584),
        (1000, 1000, 1000),
        (64, 4096, 512),
    ],
)
def test_the_waves_are_those_the_compiled_kernel_runs(m: int, n: int, k: int) -> None:
    """The model counts the waves of the grid the heuristic's kernel launches: persistent CTAs
    (or clusters) each take the same number of tiles, give or take one; one-tile CTAs fill
    waves of one per SM."""
    import math

    import pyfuse as pf

    compiled = pf.fuse(lambda a, b: a @ b.T).compile(
        pf.spec((m, k), pf.bfloat16), pf.spec((n, k), pf.bfloat16)
    )
    (kernel,) = [kernel for kernel in compiled.kernels if kernel.scheduler == "matmul"]
    schedule = Schedule.of(kernel.params)
    cluster_tiles = (
        math.ceil(math.ceil(m / schedule.tile_m) / schedule.cluster)
        * math.ceil(n / schedule.tile_n)
        * schedule.splitk
    )
    ctas = kernel.grid[0] * kernel.grid[1] * kernel.grid[2]
    if schedule.persistent:
        waves = math.ceil(cluster_tiles / (ctas // schedule.cluster))
    else:
        waves = math.ceil(ctas / HOPPER.sm_count)
    found = features(Problem(m, n, k), schedule, HOPPER.sm_count)
    assert found["tiles"] == waves


def test_a_split_k_trial_is_read_with_its_parts(tmp_path: Path) -> None:
    """A split-K variant's params say ``splitk=1`` (the split is a batch of parts in the
    matmul kernel): the fit reads the parts from the kernel's problem."""
    params = {"tile_m": 128, "tile_n": 192, "splitk": 1, "kernel_problem": [256, 3072, 2048, 4]}
    row = {"shape": "256x3072x8192 NT", "trials": [["heuristic", params, 0.05]]}
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps({"rows": [row]}))
    (trial,) = fit_cost_model.read_trials([path])
    assert trial.schedule.splitk == 4 and trial.problem == Problem(256, 3072, 8192)
    found = features(trial.problem, trial.schedule, 132)
    assert found["launches"] == 2 and found["partials"] > 0
