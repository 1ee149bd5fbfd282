"""torch's division-like ops in PTX: ``fmod``, ``remainder`` and ``floor_divide``.

Expects compute-type operands (f32, f64, or 32/64-bit integers) from
:class:`~pyfuse.backend_ptx.emit_scalar.ScalarMath`. Guarantees the results of NumPy's
``fmod``, ``remainder`` and ``floor_divide`` (which the reference interpreter computes), which
are torch's:

- floats: ``fmod(x, y) = x - trunc(x / y) y`` with the sign of ``x``, from one fma (exact: the
  true remainder is representable) and a correction where ``x / y`` rounded onto the next
  integer; exact while ``|x / y| < 2**24``, an approximation past that. ``fmod(x, 0)`` and
  ``fmod(inf, y)`` are NaN, ``fmod(x, inf) = x``. ``remainder`` moves a nonzero ``fmod`` of
  the other sign than ``y`` by ``y``; ``floor_divide`` is ``(x - fmod(x, y)) / y`` made
  integral (NumPy's ``npy_divmod``), ``x / y`` where ``y == 0``.
- integers: ``div``/``rem`` (C's truncating ones) moved toward negative infinity where the
  signs differ; a divisor of 0 gives 0 (NumPy's rule: the hardware's result is unspecified,
  and a kernel cannot raise), and ``MIN // -1`` wraps to ``MIN``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pyfuse.backend_ptx.emit_math import Value
from pyfuse.backend_ptx.instructions import arith, convert, logic
from pyfuse.backend_ptx.operands import Instr, Reg

if TYPE_CHECKING:
    from pyfuse.backend_ptx.emit_scalar import ScalarMath


class _Emitting:
    """Values of one PTX type emitted into ``math``'s kernel."""

    def __init__(self, math: ScalarMath, ctype: str) -> None:
        self.math, self.t = math, ctype

    def out(self, make: Callable[[Reg], Instr], ptype: str | None = None) -> Reg:
        register = self.math.new(ptype or self.t)
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
        quotient = self.out(lambda d: arith.div(t, d, x, y, mode="rn"))
        whole = self.out(lambda d: convert.cvt(t, t, d, quotient, rounding="rzi"))
        minus = self.out(lambda d: arith.neg(t, d, whole))
        r = self.out(lambda d: arith.fma(t, d, minus, y, x))
        # x / y rounded up onto the next integer leaves r of the other sign than x (one step
        # back by |y|); rounded down, it leaves |r| >= |y| (one step on).
        size = self.out(lambda d: arith.abs_(t, d, y))
        minus_size = self.out(lambda d: arith.neg(t, d, size))
        x_negative = self.pred("lt", x, 0.0)
        toward_x = self.select(x_negative, minus_size, size)
        stepped = self.out(lambda d: arith.add(t, d, r, toward_x, rounding="rn"))
        r = self.select(self.signs_differ(r, x), stepped, r)
        magnitude = self.out(lambda d: arith.abs_(t, d, r))
        too_far = self.pred("ge", magnitude, size)
        back = self.out(lambda d: arith.sub(t, d, r, toward_x, rounding="rn"))
        r = self.select(too_far, back, r)
        # fmod(x, +-inf) is x for finite x (the fma made 0 * inf = NaN).
        infinite = self.pred("eq", size, float("inf"))
        return self.select(infinite, x, r)

    def remainder(self) -> Reg:
        t, y = self.t, self.y
        r = self.fmod()
        moved = self.out(lambda d: arith.add(t, d, r, y, rounding="rn"))
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
