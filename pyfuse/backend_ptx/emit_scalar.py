"""PTX emission of scalar math: :class:`ScalarMath` turns the ops of
:mod:`pyfuse.backend_ptx.emit_math` (its dtype tables, folding rules and f32 expansions) into
instructions on registers, folding what is constant."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pyfuse.backend_ptx import emit_math64
from pyfuse.backend_ptx.emit_divide import divide
from pyfuse.backend_ptx.emit_math import (
    _ALIASES,
    _CLASS,
    BOOL_AND_OPS,
    BOOL_OR_OPS,
    FloatOps,
    Value,
    _identity,
    compute_type,
    cos,
    erf,
    exp,
    fold_binary,
    fold_cast,
    fold_unary,
    gelu,
    gelu_tanh,
    gelu_tanh_16,
    half_bits,
    is_half,
    log,
    pow_,
    round_to,
    sigmoid,
    sigmoid_16,
    silu,
    silu_16,
    sin,
    storage_class,
    storage_type,
    tanh,
)
from pyfuse.backend_ptx.emitter import KernelBuilder
from pyfuse.backend_ptx.instructions import arith, control, convert, logic
from pyfuse.backend_ptx.operands import Instr, Operand, Reg, RegClass
from pyfuse.errors import ScheduleError
from pyfuse.ir.dtypes import DType

# The instruction of each bool combining op (see emit_math.BOOL_AND_OPS / BOOL_OR_OPS).
_BOOL_COMBINE = {op: logic.and_ for op in BOOL_AND_OPS} | {op: logic.or_ for op in BOOL_OR_OPS}

# Cheaper forms for ops whose result is rounded to bf16/f16: the f32 expansions' last bits of
# accuracy cost about half their instructions and vanish in that rounding.
_F16_EXPANSIONS: dict[str, Callable[[FloatOps[Value, Reg], Value], Value]] = {
    "sigmoid": sigmoid_16, "silu": silu_16, "gelu_tanh": gelu_tanh_16,
}  # fmt: skip


# Float ops written with an explicit .rn, so that ptxas never contracts them into an fma.
_ROUNDED_FLOAT_OPS: dict[str, Callable[..., Instr]] = {
    "add": arith.add, "sub": arith.sub, "mul": arith.mul,
}  # fmt: skip


_F32_EXPANSIONS: dict[str, Callable[[FloatOps[Value, Reg], Value], Value]] = {
    "exp": exp, "log": log, "tanh": tanh, "sigmoid": sigmoid, "silu": silu, "gelu": gelu,
    "gelu_tanh": gelu_tanh, "sin": sin, "cos": cos, "erf": erf,
}  # fmt: skip
# The cvt rounding of each rounding op (to an integral value in the same float type).
_ROUNDING = {"floor": "rmi", "ceil": "rpi", "round": "rni", "trunc": "rzi"}
# The bit-logic instruction of each integer bitwise op (on the .b form of the register type).
_BITWISE = {"bitwise_and": logic.and_, "bitwise_or": logic.or_, "bitwise_xor": logic.xor}
# torch's division-like ops (fmod, remainder, floor_divide): their PTX lives in emit_divide.
_DIVISION_OPS = frozenset({"fmod", "remainder", "floor_divide"})


# ---- PTX emission -----------------------------------------------------------------------------


class _PtxFloat:
    """:class:`FloatOps` over registers of one float type (``f32`` or ``f64``); constants are
    immediates rounded to it. The approximate instructions (ex2, lg2, sin, cos) are f32's."""

    def __init__(self, scalar: ScalarMath, ptype: str = "f32") -> None:
        self.scalar, self.t = scalar, ptype
        self._cls = RegClass.F32 if ptype == "f32" else RegClass.F64

    def _out(self, instr: Callable[[Reg], Instr], cls: RegClass | None = None) -> Reg:
        d = self.scalar.kb.reg(cls or self._cls)
        self.scalar.kb.emit(instr(d))
        return d

    def _reg(self, a: Value) -> Reg:
        return self.scalar.reg_of(a, self.t)

    def const(self, value: float) -> Value:
        return float(np.float32(value)) if self.t == "f32" else float(value)

    def add(self, a: Value, b: Value) -> Value:
        return self._out(lambda d: arith.add(self.t, d, a, b, rounding="rn"))

    def sub(self, a: Value, b: Value) -> Value:
        return self._out(lambda d: arith.sub(self.t, d, a, b, rounding="rn"))

    def mul(self, a: Value, b: Value) -> Value:
        return self._out(lambda d: arith.mul(self.t, d, a, b, rounding="rn"))

    def fma(self, a: Value, b: Value, c: Value) -> Value:
        return self._out(lambda d: arith.fma(self.t, d, a, b, c))

    def div(self, a: Value, b: Value) -> Value:
        return self._out(lambda d: arith.div(self.t, d, a, b, mode="rn"))

    def rcp(self, a: Value) -> Value:
        return self._out(lambda d: arith.rcp(self.t, d, a, mode="rn"))

    def rcp_approx(self, a: Value) -> Value:
        return self._out(lambda d: arith.rcp(self.t, d, a, mode="approx", ftz=True))

    def neg(self, a: Value) -> Value:
        return self._out(lambda d: arith.neg(self.t, d, a))

    def abs(self, a: Value) -> Value:
        return self._out(lambda d: arith.abs_(self.t, d, a))

    def max_nan(self, a: Value, b: Value) -> Value:
        return self.scalar.combine("maximum", a, b, self.t)

    def min_nan(self, a: Value, b: Value) -> Value:
        return self.scalar.combine("minimum", a, b, self.t)

    def ex2(self, a: Value) -> Value:
        source = self._reg(a)
        return self._out(lambda d: arith.ex2("f32", d, source, ftz=True))

    def lg2(self, a: Value) -> Value:
        source = self._reg(a)
        return self._out(lambda d: arith.lg2("f32", d, source))

    def _rounded(self, a: Value, mode: str) -> Value:
        source = self._reg(a)
        return self._out(lambda d: convert.cvt(self.t, self.t, d, source, rounding=mode))

    def rint(self, a: Value) -> Value:
        return self._rounded(a, "rni")

    def floor(self, a: Value) -> Value:
        return self._rounded(a, "rmi")

    def less(self, a: Value, b: Value) -> Reg:
        return self._out(lambda p: arith.setp("lt", self.t, p, a, b), RegClass.PRED)

    def equal(self, a: Value, b: Value) -> Reg:
        return self._out(lambda p: arith.setp("eq", self.t, p, a, b), RegClass.PRED)

    def both(self, p: Reg, q: Reg) -> Reg:
        return self._out(lambda d: logic.and_("pred", d, p, q), RegClass.PRED)

    def negate(self, p: Reg) -> Reg:
        return self._out(lambda d: logic.not_("pred", d, p), RegClass.PRED)

    def select(self, p: Reg, a: Value, b: Value) -> Value:
        return self._out(lambda d: arith.selp(self.t, d, a, b, p))

    def when(
        self, p: Reg, compute: Callable[[], tuple[Value, ...]], otherwise: tuple[Value, ...]
    ) -> tuple[Value, ...]:
        """``compute()`` on the threads where ``p`` holds (a branch around it), else
        ``otherwise``: for a rare path too long to run on every thread."""
        results = tuple(self.scalar.kb.reg(self._cls) for _ in otherwise)
        for register, value in zip(results, otherwise, strict=True):
            self.scalar.kb.emit(arith.mov(self.t, register, value))
        skip = self.scalar.kb.new_label("rare")
        self.scalar.kb.emit(control.bra(skip).guarded(p, negate=True))
        for register, value in zip(results, compute(), strict=True):
            self.scalar.kb.emit(arith.mov(self.t, register, value))
        self.scalar.kb.place(skip)
        return results

    def scale(self, a: Value, n: Value) -> Value:
        """``a * 2**n`` (f64; n integral, clamped to +-2000), as two exact powers of two so
        that a result in the subnormal range rounds there once more at most."""
        kb = self.scalar.kb
        count = kb.reg(RegClass.B32)
        kb.emit(convert.cvt("s32", "f64", count, self._reg(n), rounding="rni"))
        kb.emit(arith.min_("s32", count, count, 2000), arith.max_("s32", count, count, -2000))
        first = kb.reg(RegClass.B32)
        kb.emit(logic.shr("s32", first, count, 1))
        second = kb.reg(RegClass.B32)
        kb.emit(arith.sub("s32", second, count, first))
        result = a
        for part in (first, second):
            wide = kb.reg(RegClass.B64)
            kb.emit(
                convert.cvt("s64", "s32", wide, part), arith.add("s64", wide, wide, 1023),
                logic.shl("b64", wide, wide, 52),
            )  # fmt: skip
            power = kb.reg(RegClass.F64)
            kb.emit(arith.mov("b64", power, wide))
            result = self.mul(result, power)
        return result

    def exponent_split(self, a: Value) -> tuple[Value, Value]:
        """``(m, e)`` with ``a = m 2**e`` and ``m`` in [1, 2) for a positive normal f64."""
        kb = self.scalar.kb
        bits = kb.reg(RegClass.B64)
        kb.emit(arith.mov("b64", bits, self._reg(a)))
        field = kb.reg(RegClass.B64)
        kb.emit(logic.shr("u64", field, bits, 52), logic.and_("b64", field, field, 0x7FF))
        exponent = kb.reg(RegClass.F64)
        kb.emit(convert.cvt("f64", "s64", exponent, field, rounding="rn"))
        mantissa_bits = kb.reg(RegClass.B64)
        kb.emit(
            logic.and_("b64", mantissa_bits, bits, 0x000FFFFFFFFFFFFF),
            logic.or_("b64", mantissa_bits, mantissa_bits, 0x3FF0000000000000),
        )  # fmt: skip
        mantissa = kb.reg(RegClass.F64)
        kb.emit(arith.mov("b64", mantissa, mantissa_bits))
        return mantissa, self.sub(exponent, 1023.0)

    def widened(self) -> _PtxFloat:
        return _PtxFloat(self.scalar, "f64")

    def widen(self, a: Value) -> Value:
        source = self._reg(a)
        return self._out(lambda d: convert.cvt("f64", "f32", d, source), RegClass.F64)

    def narrow(self, a: Value) -> Value:
        source = self.scalar.reg_of(a, "f64")
        return self._out(lambda d: convert.cvt("f32", "f64", d, source, rounding="rn"))


class ScalarMath:
    """Emits scalar operations on storage-form values into one kernel."""

    def __init__(self, kb: KernelBuilder) -> None:
        self.kb = kb
        self.f32 = _PtxFloat(self)
        self.f64 = _PtxFloat(self, "f64")

    def new(self, ptype: str) -> Reg:
        return self.kb.reg(_CLASS[ptype])

    def _out(self, ptype: str, instr: Callable[[Reg], Instr]) -> Reg:
        d = self.new(ptype)
        self.kb.emit(instr(d))
        return d

    # ---- storage ---------------------------------------------------------------------------

    def reg_of(self, value: Value, ptype: str) -> Reg:
        """``value`` in a register of PTX type ``ptype`` (an immediate is moved in)."""
        if isinstance(value, Reg):
            return value
        if ptype == "pred":
            return self._out("pred", lambda d: arith.mov("pred", d, int(bool(value))))
        return self._out(ptype, lambda d: arith.mov(ptype, d, value))

    def encoded(self, value: Value, dtype: DType) -> Operand:
        """An operand of the storage type: 16-bit float immediates become their bits."""
        if isinstance(value, Reg):
            return value
        if is_half(dtype):
            return half_bits(float(value), dtype)
        return int(value) if dtype.is_integer or dtype.is_bool else value

    def materialize(self, value: Value, dtype: DType) -> Reg:
        if isinstance(value, Reg):
            return value
        reg = self.kb.reg(storage_class(dtype))
        self.move(reg, value, dtype)
        return reg

    def move(self, dst: Reg, value: Value, dtype: DType) -> None:
        self.kb.emit(arith.mov(storage_type(dtype), dst, self.encoded(value, dtype)))

    def to_compute(self, value: Value, dtype: DType) -> Value:
        if is_half(dtype) and isinstance(value, Reg):
            source = value
            return self._out("f32", lambda d: convert.cvt("f32", dtype.ptx, d, source))
        return value

    def from_compute(self, value: Value, dtype: DType) -> Value:
        if dtype.is_narrow_integer:
            if not isinstance(value, Reg):
                return round_to(int(value), dtype)
            # Wrapped to the type's width, sign- or zero-extended again (cvt without .sat).
            wide = value
            return self._out("s32", lambda d: convert.cvt(dtype.ptx, "s32", d, wide))
        if not is_half(dtype):
            return value
        if not isinstance(value, Reg):
            return round_to(float(value), dtype)
        source = value
        return self._out("b16", lambda d: convert.cvt(dtype.ptx, "f32", d, source, rounding="rn"))

    # ---- operations ------------------------------------------------------------------------

    def unary(self, op: str, value: Value, dtype: DType) -> Value:
        """``op(value)`` for a value of ``dtype`` (bool for logical_not); same dtype out."""
        if not isinstance(value, Reg):
            folded = fold_unary(op, value, dtype)
            if folded is not None:
                return folded
            value = self.materialize(value, dtype)
        ctype = compute_type(dtype)
        x = self.to_compute(value, dtype)
        if op == "logical_not" and ctype == "pred":
            return self._out("pred", lambda d: logic.not_("pred", d, x))
        if is_half(dtype) and op in _F16_EXPANSIONS:
            return self.from_compute(_F16_EXPANSIONS[op](self.f32, x), dtype)
        if ctype == "f32" and op in _F32_EXPANSIONS:
            return self.from_compute(_F32_EXPANSIONS[op](self.f32, x), dtype)
        if ctype == "f64" and op in emit_math64.EXPANSIONS:
            return emit_math64.EXPANSIONS[op](self.f64, self.reg_of(x, "f64"))
        result = self._simple_unary(op, x, ctype)
        if result is None:
            raise ScheduleError(f"the PTX emitter has no {op} for {dtype.name}; cast to float32")
        return self.from_compute(result, dtype)

    def _simple_unary(self, op: str, x: Value, ctype: str) -> Value | None:
        floating = ctype in ("f32", "f64")
        if op == "neg" and ctype in ("f32", "f64"):
            return self._out(ctype, lambda d: arith.neg(ctype, d, x))
        if op == "neg" and ctype != "pred":
            return self._int_negate(x, ctype)
        if op == "abs" and ctype != "pred":
            return self._out(ctype, lambda d: arith.abs_(ctype, d, x))
        if op == "relu" and ctype != "pred":
            return self.combine("maximum", x, 0.0 if floating else 0, ctype)
        if not floating:
            if op == "bitwise_not":
                return self._out(ctype, lambda d: logic.not_("b" + ctype[1:], d, x))
            return None
        if op in _ROUNDING:
            source = self.reg_of(x, ctype)
            mode = _ROUNDING[op]
            return self._out(ctype, lambda d: convert.cvt(ctype, ctype, d, source, rounding=mode))
        if op == "sqrt":
            return self._out(ctype, lambda d: arith.sqrt(ctype, d, x, mode="rn"))
        if op == "reciprocal":
            return self._out(ctype, lambda d: arith.rcp(ctype, d, x, mode="rn"))
        if op == "rsqrt" and ctype == "f32":
            return self._out(ctype, lambda d: arith.rsqrt(ctype, d, x))
        if op == "rsqrt":
            root = self._out(ctype, lambda d: arith.sqrt(ctype, d, x, mode="rn"))
            return self._out(ctype, lambda d: arith.div(ctype, d, 1.0, root, mode="rn"))
        return None

    def binary(self, op: str, a: Value, b: Value, dtype: DType) -> Value:
        """``a op b`` (arithmetic or logical) for operands and a result of ``dtype``."""
        op = _ALIASES.get(op, op)
        if not isinstance(a, Reg) and not isinstance(b, Reg):
            folded = fold_binary(op, a, b, dtype)
            if folded is not None:
                return folded
            a = self.materialize(a, dtype)
        simplified = _identity(op, a, b, dtype)
        if simplified is not None:
            return simplified
        ctype = compute_type(dtype)
        x, y = self.to_compute(a, dtype), self.to_compute(b, dtype)
        if op == "pow" and dtype.is_floating:
            return self.from_compute(self._float_pow(x, y, ctype, dtype), dtype)
        return self.from_compute(self.combine(op, x, y, ctype), dtype)

    def combine(self, op: str, x: Value, y: Value, ctype: str) -> Value:
        """A binary op on compute-type values (also the combine step of reductions)."""
        op = _ALIASES.get(op, op)
        if ctype == "pred":
            if op not in _BOOL_COMBINE:
                raise ScheduleError(f"the PTX emitter has no {op} for bool")
            px, py, bool_op = self.reg_of(x, "pred"), self.reg_of(y, "pred"), _BOOL_COMBINE[op]
            return self._out("pred", lambda d: bool_op("pred", d, px, py))
        if op in _DIVISION_OPS:
            return divide(self, op, x, y, ctype)
        if ctype in ("f32", "f64"):
            return self._float_binary(op, x, y, ctype)
        return self._int_binary(op, x, y, ctype)

    def _float_binary(self, op: str, x: Value, y: Value, ctype: str) -> Value:
        rounded = _ROUNDED_FLOAT_OPS.get(op)
        if rounded is not None:
            return self._out(ctype, lambda d: rounded(ctype, d, x, y, rounding="rn"))
        if op == "div":
            return self._out(ctype, lambda d: arith.div(ctype, d, x, y, mode="rn"))
        if op in ("maximum", "minimum"):
            pick = arith.max_ if op == "maximum" else arith.min_
            if ctype == "f32":
                return self._out(ctype, lambda d: pick(ctype, d, x, y, nan=True))
            # f64 has no .NaN form: a NaN operand makes x + y NaN, which replaces the result.
            plain = self._out(ctype, lambda d: pick(ctype, d, x, y))
            nan = self._out("pred", lambda p: arith.setp("nan", ctype, p, x, y))
            total = self._out(ctype, lambda d: arith.add(ctype, d, x, y, rounding="rn"))
            return self._out(ctype, lambda d: arith.selp(ctype, d, total, plain, nan))
        raise ScheduleError(f"the PTX emitter has no {op} for {ctype}")

    def _int_negate(self, x: Value, ctype: str) -> Value:
        """``-x`` for an integer as ``~x + 1`` (the same two's-complement wrap).

        ptxas (CUDA 13, and the 580 driver's JIT) miscompiles integer negations that feed a
        chain of integer max or min at -O1 and up: it folds them into 3-input VIMNMX3 and
        drops one of the negations (``max(-v)`` over rows of 128 int32 was wrong in a third of
        the rows on the H200; -O0 was right). ``neg.s32``, ``sub.s32 d, 0, x`` and
        ``mul.lo.s32 d, x, -1`` all fail; the not-then-add form does not reach that fold."""
        flipped = self._out(ctype, lambda d: logic.not_("b" + ctype[1:], d, x))
        return self._out(ctype, lambda d: arith.add(ctype, d, flipped, 1))

    def _int_binary(self, op: str, x: Value, y: Value, ctype: str) -> Value:
        if op == "sub" and isinstance(x, int) and x == 0:
            return self._int_negate(y, ctype)
        if op == "mul" and isinstance(y, int) and y == -1:
            return self._int_negate(x, ctype)
        if op == "mul" and isinstance(x, int) and x == -1:
            return self._int_negate(y, ctype)
        if op in ("add", "sub"):
            add_like = arith.add if op == "add" else arith.sub
            return self._out(ctype, lambda d: add_like(ctype, d, x, y))
        if op == "mul":
            return self._out(ctype, lambda d: arith.mul(ctype, d, x, y))
        if op in ("maximum", "minimum"):
            pick = arith.max_ if op == "maximum" else arith.min_
            return self._out(ctype, lambda d: pick(ctype, d, x, y))
        if op in ("floordiv", "mod"):
            # Index operands are non-negative, where unsigned division is C division.
            unsigned = "u" + ctype[1:]
            divide = arith.div if op == "floordiv" else arith.rem
            return self._out(ctype, lambda d: divide(unsigned, d, x, y))
        if op == "div":
            return self._out(ctype, lambda d: arith.div(ctype, d, x, y))
        if op == "pow":
            return self._int_pow(x, y, ctype)
        if op in _BITWISE:
            logic_op = _BITWISE[op]
            return self._out(ctype, lambda d: logic_op("b" + ctype[1:], d, x, y))
        raise ScheduleError(f"the PTX emitter has no {op} for {ctype}")

    def _float_pow(self, x: Value, y: Value, ctype: str, dtype: DType) -> Value:
        if not isinstance(y, Reg) and float(y) in (0.0, 1.0, 2.0, -1.0, 0.5):
            exponent = float(y)
            if exponent == 0.5:
                # torch (and NumPy) take x ** 0.5 as sqrt: NaN for -inf and -0 for -0, where
                # C's pow gives +inf and +0 (CPU fuzzer, seed 379); correctly rounded too.
                return self._out(ctype, lambda d: arith.sqrt(ctype, d, x, mode="rn"))
            if exponent == 0.0:
                return 1.0
            if exponent == 1.0:
                return x
            if exponent == 2.0:
                return self.combine("mul", x, x, ctype)
            return self._out(ctype, lambda d: arith.rcp(ctype, d, x, mode="rn"))
        if ctype == "f64":
            return emit_math64.pow_(self.f64, self.reg_of(x, "f64"), self.reg_of(y, "f64"))
        return pow_(self.f32, self.reg_of(x, "f32"), self.reg_of(y, "f32"))

    def _int_pow(self, x: Value, y: Value, ctype: str) -> Value:
        """Square and multiply: unrolled for a constant exponent, a loop over its bits else."""
        if not isinstance(y, Reg):
            exponent = int(y)
            if exponent < 0:
                raise ScheduleError(f"integer pow with the negative exponent {exponent}")
            result: Value = 1
            base = x
            while exponent:
                if exponent & 1:
                    result = base if result == 1 else self.combine("mul", result, base, ctype)
                exponent >>= 1
                if exponent:
                    base = self.combine("mul", base, base, ctype)
            return result
        bits = ctype[1:]
        result_reg, base_reg, rest = self.new(ctype), self.new(ctype), self.new(ctype)
        self.kb.emit(
            arith.mov(ctype, result_reg, 1), arith.mov(ctype, base_reg, x),
            arith.mov(ctype, rest, y),
        )  # fmt: skip
        negative = None
        if ctype.startswith("s"):
            # A negative exponent skips the loop; its result is set after it, as torch's.
            negative = self._out("pred", lambda p: arith.setp("lt", ctype, p, y, 0))
            self.kb.emit(arith.mov(ctype, rest, 0).guarded(negative))
        top, done = self.kb.new_label("pow"), self.kb.new_label("pow_done")
        self.kb.place(top)
        finished = self._out("pred", lambda p: arith.setp("eq", ctype, p, rest, 0))
        self.kb.emit(control.bra(done).guarded(finished))
        low_bit = self._out(ctype, lambda d: logic.and_("b" + bits, d, rest, 1))
        odd = self._out("pred", lambda p: arith.setp("ne", ctype, p, low_bit, 0))
        self.kb.emit(
            arith.mul(ctype, result_reg, result_reg, base_reg).guarded(odd),
            arith.mul(ctype, base_reg, base_reg, base_reg),
            logic.shr("u" + bits, rest, rest, 1),
            control.bra(top),
        )  # fmt: skip
        self.kb.place(done)
        if negative is not None:
            # torch: 0, but 1 for a base of 1 and -1 or 1 (by the exponent's parity) for -1.
            odd_bit = self._out(ctype, lambda d: logic.and_("b" + bits, d, y, 1))
            odd = self._out("pred", lambda p: arith.setp("ne", ctype, p, odd_bit, 0))
            of_minus_one = self._out(ctype, lambda d: arith.selp(ctype, d, -1, 1, odd))
            one = self._out("pred", lambda p: arith.setp("eq", ctype, p, x, 1))
            minus_one = self._out("pred", lambda p: arith.setp("eq", ctype, p, x, -1))
            of_one = self._out(ctype, lambda d: arith.selp(ctype, d, 1, 0, one))
            special = self._out(
                ctype, lambda d: arith.selp(ctype, d, of_minus_one, of_one, minus_one)
            )
            self.kb.emit(arith.mov(ctype, result_reg, special).guarded(negative))
        return result_reg

    def compare(self, op: str, a: Value, b: Value, dtype: DType) -> Value:
        """``a op b`` for operands of ``dtype``: a predicate (NaN compares unequal)."""
        if not isinstance(a, Reg) and not isinstance(b, Reg):
            folded = fold_binary(op, a, b, dtype)
            assert folded is not None
            return folded
        ctype = compute_type(dtype)
        x, y = self.to_compute(a, dtype), self.to_compute(b, dtype)
        if ctype != "pred":
            cmp = "neu" if op == "ne" and ctype in ("f32", "f64") else op
            return self._out("pred", lambda p: arith.setp(cmp, ctype, p, x, y))
        px, py = self.reg_of(x, "pred"), self.reg_of(y, "pred")
        differ = self._out("pred", lambda p: logic.xor("pred", p, px, py))
        if op == "ne":
            return differ
        if op == "eq":
            return self._out("pred", lambda p: logic.not_("pred", p, differ))
        # On bools as 0/1: x < y is !x & y; x > y is x & !y; <= and >= add equality.
        strict = self._out(
            "pred", lambda p: logic.and_("pred", p, differ, py if op in ("lt", "le") else px)
        )
        if op in ("lt", "gt"):
            return strict
        equal = self._out("pred", lambda p: logic.not_("pred", p, differ))
        return self._out("pred", lambda p: logic.or_("pred", p, strict, equal))

    def select(self, condition: Value, a: Value, b: Value, dtype: DType) -> Value:
        if not isinstance(condition, Reg):
            return a if condition else b
        if dtype.is_bool:
            pa, pb = self.reg_of(a, "pred"), self.reg_of(b, "pred")
            other = self._out("pred", lambda p: logic.not_("pred", p, condition))
            first = self._out("pred", lambda p: logic.and_("pred", p, condition, pa))
            second = self._out("pred", lambda p: logic.and_("pred", p, other, pb))
            return self._out("pred", lambda p: logic.or_("pred", p, first, second))
        ea, eb, ptype = self.encoded(a, dtype), self.encoded(b, dtype), storage_type(dtype)
        return self._out(ptype, lambda d: arith.selp(ptype, d, ea, eb, condition))

    def cast(self, value: Value, source: DType, target: DType) -> Value:
        """The interpreter's Cast: float to int truncates (cvt.rzi, saturating, NaN to 0)."""
        if source is target:  # dtypes are singletons; == would compare every field
            return value
        if not isinstance(value, Reg):
            return fold_cast(value, target)
        if target.is_bool:
            return self.compare("ne", value, round_to(0, source), source)
        if source.is_bool:
            one, zero = round_to(1, target), round_to(0, target)
            return self.select(value, one, zero, target)
        x = self.to_compute(value, source)
        src, dst = compute_type(source), compute_type(target)
        assert isinstance(x, Reg)
        if source.is_floating and target.is_floating:
            if src != dst:
                narrowing = "rn" if dst == "f32" else None
                source_reg = x
                x = self._out(
                    dst, lambda d: convert.cvt(dst, src, d, source_reg, rounding=narrowing)
                )
            return self.from_compute(x, target)
        rounding = "rzi" if source.is_floating else "rn" if target.is_floating else None
        # Saturating to a narrow type's own range, as the interpreter's cast does.
        saturated = source.is_floating and target.is_narrow_integer
        if saturated:
            narrow = target.ptx
            result = self._out(dst, lambda d: convert.cvt(narrow, src, d, x, rounding="rzi"))
        else:
            result = self._out(dst, lambda d: convert.cvt(dst, src, d, x, rounding=rounding))
        if src == "f64" and target.is_integer:
            # cvt.rzi from f64 gives the most negative integer for NaN on the H200, not 0 (GPU
            # fuzzer, seed 461); f32 sources give 0.
            nan = self._out("pred", lambda p: arith.setp("nan", "f64", p, x, x))
            result = self._out(dst, lambda d: arith.selp(dst, d, 0, result, nan))
        return result if saturated else self.from_compute(result, target)
