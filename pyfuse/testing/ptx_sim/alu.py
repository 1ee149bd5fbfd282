"""Per-thread PTX instructions on lanes: moves, integer and float arithmetic, comparisons,
conversions and the special-function unit.

Expects an :class:`Operands` view of the active lanes of one thread group. Guarantees, for the
instructions :func:`execute` accepts (it returns False for any other, which the machine then
handles or refuses): integer results wrap at their type's width; ``.rn`` float results are
the exact result rounded once to the type (float64 math rounded to f32/f16/bf16; ``fma`` from
the exact product, :func:`_fused`); ``.approx`` instructions are the exact function rounded
(``ex2``, ``lg2``, ``rcp``, ``rsqrt``, ``sin``, ``cos``, ``tanh``), their inputs and results
flushed with ``.ftz``; ``min``/``max`` return the other operand for one NaN (``.NaN``: NaN);
``cvt`` to an integer saturates, NaN giving 0; ``div``/``rem`` by zero give -1 (unsigned all
ones) and the dividend, as the GPU does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Protocol

import numpy as np

from pyfuse.testing.ptx_sim.parse import Instr, Operand
from pyfuse.testing.ptx_sim.tensor_core import NotModeledError
from pyfuse.testing.ptx_sim.values import (
    NUMPY_TYPES,
    TYPE_NAMES,
    Array,
    flush_subnormals,
    is_float,
    is_signed,
    round_to,
    width,
)


class Operands(Protocol):
    """Operand access for the active lanes of the instruction being run."""

    count: int

    def read(self, operand: Operand, type_: str) -> Array: ...
    def write(self, operand: Operand, values: Array, type_: str) -> None: ...


def types_of(instr: Instr) -> list[str]:
    return [m for m in instr.modifiers if m in TYPE_NAMES]


def _wide(type_: str) -> str:
    return {"u16": "u32", "s16": "s32", "u32": "u64", "s32": "s64"}[type_]


def _as_int(values: Array) -> Array:
    return values.astype(np.int64) if values.dtype != np.uint64 else values


def _wrap(values: Array, type_: str) -> Array:
    """Python-int-safe wrap of int64/uint64 results to ``type_``."""
    bits = width(type_) * 8
    unsigned = values.astype(np.uint64) & np.uint64((1 << bits) - 1)
    result: Array = unsigned.astype(NUMPY_TYPES[f"b{bits}"]).view(NUMPY_TYPES[type_])
    return result


def _f64(values: Array) -> Array:
    return values.astype(np.float64)


def _float_result(exact: Array, type_: str, instr: Instr) -> Array:
    out = round_to(exact, type_)
    if "ftz" in instr.modifiers and type_ == "f32":
        out = flush_subnormals(out)
    return out


def _float_inputs(values: list[Array], instr: Instr, type_: str) -> list[Array]:
    if "ftz" in instr.modifiers and type_ == "f32":
        return [flush_subnormals(v) for v in values]
    return values


_SPECIAL: dict[str, Callable[[Array], Array]] = {
    "ex2": np.exp2,
    "lg2": np.log2,
    "rcp": lambda x: 1.0 / x,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "sqrt": np.sqrt,
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
}

_COMPARE: dict[str, Callable[[Array, Array], Array]] = {
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal, "lo": np.less, "ls": np.less_equal,
    "hi": np.greater, "hs": np.greater_equal,
}  # fmt: skip
_BOOL = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}


def execute(instr: Instr, ops: Operands) -> bool:
    """Run ``instr`` on the active lanes; False when it is not an ALU instruction."""
    handler = _HANDLERS.get(instr.opcode)
    if handler is None:
        return False
    handler(instr, ops)
    return True


def _mov(instr: Instr, ops: Operands) -> None:
    (type_,) = types_of(instr)
    dest, source = instr.operands
    if dest.kind == "vector":  # unpack: mov.b32 {lo, hi}, r
        whole = ops.read(source, type_).view(NUMPY_TYPES["b" + str(width(type_) * 8)])
        part = width(type_) * 8 // len(dest.items)
        for i, item in enumerate(dest.items):
            piece = (whole.astype(np.uint64) >> np.uint64(part * i)) & np.uint64((1 << part) - 1)
            ops.write(item, piece.astype(NUMPY_TYPES[f"b{part}"]), f"b{part}")
        return
    if source.kind == "vector":  # pack: mov.b32 r, {lo, hi}
        part = width(type_) * 8 // len(source.items)
        total = np.zeros(ops.count, dtype=np.uint64)
        for i, item in enumerate(source.items):
            piece = ops.read(item, f"b{part}").astype(np.uint64)
            total |= piece << np.uint64(part * i)
        ops.write(
            dest,
            total.astype(NUMPY_TYPES["b" + str(width(type_) * 8)]),
            "b" + str(width(type_) * 8),
        )
        return
    ops.write(dest, ops.read(source, type_), type_)


def _fused(a: Array, b: Array, c: Array, type_: str) -> Array:
    """``a b + c`` as float64 values that round to ``type_`` as the fused result would: once,
    from the exact value. A float32 product is exact in float64, so only a sum landing on a
    float32 midpoint is redone; a float64 product is not, so every finite lane is computed
    from exact rationals (exact fma is what an exact f64 fmod's reduction relies on)."""
    approx: Array = a * b + c
    if type_ == "f32":
        bits = approx.view(np.uint64) & np.uint64((1 << 29) - 1)
        redo = np.isfinite(approx) & (bits == np.uint64(1 << 28))
    elif type_ == "f64":
        redo = np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
    else:
        return approx
    out: Array = approx.copy()
    for i in np.flatnonzero(redo):
        exact = Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(c[i]))
        if exact == 0:
            continue  # the product was exact: the approximation has the right signed zero
        try:
            rounded = float(exact)
        except OverflowError:
            rounded = math.copysign(math.inf, exact)
        if type_ == "f32":
            rounded = _nearest_f32(rounded, exact)
        out[i] = rounded
    return out


def _nearest_f32(value: float, exact: Fraction) -> float:
    """The float32 nearest ``exact``, given ``value``, its float64 rounding."""
    single = np.float32(value)
    if not np.isfinite(single):
        return value
    other = np.nextafter(
        single, np.float32(math.inf if exact > Fraction(float(single)) else -math.inf)
    )
    if not np.isfinite(other):
        return float(single)
    if abs(Fraction(float(other)) - exact) < abs(Fraction(float(single)) - exact):
        return float(other)
    return float(single)


def _arith(instr: Instr, ops: Operands) -> None:
    op = instr.opcode
    (type_,) = types_of(instr)
    mods = instr.modifiers
    dest, *sources = instr.operands
    if is_float(type_):
        values = _float_inputs([_f64(ops.read(s, type_)) for s in sources], instr, type_)
        with np.errstate(all="ignore"):
            if op == "add":
                exact = values[0] + values[1]
            elif op == "sub":
                exact = values[0] - values[1]
            elif op == "mul":
                exact = values[0] * values[1]
            elif op in ("fma", "mad"):
                exact = _fused(values[0], values[1], values[2], type_)
            elif op == "div":
                exact = values[0] / values[1]
            elif op in ("min", "max"):
                # min/max return the number for one NaN (fmin/fmax); .NaN propagates it.
                picks = (np.minimum, np.maximum) if "NaN" in mods else (np.fmin, np.fmax)
                exact = picks[op == "max"](values[0], values[1])
            elif op == "neg":
                exact = -values[0]
            elif op == "abs":
                exact = np.abs(values[0])
            elif op == "copysign":  # copysign d, a, b: b's magnitude, a's sign
                exact = np.copysign(values[1], values[0])
            else:
                exact = _SPECIAL[op](values[0])
        ops.write(dest, _float_result(exact, type_, instr), type_)
        return
    result_type = _wide(type_) if "wide" in mods else type_
    raw = [ops.read(s, type_) for s in sources]
    values = [_as_int(v) for v in raw]
    with np.errstate(all="ignore"):
        if op in ("add", "sub"):
            exact = values[0] + values[1] if op == "add" else values[0] - values[1]
        elif op in ("mul", "mad"):
            if "hi" in mods:
                bits = width(type_) * 8
                product = [int(a) * int(b) for a, b in zip(values[0], values[1], strict=True)]
                exact = np.array([(p >> bits) & ((1 << bits) - 1) for p in product], np.uint64)
            elif "wide" in mods:
                exact = values[0].astype(np.int64) * values[1].astype(np.int64)
            else:
                exact = values[0] * values[1]
            if op == "mad":
                exact = exact + _as_int(ops.read(sources[2], result_type))
        elif op in ("div", "rem"):
            a, b = raw
            zero = b == 0
            safe = np.where(zero, 1, b)
            if is_signed(type_):
                quotient = _exact_signed_div(a, safe)
                exact = quotient if op == "div" else a.astype(np.int64) - quotient * safe
            else:
                exact = (a // safe) if op == "div" else (a % safe)
            exact = np.where(zero, -1 if op == "div" else a, exact)
        elif op in ("min", "max"):
            exact = (np.minimum if op == "min" else np.maximum)(raw[0], raw[1])
        elif op == "neg":
            exact = -values[0]
        elif op == "abs":
            exact = np.abs(values[0])
        else:
            raise NotModeledError(f"line {instr.line}: {instr.text} is not modeled")
    ops.write(dest, _wrap(np.asarray(exact), result_type), result_type)


def _exact_signed_div(a: Array, b: Array) -> Array:
    """C's truncating signed division, exact for 64-bit values. The magnitudes are taken as
    unsigned: ``np.abs`` of INT64_MIN is INT64_MIN, which made ``-1 / INT64_MIN`` -1
    instead of 0 (the CPU fuzzer, seed 1422)."""
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    quotient = _magnitude(a64) // _magnitude(b64)
    negative = (a64 < 0) != (b64 < 0)
    return np.where(negative, -quotient, quotient).astype(np.int64)


def _magnitude(values: Array) -> Array:
    """``|values|`` of int64 values as uint64 (2**63 for INT64_MIN): the unsigned negation
    wraps modulo 2**64."""
    unsigned = values.astype(np.uint64)
    return np.where(values < 0, np.negative(unsigned), unsigned)


def _logic(instr: Instr, ops: Operands) -> None:
    op = instr.opcode
    (type_,) = types_of(instr)
    dest, *sources = instr.operands
    values = [ops.read(s, type_) for s in sources]
    if op == "not":
        result = ~values[0] if type_ != "pred" else np.logical_not(values[0])
    elif op == "cnot":
        result = (values[0] == 0).astype(values[0].dtype)
    elif type_ == "pred":
        result = _BOOL[op](values[0], values[1])
    else:
        result = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op](
            values[0], values[1]
        )
    ops.write(dest, result, type_)


def _shift(instr: Instr, ops: Operands) -> None:
    (type_,) = types_of(instr)
    dest, a, b = instr.operands
    value = ops.read(a, type_)
    amount = np.minimum(ops.read(b, "u32").astype(np.uint64), np.uint64(width(type_) * 8))
    bits = width(type_) * 8
    if instr.opcode == "shl":
        wide = value.view(NUMPY_TYPES[f"b{bits}"]).astype(np.uint64) << amount
        result = np.where(amount >= bits, 0, wide)
        ops.write(dest, _wrap(result.astype(np.uint64), type_), type_)
        return
    if type_.startswith("s"):
        shifted = value.astype(np.int64) >> np.minimum(amount, 63).astype(np.int64)
        ops.write(dest, _wrap(shifted, type_), type_)
        return
    unsigned = value.view(NUMPY_TYPES[f"b{bits}"]).astype(np.uint64)
    result = np.where(amount >= bits, 0, unsigned >> np.minimum(amount, np.uint64(63)))
    ops.write(dest, _wrap(result.astype(np.uint64), type_), type_)


def _setp(instr: Instr, ops: Operands) -> None:
    (type_,) = types_of(instr)
    compare = next(m for m in instr.modifiers if m not in TYPE_NAMES and m not in _BOOL)
    combine = next((m for m in instr.modifiers if m in _BOOL), None)
    dest, a, b, *rest = instr.operands
    x, y = ops.read(a, type_), ops.read(b, type_)
    with np.errstate(invalid="ignore"):
        if is_float(type_):
            nan = np.isnan(x) | np.isnan(y)
            if compare == "num":
                result = ~nan
            elif compare == "nan":
                result = nan
            elif compare in _COMPARE:  # ordered: false where either is NaN
                result = _COMPARE[compare](x, y) & ~nan
            else:  # equ, neu, ltu, ...: true where either is NaN
                result = _COMPARE[compare[:-1]](x, y) | nan
        else:
            result = _COMPARE[compare](x, y)
    if combine is not None:
        result = _BOOL[combine](result, ops.read(rest[0], "pred"))
    if dest.kind == "pair":
        ops.write(dest.items[0], result, "pred")
        ops.write(dest.items[1], ~result, "pred")
    else:
        ops.write(dest, result, "pred")


def _selp(instr: Instr, ops: Operands) -> None:
    (type_,) = types_of(instr)
    dest, a, b, c = instr.operands
    choose = ops.read(c, "pred")
    ops.write(dest, np.where(choose, ops.read(a, type_), ops.read(b, type_)), type_)


def _cvt(instr: Instr, ops: Operands) -> None:
    to, source = types_of(instr)
    dest, a = instr.operands
    mods = instr.modifiers
    value = ops.read(a, source)
    if is_float(to):
        if (
            not is_float(source)
            and to in ("f32", "f64")
            and not any(m in mods for m in ("rni", "rzi", "rmi", "rpi", "rz", "rm", "rp"))
        ):
            ops.write(dest, value.astype(NUMPY_TYPES[to]), to)  # one rounding, to nearest
            return
        exact = _f64(value) if is_float(source) else value.astype(np.float64)
        for mode, function in (
            ("rni", np.rint),
            ("rzi", np.trunc),
            ("rmi", np.floor),
            ("rpi", np.ceil),
        ):
            if mode in mods:
                exact = function(exact)
        if "rz" in mods and to == "f32" and source == "f64":
            narrowed = exact.astype(np.float32)
            over = np.abs(narrowed.astype(np.float64)) > np.abs(exact)
            narrowed = np.where(over, np.nextafter(narrowed, np.float32(0)), narrowed)
            ops.write(dest, narrowed, to)
            return
        out = _float_result(exact, to, instr)
        if "sat" in mods:
            out = np.clip(np.nan_to_num(out, nan=0.0), 0, 1).astype(out.dtype)
        ops.write(dest, out, to)
        return
    if is_float(source):
        exact = _f64(value)
        rounding = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}
        mode = next((m for m in mods if m in rounding), "rzi")
        exact = rounding[mode](exact)
        info = np.iinfo(NUMPY_TYPES[to])
        with np.errstate(invalid="ignore"):
            clipped = np.clip(np.nan_to_num(exact, nan=0.0), info.min, info.max)
        if width(to) == 8:
            result = np.array([_saturate64(x, info) for x in exact], dtype=NUMPY_TYPES[to])
        else:
            result = clipped.astype(NUMPY_TYPES[to])
        ops.write(dest, result, to)
        return
    # integer -> integer: sign or zero extension from the source, wrap to the target
    ops.write(dest, _wrap(_as_int(value), to), to)


def _saturate64(x: float, info: np.iinfo) -> int:
    if np.isnan(x):
        return 0
    return (
        int(min(max(x, float(info.min)), float(info.max)))
        if abs(x) < 2**63
        else (int(info.max) if x > 0 else int(info.min))
    )


def _bfe(instr: Instr, ops: Operands) -> None:
    """Bit-field extract: ``len`` bits from ``pos``, sign-extended for signed types."""
    (type_,) = types_of(instr)
    dest, a, b, c = instr.operands
    bits = width(type_) * 8
    value = ops.read(a, type_).view(NUMPY_TYPES[f"b{bits}"]).astype(np.uint64)
    pos = np.minimum(ops.read(b, "u32").astype(np.uint64), np.uint64(bits))
    length = np.minimum(ops.read(c, "u32").astype(np.uint64), np.uint64(bits))
    field = (value >> np.minimum(pos, np.uint64(63))) & ((np.uint64(1) << length) - np.uint64(1))
    field = np.where(pos >= bits, 0, field).astype(np.uint64)
    if is_signed(type_):
        top = np.where(
            length > 0, (field >> np.maximum(length, np.uint64(1)) - np.uint64(1)) & np.uint64(1), 0
        )
        fill = np.where(top.astype(bool), ~((np.uint64(1) << length) - np.uint64(1)), np.uint64(0))
        field = field | fill.astype(np.uint64)
    ops.write(dest, _wrap(field, type_), type_)


def _bfi(instr: Instr, ops: Operands) -> None:
    """Bit-field insert: ``len`` low bits of ``a`` into ``b`` at ``pos``."""
    (type_,) = types_of(instr)
    dest, a, b, c, d = instr.operands
    bits = width(type_) * 8
    unsigned = NUMPY_TYPES[f"b{bits}"]
    source = ops.read(a, type_).view(unsigned).astype(np.uint64)
    base = ops.read(b, type_).view(unsigned).astype(np.uint64)
    pos = np.minimum(ops.read(c, "u32").astype(np.uint64), np.uint64(bits))
    length = np.minimum(ops.read(d, "u32").astype(np.uint64), np.uint64(bits) - pos)
    mask = ((np.uint64(1) << length) - np.uint64(1)) << pos
    result = (base & ~mask) | ((source << pos) & mask)
    ops.write(dest, _wrap(result.astype(np.uint64), type_), type_)


def _cvta(instr: Instr, ops: Operands) -> None:
    (type_,) = types_of(instr)
    dest, a = instr.operands
    ops.write(dest, ops.read(a, type_), type_)


def _testp(instr: Instr, ops: Operands) -> None:
    (type_,) = types_of(instr)
    test = next(m for m in instr.modifiers if m not in TYPE_NAMES)
    dest, a = instr.operands
    x = ops.read(a, type_)
    tests: dict[str, Callable[[Array], Array]] = {
        "finite": np.isfinite, "infinite": np.isinf, "number": lambda v: ~np.isnan(v),
        "notanumber": np.isnan,
        "normal": lambda v: np.isfinite(v) & (np.abs(v) >= np.finfo(v.dtype).tiny),
        "subnormal": lambda v: (v != 0) & (np.abs(v) < np.finfo(v.dtype).tiny),
    }  # fmt: skip
    ops.write(dest, tests[test](x), "pred")


def _bits(instr: Instr, ops: Operands) -> None:
    (type_,) = types_of(instr)
    dest, a = instr.operands
    value = ops.read(a, type_).view(NUMPY_TYPES[f"b{width(type_) * 8}"])
    bits = width(type_) * 8
    ints = [int(v) for v in value]
    if instr.opcode == "popc":
        out = [bin(v).count("1") for v in ints]
    elif instr.opcode == "clz":
        out = [bits - v.bit_length() for v in ints]
    else:  # brev
        out = [int(f"{v:0{bits}b}"[::-1], 2) for v in ints]
    target = "u32" if instr.opcode != "brev" else type_
    ops.write(dest, np.array(out, dtype=NUMPY_TYPES["u64"]).astype(NUMPY_TYPES[target]), target)


_HANDLERS: dict[str, Callable[[Instr, Operands], None]] = {
    "mov": _mov,
    **{op: _arith for op in ("add", "sub", "mul", "mad", "fma", "div", "rem", "min", "max")},
    **{op: _arith for op in ("neg", "abs", "copysign", *_SPECIAL)},
    **{op: _logic for op in ("and", "or", "xor", "not", "cnot")},
    "shl": _shift,
    "shr": _shift,
    "setp": _setp,
    "selp": _selp,
    "cvt": _cvt,
    "cvta": _cvta,
    "bfe": _bfe,
    "bfi": _bfi,
    "testp": _testp,
    "popc": _bits,
    "clz": _bits,
    "brev": _bits,
}
