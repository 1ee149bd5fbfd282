"""The NumPy reference: evaluate a :class:`Fusion` on the CPU.

Expects: a fusion whose exprs are the math IR of :mod:`pyfuse.ir.exprs` (scheduling state such
as loop domains, memory types and aliases is ignored), and one NumPy array per fusion input
with exactly that input's shape and dtype (bf16 as ``ml_dtypes.bfloat16``). Anything else
raises :class:`~pyfuse.errors.InputError`.

Guarantees:

- Math follows torch. Each expr computes in float64 (integers in int64, bools as bool) and its
  result is cast to the expr's output dtype, so a bf16 or f16 intermediate is rounded where the
  GPU would round it. Rounding to a 16-bit float goes through float32, as on a GPU that
  computes in float32 and rounds once more on the store.
- Operands are first brought to the op's common dtype (torch's type promotion); a
  :class:`~pyfuse.ir.tensor.Scalar` takes its own dtype and then the op's math type (float32
  for 16-bit floats), as torch does with a CPU scalar on the GPU.
- ``div`` is true division, float-to-integer casts truncate toward zero, ``maximum``,
  ``minimum``, ``max`` and ``min`` propagate NaN, ``sum`` of integers or bools accumulates in
  int64, IEEE overflow and invalid results give inf and NaN without warnings.
- :func:`evaluate` returns fresh, writeable, C-contiguous arrays in the outputs' dtypes, one
  per fusion output (never a view of an input or of another output).
- A malformed fusion (an expr whose result does not have its output's shape, an expr kind with
  no rule here) raises :class:`~pyfuse.errors.FusionError` naming the expr.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from pyfuse.errors import FusionError, InputError
from pyfuse.ir.dtypes import DType, bool_, float32, promote_pair
from pyfuse.ir.exprs import (
    ACTIVATION_TAIL_FLUSH,
    BinaryOp,
    BinaryOpType,
    BroadcastOp,
    CastOp,
    ExpandOp,
    Expr,
    FullOp,
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
from pyfuse.ir.printer import expr_to_str
from pyfuse.ir.tensor import Scalar, TensorView, Val

Array = npt.NDArray[Any]


# The relative size of :func:`evaluate`'s jitter: a few float32 ulps, the noise a float32
# kernel's own rounding and summation order add to each result.
JITTER = 2.0**-21


Jitter = np.random.Generator | float


def evaluate(fusion: Fusion, inputs: Sequence[Array], jitter: Jitter | None = None) -> list[Array]:
    """The fusion's outputs on ``inputs``, in ``fusion.outputs`` order (see the module doc).
    With ``jitter``, every floating result is first scaled by ``1 + JITTER * u`` before its
    rounding (``u`` uniform in [-1, 1] drawn from a Generator, or the given float for every
    element; a pow by as much more as its documented error grows with ``|y log2 |x||``),
    a sum or matmul also moved by ``JITTER * u`` times the same sum of the
    magnitudes (a float32 kernel sums in another order: its error scales with the terms, not
    with a result they cancelled to), and float32 denormals flush to zero, as the GPU's
    approximate functions flush them: where that moves an output past a comparison's
    tolerance, the output is ill-conditioned in float32 (a sqrt of a cancellation, a
    comparison of two near values, a value that underflowed), and no kernel can be held to
    it."""
    values = evaluate_all(fusion, inputs, jitter)
    return [np.array(values[out], order="C", copy=True) for out in fusion.outputs]


def evaluate_all(
    fusion: Fusion, inputs: Sequence[Array], jitter: Jitter | None = None
) -> dict[TensorView, Array]:
    """Every tensor's value, keyed by TensorView: the inputs as given, then each expr's result
    in its output dtype. Values may be read-only broadcast views; copy before writing.
    ``jitter``: see :func:`evaluate`."""
    check_inputs(fusion, inputs)
    env = _Env()
    for tv, array in zip(fusion.inputs, inputs, strict=True):
        env.values[tv] = array
    with np.errstate(all="ignore"):
        for expr in fusion.exprs():
            value = _evaluate_expr(expr, env)
            dtype = expr.output.dtype
            if jitter is not None and dtype.is_floating and value.size:
                magnitude = _magnitude(expr, env) if _accumulates(expr) else None
                scale = _error_scale(expr, env)
                value = _jittered(np.asarray(value), dtype, jitter, magnitude, scale)
            env.values[expr.output] = value
    return env.values


_SMALLEST_NORMAL_F32 = float(np.finfo(np.float32).tiny)


def _accumulates(expr: Expr) -> bool:
    """A sum of terms (a sum reduction or a matmul), which a kernel adds in its own order."""
    if isinstance(expr, ReductionOp):
        return expr.op == ReductionOpType.SUM
    return isinstance(expr, MatmulOp | LinearOp | MmaOp)


def _magnitude(expr: Expr, env: _Env) -> Array:
    """``expr`` evaluated on the magnitudes of its tensor inputs (the sum of the magnitudes of
    its terms, with a bias's), times how the error of a float32 sum grows with its number of
    terms ``K``: ``sqrt(K)`` for a sum (rounded additions in a tree or in a row), ``K`` for a
    matmul, which may run on tensor cores, whose additions truncate (the error of each has
    one sign; Fasi et al., "Numerical behavior of NVIDIA tensor cores", 2021)."""
    magnitudes = _Env()
    for tv in expr.tensor_inputs:
        magnitudes.values[tv] = np.abs(env.values[tv])
    if isinstance(expr, ReductionOp):
        growth = math.sqrt(max(1, expr.input.numel // max(1, expr.output.numel)))
    else:
        growth = float(
            max(1, expr.tensor_inputs[0].shape[-1] if expr.tensor_inputs[0].shape else 1)
        )
    return _widen(_evaluate_expr(expr, magnitudes), expr.output.dtype) * growth


# The relative error of the kernels' pow per unit of |y log2 |x||, in JITTERs (emit_math: about
# 1.7e-7 |y log2 |x||, the rounding of y log2 |x| passed through ex2).
_POW_ERROR = 1.7e-7 / JITTER


def _error_scale(expr: Expr, env: _Env) -> Array | float:
    """How many JITTERs of relative error the kernels' form of ``expr`` may add: 1, or for a
    float pow ``1 + _POW_ERROR |y log2 |x||`` (a large exponent of a large or tiny base)."""
    if not (isinstance(expr, BinaryOp) and expr.op == BinaryOpType.POW):
        return 1.0
    common = _common_dtype(expr.inputs)
    if not common.is_floating:
        return 1.0
    base, exponent = (env.operand(v, common) for v in expr.inputs)
    with np.errstate(all="ignore"):
        scale = 1.0 + _POW_ERROR * np.abs(exponent * np.log2(np.abs(base)))
    finite: Array = np.nan_to_num(np.broadcast_to(scale, expr.output.shape), nan=1.0, posinf=1.0)
    return finite


def _jittered(
    value: Array, dtype: DType, jitter: Jitter, magnitude: Array | None, scale: Array | float
) -> Array:
    if isinstance(jitter, float):
        noise: Array | float = JITTER * jitter
    else:
        noise = jitter.uniform(-JITTER, JITTER, np.shape(value))
    wide = _widen(value, dtype) * (1.0 + noise * scale)
    if magnitude is not None:
        wide = wide + noise * magnitude
    wide = np.where(np.abs(wide) < _SMALLEST_NORMAL_F32, np.copysign(0.0, wide), wide)
    return _narrow(wide, dtype)


def check_inputs(fusion: Fusion, inputs: Sequence[Array]) -> None:
    """Raise :class:`InputError` unless ``inputs`` match the fusion inputs in count, dtype and
    shape exactly (nothing is converted silently)."""
    if isinstance(inputs, np.ndarray):
        raise InputError("pass the inputs as a sequence of arrays, e.g. [x], not one array")
    expected_names = ", ".join(f"T{tv.name}" for tv in fusion.inputs)
    if len(inputs) != len(fusion.inputs):
        raise InputError(
            f"expected {len(fusion.inputs)} input arrays ({expected_names}), got {len(inputs)}"
        )
    for index, (tv, array) in enumerate(zip(fusion.inputs, inputs, strict=True)):
        where = f"argument {index} (T{tv.name})"
        if not isinstance(array, np.ndarray):
            raise InputError(
                f"{where}: expected a NumPy array of dtype {tv.dtype.name} and shape "
                f"{tv.shape}, got {type(array).__name__}; convert with "
                f"np.asarray(x, dtype={_dtype_hint(tv.dtype)})"
            )
        problems = []
        if array.dtype != tv.dtype.numpy():
            problems.append(
                f"expected dtype {tv.dtype.name}, got {array.dtype.name} "
                f"(convert with x.astype({_dtype_hint(tv.dtype)}))"
            )
        if array.shape != tv.shape:
            problems.append(f"expected shape {tv.shape}, got {array.shape}")
        if problems:
            raise InputError(f"{where}: " + "; ".join(problems))


def _dtype_hint(dtype: DType) -> str:
    if dtype.name == "bfloat16":
        return "ml_dtypes.bfloat16"
    if dtype.is_bool:
        return "np.bool_"
    return f"np.{dtype.name}"


# ---- dtype conversions ------------------------------------------------------------------------


def _widen(value: Array, dtype: DType) -> Array:
    """``value`` (of ``dtype``) in its math type: float64, int64 or bool."""
    if dtype.is_floating:
        return value.astype(np.float64, copy=False)
    if dtype.is_integer:
        return value.astype(np.int64, copy=False)
    return value.astype(np.bool_, copy=False)


def _narrow(value: Array | np.generic | float, dtype: DType) -> Array:
    """A math-type ``value`` cast to ``dtype`` with torch's rules."""
    array = np.asarray(value)
    target = dtype.numpy()
    if dtype.is_bool:
        return array if array.dtype == np.bool_ else array != 0
    if dtype.is_integer:
        if array.dtype.kind == "f":
            # Truncate toward zero, saturating out of range and NaN giving 0: torch's cast on
            # the GPU (``cvt.rzi`` rounds so), which the kernels do too.
            info = np.iinfo(target)
            wide = np.nan_to_num(np.trunc(array.astype(np.float64)), nan=0.0)
            high = wide >= float(info.max)  # float(info.max) may round up past the range
            low = wide <= float(info.min)
            inside = np.where(high | low, 0.0, wide).astype(np.int64)
            array = np.where(high, info.max, np.where(low, info.min, inside))
        return array.astype(target, copy=False)
    if dtype.itemsize < 4:
        # ml_dtypes rounds float64 -> bf16 through float32 anyway; do it for f16 too, so both
        # 16-bit types round the way a float32 GPU computation does.
        array = array.astype(np.float32, copy=False)
    return array.astype(target, copy=False)


def _math_dtype(dtype: DType) -> DType:
    """The type torch computes ``dtype`` in on a GPU (its opmath type)."""
    return float32 if dtype.is_floating and dtype.itemsize < 4 else dtype


def _common_dtype(vals: Sequence[Val]) -> DType:
    """torch's result type of an op's operands: tensors promote; a scalar only raises the
    category (and then brings its own dtype)."""
    tensors = [val.dtype for val in vals if isinstance(val, TensorView)]
    scalars = [val.dtype for val in vals if not isinstance(val, TensorView)]
    pool = tensors if tensors else scalars
    common = pool[0]
    for dtype in pool[1:]:
        common = promote_pair(common, dtype)
    for dtype in scalars:
        if dtype.category > common.category:
            common = dtype
    return common


class _Env:
    """Tensor values (in their own dtypes) and reading them in math types."""

    def __init__(self) -> None:
        self.values: dict[TensorView, Array] = {}

    def tensor(self, tv: TensorView) -> Array:
        """``tv``'s value in its math type."""
        if tv not in self.values:
            raise FusionError(
                f"T{tv.name} is read but is neither a fusion input nor produced by an expr "
                "that the outputs depend on"
            )
        return _widen(self.values[tv], tv.dtype)

    def operand(self, val: Val, common: DType) -> Array:
        """``val`` as an operand of an op whose common dtype is ``common``, in math type."""
        if isinstance(val, TensorView):
            value = self.tensor(val)
            if val.dtype != common:
                value = _widen(_narrow(value, common), common)
            return value
        if isinstance(val, Scalar):
            own = _narrow(val.value, val.dtype)
            math_dtype = _math_dtype(common)
            return _widen(_narrow(_widen(own, val.dtype), math_dtype), math_dtype)
        raise FusionError(f"cannot read operand of type {type(val).__name__}")


# ---- erf ---------------------------------------------------------------------------------------
# Rational approximations of Sun's fdlibm s_erf.c (FreeBSD msun), accurate to about one ulp in
# float64; vectorized here so gelu needs neither scipy nor a Python loop per element.

# fmt: off
_ERX = 8.45062911510467529297e-01
_PP = (
    1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
    -5.77027029648944159157e-03, -2.37630166566501626084e-05,
)
_QQ = (
    1.0, 3.97917223959155352819e-01, 6.50222499887672944485e-02,
    5.08130628187576562776e-03, 1.32494738004321644526e-04, -3.96022827877536812320e-06,
)
_PA = (
    -2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
    3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
    -2.16637559486879084300e-03,
)
_QA = (
    1.0, 1.06420880400844228286e-01, 5.40397917702171048937e-01,
    7.18286544141962662868e-02, 1.26171219808761642112e-01, 1.36370839120290507362e-02,
    1.19844998467991074170e-02,
)
_RA = (
    -9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e01,
    -6.23753324503260060396e01, -1.62396669462573470355e02, -1.84605092906711035994e02,
    -8.12874355063065934246e01, -9.81432934416914548592e00,
)
_SA = (
    1.0, 1.96512716674392571292e01, 1.37657754143519042600e02,
    4.34565877475229228821e02, 6.45387271733267880336e02, 4.29008140027567833386e02,
    1.08635005541779435134e02, 6.57024977031928170135e00, -6.04244152148580987438e-02,
)
_RB = (
    -9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e01,
    -1.60636384855821916062e02, -6.37566443368389627722e02, -1.02509513161107724954e03,
    -4.83519191608651397019e02,
)
_SB = (
    1.0, 3.03380607434824582924e01, 3.25792512996573918826e02,
    1.53672958608443695994e03, 3.19985821950859553908e03, 2.55305040643316442583e03,
    4.74528541206955367215e02, -2.24409524465858183362e01,
)
# fmt: on


def _polynomial(z: Array, coefficients: tuple[float, ...]) -> Array:
    """sum(coefficients[i] * z**i) by Horner's rule."""
    result = np.full_like(z, coefficients[-1])
    for coefficient in reversed(coefficients[:-1]):
        result = result * z + coefficient
    return result


def erf(x: Array) -> Array:
    """The error function of a float64 array, elementwise (NaN stays NaN, erf(+-inf) = +-1)."""
    x = np.asarray(x, dtype=np.float64)
    magnitude = np.abs(x)
    result = np.full_like(x, np.nan)
    with np.errstate(all="ignore"):
        near_zero = magnitude < 0.84375
        xs = x[near_zero]
        z = xs * xs
        result[near_zero] = xs + xs * (_polynomial(z, _PP) / _polynomial(z, _QQ))

        near_one = (magnitude >= 0.84375) & (magnitude < 1.25)
        s = magnitude[near_one] - 1.0
        result[near_one] = _ERX + _polynomial(s, _PA) / _polynomial(s, _QA)

        tail = (magnitude >= 1.25) & (magnitude < 6.0)
        result[tail] = 1.0 - _erfc_tail(magnitude[tail])

        result[magnitude >= 6.0] = 1.0
    # Every branch above computed erf(|x|) except the odd polynomial near zero.
    far = ~near_zero
    result[far] = np.copysign(result[far], x[far])
    return result


def _erfc_tail(a: Array) -> Array:
    """erfc(a) for float64 ``a`` in [1.25, 28) (fdlibm's tail formulas; 0 is underflow past)."""
    s = 1.0 / (a * a)
    inner = a < 1.0 / 0.35
    ratio = np.where(
        inner,
        _polynomial(s, _RA) / _polynomial(s, _SA),
        _polynomial(s, _RB) / _polynomial(s, _SB),
    )
    # z is a with its low 32 bits cleared, so -z*z is exact and exp keeps full accuracy.
    z = (a.view(np.uint64) & np.uint64(0xFFFFFFFF00000000)).view(np.float64)
    return np.asarray(np.exp(-z * z - 0.5625) * np.exp((z - a) * (z + a) + ratio) / a)


def erfc_nonnegative(a: Array) -> Array:
    """erfc of a float64 array of values >= 0 (or NaN), with relative accuracy in the tail,
    where ``1 - erf`` would round to 0 (past a = 6) long before erfc underflows (past 27)."""
    a = np.asarray(a, dtype=np.float64)
    with np.errstate(all="ignore"):
        near = 1.0 - erf(a)  # no cancellation below 1.25: erfc(1.25) = 0.077
        tail = _erfc_tail(np.clip(a, 1.25, 27.99))
        result = np.where(a < 1.25, near, np.where(a < 28.0, tail, 0.0))
    return np.asarray(np.where(np.isnan(a), np.nan, result))


# ---- unary ops ---------------------------------------------------------------------------------

_SQRT_HALF = 1.0 / math.sqrt(2.0)
_SQRT_TWO_OVER_PI = math.sqrt(2.0 / math.pi)


def _relu(x: Array) -> Array:
    return np.maximum(x, np.zeros((), dtype=x.dtype))


def _sigmoid(x: Array) -> Array:
    return 1.0 / (1.0 + np.exp(-x))


# gelu and gelu_tanh are written without the cancellation of ``1 + erf`` / ``1 + tanh`` for
# x < 0: the true value there is a tiny negative number (``log(gelu(x))`` is NaN), where
# the textbook formula, in float64 as in torch's float32, rounds it to zero; below
# ACTIVATION_TAIL_FLUSH it is zero, as in the kernels.


def _flush_tail(x: Array, result: Array) -> Array:
    with np.errstate(all="ignore"):
        return np.asarray(np.where(np.abs(result) < ACTIVATION_TAIL_FLUSH, x * 0.0, result))


def gelu(x: Array) -> Array:
    with np.errstate(all="ignore"):
        negative = x < 0
        half_erfc = 0.5 * erfc_nonnegative(np.where(negative, -x, x) * _SQRT_HALF)
        return _flush_tail(x, x * np.where(negative, half_erfc, 1.0 - half_erfc))


def gelu_tanh(x: Array) -> Array:
    with np.errstate(all="ignore"):
        inner = _SQRT_TWO_OVER_PI * (x + 0.044715 * x * x * x)
        return _flush_tail(x, x / (1.0 + np.exp(-2.0 * inner)))


def silu(x: Array) -> Array:
    with np.errstate(all="ignore"):
        return _flush_tail(x, x / (1.0 + np.exp(-x)))


def _rsqrt(x: Array) -> Array:
    return 1.0 / np.sqrt(x)


def _reciprocal(x: Array) -> Array:
    return 1.0 / x


_UNARY: dict[UnaryOpType, Callable[[Array], Array]] = {
    UnaryOpType.NEG: np.negative,
    UnaryOpType.ABS: np.abs,
    UnaryOpType.EXP: np.exp,
    UnaryOpType.LOG: np.log,
    UnaryOpType.TANH: np.tanh,
    UnaryOpType.SIGMOID: _sigmoid,
    UnaryOpType.RELU: _relu,
    UnaryOpType.GELU: gelu,
    UnaryOpType.GELU_TANH: gelu_tanh,
    UnaryOpType.SILU: silu,
    UnaryOpType.SQRT: np.sqrt,
    UnaryOpType.RSQRT: _rsqrt,
    UnaryOpType.RECIPROCAL: _reciprocal,
    UnaryOpType.SIN: np.sin,
    UnaryOpType.COS: np.cos,
    UnaryOpType.ERF: erf,
    UnaryOpType.FLOOR: np.floor,
    UnaryOpType.CEIL: np.ceil,
    UnaryOpType.ROUND: np.rint,  # half to even, as torch.round
    UnaryOpType.TRUNC: np.trunc,
    UnaryOpType.LOGICAL_NOT: np.logical_not,
}

# Ops that keep an integer input integral (torch.neg(int) is int); the rest compute in float.
_INTEGRAL_UNARY = frozenset(
    {UnaryOpType.NEG, UnaryOpType.ABS, UnaryOpType.RELU, UnaryOpType.LOGICAL_NOT}
)


def _eval_unary(expr: UnaryOp, env: _Env) -> Array:
    (inp,) = expr.tensor_inputs
    value = env.tensor(inp)
    if expr.op not in _INTEGRAL_UNARY:
        value = value.astype(np.float64, copy=False)
    return _UNARY[expr.op](value)


# ---- binary and ternary ops --------------------------------------------------------------------


def remainder(a: Array, b: Array) -> Array:
    """torch.remainder: ``fmod`` moved by ``b`` where it is nonzero of the other sign, so a
    zero keeps the dividend's sign (NumPy's ``remainder`` gives it the divisor's); integers
    as NumPy's (a divisor of 0 gives 0)."""
    a, b = np.asarray(a), np.asarray(b)
    if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(b.dtype, np.floating)):
        return np.asarray(np.remainder(a, b))
    mod = np.fmod(a, b)
    moved = (mod != 0) & ((b < 0) != (mod < 0))
    return np.asarray(np.where(moved, mod + b, mod))


_BINARY: dict[BinaryOpType, Callable[[Array, Array], Array]] = {
    BinaryOpType.ADD: np.add,
    BinaryOpType.SUB: np.subtract,
    BinaryOpType.MUL: np.multiply,
    BinaryOpType.DIV: np.true_divide,
    BinaryOpType.POW: np.power,
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
    # Integer division by zero gives 0 in all three (NumPy's rule; the kernels agree).
    BinaryOpType.FMOD: np.fmod,
    BinaryOpType.REMAINDER: remainder,
    BinaryOpType.FLOOR_DIVIDE: np.floor_divide,
}

_LOGICAL = frozenset({BinaryOpType.LOGICAL_AND, BinaryOpType.LOGICAL_OR})


def _eval_binary(expr: BinaryOp, env: _Env) -> Array:
    lhs_val, rhs_val = expr.inputs
    if expr.op in _LOGICAL:
        lhs = env.operand(lhs_val, bool_)
        rhs = env.operand(rhs_val, bool_)
        return np.asarray(_BINARY[expr.op](lhs, rhs))
    common = _common_dtype(expr.inputs)
    lhs = env.operand(lhs_val, common)
    rhs = env.operand(rhs_val, common)
    if expr.op == BinaryOpType.DIV:
        # torch.div without a rounding mode is true division, even of integers.
        lhs = lhs.astype(np.float64, copy=False)
        rhs = rhs.astype(np.float64, copy=False)
    elif common.is_bool and not expr.op.is_comparison:
        # bool + bool is logical or in torch; int64 math then the cast to bool gives that.
        lhs = lhs.astype(np.int64)
        rhs = rhs.astype(np.int64)
    return np.asarray(_BINARY[expr.op](lhs, rhs))


def _eval_where(expr: TernaryOp, env: _Env) -> Array:
    condition_val, if_true_val, if_false_val = expr.inputs
    condition = env.operand(condition_val, bool_)
    common = _common_dtype([if_true_val, if_false_val])
    if_true = env.operand(if_true_val, common)
    if_false = env.operand(if_false_val, common)
    return np.where(condition, if_true, if_false)


# ---- data movement -----------------------------------------------------------------------------


def _eval_full(expr: FullOp, env: _Env) -> Array:
    return np.full(expr.output.shape, env.operand(expr.value, expr.output.dtype))


def _eval_set(expr: LoadStoreOp | CastOp, env: _Env) -> Array:
    (inp,) = expr.tensor_inputs
    return env.tensor(inp)


def _eval_broadcast(expr: BroadcastOp, env: _Env) -> Array:
    (inp,) = expr.tensor_inputs
    value = env.tensor(inp)
    kept = iter(value.shape)
    shape = [1 if new else next(kept) for new in expr.is_new]
    # A new axis may be born expanded; broadcast_to gives it its size without copying.
    return np.broadcast_to(value.reshape(shape), expr.output.shape)


def _eval_expand(expr: ExpandOp, env: _Env) -> Array:
    (inp,) = expr.tensor_inputs
    return np.broadcast_to(env.tensor(inp), expr.output.shape)


def _eval_squeeze(expr: SqueezeOp, env: _Env) -> Array:
    (inp,) = expr.tensor_inputs
    value = env.tensor(inp)
    dims = {dim % value.ndim for dim in expr.dims}
    # Index 0 rather than np.squeeze: an expanded broadcast axis has size > 1 in the array.
    index = tuple(0 if axis in dims else slice(None) for axis in range(value.ndim))
    return value[index]


def _eval_permute(expr: PermuteOp, env: _Env) -> Array:
    (inp,) = expr.tensor_inputs
    return np.transpose(env.tensor(inp), expr.perm)


def _eval_reshape(expr: ReshapeOp, env: _Env) -> Array:
    (inp,) = expr.tensor_inputs
    return np.reshape(env.tensor(inp), expr.output.shape)


# ---- reductions and matmuls --------------------------------------------------------------------


def _eval_reduction(expr: ReductionOp, env: _Env) -> Array:
    value = env.tensor(expr.input)
    axes = expr.axes
    if expr.op == ReductionOpType.SUM:
        if value.dtype != np.float64:
            value = value.astype(np.int64)  # torch sums ints and bools in int64
        return np.asarray(np.sum(value, axis=axes))
    if expr.op == ReductionOpType.MAX:
        return np.asarray(np.max(value, axis=axes))  # NaN propagates, as in torch
    return np.asarray(np.min(value, axis=axes))


def _matmul_operands(expr: Expr, env: _Env) -> list[Array]:
    """The tensor operands in one math type (bools as int64: a matmul of bools counts)."""
    tensors = expr.tensor_inputs
    common = _common_dtype(tensors)
    operands = [env.operand(tv, common) for tv in tensors]
    if common.is_bool:
        operands = [operand.astype(np.int64) for operand in operands]
    return operands


def _eval_matmul(expr: MatmulOp, env: _Env) -> Array:
    a, b = _matmul_operands(expr, env)
    return np.asarray(np.matmul(a, b))


def _eval_linear(expr: LinearOp, env: _Env) -> Array:
    operands = _matmul_operands(expr, env)
    x, weight = operands[0], operands[1]
    result = np.matmul(x, np.swapaxes(weight, -1, -2) if weight.ndim >= 2 else weight)
    if len(operands) > 2:
        result = result + operands[2]
    return np.asarray(result)


def _eval_mma(expr: MmaOp, env: _Env) -> Array:
    a, b = _matmul_operands(expr, env)
    out_axes = expr.output.logical
    if a.ndim != len(out_axes) or b.ndim != len(out_axes):
        raise FusionError(
            f"operands have ranks {a.ndim} and {b.ndim}, the output has {len(out_axes)} axes"
        )
    letters = [chr(ord("a") + i) if i < 26 else chr(ord("A") + i - 26) for i in range(a.ndim)]
    a_index: list[Any] = []
    b_index: list[Any] = []
    a_letters, b_letters = "", ""
    for axis, letter in enumerate(letters):
        # An axis of size 1 against a larger one is a broadcast: drop it, so einsum sees a
        # plain contraction (and dispatches to BLAS instead of materializing M*N*K).
        drop_a = a.shape[axis] == 1 and b.shape[axis] != 1
        drop_b = b.shape[axis] == 1 and a.shape[axis] != 1
        a_index.append(0 if drop_a else slice(None))
        b_index.append(0 if drop_b else slice(None))
        a_letters += "" if drop_a else letter
        b_letters += "" if drop_b else letter
    out_letters = "".join(
        letter for letter, axis in zip(letters, out_axes, strict=True) if not axis.is_reduction
    )
    spec = f"{a_letters},{b_letters}->{out_letters}"
    return np.asarray(np.einsum(spec, a[tuple(a_index)], b[tuple(b_index)], optimize=True))


# ---- dispatch ----------------------------------------------------------------------------------

_RULES: dict[type[Expr], Callable[[Any, _Env], Array]] = {
    LoadStoreOp: _eval_set,
    CastOp: _eval_set,  # the cast itself is the rounding every expr's result gets
    UnaryOp: _eval_unary,
    BinaryOp: _eval_binary,
    TernaryOp: _eval_where,
    FullOp: _eval_full,
    BroadcastOp: _eval_broadcast,
    ExpandOp: _eval_expand,
    SqueezeOp: _eval_squeeze,
    PermuteOp: _eval_permute,
    ReshapeOp: _eval_reshape,
    ReductionOp: _eval_reduction,
    MatmulOp: _eval_matmul,
    LinearOp: _eval_linear,
    MmaOp: _eval_mma,
}


def _rule_for(expr: Expr) -> Callable[[Any, _Env], Array]:
    for cls in type(expr).__mro__:
        rule = _RULES.get(cls)
        if rule is not None:
            return rule
    raise FusionError(f"the interpreter has no rule for {type(expr).__name__}", op=expr.op_name)


def _evaluate_expr(expr: Expr, env: _Env) -> Array:
    """``expr``'s result, cast to its output dtype and checked against its output shape."""
    rule = _rule_for(expr)
    out = expr.output
    try:
        result = _narrow(rule(expr, env), out.dtype)
    except FusionError as error:
        raise FusionError(
            f"{error.bare_message}\n  in {expr_to_str(expr)}", op=expr.op_name, where=expr.source
        ) from error
    except (ValueError, TypeError, IndexError) as error:
        raise FusionError(
            f"cannot evaluate {expr_to_str(expr)}: {error}", op=expr.op_name, where=expr.source
        ) from error
    if result.shape != out.shape:
        raise FusionError(
            f"result has shape {result.shape} but T{out.name} has shape {out.shape}\n"
            f"  in {expr_to_str(expr)}",
            op=expr.op_name,
            where=expr.source,
        )
    return result
