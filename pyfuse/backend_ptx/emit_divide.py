"""torch's division-like ops in PTX: ``fmod``, ``remainder`` and ``floor_divide``.

Expects compute-type operands (f32, f64, or 32/64-bit integers) from
:class:`~pyfuse.backend_ptx.emit_scalar.ScalarMath`. Guarantees torch's results, which the
reference interpreter computes (``ir/reference_math.py``; NumPy's but for the sign of a zero
remainder):

- floats: ``fmod(x, y) = x - trunc(x / y) y`` with the sign of ``x``, exactly: ``|x|`` is
  reduced in f64 by multiples ``|y| 2**k`` that leave quotients below ``2**QUOTIENT_BITS``,
  where the truncated quotient, corrected by one either way, and the fma's remainder are
  exact (``FMOD_STEPS`` steps cover every f32 pair; f64 operands whose quotient passes
  2**306 get an approximation). For f32 operands ``k`` comes from the exponent bits and the
  quotient from a reciprocal of ``|y|`` refined by Newton steps: no division, whose IEEE
  slow path ptxas calls as a subroutine (768 of them in one persistent matmul epilogue took
  ptxas 115 s). f64 operands keep ``div.rn`` and a quotient-derived ``k``
  (denormal divisors). A zero remainder keeps the dividend's sign (torch's rule). ``fmod(x, 0)``,
  ``fmod(inf, y)`` and NaNs give NaN, ``fmod(x, inf) = x``. ``remainder`` moves a nonzero
  ``fmod`` of the other sign than ``y`` by ``y``; ``floor_divide`` is ``(x - fmod(x, y)) / y`` made
  integral (NumPy's ``npy_divmod``), ``x / y`` where ``y == 0`` or ``x / y`` overflows.
- integers: ``div``/``rem`` (C's truncating ones) moved toward negative infinity where the
  signs differ; a divisor of 0 gives 0 (NumPy's rule: the hardware's result is unspecified,
  and a kernel cannot raise), and ``MIN // -1`` wraps to ``MIN``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from pyfuse.backend_ptx.emit_math import Value
from pyfuse.backend_ptx.emitter import KernelBuilder
from pyfuse.backend_ptx.instructions import arith, convert, logic
from pyfuse.backend_ptx.operands import Instr, Reg, RegClass


class ScalarMath(Protocol):
    """What these ops need of :class:`~pyfuse.backend_ptx.emit_scalar.ScalarMath` (which
    calls them: the Protocol keeps the import one way)."""

    kb: KernelBuilder

    def new(self, ptype: str) -> Reg: ...

    def reg_of(self, value: Value, ptype: str) -> Reg: ...


class _Emitting:
    """Values of one PTX type emitted into ``math``'s kernel."""

    def __init__(self, math: ScalarMath, ctype: str) -> None:
        self.math, self.t = math, ctype

    def out(self, make: Callable[[Reg], Instr], ptype: str | None = None) -> Reg:
        kind = ptype or self.t
        register = self.math.kb.reg(RegClass.B64) if kind == "b64" else self.math.new(kind)
        self.math.kb.emit(make(register))
        return register

    def pred(self, cmp: str, a: Value, b: Value) -> Reg:
        t = self.t
        return self.out(lambda p: arith.setp(cmp, t, p, a, b), "pred")

    def select(self, p: Reg, a: Value, b: Value) -> Reg:
        t = self.t
        return self.out(lambda d: arith.selp(t, d, a, b, p))


def divide(math: ScalarMath, op: str, x: Value, y: Value, ctype: str) -> Reg:
    """``op(x, y)`` (``fmod``, ``remainder`` or ``floor_divide``) in ``ctype``."""
    x, y = math.reg_of(x, ctype), math.reg_of(y, ctype)
    if ctype in ("f32", "f64"):
        return _FloatDivision(math, x, y, ctype).result(op)
    return _IntDivision(math, x, y, ctype).result(op)


# The exact f64 reduction: each step leaves a quotient below 2**QUOTIENT_BITS (f32 operands:
# one whose approximation from the reciprocal is off by less than one, see reduce_f32) and
# divides it by at least that much; an f32 quotient is below 2**277 (f64's, approximated
# past 2**306, rarely): 6 steps of 40 bits and a last one.
QUOTIENT_BITS = {"f32": 40, "f64": 51}
FMOD_STEPS = {"f32": 7, "f64": 6}
# Newton steps that take rcp.approx.ftz.f64 (one SFU op, about 2**-22 relative; the steps
# would recover even 2**-14) to about f64's own precision.
RECIPROCAL_NEWTON_STEPS = 3
_F64_EXPONENT = 0x7FF0000000000000


class _FloatDivision(_Emitting):
    def __init__(self, math: ScalarMath, x: Reg, y: Reg, ctype: str) -> None:
        super().__init__(math, ctype)
        self.x, self.y = x, y

    def signs_differ(self, a: Reg, b: Reg) -> Reg:
        """``a`` is nonzero and its sign is not ``b``'s."""
        t = self.t
        a_negative, b_negative = self.pred("lt", a, 0.0), self.pred("lt", b, 0.0)
        differ = self.out(lambda p: logic.xor("pred", p, a_negative, b_negative), "pred")
        return self.out(lambda p: arith.setp("ne", t, p, a, 0.0, bool_op="and", c=differ), "pred")

    def fmod(self) -> Reg:
        t, x, y = self.t, self.x, self.y
        wide = (lambda v: v) if t == "f64" else self.widen
        r = self.out(lambda d: arith.abs_("f64", d, wide(x)), "f64")
        size = self.out(lambda d: arith.abs_("f64", d, wide(y)), "f64")
        inverse = self.reciprocal(size) if t == "f32" else None
        for _ in range(FMOD_STEPS[t]):
            r = self.reduce(r, size) if inverse is None else self.reduce_f32(r, size, inverse)
        narrow = (
            r if t == "f64" else self.out(lambda d: convert.cvt("f32", "f64", d, r, rounding="rn"))
        )
        negated = self.out(lambda d: arith.neg(t, d, narrow))
        result = self.select(self.pred("lt", x, 0.0), negated, narrow)
        x_neg_zero = self.select(self.pred("eq", x, 0.0), x, result)  # fmod(-0, y) is -0
        # fmod(x, +-inf) is x for finite x; a zero divisor, an infinite or NaN dividend, or a
        # NaN divisor give NaN.
        x_size = self.out(lambda d: arith.abs_(t, d, x))
        y_size = self.out(lambda d: arith.abs_(t, d, y))
        finite_x = self.pred("lt", x_size, float("inf"))
        result = self.select(
            self.out(
                lambda q: arith.setp("eq", t, q, y_size, float("inf"), bool_op="and", c=finite_x),
                "pred",
            ),
            x,
            x_neg_zero,
        )
        undefined = self.out(
            lambda q: arith.setp(
                "equ", t, q, y_size, 0.0, bool_op="or", c=finite_x, c_negated=True
            ),
            "pred",
        )
        return self.select(undefined, float("nan"), result)

    def widen(self, value: Reg) -> Reg:
        return self.out(lambda d: convert.cvt("f64", "f32", d, value), "f64")

    def reduce(self, r: Reg, size: Reg) -> Reg:
        """One exact step of ``r mod size`` in f64 (both >= 0) for f64 operands: by the
        multiple ``size * 2**k`` with ``r / (size * 2**k)`` below 2**52, so that the truncated
        quotient and the fma's remainder are exact; once ``r < 2**51 size``, by ``size``."""
        power = self.scale(r, size)
        divisor = self.out(lambda d: arith.mul("f64", d, size, power, rounding="rn"), "f64")
        quotient = self.out(lambda d: arith.div("f64", d, r, divisor, mode="rn"), "f64")
        rest = self.rest(r, divisor, quotient)
        # The rounded quotient is the true one or one above: a negative rest takes one back.
        back = self.out(lambda d: arith.add("f64", d, rest, divisor, rounding="rn"), "f64")
        negative = self.out(lambda p: arith.setp("lt", "f64", p, rest, 0.0), "pred")
        return self.out(lambda d: arith.selp("f64", d, back, rest, negative), "f64")

    def reduce_f32(self, r: Reg, size: Reg, inverse: Reg) -> Reg:
        """One exact step of ``r mod size`` for widened f32 operands (f64-normal or zero),
        by ``size * 2**k`` with ``k`` from the exponents, leaving a quotient below 2**41.
        The quotient ``r * inverse * 2**-k`` is within a few f64 ulps, so less than one
        from the true one: its truncation is the true one or one off either way, and the
        remainder, then moved by one divisor where it left ``[0, divisor)``, is exact (a
        multiple of the divisor's last bit below twice the divisor)."""
        k = self.biased_power(r, size)
        power = self.out(lambda d: logic.shl("b64", d, k, 52), "b64")
        power = self.out(lambda d: arith.mov("b64", d, power), "f64")
        # 2**-k: biased exponent 2046 - k, at least 787 for f32 operands (k <= 2**236).
        inverse_k = self.out(lambda d: arith.sub("s64", d, 2046, k), "b64")
        inverse_k = self.out(lambda d: logic.shl("b64", d, inverse_k, 52), "b64")
        inverse_power = self.out(lambda d: arith.mov("b64", d, inverse_k), "f64")
        divisor = self.out(lambda d: arith.mul("f64", d, size, power, rounding="rn"), "f64")
        ratio = self.out(lambda d: arith.mul("f64", d, r, inverse, rounding="rn"), "f64")
        quotient = self.out(
            lambda d: arith.mul("f64", d, ratio, inverse_power, rounding="rn"), "f64"
        )
        rest = self.rest(r, divisor, quotient)
        back = self.out(lambda d: arith.add("f64", d, rest, divisor, rounding="rn"), "f64")
        negative = self.out(lambda p: arith.setp("lt", "f64", p, rest, 0.0), "pred")
        rest = self.out(lambda d: arith.selp("f64", d, back, rest, negative), "f64")
        over = self.out(lambda d: arith.sub("f64", d, rest, divisor, rounding="rn"), "f64")
        past = self.out(lambda p: arith.setp("ge", "f64", p, rest, divisor), "pred")
        return self.out(lambda d: arith.selp("f64", d, over, rest, past), "f64")

    def rest(self, r: Reg, divisor: Reg, quotient: Reg) -> Reg:
        """``r - trunc(quotient) divisor``, rounded once (exact where it is representable)."""
        whole = self.out(lambda d: convert.cvt("f64", "f64", d, quotient, rounding="rzi"), "f64")
        minus = self.out(lambda d: arith.neg("f64", d, whole), "f64")
        return self.out(lambda d: arith.fma("f64", d, minus, divisor, r), "f64")

    def reciprocal(self, value: Reg) -> Reg:
        """``1 / value`` in f64 to about an ulp: the SFU's approximation and Newton steps
        ``x += x (1 - value x)``. A zero gives infinity and NaNs after (such results are
        replaced: the divisor is zero)."""
        x = self.out(lambda d: arith.rcp("f64", d, value, mode="approx", ftz=True), "f64")
        negated = self.out(lambda d: arith.neg("f64", d, value), "f64")
        for _ in range(RECIPROCAL_NEWTON_STEPS):
            x = self.newton_step(negated, x)
        return x

    def newton_step(self, negated: Reg, x: Reg) -> Reg:
        """``x + x (1 + negated x)``: one Newton step toward ``1 / -negated``."""
        error = self.out(lambda d: arith.fma("f64", d, negated, x, 1.0), "f64")
        return self.out(lambda d: arith.fma("f64", d, x, error, x), "f64")

    def scale(self, r: Reg, size: Reg) -> Reg:
        """``2**k``, the power of two at most ``r / size / 2**51`` (at least 1), from the
        quotient itself: right for f64 operands, denormal ones included."""
        ratio = self.out(lambda d: arith.div("f64", d, r, size, mode="rn"), "f64")
        scaled = self.out(
            lambda d: arith.mul("f64", d, ratio, 2.0 ** -QUOTIENT_BITS["f64"], rounding="rn"), "f64"
        )
        bits = self.out(lambda d: arith.mov("b64", d, scaled), "b64")
        exponent = self.out(lambda d: logic.and_("b64", d, bits, _F64_EXPONENT), "b64")
        power = self.out(lambda d: arith.mov("b64", d, exponent), "f64")
        return self.out(lambda d: arith.max_("f64", d, power, 1.0), "f64")

    def biased_power(self, r: Reg, size: Reg) -> Reg:
        """The biased f64 exponent (as b64) of ``2**k``, ``k = max(exponent(r) -
        exponent(size) - 40, 0)``, from the f64 bits: ``r / (size 2**k)`` is below 2**41. It
        holds for widened f32 operands: they and every rest are f64-normal or zero. A zero
        divisor or an infinite ``r`` clamp the power at 2**1023; their results are NaN."""
        r_exponent, size_exponent = self.biased_exponent(r), self.biased_exponent(size)
        k = self.out(lambda d: arith.sub("s64", d, r_exponent, size_exponent), "b64")
        k = self.out(lambda d: arith.add("s64", d, k, 1023 - QUOTIENT_BITS["f32"]), "b64")
        k = self.out(lambda d: arith.max_("s64", d, k, 1023), "b64")
        return self.out(lambda d: arith.min_("s64", d, k, 2046), "b64")

    def biased_exponent(self, value: Reg) -> Reg:
        """The exponent field of a non-negative f64."""
        bits = self.out(lambda d: arith.mov("b64", d, value), "b64")
        return self.out(lambda d: logic.shr("u64", d, bits, 52), "b64")

    def remainder(self) -> Reg:
        t, y = self.t, self.y
        r = self.fmod()
        moved = self.out(lambda d: arith.add(t, d, r, y, rounding="rn"))
        # A zero keeps the dividend's sign, as torch's does (NumPy's takes the divisor's).
        return self.select(self.signs_differ(r, y), moved, r)

    def floor_divide(self) -> Reg:
        t, x, y = self.t, self.x, self.y
        mod = self.fmod()
        exact = self.out(lambda d: arith.sub(t, d, x, mod, rounding="rn"))
        div = self.out(lambda d: arith.div(t, d, exact, y, mode="rn"))
        lower = self.out(lambda d: arith.sub(t, d, div, 1.0, rounding="rn"))
        div = self.select(self.signs_differ(mod, y), lower, div)
        floor = self.out(lambda d: convert.cvt(t, t, d, div, rounding="rmi"))
        fraction = self.out(lambda d: arith.sub(t, d, div, floor, rounding="rn"))
        up = self.out(lambda d: arith.add(t, d, floor, 1.0, rounding="rn"))
        floor = self.select(self.pred("gt", fraction, 0.5), up, floor)
        quotient = self.out(lambda d: arith.div(t, d, x, y, mode="rn"))
        # A zero quotient keeps the sign of x / y; a zero divisor gives x / y (inf or NaN).
        signed_zero = self.out(lambda d: arith.mul(t, d, quotient, 0.0, rounding="rn"))
        floor = self.select(self.pred("eq", div, 0.0), signed_zero, floor)
        # A zero divisor gives x / y (inf or NaN); so does a finite x whose quotient passes the
        # largest float (a tiny y, whose fmod is no longer exact): NumPy's floor of the
        # infinite (x - fmod) / y. An infinite x stays NaN (its fmod is NaN).
        magnitude = self.out(lambda d: arith.abs_(t, d, quotient))
        x_magnitude = self.out(lambda d: arith.abs_(t, d, x))
        overflow = self.pred("eq", magnitude, float("inf"))
        finite_x = self.pred("lt", x_magnitude, float("inf"))
        overflow = self.out(lambda p: logic.and_("pred", p, overflow, finite_x), "pred")
        floor = self.select(overflow, quotient, floor)
        return self.select(self.pred("eq", y, 0.0), quotient, floor)

    def result(self, op: str) -> Reg:
        if op == "fmod":
            return self.fmod()
        return self.remainder() if op == "remainder" else self.floor_divide()


class _IntDivision(_Emitting):
    def __init__(self, math: ScalarMath, x: Reg, y: Reg, ctype: str) -> None:
        super().__init__(math, ctype)
        self.x, self.y = x, y
        t = ctype
        self.zero, self.minus_one = self.pred("eq", y, 0), self.pred("eq", y, -1)
        zero, minus_one = self.zero, self.minus_one
        special = self.out(lambda p: logic.or_("pred", p, zero, minus_one), "pred")
        # Divide by 1 where the hardware's answer is unspecified (0, and MIN / -1); the
        # results are fixed after.
        safe = self.select(special, 1, y)
        self.q = self.out(lambda d: arith.div(t, d, x, safe))
        self.r = r = self.out(lambda d: arith.rem(t, d, x, safe))
        sign = self.out(lambda d: logic.xor("b" + t[1:], d, r, y))
        negative = self.pred("lt", sign, 0)
        # The truncating quotient is one above the floor where r is nonzero of y's other sign.
        self.floor_step = self.out(
            lambda p: arith.setp("ne", t, p, r, 0, bool_op="and", c=negative), "pred"
        )

    def result(self, op: str) -> Reg:
        t, x, y, q, r = self.t, self.x, self.y, self.q, self.r
        if op == "floor_divide":
            value = self.select(self.floor_step, self.out(lambda d: arith.sub(t, d, q, 1)), q)
            negated = self.out(lambda d: arith.neg(t, d, x))  # MIN // -1 wraps to MIN
            value = self.select(self.minus_one, negated, value)
        elif op == "remainder":
            value = self.select(self.floor_step, self.out(lambda d: arith.add(t, d, r, y)), r)
        else:
            value = r
        return self.select(self.zero, 0, value)
