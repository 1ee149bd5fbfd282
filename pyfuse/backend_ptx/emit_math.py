"""Scalar math for the PTX emitter: dtype tables, constant folding and the op expansions.

A value is a register or a Python immediate (``bool``/``int``/``float``) in the *storage* form
of its dtype: f32 in ``.f32``, f64 in ``.f64``, bf16/f16 as bits in ``.b16``, int32/int64 in
``.b32``/``.b64``, bool in a predicate. Math happens in the *compute* type (16-bit floats in
f32, rounded once to the node's dtype with ``cvt.rn``). Float add/sub/mul carry ``.rn`` so ptxas
never contracts them: results round op by op, as the kernel-IR interpreter computes them.

The f32 expansions are written once against :class:`FloatOps`, so the tests run the very same
code on NumPy float32 arrays; :mod:`pyfuse.backend_ptx.emit_scalar` emits them as PTX.
Accuracy (float32 results against float64 math; "ulp" of f32):

- exp: ``ex2.approx.ftz(hi) * (1 + lo*ln2)`` with ``hi + lo = x*log2(e)`` split exactly by an
  fma: about 3e-7 relative. Results below 2**-126 flush to 0 (an absolute error < 1.2e-38).
- log: ``lg2.approx * ln2`` (2**-22 relative), and for ``|x - 1| < 0.5``, where that would be
  2**-22 absolute, ``2 atanh((x - 1) / (x + 1))`` as a series: a few ulps relative, also
  next to 1.
- tanh: ``x + x**3 P(x**2)`` for ``|x| < 0.6``, else ``1 - 2/(exp(2|x|) + 1)``: ~3e-7 relative
  (``tanh.approx`` is only ~5e-4).
- sigmoid ``1/(1 + exp(-x))``, silu ``x * sigmoid(x)``, gelu_tanh ``x/(1 + exp(-2u))`` with
  ``u = sqrt(2/pi)(x + 0.044715 x**3)``: no cancellation; reciprocals by ``rcp.approx.ftz``
  (1 ulp; results below 2**-126 flush to 0). ~3e-7 relative; gelu_tanh ~1.5e-6 for x in
  [-5, 0] (the rounding of u) and a few 1e-6 where ``|result| < 1e-10``. gelu, gelu_tanh
  and silu return a zero of x's sign where ``|result| < 2**-100``
  (``exprs.ACTIVATION_TAIL_FLUSH``, as the reference does).
- erf: ``z P(z**2)`` for ``|z| < 0.9``, else ``1 - erfc(|z|)`` with
  ``erfc(a) = t exp(Q(t) - a**2)``, ``t = 1/(1 + 0.4a)`` (coefficients fitted for this module):
  ~1e-7 absolute. gelu is ``x erfc(-x/sqrt2)/2`` (1 minus that for x >= 0) from the same
  erfc: ~1e-6 relative down to x ~ -6, where ``1 + erf`` would have cancelled.
- pow: ``ex2(y * lg2|x|)`` with the sign of ``x`` for odd integer ``y`` and NaN for ``x < 0``
  with non-integer ``y``: relative error about ``1.7e-7 * |y*log2|x|| + 2 ulp``. Constant
  exponents 0, 1, 2 and -1 are correctly rounded (``x*x``, ``rcp.rn``). Zero and infinite bases
  and ``(-1)**inf`` follow C's pow (signed zeros and infinities included).
- sin/cos: ``x = k pi/2 + r`` with ``k = rint(x 2/pi)`` and ``r`` from three fmas by the
  parts of pi/2 (exact enough while ``k`` is small), then ``r + r**3 P(r**2)`` or
  ``1 - r**2/2 + r**4 Q(r**2)`` by the quadrant: about 1e-7 absolute. Past ``|x| = 2**22``
  (``SIN_REDUCTION_MAX``) a branch takes ``x 2/pi mod 4`` exactly in f64 from the bits of
  2/pi (Payne-Hanek), as accurate up to 3.4e38: sin(1e10) is the sine of that f32, as in
  torch (``sin.approx`` is bounded only on [-100pi, 100pi]; it gave 0 for sin(3e10): GPU
  fuzzer, seed 443).
- rsqrt: ``rsqrt.approx`` (2**-22.9 relative); sqrt, reciprocal and div are IEEE (``.rn``).

Float64 keeps IEEE arithmetic, sqrt, reciprocal and rsqrt (as 1/sqrt); its transcendental
ops and pow are :mod:`pyfuse.backend_ptx.emit_math64`'s expansions.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from pyfuse.backend_ptx.operands import Reg, RegClass
from pyfuse.ir import dtypes
from pyfuse.ir.dtypes import DType
from pyfuse.ir.exprs import ACTIVATION_TAIL_FLUSH

Imm = bool | int | float
Value = Reg | Imm

# ---- dtype tables ----------------------------------------------------------------------------

# (register class, PTX type of mov/selp) of each dtype's storage form.
_STORAGE: dict[DType, tuple[RegClass, str]] = {
    dtypes.float32: (RegClass.F32, "f32"),
    dtypes.float64: (RegClass.F64, "f64"),
    dtypes.bfloat16: (RegClass.B16, "b16"),
    dtypes.float16: (RegClass.B16, "b16"),
    # 8- and 16-bit integers live in 32-bit registers, sign- or zero-extended.
    dtypes.int8: (RegClass.B32, "s32"),
    dtypes.uint8: (RegClass.B32, "s32"),
    dtypes.int16: (RegClass.B32, "s32"),
    dtypes.int32: (RegClass.B32, "s32"),
    dtypes.int64: (RegClass.B64, "s64"),
    dtypes.bool_: (RegClass.PRED, "pred"),
}
_COMPUTE: dict[DType, str] = {
    dtypes.float32: "f32", dtypes.bfloat16: "f32", dtypes.float16: "f32",
    dtypes.float64: "f64", dtypes.int8: "s32", dtypes.uint8: "s32", dtypes.int16: "s32",
    dtypes.int32: "s32", dtypes.int64: "s64", dtypes.bool_: "pred",
}  # fmt: skip
_CLASS: dict[str, RegClass] = {
    "f32": RegClass.F32, "f64": RegClass.F64, "s32": RegClass.B32, "s64": RegClass.B64,
    "u32": RegClass.B32, "u64": RegClass.B64, "b16": RegClass.B16, "pred": RegClass.PRED,
}  # fmt: skip
_HALF = (dtypes.bfloat16, dtypes.float16)
_HALF_PTX = frozenset(dtype.ptx for dtype in _HALF)
# IR op names that mean the same compute op.
_ALIASES = {"max": "maximum", "min": "minimum", "sum": "add"}
# On bools, * and min are "and", + and max are "or" (NumPy's bool arithmetic).
BOOL_AND_OPS = frozenset({"logical_and", "mul", "minimum"})
BOOL_OR_OPS = frozenset({"logical_or", "add", "maximum"})


def storage_class(dtype: DType) -> RegClass:
    return _STORAGE[dtype][0]


def storage_type(dtype: DType) -> str:
    return _STORAGE[dtype][1]


def compute_type(dtype: DType) -> str:
    return _COMPUTE[dtype]


def is_half(dtype: DType) -> bool:
    """bf16 or f16: stored as 16-bit patterns, computed in f32. (Tested by PTX name: a
    DType compares and hashes all its fields, and the emitter asks this for most values.)"""
    return dtype.ptx in _HALF_PTX


# ---- constant folding ------------------------------------------------------------------------


def round_to(value: float | int | bool, dtype: DType) -> Imm:
    """``value`` as the kernel-IR interpreter holds it in ``dtype`` (ints wrap, floats round)."""
    if dtype.is_bool:
        return bool(value)
    if dtype.is_integer:
        bits = dtype.bits
        wrapped = int(value) & ((1 << bits) - 1)
        if dtype.is_unsigned:
            return wrapped
        return wrapped - (1 << bits) if wrapped >> (bits - 1) else wrapped
    with np.errstate(all="ignore"):
        if dtype == dtypes.float64:
            return float(value)
        single = np.float32(value)
        if dtype == dtypes.bfloat16:
            # Through f32, like a GPU (and the interpreter) rounding f32 math to 16 bits.
            widened = np.array([_bf16_bits(single) << 16], dtype=np.uint32)
            return float(widened.view(np.float32)[0])
        if is_half(dtype):
            return float(single.astype(np.float16))
        return float(single)


def half_bits(value: float, dtype: DType) -> int:
    """The 16-bit pattern of a bf16/f16 immediate, for ``.b16`` operands."""
    with np.errstate(all="ignore"):
        single = np.float32(value)
        if dtype == dtypes.bfloat16:
            return _bf16_bits(single)
        return int(np.array([single], dtype=np.float32).astype(np.float16).view(np.uint16)[0])


def _bf16_bits(single: np.float32) -> int:
    """The bf16 pattern of an f32, rounded to nearest even (a NaN is the quiet NaN of its
    sign), as ml_dtypes converts it; in integers, so a kernel's first bf16 constant does not
    import ml_dtypes (0.6 s on the CPU host)."""
    bits = int(np.array([single], dtype=np.float32).view(np.uint32)[0])
    if math.isnan(single):
        return (bits >> 16) & 0x8000 | 0x7FC0
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def _relu(value: np.float64) -> np.float64:
    result: np.float64 = np.maximum(value, 0.0)
    return result


def _reciprocal(value: np.float64) -> np.float64:
    return 1.0 / value


# The correctly rounded float ops, on NumPy float64 scalars (errors give inf/NaN, not raise).
# Folding computes only the op asked for: indices into register arrays fold for every element.
_EXACT_UNARY: dict[str, Callable[[np.float64], np.float64]] = {
    "neg": operator.neg, "abs": np.abs, "relu": _relu, "sqrt": np.sqrt, "reciprocal": _reciprocal,
}  # fmt: skip
_EXACT_BINARY: dict[str, Callable[[np.float64, np.float64], np.float64]] = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
    "pow": np.power,
}  # fmt: skip
_INT_BINARY: dict[str, Callable[[int, int], int]] = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "maximum": max, "minimum": min,
    "bitwise_and": operator.and_, "bitwise_or": operator.or_, "bitwise_xor": operator.xor,
}  # fmt: skip


def _exact_unary(op: str, x: float) -> float | None:
    """The correctly rounded float ops; transcendentals of constants run on the GPU, so a
    constant gives the same bits as a tensor holding it."""
    exact = _EXACT_UNARY.get(op)
    if exact is None:
        return None
    with np.errstate(all="ignore"):
        return float(exact(np.float64(x)))


def fold_unary(op: str, value: Imm, dtype: DType) -> Imm | None:
    """``op(value)`` computed here, or None when it must run on the GPU."""
    if op == "logical_not":
        return not value
    if dtype.is_integer:
        integral = {
            "neg": -int(value), "abs": abs(int(value)), "relu": max(int(value), 0),
            "bitwise_not": ~int(value),
        }  # fmt: skip
        return round_to(integral[op], dtype) if op in integral else None
    if dtype.is_floating:
        result = _exact_unary(op, float(value))
        return None if result is None else round_to(result, dtype)
    return None


_COMPARE: dict[str, Callable[[Imm, Imm], bool]] = {
    "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
    "eq": operator.eq, "ne": operator.ne,
}  # fmt: skip


def _nan_max(a: float, b: float, pick: Callable[[float, float], float]) -> float:
    return math.nan if math.isnan(a) or math.isnan(b) else pick(a, b)


def fold_binary(op: str, a: Imm, b: Imm, dtype: DType) -> Imm | None:
    """``a op b`` for operands of ``dtype`` (the result is bool for comparisons)."""
    op = _ALIASES.get(op, op)
    if op in _COMPARE:
        return bool(_COMPARE[op](a, b))
    if op == "logical_and" or (dtype.is_bool and op in BOOL_AND_OPS):
        return bool(a) and bool(b)
    if op == "logical_or" or (dtype.is_bool and op in BOOL_OR_OPS):
        return bool(a) or bool(b)
    if dtype.is_integer:
        x, y = int(a), int(b)
        if op in ("floordiv", "mod", "div"):
            if y == 0:
                return None
            quotient = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
            return round_to(x - quotient * y if op == "mod" else quotient, dtype)
        if op == "pow":
            return None if y < 0 else round_to(pow(x, y, 1 << dtype.bits), dtype)
        integral = _INT_BINARY.get(op)
        return None if integral is None else round_to(integral(x, y), dtype)
    if dtype.is_floating:
        exact = _EXACT_BINARY.get(op)
        if exact is not None:
            with np.errstate(all="ignore"):
                result = float(exact(np.float64(a), np.float64(b)))
            return round_to(result, dtype)
        if op == "maximum":
            return round_to(_nan_max(float(a), float(b), max), dtype)
        if op == "minimum":
            return round_to(_nan_max(float(a), float(b), min), dtype)
    return None


def fold_cast(value: Imm, dtype: DType) -> Imm:
    """A cast of an immediate: float to int truncates and saturates, NaN gives 0 (cvt.rzi)."""
    if dtype.is_integer and isinstance(value, float):
        if math.isnan(value):
            return 0
        if dtype.is_unsigned:
            low, high = 0, (1 << dtype.bits) - 1
        else:
            low, high = -(1 << (dtype.bits - 1)), (1 << (dtype.bits - 1)) - 1
        return low if value < low else high if value > high else int(value)
    if dtype.is_floating:
        return round_to(float(value), dtype)
    return round_to(value, dtype)


def _identity(op: str, a: Value, b: Value, dtype: DType) -> Value | None:
    """``a op b`` when one immediate side decides it (x + 0, x * 1, x && true, ...)."""
    if dtype.is_floating:
        return a if op in ("mul", "div") and b == 1.0 and not isinstance(b, Reg) else None
    for constant, other in ((b, a), (a, b)):
        if isinstance(constant, Reg):
            continue
        if dtype.is_bool and op in BOOL_AND_OPS:
            return other if constant else False
        if dtype.is_bool and op in BOOL_OR_OPS:
            return True if constant else other
        if (op == "add" and constant == 0) or (op == "mul" and constant == 1):
            return other
        if op == "mul" and constant == 0:
            return 0
        if constant is b and ((op == "sub" and b == 0) or (op == "floordiv" and b == 1)):
            return a
    return None


# ---- f32 expansions, written once for PTX and for NumPy emulation ---------------------------

V = TypeVar("V")
P = TypeVar("P")


class FloatOps(Protocol, Generic[V, P]):
    """f32 operations with the PTX instruction semantics named in each method."""

    def const(self, value: float) -> V: ...
    def add(self, a: V, b: V) -> V: ...  # add.rn
    def sub(self, a: V, b: V) -> V: ...  # sub.rn
    def mul(self, a: V, b: V) -> V: ...  # mul.rn
    def fma(self, a: V, b: V, c: V) -> V: ...  # fma.rn, one rounding
    def div(self, a: V, b: V) -> V: ...  # div.rn
    def rcp(self, a: V) -> V: ...  # rcp.rn
    def rcp_approx(self, a: V) -> V: ...  # rcp.approx.ftz: 1 ulp, subnormal results flush
    def neg(self, a: V) -> V: ...
    def abs(self, a: V) -> V: ...
    def max_nan(self, a: V, b: V) -> V: ...  # max.NaN
    def min_nan(self, a: V, b: V) -> V: ...  # min.NaN
    def ex2(self, a: V) -> V: ...  # ex2.approx.ftz: 2 ulp
    def lg2(self, a: V) -> V: ...  # lg2.approx: 2**-22 abs in (0.5, 2), else relative
    def rint(self, a: V) -> V: ...  # cvt.rni.f32.f32
    def floor(self, a: V) -> V: ...  # cvt.rmi.f32.f32
    def less(self, a: V, b: V) -> P: ...
    def equal(self, a: V, b: V) -> P: ...
    def both(self, p: P, q: P) -> P: ...
    def negate(self, p: P) -> P: ...
    def select(self, p: P, a: V, b: V) -> V: ...
    # compute() where p holds, otherwise elsewhere (a branch around a rare, long path)
    def when(
        self, p: P, compute: Callable[[], tuple[V, ...]], otherwise: tuple[V, ...]
    ) -> tuple[V, ...]: ...
    def widened(self) -> FloatOps[Any, P]: ...  # the same ops on f64
    def widen(self, a: V) -> Any: ...  # cvt.f64.f32 (exact)
    def narrow(self, a: Any) -> V: ...  # cvt.rn.f32.f64


LOG2E = 1.4426950408889634
LOG2E_HI = float(np.float32(LOG2E))
LOG2E_LO = LOG2E - LOG2E_HI
LN2 = 0.6931471805599453
SQRT1_2 = 0.7071067811865476
# exp clamps its input so that hi = x*log2(e) and its fma residual stay finite: below -104
# the result is 0 in f32 anyway, above 89 it is inf (ex2 of 128.4).
EXP_MIN, EXP_MAX = -104.0, 89.0
# tanh(x) = x + x**3 * P(x**2) for |x| < TANH_SMALL (relative fit error 3e-9).
TANH_SMALL = 0.6
TANH_POLY = (-0.33333298002206024, 0.13331924128968875, -0.053783830456634034,
             0.02079597222626728, -0.005895158694133686)  # fmt: skip
# erf(z) = z * P(z**2) for |z| < ERF_SMALL (relative fit error 1.2e-8).
ERF_SMALL = 0.9
ERF_POLY = (1.1283791538124974, -0.376125233129483, 0.11282141061919979,
            -0.026778915888758845, 0.005011971350399644, -0.0006090398004743938)  # fmt: skip
# erfc(a) = t * exp(Q(t - 1/2) - a*a) with t = 1/(1 + 0.4 a), for every a >= 0 (relative fit
# error 5e-8; about 2e-7 once evaluated in f32).
ERFC_P = 0.4
ERFC_POLY = (-0.8636680676583308, 1.5268085930324533, 0.5570052429761775, -0.14396293269393262,
             -0.38033141611999743, -0.06005711333912858, 0.29763228337193215,
             0.1257028009235104, -0.2334077170250826, -0.09544417432115194,
             0.12377854917711592)  # fmt: skip
# Past a = 10 erfc is far below the smallest normal f32; clamping keeps t and a*a finite.
ERFC_A_MAX = 10.0
# sin/cos: x = k * pi/2 + r, pi/2 = SIN_PIO2[0] + SIN_PIO2[1] + SIN_PIO2[2] (each an f32, the
# next one the rounding error of the sum so far); sin(r) = r + r**3 * SIN_POLY(r**2) and
# cos(r) = 1 - r**2/2 + r**4 * COS_POLY(r**2), fitted for this module on |r| <= 1 (relative fit
# error below 1e-10): r passes pi/4 where the rounded x * 2/pi puts k one off near a half, by
# up to 0.2 at 2**22.
SIN_TWO_OVER_PI = 2.0 / math.pi
SIN_PIO2 = (1.5707963705062866, -4.371138828673793e-08, -1.7763568394002505e-15)
SIN_POLY = (-0.16666666480585665, 0.008333315803579036, -0.00019836076314076138,
            2.6946221859513314e-06)  # fmt: skip
COS_POLY = (0.04166666631113884, -0.0013888864648980612, 2.4795826677882814e-05,
            -2.698060367362781e-07)  # fmt: skip
SIN_REDUCTION_MAX = 2.0**22
# Past SIN_REDUCTION_MAX, x * 2/pi mod 4 from 2/pi in chunks of 24 bits (bit 24i + 1 on, so
# that x * chunk is exact in f64 for an f32 x): a chunk's product is a multiple of 4 once its
# last bit is, and the chunks past the ninth stay below 2**-62 for every f32 x.
TWO_OVER_PI_CHUNKS = tuple(float.fromhex(h) for h in (
    "0x1.45f306p-1", "0x1.b93910p-26", "0x1.529fc0p-52", "0x1.3abe88p-75", "0x1.ea69bap-97",
    "0x1.81b6c4p-121", "0x1.2b3278p-145", "0x1.0e4104p-170", "0x1.fca2c6p-193",
))  # fmt: skip
PIO2_F64 = math.pi / 2
# log(x) = 2 atanh(s) = 2 s (1 + s**2/3 + s**4/5 + ...) for |x - 1| < LOG_NEAR_ONE, where
# |s| <= 1/3 and the series' remainder is below 4e-9 relative.
LOG_NEAR_ONE = 0.5
LOG_SERIES = tuple(1.0 / (2 * k + 1) for k in range(8))
GELU_TANH_K0 = math.sqrt(2.0 / math.pi)
GELU_TANH_K1 = 0.044715


def _horner(ops: FloatOps[V, P], x: V, coefficients: tuple[float, ...]) -> V:
    result = ops.const(coefficients[-1])
    for c in reversed(coefficients[:-1]):
        result = ops.fma(result, x, ops.const(c))
    return result


def exp(ops: FloatOps[V, P], x: V, x_lo: V | None = None) -> V:
    """e**(x + x_lo); x_lo is a small finite correction (|x_lo| <= ulp(x), say)."""
    x = ops.min_nan(ops.max_nan(x, ops.const(EXP_MIN)), ops.const(EXP_MAX))
    hi = ops.mul(x, ops.const(LOG2E_HI))
    lo = ops.fma(x, ops.const(LOG2E_HI), ops.neg(hi))  # the exact rounding error of hi
    lo = ops.fma(x, ops.const(LOG2E_LO), lo)
    if x_lo is not None:
        lo = ops.fma(x_lo, ops.const(LOG2E_HI), lo)
    # 2**lo ~ 1 + lo*ln2 since |lo| < 2**-16; a product keeps inf and 0 exact.
    return ops.mul(ops.ex2(hi), ops.fma(lo, ops.const(LN2), ops.const(1.0)))


def two_sum(ops: FloatOps[V, P], a: V, b: V) -> tuple[V, V]:
    """Knuth's TwoSum: ``a + b`` exactly, as the rounded sum and its rounding error."""
    total = ops.add(a, b)
    moved = ops.sub(total, a)
    return total, ops.add(ops.sub(a, ops.sub(total, moved)), ops.sub(b, moved))


def _huge_reduction(ops: FloatOps[V, P], x: V) -> tuple[V, V]:
    """``(k, r)`` with ``x = (4n + k) pi/2 + r``, ``k`` in 0..3 and ``|r| <= pi/4``, for any f32
    ``x`` (Payne and Hanek's idea, with the bits of 2/pi as exact f64 products: each chunk's
    product is reduced mod 4 exactly, to [-2, 2] so that a small one stays as it is, and the
    residues summed in double-double)."""
    wide = ops.widened()
    xw = ops.widen(x)
    total, error = wide.const(0.0), wide.const(0.0)
    for chunk in TWO_OVER_PI_CHUNKS:
        product = wide.mul(xw, wide.const(chunk))
        residue = wide.fma(wide.rint(wide.mul(product, wide.const(0.25))), wide.const(-4.0),
                           product)  # fmt: skip
        total, lost = two_sum(wide, total, residue)
        error = wide.add(error, lost)
    turns = wide.rint(total)
    fraction = wide.add(wide.sub(total, turns), error)
    quadrant = wide.fma(wide.floor(wide.mul(turns, wide.const(0.25))), wide.const(-4.0), turns)
    return ops.narrow(quadrant), ops.narrow(wide.mul(fraction, wide.const(PIO2_F64)))


def _sine(ops: FloatOps[V, P], x: V, quarter_turns: int) -> V:
    """sin(x + quarter_turns * pi/2): sin for 0, cos for 1 (see the module doc)."""
    k = ops.rint(ops.mul(x, ops.const(SIN_TWO_OVER_PI)))
    minus_k = ops.neg(k)
    r = x
    for part in SIN_PIO2:
        r = ops.fma(minus_k, ops.const(part), r)
    # Past 2**22 (and for inf and NaN, which give NaN either way), the exact reduction.
    huge = ops.negate(ops.less(ops.abs(x), ops.const(SIN_REDUCTION_MAX)))
    k, r = ops.when(huge, lambda: _huge_reduction(ops, x), (k, r))
    r2 = ops.mul(r, r)
    sine = ops.fma(ops.mul(r2, r), _horner(ops, r2, SIN_POLY), r)
    cosine = ops.fma(
        ops.mul(r2, r2), _horner(ops, r2, COS_POLY), ops.fma(r2, ops.const(-0.5), ops.const(1.0))
    )
    # The quadrant q = (k + quarter_turns) mod 4, exact in f32 for the |k| this path serves.
    turns = ops.add(k, ops.const(float(quarter_turns)))
    q = ops.sub(
        turns, ops.mul(ops.const(4.0), ops.rint(ops.fma(turns, ops.const(0.25), ops.const(-0.375))))
    )
    odd = ops.sub(
        q, ops.mul(ops.const(2.0), ops.rint(ops.fma(q, ops.const(0.5), ops.const(-0.25))))
    )
    value = ops.select(ops.equal(odd, ops.const(1.0)), cosine, sine)
    value = ops.select(ops.less(ops.const(1.5), q), ops.neg(value), value)
    if quarter_turns == 0:  # sin(-0) is -0
        value = ops.select(ops.equal(x, ops.const(0.0)), x, value)
    return value


def sin(ops: FloatOps[V, P], x: V) -> V:
    return _sine(ops, x, 0)


def cos(ops: FloatOps[V, P], x: V) -> V:
    return _sine(ops, x, 1)


def log(ops: FloatOps[V, P], x: V) -> V:
    """``lg2.approx(x) ln 2``, except near 1, where its absolute error would be a large relative
    one (``log(1.001)``): there ``2 atanh(s)``, ``s = (x - 1) / (x + 1)``, as a series."""
    coarse = ops.mul(ops.lg2(x), ops.const(LN2))
    t = ops.sub(x, ops.const(1.0))  # exact for x in [0.5, 2]
    s = ops.div(t, ops.add(t, ops.const(2.0)))
    series = ops.mul(ops.mul(s, ops.const(2.0)), _horner(ops, ops.mul(s, s), LOG_SERIES))
    return ops.select(ops.less(ops.abs(t), ops.const(LOG_NEAR_ONE)), series, coarse)


def tanh(ops: FloatOps[V, P], x: V) -> V:
    ax = ops.abs(x)
    x2 = ops.mul(x, x)
    # x (1 + x**2 P), not x + x**3 P: a sum of -0 and the +0 of x**3 P is +0, and
    # tanh(-0) is -0 (1 / tanh(-0) = -inf).
    small = ops.mul(x, ops.fma(x2, _horner(ops, x2, TANH_POLY), ops.const(1.0)))
    e = exp(ops, ops.add(ax, ax))
    large = ops.fma(ops.const(-2.0), ops.rcp_approx(ops.add(e, ops.const(1.0))), ops.const(1.0))
    large = ops.select(ops.less(x, ops.const(0.0)), ops.neg(large), large)
    return ops.select(ops.less(ax, ops.const(TANH_SMALL)), small, large)


def sigmoid(ops: FloatOps[V, P], x: V) -> V:
    return ops.rcp_approx(ops.add(ops.const(1.0), exp(ops, ops.neg(x))))


def flush_tail(ops: FloatOps[V, P], x: V, result: V) -> V:
    """``result``, or a zero of ``x``'s sign where ``|result|`` is below ACTIVATION_TAIL_FLUSH
    (where the reference returns one: each formula's tail leaves f32 at its own x)."""
    tiny = ops.less(ops.abs(result), ops.const(ACTIVATION_TAIL_FLUSH))
    return ops.select(tiny, ops.mul(x, ops.const(0.0)), result)


def silu(ops: FloatOps[V, P], x: V) -> V:
    return flush_tail(ops, x, ops.mul(x, sigmoid(ops, x)))


def gelu_tanh(ops: FloatOps[V, P], x: V) -> V:
    """0.5 x (1 + tanh(u)) written as x / (1 + exp(-2u)): no cancellation for x < 0."""
    # Past |x| = 20 the result is x or 0 in f32; the clamp keeps u and its error finite.
    clamped = ops.min_nan(ops.max_nan(x, ops.const(-20.0)), ops.const(20.0))
    x3 = ops.mul(ops.mul(clamped, clamped), clamped)
    inner = ops.fma(x3, ops.const(GELU_TANH_K1), clamped)
    scale = ops.const(-2 * GELU_TANH_K0)
    exponent = ops.mul(inner, scale)
    exponent_lo = ops.fma(inner, scale, ops.neg(exponent))  # its rounding error, exactly
    result = ops.mul(x, ops.rcp_approx(ops.add(ops.const(1.0), exp(ops, exponent, exponent_lo))))
    return flush_tail(ops, x, result)


def _erfc(ops: FloatOps[V, P], ax: V, scale: float) -> V:
    """erfc(a) for a = ax*scale, ax >= 0, with a*a taken exactly from ax."""
    ax = ops.min_nan(ax, ops.const(ERFC_A_MAX / scale))
    t = ops.rcp_approx(ops.fma(ax, ops.const(scale * ERFC_P), ops.const(1.0)))
    q = _horner(ops, ops.sub(t, ops.const(0.5)), ERFC_POLY)
    # a*a = (ax*ax) * scale**2 as hi + lo; scale**2 is 1 or 1/2, so the product is exact.
    square = ops.mul(ax, ax)
    square_lo = ops.fma(ax, ax, ops.neg(square))
    big = ops.mul(square, ops.const(scale * scale))
    big_lo = ops.mul(square_lo, ops.const(scale * scale))
    # Fast2Sum of q - big: exact where |big| >= |q|, which is where s is large enough for its
    # rounding to matter (|s| < 1.3 elsewhere).
    s = ops.sub(q, big)
    error = ops.sub(q, ops.add(s, big))
    return ops.mul(t, exp(ops, s, ops.sub(error, big_lo)))


def erf(ops: FloatOps[V, P], z: V) -> V:
    az = ops.abs(z)
    small = ops.mul(z, _horner(ops, ops.mul(z, z), ERF_POLY))
    large = ops.sub(ops.const(1.0), _erfc(ops, az, 1.0))
    large = ops.select(ops.less(z, ops.const(0.0)), ops.neg(large), large)
    return ops.select(ops.less(az, ops.const(ERF_SMALL)), small, large)


def gelu(ops: FloatOps[V, P], x: V) -> V:
    """x * Phi(x) with Phi = erfc(|x|/sqrt2)/2 for x < 0 and 1 minus that else: relative
    accuracy on both sides (1 + erf would cancel for x < 0)."""
    half_erfc = ops.mul(_erfc(ops, ops.abs(x), SQRT1_2), ops.const(0.5))
    negative = ops.less(x, ops.const(0.0))
    result = ops.mul(x, ops.select(negative, half_erfc, ops.sub(ops.const(1.0), half_erfc)))
    return flush_tail(ops, x, result)


def pow_(ops: FloatOps[V, P], x: V, y: V) -> V:
    """x**y = 2**(y log2|x|) with C's special cases (:func:`pow_special_cases`)."""
    return pow_special_cases(ops, x, y, ops.ex2(ops.mul(y, ops.lg2(ops.abs(x)))))


def pow_special_cases(ops: FloatOps[V, P], x: V, y: V, magnitude: V) -> V:
    """x**y from ``magnitude`` = |x|**y with C's special cases: signed for odd integer y (the
    sign of zero too: (-0)**-3 is -inf), NaN for finite x < 0 and non-integer y, +inf or +0
    for x = -inf and non-integer y, 1 for y = 0, x = 1, and x = -1 with y = +-inf."""
    zero, infinity = ops.const(0.0), ops.const(math.inf)
    integral = ops.equal(ops.rint(y), y)
    half = ops.mul(y, ops.const(0.5))
    odd = ops.both(integral, ops.negate(ops.equal(ops.rint(half), half)))
    negative = ops.less(x, zero)
    result = ops.select(ops.both(negative, odd), ops.neg(magnitude), magnitude)
    finite_negative = ops.both(negative, ops.negate(ops.equal(x, ops.neg(infinity))))
    nan = ops.const(math.nan)
    result = ops.select(ops.both(finite_negative, ops.negate(integral)), nan, result)
    # A zero base keeps its sign under an odd exponent: x itself for y > 0, 1/x for y < 0.
    odd_zero = ops.both(ops.equal(x, zero), odd)
    result = ops.select(odd_zero, ops.select(ops.less(y, zero), ops.rcp(x), x), result)
    minus_one_infinite = ops.both(ops.equal(x, ops.const(-1.0)), ops.equal(ops.abs(y), infinity))
    trivial = ops.negate(
        ops.both(ops.negate(ops.equal(y, zero)),
                 ops.negate(ops.equal(x, ops.const(1.0))))
    )  # fmt: skip
    trivial = ops.negate(ops.both(ops.negate(trivial), ops.negate(minus_one_infinite)))
    result = ops.select(trivial, ops.const(1.0), result)
    # Exponents 1 and 2 exact, as C's pow is (x ** 1 < x was True for ex2's rounding of x:
    # GPU fuzzer, seed 411, a bool exponent).
    result = ops.select(ops.equal(y, ops.const(2.0)), ops.mul(x, x), result)
    return ops.select(ops.equal(y, ops.const(1.0)), x, result)


def sigmoid_16(ops: FloatOps[V, P], x: V) -> V:
    """sigmoid for a 16-bit result: 1/(1 + 2**(-x log2 e)) without exp's range reduction and
    low-order correction; about 1e-6 relative, far below a bf16/f16 rounding (2**-9)."""
    return ops.rcp_approx(ops.add(ops.const(1.0), ops.ex2(ops.mul(x, ops.const(-LOG2E)))))


def silu_16(ops: FloatOps[V, P], x: V) -> V:
    return flush_tail(ops, x, ops.mul(x, sigmoid_16(ops, x)))


def gelu_tanh_16(ops: FloatOps[V, P], x: V) -> V:
    """gelu_tanh for a 16-bit result, as x * sigmoid(2u) with u = k0 (x + k1 x**3): the same
    cancellation-free form as :func:`gelu_tanh`, without its clamps and exp correction (ex2
    saturates to 0 or inf, giving x or 0 past the f32 range); about 4e-6 relative."""
    x2 = ops.mul(x, x)
    scale = -2.0 * GELU_TANH_K0 * LOG2E
    inner = ops.mul(x, ops.fma(x2, ops.const(scale * GELU_TANH_K1), ops.const(scale)))
    return flush_tail(ops, x, ops.mul(x, ops.rcp_approx(ops.add(ops.const(1.0), ops.ex2(inner)))))
