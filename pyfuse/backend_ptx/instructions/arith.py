"""Integer and floating-point arithmetic, comparisons, selects and moves.

Each helper checks the PTX type against the set the ISA allows for that
instruction and the modifiers against the type (``.sat`` on ``s32`` only,
``.ftz`` on ``f32`` only, an explicit mode for ``div.f32``, ...) so that the
lowering learns about a mistake here, with the rule in the message, rather than
from ptxas. Conversions live in :mod:`convert`, bit operations in :mod:`logic`.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyfuse.backend_ptx.operands import (
    Instr,
    Kind,
    Operand,
    Reg,
    check_choice,
    check_pred,
    check_reg,
    fmt_operand,
    fmt_vector,
    type_info,
)

INT_TYPES = ("u16", "u32", "u64", "s16", "s32", "s64")
SIGNED_TYPES = ("s16", "s32", "s64")
FLOAT_TYPES = ("f32", "f64")
HALF_TYPES = ("f16", "bf16", "f16x2", "bf16x2")
FLOAT_ROUNDINGS = ("rn", "rz", "rm", "rp")

# Which half types accept which modifiers on add/sub/mul/fma (PTX half-precision
# arithmetic: bf16 forms take .rn only; .ftz/.sat exist only for the f16 forms).
_HALF_ALLOWS_FTZ_SAT = frozenset({"f16", "f16x2"})


def _join(*parts: str) -> str:
    return ".".join(filter(None, parts))  # the empty parts are modifiers not given


def _check_dtype(op: str, dtype: str, allowed: Sequence[str]) -> str:
    if dtype in allowed:  # every allowed name is a PTX type: the common case needs no message
        return dtype
    type_info(dtype, what=f"{op}: dtype")
    return check_choice(dtype, allowed, f"{op}: dtype")


def _float_mods(
    op: str, dtype: str, rounding: str | None, ftz: bool, sat: bool
) -> tuple[str, str, str]:
    """Validate rounding/ftz/sat for a float or half add-like op; return the suffixes."""
    if rounding is not None:
        # Half-precision add/sub/mul/fma define .rn only.
        allowed = ("rn",) if dtype in HALF_TYPES else FLOAT_ROUNDINGS
        check_choice(rounding, allowed, f"{op}.{dtype}: rounding")
    if ftz and dtype != "f32" and dtype not in _HALF_ALLOWS_FTZ_SAT:
        raise ValueError(f"{op}: .ftz applies to f32 and f16 types only, got dtype {dtype}")
    if sat and dtype != "f32" and dtype not in _HALF_ALLOWS_FTZ_SAT:
        raise ValueError(f"{op}: .sat applies to f32 and f16 types only, got dtype {dtype}")
    return rounding or "", "ftz" if ftz else "", "sat" if sat else ""


def _binary(op_text: str, dtype: str, d: Reg, a: Operand, b: Operand, op: str) -> Instr:
    check_reg(d, dtype, f"{op}: d")
    src_a = fmt_operand(a, dtype, f"{op}: a")
    src_b = fmt_operand(b, dtype, f"{op}: b")
    return Instr(f"{op_text} {d}, {src_a}, {src_b}")


def _add_like(
    op: str,
    dtype: str,
    d: Reg,
    a: Operand,
    b: Operand,
    *,
    sat: bool,
    rounding: str | None,
    ftz: bool,
) -> Instr:
    _check_dtype(op, dtype, INT_TYPES + FLOAT_TYPES + HALF_TYPES)
    if dtype in INT_TYPES:
        if rounding is not None or ftz:
            raise ValueError(f"{op}: integer {dtype} takes no rounding or .ftz")
        if sat and dtype != "s32":
            raise ValueError(f"{op}: .sat is defined for s32 only, got dtype {dtype}")
        return _binary(_join(op, "sat" if sat else "", dtype), dtype, d, a, b, op)
    rnd, ftz_s, sat_s = _float_mods(op, dtype, rounding, ftz, sat)
    return _binary(_join(op, rnd, ftz_s, sat_s, dtype), dtype, d, a, b, op)


def add(
    dtype: str,
    d: Reg,
    a: Operand,
    b: Operand,
    *,
    sat: bool = False,
    rounding: str | None = None,
    ftz: bool = False,
) -> Instr:
    """``add``: a rounding mode pins float results (no fma contraction by ptxas)."""
    return _add_like("add", dtype, d, a, b, sat=sat, rounding=rounding, ftz=ftz)


def sub(
    dtype: str,
    d: Reg,
    a: Operand,
    b: Operand,
    *,
    sat: bool = False,
    rounding: str | None = None,
    ftz: bool = False,
) -> Instr:
    return _add_like("sub", dtype, d, a, b, sat=sat, rounding=rounding, ftz=ftz)


_MUL_MODES = ("lo", "hi", "wide")
_WIDE_RESULT = {"u16": "u32", "u32": "u64", "s16": "s32", "s32": "s64"}


def mul(
    dtype: str,
    d: Reg,
    a: Operand,
    b: Operand,
    *,
    mode: str = "lo",
    rounding: str | None = None,
    ftz: bool = False,
    sat: bool = False,
) -> Instr:
    """``mul``; integers need ``lo``/``hi``/``wide`` (``wide`` doubles d's width)."""
    _check_dtype("mul", dtype, INT_TYPES + FLOAT_TYPES + HALF_TYPES)
    if dtype in INT_TYPES:
        check_choice(mode, _MUL_MODES, "mul: integer mode")
        if rounding is not None or ftz or sat:
            raise ValueError(f"mul: integer {dtype} takes no rounding, .ftz or .sat")
        if mode == "wide":
            wide = _WIDE_RESULT.get(dtype)
            if wide is None:
                raise ValueError(f"mul.wide is defined for 16- and 32-bit types, got {dtype}")
            check_reg(d, wide, "mul.wide: d")
            src_a = fmt_operand(a, dtype, "mul: a")
            src_b = fmt_operand(b, dtype, "mul: b")
            return Instr(f"mul.wide.{dtype} {d}, {src_a}, {src_b}")
        return _binary(f"mul.{mode}.{dtype}", dtype, d, a, b, "mul")
    rnd, ftz_s, sat_s = _float_mods("mul", dtype, rounding, ftz, sat)
    return _binary(_join("mul", rnd, ftz_s, sat_s, dtype), dtype, d, a, b, "mul")


def mad(dtype: str, d: Reg, a: Operand, b: Operand, c: Operand, *, mode: str = "lo") -> Instr:
    """Integer multiply-add; floats use :func:`fma` (``mad.f32`` is the same op)."""
    _check_dtype("mad", dtype, INT_TYPES)
    check_choice(mode, _MUL_MODES, "mad: mode")
    d_type = dtype
    if mode == "wide":
        wide = _WIDE_RESULT.get(dtype)
        if wide is None:
            raise ValueError(f"mad.wide is defined for 16- and 32-bit types, got {dtype}")
        d_type = wide
    check_reg(d, d_type, "mad: d")
    src_a = fmt_operand(a, dtype, "mad: a")
    src_b = fmt_operand(b, dtype, "mad: b")
    src_c = fmt_operand(c, d_type, "mad: c")
    return Instr(f"mad.{mode}.{dtype} {d}, {src_a}, {src_b}, {src_c}")


def fma(
    dtype: str,
    d: Reg,
    a: Operand,
    b: Operand,
    c: Operand,
    *,
    rounding: str = "rn",
    ftz: bool = False,
    sat: bool = False,
) -> Instr:
    """Fused multiply-add; the rounding mode is mandatory in PTX for f32/f64."""
    _check_dtype("fma", dtype, FLOAT_TYPES + HALF_TYPES)
    rnd, ftz_s, sat_s = _float_mods("fma", dtype, rounding, ftz, sat)
    check_reg(d, dtype, "fma: d")
    src_a = fmt_operand(a, dtype, "fma: a")
    src_b = fmt_operand(b, dtype, "fma: b")
    src_c = fmt_operand(c, dtype, "fma: c")
    return Instr(f"{_join('fma', rnd, ftz_s, sat_s, dtype)} {d}, {src_a}, {src_b}, {src_c}")


_DIV_F32_MODES = ("approx", "full", *FLOAT_ROUNDINGS)


def div(
    dtype: str,
    d: Reg,
    a: Operand,
    b: Operand,
    *,
    mode: str | None = None,
    ftz: bool = False,
) -> Instr:
    """Division. f32 must say ``approx``, ``full`` or an IEEE rounding; f64 a rounding."""
    _check_dtype("div", dtype, INT_TYPES + FLOAT_TYPES)
    if dtype in INT_TYPES:
        if mode is not None or ftz:
            raise ValueError(f"div: integer {dtype} takes no mode or .ftz")
        return _binary(f"div.{dtype}", dtype, d, a, b, "div")
    modes = _DIV_F32_MODES if dtype == "f32" else FLOAT_ROUNDINGS
    if mode is None:
        raise ValueError(f"div.{dtype} needs a mode, one of {list(modes)}")
    check_choice(mode, modes, f"div.{dtype}: mode")
    if ftz and dtype != "f32":
        raise ValueError(f"div: .ftz applies to f32 only, got dtype {dtype}")
    return _binary(_join("div", mode, "ftz" if ftz else "", dtype), dtype, d, a, b, "div")


def rem(dtype: str, d: Reg, a: Operand, b: Operand) -> Instr:
    _check_dtype("rem", dtype, INT_TYPES)
    return _binary(f"rem.{dtype}", dtype, d, a, b, "rem")


def _unary(text: str, dtype: str, d: Reg, a: Operand, op: str) -> Instr:
    check_reg(d, dtype, f"{op}: d")
    return Instr(f"{text} {d}, {fmt_operand(a, dtype, f'{op}: a')}")


def neg(dtype: str, d: Reg, a: Operand, *, ftz: bool = False) -> Instr:
    _check_dtype("neg", dtype, SIGNED_TYPES + FLOAT_TYPES + ("f16", "bf16", "f16x2", "bf16x2"))
    if ftz and dtype not in ("f32", "f16", "f16x2"):
        raise ValueError(f"neg: .ftz applies to f32 and f16 types only, got dtype {dtype}")
    return _unary(_join("neg", "ftz" if ftz else "", dtype), dtype, d, a, "neg")


def abs_(dtype: str, d: Reg, a: Operand, *, ftz: bool = False) -> Instr:
    """``abs`` (trailing underscore: ``abs`` is a Python builtin)."""
    _check_dtype("abs", dtype, SIGNED_TYPES + FLOAT_TYPES + ("f16", "bf16", "f16x2", "bf16x2"))
    if ftz and dtype not in ("f32", "f16", "f16x2"):
        raise ValueError(f"abs: .ftz applies to f32 and f16 types only, got dtype {dtype}")
    return _unary(_join("abs", "ftz" if ftz else "", dtype), dtype, d, a, "abs")


def _min_max(op: str, dtype: str, d: Reg, a: Operand, b: Operand, ftz: bool, nan: bool) -> Instr:
    _check_dtype(op, dtype, INT_TYPES + FLOAT_TYPES + HALF_TYPES)
    if dtype in INT_TYPES and (ftz or nan):
        raise ValueError(f"{op}: integer {dtype} takes no .ftz or .NaN")
    if ftz and dtype not in ("f32", "f16", "f16x2"):
        raise ValueError(f"{op}: .ftz applies to f32 and f16 types only, got dtype {dtype}")
    if nan and dtype == "f64":
        raise ValueError(f"{op}: .NaN is not defined for f64")
    text = _join(op, "ftz" if ftz else "", "NaN" if nan else "", dtype)
    return _binary(text, dtype, d, a, b, op)


def min_(
    dtype: str, d: Reg, a: Operand, b: Operand, *, ftz: bool = False, nan: bool = False
) -> Instr:
    """``min``; ``nan=True`` propagates NaN (torch semantics) instead of dropping it."""
    return _min_max("min", dtype, d, a, b, ftz, nan)


def max_(
    dtype: str, d: Reg, a: Operand, b: Operand, *, ftz: bool = False, nan: bool = False
) -> Instr:
    """``max``; ``nan=True`` propagates NaN (torch semantics) instead of dropping it."""
    return _min_max("max", dtype, d, a, b, ftz, nan)


# ---- special functions (MUFU) ---------------------------------------------------------------

_APPROX_TYPES = {
    "ex2": ("f32", "f16", "bf16", "f16x2", "bf16x2"),
    "lg2": ("f32",),
    "sin": ("f32",),
    "cos": ("f32",),
    "tanh": ("f32", "f16", "bf16", "f16x2", "bf16x2"),
}


def _approx(op: str, dtype: str, d: Reg, a: Operand, ftz: bool) -> Instr:
    _check_dtype(op, dtype, _APPROX_TYPES[op])
    if ftz and dtype != "f32":
        raise ValueError(f"{op}: .ftz applies to f32 only, got dtype {dtype}")
    if op == "ex2" and dtype in ("bf16", "bf16x2"):
        # The ISA spells the bf16 forms ex2.approx.ftz.bf16 (ftz is mandatory there).
        ftz = True
    return _unary(_join(op, "approx", "ftz" if ftz else "", dtype), dtype, d, a, op)


def ex2(dtype: str, d: Reg, a: Operand, *, ftz: bool = False) -> Instr:
    """2**a on the SFU; exp(x) lowers to ex2(x * log2(e))."""
    return _approx("ex2", dtype, d, a, ftz)


def lg2(dtype: str, d: Reg, a: Operand, *, ftz: bool = False) -> Instr:
    return _approx("lg2", dtype, d, a, ftz)


def sin(dtype: str, d: Reg, a: Operand, *, ftz: bool = False) -> Instr:
    return _approx("sin", dtype, d, a, ftz)


def cos(dtype: str, d: Reg, a: Operand, *, ftz: bool = False) -> Instr:
    return _approx("cos", dtype, d, a, ftz)


def tanh(dtype: str, d: Reg, a: Operand) -> Instr:
    """Hardware tanh (sm_75+); only an ``approx`` form exists, max rel. error ~2**-11."""
    return _approx("tanh", dtype, d, a, False)


def rcp(dtype: str, d: Reg, a: Operand, *, mode: str = "rn", ftz: bool = False) -> Instr:
    """1/a: ``approx`` is one SFU op; a rounding mode gives the IEEE result (slower).

    f64 has ``approx`` only as ``rcp.approx.ftz.f64``, so that form requires ftz=True.
    """
    _check_dtype("rcp", dtype, FLOAT_TYPES)
    check_choice(mode, ("approx", *FLOAT_ROUNDINGS), f"rcp.{dtype}: mode")
    if dtype == "f64" and ftz != (mode == "approx"):
        raise ValueError("rcp.f64: .ftz exists only with approx (rcp.approx.ftz.f64)")
    return _unary(_join("rcp", mode, "ftz" if ftz else "", dtype), dtype, d, a, "rcp")


def sqrt(dtype: str, d: Reg, a: Operand, *, mode: str = "rn", ftz: bool = False) -> Instr:
    """Square root; f32 may be ``approx``, f64 needs an IEEE rounding mode."""
    _check_dtype("sqrt", dtype, FLOAT_TYPES)
    allowed = ("approx", *FLOAT_ROUNDINGS) if dtype == "f32" else FLOAT_ROUNDINGS
    check_choice(mode, allowed, f"sqrt.{dtype}: mode")
    if ftz and dtype != "f32":
        raise ValueError(f"sqrt: .ftz applies to f32 only, got dtype {dtype}")
    return _unary(_join("sqrt", mode, "ftz" if ftz else "", dtype), dtype, d, a, "sqrt")


def rsqrt(dtype: str, d: Reg, a: Operand, *, ftz: bool = False) -> Instr:
    """1/sqrt(a); PTX has only the approximate form (one SFU op for f32)."""
    _check_dtype("rsqrt", dtype, FLOAT_TYPES)
    return _unary(_join("rsqrt", "approx", "ftz" if ftz else "", dtype), dtype, d, a, "rsqrt")


# ---- comparisons and selects ----------------------------------------------------------------

_CMP_ALL = ("eq", "ne", "lt", "le", "gt", "ge")
_CMP_UNSIGNED_ONLY = ("lo", "ls", "hi", "hs")
_CMP_FLOAT_ONLY = ("equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan")
_SETP_TYPES = ("b16", "b32", "b64", *INT_TYPES, *FLOAT_TYPES, "f16", "bf16")
_BOOL_OPS = ("and", "or", "xor")


def _allowed_cmps(dtype: str) -> tuple[str, ...]:
    kind = type_info(dtype).kind
    if kind is Kind.BITS:
        return ("eq", "ne")
    if kind is Kind.UNSIGNED:
        return _CMP_ALL + _CMP_UNSIGNED_ONLY
    if kind is Kind.SIGNED:
        return _CMP_ALL
    return _CMP_ALL + _CMP_FLOAT_ONLY


def setp(
    cmp: str,
    dtype: str,
    p: Reg,
    a: Operand,
    b: Operand,
    *,
    q: Reg | None = None,
    bool_op: str | None = None,
    c: Reg | None = None,
    c_negated: bool = False,
    ftz: bool = False,
) -> Instr:
    """``setp.cmp[.bool_op].type p[|q], a, b[, {!}c]``: q receives the complement."""
    _check_dtype("setp", dtype, _SETP_TYPES)
    check_choice(cmp, _allowed_cmps(dtype), f"setp.{dtype}: comparison")
    check_pred(p, "setp: p")
    if ftz and dtype != "f32":
        raise ValueError(f"setp: .ftz applies to f32 only, got dtype {dtype}")
    dst = str(p)
    if q is not None:
        dst += f"|{check_pred(q, 'setp: q')}"
    src = f"{fmt_operand(a, dtype, 'setp: a')}, {fmt_operand(b, dtype, 'setp: b')}"
    if (bool_op is None) != (c is None):
        raise ValueError("setp: bool_op and c must be given together")
    if bool_op is not None and c is not None:
        check_choice(bool_op, _BOOL_OPS, "setp: bool_op")
        src += f", {'!' if c_negated else ''}{check_pred(c, 'setp: c')}"
    text = _join("setp", cmp, bool_op or "", "ftz" if ftz else "", dtype)
    return Instr(f"{text} {dst}, {src}")


_SELP_TYPES = ("b16", "b32", "b64", *INT_TYPES, *FLOAT_TYPES)


def selp(dtype: str, d: Reg, a: Operand, b: Operand, c: Reg) -> Instr:
    """d = c ? a : b."""
    _check_dtype("selp", dtype, _SELP_TYPES)
    check_reg(d, dtype, "selp: d")
    src_a = fmt_operand(a, dtype, "selp: a")
    src_b = fmt_operand(b, dtype, "selp: b")
    return Instr(f"selp.{dtype} {d}, {src_a}, {src_b}, {check_pred(c, 'selp: c')}")


# ---- moves ----------------------------------------------------------------------------------

_MOV_TYPES = ("pred", "b16", "b32", "b64", *INT_TYPES, *FLOAT_TYPES)


def mov(dtype: str, d: Reg, a: Operand) -> Instr:
    """Copy a register or materialize an immediate (floats as exact hex literals)."""
    _check_dtype("mov", dtype, _MOV_TYPES)
    if dtype == "pred":
        check_pred(d, "mov: d")
        if isinstance(a, Reg):
            return Instr(f"mov.pred {d}, {check_pred(a, 'mov: a')}")
        if a not in (0, 1) or isinstance(a, bool):
            raise ValueError(f"mov.pred: immediate must be 0 or 1, got {a!r}")
        return Instr(f"mov.pred {d}, {a}")
    return _unary(f"mov.{dtype}", dtype, d, a, "mov")


_PACK_TYPE = {2: {16: "b32", 32: "b64"}, 4: {16: "b64"}}


def pack(d: Reg, parts: Sequence[Reg]) -> Instr:
    """``mov.b64 d, {lo, hi}``: concatenate registers, first element lowest."""
    widths = {p.bits for p in parts}
    if len(widths) != 1 or len(parts) not in _PACK_TYPE:
        raise ValueError(f"pack: needs 2 or 4 registers of one width, got {list(map(str, parts))}")
    (width,) = widths
    dtype = _PACK_TYPE[len(parts)].get(width)
    if dtype is None:
        raise ValueError(f"pack: cannot pack {len(parts)} x {width}-bit registers")
    check_reg(d, dtype, "pack: d")
    for part in parts:
        check_reg(part, f"b{width}", "pack: part")
    return Instr(f"mov.{dtype} {d}, {fmt_vector(parts)}")


def unpack(parts: Sequence[Reg], a: Reg) -> Instr:
    """``mov.b64 {lo, hi}, a``: split a register, first element gets the low bits."""
    widths = {p.bits for p in parts}
    if len(widths) != 1 or len(parts) not in _PACK_TYPE:
        names = [str(p) for p in parts]
        raise ValueError(f"unpack: needs 2 or 4 registers of one width, got {names}")
    (width,) = widths
    dtype = _PACK_TYPE[len(parts)].get(width)
    if dtype is None:
        raise ValueError(f"unpack: cannot split into {len(parts)} x {width}-bit registers")
    check_reg(a, dtype, "unpack: a")
    for part in parts:
        check_reg(part, f"b{width}", "unpack: part")
    return Instr(f"mov.{dtype} {fmt_vector(parts)}, {a}")
