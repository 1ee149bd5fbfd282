"""Softmax and RMS norm as single persistent kernels.

Run: python examples/softmax.py

Each row stays in registers between its reductions (max and sum for softmax, the mean of
squares for RMS norm); the printout shows the scheduled IR that says so, and the script runs
the kernels on the GPU when there is one (else through the reference interpreter).
"""

from __future__ import annotations

import numpy as np

import pyfuse as pf

softmax = pf.fuse(lambda x: pf.softmax(x, -1), name="softmax")
rms_norm = pf.fuse(lambda x, w: pf.rms_norm(x, w, 1e-6), name="rms_norm")


def main() -> None:
    rng = np.random.default_rng(0)
    bf16 = pf.bfloat16.numpy()
    x = rng.standard_normal((256, 4096)).astype(bf16)
    w = rng.standard_normal(4096).astype(bf16)

    for fused, args in ((softmax, (x,)), (rms_norm, (x, w))):
        compiled = fused.compile(*args)
        kernel = compiled.kernels[0]
        print(
            f"== {fused.name}: {len(compiled.kernels)} kernel, scheduler {kernel.scheduler}, "
            f"grid {kernel.grid}, block {kernel.block}, params {kernel.params}"
        )

    xf = x.astype(np.float64)
    expected_softmax = np.exp(xf - xf.max(-1, keepdims=True))
    expected_softmax /= expected_softmax.sum(-1, keepdims=True)
    expected_rms = xf / np.sqrt((xf * xf).mean(-1, keepdims=True) + 1e-6) * w.astype(np.float64)
    try:
        import torch

        from pyfuse.backend_ptx import driver

        on_gpu = torch.cuda.is_available() and driver.available()
    except ImportError:
        on_gpu = False
    if on_gpu:
        xt = torch.tensor(x.astype(np.float32), device="cuda").to(torch.bfloat16)
        wt = torch.tensor(w.astype(np.float32), device="cuda").to(torch.bfloat16)
        got_softmax = softmax(xt).float().cpu().numpy()
        got_rms = rms_norm(xt, wt).float().cpu().numpy()
    else:
        got_softmax = softmax.reference(x).astype(np.float64)
        got_rms = rms_norm.reference(x, w).astype(np.float64)
    softmax_error = float(np.max(np.abs(got_softmax - expected_softmax)))
    rms_error = float(np.max(np.abs(got_rms - expected_rms)))
    print("softmax max |error|:", softmax_error)
    print("rms_norm max |error|:", rms_error)
    # One bf16 rounding: half an ulp of the largest outputs (softmax <= 1, rms_norm ~10).
    if softmax_error > 4e-3 or rms_error > 0.07:
        raise SystemExit("mismatch against NumPy")


if __name__ == "__main__":
    main()
