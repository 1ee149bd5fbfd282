"""Every shape of the public GEMM set (``benchmarks/gemm_shapes.csv``: LLM projections from
decode to long prefill, small K or N, squares and ragged sizes, four layouts) against
torch.matmul, in one run.

    PYTHONPATH=. python3 benchmarks/gemm_shapes.py [--only CLASS ...] [--shapes MxNxK ...]
        [--limit N] [--rounds N] [--compare FIELD=VALUE ...] [--autotune] [--json F]
    PYTHONPATH=. python3 benchmarks/gemm_shapes.py --dry-run     # compile only, no GPU

Each shape gets fresh bf16 data (each operand scaled by K**-0.25, so the product is of unit
size; never zeros), is checked against an fp32
reference (``torch.matmul`` of the fp32 copies) before it is timed, and is timed with
``triton.testing.do_bench`` (median) against ``torch.matmul`` on the same tensors: the ratio
is torch's time over pyfuse's (above 1.0 pyfuse is faster). Printed: each shape's ratio, the
geomean over all shapes and per class (``decode``: M <= 64; else the CSV's source when it is
``small-k-or-n``, ``square`` or ``ragged``; else ``llm-prefill``). ``--rounds N`` times pyfuse,
torch (and ``--compare``'s variant) in turn N times and keeps each one's median: single
timings of a shape move by 2-3% on the shared machines, as much as the choices compared.
``--dry-run`` compiles every
shape's kernels (no device needed): the CI check that the script and every shape's plan work.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from common import commit

import pyfuse as pf
from pyfuse import knobs

SHAPES = Path(__file__).with_name("gemm_shapes.csv")
CLASSES = ("decode", "small-k-or-n", "square", "ragged", "llm-prefill")
# bf16 inputs, fp32 accumulation, a bf16 result: the error of one rounding of the output plus
# the accumulation order, relative to the output's scale (entries are O(1) at 1/sqrt(K)).
TOLERANCE = 2e-2


@dataclass(frozen=True)
class Shape:
    m: int
    n: int
    k: int
    layout: str  # A then B: N stored as in the math (A [M, K], B [K, N]), T stored transposed
    source: str

    @property
    def name(self) -> str:
        return f"{self.m}x{self.n}x{self.k} {self.layout}"

    @property
    def kind(self) -> str:
        if self.m <= 64:
            return "decode"
        return self.source if self.source in CLASSES else "llm-prefill"

    def stored(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """The stored shapes of A and B."""
        a = (self.m, self.k) if self.layout[0] == "N" else (self.k, self.m)
        b = (self.k, self.n) if self.layout[1] == "N" else (self.n, self.k)
        return a, b

    def function(self) -> Callable[[Any, Any], Any]:
        """``a @ b`` of the stored operands, transposed back where stored transposed."""
        transpose_a, transpose_b = self.layout[0] == "T", self.layout[1] == "T"

        def matmul(a: Any, b: Any) -> Any:
            return (a.T if transpose_a else a) @ (b.T if transpose_b else b)

        return matmul


@dataclass
class Row:
    shape: str
    kind: str
    pyfuse_ms: float
    torch_ms: float
    tflops: float
    ratio: float
    tuned_ms: float | None = None  # with --autotune: the tuned variant, and its ratio
    tuned_ratio: float | None = None
    tune_s: float | None = None  # the tuning call's wall time
    params: dict[str, object] | None = None  # the heuristic's matmul params, and the tuned
    tuned_params: dict[str, object] | None = None
    compare_ms: float | None = None  # with --compare: the heuristic with those params set
    compare_ratio: float | None = None
    # With --autotune: every config the tuner timed, as [config, resolved params, ms] (from
    # its record; the data benchmarks/fit_cost_model.py fits the heuristic's cost model to).
    trials: list[list[object]] | None = None


def read_shapes(path: Path = SHAPES) -> list[Shape]:
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    return [
        Shape(int(r["M"]), int(r["N"]), int(r["K"]), r["layout"], r["source"])
        for r in csv.DictReader(lines)
    ]


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def dry_run(shapes: list[Shape]) -> int:
    """Compile every shape (bf16) for sm_90a and print its plan; no GPU needed."""
    for shape in shapes:
        a, b = shape.stored()
        start = time.perf_counter()
        compiled = pf.fuse(shape.function(), name="gemm").compile(
            pf.spec(a, pf.bfloat16), pf.spec(b, pf.bfloat16)
        )
        plans = [
            f"{k.scheduler} grid={k.grid} "
            + ",".join(
                f"{key}={k.params[key]}"
                for key in ("tile_m", "tile_n", "splitk", "stream_k")
                if key in k.params
            )
            for k in compiled.kernels
        ]
        seconds = time.perf_counter() - start
        print(f"{shape.name:24s} {shape.kind:13s} {seconds:5.2f} s  {'; '.join(plans)}")
    return 0


def measure(
    shape: Shape,
    torch: Any,
    do_bench: Callable[..., float],
    tune: bool,
    compare: pf.MatmulParams | None = None,
    rounds: int = 1,
) -> Row:
    a_shape, b_shape = shape.stored()
    scale = 1.0 / math.sqrt(shape.k)
    a32 = torch.randn(a_shape, device="cuda") * scale**0.5
    b32 = torch.randn(b_shape, device="cuda") * scale**0.5
    a, b = a32.to(torch.bfloat16), b32.to(torch.bfloat16)
    matmul = shape.function()
    fused = pf.fuse(matmul, name="gemm")
    got = fused(a, b)
    want = matmul(a.float(), b.float())
    error = (got.float() - want).abs().max().item()
    if not error <= TOLERANCE * max(1.0, want.abs().max().item()):
        raise SystemExit(f"{shape.name}: pyfuse disagrees with the fp32 reference ({error})")
    other = None
    if compare is not None:
        other = pf.fuse(matmul, name="gemm", matmul=compare)
        got = other(a, b)
        error = (got.float() - want).abs().max().item()
        if not error <= TOLERANCE * max(1.0, want.abs().max().item()):
            raise SystemExit(f"{shape.name}: pyfuse with {compare} disagrees ({error})")
    timed = [lambda: fused(a, b), lambda: matmul(a, b)]
    if other is not None:
        timed.append(lambda: other(a, b))
    times = interleaved(do_bench, timed, rounds)
    pyfuse_ms, torch_ms = times[0], times[1]
    tflops = 2 * shape.m * shape.n * shape.k / (pyfuse_ms * 1e-3) / 1e12
    ratio = torch_ms / pyfuse_ms
    row = Row(shape.name, shape.kind, pyfuse_ms, torch_ms, tflops, ratio, params=_params(fused))
    if other is not None:
        row.compare_ms = times[2]
        row.compare_ratio = torch_ms / row.compare_ms
    if not tune:
        return row
    tuned = pf.fuse(matmul, name="gemm", autotune=True)
    records = knobs.cache_dir() / "autotune"
    before = time.time()
    start = time.perf_counter()
    got = tuned(a, b)
    torch.cuda.synchronize()
    tune_s = time.perf_counter() - start
    error = (got.float() - want).abs().max().item()
    if not error <= TOLERANCE * max(1.0, want.abs().max().item()):
        raise SystemExit(f"{shape.name}: tuned pyfuse disagrees with the fp32 reference ({error})")
    tuned_ms = float(do_bench(lambda: tuned(a, b), warmup=25, rep=100))
    return Row(
        **{
            **asdict(row),
            "tuned_ms": tuned_ms,
            "tuned_ratio": torch_ms / tuned_ms,
            "tune_s": tune_s,
            "tuned_params": _params(tuned),
            "trials": _trials(records, before),
        }
    )


def interleaved(
    do_bench: Callable[..., float], functions: list[Callable[[], Any]], rounds: int
) -> list[float]:
    """Each function's median time (ms) over ``rounds`` rounds, the functions timed in turn
    within a round, so that a slow stretch of the shared machine falls on all of them."""
    times: list[list[float]] = [[] for _ in functions]
    for _ in range(max(1, rounds)):
        for function, measured in zip(functions, times, strict=True):
            measured.append(float(do_bench(function, warmup=25, rep=100)))
    return [statistics.median(measured) for measured in times]


def _trials(records: Path, since: float) -> list[list[object]] | None:
    """The trials of the autotune record written since ``since`` (this shape's tuning), as
    ``[config, resolved params, ms]``."""
    written = [p for p in records.glob("*.json") if p.stat().st_mtime >= since - 1]
    if not written:
        return None  # remembered from an earlier run: nothing was timed
    record = json.loads(max(written, key=lambda p: p.stat().st_mtime).read_text())
    named, resolved = record.get("trials") or [], record.get("trial_params") or []
    return [[name, params, ms] for (name, ms), (params, _) in zip(named, resolved, strict=True)]


def _params(fused: Any) -> dict[str, object]:
    """The params of the variant a call ran: its matmul kernel's, else the first kernel's."""
    (compiled,) = fused.__dict__["_pyfuse_runtime"].compiled.values()
    kernels = [k for k in compiled.kernels if k.scheduler == "matmul"] or compiled.kernels
    return {
        "scheduler": kernels[0].scheduler,
        "kernels": len(compiled.kernels),
        **kernels[0].params,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", choices=CLASSES, help="classes to run")
    parser.add_argument("--limit", type=int, help="the first N shapes (after --only)")
    parser.add_argument(
        "--shapes", nargs="+", metavar="MxNxK", help="only these shapes (in every layout listed)"
    )
    parser.add_argument(
        "--shuffle", type=int, metavar="SEED", help="in a random order (before --limit)"
    )
    parser.add_argument("--json", type=Path, help="write the rows and geomeans here")
    parser.add_argument("--dry-run", action="store_true", help="compile only (no GPU)")
    parser.add_argument(
        "--autotune", action="store_true", help="also time pf.fuse(autotune=True) per shape"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="time pyfuse, torch and --compare in turn this many times; report medians",
    )
    parser.add_argument(
        "--compare",
        nargs="+",
        metavar="FIELD=VALUE",
        help="also time the heuristic with these MatmulParams set (e.g. smem_epilogue=false)",
    )
    args = parser.parse_args(argv)
    compare = _compare_params(args.compare) if args.compare else None
    shapes = [s for s in read_shapes() if not args.only or s.kind in args.only]
    if args.shapes:
        unknown = set(args.shapes) - {s.name.split()[0] for s in shapes}
        if unknown:
            raise SystemExit(f"not in the shape set (after --only): {' '.join(sorted(unknown))}")
        shapes = [s for s in shapes if s.name.split()[0] in args.shapes]
    if args.shuffle is not None:  # a run cut short still samples every class
        random.Random(args.shuffle).shuffle(shapes)
    shapes = shapes[: args.limit] if args.limit else shapes
    if args.dry_run:
        return dry_run(shapes)
    import torch
    from triton.testing import do_bench

    print(f"pyfuse {commit()} on {torch.cuda.get_device_name()}: {len(shapes)} shapes, bf16")
    rows = []
    for shape in shapes:
        row = measure(shape, torch, do_bench, args.autotune, compare, args.rounds)
        rows.append(row)
        if args.json:  # row by row: a run stopped by a time limit keeps what it measured
            args.json.write_text(
                json.dumps({"commit": commit(), "rows": [asdict(r) for r in rows]})
            )
        tuned = ""
        if row.tuned_ratio is not None:
            tuned = f"  tuned {row.tuned_ratio:5.3f}x ({row.tune_s:.1f} s)"
        if row.compare_ratio is not None:
            tuned += f"  compare {row.compare_ratio:5.3f}x"
        print(
            f"{row.shape:24s} {row.kind:13s} pyfuse {row.pyfuse_ms:8.3f} ms  torch "
            f"{row.torch_ms:8.3f} ms  {row.tflops:6.1f} TFLOP/s  {row.ratio:5.3f}x{tuned}",
            flush=True,
        )
    summary = _geomeans(rows, lambda row: row.ratio, "heuristic")
    if args.autotune:
        summary |= _geomeans(rows, lambda row: row.tuned_ratio or row.ratio, "autotuned")
    if compare is not None:
        summary |= _geomeans(rows, lambda row: row.compare_ratio or row.ratio, "compare")
    if args.json:
        payload = {"commit": commit(), "rows": [asdict(r) for r in rows], "geomean": summary}
        args.json.write_text(json.dumps(payload, indent=1))
    return 0


def _compare_params(settings: list[str]) -> pf.MatmulParams:
    """``FIELD=VALUE`` pairs as MatmulParams (true/false for bools, else ints)."""
    values: dict[str, object] = {}
    for setting in settings:
        field, _, text = setting.partition("=")
        lowered = text.lower()
        values[field] = lowered == "true" if lowered in ("true", "false") else int(text)
    return pf.MatmulParams(**values)  # type: ignore[arg-type]


def _geomeans(rows: list[Row], ratio: Callable[[Row], float], label: str) -> dict[str, float]:
    """Per class and over all rows; printed, and returned keyed ``label:class``."""
    by_kind: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        by_kind[row.kind].append(ratio(row))
    summary = {kind: geomean(by_kind[kind]) for kind in CLASSES if by_kind[kind]}
    summary["all"] = geomean([ratio(row) for row in rows])
    for kind, value in summary.items():
        count = len(by_kind.get(kind, rows))
        print(f"geomean {label} {kind:13s} {value:.3f}x ({count} shapes)")
    return {f"{label}:{kind}": value for kind, value in summary.items()}


if __name__ == "__main__":
    sys.exit(main())
