"""Products with a vector, or with M or N of 1, run as one reduction kernel in 16-bit too:
decompose_matmuls takes them without a size-1 middle axis, and the fallback plan
"broadcasts before casts" moves a vector's broadcasts ahead of its cast where a reduction's
rows merge several axes. Before, a bf16 ``x @ v`` became 7 to 10 kernels, one of them
storing the whole ``[M, 1, K]`` product in fp32."""

from __future__ import annotations

import pytest
from sim_utils import check_fusion

import pyfuse as pf
from pyfuse.ir.target import HOPPER
from pyfuse.passes import pipeline
from pyfuse.passes.broadcast_first import broadcasts_before_casts, candidates
from pyfuse.passes.fallback import ATTEMPTS

S, bf16, f16, f32 = pf.spec, pf.bfloat16, pf.float16, pf.float32


@pytest.mark.parametrize("dtype", [bf16, f16, f32])
@pytest.mark.parametrize(
    ("name", "fn", "shapes"),
    [
        ("matrix @ vector", lambda x, v: x @ v, [(64, 512), (512,)]),
        ("vector @ matrix", lambda v, x: v @ x, [(512,), (512, 48)]),
        ("batched @ vector", lambda x, v: x @ v, [(3, 20, 300), (300,)]),
        ("vector @ batched", lambda v, x: v @ x, [(300,), (3, 300, 20)]),
        ("linear to one feature", lambda x, w: pf.linear(x, w), [(3, 20, 300), (1, 300)]),
        ("one row @ matrix", lambda a, b: a @ b, [(1, 512), (512, 96)]),
        ("batched, one column", lambda a, b: a @ b, [(2, 3, 7, 300), (300, 1)]),
    ],
)
def test_products_with_a_vector_are_one_reduction(name, fn, shapes, dtype) -> None:  # type: ignore[no-untyped-def]
    tolerance = 1e-4 if dtype == f32 else 2e-2
    result = check_fusion(fn, [S(shape, dtype) for shape in shapes], rtol=tolerance, atol=tolerance)
    assert [k.plan.scheduler for k in result.kernels] == ["reduction"], name
    # decompose_matmuls gives both operands the product's rank before their casts: the
    # first plan works, no fallback.
    assert "fallback" not in result.kernels[0].plan.params, name


def test_the_fallback_moves_broadcasts_of_a_vector_ahead_of_its_cast() -> None:
    def fn(x, v):  # type: ignore[no-untyped-def]
        return pf.sum(x.float() * pf.unsqueeze(v, 0).float(), -1)

    fused = pf.fuse(fn)
    specs = [S((3, 20, 300), bf16), S((300,), bf16)]
    result = pipeline.run(fused.trace(*specs), HOPPER)
    (kernel,) = result.kernels
    assert kernel.plan.params["fallback"] == "broadcasts before casts"
    assert "default: ScheduleError" in (kernel.plan.fallback or "")
    fusion = fused.trace(*specs)
    assert not candidates(fusion) and candidates(fusion, through_broadcasts=True)
    assert broadcasts_before_casts(fusion) == 1  # the cast moves past the rank broadcast
    assert not candidates(fusion, through_broadcasts=True)
    check_fusion(fn, specs, rtol=2e-2, atol=2e-2)


def test_the_plan_comes_second() -> None:
    assert [a.name for a in ATTEMPTS[:2]] == ["default", "broadcasts before casts"]
