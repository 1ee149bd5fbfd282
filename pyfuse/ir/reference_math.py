"""The float64 math of the reference interpreters, on NumPy arrays: erf (vectorized, no
scipy), the activations in their cancellation-free forms with the tail flush of
``exprs.ACTIVATION_TAIL_FLUSH``, and torch's float remainder. :mod:`pyfuse.ir.interpreter`
(the fusion reference) and :mod:`pyfuse.ir.kernel_interpreter` (the kernel-IR interpreter)
both compute with these, so the two agree by construction."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from pyfuse.ir.exprs import ACTIVATION_TAIL_FLUSH

Array = npt.NDArray[Any]


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


def relu(x: Array) -> Array:
    return np.maximum(x, np.zeros((), dtype=x.dtype))


def sigmoid(x: Array) -> Array:
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


def rsqrt(x: Array) -> Array:
    return 1.0 / np.sqrt(x)


def reciprocal(x: Array) -> Array:
    return 1.0 / x


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


def power(a: Array, b: Array) -> Array:
    """torch.pow: C's ``pow``, except that a float exponent of 0.5 is ``sqrt`` (NaN for
    -inf, -0 for -0), as torch and NumPy's scalar power take it; integers to a negative
    power as torch takes them (0, or +-1 for a base of +-1)."""
    a, b = np.asarray(a), np.asarray(b)
    if np.result_type(a, b).kind in "iu" and (b < 0).any():
        # torch's integer pow: a negative exponent gives 0, but 1 for a base of 1 and -1 or
        # 1 (by the exponent's parity) for a base of -1. (NumPy refuses it.)
        negative = b < 0
        result = np.asarray(np.power(a, np.where(negative, 0, b)))
        special = np.where(a == 1, 1, np.where(a == -1, np.where(b % 2 != 0, -1, 1), 0))
        return np.asarray(np.where(negative, special, result).astype(result.dtype))
    result = np.asarray(np.power(a, b))
    if result.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            result = np.asarray(np.where(b == 0.5, np.sqrt(a), result))
    return result
