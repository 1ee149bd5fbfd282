"""The float64 expansions of the transcendental ops, written once against :class:`Float64Ops`
(so the tests run the same code on NumPy float64 arrays, as :mod:`emit_math` does for f32).

PTX has no f64 ``ex2``/``lg2``/``sin`` approximations: everything here is IEEE f64 arithmetic
(``add``/``mul``/``fma``/``div`` with ``.rn``) and bit moves of the exponent field. Accuracy
(against correctly rounded math; "ulp" of f64):

- exp: ``x = k ln2 + r`` (``ln2`` in two parts, ``|r| <= ln2/2``), ``e**r`` by its Taylor
  series to ``r**13`` (remainder below 2**-56), scaled by ``2**k`` in two steps so that
  subnormal results come out gradually: about 1 ulp. Overflows past 709.78, 0 past -745.2.
- log: ``x = m 2**e`` with ``m`` in [sqrt(1/2), sqrt(2)), ``log m = 2 atanh(s)``,
  ``s = (m - 1)/(m + 1)`` by its series (|s| <= 0.172, remainder below 2**-56), plus
  ``e ln2`` in two parts: about 1-2 ulps, relative next to 1 too.
- tanh: ``u/(u + 2)`` with ``u = expm1(2|x|)`` (Taylor series below 1, ``exp - 1`` above; 1
  past 20): a few ulps. sigmoid ``1/(1 + e**-x)`` (``e**x/(1 + e**x)`` for x < 0, so the
  tail keeps its relative accuracy), silu, gelu_tanh ``x/(1 + e**(-2u))``: a few ulps.
- erf: ``2/sqrt(pi) e**(-z**2) sum 2**n z**(2n+1)/(2n+1)!!`` (no cancellation) for
  ``|z| < 1.5``; past that ``1 - erfc``. erfc(a) for ``a >= 1.5``: its continued fraction
  (Laplace's), 100 levels as forward convergents, on a branch: a few ulps, relative in the
  tail down to the smallest subnormal; ``1 - erf`` below 1.5 (relative 3e-15 at 1.5). gelu is
  ``x erfc(-x/sqrt2)/2`` for x < 0 (1 minus that for x >= 0).
- sin/cos: ``x = k pi/2 + r`` with ``pi/2`` in three parts for ``|x| < 2**20``; past that, on
  a branch, ``x 2/pi mod 4`` exactly (Payne-Hanek, 2/pi in 26-bit chunks, ``x`` in two
  26-bit halves, every product exact, residues summed in double-double); then the Taylor
  series of sin and cos to ``r**17``/``r**18``: 1-2 ulps (absolute 2**-100 for the rare
  arguments closest to a multiple of pi/2).
- pow: ``exp(y log|x|)`` with C's special cases (as :func:`emit_math.pow_`): relative error
  about ``4e-16 |y ln|x|| + 2 ulp`` (log's ulps, times ``y``).
"""

from __future__ import annotations

import math
from typing import Protocol, TypeVar

from pyfuse.backend_ptx.emit_math import (
    GELU_TANH_K0,
    GELU_TANH_K1,
    LOG2E,
    SQRT1_2,
    FloatOps,
    flush_tail,
    pow_special_cases,
    two_sum,
)

V = TypeVar("V")
P = TypeVar("P")


class Float64Ops(FloatOps[V, P], Protocol):
    """:class:`FloatOps` on f64, with the exponent field's bit moves."""

    def scale(self, a: V, n: V) -> V: ...  # a * 2**n for an integral n, |n| <= 2000
    def exponent_split(self, a: V) -> tuple[V, V]: ...  # (m, e): a = m 2**e, m in [1, 2)


# ln 2 = LN2_HI + LN2_LO: LN2_HI has 32 bits, so k * LN2_HI is exact for |k| < 2**21; the
# double nearest ln 2 is 2.3190468138462996e-17 short of it.
LN2_HI = math.ldexp(math.floor(math.ldexp(math.log(2), 32)), -32)
LN2_LO = (math.log(2) - LN2_HI) + 2.3190468138462996e-17
EXP_MIN, EXP_MAX = -746.0, 710.0
EXP_TAYLOR = tuple(1.0 / math.factorial(n) for n in range(14))
LOG_SERIES = tuple(1.0 / (2 * k + 1) for k in range(12))
SQRT2 = math.sqrt(2.0)
EXPM1_TAYLOR = tuple(1.0 / math.factorial(n) for n in range(1, 21))
TANH_ONE = 20.0  # tanh(20) is 1 in f64
TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
ONE_OVER_SQRT_PI = 1.0 / math.sqrt(math.pi)
ERF_SERIES_TERMS = 28
ERFC_FRACTION_FROM = 1.5
ERFC_FRACTION_LEVELS = 100
ERFC_ZERO_PAST = 27.3  # erfc(27.3) is below the smallest subnormal
# pi/2 in three parts (each the rounding error of the sum before), for |x| < SIN_REDUCTION_MAX.
PIO2_PARTS = (
    float.fromhex("0x1.921fb54442d18p+0"),
    float.fromhex("0x1.1a62633145c07p-54"),
    float.fromhex("-0x1.f1976b7ed8fbcp-110"),
)
SIN_REDUCTION_MAX = 2.0**20
SIN_TAYLOR = tuple((-1.0) ** n / math.factorial(2 * n + 1) for n in range(1, 9))
COS_TAYLOR = tuple((-1.0) ** n / math.factorial(2 * n) for n in range(2, 10))
TWO_OVER_PI_BITS = 26
TWO_OVER_PI_CHUNK_COUNT = 46  # to bit 1196: past the largest f64 exponent and 120 bits more
SPLIT_FACTOR = 2.0**27 + 1  # Veltkamp: a double in two halves of at most 26 bits


# The chunks are kept times 2**CHUNK_SCALE (and x times 2**-CHUNK_SCALE): the last ones would
# be subnormal, which cannot hold 26 bits.
CHUNK_SCALE = 600


def two_over_pi_scaled(bits: int) -> int:
    """floor(2/pi * 2**bits), from Machin's formula in integers."""
    scale = bits + 64

    def arctan_of_inverse(n: int) -> int:
        total, term, k = 0, (1 << scale) // n, 0
        while term:
            total += term // (2 * k + 1) * (-1 if k % 2 else 1)
            term //= n * n
            k += 1
        return total

    pi = 4 * (4 * arctan_of_inverse(5) - arctan_of_inverse(239))
    return ((2 << (2 * scale)) // pi) >> 64


def _two_over_pi_chunks() -> tuple[float, ...]:
    """2/pi in chunks of 26 bits (bit 26i + 1 on) times 2**CHUNK_SCALE."""
    bits = TWO_OVER_PI_BITS * TWO_OVER_PI_CHUNK_COUNT
    scaled = two_over_pi_scaled(bits)
    mask = (1 << TWO_OVER_PI_BITS) - 1
    return tuple(
        math.ldexp((scaled >> (bits - TWO_OVER_PI_BITS * (i + 1))) & mask,
                   CHUNK_SCALE - TWO_OVER_PI_BITS * (i + 1))
        for i in range(TWO_OVER_PI_CHUNK_COUNT)
    )  # fmt: skip


TWO_OVER_PI_CHUNKS = _two_over_pi_chunks()


def _horner(ops: Float64Ops[V, P], x: V, coefficients: tuple[float, ...]) -> V:
    result = ops.const(coefficients[-1])
    for c in reversed(coefficients[:-1]):
        result = ops.fma(result, x, ops.const(c))
    return result


def exp(ops: Float64Ops[V, P], x: V, x_lo: V | None = None) -> V:
    """e**(x + x_lo); x_lo is a small correction (|x_lo| <= ulp(x), say)."""
    x = ops.min_nan(ops.max_nan(x, ops.const(EXP_MIN)), ops.const(EXP_MAX))
    k = ops.rint(ops.mul(x, ops.const(LOG2E)))
    minus_k = ops.neg(k)
    r = ops.fma(minus_k, ops.const(LN2_HI), x)  # exact
    r = ops.fma(minus_k, ops.const(LN2_LO), r)
    if x_lo is not None:
        r = ops.add(r, x_lo)
    return ops.scale(_horner(ops, r, EXP_TAYLOR), k)


def log(ops: Float64Ops[V, P], x: V) -> V:
    zero = ops.const(0.0)
    # Subnormals scaled into the normal range first.
    tiny = ops.less(x, ops.const(2.0**-1022))
    scaled = ops.select(tiny, ops.mul(x, ops.const(2.0**54)), x)
    m, e = ops.exponent_split(scaled)
    e = ops.select(tiny, ops.sub(e, ops.const(54.0)), e)
    high = ops.less(ops.const(SQRT2), m)
    m = ops.select(high, ops.mul(m, ops.const(0.5)), m)
    e = ops.select(high, ops.add(e, ops.const(1.0)), e)
    f = ops.sub(m, ops.const(1.0))  # exact
    s = ops.div(f, ops.add(f, ops.const(2.0)))
    log_m = ops.mul(ops.add(s, s), _horner(ops, ops.mul(s, s), LOG_SERIES))
    result = ops.fma(e, ops.const(LN2_HI), ops.fma(e, ops.const(LN2_LO), log_m))
    # 0 -> -inf, negatives and NaN -> NaN, +inf -> +inf.
    result = ops.select(ops.equal(x, zero), ops.const(-math.inf), result)
    result = ops.select(ops.less(x, zero), ops.const(math.nan), result)
    result = ops.select(ops.equal(x, ops.const(math.inf)), x, result)
    return ops.select(ops.equal(x, x), result, x)


def expm1_nonnegative(ops: Float64Ops[V, P], a: V) -> V:
    """e**a - 1 for a >= 0: the Taylor series below 1, exp(a) - 1 from there (no cancellation
    to speak of)."""
    series = ops.mul(a, _horner(ops, a, EXPM1_TAYLOR))
    return ops.select(ops.less(a, ops.const(1.0)), series, ops.sub(exp(ops, a), ops.const(1.0)))


def tanh(ops: Float64Ops[V, P], x: V) -> V:
    ax = ops.min_nan(ops.abs(x), ops.const(TANH_ONE))
    u = expm1_nonnegative(ops, ops.add(ax, ax))
    magnitude = ops.div(u, ops.add(u, ops.const(2.0)))
    magnitude = ops.select(ops.less(ax, ops.const(TANH_ONE)), magnitude, ops.const(1.0))
    # The sign of x, zeros included (tanh(-0) is -0).
    signed = ops.select(ops.less(x, ops.const(0.0)), ops.neg(magnitude), magnitude)
    # Zeros and NaN are their own tanh.
    keep = ops.negate(ops.less(ops.const(0.0), ops.abs(x)))
    return ops.select(keep, x, signed)


def sigmoid(ops: Float64Ops[V, P], x: V) -> V:
    e = exp(ops, ops.neg(ops.abs(x)))  # e**-|x| in (0, 1]
    positive = ops.div(ops.const(1.0), ops.add(ops.const(1.0), e))
    negative = ops.div(e, ops.add(ops.const(1.0), e))
    return ops.select(ops.less(x, ops.const(0.0)), negative, positive)


def silu(ops: Float64Ops[V, P], x: V) -> V:
    return flush_tail(ops, x, ops.mul(x, sigmoid(ops, x)))


def gelu_tanh(ops: Float64Ops[V, P], x: V) -> V:
    """x / (1 + e**(-2u)), u = sqrt(2/pi) (x + 0.044715 x**3): no cancellation for x < 0."""
    clamped = ops.min_nan(ops.max_nan(x, ops.const(-60.0)), ops.const(60.0))
    x3 = ops.mul(ops.mul(clamped, clamped), clamped)
    inner = ops.fma(x3, ops.const(GELU_TANH_K1), clamped)
    result = ops.div(
        x, ops.add(ops.const(1.0), exp(ops, ops.mul(inner, ops.const(-2 * GELU_TANH_K0))))
    )
    return flush_tail(ops, x, result)


# The scales erf and erfc take their argument in, with their exact squares (sqrt(1/2) rounded
# squares to 0.5000000000000001, which moved gelu(-11.4) by 1.4e-14).
_EXACT_SQUARES = {1.0: 1.0, SQRT1_2: 0.5}


def _exp_minus_square(ops: Float64Ops[V, P], ax: V, scale: float = 1.0) -> V:
    """e**(-a*a) for a = ax * scale (scale**2 a power of 2), with a*a taken exactly from ax
    as hi + lo: a rounded a would move the result by 2 a**2 ulps (1e-14 at a = 6.7)."""
    square = ops.mul(ax, ax)
    square_lo = ops.fma(ax, ax, ops.neg(square))
    factor = ops.const(_EXACT_SQUARES[scale])
    return exp(ops, ops.neg(ops.mul(square, factor)), ops.neg(ops.mul(square_lo, factor)))


def _erf_series(ops: Float64Ops[V, P], zx: V, scale: float = 1.0) -> V:
    """erf(z), z = zx * scale, for |z| < ERFC_FRACTION_FROM: every term has z's sign."""
    z = ops.mul(zx, ops.const(scale)) if scale != 1.0 else zx
    z2 = ops.mul(z, z)
    two_z2 = ops.add(z2, z2)
    total = ops.const(1.0)
    for n in range(ERF_SERIES_TERMS, 0, -1):
        total = ops.fma(ops.mul(two_z2, total), ops.const(1.0 / (2 * n + 1)), ops.const(1.0))
    return ops.mul(
        ops.mul(z, total), ops.mul(ops.const(TWO_OVER_SQRT_PI), _exp_minus_square(ops, z))
    )


def _erfc_fraction(ops: Float64Ops[V, P], ax: V, scale: float) -> V:
    """erfc(a) for a >= ERFC_FRACTION_FROM: e**(-a*a)/sqrt(pi) / (a + (1/2)/(a + 1/(a + ...))),
    the fraction's convergents carried forward (every term positive: no cancellation);
    a = ax * scale."""
    a = ops.mul(ax, ops.const(scale)) if scale != 1.0 else ax
    previous_numerator, numerator = ops.const(1.0), a
    previous_denominator, denominator = ops.const(0.0), ops.const(1.0)
    for level in range(1, ERFC_FRACTION_LEVELS + 1):
        weight = ops.const(level / 2)
        previous_numerator, numerator = (
            numerator, ops.fma(weight, previous_numerator, ops.mul(a, numerator))
        )  # fmt: skip
        previous_denominator, denominator = (
            denominator, ops.fma(weight, previous_denominator, ops.mul(a, denominator))
        )  # fmt: skip
        if level % 20 == 0:  # keep the convergents inside the f64 range
            shrink = ops.div(ops.const(1.0), numerator)
            numerator, previous_numerator = ops.const(1.0), ops.mul(previous_numerator, shrink)
            denominator = ops.mul(denominator, shrink)
            previous_denominator = ops.mul(previous_denominator, shrink)
    ratio = ops.div(denominator, numerator)
    gauss = _exp_minus_square(ops, ax, scale)
    return ops.mul(ops.mul(gauss, ops.const(ONE_OVER_SQRT_PI)), ratio)


def _erfc(ops: Float64Ops[V, P], ax: V, scale: float = 1.0) -> V:
    """erfc(a) for a = ax * scale >= 0 (NaN stays NaN); scale is 1 or sqrt(1/2)."""
    a = ops.mul(ax, ops.const(scale)) if scale != 1.0 else ax
    near = ops.less(a, ops.const(ERFC_FRACTION_FROM))
    low, high = ERFC_FRACTION_FROM / scale, ERFC_ZERO_PAST / scale
    clamped = ops.min_nan(ops.max_nan(ax, ops.const(low)), ops.const(high))
    (tail,) = ops.when(
        ops.negate(near), lambda: (_erfc_fraction(ops, clamped, scale),), (ops.const(0.0),)
    )
    tail = ops.select(ops.less(a, ops.const(ERFC_ZERO_PAST)), tail, ops.const(0.0))
    series = _erf_series(ops, ops.min_nan(ax, ops.const(low)), scale)
    small = ops.sub(ops.const(1.0), series)
    return ops.select(ops.equal(a, a), ops.select(near, small, tail), a)


def erf(ops: Float64Ops[V, P], z: V) -> V:
    az = ops.abs(z)
    small = _erf_series(ops, ops.min_nan(ops.max_nan(z, ops.const(-2.0)), ops.const(2.0)))
    large = ops.sub(ops.const(1.0), _erfc(ops, az))
    large = ops.select(ops.less(z, ops.const(0.0)), ops.neg(large), large)
    return ops.select(ops.less(az, ops.const(ERFC_FRACTION_FROM)), small, large)


def gelu(ops: Float64Ops[V, P], x: V) -> V:
    half_erfc = ops.mul(_erfc(ops, ops.abs(x), SQRT1_2), ops.const(0.5))
    negative = ops.less(x, ops.const(0.0))
    result = ops.mul(x, ops.select(negative, half_erfc, ops.sub(ops.const(1.0), half_erfc)))
    return flush_tail(ops, x, result)


def _huge_reduction(ops: Float64Ops[V, P], x: V) -> tuple[V, V]:
    """``(k, r)`` with ``x = (4n + k) pi/2 + r``, ``k`` in 0..3, for any finite f64 ``x``."""
    # Veltkamp's split of x * 2**-CHUNK_SCALE (exact, and far from overflow).
    shrunk = ops.mul(x, ops.const(2.0**-CHUNK_SCALE))
    scaled = ops.mul(shrunk, ops.const(SPLIT_FACTOR))
    high = ops.sub(scaled, ops.sub(scaled, shrunk))
    low = ops.sub(shrunk, high)
    total, error = ops.const(0.0), ops.const(0.0)
    for chunk in TWO_OVER_PI_CHUNKS:
        for half in (high, low):
            product = ops.mul(half, ops.const(chunk))  # 26 bits by 26: exact
            residue = ops.fma(ops.rint(ops.mul(product, ops.const(0.25))), ops.const(-4.0), product)
            new_total, lost = two_sum(ops, total, residue)
            # Keep the total in [-2, 2]: its rounding error stays below 2**-52.
            wrapped = ops.fma(ops.rint(ops.mul(new_total, ops.const(0.25))), ops.const(-4.0),
                              new_total)  # fmt: skip
            total, error = wrapped, ops.add(error, lost)
    turns = ops.rint(total)
    fraction = ops.add(ops.sub(total, turns), error)
    quadrant = ops.fma(ops.floor(ops.mul(turns, ops.const(0.25))), ops.const(-4.0), turns)
    # Double-double times pi/2: the fraction's own low part is below its ulp already.
    return quadrant, ops.mul(fraction, ops.const(PIO2_PARTS[0]))


def _sine(ops: Float64Ops[V, P], x: V, quarter_turns: int) -> V:
    k = ops.rint(ops.mul(x, ops.const(2.0 / math.pi)))
    minus_k = ops.neg(k)
    r = x
    for part in PIO2_PARTS:
        r = ops.fma(minus_k, ops.const(part), r)
    huge = ops.negate(ops.less(ops.abs(x), ops.const(SIN_REDUCTION_MAX)))
    finite = ops.less(ops.abs(x), ops.const(math.inf))
    k, r = ops.when(ops.both(huge, finite), lambda: _huge_reduction(ops, x), (k, r))
    r2 = ops.mul(r, r)
    sine = ops.fma(ops.mul(r2, r), _horner(ops, r2, SIN_TAYLOR), r)
    cosine = ops.fma(
        ops.mul(r2, r2), _horner(ops, r2, COS_TAYLOR), ops.fma(r2, ops.const(-0.5), ops.const(1.0))
    )
    turns = ops.add(k, ops.const(float(quarter_turns)))
    q = ops.fma(ops.floor(ops.mul(turns, ops.const(0.25))), ops.const(-4.0), turns)
    odd = ops.fma(ops.floor(ops.mul(q, ops.const(0.5))), ops.const(-2.0), q)
    value = ops.select(ops.equal(odd, ops.const(1.0)), cosine, sine)
    value = ops.select(ops.less(ops.const(1.5), q), ops.neg(value), value)
    if quarter_turns == 0:  # sin(-0) is -0
        value = ops.select(ops.equal(x, ops.const(0.0)), x, value)
    return ops.select(finite, value, ops.const(math.nan))


def sin(ops: Float64Ops[V, P], x: V) -> V:
    return _sine(ops, x, 0)


def cos(ops: Float64Ops[V, P], x: V) -> V:
    return _sine(ops, x, 1)


def pow_(ops: Float64Ops[V, P], x: V, y: V) -> V:
    """x**y = e**(y log|x|) with C's special cases (:func:`emit_math.pow_special_cases`)."""
    return pow_special_cases(ops, x, y, exp(ops, ops.mul(y, log(ops, ops.abs(x)))))


EXPANSIONS = {
    "exp": exp, "log": log, "tanh": tanh, "sigmoid": sigmoid, "silu": silu, "gelu": gelu,
    "gelu_tanh": gelu_tanh, "sin": sin, "cos": cos, "erf": erf,
}  # fmt: skip
