"""Bitwise and shift instructions: and/or/xor/not, shifts, popc/clz/brev, bfe/bfi, prmt, lop3.

These take bit types (``b32`` ...) whose registers are compatible with any type
of the same width, which is how float sign tricks (``and.b32`` on an ``.f32``
register) are written without a move.
"""

from __future__ import annotations

from pyfuse.backend_ptx.operands import (
    Instr,
    Operand,
    Reg,
    check_choice,
    check_int,
    check_reg,
    fmt_operand,
)

_LOGIC_TYPES = ("pred", "b16", "b32", "b64")
_SHIFT_TYPES = ("b16", "b32", "b64")
_SHR_TYPES = (*_SHIFT_TYPES, "u16", "u32", "u64", "s16", "s32", "s64")


def _pred_or_value(x: Operand, dtype: str, what: str) -> str:
    if dtype == "pred":
        if not isinstance(x, Reg):
            raise ValueError(f"{what} must be a predicate register for .pred, got {x!r}")
        return str(check_reg(x, "pred", what))
    return fmt_operand(x, dtype, what)


def _bitwise(op: str, dtype: str, d: Reg, a: Operand, b: Operand) -> Instr:
    check_choice(dtype, _LOGIC_TYPES, f"{op}: dtype")
    check_reg(d, dtype, f"{op}: d")
    src_a = _pred_or_value(a, dtype, f"{op}: a")
    src_b = _pred_or_value(b, dtype, f"{op}: b")
    return Instr(f"{op}.{dtype} {d}, {src_a}, {src_b}")


def and_(dtype: str, d: Reg, a: Operand, b: Operand) -> Instr:
    return _bitwise("and", dtype, d, a, b)


def or_(dtype: str, d: Reg, a: Operand, b: Operand) -> Instr:
    return _bitwise("or", dtype, d, a, b)


def xor(dtype: str, d: Reg, a: Operand, b: Operand) -> Instr:
    return _bitwise("xor", dtype, d, a, b)


def not_(dtype: str, d: Reg, a: Operand) -> Instr:
    check_choice(dtype, _LOGIC_TYPES, "not: dtype")
    check_reg(d, dtype, "not: d")
    return Instr(f"not.{dtype} {d}, {_pred_or_value(a, dtype, 'not: a')}")


def shl(dtype: str, d: Reg, a: Operand, b: Operand) -> Instr:
    """Left shift; the amount is always a u32 (amounts past the width give 0)."""
    check_choice(dtype, _SHIFT_TYPES, "shl: dtype")
    check_reg(d, dtype, "shl: d")
    src_a = fmt_operand(a, dtype, "shl: a")
    return Instr(f"shl.{dtype} {d}, {src_a}, {fmt_operand(b, 'u32', 'shl: b')}")


def shr(dtype: str, d: Reg, a: Operand, b: Operand) -> Instr:
    """Right shift: ``s*`` types shift arithmetically, ``u*``/``b*`` logically."""
    check_choice(dtype, _SHR_TYPES, "shr: dtype")
    check_reg(d, dtype, "shr: d")
    src_a = fmt_operand(a, dtype, "shr: a")
    return Instr(f"shr.{dtype} {d}, {src_a}, {fmt_operand(b, 'u32', 'shr: b')}")


def _count(op: str, dtype: str, d: Reg, a: Operand) -> Instr:
    check_choice(dtype, ("b32", "b64"), f"{op}: dtype")
    check_reg(d, "u32", f"{op}: d")
    return Instr(f"{op}.{dtype} {d}, {fmt_operand(a, dtype, f'{op}: a')}")


def popc(dtype: str, d: Reg, a: Operand) -> Instr:
    """Population count; the result is a u32 even for b64 sources."""
    return _count("popc", dtype, d, a)


def clz(dtype: str, d: Reg, a: Operand) -> Instr:
    """Count leading zeros; the result is a u32 even for b64 sources."""
    return _count("clz", dtype, d, a)


def brev(dtype: str, d: Reg, a: Operand) -> Instr:
    check_choice(dtype, ("b32", "b64"), "brev: dtype")
    check_reg(d, dtype, "brev: d")
    return Instr(f"brev.{dtype} {d}, {fmt_operand(a, dtype, 'brev: a')}")


def bfe(dtype: str, d: Reg, a: Operand, pos: Operand, length: Operand) -> Instr:
    """Extract ``length`` bits at ``pos``; signed types sign-extend the field."""
    check_choice(dtype, ("u32", "u64", "s32", "s64"), "bfe: dtype")
    check_reg(d, dtype, "bfe: d")
    src = fmt_operand(a, dtype, "bfe: a")
    return Instr(
        f"bfe.{dtype} {d}, {src}, {fmt_operand(pos, 'u32', 'bfe: pos')}, "
        f"{fmt_operand(length, 'u32', 'bfe: length')}"
    )


def bfi(dtype: str, d: Reg, a: Operand, b: Operand, pos: Operand, length: Operand) -> Instr:
    """Insert the low ``length`` bits of ``a`` into ``b`` at ``pos``."""
    check_choice(dtype, ("b32", "b64"), "bfi: dtype")
    check_reg(d, dtype, "bfi: d")
    return Instr(
        f"bfi.{dtype} {d}, {fmt_operand(a, dtype, 'bfi: a')}, {fmt_operand(b, dtype, 'bfi: b')}, "
        f"{fmt_operand(pos, 'u32', 'bfi: pos')}, {fmt_operand(length, 'u32', 'bfi: length')}"
    )


_PRMT_MODES = ("f4e", "b4e", "rc8", "ecl", "ecr", "rc16")


def prmt(d: Reg, a: Operand, b: Operand, selector: Operand, *, mode: str | None = None) -> Instr:
    """Byte permute of {b, a}; used to pack/unpack 8- and 16-bit lanes without shifts."""
    check_reg(d, "b32", "prmt: d")
    if mode is not None:
        check_choice(mode, _PRMT_MODES, "prmt: mode")
    text = "prmt.b32" + (f".{mode}" if mode else "")
    return Instr(
        f"{text} {d}, {fmt_operand(a, 'b32', 'prmt: a')}, {fmt_operand(b, 'b32', 'prmt: b')}, "
        f"{fmt_operand(selector, 'b32', 'prmt: selector')}"
    )


def lop3(d: Reg, a: Operand, b: Operand, c: Operand, lut: int) -> Instr:
    """Any 3-input boolean function; ``lut`` is its truth table over 0xF0/0xCC/0xAA."""
    check_reg(d, "b32", "lop3: d")
    check_int(lut, "lop3: lut", 0, 255)
    return Instr(
        f"lop3.b32 {d}, {fmt_operand(a, 'b32', 'lop3: a')}, {fmt_operand(b, 'b32', 'lop3: b')}, "
        f"{fmt_operand(c, 'b32', 'lop3: c')}, {lut}"
    )
