"""translate_patterns: MatmulOp, LinearOp and multiply-sum become one MmaOp each, with kept
broadcasts, fp32 accumulation, the right number of casts and recorded roles. Every rewrite is
checked against the NumPy interpreter on random data with ragged shapes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

import pyfuse as pf
from pyfuse.ir import dtypes, ops
from pyfuse.ir.dtypes import DType
from pyfuse.ir.exprs import (
    BinaryOp,
    BinaryOpType,
    BroadcastOp,
    CastOp,
    Expr,
    LinearOp,
    MatmulOp,
    MmaOp,
    PermuteOp,
    ReductionOp,
    ReductionOpType,
)
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.interpreter import evaluate
from pyfuse.ir.tensor import MemoryType, TensorView, make_tensor
from pyfuse.passes.matmul_patterns import DimRole, PatternKind, describe_all
from pyfuse.passes.skip_intermediates import global_intermediates, skip_intermediates
from pyfuse.passes.translate_patterns import TranslationResult, translate_patterns

Array = np.ndarray[Any, Any]
M, N, K = 37, 29, 45  # ragged: no tile divides them
BF16 = pf.bfloat16
F16 = pf.float16
MNK = (DimRole.M, DimRole.N, DimRole.K)


# ---- helpers ------------------------------------------------------------------------------------


def trace(fn: Callable[..., Any], *specs: pf.Spec) -> Fusion:
    return pf.fuse(fn).trace(*specs)


def random_inputs(fusion: Fusion, seed: int = 0) -> list[Array]:
    generator = np.random.default_rng(seed)
    return [
        generator.uniform(-1.0, 1.0, size=tv.shape).astype(tv.dtype.numpy()) for tv in fusion.inputs
    ]


def translate_checked(fusion: Fusion, *, exact: bool = False) -> TranslationResult:
    """Translate ``fusion`` in place and check its outputs match the untranslated fusion's
    (bit for bit when ``exact``; else to 16-bit rounding: elided round trips and exact
    mul-sum products change the last bits)."""
    original, _ = fusion.clone()
    inputs = random_inputs(fusion)
    expected = evaluate(original, inputs)
    result = translate_patterns(fusion)
    got = evaluate(fusion, inputs)
    assert len(got) == len(expected)
    for got_value, expected_value in zip(got, expected, strict=True):
        assert got_value.dtype == expected_value.dtype
        want = expected_value.astype(np.float64)
        have = got_value.astype(np.float64)
        if exact:
            np.testing.assert_array_equal(have, want)
        else:
            scale = max(1.0, float(np.abs(want).max()))
            np.testing.assert_allclose(have, want, rtol=2e-2, atol=2e-2 * scale)
    return result


def exprs_of(fusion: Fusion, kind: type[Expr]) -> list[Any]:
    return [expr for expr in fusion.exprs() if isinstance(expr, kind)]


def casts_to(fusion: Fusion, *targets: DType) -> list[CastOp]:
    return [cast for cast in exprs_of(fusion, CastOp) if cast.output.dtype in targets]


def root_input(tv: TensorView) -> TensorView:
    """Walk single-input metadata ops back to where ``tv`` comes from."""
    while tv.definition is not None and isinstance(tv.definition, BroadcastOp | PermuteOp):
        tv = tv.definition.tensor_inputs[0]
    return tv


def check_canonical_operands(mma: MmaOp) -> None:
    """A is [..., M, 1, K] and B is [..., 1, N, K], made by kept BroadcastOps."""
    a_axes, b_axes = mma.a.logical, mma.b.logical
    assert isinstance(mma.a.definition, BroadcastOp)
    assert isinstance(mma.b.definition, BroadcastOp)
    assert not a_axes[-3].is_broadcast and a_axes[-2].is_broadcast
    assert b_axes[-3].is_broadcast and not b_axes[-2].is_broadcast
    assert mma.output.dtype == dtypes.float32
    assert mma.output.logical[-1].is_reduction


# ---- one MmaOp per matmul -----------------------------------------------------------------------


def test_matmul_2d_becomes_one_mma_with_kept_broadcasts() -> None:
    fusion = trace(lambda a, b: a @ b, pf.spec((M, K), BF16), pf.spec((K, N), BF16))
    a, b = fusion.inputs
    (matmul,) = exprs_of(fusion, MatmulOp)
    result = translate_checked(fusion, exact=True)
    assert not exprs_of(fusion, MatmulOp)
    (mma,) = exprs_of(fusion, MmaOp)
    check_canonical_operands(mma)
    assert mma.a.definition.tensor_inputs == [a]
    assert mma.a.definition.is_new == (False, True, False)
    # B [K, N] is permuted to [N, K], then broadcast to [1, N, K].
    permute = mma.b.definition.tensor_inputs[0].definition
    assert isinstance(permute, PermuteOp) and permute.perm == (1, 0)
    assert permute.tensor_inputs == [b]
    assert [axis.extent for axis in mma.output.logical] == [M, N, K]
    (pattern,) = result.patterns
    assert pattern.kind == PatternKind.MATMUL
    assert pattern.mma is mma and pattern.a is mma.a and pattern.b is mma.b
    assert pattern.a_inputs == (a,) and pattern.b_inputs == (b,)
    assert pattern.outputs == tuple(fusion.outputs)
    assert pattern.dim_roles == MNK
    assert pattern.epilogue_inputs == ()
    assert result.untranslated == []
    # New exprs point at the user's line of the matmul, for later errors.
    assert matmul.source is not None
    assert {expr.source for expr in fusion.exprs()} == {matmul.source}
    # The result left in bf16: exactly one cast back, and it is the output.
    (cast,) = exprs_of(fusion, CastOp)
    assert cast.output is fusion.outputs[0] and cast.tensor_inputs == [mma.output]


@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_becomes_one_mma(with_bias: bool) -> None:
    specs = [pf.spec((M, K), BF16), pf.spec((N, K), BF16)]
    if with_bias:
        specs.append(pf.spec((N,), BF16))
    fusion = trace(lambda x, w, *bias: pf.linear(x, w, *bias), *specs)
    result = translate_checked(fusion)
    assert not exprs_of(fusion, LinearOp)
    (mma,) = exprs_of(fusion, MmaOp)
    check_canonical_operands(mma)
    x, w = fusion.inputs[:2]
    assert mma.a.definition.tensor_inputs == [x]
    assert mma.b.definition.tensor_inputs == [w]  # [N, K] needs no permute
    assert not exprs_of(fusion, PermuteOp)
    (pattern,) = result.patterns
    assert pattern.kind == PatternKind.LINEAR
    assert pattern.dim_roles == MNK
    assert len(casts_to(fusion, BF16)) == 1
    adds = [e for e in exprs_of(fusion, BinaryOp) if e.op == BinaryOpType.ADD]
    if with_bias:
        # The bias is an epilogue add in fp32 on the accumulator.
        (add,) = adds
        assert add.output.dtype == dtypes.float32
        assert add.inputs[0] is mma.output
        assert pattern.epilogue_inputs == (fusion.inputs[2],)
    else:
        assert adds == []
        assert len(exprs_of(fusion, CastOp)) == 1


def test_linear_with_batched_input() -> None:
    fusion = trace(
        lambda x, w, b: pf.linear(x, w, b),
        pf.spec((3, 2, M, K), BF16),
        pf.spec((N, K), BF16),
        pf.spec((N,), BF16),
    )
    result = translate_checked(fusion)
    (mma,) = exprs_of(fusion, MmaOp)
    check_canonical_operands(mma)
    assert mma.b.definition.is_new == (True, True, True, False, False)
    # x's batch axes are M axes: only A has them.
    assert result.patterns[0].dim_roles == (DimRole.M, DimRole.M, *MNK)


def test_mul_sum_becomes_one_mma() -> None:
    fusion = trace(
        lambda a, b: (pf.unsqueeze(a, 1) * pf.unsqueeze(b, 0)).sum(-1),
        pf.spec((M, K), BF16),
        pf.spec((N, K), BF16),
    )
    a, b = fusion.inputs
    result = translate_checked(fusion)
    assert not [r for r in exprs_of(fusion, ReductionOp)]
    assert not exprs_of(fusion, BinaryOp)  # the M*N*K product is gone
    (mma,) = exprs_of(fusion, MmaOp)
    check_canonical_operands(mma)
    assert root_input(mma.a) is a and root_input(mma.b) is b
    (pattern,) = result.patterns
    assert pattern.kind == PatternKind.MUL_SUM and pattern.dim_roles == MNK
    assert len(exprs_of(fusion, CastOp)) == 1  # the sum's own cast back to bf16


def test_mul_sum_with_b_defined_before_a_keeps_roles() -> None:
    # The weight's broadcast is traced first and is the mul's left operand.
    def fn(a: pf.Tensor, w: pf.Tensor) -> pf.Tensor:
        w_b = pf.unsqueeze(w, 0)
        a_b = pf.unsqueeze(a, 1)
        return (w_b * a_b).sum(-1)

    fusion = trace(fn, pf.spec((M, K), BF16), pf.spec((N, K), BF16))
    a, w = fusion.inputs
    result = translate_checked(fusion)
    (mma,) = exprs_of(fusion, MmaOp)
    assert root_input(mma.a) is a and root_input(mma.b) is w
    assert result.patterns[0].dim_roles == MNK
    assert result.patterns[0].a_inputs == (a,)
    assert result.patterns[0].b_inputs == (w,)


def test_mul_sum_with_b_input_created_before_a_by_hand() -> None:
    fusion = Fusion()
    with fusion:
        w = fusion.add_input(make_tensor((N, K), dtypes.float16))
        a = fusion.add_input(make_tensor((M, K), dtypes.float16))
        w_b = ops.broadcast(w, [True, False, False])
        a_b = ops.broadcast(a, [False, True, False])
        # Casts to f32 right before the mul are looked through.
        product = ops.binary(
            BinaryOpType.MUL, ops.cast(w_b, dtypes.float32), ops.cast(a_b, dtypes.float32)
        )
        fusion.add_output(ops.reduce(ReductionOpType.SUM, product, -1))
    result = translate_checked(fusion)
    (mma,) = exprs_of(fusion, MmaOp)
    assert mma.a is a_b and mma.b is w_b  # the f16 operands, not their f32 casts
    assert result.patterns[0].dim_roles == MNK
    assert exprs_of(fusion, CastOp) == []  # the f32 output needs none


def test_mul_sum_keeps_user_axis_order() -> None:
    # K outermost, N before M in the output: roles follow the axes, not positions.
    def fn(a: pf.Tensor, b: pf.Tensor) -> pf.Tensor:  # a [K, M], b [K, N]
        return (pf.unsqueeze(a, 1) * pf.unsqueeze(b, 2)).sum(0)  # [K, 1, M] * [K, N, 1]

    fusion = trace(fn, pf.spec((K, M), BF16), pf.spec((K, N), BF16))
    a, b = fusion.inputs
    result = translate_checked(fusion)
    (mma,) = exprs_of(fusion, MmaOp)
    # The innermost one-sided axis (M of a) is called N, so a is operand B.
    assert result.patterns[0].dim_roles == (DimRole.K, DimRole.M, DimRole.N)
    assert root_input(mma.b) is a and root_input(mma.a) is b


@pytest.mark.parametrize(
    ("fn", "shapes", "reason"),
    [
        (lambda x: (x * x).sum(-1), [(M, K)], "reduction, not a matmul"),
        (
            lambda a, v: (a * pf.unsqueeze(v, 0)).sum(-1),
            [(M, K), (K,)],
            "matrix-vector",
        ),
        # Products rounded to bf16 before the f32 sum: an MMA would not round them (a
        # correctness hunt on the CPU found 3 of 4 elements off at 2x2x8).
        (
            lambda a, b: (pf.unsqueeze(a, 1) * pf.unsqueeze(b, 0)).float().sum(-1),
            [(M, K), (N, K)],
            "rounded to bfloat16 and their sum kept in float32",
        ),
    ],
)
def test_mul_sum_that_is_no_matmul_is_left_alone(
    fn: Callable[..., Any], shapes: list[tuple[int, ...]], reason: str
) -> None:
    fusion = trace(fn, *(pf.spec(shape, BF16) for shape in shapes))
    result = translate_checked(fusion, exact=True)
    assert exprs_of(fusion, MmaOp) == []
    assert len(exprs_of(fusion, ReductionOp)) == 1
    (untranslated,) = result.untranslated
    assert untranslated.kind == PatternKind.MUL_SUM and reason in untranslated.reason


def test_mul_sum_whose_product_has_other_uses_is_left_alone() -> None:
    def fn(a: pf.Tensor, b: pf.Tensor) -> tuple[pf.Tensor, pf.Tensor]:
        product = pf.unsqueeze(a, 1) * pf.unsqueeze(b, 0)
        return product.sum(-1), product

    fusion = trace(fn, pf.spec((M, K), BF16), pf.spec((N, K), BF16))
    result = translate_checked(fusion, exact=True)
    assert exprs_of(fusion, MmaOp) == []
    assert "other uses" in result.untranslated[0].reason


# ---- casts --------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["matmul", "linear"])
@pytest.mark.parametrize(
    ("epilogue", "pre_epilogue_output", "expected_casts"),
    [
        (False, False, 1),  # mma -> cast(f16)
        (True, False, 3),  # mma -> cast(f16) -> cast(f32) -> sin -> cast(f16): torch's rounding
        (True, True, 3),  # the pre-epilogue tensor is an output too: the same one cast
    ],
)
def test_count_casts(
    op: str, epilogue: bool, pre_epilogue_output: bool, expected_casts: int
) -> None:
    def fn(a: pf.Tensor, b: pf.Tensor) -> Any:
        y = a @ b.T if op == "matmul" else pf.linear(a, b)
        out = pf.sin(y.to(pf.float32)).to(F16) if epilogue else y
        return (y, out) if pre_epilogue_output else out

    fusion = trace(fn, pf.spec((M, K), F16), pf.spec((N, K), F16))
    result = translate_checked(fusion)
    (mma,) = exprs_of(fusion, MmaOp)
    assert len(exprs_of(fusion, CastOp)) == expected_casts
    assert len(casts_to(fusion, F16)) == (2 if epilogue else 1)
    (rounded,) = [use.output for use in mma.output.uses]
    assert rounded.dtype == F16  # the accumulator rounds to the matmul's dtype first
    assert mma.output in result.replacements.values() or rounded in result.replacements.values()
    assert result.patterns[0].outputs == tuple(fusion.outputs)


def test_fp32_epilogue_keeps_the_rounding() -> None:
    # (a @ b).to(f32) in torch is the bf16 product widened: the epilogue reads that.
    fusion = trace(
        lambda a, b: pf.silu((a @ b).to(pf.float32)), pf.spec((M, K), BF16), pf.spec((K, N), BF16)
    )
    translate_checked(fusion)
    (mma,) = exprs_of(fusion, MmaOp)
    assert [c.output.dtype for c in exprs_of(fusion, CastOp)] == [BF16, pf.float32]
    (silu,) = [e for e in fusion.exprs() if e.op_name == "silu"]
    widened = silu.tensor_inputs[0].definition
    rounded = widened.tensor_inputs[0].definition
    assert rounded.tensor_inputs == [mma.output]


def test_fp32_split_k_part_needs_no_cast() -> None:
    # A matmul whose own dtype is f32 (split-K's parts): the accumulator is the result.
    def fn(a: pf.Tensor, b: pf.Tensor) -> pf.Tensor:
        from pyfuse.frontend.ops import Tensor

        return Tensor(ops.matmul(a.tv, b.tv, out_dtype=pf.float32))

    fusion = trace(fn, pf.spec((M, K), BF16), pf.spec((K, N), BF16))
    translate_checked(fusion)
    (mma,) = exprs_of(fusion, MmaOp)
    assert exprs_of(fusion, CastOp) == []
    assert fusion.outputs == [mma.output]
    assert mma.output.memory_type == MemoryType.GLOBAL


def test_bf16_epilogue_reads_one_cast() -> None:
    # gelu of the bf16 result as traced (no f32 round trip): one cast, then gelu in bf16.
    fusion = trace(
        lambda a, b: pf.gelu(a @ b, approximate="tanh"),
        pf.spec((M, K), BF16),
        pf.spec((K, N), BF16),
    )
    translate_checked(fusion, exact=True)
    (cast,) = exprs_of(fusion, CastOp)
    (gelu,) = [e for e in fusion.exprs() if e.op_name == "gelu_tanh"]
    assert gelu.tensor_inputs == [cast.output]


# ---- several matmuls ----------------------------------------------------------------------------


def test_gate_up_pair_reuses_one_broadcast_of_the_shared_operand() -> None:
    fusion = trace(
        lambda x, w1, w3: pf.silu(x @ w1.T) * (x @ w3.T),
        pf.spec((M, K), BF16),
        pf.spec((N, K), BF16),
        pf.spec((N, K), BF16),
    )
    x, w1, w3 = fusion.inputs
    result = translate_checked(fusion)
    first, second = exprs_of(fusion, MmaOp)
    assert first.a is second.a  # one broadcast of x
    x_broadcasts = [use for use in fusion.uses_in_fusion(x) if isinstance(use, BroadcastOp)]
    assert len(x_broadcasts) == 1
    # w.T then the MMA's [N, K] transpose cancel: the weights are read as they lie.
    assert exprs_of(fusion, PermuteOp) == []
    assert first.b.definition.tensor_inputs == [w1]
    assert second.b.definition.tensor_inputs == [w3]
    assert [p.b_inputs for p in result.patterns] == [(w1,), (w3,)]
    assert all(p.epilogue_inputs == () for p in result.patterns)
    # A scheduler asking again later gets the same roles.
    assert describe_all(fusion) == [
        dataclasses.replace(pattern, kind=PatternKind.MMA) for pattern in result.patterns
    ]


def test_chained_matmuls_translate_both() -> None:
    fusion = trace(
        lambda a, b, c: (a @ b) @ c,
        pf.spec((M, K), BF16),
        pf.spec((K, N), BF16),
        pf.spec((N, 19), BF16),
    )
    translate_checked(fusion, exact=True)
    first, second = exprs_of(fusion, MmaOp)
    # The second reads the bf16 cast of the first (a value rounded to bf16, as traced).
    (between,) = [c for c in exprs_of(fusion, CastOp) if c.tensor_inputs == [first.output]]
    assert root_input(second.a) is between.output


def test_existing_mma_is_recorded_unchanged() -> None:
    fusion = trace(lambda a, b: a @ b, pf.spec((M, K), BF16), pf.spec((K, N), BF16))
    translate_patterns(fusion)
    before = str(fusion)
    result = translate_checked(fusion, exact=True)
    assert str(fusion) == before
    assert [p.kind for p in result.patterns] == [PatternKind.MMA]


# ---- layouts and batches ------------------------------------------------------------------------

LAYOUTS = [(a_k_major, b_k_major) for a_k_major in (True, False) for b_k_major in (True, False)]


def _layout_fn(a_k_major: bool, b_k_major: bool) -> Callable[..., Any]:
    """a @ b with A [M, K] and B [K, N], each given as stored or as the transpose of the
    stored tensor (K-major A is [M, K] in memory; K-major B is [N, K])."""

    def fn(a: pf.Tensor, b: pf.Tensor) -> pf.Tensor:
        return (a if a_k_major else a.T) @ (b.T if b_k_major else b)

    return fn


@pytest.mark.parametrize(("a_k_major", "b_k_major"), LAYOUTS)
def test_layouts_as_transposes_in_the_user_function(a_k_major: bool, b_k_major: bool) -> None:
    a_shape = (M, K) if a_k_major else (K, M)
    b_shape = (N, K) if b_k_major else (K, N)
    fusion = trace(_layout_fn(a_k_major, b_k_major), pf.spec(a_shape, BF16), pf.spec(b_shape, BF16))
    a, b = fusion.inputs
    result = translate_checked(fusion, exact=True)
    (mma,) = exprs_of(fusion, MmaOp)
    check_canonical_operands(mma)
    assert [axis.extent for axis in mma.output.logical] == [M, N, K]
    assert root_input(mma.a) is a and root_input(mma.b) is b
    assert result.patterns[0].dim_roles == MNK
    # Every op between an input and the MMA is metadata: all become aliases.
    aliased = skip_intermediates(fusion)
    assert mma.a in aliased and mma.b in aliased
    assert global_intermediates(fusion) == []
    # The operands' allocation domains follow the inputs' memory: K innermost iff K-major.
    assert mma.a.allocation is not None and mma.b.allocation is not None
    assert (mma.a.allocation[-1] is mma.a.logical[-1]) == a_k_major
    assert (mma.b.allocation[-1] is mma.b.logical[-1]) == b_k_major


@pytest.mark.parametrize(("a_k_major", "b_k_major"), LAYOUTS)
def test_layouts_as_strided_inputs(a_k_major: bool, b_k_major: bool) -> None:
    a_strides = (K, 1) if a_k_major else (1, M)
    b_strides = (1, K) if b_k_major else (N, 1)
    fusion = trace(
        lambda a, b: a @ b,
        pf.spec((M, K), BF16, strides=a_strides),
        pf.spec((K, N), BF16, strides=b_strides),
    )
    a, b = fusion.inputs
    translate_checked(fusion, exact=True)
    (mma,) = exprs_of(fusion, MmaOp)
    check_canonical_operands(mma)
    assert root_input(mma.a) is a and root_input(mma.b) is b
    skip_intermediates(fusion)
    assert global_intermediates(fusion) == []
    assert mma.a.alias_of is a and mma.b.alias_of is b
    assert (mma.a.allocation[-1] is mma.a.logical[-1]) == a_k_major  # type: ignore[index]
    assert (mma.b.allocation[-1] is mma.b.logical[-1]) == b_k_major  # type: ignore[index]


def test_batched_matmul() -> None:
    fusion = trace(lambda a, b: a @ b, pf.spec((3, M, K), BF16), pf.spec((3, K, N), BF16))
    result = translate_checked(fusion, exact=True)
    (mma,) = exprs_of(fusion, MmaOp)
    check_canonical_operands(mma)
    assert [axis.extent for axis in mma.output.logical] == [3, M, N, K]
    assert result.patterns[0].dim_roles == (DimRole.BATCH, *MNK)
    permute = mma.b.definition.tensor_inputs[0].definition
    assert isinstance(permute, PermuteOp) and permute.perm == (0, 2, 1)


def test_broadcast_batch_matmul() -> None:
    fusion = trace(lambda a, b: a @ b, pf.spec((2, 1, M, K), BF16), pf.spec((5, K, N), BF16))
    result = translate_checked(fusion, exact=True)
    (mma,) = exprs_of(fusion, MmaOp)
    check_canonical_operands(mma)
    assert [axis.extent for axis in mma.output.logical] == [2, 5, M, N, K]
    # B gets a leading broadcast; A's size-1 batch stays a broadcast. An axis where only one
    # operand has data is an M (A) or N (B) axis.
    assert mma.b.definition.is_new == (True, False, True, False, False)
    assert result.patterns[0].dim_roles == (DimRole.M, DimRole.N, *MNK)


def test_lower_rank_operand_gets_outer_broadcasts() -> None:
    fusion = trace(lambda a, b: a @ b, pf.spec((4, M, K), BF16), pf.spec((K, N), BF16))
    translate_checked(fusion, exact=True)
    (mma,) = exprs_of(fusion, MmaOp)
    assert mma.b.definition.is_new == (True, True, False, False)


# ---- epilogues ----------------------------------------------------------------------------------


@pytest.mark.parametrize("pre_activation_output", [False, True])
def test_epilogue_with_bias_activation_residual_and_cast(pre_activation_output: bool) -> None:
    def fn(x: pf.Tensor, w: pf.Tensor, bias: pf.Tensor, residual: pf.Tensor) -> Any:
        h = pf.linear(x, w, bias)
        y = (pf.gelu(h.to(pf.float32), approximate="tanh") + residual.to(pf.float32)).to(BF16)
        return (y, h) if pre_activation_output else y

    fusion = trace(
        fn,
        pf.spec((M, K), BF16),
        pf.spec((N, K), BF16),
        pf.spec((N,), BF16),
        pf.spec((M, N), BF16),
    )
    x, w, bias, residual = fusion.inputs
    result = translate_checked(fusion)
    (mma,) = exprs_of(fusion, MmaOp)
    (pattern,) = result.patterns
    assert pattern.epilogue_inputs == (bias, residual)
    assert pattern.a_inputs == (x,) and pattern.b_inputs == (w,)
    assert pattern.outputs == tuple(fusion.outputs)
    # The fp32 bias add rounds to bf16 once (as cuBLAS's epilogue does); the gelu reads that
    # value widened, and h, an output too, is that same rounded tensor.
    assert len(casts_to(fusion, BF16)) == 2
    (add_bias,) = [e for e in exprs_of(fusion, BinaryOp) if mma.output in e.inputs]
    (h_cast,) = [c for c in casts_to(fusion, BF16) if c.tensor_inputs == [add_bias.output]]
    (gelu,) = [e for e in fusion.exprs() if e.op_name == "gelu_tanh"]
    assert gelu.tensor_inputs[0].definition.tensor_inputs == [h_cast.output]
    if pre_activation_output:
        assert h_cast.output is fusion.outputs[1]


# ---- not translated -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "dtype", "reason"),
    [
        ((K,), (K, N), BF16, "1-D"),
        ((M, K), (K,), BF16, "1-D"),
        ((M, K), (K, N), pf.float32, "float32 operands"),
        ((1, K), (K, N), BF16, "M = 1"),
        ((M, 1), (1, N), BF16, "K = 1"),
    ],
)
def test_untranslated_matmul_stays_with_a_reason(
    a_shape: Sequence[int], b_shape: Sequence[int], dtype: DType, reason: str
) -> None:
    fusion = trace(lambda a, b: a @ b, pf.spec(a_shape, dtype), pf.spec(b_shape, dtype))
    before = str(fusion)
    result = translate_checked(fusion, exact=True)
    assert str(fusion) == before
    (untranslated,) = result.untranslated
    assert untranslated.kind == PatternKind.MATMUL
    assert isinstance(untranslated.expr, MatmulOp)
    assert reason in untranslated.reason
    assert result.patterns == []


def test_replacements_name_the_new_tensors() -> None:
    fusion = trace(lambda a, b: pf.exp(a @ b), pf.spec((M, K), BF16), pf.spec((K, N), BF16))
    (matmul,) = exprs_of(fusion, MatmulOp)
    original = matmul.output
    result = translate_checked(fusion, exact=True)
    (cast,) = exprs_of(fusion, CastOp)
    assert result.replacements == {original: cast.output}
    # The replaced op is unlinked: no dead use lingers on the inputs.
    assert all(use is not matmul for tv in fusion.inputs for use in tv.uses)
