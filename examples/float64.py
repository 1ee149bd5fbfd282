"""float64 fusions: the same code as in float32, computed in float64 from end to end.

Run: python examples/float64.py

``pf.float64`` tensors (NumPy or torch arrays of float64, or ``.double()`` inside the fusion)
compute every op in float64; exp, log, erf, sin and the other transcendentals are pyfuse's
own f64 expansions (PTX has no f64 approximations), within a few ulps of the C library's.
The script runs on the GPU when there is one, else through the reference interpreter, and
prints the largest error against NumPy (relative, or absolute below 1).
"""

from __future__ import annotations

import math

import numpy as np

import pyfuse as pf


@pf.fuse
def wave_packet(x: pf.Tensor, scale: pf.Tensor) -> pf.Tensor:
    # A Gaussian envelope times a fast carrier: cos of arguments near 3e6 is reduced by pi/2
    # exactly in float64, so the carrier keeps all its digits.
    z = x * scale
    return pf.exp(-0.5 * z * z) * pf.cos(z * 1e6) + pf.erf(z) * pf.tanh(z)


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(0.0, 3.0, (64, 256))
    scale = rng.uniform(0.5, 2.0, 256)
    compiled = wave_packet.compile(x, scale)
    print(f"== {len(compiled.kernels)} kernel, scheduler {compiled.kernels[0].scheduler}")
    try:
        import torch

        from pyfuse.backend_ptx import driver

        on_gpu = torch.cuda.is_available() and driver.available()
    except ImportError:
        on_gpu = False
    if on_gpu:
        got = wave_packet(torch.from_numpy(x).cuda(), torch.from_numpy(scale).cuda())
        got = got.cpu().numpy()
    else:
        got = wave_packet.reference(x, scale)
    z = x * scale
    erf = np.asarray(np.frompyfunc(math.erf, 1, 1)(z), np.float64)
    want = np.exp(-0.5 * z * z) * np.cos(z * 1e6) + erf * np.tanh(z)
    error = float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1.0)))
    print(f"dtype {got.dtype}, max error {error:.2e} ({'GPU' if on_gpu else 'CPU'})")
    if got.dtype != np.float64 or error > 1e-12:
        raise SystemExit("mismatch")


if __name__ == "__main__":
    main()
