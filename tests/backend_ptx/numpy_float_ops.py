"""NumPy stand-ins for :class:`pyfuse.backend_ptx.emit_math.FloatOps`: the expansions run on
arrays with the semantics of the PTX instructions they emit."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[Any]
F = np.float32


class NumpyF32:
    """:class:`emit_math.FloatOps` on float32 arrays. ``bias`` (-1, 0, 1) pushes each approximate
    instruction to its documented worst error (ex2: 2 ulp; lg2: 2**-22 abs or rel; rcp: 1 ulp)."""

    def __init__(self, bias: float = 0.0) -> None:
        self.bias = bias

    def const(self, value: float) -> Array:
        return np.array(value, F)

    def add(self, a: Array, b: Array) -> Array:
        return np.add(a, b, dtype=F)

    def sub(self, a: Array, b: Array) -> Array:
        return np.subtract(a, b, dtype=F)

    def mul(self, a: Array, b: Array) -> Array:
        return np.multiply(a, b, dtype=F)

    def fma(self, a: Array, b: Array, c: Array) -> Array:
        # The f32 product is exact in f64; rounding the f64 sum to f32 is within a hair of fma.
        return (a.astype(np.float64) * b + c).astype(F)

    def div(self, a: Array, b: Array) -> Array:
        return np.divide(a, b, dtype=F)

    def rcp(self, a: Array) -> Array:
        return np.divide(F(1), a, dtype=F)

    def rcp_approx(self, a: Array) -> Array:
        result = (np.divide(1.0, a.astype(np.float64)) * (1 + self.bias * 2.0**-23)).astype(F)
        return np.where(np.abs(result) < 2.0**-126, F(0), result)  # .ftz

    def neg(self, a: Array) -> Array:
        return np.negative(a)

    def abs(self, a: Array) -> Array:
        return np.abs(a)

    def max_nan(self, a: Array, b: Array) -> Array:
        return np.maximum(a, b)

    def min_nan(self, a: Array, b: Array) -> Array:
        return np.minimum(a, b)

    def ex2(self, a: Array) -> Array:
        with np.errstate(over="ignore"):
            result = (np.exp2(a.astype(np.float64)) * (1 + self.bias * 2.0**-23)).astype(F)
        return np.where(np.abs(result) < 2.0**-126, F(0), result)  # .ftz

    def lg2(self, a: Array) -> Array:
        x = a.astype(np.float64)
        exact = np.log2(x)
        near_one = (x > 0.5) & (x < 2)
        biased = np.where(
            near_one, exact + self.bias * 2.0**-22, exact * (1 + self.bias * 2.0**-22)
        )
        return biased.astype(F)

    def rint(self, a: Array) -> Array:
        return np.rint(a)

    def floor(self, a: Array) -> Array:
        return np.floor(a)

    def less(self, a: Array, b: Array) -> Array:
        return np.less(a, b)

    def equal(self, a: Array, b: Array) -> Array:
        return np.equal(a, b)

    def both(self, p: Array, q: Array) -> Array:
        return np.logical_and(p, q)

    def negate(self, p: Array) -> Array:
        return np.logical_not(p)

    def select(self, p: Array, a: Array, b: Array) -> Array:
        return np.where(p, a, b).astype(F)

    def when(
        self, p: Array, compute: Callable[[], tuple[Array, ...]], otherwise: tuple[Array, ...]
    ) -> tuple[Array, ...]:
        with np.errstate(all="ignore"):
            taken = compute()
        return tuple(self.select(p, a, b) for a, b in zip(taken, otherwise, strict=True))

    def widened(self) -> NumpyF64:
        return NumpyF64()

    def widen(self, a: Array) -> Array:
        return np.asarray(a, np.float64)

    def narrow(self, a: Array) -> Array:
        return np.asarray(a).astype(F)


def _fma_exact(a: float, b: float, c: float) -> float:
    """a * b + c rounded once (Python 3.11 has no math.fma): exact rationals, then one
    correctly rounded conversion; infinities and NaNs as IEEE gives them."""
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
        return a * b + c
    try:
        return float(Fraction(a) * Fraction(b) + Fraction(c))
    except OverflowError:
        return math.copysign(math.inf, a * b if a * b != 0 else c)


_FMA = np.frompyfunc(_fma_exact, 3, 1)
_SPLIT = 2.0**27 + 1


def _split(v: Array) -> tuple[Array, Array]:
    """Veltkamp's split: v = high + low, each with 26 significant bits or fewer."""
    scaled = v * _SPLIT
    high = scaled - (scaled - v)
    return high, v - high


def _product_error(a: Array, b: Array) -> Array:
    """a * b minus its rounding (Dekker; exact while nothing overflows or underflows)."""
    (ah, al), (bh, bl) = _split(a), _split(b)
    product = a * b
    return ((ah * bh - product) + ah * bl + al * bh) + al * bl


class NumpyF64(NumpyF32):
    """:class:`emit_math.FloatOps` on float64 arrays (fma exact, the rest IEEE)."""

    def __init__(self) -> None:
        super().__init__(0.0)

    def const(self, value: float) -> Array:
        return np.array(value, np.float64)

    def add(self, a: Array, b: Array) -> Array:
        return np.add(a, b, dtype=np.float64)

    def sub(self, a: Array, b: Array) -> Array:
        return np.subtract(a, b, dtype=np.float64)

    def mul(self, a: Array, b: Array) -> Array:
        return np.multiply(a, b, dtype=np.float64)

    def fma(self, a: Array, b: Array, c: Array) -> Array:
        """a * b + c by error-free transformations: a * b = p + e exactly (Dekker), p + c =
        s + t exactly (Knuth), then s + (t + e): one rounding but for rare double-rounding
        ties (within an ulp then); exact rationals where products leave the safe range."""
        a, b, c = np.broadcast_arrays(*(np.asarray(v, np.float64) for v in (a, b, c)))
        with np.errstate(all="ignore"):
            product = a * b
            error = _product_error(a, b)
            total = product + c
            moved = total - product
            lost = (product - (total - moved)) + (c - moved)
            result = np.asarray(total + (lost + error), dtype=np.float64)
            # Dekker's split and partial products neither overflow nor lose bits to underflow.
            moderate = [
                (v == 0) | ((np.abs(v) > 2.0**-400) & (np.abs(v) < 2.0**400)) for v in (a, b)
            ]
            magnitude = np.abs(product)
            safe = np.isfinite(result) & moderate[0] & moderate[1]
            safe &= (magnitude > 2.0**-900) | (product == 0)
        slow = ~safe
        if slow.any():
            result[slow] = np.asarray(_FMA(a[slow], b[slow], c[slow]), dtype=np.float64)
        return result

    def div(self, a: Array, b: Array) -> Array:
        return np.divide(a, b, dtype=np.float64)

    def rcp(self, a: Array) -> Array:
        return np.divide(1.0, a, dtype=np.float64)

    def select(self, p: Array, a: Array, b: Array) -> Array:
        return np.where(p, a, b).astype(np.float64)

    def scale(self, a: Array, n: Array) -> Array:
        n = np.clip(np.nan_to_num(np.asarray(n, np.float64)), -2000, 2000).astype(np.int64)
        first = n >> 1
        with np.errstate(all="ignore"):
            return np.ldexp(np.ldexp(np.asarray(a, np.float64), first), n - first)

    def exponent_split(self, a: Array) -> tuple[Array, Array]:
        bits = np.asarray(a, np.float64).view(np.uint64)
        exponent = ((bits >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.float64) - 1023.0
        mantissa = (bits & np.uint64(0x000FFFFFFFFFFFFF)) | np.uint64(0x3FF0000000000000)
        return mantissa.view(np.float64), exponent
