"""Stream-K against the plain persistent kernel, shape by shape, against cuBLAS in one run.

    PYTHONPATH=. python3 benchmarks/stream_k.py [--one-cta]

For each shape (``a @ b.T``, bf16): the heuristic's default (which may split K over two
kernels), the plain persistent kernel, stream-K, and (``--one-cta``) both without a
cluster; each line gives
the ratio to torch.matmul, the time, the compiled grid, the grid the launch used (a cluster
launch may shrink it) and the params that decide the split. The first shape splits no tile
(132 tiles of 128x256 on 132 SMs): it times the walk alone. The last ones are skinny and
K-heavy (few tiles, long K), where the default splits K over two kernels.
"""

from __future__ import annotations

import sys
from typing import Any

import pyfuse as pf

SHAPES = (
    (1536, 2816, 4096),
    (3000, 4608, 3584),
    (3888, 3224, 2768),
    (3000, 3584, 18944),
    (256, 3072, 8192),
    (128, 4096, 14336),
    (1000, 1000, 1000),
)
VARIANTS: dict[str, pf.MatmulParams | None] = {
    "default": None,
    "persistent": pf.MatmulParams(stream_k=False, persistent=True),
    "stream-K": pf.MatmulParams(stream_k=True),
}
if "--one-cta" in sys.argv:  # both again without a cluster
    VARIANTS["persistent, 1 CTA"] = pf.MatmulParams(stream_k=False, cluster_m=1, persistent=True)
    VARIANTS["stream-K, 1 CTA"] = pf.MatmulParams(stream_k=True, cluster_m=1)


def _launch(fused: Any, *args: Any) -> str:
    compiled = fused.compile(*args)
    loaded = compiled.runtime.loaded.get(args[0].device.index or 0)
    keys = ("tile_m", "tile_n", "cluster_m", "persistent", "stream_k", "split_k")
    lines = []
    for number, kernel in enumerate(compiled.kernels):
        launched = loaded._launches[number][1] if loaded is not None else None
        params = {k: kernel.params[k] for k in keys if k in (kernel.params or {})}
        lines.append(f"{kernel.name}: grid {kernel.grid} launched {launched} {params}")
    return "; ".join(lines)


def main() -> None:
    import torch
    from triton.testing import do_bench

    torch.manual_seed(0)
    print(f"pyfuse on {torch.cuda.get_device_name()}")
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        cublas_ms = do_bench(lambda a=a, b=b: a @ b.T)
        want = a.float() @ b.float().T
        for label, params in VARIANTS.items():
            fused = pf.fuse(lambda a, b: a @ b.T, matmul=params)
            error = (fused(a, b).float() - want).abs().max().item()
            assert error <= 1e-2 * (want.abs().max().item() + 1), (label, error)
            ms = do_bench(lambda fused=fused, a=a, b=b: fused(a, b))
            print(
                f"{m}x{n}x{k} {label:22s} {cublas_ms / ms:.3f}x {ms * 1e3:8.1f} us  "
                + _launch(fused, a, b),
                flush=True,
            )


if __name__ == "__main__":
    main()
