"""Random epilogues after a matmul on the epilogue warps (MatmulParams(epilogue_warps=True)),
run as PTX on the Hopper simulator against the reference: the split between the consumers'
part and the epilogue warps' part (a bias before the handoff, activations, residuals, row
scales and index masks after it), ragged shapes, one and two consumer warpgroups, clusters,
several tiles per CTA. The random fuzzer reaches the handoff rarely (its epilogues seldom
have one 16-bit output); these cases always do."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import pyfuse as pf
from pyfuse.backend_ptx.emit import emit_ptx
from pyfuse.ir.target import HOPPER
from pyfuse.passes import pipeline
from pyfuse.testing.ptx_sim import run_kernel
from pyfuse.testing.simulator import poison, random_inputs

S = pf.spec
bf16 = pf.bfloat16

# (name, how it changes the value, extra inputs as (shape of M, N) -> shape)
_LATE_OPS: tuple[
    tuple[str, Callable[..., Any], Callable[[int, int], tuple[int, ...]] | None], ...
] = (
    ("gelu", lambda y: pf.gelu(y), None),
    ("gelu_tanh", lambda y: pf.gelu(y, approximate="tanh"), None),
    ("silu", lambda y: pf.silu(y), None),
    ("relu", lambda y: pf.relu(y), None),
    ("tanh", lambda y: pf.tanh(y), None),
    ("half", lambda y: y * 0.5, None),
    ("residual", lambda y, r: y + r, lambda m, n: (m, n)),
    ("row_scale", lambda y, s: y * s, lambda m, n: (m, 1)),
    ("late_bias", lambda y, b: y - b, lambda m, n: (n,)),
    ("causal", lambda y: pf.where(pf.triu(pf.ones_like(y), 1) > 0, 0.0, y), None),
)


def _case(seed: int) -> tuple[Callable[..., Any], list[pf.Spec], pf.MatmulParams, str]:
    rng = np.random.default_rng(seed)
    m = int(rng.choice([64, 100, 128, 200]))
    n = int(rng.choice([128, 160, 264, 320]))
    k = int(rng.choice([64, 128, 192]))
    bias = bool(rng.random() < 0.5)
    chosen = [int(i) for i in rng.choice(len(_LATE_OPS), size=int(rng.integers(1, 4)))]
    specs = [S((m, k), bf16), S((n, k), bf16)] + ([S((n,), bf16)] if bias else [])
    extra: list[int] = []
    for index in chosen:
        shape_of = _LATE_OPS[index][2]
        if shape_of is not None:
            extra.append(len(specs))
            specs.append(S(shape_of(m, n), bf16))
    tile_m = 128 if m > 64 and rng.random() < 0.7 else 64
    params = pf.MatmulParams(
        epilogue_warps=True,
        tile_m=tile_m,
        tile_n=128 if n >= 256 and rng.random() < 0.5 else None,
        persistent=True,
        cluster_m=2 if m > tile_m and rng.random() < 0.3 else None,
    )

    def fn(*args: Any) -> Any:
        x, w = args[0], args[1]
        y = pf.linear(x, w, args[2]) if bias else x @ w.T
        y = y.float()
        readers = iter(extra)
        for index in chosen:
            op = _LATE_OPS[index]
            y = op[1](y, args[next(readers)]) if op[2] is not None else op[1](y)
        return y.to(bf16)

    label = f"{m}x{n}x{k}{' bias' if bias else ''} " + " ".join(_LATE_OPS[i][0] for i in chosen)
    return fn, specs, params, label


@pytest.mark.parametrize("seed", range(12))
def test_a_random_epilogue_on_the_epilogue_warps_matches_the_reference(seed: int) -> None:
    fn, specs, params, label = _case(seed)
    fused = pf.fuse(fn)
    fusion = fused.trace(*specs)
    result = pipeline.run(
        fusion, HOPPER, params, emit=lambda st: pipeline.Emitted(emit_ptx(st.kernel_ir, HOPPER))
    )
    (stages,) = result.kernels
    loop = stages.kernel_ir.main_loop()
    assert loop is not None and loop.handoff is not None, label
    assert stages.emitted is not None
    arrays = random_inputs(specs, seed)
    # The kernel's parameters in its own order (an input read twice is passed twice).
    ordered = [arrays[int(key)] for kind, key in result.segmented.sources[0] if kind == "input"]
    assert len(ordered) == len(result.segmented.sources[0])
    out = poison(fusion.outputs[0].shape, fusion.outputs[0].dtype)
    # Two CTAs (one cluster of them, with a cluster): each takes several tiles in turn.
    run_kernel(stages.kernel_ir, stages.emitted.ptx, ordered, [out], grid=(2, 1, 1), order="late")
    want = np.asarray(fused.reference(*arrays), dtype=np.float64)
    got = out.astype(np.float64)
    scale = max(1.0, float(np.max(np.abs(want))))
    assert np.array_equal(np.isnan(got), np.isnan(want)), label
    assert float(np.nanmax(np.abs(got - want))) <= 2e-2 * scale, label
