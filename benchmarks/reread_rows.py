"""Wide-row normalizations under each row plan, against torch eager and torch.compile, in one
run: the measurements that decide when a row is read again (passes/reread_rows.py).

    PYTHONPATH=. python3 benchmarks/reread_rows.py [--json FILE]

Plans, each compiled in a process of its own with the caches off (a plan is chosen by
patching the scheduler's constants, which the caches do not key on):

- ``default``: what pyfuse does (persistent rows in registers where they fit, rows read
  again past that over at least two rows per SM);
- ``recompute``: rows past the registers as segment_recompute's kernels (one per reduction
  and one for the outputs), the plan before rows were read again;
- ``reread``: every row read again per loop nest, even rows that fit the registers (does
  it beat persistent rows that spill, or all of them?);
- ``reread, 2 blocks``: as ``reread``, each 1024-thread kernel built for two blocks an SM
  (``.minnctapersm 2``: ptxas keeps 32 registers a thread; a vocabulary log_softmax's
  kernel otherwise takes 42 and runs one block an SM).

Each line: the plan's time, its bandwidth (inputs read once, outputs written once), and the
ratios eager / plan and torch.compile / plan (above 1: pyfuse faster). Results are checked
against torch's in float32.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

# bf16 outputs against torch's in float32: a difference past this is a wrong result.
WRONG_ABOVE = 0.1
PLANS = ("default", "recompute", "reread", "reread, 2 blocks")
# (name, rows, cols): log_softmax and softmax over vocabularies, norms of wide rows (some
# spill at 1024 threads today), and a row that fits (what reading again costs there).
CASES = (
    ("log_softmax", 8192, 50257),
    ("log_softmax", 4096, 128256),
    ("softmax", 4096, 32001),
    ("softmax", 2048, 44444),
    ("layer_norm", 2048, 49152),
    ("layer_norm", 2048, 25000),
    ("rms_norm", 2048, 49152),
    ("layer_norm", 16384, 4096),
    # Rows of a slice, which start unlike the output's rows: read one element an access.
    ("softmax_of_a_slice", 4096, 32001),
)


def _apply(plan: str) -> None:
    """Patch the scheduler so that ``plan`` is what it picks (this process only)."""
    if plan == "recompute":
        from pyfuse.passes import schedule_reduction

        schedule_reduction.REREAD_MIN_ROWS_PER_SM = 1 << 30
    if plan.startswith("reread"):
        from pyfuse.passes import row_registers

        row_registers.persistent_budget = lambda *args, **kwargs: 0
    if plan == "reread, 2 blocks":
        from pyfuse.backend_ptx.emit import emit_ptx
        from pyfuse.ir.target import TargetInfo
        from pyfuse.runtime import compile as runtime_compile

        def two_blocks(kernel_ir: Any, target: TargetInfo) -> str:
            ptx = emit_ptx(kernel_ir, target)
            return ptx.replace(".maxntid 1024, 1, 1", ".maxntid 1024, 1, 1\n.minnctapersm 2")

        runtime_compile.emit_ptx = two_blocks  # type: ignore[assignment]


def _functions(name: str, cols: int) -> tuple[Callable[..., Any], Callable[..., Any], int]:
    """The pyfuse function, torch's, and how many inputs (the row, then weights)."""
    import torch

    import pyfuse as pf

    if name == "log_softmax":
        return (lambda x: pf.log_softmax(x, -1)), (lambda x: torch.log_softmax(x, -1)), 1
    if name == "softmax":
        return (lambda x: pf.softmax(x, -1)), (lambda x: torch.softmax(x, -1)), 1
    if name == "softmax_of_a_slice":
        return (lambda x: pf.softmax(x[:, 1:], -1)), (lambda x: torch.softmax(x[:, 1:], -1)), 1
    if name == "layer_norm":
        return (
            (lambda x, w, b: pf.layer_norm(x, w, b)),
            (lambda x, w, b: torch.nn.functional.layer_norm(x, (cols,), w, b)),
            3,
        )

    def rms_eager(x: Any, w: Any) -> Any:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)

    return (lambda x, w: pf.rms_norm(x, w, 1e-6)), rms_eager, 2


def _run_plan(plan: str) -> None:
    """Child process: every case under ``plan``, one JSON line each."""
    _apply(plan)
    for name, rows, cols in CASES:
        print(json.dumps(_measure(plan, name, rows, cols)), flush=True)


def _measure(plan: str, name: str, rows: int, cols: int) -> dict[str, Any]:
    import torch
    from triton.testing import do_bench

    import pyfuse as pf

    generator = torch.Generator(device="cuda").manual_seed(rows + cols)
    fused_fn, eager, count = _functions(name, cols)
    width = cols + 1 if name == "softmax_of_a_slice" else cols
    shapes = [(rows, width)] + [(cols,)] * (count - 1)
    args = [
        torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=generator)
        for shape in shapes
    ]
    fused = pf.fuse(fused_fn, name=f"{name}_{cols}")
    out = fused(*args)
    error = (out.float() - eager(*[a.float() for a in args])).abs().max().item()
    line: dict[str, Any] = {
        "plan": plan,
        "case": f"{name} {rows}x{cols} bf16",
        "ms": do_bench(lambda: fused(*args), warmup=25, rep=200),
        "bytes": sum(a.numel() * a.element_size() for a in args) + out.numel() * 2,
        "error": error,
        "kernels": [k.params for k in fused.compile(*args).kernels],
    }
    if plan == "default":
        compiled = torch.compile(eager)
        line["eager_ms"] = do_bench(lambda: eager(*args), warmup=25, rep=200)
        line["compile_ms"] = do_bench(lambda: compiled(*args), warmup=25, rep=200)
    return line


def main() -> int:
    if "--plan" in sys.argv:
        _run_plan(sys.argv[sys.argv.index("--plan") + 1])
        return 0
    from common import commit

    print(f"commit {commit()}", flush=True)
    env = dict(os.environ, PYFUSE_DISABLE_CACHE="1")
    lines: list[dict[str, Any]] = []
    anchors: dict[str, dict[str, Any]] = {}
    for plan in PLANS:  # each plan's lines as it ends (the default's first: the anchors)
        done = subprocess.run(
            [sys.executable, __file__, "--plan", plan],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        mine = [json.loads(t) for t in done.stdout.splitlines() if t.startswith("{")]
        if plan == "default":
            anchors = {line["case"]: line for line in mine}
        for line in mine:
            print(_describe(line, anchors.get(line["case"], {})), flush=True)
        if done.returncode:
            print(f"plan {plan}: exit {done.returncode}\n{done.stderr[-2000:]}", flush=True)
        lines += mine
    if "--json" in sys.argv:
        with open(sys.argv[sys.argv.index("--json") + 1], "w") as handle:
            json.dump({"commit": commit(), "lines": lines}, handle, indent=1)
    return 0


def _describe(line: dict[str, Any], base: dict[str, Any]) -> str:
    ratios = "".join(
        f"  {label} {base[key] / line['ms']:.2f}x"
        for label, key in (("eager/", "eager_ms"), ("compile/", "compile_ms"))
        if key in base
    )
    wrong = "  WRONG" if line["error"] > WRONG_ABOVE else ""
    return (
        f"{line['case']:34s} {line['plan']:17s} {line['ms'] * 1e3:8.1f} us "
        f"{line['bytes'] / line['ms'] / 1e9:5.2f} TB/s {len(line['kernels'])} kernel(s)"
        f"{ratios}  err {line['error']:.2g}{wrong}"
    )


if __name__ == "__main__":
    sys.exit(main())
