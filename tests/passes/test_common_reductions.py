"""merge_common_reductions: one reduction per set of values, never merging what differs,
and elementwise copies left alone."""

from __future__ import annotations

import numpy as np
from sim_utils import check_fusion

import pyfuse as pf
from pyfuse.ir.exprs import CastOp, Expr, ReductionOp
from pyfuse.passes.common_reductions import merge_common_reductions

f32, bf16 = pf.float32, pf.bfloat16


def _count(fusion: object, kind: type[Expr]) -> int:
    return sum(isinstance(e, kind) for e in fusion.exprs())  # type: ignore[attr-defined]


def test_a_softmax_beside_the_users_amax_reduces_once() -> None:
    def fn(x):  # type: ignore[no-untyped-def]
        return pf.softmax(x, -1) + pf.amax(x, -1, keepdim=True)

    fusion = pf.fuse(fn).trace(pf.spec((6, 40), f32))
    before = _count(fusion, ReductionOp)
    assert merge_common_reductions(fusion) == 1
    assert _count(fusion, ReductionOp) == before - 1
    check_fusion(fn, [pf.spec((6, 40), f32)])


def test_reductions_of_equal_chains_merge_and_the_chains_stay() -> None:
    # Two sums of x.float(): the casts are two exprs computing the same values (value
    # numbering sees through them), the sums merge, and the casts are not merged.
    def fn(x):  # type: ignore[no-untyped-def]
        return pf.sum(pf.cast(x, f32), -1) * 2 + pf.sum(x.float(), -1), pf.exp(x.float())

    fusion = pf.fuse(fn).trace(pf.spec((5, 33), bf16))
    casts = _count(fusion, CastOp)
    assert merge_common_reductions(fusion) == 1
    assert _count(fusion, ReductionOp) == 1
    assert _count(fusion, CastOp) == casts - 1  # the dropped sum's cast is dead
    check_fusion(fn, [pf.spec((5, 33), bf16)], rtol=1e-2, atol=1e-2)


def test_what_differs_is_not_merged() -> None:
    def fn(x):  # type: ignore[no-untyped-def]
        return (
            pf.sum(x + 0.0, 0) * pf.sum(x + -0.0, 0)
            + pf.sum(x * 2, 0)
            + pf.sum(x * 2.5, 0)
            + pf.amax(x, 0)
            + pf.sum(x, 1)
        )

    fusion = pf.fuse(fn).trace(pf.spec((5, 5), f32))
    assert merge_common_reductions(fusion) == 0


def test_a_repeated_output_keeps_its_place() -> None:
    def fn(x):  # type: ignore[no-untyped-def]
        return pf.sum(x, -1), pf.sum(x, -1)

    fusion = pf.fuse(fn).trace(pf.spec((7, 9), f32))
    assert merge_common_reductions(fusion) == 0
    assert len({id(tv) for tv in fusion.outputs}) == 2
    check_fusion(fn, [pf.spec((7, 9), f32)])


def test_inputs_by_identity_and_constants_by_value() -> None:
    def fn(x, y):  # type: ignore[no-untyped-def]
        return pf.sum(x * 3.0, -1) + pf.sum(y * 3.0, -1) - pf.sum(x * 3.0, -1)

    fused = pf.fuse(fn)
    fusion = fused.trace(pf.spec((2, 4), f32), pf.spec((2, 4), f32))
    assert merge_common_reductions(fusion) == 1  # sum(x * 3.0) twice; sum(y * 3.0) stays
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((2, 4)).astype(np.float32) for _ in range(2)]
    np.testing.assert_allclose(fused.reference(*arrays), 3.0 * arrays[1].sum(-1), rtol=1e-5)


def test_merging_does_not_depend_on_the_order_of_the_outputs() -> None:
    for fn in (
        lambda x: (pf.softmax(x, -1), pf.amax(x, -1, keepdim=True)),
        lambda x: (pf.amax(x, -1, keepdim=True), pf.softmax(x, -1)),
    ):
        fusion = pf.fuse(fn).trace(pf.spec((4, 32), f32))
        assert merge_common_reductions(fusion) == 1
        check_fusion(fn, [pf.spec((4, 32), f32)])
