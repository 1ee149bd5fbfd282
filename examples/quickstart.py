"""pyfuse quickstart: trace a fused linear + bias + GELU, print its IR, and evaluate it.

Run: python examples/quickstart.py

It traces the function on symbolic inputs, prints the math IR, then evaluates the
fusion with the NumPy reference interpreter and checks it against NumPy written here.
"""

from __future__ import annotations

import math

import numpy as np

import pyfuse as pf


@pf.fuse
def mlp(x, w, b):
    return pf.gelu(pf.linear(x, w, b), approximate="tanh")


def numpy_mlp(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    y = x.astype(np.float64) @ w.astype(np.float64).T + b.astype(np.float64)
    return 0.5 * y * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (y + 0.044715 * y**3)))


def main() -> None:
    rng = np.random.default_rng(0)
    bf16 = pf.bfloat16.numpy()
    x = rng.standard_normal((64, 128)).astype(bf16)
    w = (rng.standard_normal((96, 128)) / math.sqrt(128)).astype(bf16)
    b = rng.standard_normal(96).astype(bf16)

    print("== traced IR ==")
    print(mlp.trace(x, w, b))

    y = mlp.reference(x, w, b)
    expected = numpy_mlp(x, w, b)
    error = np.max(np.abs(y.astype(np.float64) - expected))
    print(f"\n== reference interpreter ==\noutput {y.shape} {y.dtype}, max |error| = {error:.3g}")
    # bf16 keeps 8 bits of mantissa: one rounding of values of size ~3 is about 0.016.
    if error > 0.05:
        raise SystemExit(f"mismatch against NumPy: {error}")


if __name__ == "__main__":
    main()
