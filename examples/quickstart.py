"""pyfuse quickstart: trace a fused function, print its IR and PTX, and run it.

Run: python examples/quickstart.py

On a machine with an NVIDIA Hopper GPU and torch the kernels run on the GPU and are checked
against torch; elsewhere the same fusion runs through the NumPy reference interpreter.
Compiling (tracing, scheduling, lowering, PTX emission) needs no GPU either way.
"""

from __future__ import annotations

import math

import numpy as np

import pyfuse as pf


@pf.fuse
def bias_gelu_residual(x, bias, residual):
    """GELU(x + bias) + residual, in fp32 math, stored as bf16: one vectorized kernel."""
    return (pf.gelu(x + bias, approximate="tanh") + residual).to(pf.bfloat16)


@pf.fuse
def mlp(x, w, b):
    return pf.gelu(pf.linear(x, w, b), approximate="tanh")


def numpy_gelu_tanh(y: np.ndarray) -> np.ndarray:
    return 0.5 * y * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (y + 0.044715 * y**3)))


def gpu_torch():  # type: ignore[no-untyped-def]
    """torch with a CUDA device pyfuse can drive, or None."""
    try:
        import torch
    except ImportError:
        return None
    from pyfuse.backend_ptx import driver

    return torch if torch.cuda.is_available() and driver.available() else None


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 1024)).astype(np.float32)
    bias = rng.standard_normal(1024).astype(np.float32)
    residual = rng.standard_normal((512, 1024)).astype(np.float32)

    print("== math IR ==")
    print(bias_gelu_residual.trace(x, bias, residual))
    compiled = bias_gelu_residual.compile(x, bias, residual)
    print("\n== scheduled IR ==")
    print(compiled.kernels[0].ir)
    print("\n== PTX (first lines) ==")
    print("\n".join(compiled.ptx.splitlines()[:40]))
    print(f"... {len(compiled.ptx.splitlines())} lines; kernels: {compiled.kernels}")

    expected = numpy_gelu_tanh(x.astype(np.float64) + bias) + residual
    torch = gpu_torch()
    if torch is not None:
        args = [torch.from_numpy(a).cuda() for a in (x, bias, residual)]
        result = bias_gelu_residual(*args).float().cpu().numpy()
        where = "GPU"
    else:
        result = bias_gelu_residual.reference(x, bias, residual).astype(np.float64)
        where = "reference interpreter (no GPU here)"
    error = float(np.max(np.abs(result - expected)))
    print(f"\n== run on the {where} ==\nmax |error| against NumPy: {error:.3g}")
    # bf16 keeps 8 bits of mantissa: one rounding of values near 8 is at most 0.03.
    if error > 0.07:
        raise SystemExit(f"mismatch against NumPy: {error}")

    print("\n== a matmul with a fused epilogue, as traced ==")
    bf16 = pf.bfloat16.numpy()
    xm = rng.standard_normal((64, 128)).astype(bf16)
    w = (rng.standard_normal((96, 128)) / math.sqrt(128)).astype(bf16)
    b = rng.standard_normal(96).astype(bf16)
    print(mlp.trace(xm, w, b))
    reference = mlp.reference(xm, w, b).astype(np.float64)
    direct = numpy_gelu_tanh(xm.astype(np.float64) @ w.astype(np.float64).T + b)
    print(f"reference vs NumPy: max |error| = {np.max(np.abs(reference - direct)):.3g}")


if __name__ == "__main__":
    main()
