"""Golden-output corpus: compile a fixed set of fusions and save (or compare) their PTX.

A refactor that should change nothing is shown to change nothing:

    python3 tools/ptx_corpus.py write build/ptx-before     # on the old commit
    python3 tools/ptx_corpus.py write build/ptx-after      # on the new one
    python3 tools/ptx_corpus.py diff build/ptx-before build/ptx-after

``diff`` prints a unified diff per kernel that changed and exits 1 when any did. Compiling
needs no GPU; the target is the default Hopper description, so results do not depend on the
machine.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Callable
from pathlib import Path

import pyfuse as pf
from pyfuse.ir.target import HOPPER
from pyfuse.runtime.compile import compile_fusion

bf16, f32 = pf.bfloat16, pf.float32

# name -> (function, input specs)
CORPUS: dict[str, tuple[Callable[..., object], list[pf.Spec]]] = {
    "gelu_fma": (
        lambda x, y, z: pf.gelu(x * y + z).to(pf.bfloat16),
        [pf.spec((4096, 1024), f32), pf.spec((1024,), f32), pf.spec((4096, 1024), f32)],
    ),
    "ragged_pointwise": (lambda x: pf.exp(x) * 2.0 - 1.0, [pf.spec((7, 33), f32)]),
    "transposed_input": (lambda x: pf.tanh(x.T), [pf.spec((64, 48), f32)]),
    "softmax": (lambda x: pf.softmax(x, -1), [pf.spec((16384, 4096), bf16)]),
    "layer_norm": (
        lambda x, w, b: pf.layer_norm(x, w, b),
        [pf.spec((512, 4096), bf16), pf.spec((4096,), bf16), pf.spec((4096,), bf16)],
    ),
    "rms_norm": (
        lambda x, w: pf.rms_norm(x, w),
        [pf.spec((512, 4096), bf16), pf.spec((4096,), bf16)],
    ),
    "row_sum_long": (lambda x: x.sum(-1), [pf.spec((3, 65536), f32)]),
    # Odd-width rows past the registers: one kernel reading the row again per loop nest.
    "log_softmax_vocab": (lambda x: pf.log_softmax(x, -1), [pf.spec((8192, 50257), bf16)]),
    "column_max": (lambda x: x.amax(0), [pf.spec((1000, 37), f32)]),
    "linear_gelu": (
        lambda x, w, b: pf.gelu(pf.linear(x, w, b), approximate="tanh"),
        [pf.spec((4096, 4096), bf16), pf.spec((14336, 4096), bf16), pf.spec((14336,), bf16)],
    ),
    "gate_up": (
        lambda x, w1, w3: pf.silu(x @ w1.T) * (x @ w3.T),
        [pf.spec((1024, 512), bf16), pf.spec((2048, 512), bf16), pf.spec((2048, 512), bf16)],
    ),
    "matmul_mn_major": (
        lambda a, b: a.T @ b,
        [pf.spec((512, 1000), bf16), pf.spec((512, 257), bf16)],
    ),
}


def compile_corpus() -> dict[str, str]:
    """``name/kernel -> PTX`` for every corpus entry."""
    result = {}
    for name, (fn, specs) in CORPUS.items():
        fusion = pf.fuse(fn, name=name).trace(*specs)
        for kernel in compile_fusion(fusion, HOPPER).kernels:
            result[f"{name}.{kernel.name}"] = kernel.ptx
    return result


def write(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for key, ptx in compile_corpus().items():
        (directory / f"{key}.ptx").write_text(ptx)
    print(f"wrote {len(CORPUS)} fusions to {directory}")


def diff(before: Path, after: Path) -> int:
    names = sorted({p.name for p in before.glob("*.ptx")} | {p.name for p in after.glob("*.ptx")})
    changed = 0
    for name in names:
        old = (before / name).read_text().splitlines() if (before / name).exists() else []
        new = (after / name).read_text().splitlines() if (after / name).exists() else []
        if old != new:
            changed += 1
            sys.stdout.writelines(
                line + "\n"
                for line in difflib.unified_diff(
                    old, new, str(before / name), str(after / name), lineterm=""
                )
            )
    print(f"{changed} of {len(names)} kernels changed")
    return 1 if changed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    write_parser = sub.add_parser("write", help="compile the corpus into a directory")
    write_parser.add_argument("directory", type=Path)
    diff_parser = sub.add_parser("diff", help="compare two written corpora")
    diff_parser.add_argument("before", type=Path)
    diff_parser.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "write":
        write(args.directory)
        return 0
    return diff(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
