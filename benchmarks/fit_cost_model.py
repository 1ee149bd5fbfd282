"""Fit the matmul heuristic's cost model (:mod:`pyfuse.passes.matmul_cost`) to autotune
measurements, and say whether its choices beat the hand table's.

    PYTHONPATH=. python3 benchmarks/gemm_shapes.py --autotune --json tuned.json   (GPU)
    PYTHONPATH=. python3 benchmarks/fit_cost_model.py tuned.json [more.json ...]   (CPU)

Every timed config of every shape is a data point (its features, its time); the weights
minimize the squared relative error, non-negative except the signed ones, by
:func:`nonnegative_least_squares`. The choice checked is the one the heuristic makes with the
model: the tile, among the shape's heuristic and tile-only trials. Held out shape by shape
(fitted without it), the fit's choices and the hand table's are each compared with the
fastest of those trials, as a geomean of time over the fastest. Prints the weights as a
Python literal for ``matmul_tiles.FITTED`` and a table for ``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pyfuse.passes.matmul_cost import SIGNED, CostModel, Problem, Schedule, features, hand_table
from pyfuse.passes.matmul_tiles import FILL_TILES

SM_COUNT = 132  # the H100 and H200 both


@dataclass(frozen=True)
class Trial:
    shape: str
    problem: Problem
    config: str  # the autotuner's name for it: "heuristic", "tile 128x128", "cluster_m=1", ...
    schedule: Schedule
    ms: float

    @property
    def decides_tile(self) -> bool:
        """A trial among which the heuristic's tile choice picks."""
        return self.config == "heuristic" or (
            self.config.startswith("tile ") and " " not in self.config[5:]
        )


def read_trials(paths: list[Path]) -> list[Trial]:
    trials = []
    for path in paths:
        for row in json.loads(path.read_text())["rows"]:
            dims, _layout = row["shape"].split()
            m, n, k = (int(x) for x in dims.split("x"))
            for config, params, ms in row.get("trials") or []:
                schedule = Schedule.of(params)
                # Split-K is a batch of parts in the matmul kernel (its params say splitk=1).
                kernel_problem = params.get("kernel_problem")
                if kernel_problem and kernel_problem[3] > 1:
                    schedule = dataclasses.replace(schedule, splitk=int(kernel_problem[3]))
                trials.append(Trial(row["shape"], Problem(m, n, k), config, schedule, float(ms)))
    return trials


def nonnegative_least_squares(a: np.ndarray, b: np.ndarray, iterations: int = 500) -> np.ndarray:
    """``argmin |a x - b|`` over ``x >= 0`` (Lawson and Hanson's active set method)."""
    columns = a.shape[1]
    x = np.zeros(columns)
    passive = np.zeros(columns, dtype=bool)
    for _ in range(iterations):
        gradient = a.T @ (b - a @ x)
        free = ~passive & (gradient > 1e-12 * max(1.0, float(np.abs(gradient).max())))
        if not free.any():
            break
        passive[int(np.argmax(np.where(free, gradient, -np.inf)))] = True
        while True:
            z = np.zeros(columns)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            shrinking = passive & (z <= 0)
            steps = x[shrinking] / (x[shrinking] - z[shrinking])
            x = x + float(steps.min()) * (z - x)
            passive &= x > 1e-15
            x[~passive] = 0.0
    return x


def fit(trials: list[Trial], signed: frozenset[str], source: str) -> CostModel:
    """The weights of least squared relative error over ``trials``."""
    rows = [features(t.problem, t.schedule, SM_COUNT) for t in trials]
    names = sorted({name for row in rows for name in row})
    # A signed weight is two non-negative ones: its feature, and its feature negated.
    columns = names + [f"-{name}" for name in names if name in signed]
    a = np.array(
        [
            [row.get(c, 0.0) if not c.startswith("-") else -row.get(c[1:], 0.0) for c in columns]
            for row in rows
        ]
    )
    times = np.array([t.ms for t in trials])
    weights = nonnegative_least_squares(a / times[:, None], np.ones(len(trials)))
    found = dict.fromkeys(names, 0.0)
    for column, weight in zip(columns, weights, strict=True):
        if column.startswith("-"):
            found[column[1:]] -= float(weight)
        else:
            found[column] += float(weight)
    return CostModel({k: v for k, v in found.items() if v}, source, signed)


def choice(model: CostModel, trials: list[Trial]) -> Trial:
    """The tile trial the model estimates fastest (ties: the heuristic's, then the first)."""
    candidates = [t for t in trials if t.decides_tile]
    return min(
        candidates,
        key=lambda t: (model.estimate(t.problem, t.schedule, SM_COUNT), t.config != "heuristic"),
    )


def held_out(trials: list[Trial], signed: frozenset[str]) -> dict[str, dict[str, float]]:
    """Per shape with a tile choice: time over the fastest of its tile trials for the fit
    (without the shape), the hand table, and the heuristic as run."""
    by_shape: dict[str, list[Trial]] = {}
    for trial in trials:
        by_shape.setdefault(trial.shape, []).append(trial)
    hand = hand_table({(m, n): value for m, n, value in FILL_TILES})
    results = {}
    for shape, own in by_shape.items():
        deciding = [t for t in own if t.decides_tile]
        if len(deciding) < 2 or not any(t.config == "heuristic" for t in deciding):
            continue
        fastest = min(t.ms for t in deciding)
        model = fit([t for t in trials if t.shape != shape], signed, "held out")
        heuristic = next(t for t in deciding if t.config == "heuristic")
        entry = {"fit": choice(model, own).ms / fastest, "heuristic": heuristic.ms / fastest}
        if all(hand.knows(t.schedule) for t in deciding):
            entry["hand"] = choice(hand, own).ms / fastest
        results[shape] = entry
    return results


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", nargs="+", type=Path, help="gemm_shapes.py --autotune output")
    parser.add_argument("--source", default="", help="commit, GPU and date of the measurements")
    args = parser.parse_args(argv)
    trials = read_trials(args.json)
    if not trials:
        raise SystemExit("no trials: run gemm_shapes.py with --autotune and a fresh cache")
    signed = SIGNED
    model = fit(trials, signed, args.source or ", ".join(str(p) for p in args.json))
    errors = [model.estimate(t.problem, t.schedule, SM_COUNT) / t.ms - 1.0 for t in trials]
    print(f"{len(trials)} trials of {len({t.shape for t in trials})} shapes")
    print(
        f"relative error: median {np.median(np.abs(errors)):.3f}, max {np.max(np.abs(errors)):.3f}"
    )
    print("\n| feature | weight |\n|---|---|")
    for name, weight in sorted(model.weights.items()):
        print(f"| {name} | {weight:.4g} |")
    results = held_out(trials, signed)
    print(f"\nheld out, time over the fastest tile trial ({len(results)} shapes):")
    for label in ("heuristic", "hand", "fit"):
        values = [entry[label] for entry in results.values() if label in entry]
        print(
            f"  {label:10s} geomean {geomean(values):.4f}  worst {max(values, default=1):.3f}"
            f"  ({len(values)} shapes)"
        )
    changed = [s for s, e in results.items() if abs(e["fit"] - e["heuristic"]) > 1e-9]
    print(f"  the fit chooses another tile than the heuristic for {len(changed)} shapes")
    print("\nFITTED = CostModel(\n    {")
    for name, weight in sorted(model.weights.items()):
        print(f"        {name!r}: {weight:.6g},")
    print(f"    }},\n    {model.source!r},\n)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
