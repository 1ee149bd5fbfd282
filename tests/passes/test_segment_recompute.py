"""segment_recompute: a normalization whose rows exceed the persistent budget runs as one
kernel per reduction plus one for the outputs, each recomputing its pointwise inputs from
the fusion's inputs; only per-row reduction results pass between kernels."""

from __future__ import annotations

import pytest
from sim_utils import check_fusion

import pyfuse as pf
from pyfuse.ir.target import HOPPER
from pyfuse.passes import pipeline
from pyfuse.passes import segment as segment_pass
from pyfuse.passes.segment_recompute import recompute_groups

f32, bf16 = pf.float32, pf.bfloat16
# Wider than a persistent row holds (1024 threads x 48 elements): a GPT-2 vocabulary.
WIDE = 50257


def _per_row(result: object, rows: int, partials: int = 1) -> None:
    """Every global intermediate has one value per row (a reduction's result), or a few
    (partial results, where few rows split across blocks)."""
    for kernel in result.kernels[:-1]:  # type: ignore[attr-defined]
        for tv in kernel.plan.fusion.outputs:
            assert tv.numel <= rows * partials, f"T{tv.name}: {tv.numel} elements between kernels"


@pytest.mark.parametrize("dtype", [f32, bf16])
@pytest.mark.parametrize(
    ("name", "fn", "inputs", "kernels"),
    [
        ("log_softmax", lambda x: pf.log_softmax(x, -1), 1, 3),
        ("softmax", lambda x: pf.softmax(x, -1), 1, 3),
        ("layer_norm", lambda x, w, b: pf.layer_norm(x, w, b, 1e-5), 3, 3),
        ("rms_norm", lambda x, w: pf.rms_norm(x, w), 2, 2),
    ],
)
def test_wide_normalizations_recompute_instead_of_storing(name, fn, inputs, kernels, dtype) -> None:  # type: ignore[no-untyped-def]
    rows = 3
    specs = [pf.spec((rows, WIDE), dtype)] + [pf.spec((WIDE,), dtype)] * (inputs - 1)
    tolerance = 1e-4 if dtype == f32 else 2e-2
    result = check_fusion(fn, specs, rtol=tolerance, atol=tolerance)
    assert len(result.kernels) == kernels, name
    assert [k.plan.scheduler for k in result.kernels][-1] == "pointwise"
    assert not any(k.plan.params.get("persistent") for k in result.kernels)
    _per_row(result, rows)


def test_an_intermediate_output_is_written_once_and_the_rest_recomputed() -> None:
    # x * 2 is an output read by no reduction; the row max is an output too. (The second
    # kernel's two reductions over 3 rows split across blocks: partial results pass.)
    result = check_fusion(
        lambda x: (pf.softmax(x, -1), pf.amax(x, -1), x * 2),
        [pf.spec((3, WIDE), f32)],
        rtol=1e-5,
        atol=1e-6,
    )
    _per_row(result, 3, partials=64)
    last = result.kernels[-1].plan.fusion
    assert [k.plan.scheduler for k in result.kernels][-1] == "pointwise"
    assert len(last.outputs) == 2  # the softmax and x * 2, written once


def test_a_residual_is_recomputed_where_that_moves_fewer_bytes() -> None:
    # rms_norm(x + r): storing x + r costs a write and a read; reading x and r again costs
    # two reads. Either way the answer is right and no kernel holds the row.
    result = check_fusion(
        lambda x, r, w: pf.rms_norm(x + r, w),
        [pf.spec((2, WIDE), bf16), pf.spec((2, WIDE), bf16), pf.spec((WIDE,), bf16)],
        rtol=2e-2,
        atol=2e-2,
    )
    assert not any(k.plan.params.get("persistent") for k in result.kernels)


def test_few_rows_still_spread_over_the_gpu() -> None:
    # One row of a Llama-3 vocabulary: the reductions split across blocks.
    result = check_fusion(
        lambda x: pf.log_softmax(x, -1), [pf.spec((1, 128256), f32)], rtol=1e-4, atol=1e-4
    )
    first = result.kernels[0].kernel_ir
    assert first.grid[0] * first.block[0] >= 1024


def test_rows_that_fit_stay_one_persistent_kernel() -> None:
    result = check_fusion(lambda x: pf.softmax(x, -1), [pf.spec((4, 4096), f32)])
    assert len(result.kernels) == 1 and result.kernels[0].plan.params["persistent"]


def test_groups_share_pointwise_exprs_and_pass_only_reductions() -> None:
    fusion = pf.fuse(lambda x: pf.log_softmax(x, -1)).trace(pf.spec((2, WIDE), f32))
    groups = recompute_groups(fusion, lambda group: False)
    assert groups is not None and len(groups) == 3
    for index, group in enumerate(groups):
        written = segment_pass._written(fusion, group, groups[index + 1 :])
        if index < len(groups) - 1:
            assert [tv.numel for tv in written] == [2]
        else:
            assert [tv for tv in written] == fusion.outputs
    # x - max is computed by the second kernel (for the sum) and again by the third.
    shared = {id(e) for e in groups[1]} & {id(e) for e in groups[2]}
    assert shared


def test_products_cats_and_slices_are_not_recomputed() -> None:
    fusion = pf.fuse(lambda a, b: pf.softmax(a @ b, -1)).trace(
        pf.spec((4, 8), f32), pf.spec((8, 4), f32)
    )
    assert recompute_groups(fusion, lambda group: True) is None
    fusion = pf.fuse(lambda x: pf.softmax(x[:, 1:], -1)).trace(pf.spec((4, 8), f32))
    assert recompute_groups(fusion, lambda group: True) is None


def test_merging_takes_what_one_scheduler_accepts() -> None:
    fusion = pf.fuse(lambda x: pf.log_softmax(x, -1)).trace(pf.spec((2, 64), f32))
    groups = recompute_groups(fusion, lambda group: segment_pass._accepted(fusion, group, HOPPER))
    assert groups is not None and len(groups) == 1  # narrow rows: one persistent kernel


@pytest.mark.parametrize(
    ("name", "fn", "inputs", "kernels"),
    [
        # The normalized tensor is an output too: the outputs' kernel writes it, and the
        # reduction kernels that recompute it keep it in registers.
        ("temperature", lambda x: (x * 0.5, pf.log_softmax(x * 0.5, -1)), 1, 3),
        ("residual", lambda x, r, w: (x + r, pf.rms_norm(x + r, w)), 3, 2),
    ],
)
def test_a_recomputed_output_is_written_by_the_outputs_kernel(name, fn, inputs, kernels) -> None:  # type: ignore[no-untyped-def]
    specs = [pf.spec((3, WIDE), f32)] * min(inputs, 2) + [pf.spec((WIDE,), f32)] * (inputs - 2)
    result = check_fusion(fn, specs, rtol=1e-4, atol=1e-4)
    assert len(result.kernels) == kernels, name
    _per_row(result, 3)


def test_long_chains_keep_the_greedy_kernels() -> None:
    # Six normalizations in a row would recompute 6^2 exprs: the greedy grouping is kept
    # (24 kernels, as before the recomputing groups), and so is a failed recomputing plan's.
    def fn(x):  # type: ignore[no-untyped-def]
        y = x
        for i in range(6):
            y = pf.tanh(y) - pf.mean(y, i % 2, keepdim=True)
        return y

    result = pipeline.run(pf.fuse(fn).trace(pf.spec((64, WIDE), f32)), HOPPER)
    assert len(result.kernels) == 24
    assert not result.segmented.recomputed


def test_a_failed_recomputing_kernel_falls_back_to_the_greedy_kernels() -> None:
    # The means over rows and over columns merge into a group that a scheduler accepts but
    # whose row does not fit the registers: the greedy kernels run instead of a cut.
    result = check_fusion(
        lambda x: x - pf.mean(x, 0, keepdim=True) - pf.mean(x, 1, keepdim=True),
        [pf.spec((3, WIDE), f32)],
        rtol=1e-4,
        atol=1e-4,
    )
    assert len(result.kernels) == 3
