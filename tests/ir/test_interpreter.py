"""The NumPy interpreter against NumPy written out by hand, on random data."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt
import pytest

from pyfuse.errors import FusionError, InputError
from pyfuse.ir import dtypes
from pyfuse.ir.dtypes import DType
from pyfuse.ir.exprs import (
    BinaryOp,
    BinaryOpType,
    BroadcastOp,
    CastOp,
    ExpandOp,
    LinearOp,
    LoadStoreOp,
    MatmulOp,
    MmaOp,
    PermuteOp,
    ReductionOp,
    ReductionOpType,
    ReshapeOp,
    SqueezeOp,
    TernaryOp,
    UnaryOp,
    UnaryOpType,
)
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.interpreter import evaluate, evaluate_all
from pyfuse.ir.iterdomain import IterDomain, IterType
from pyfuse.ir.reference_math import erf
from pyfuse.ir.tensor import Scalar, TensorView, make_tensor, new_axes_like

BF16 = np.dtype(ml_dtypes.bfloat16)
Array = np.ndarray[Any, Any]


def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def random_float(shape: Sequence[int], low: float = 0.25, high: float = 2.0) -> Array:
    """Nonzero values of both signs with magnitudes in [low, high)."""
    generator = rng()
    magnitude = generator.uniform(low, high, size=shape)
    sign = generator.choice([-1.0, 1.0], size=shape)
    return np.asarray(magnitude * sign)


def f32(array: npt.ArrayLike) -> Array:
    return np.asarray(array, dtype=np.float32)


def to_bf16(array: npt.ArrayLike) -> Array:
    return np.asarray(array, dtype=np.float64).astype(np.float32).astype(BF16)


def like(tv: TensorView, dtype: DType | None = None) -> TensorView:
    """An output tensor with ``tv``'s axes."""
    return TensorView(new_axes_like(tv.no_reductions), dtype or tv.dtype)


def reduced(tv: TensorView, axes: Sequence[int], dtype: DType | None = None) -> TensorView:
    """The output of reducing ``tv`` over ``axes``: those axes become reduction axes."""
    out_axes = [
        IterDomain(axis.extent, IterType.REDUCTION)
        if index in axes
        else IterDomain(axis.extent, axis.iter_type)
        for index, axis in enumerate(tv.no_reductions)
    ]
    return TensorView(out_axes, dtype or tv.dtype)


def matmul_output(
    batch: Sequence[int], m: int | None, n: int | None, k: int, dtype: DType
) -> TensorView:
    sizes = [*batch, *([m] if m is not None else []), *([n] if n is not None else [])]
    axes = [*make_tensor(sizes, dtype).logical, IterDomain(k, IterType.REDUCTION)]
    return TensorView(axes, dtype)


# ---- unary ops ---------------------------------------------------------------------------------


def _math_erf(x: Array) -> Array:
    values: Array = np.array([math.erf(value) for value in x.ravel()], dtype=np.float64)
    values.shape = x.shape
    return values


def _sigmoid(x: Array) -> Array:
    return 1 / (1 + np.exp(-x))


def _gelu_tanh(x: Array) -> Array:
    # Far down the negative tail exp overflows to inf and the quotient is the -0 it tends to.
    with np.errstate(over="ignore"):
        values: Array = x / (1 + np.exp(-2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return values


UNARY_REFERENCE: dict[UnaryOpType, Callable[[Array], Any]] = {
    UnaryOpType.NEG: lambda x: -x,
    UnaryOpType.ABS: np.abs,
    UnaryOpType.EXP: np.exp,
    UnaryOpType.LOG: lambda x: np.log(np.abs(x)),
    UnaryOpType.TANH: np.tanh,
    UnaryOpType.SIGMOID: _sigmoid,
    UnaryOpType.RELU: lambda x: np.where(x > 0, x, 0.0),
    # Written as math.erfc and a sigmoid: no cancellation for x < 0, where the reference
    # keeps relative accuracy too (``1 + erf`` would lose it).
    UnaryOpType.GELU: np.vectorize(lambda v: v * 0.5 * math.erfc(-v / math.sqrt(2))),
    UnaryOpType.GELU_TANH: _gelu_tanh,
    UnaryOpType.SILU: lambda x: x * _sigmoid(x),
    UnaryOpType.SQRT: lambda x: np.sqrt(np.abs(x)),
    UnaryOpType.RSQRT: lambda x: 1 / np.sqrt(np.abs(x)),
    UnaryOpType.RECIPROCAL: lambda x: 1 / x,
    UnaryOpType.SIN: np.sin,
    UnaryOpType.COS: np.cos,
    UnaryOpType.ERF: np.vectorize(math.erf),
    UnaryOpType.FLOOR: np.floor,
    UnaryOpType.CEIL: np.ceil,
    UnaryOpType.ROUND: np.round,  # half to even
    UnaryOpType.TRUNC: np.trunc,
    UnaryOpType.LOGICAL_NOT: lambda x: x == 0,
    UnaryOpType.BITWISE_NOT: np.invert,
}
# Ops whose domain is positive: the test feeds them |x|.
POSITIVE_ONLY = {UnaryOpType.LOG, UnaryOpType.SQRT, UnaryOpType.RSQRT}


def test_unary_reference_covers_every_op() -> None:
    assert set(UNARY_REFERENCE) == set(UnaryOpType)


def unary_fusion(op: UnaryOpType, shape: Sequence[int], dtype: DType, out_dtype: DType) -> Fusion:
    with Fusion() as fusion:
        x = fusion.add_input(make_tensor(shape, dtype))
        out = like(x, out_dtype)
        UnaryOp(op, out, x)
        fusion.add_output(out)
    return fusion


# The ops defined on floats (bitwise_not takes integers only).
FLOAT_UNARY = [op for op in UnaryOpType if op != UnaryOpType.BITWISE_NOT]


@pytest.mark.parametrize("op", FLOAT_UNARY, ids=lambda op: op.value)
def test_unary_float64_exact_math(op: UnaryOpType) -> None:
    x = random_float((5, 7), 0.05, 4.0)
    if op in POSITIVE_ONLY:
        x = np.abs(x)
    out_dtype = dtypes.bool_ if op == UnaryOpType.LOGICAL_NOT else dtypes.float64
    (result,) = evaluate(unary_fusion(op, x.shape, dtypes.float64, out_dtype), [x])
    expected = UNARY_REFERENCE[op](x)
    assert result.dtype == out_dtype.numpy()
    np.testing.assert_allclose(result, expected, rtol=1e-14, atol=1e-300)


@pytest.mark.parametrize("op", FLOAT_UNARY, ids=lambda op: op.value)
def test_unary_float32(op: UnaryOpType) -> None:
    x = f32(random_float((4, 6), 0.05, 4.0))
    if op in POSITIVE_ONLY:
        x = np.abs(x)
    out_dtype = dtypes.bool_ if op == UnaryOpType.LOGICAL_NOT else dtypes.float32
    (result,) = evaluate(unary_fusion(op, x.shape, dtypes.float32, out_dtype), [x])
    expected = UNARY_REFERENCE[op](x.astype(np.float64)).astype(out_dtype.numpy())
    assert result.dtype == out_dtype.numpy()
    np.testing.assert_allclose(result, expected, rtol=2e-7)


def test_logical_not_of_ints_with_zeros() -> None:
    x = rng().integers(-2, 3, size=(20,)).astype(np.int32)
    (result,) = evaluate(
        unary_fusion(UnaryOpType.LOGICAL_NOT, x.shape, dtypes.int32, dtypes.bool_), [x]
    )
    np.testing.assert_array_equal(result, x == 0)


@pytest.mark.parametrize(
    "op", [UnaryOpType.NEG, UnaryOpType.ABS, UnaryOpType.RELU, UnaryOpType.BITWISE_NOT]
)
def test_integral_unary_stays_integral(op: UnaryOpType) -> None:
    x = rng().integers(-100, 100, size=(3, 5)).astype(np.int32)
    (result,) = evaluate(unary_fusion(op, x.shape, dtypes.int32, dtypes.int32), [x])
    assert result.dtype == np.int32
    np.testing.assert_array_equal(result, UNARY_REFERENCE[op](x).astype(np.int32))


def test_float_unary_of_int_input() -> None:
    x = rng().integers(1, 50, size=(6,)).astype(np.int64)
    (result,) = evaluate(unary_fusion(UnaryOpType.SQRT, x.shape, dtypes.int64, dtypes.float32), [x])
    np.testing.assert_array_equal(result, np.sqrt(x.astype(np.float64)).astype(np.float32))


def test_erf_matches_math_erf_to_an_ulp() -> None:
    generator = rng()
    edges = np.array([0.84375, 1.25, 1 / 0.35, 6.0, 1e-300, 5e-324, 3e-9, 27.0, 1e10])
    x = np.concatenate(
        [
            generator.uniform(-7, 7, 20000),
            generator.normal(0, 1, 20000),
            edges,
            -edges,
            np.nextafter(edges, 0.0),
            np.nextafter(edges, 100.0),
        ]
    )
    expected = _math_erf(x)
    result = erf(x)
    assert np.all(np.abs(result - expected) <= np.spacing(np.abs(expected)))
    special = erf(np.array([np.nan, np.inf, -np.inf, -0.0]))
    assert np.isnan(special[0]) and special[1] == 1.0 and special[2] == -1.0
    assert special[3] == 0.0 and np.signbit(special[3])


def test_gelu_tail_keeps_its_sign() -> None:
    """Far left the true gelu is a tiny negative number, not the 0 that ``1 + erf`` (or
    ``1 + tanh``) rounds to: ``log(gelu(x))`` is NaN there, as the GPU kernels give; below
    2**-100 it is a zero of x's sign, as in the kernels."""
    x = np.array([-7.0, -9.0, -40.0])
    for op in (UnaryOpType.GELU, UnaryOpType.GELU_TANH):
        (result,) = evaluate(unary_fusion(op, x.shape, dtypes.float64, dtypes.float64), [x])
        np.testing.assert_allclose(result[:2], UNARY_REFERENCE[op](x)[:2], rtol=1e-12)
        assert np.all(result[:2] < 0)
        assert result[2] == 0.0 and np.signbit(result[2])


def test_gelu_flavours_differ() -> None:
    x = random_float((64,))
    exact = evaluate(unary_fusion(UnaryOpType.GELU, x.shape, dtypes.float64, dtypes.float64), [x])
    approx = evaluate(
        unary_fusion(UnaryOpType.GELU_TANH, x.shape, dtypes.float64, dtypes.float64), [x]
    )
    difference = np.abs(exact[0] - approx[0]).max()
    assert 1e-6 < difference < 1e-2


# ---- binary ops --------------------------------------------------------------------------------

BINARY_REFERENCE: dict[BinaryOpType, Callable[[Any, Any], Any]] = {
    BinaryOpType.ADD: np.add,
    BinaryOpType.SUB: np.subtract,
    BinaryOpType.MUL: np.multiply,
    BinaryOpType.DIV: np.true_divide,
    BinaryOpType.POW: lambda a, b: np.power(np.abs(a), b),
    BinaryOpType.MAXIMUM: np.maximum,
    BinaryOpType.MINIMUM: np.minimum,
    BinaryOpType.EQ: np.equal,
    BinaryOpType.NE: np.not_equal,
    BinaryOpType.LT: np.less,
    BinaryOpType.LE: np.less_equal,
    BinaryOpType.GT: np.greater,
    BinaryOpType.GE: np.greater_equal,
    BinaryOpType.LOGICAL_AND: np.logical_and,
    BinaryOpType.LOGICAL_OR: np.logical_or,
    # Python's own float semantics: math.fmod is C's, % and // floor (as torch's do).
    BinaryOpType.FMOD: np.vectorize(math.fmod),
    BinaryOpType.REMAINDER: np.vectorize(lambda a, b: a % b),
    BinaryOpType.FLOOR_DIVIDE: np.vectorize(lambda a, b: a // b),
    BinaryOpType.BITWISE_AND: np.bitwise_and,
    BinaryOpType.BITWISE_OR: np.bitwise_or,
    BinaryOpType.BITWISE_XOR: np.bitwise_xor,
}
LOGICAL_OPS = {BinaryOpType.LOGICAL_AND, BinaryOpType.LOGICAL_OR}
BITWISE_OPS = {BinaryOpType.BITWISE_AND, BinaryOpType.BITWISE_OR, BinaryOpType.BITWISE_XOR}
# The ops defined on floats (or, for the logical ones, on bools).
FLOAT_BINARY = [op for op in BinaryOpType if op not in BITWISE_OPS]


def test_binary_reference_covers_every_op() -> None:
    assert set(BINARY_REFERENCE) == set(BinaryOpType)


def result_dtype(op: BinaryOpType, dtype: DType) -> DType:
    return dtypes.bool_ if op.is_comparison or op in LOGICAL_OPS else dtype


def binary_fusion(
    op: BinaryOpType,
    lhs: TensorView | Scalar,
    rhs: TensorView | Scalar,
    out_dtype: DType,
    shape: Sequence[int],
    fusion: Fusion,
) -> Fusion:
    for operand in (lhs, rhs):
        if isinstance(operand, TensorView):
            fusion.add_input(operand)
    out = make_tensor(shape, out_dtype)
    BinaryOp(op, out, lhs, rhs)
    fusion.add_output(out)
    return fusion


def binary_inputs(op: BinaryOpType, shape: Sequence[int]) -> tuple[Array, Array]:
    a = random_float(shape)
    b = np.roll(a, 1) * 1.5
    b.ravel()[::3] = a.ravel()[::3]  # some equal pairs, so eq/le/ge see both outcomes
    if op == BinaryOpType.POW:
        a = np.abs(a)
    if op in LOGICAL_OPS:
        return a > 0, b > 0
    return a, b


@pytest.mark.parametrize("op", FLOAT_BINARY, ids=lambda op: op.value)
def test_binary_float32_tensors(op: BinaryOpType) -> None:
    a, b = binary_inputs(op, (4, 9))
    in_dtype = dtypes.bool_ if op in LOGICAL_OPS else dtypes.float32
    a, b = a.astype(in_dtype.numpy()), b.astype(in_dtype.numpy())
    out_dtype = result_dtype(op, in_dtype)
    with Fusion() as fusion:
        binary_fusion(
            op,
            make_tensor(a.shape, in_dtype),
            make_tensor(b.shape, in_dtype),
            out_dtype,
            a.shape,
            fusion,
        )
    (result,) = evaluate(fusion, [a, b])
    expected = BINARY_REFERENCE[op](a.astype(np.float64), b.astype(np.float64))
    assert result.dtype == out_dtype.numpy()
    np.testing.assert_allclose(result, expected.astype(out_dtype.numpy()), rtol=2e-7)


@pytest.mark.parametrize("op", FLOAT_BINARY, ids=lambda op: op.value)
@pytest.mark.parametrize("scalar_side", ["lhs", "rhs"])
def test_binary_with_scalar(op: BinaryOpType, scalar_side: str) -> None:
    a, _ = binary_inputs(op, (3, 5))
    value: bool | float = True if op in LOGICAL_OPS else 0.75
    in_dtype = dtypes.bool_ if op in LOGICAL_OPS else dtypes.float64
    a = a.astype(in_dtype.numpy())
    a.ravel()[0] = value  # so comparisons see equality too
    with Fusion() as fusion:
        tensor = make_tensor(a.shape, in_dtype)
        scalar = Scalar(value, dtypes.bool_ if op in LOGICAL_OPS else dtypes.float64)
        lhs, rhs = (scalar, tensor) if scalar_side == "lhs" else (tensor, scalar)
        binary_fusion(op, lhs, rhs, result_dtype(op, in_dtype), a.shape, fusion)
    (result,) = evaluate(fusion, [a])
    operands = (value, a) if scalar_side == "lhs" else (a, value)
    np.testing.assert_allclose(result, BINARY_REFERENCE[op](*operands), rtol=1e-15)


@pytest.mark.parametrize("op", sorted(BITWISE_OPS, key=lambda op: op.value), ids=str)
def test_bitwise_ops_of_int_tensors_and_scalars(op: BinaryOpType) -> None:
    a = rng().integers(-(2**31), 2**31, (4, 9)).astype(np.int32)
    b = rng().integers(-(2**31), 2**31, (4, 9)).astype(np.int32)
    with Fusion() as fusion:
        binary_fusion(
            op, make_tensor(a.shape, dtypes.int32), make_tensor(b.shape, dtypes.int32),
            dtypes.int32, a.shape, fusion,
        )  # fmt: skip
    (result,) = evaluate(fusion, [a, b])
    np.testing.assert_array_equal(result, BINARY_REFERENCE[op](a, b))
    with Fusion() as fusion:
        scalar = Scalar(-0x5556, dtypes.int32)
        binary_fusion(op, scalar, make_tensor(a.shape, dtypes.int32), dtypes.int32, a.shape, fusion)
    (result,) = evaluate(fusion, [a])
    np.testing.assert_array_equal(result, BINARY_REFERENCE[op](np.int32(-0x5556), a))


def test_float_scalar_is_float32_like_torch() -> None:
    # torch: float32_tensor == 0.1 is True where the tensor holds float32(0.1).
    a = f32(np.full((4,), 0.1))
    a[1] = 0.2
    with Fusion() as fusion:
        binary_fusion(
            BinaryOpType.EQ,
            make_tensor(a.shape, dtypes.float32),
            Scalar(0.1),
            dtypes.bool_,
            a.shape,
            fusion,
        )
    (result,) = evaluate(fusion, [a])
    np.testing.assert_array_equal(result, [True, False, True, True])


@pytest.mark.parametrize(
    "op",
    [
        BinaryOpType.ADD,
        BinaryOpType.SUB,
        BinaryOpType.MUL,
        BinaryOpType.POW,
        BinaryOpType.MAXIMUM,
        BinaryOpType.MINIMUM,
        BinaryOpType.LT,
        BinaryOpType.EQ,
    ],
)
def test_binary_int32(op: BinaryOpType) -> None:
    generator = rng()
    a = generator.integers(-50, 50, size=(6, 4)).astype(np.int32)
    low, high = (0, 4) if op == BinaryOpType.POW else (-50, 50)
    b = generator.integers(low, high, size=(6, 4)).astype(np.int32)
    out_dtype = result_dtype(op, dtypes.int32)
    with Fusion() as fusion:
        binary_fusion(
            op,
            make_tensor(a.shape, dtypes.int32),
            make_tensor(b.shape, dtypes.int32),
            out_dtype,
            a.shape,
            fusion,
        )
    (result,) = evaluate(fusion, [a, b])
    reference = np.power if op == BinaryOpType.POW else BINARY_REFERENCE[op]
    assert result.dtype == out_dtype.numpy()
    np.testing.assert_array_equal(result, reference(a, b).astype(out_dtype.numpy()))


def test_int_div_is_true_division() -> None:
    a = np.array([7, -7, 9, 1, -3], dtype=np.int32)
    b = np.array([2, 2, -4, 3, 5], dtype=np.int32)
    with Fusion() as fusion:
        binary_fusion(
            BinaryOpType.DIV,
            make_tensor(a.shape, dtypes.int32),
            make_tensor(b.shape, dtypes.int32),
            dtypes.float32,
            a.shape,
            fusion,
        )
    (result,) = evaluate(fusion, [a, b])
    np.testing.assert_array_equal(result, f32([3.5, -3.5, -2.25, 1 / 3, -0.6]))


def test_int32_overflow_wraps() -> None:
    a = np.array([2**31 - 1, -(2**31)], dtype=np.int32)
    with Fusion() as fusion:
        binary_fusion(
            BinaryOpType.ADD,
            make_tensor(a.shape, dtypes.int32),
            Scalar(1),
            dtypes.int32,
            a.shape,
            fusion,
        )
    (result,) = evaluate(fusion, [a])
    np.testing.assert_array_equal(result, np.array([-(2**31), -(2**31) + 1], dtype=np.int32))


def test_mixed_int_float_promotes() -> None:
    a = rng().integers(-9, 9, size=(5,)).astype(np.int32)
    b = f32(random_float((5,)))
    with Fusion() as fusion:
        binary_fusion(
            BinaryOpType.MUL,
            make_tensor(a.shape, dtypes.int32),
            make_tensor(b.shape, dtypes.float32),
            dtypes.float32,
            a.shape,
            fusion,
        )
    (result,) = evaluate(fusion, [a, b])
    np.testing.assert_array_equal(result, f32(a.astype(np.float64) * b.astype(np.float64)))


def test_bool_add_is_logical_or() -> None:
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    with Fusion() as fusion:
        binary_fusion(
            BinaryOpType.ADD,
            make_tensor(a.shape, dtypes.bool_),
            make_tensor(b.shape, dtypes.bool_),
            dtypes.bool_,
            a.shape,
            fusion,
        )
    (result,) = evaluate(fusion, [a, b])
    np.testing.assert_array_equal(result, [True, True, True, False])


@pytest.mark.parametrize("op", [BinaryOpType.MAXIMUM, BinaryOpType.MINIMUM])
def test_maximum_minimum_propagate_nan(op: BinaryOpType) -> None:
    a = f32([np.nan, 1.0, 2.0, np.nan])
    b = f32([1.0, np.nan, 3.0, np.nan])
    with Fusion() as fusion:
        binary_fusion(
            op,
            make_tensor(a.shape, dtypes.float32),
            make_tensor(b.shape, dtypes.float32),
            dtypes.float32,
            a.shape,
            fusion,
        )
    (result,) = evaluate(fusion, [a, b])
    np.testing.assert_array_equal(np.isnan(result), [True, True, False, True])
    assert result[2] == (3.0 if op == BinaryOpType.MAXIMUM else 2.0)


def test_binary_broadcasts_size_one_axes() -> None:
    a = random_float((4, 1))
    b = random_float((1, 5))
    with Fusion() as fusion:
        binary_fusion(
            BinaryOpType.SUB,
            make_tensor(a.shape, dtypes.float64),
            make_tensor(b.shape, dtypes.float64),
            dtypes.float64,
            (4, 5),
            fusion,
        )
    (result,) = evaluate(fusion, [a, b])
    np.testing.assert_array_equal(result, a - b)


# ---- where and cast ----------------------------------------------------------------------------


def test_where_tensor_branches() -> None:
    x = f32(random_float((3, 4)))
    y = f32(random_float((3, 4), 3.0, 5.0))
    with Fusion() as fusion:
        cond = fusion.add_input(make_tensor(x.shape, dtypes.bool_))
        tx = fusion.add_input(make_tensor(x.shape, dtypes.float32))
        ty = fusion.add_input(make_tensor(y.shape, dtypes.float32))
        out = like(tx)
        TernaryOp(out, cond, tx, ty)
        fusion.add_output(out)
    condition = x > 0
    (result,) = evaluate(fusion, [condition, x, y])
    np.testing.assert_array_equal(result, np.where(condition, x, y))


def test_where_scalar_branches() -> None:
    x = random_float((2, 6))
    with Fusion() as fusion:
        tx = fusion.add_input(make_tensor(x.shape, dtypes.float64))
        cond = make_tensor(x.shape, dtypes.bool_)
        BinaryOp(BinaryOpType.GT, cond, tx, Scalar(0.0))
        relu_like = like(tx)
        TernaryOp(relu_like, cond, tx, Scalar(-1.5))
        both = make_tensor(x.shape, dtypes.int32)
        TernaryOp(both, cond, Scalar(3), Scalar(-4))
        fusion.add_output(relu_like)
        fusion.add_output(both)
    relu_result, both_result = evaluate(fusion, [x])
    np.testing.assert_array_equal(relu_result, np.where(x > 0, x, -1.5))
    assert both_result.dtype == np.int32
    np.testing.assert_array_equal(both_result, np.where(x > 0, 3, -4))


def cast_fusion(shape: Sequence[int], source: DType, target: DType) -> Fusion:
    with Fusion() as fusion:
        x = fusion.add_input(make_tensor(shape, source))
        out = like(x, target)
        CastOp(out, x)
        fusion.add_output(out)
    return fusion


def test_cast_float_to_int_truncates_toward_zero() -> None:
    x = f32([2.7, -2.7, 0.5, -0.5, 1e6 + 0.9, -3.0])
    (result,) = evaluate(cast_fusion(x.shape, dtypes.float32, dtypes.int32), [x])
    np.testing.assert_array_equal(result, np.array([2, -2, 0, 0, 1000000, -3], dtype=np.int32))
    bf = to_bf16([-7.5, 7.5])
    (result,) = evaluate(cast_fusion(bf.shape, dtypes.bfloat16, dtypes.int64), [bf])
    np.testing.assert_array_equal(result, np.array([-7, 7]))


def test_cast_to_and_from_bool() -> None:
    x = f32([0.0, -0.0, 0.25, -3.0, np.nan])
    (to_bool,) = evaluate(cast_fusion(x.shape, dtypes.float32, dtypes.bool_), [x])
    np.testing.assert_array_equal(to_bool, [False, False, True, True, True])
    flags = np.array([True, False, True])
    (to_float,) = evaluate(cast_fusion(flags.shape, dtypes.bool_, dtypes.bfloat16), [flags])
    assert to_float.dtype == BF16
    np.testing.assert_array_equal(to_float.astype(np.float32), [1.0, 0.0, 1.0])


def test_cast_f32_to_bf16_and_f16_rounds() -> None:
    x = f32(random_float((64,)))
    (as_bf16,) = evaluate(cast_fusion(x.shape, dtypes.float32, dtypes.bfloat16), [x])
    (as_f16,) = evaluate(cast_fusion(x.shape, dtypes.float32, dtypes.float16), [x])
    assert as_bf16.dtype == BF16 and as_f16.dtype == np.float16
    np.testing.assert_array_equal(as_bf16.view(np.uint16), x.astype(BF16).view(np.uint16))
    np.testing.assert_array_equal(as_f16, x.astype(np.float16))


def test_int_cast_wraps() -> None:
    x = np.array([2**31 + 5, -(2**31) - 1], dtype=np.int64)
    (result,) = evaluate(cast_fusion(x.shape, dtypes.int64, dtypes.int32), [x])
    np.testing.assert_array_equal(result, x.astype(np.int32))


# ---- rounding of intermediates -----------------------------------------------------------------


def bf16_chain() -> Fusion:
    """f32 x -> bf16 -> (x * 1.7 in bf16) -> (+ x in bf16) -> f32."""
    with Fusion() as fusion:
        x = fusion.add_input(make_tensor((8, 16), dtypes.float32))
        xb = like(x, dtypes.bfloat16)
        CastOp(xb, x)
        scaled = like(xb)
        BinaryOp(BinaryOpType.MUL, scaled, xb, Scalar(1.7))
        total = like(xb)
        BinaryOp(BinaryOpType.ADD, total, scaled, xb)
        out = like(x, dtypes.float32)
        CastOp(out, total)
        fusion.add_output(out)
    return fusion


def test_bf16_intermediates_are_rounded() -> None:
    x = f32(random_float((8, 16)))
    (result,) = evaluate(bf16_chain(), [x])
    xb = to_bf16(x).astype(np.float64)
    scaled = to_bf16(xb * float(np.float32(1.7))).astype(np.float64)
    expected = to_bf16(scaled + xb).astype(np.float32)
    np.testing.assert_array_equal(result, expected)
    unrounded = f32(xb * float(np.float32(1.7)) + xb)
    assert np.mean(result != unrounded) > 0.5


def test_bf16_unary_result_rounded() -> None:
    x = to_bf16(random_float((32,)))
    (result,) = evaluate(
        unary_fusion(UnaryOpType.EXP, x.shape, dtypes.bfloat16, dtypes.bfloat16), [x]
    )
    assert result.dtype == BF16
    expected = to_bf16(np.exp(x.astype(np.float64)))
    np.testing.assert_array_equal(result.view(np.uint16), expected.view(np.uint16))


def test_evaluate_all_holds_intermediates_in_their_dtypes() -> None:
    fusion = bf16_chain()
    x = f32(random_float((8, 16)))
    values = evaluate_all(fusion, [x])
    assert len(values) == len(fusion.tensors()) == 5
    assert values[fusion.inputs[0]] is x
    for tv in fusion.tensors():
        assert values[tv].dtype == tv.dtype.numpy()
        assert values[tv].shape == tv.shape
    scaled = fusion.exprs()[1].output
    np.testing.assert_array_equal(
        values[scaled].astype(np.float32),
        to_bf16(to_bf16(x).astype(np.float64) * float(np.float32(1.7))).astype(np.float32),
    )


# ---- reductions --------------------------------------------------------------------------------


@pytest.mark.parametrize("op", list(ReductionOpType), ids=lambda op: op.value)
@pytest.mark.parametrize("axes", [(0,), (1,), (0, 2), (1, 2), (0, 1, 2)])
def test_reductions_over_axes(op: ReductionOpType, axes: tuple[int, ...]) -> None:
    x = random_float((3, 4, 5))
    with Fusion() as fusion:
        tx = fusion.add_input(make_tensor(x.shape, dtypes.float64))
        out = reduced(tx, axes)
        ReductionOp(op, out, tx)
        fusion.add_output(out)
    (result,) = evaluate(fusion, [x])
    reference = getattr(np, op.value)  # np.sum, np.max, np.min
    expected = reference(x, axis=axes)
    assert result.shape == np.shape(expected)
    np.testing.assert_allclose(result, expected, rtol=1e-14)


@pytest.mark.parametrize("op", [ReductionOpType.MAX, ReductionOpType.MIN])
def test_max_min_reductions_propagate_nan(op: ReductionOpType) -> None:
    x = f32(random_float((3, 4)))
    x[1, 2] = np.nan
    with Fusion() as fusion:
        tx = fusion.add_input(make_tensor(x.shape, dtypes.float32))
        out = reduced(tx, (1,))
        ReductionOp(op, out, tx)
        fusion.add_output(out)
    (result,) = evaluate(fusion, [x])
    np.testing.assert_array_equal(np.isnan(result), [False, True, False])


def test_sum_of_int32_accumulates_in_int64() -> None:
    x = rng().integers(2**29, 2**30, size=(4, 8)).astype(np.int32)
    with Fusion() as fusion:
        tx = fusion.add_input(make_tensor(x.shape, dtypes.int32))
        out = reduced(tx, (1,), dtypes.int64)
        ReductionOp(ReductionOpType.SUM, out, tx)
        fusion.add_output(out)
    (result,) = evaluate(fusion, [x])
    assert result.dtype == np.int64
    np.testing.assert_array_equal(result, x.astype(np.int64).sum(axis=1))


def test_sum_of_bools_counts() -> None:
    x = random_float((5, 6)) > 0
    with Fusion() as fusion:
        tx = fusion.add_input(make_tensor(x.shape, dtypes.bool_))
        out = reduced(tx, (0, 1), dtypes.int64)
        ReductionOp(ReductionOpType.SUM, out, tx)
        fusion.add_output(out)
    (result,) = evaluate(fusion, [x])
    assert result.shape == () and result == x.sum()


def test_bf16_sum_rounds_once() -> None:
    x = to_bf16(random_float((4, 64)))
    with Fusion() as fusion:
        tx = fusion.add_input(make_tensor(x.shape, dtypes.bfloat16))
        out = reduced(tx, (1,))
        ReductionOp(ReductionOpType.SUM, out, tx)
        fusion.add_output(out)
    (result,) = evaluate(fusion, [x])
    expected = to_bf16(x.astype(np.float64).sum(axis=1))
    np.testing.assert_array_equal(result.view(np.uint16), expected.view(np.uint16))


# ---- matmuls -----------------------------------------------------------------------------------

MATMUL_CASES = {
    "2d": ((6, 5), (5, 3)),
    "1d_lhs": ((5,), (5, 3)),
    "1d_rhs": ((6, 5), (5,)),
    "1d_both": ((5,), (5,)),
    "batched_lhs": ((2, 6, 5), (5, 3)),
    "batched_both": ((2, 6, 5), (2, 5, 3)),
    "broadcast_batch": ((2, 1, 6, 5), (3, 5, 3)),
    "1d_lhs_batched_rhs": ((5,), (4, 5, 3)),
}


@pytest.mark.parametrize("case", list(MATMUL_CASES))
def test_matmul(case: str) -> None:
    a_shape, b_shape = MATMUL_CASES[case]
    a, b = random_float(a_shape), random_float(b_shape, 0.5, 1.5)
    expected = np.matmul(a, b)
    m = a_shape[-2] if len(a_shape) >= 2 else None
    n = b_shape[-1] if len(b_shape) >= 2 else None
    batch = np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    with Fusion() as fusion:
        ta = fusion.add_input(make_tensor(a_shape, dtypes.float64))
        tb = fusion.add_input(make_tensor(b_shape, dtypes.float64))
        out = matmul_output(batch, m, n, a_shape[-1], dtypes.float64)
        MatmulOp(out, ta, tb)
        fusion.add_output(out)
    (result,) = evaluate(fusion, [a, b])
    assert result.shape == expected.shape
    np.testing.assert_allclose(result, expected, rtol=1e-13)


def test_matmul_bf16_rounds_the_result_once() -> None:
    a, b = to_bf16(random_float((8, 32))), to_bf16(random_float((32, 4)))
    with Fusion() as fusion:
        ta = fusion.add_input(make_tensor(a.shape, dtypes.bfloat16))
        tb = fusion.add_input(make_tensor(b.shape, dtypes.bfloat16))
        out = matmul_output((), 8, 4, 32, dtypes.bfloat16)
        MatmulOp(out, ta, tb)
        fusion.add_output(out)
    (result,) = evaluate(fusion, [a, b])
    expected = to_bf16(a.astype(np.float64) @ b.astype(np.float64))
    np.testing.assert_array_equal(result.view(np.uint16), expected.view(np.uint16))


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("x_shape", [(6, 5), (2, 6, 5)])
def test_linear(with_bias: bool, x_shape: tuple[int, ...]) -> None:
    x, weight, bias = random_float(x_shape), random_float((3, 5)), random_float((3,), 1.0, 3.0)
    with Fusion() as fusion:
        tx = fusion.add_input(make_tensor(x.shape, dtypes.float64))
        tw = fusion.add_input(make_tensor(weight.shape, dtypes.float64))
        tb = fusion.add_input(make_tensor(bias.shape, dtypes.float64)) if with_bias else None
        out = matmul_output(x_shape[:-2], x_shape[-2], 3, 5, dtypes.float64)
        LinearOp(out, tx, tw, tb)
        fusion.add_output(out)
    arrays = [x, weight, bias] if with_bias else [x, weight]
    (result,) = evaluate(fusion, arrays)
    expected = x @ weight.T + (bias if with_bias else 0.0)
    np.testing.assert_allclose(result, expected, rtol=1e-13)


def mma_fusion(m: int, n: int, k: int, batch: Sequence[int] = ()) -> Fusion:
    """[*batch, M, K] and [*batch, N, K] broadcast to [M, 1, K] and [1, N, K], then mma."""
    nb = len(batch)
    with Fusion() as fusion:
        a = fusion.add_input(make_tensor((*batch, m, k), dtypes.bfloat16))
        b = fusion.add_input(make_tensor((*batch, n, k), dtypes.bfloat16))
        a_axes = [*a.logical[: nb + 1], IterDomain(1, IterType.BROADCAST), *a.logical[nb + 1 :]]
        b_axes = [*b.logical[:nb], IterDomain(1, IterType.BROADCAST), *b.logical[nb:]]
        a3 = TensorView(new_axes_like(a_axes), dtypes.bfloat16)
        b3 = TensorView(new_axes_like(b_axes), dtypes.bfloat16)
        BroadcastOp(a3, a, [False] * (nb + 1) + [True, False])
        BroadcastOp(b3, b, [False] * nb + [True, False, False])
        out = matmul_output(batch, m, n, k, dtypes.float32)
        MmaOp(out, a3, b3)
        fusion.add_output(out)
    return fusion


@pytest.mark.parametrize("batch", [(), (3,)])
def test_mma_broadcast_operands(batch: tuple[int, ...]) -> None:
    m, n, k = 7, 5, 16
    a, b = to_bf16(random_float((*batch, m, k))), to_bf16(random_float((*batch, n, k)))
    fusion = mma_fusion(m, n, k, batch)
    mma = fusion.exprs()[-1]
    assert isinstance(mma, MmaOp)
    assert mma.roles() == ["batch"] * len(batch) + ["m", "n", "k"]
    (result,) = evaluate(fusion, [a, b])
    assert result.dtype == np.float32
    expected = np.einsum("...mk,...nk->...mn", a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(result, f32(expected), rtol=1e-6)


# ---- metadata ops ------------------------------------------------------------------------------


def test_reshape() -> None:
    x = random_float((2, 3, 4))
    with Fusion() as fusion:
        tx = fusion.add_input(make_tensor(x.shape, dtypes.float64))
        merged = TensorView(
            make_tensor((6, 4), dtypes.float64).logical,
            dtypes.float64,
            root=new_axes_like(tx.logical),
        )
        ReshapeOp(merged, tx)
        split = TensorView(
            make_tensor((2, 2, 6), dtypes.float64).logical,
            dtypes.float64,
            root=new_axes_like(merged.logical),
        )
        ReshapeOp(split, merged)
        fusion.add_output(merged)
        fusion.add_output(split)
    merged_result, split_result = evaluate(fusion, [x])
    np.testing.assert_array_equal(merged_result, x.reshape(6, 4))
    np.testing.assert_array_equal(split_result, x.reshape(2, 2, 6))


def test_permute_output_is_contiguous() -> None:
    x = random_float((2, 3, 4))
    with Fusion() as fusion:
        tx = fusion.add_input(make_tensor(x.shape, dtypes.float64))
        out = make_tensor((4, 2, 3), dtypes.float64)
        PermuteOp(out, tx, (2, 0, 1))
        fusion.add_output(out)
    (result,) = evaluate(fusion, [x])
    np.testing.assert_array_equal(result, np.transpose(x, (2, 0, 1)))
    assert result.flags.c_contiguous


def test_broadcast_then_expand_then_squeeze() -> None:
    x = random_float((3, 4))
    with Fusion() as fusion:
        tx = fusion.add_input(make_tensor(x.shape, dtypes.float64))
        inserted = make_tensor((3, 1, 4), dtypes.float64)
        BroadcastOp(inserted, tx, [False, True, False])
        expanded_axes = new_axes_like(inserted.logical)
        expanded_axes[1] = IterDomain(1, IterType.BROADCAST, expanded_extent=5)
        expanded = TensorView(expanded_axes, dtypes.float64)
        ExpandOp(expanded, inserted)
        squeezed = make_tensor((3, 4), dtypes.float64)
        SqueezeOp(squeezed, expanded, [1])
        fusion.add_output(inserted)
        fusion.add_output(expanded)
        fusion.add_output(squeezed)
    inserted_result, expanded_result, squeezed_result = evaluate(fusion, [x])
    np.testing.assert_array_equal(inserted_result, x[:, None, :])
    assert expanded_result.shape == (3, 5, 4)
    np.testing.assert_array_equal(expanded_result, np.broadcast_to(x[:, None, :], (3, 5, 4)))
    assert expanded_result.flags.writeable and expanded_result.flags.c_contiguous
    np.testing.assert_array_equal(squeezed_result, x)


def test_squeeze_size_one_axes() -> None:
    x = random_float((1, 4, 1))
    with Fusion() as fusion:
        tx = fusion.add_input(make_tensor(x.shape, dtypes.float64))
        out = make_tensor((4,), dtypes.float64)
        SqueezeOp(out, tx, [0, -1])
        fusion.add_output(out)
    (result,) = evaluate(fusion, [x])
    np.testing.assert_array_equal(result, x[0, :, 0])


def test_broadcast_feeds_add() -> None:
    row, matrix = random_float((4,)), random_float((3, 4), 3.0, 5.0)
    with Fusion() as fusion:
        trow = fusion.add_input(make_tensor(row.shape, dtypes.float64))
        tmatrix = fusion.add_input(make_tensor(matrix.shape, dtypes.float64))
        row2 = make_tensor((1, 4), dtypes.float64)
        BroadcastOp(row2, trow, [True, False])
        out = make_tensor((3, 4), dtypes.float64)
        BinaryOp(BinaryOpType.ADD, out, tmatrix, row2)
        fusion.add_output(out)
    (result,) = evaluate(fusion, [row, matrix])
    np.testing.assert_array_equal(result, matrix + row)


def test_outputs_never_alias_inputs_or_each_other() -> None:
    x = random_float((3, 4))
    with Fusion() as fusion:
        tx = fusion.add_input(make_tensor(x.shape, dtypes.float64))
        copied = like(tx)
        LoadStoreOp(copied, tx)
        fusion.add_output(tx)
        fusion.add_output(copied)
        fusion.add_output(copied)
    results = evaluate(fusion, [x])
    for result in results:
        np.testing.assert_array_equal(result, x)
        assert result.flags.writeable and not np.shares_memory(result, x)
    assert not np.shares_memory(results[1], results[2])


# ---- validation and malformed fusions ----------------------------------------------------------


def two_input_fusion() -> Fusion:
    with Fusion() as fusion:
        a = fusion.add_input(make_tensor((2, 3), dtypes.bfloat16))
        b = fusion.add_input(make_tensor((2, 3), dtypes.float32))
        out = like(b)
        BinaryOp(BinaryOpType.ADD, out, a, b)
        fusion.add_output(out)
    return fusion


def test_wrong_input_count() -> None:
    with pytest.raises(InputError, match=r"expected 2 input arrays \(T0, T1\), got 1"):
        evaluate(two_input_fusion(), [f32(random_float((2, 3)))])


def test_wrong_input_dtype_names_index_and_fix() -> None:
    arrays = [f32(random_float((2, 3))), f32(random_float((2, 3)))]
    with pytest.raises(InputError) as error:
        evaluate(two_input_fusion(), arrays)
    message = str(error.value)
    assert "argument 0 (T0)" in message
    assert "expected dtype bfloat16, got float32" in message
    assert "x.astype(ml_dtypes.bfloat16)" in message


def test_wrong_input_shape() -> None:
    arrays = [to_bf16(random_float((2, 3))), f32(random_float((3, 2)))]
    with pytest.raises(
        InputError, match=r"argument 1 \(T1\): expected shape \(2, 3\), got \(3, 2\)"
    ):
        evaluate(two_input_fusion(), arrays)


def test_input_must_be_an_array() -> None:
    with pytest.raises(InputError, match=r"argument 1 \(T1\): expected a NumPy array"):
        evaluate(two_input_fusion(), [to_bf16(random_float((2, 3))), [[1.0] * 3] * 2])  # type: ignore[list-item]
    with pytest.raises(InputError, match="sequence of arrays"):
        evaluate(two_input_fusion(), np.zeros((2, 2, 3), dtype=np.float32))  # type: ignore[arg-type]


def test_float64_is_not_accepted_for_float32() -> None:
    arrays = [to_bf16(random_float((2, 3))), random_float((2, 3))]
    with pytest.raises(
        InputError,
        match=r"expected dtype float32, got float64 \(convert with "
        r"x.astype\(np.float32\)\)",
    ):
        evaluate(two_input_fusion(), arrays)


def test_malformed_output_shape_is_reported() -> None:
    x = random_float((2, 3))
    with Fusion() as fusion:
        tx = fusion.add_input(make_tensor(x.shape, dtypes.float64))
        out = make_tensor((3, 2), dtypes.float64)
        UnaryOp(UnaryOpType.EXP, out, tx)
        fusion.add_output(out)
    with pytest.raises(FusionError, match=r"exp: result has shape \(2, 3\) but T1 has shape"):
        evaluate(fusion, [x])
