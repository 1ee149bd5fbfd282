"""One matmul under many MatmulParams, against its anchor, in one run: what the defaults are
chosen from.

    PYTHONPATH=. python3 benchmarks/matmul_sweep.py [--case gemm|linear_gelu|gate_up]
        [--shape M N K] [--rounds 3] [--json out.json] [VARIANT ...]

A VARIANT is ``field=value,field=value`` of :class:`pyfuse.MatmulParams` (``default`` for
none); without any, a set of tile, swizzle, cluster, stage and kernel-kind variants runs.
``staging_buffers=4`` (with or without params) is not a param: that variant's kernel stages
its epilogue through four buffers of 64-byte rows instead of two of 128
(``matmul_epilogue.BUFFERS_PER_WARPGROUP``), compiled with the caches off.
Every variant is checked against torch first. The variants are timed in ``--rounds``
interleaved rounds (each round times the anchor and every variant once, with
``triton.testing.do_bench``), so a lease's drift touches all of them alike; the report gives
each variant's median over rounds as a ratio of the anchor's median (above 1.0 pyfuse is
faster). The anchor is cuBLAS (``torch.matmul``) for ``gemm`` and eager torch for the fused
cases.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from collections.abc import Callable, Iterator
from typing import Any

from common import commit

import pyfuse as pf

DEFAULT_VARIANTS = [
    "default",
    "grid_swizzle=4",
    "grid_swizzle=8",
    "grid_swizzle=32",
    "cluster_m=1",
    "cluster_n=2,cluster_m=1",
    "stages=3",
    "epilogue_warps=true",
    "pingpong=true",
    "tile_m=256,tile_n=128",
    "persistent=false",
    "smem_epilogue=false",
]

CASES = ("gemm", "linear_gelu", "gate_up")


STAGING_BUFFERS = "staging_buffers"


def parse_variant(text: str) -> pf.MatmulParams | None:
    """``field=value,...`` as MatmulParams; ``default`` is None (the heuristic)."""
    items = [item for item in text.split(",") if not item.startswith(STAGING_BUFFERS + "=")]
    if items in ([], ["default"]):
        return None
    fields: dict[str, Any] = {}
    for item in items:
        name, _, value = item.partition("=")
        if value.lower() in ("true", "false"):
            fields[name] = value.lower() == "true"
        else:
            fields[name] = int(value)
    return pf.MatmulParams(**fields)


@contextlib.contextmanager
def staging(text: str) -> Iterator[None]:
    """For a ``staging_buffers=B`` variant, compile with B staging buffers (B = 4: 64-byte
    rows) and no compile cache (its key does not include them); else nothing."""
    buffers = dict(item.partition("=")[::2] for item in text.split(",")).get(STAGING_BUFFERS)
    if buffers is None:
        yield
        return
    from pyfuse import knobs
    from pyfuse.passes import matmul_epilogue

    saved = matmul_epilogue.BUFFERS_PER_WARPGROUP, matmul_epilogue.WIDEST_STAGED_ROW
    matmul_epilogue.BUFFERS_PER_WARPGROUP = int(buffers)
    matmul_epilogue.WIDEST_STAGED_ROW = 64 if int(buffers) == 4 else 128
    try:
        with knobs.overrides(disable_cache=True):
            yield
    finally:
        matmul_epilogue.BUFFERS_PER_WARPGROUP, matmul_epilogue.WIDEST_STAGED_ROW = saved


def _problem(
    case: str, m: int, n: int, k: int
) -> tuple[Callable[..., Any], Callable[..., Any], tuple[Any, ...], int]:
    """(pyfuse function, torch anchor, inputs, flops) of one case."""
    import torch

    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / 64
    if case == "gemm":
        return (lambda a, b: a @ b.T), (lambda a, b: a @ b.T), (x, w), 2 * m * n * k
    if case == "linear_gelu":
        bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)

        def eager(x: Any, w: Any, b: Any) -> Any:
            return torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b), approximate="tanh")

        def fused(x: Any, w: Any, b: Any) -> Any:
            return pf.gelu(pf.linear(x, w, b), approximate="tanh")

        return fused, eager, (x, w, bias), 2 * m * n * k
    w3 = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / 64

    def gate_up(x: Any, w1: Any, w3: Any) -> Any:
        return torch.nn.functional.silu(x @ w1.T) * (x @ w3.T)

    def gate_up_fused(x: Any, w1: Any, w3: Any) -> Any:
        return pf.silu(x @ w1.T) * (x @ w3.T)

    return gate_up_fused, gate_up, (x, w, w3), 4 * m * n * k


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=CASES, default="gemm")
    parser.add_argument("--shape", type=int, nargs=3, default=(8192, 8192, 8192))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    parser.add_argument("variants", nargs="*")
    args = parser.parse_args(argv)
    import torch
    from triton.testing import do_bench

    m, n, k = args.shape
    fn, anchor, inputs, flops = _problem(args.case, m, n, k)
    want = anchor(*inputs).float()
    scale = max(1.0, want.abs().max().item())
    runs: dict[str, Callable[[], Any]] = {"anchor": lambda: anchor(*inputs)}
    for text in args.variants or DEFAULT_VARIANTS:
        try:
            fused = pf.fuse(fn, name=args.case, matmul=parse_variant(text))
            with staging(text):
                got = fused(*inputs)
        except Exception as error:  # a variant the kernel refuses: say so, time the rest
            print(f"{text}: not run ({type(error).__name__}: {str(error)[:160]})")
            continue
        error = (got.float() - want).abs().max().item()
        if not error <= 3e-2 * scale:
            print(f"{text}: WRONG (max error {error:.3g})")
            return 1
        runs[text] = lambda fused=fused: fused(*inputs)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, run in runs.items():
            times[name].append(float(do_bench(run, warmup=25, rep=150)))
    anchor_ms = statistics.median(times.pop("anchor"))
    label = f"{args.case} {m}x{n}x{k}"
    print(
        f"pyfuse {commit()} on {torch.cuda.get_device_name()}: {label}, anchor {anchor_ms:.4f} ms"
        f" ({flops / anchor_ms / 1e9:.0f} TFLOP/s), {args.rounds} rounds"
    )
    rows = []
    for name, values in times.items():
        ms = statistics.median(values)
        rows.append(
            {
                "variant": name,
                "ms": ms,
                "ratio": anchor_ms / ms,
                "spread": max(values) / min(values),
            }
        )
        print(
            f"  {name:28s} {ms:.4f} ms  {anchor_ms / ms:.3f}x  {flops / ms / 1e9:.0f} TFLOP/s"
            f"  (spread {max(values) / min(values):.3f})"
        )
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"case": label, "anchor_ms": anchor_ms, "rows": rows}, file, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
