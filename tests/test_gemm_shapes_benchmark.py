"""benchmarks/gemm_shapes.py without a GPU: the public shape set reads into every class, and
the dry run compiles each shape's kernels."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import gemm_shapes  # noqa: E402


def test_the_shape_set_covers_every_class_and_layout() -> None:
    shapes = gemm_shapes.read_shapes()
    assert len(shapes) == 98
    assert {s.kind for s in shapes} == set(gemm_shapes.CLASSES)
    assert {s.layout for s in shapes} == {"NN", "NT", "TN", "TT"}
    tn = next(s for s in shapes if s.layout == "TN")
    assert tn.stored() == ((tn.k, tn.m), (tn.k, tn.n))


def test_the_dry_run_compiles_shapes_of_every_class() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "gemm_shapes.py",
            "--dry-run",
            "--only",
            "decode",
            "ragged",
            "--limit",
            "3",
        ],
        cwd=BENCHMARKS,
        capture_output=True,
        text=True,
        check=True,
    )
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 3 and all(" grid=" in line for line in lines), done.stdout


def test_the_tuned_rows_keep_every_trial_of_the_record_written(tmp_path: Path) -> None:
    """With --autotune, a row keeps [config, resolved params, ms] of each trial of the
    autotune record its tuning wrote (the cost model's data); none where nothing was timed."""
    import json
    import time

    since = time.time()
    assert gemm_shapes._trials(tmp_path, since) is None
    record = {
        "trials": [["heuristic", 1.5], ["tile 128x128", 1.25]],
        "trial_params": [
            [{"tile_m": 128, "tile_n": 256}, 1.5],
            [{"tile_m": 128, "tile_n": 128}, 1.25],
        ],
    }
    (tmp_path / "key.json").write_text(json.dumps(record))
    assert gemm_shapes._trials(tmp_path, since) == [
        ["heuristic", {"tile_m": 128, "tile_n": 256}, 1.5],
        ["tile 128x128", {"tile_m": 128, "tile_n": 128}, 1.25],
    ]


def test_interleaved_rounds_time_every_function_in_turn_and_keep_medians() -> None:
    calls: list[str] = []
    clock = iter([3.0, 10.0, 1.0, 11.0, 2.0, 30.0])  # a, b, a, b, a, b

    def fake_bench(function, warmup: int, rep: int) -> float:  # type: ignore[no-untyped-def]
        calls.append(function())
        return next(clock)

    medians = gemm_shapes.interleaved(fake_bench, [lambda: "a", lambda: "b"], rounds=3)
    assert calls == ["a", "b"] * 3  # in turn, so a slow stretch falls on both
    assert medians == [2.0, 11.0]
    # At least one round, whatever is asked.
    assert gemm_shapes.interleaved(lambda f, **_: 4.0, [lambda: 0], 0) == [4.0]


def test_the_dry_run_of_named_shapes_prints_the_heuristics_stream_k_choice() -> None:
    def dry_run(*shapes: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "gemm_shapes.py", "--dry-run", "--shapes", *shapes]
        return subprocess.run(command, cwd=BENCHMARKS, capture_output=True, text=True)

    done = dry_run("9560x1792x8432", "8192x8192x3072")
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and len(lines) == 2, done.stdout + done.stderr
    chosen = {line.split()[0]: "stream_k=True" in line for line in lines}
    assert chosen == {"9560x1792x8432": True, "8192x8192x3072": False}
    missing = dry_run("1x2x3")
    assert missing.returncode != 0 and "1x2x3" in missing.stderr
