"""A fused linear + bias + gelu whose matmul config is autotuned once and remembered.

Run: python examples/autotune.py

``pf.fuse(..., autotune=True)`` times a pruned set of matmul configs (tile shapes, grid
swizzle, cluster, split-K) on the first call of each shape and stores the fastest under the
cache directory (``PYFUSE_CACHE_DIR``); later calls, and later processes, compile the winner
without timing. Run it twice on a GPU: the second run prints no "autotuned" line. Without a
GPU the script compiles the heuristic's kernel and checks the result with the reference
interpreter on a small shape.
"""

from __future__ import annotations

import numpy as np

import pyfuse as pf

layer = pf.fuse(
    lambda x, w, b: pf.gelu(pf.linear(x, w, b), approximate="tanh"), name="mlp_up", autotune=True
)


def main() -> None:
    try:
        import torch

        from pyfuse.backend_ptx import driver

        on_gpu = torch.cuda.is_available() and driver.available()
    except ImportError:
        on_gpu = False
    m, n, k = (2048, 8192, 1024) if on_gpu else (64, 96, 64)
    rng = np.random.default_rng(0)
    bf16 = pf.bfloat16.numpy()
    x = (rng.standard_normal((m, k)) / 2).astype(bf16)
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(bf16)
    b = rng.standard_normal(n).astype(bf16)
    kernel = layer.compile(x, w, b).kernels[0]
    print(f"== {layer.name}: scheduler {kernel.scheduler}, params {kernel.params}")
    xf, wf, bf = (a.astype(np.float64) for a in (x, w, b))
    y = xf @ wf.T + bf
    expected = 0.5 * y * (1 + np.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y**3)))
    if on_gpu:
        args = [
            torch.tensor(a.astype(np.float32), device="cuda").to(torch.bfloat16) for a in (x, w, b)
        ]
        got = layer(*args)  # the first call of this shape tunes (or finds the stored winner)
        got = layer(*args).float().cpu().numpy()
        (compiled,) = layer.__dict__["_pyfuse_runtime"].compiled.values()
        print(f"   running with {compiled.kernels[0].params}")
    else:
        got = np.asarray(layer.reference(x, w, b)).astype(np.float64)
    error = float(np.max(np.abs(got - expected)) / max(1.0, np.max(np.abs(expected))))
    print(f"max error relative to the output's scale: {error:.2e}")
    if not error <= 2e-2:
        raise SystemExit(f"{layer.name}: error {error} above 2e-2")


if __name__ == "__main__":
    main()
