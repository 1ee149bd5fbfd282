"""``cvt``: type conversions, with the ISA's rounding rules enforced up front.

PTX makes the rounding modifier mandatory exactly where a conversion can lose
information, and forbids it where it cannot (ptxas: "Illegal rounding modifier"
for ``cvt.rn.f32.f32``). The rules encoded here:

- float -> narrower float (f64->f32, f32->f16/bf16, f16<->bf16): a float
  rounding ``rn|rz|rm|rp`` is required;
- float -> wider float (f16/bf16->f32, f32->f64): no rounding;
- float -> same float: optional *integer* rounding ``rni|rzi|rmi|rpi`` (round to
  an integral value, result stays float);
- float -> int: integer rounding required; int -> float: float rounding required;
- int -> int: no rounding (``.sat`` clamps to the destination range).

``cvt.rn.bf16x2.f32 d, a, b`` puts ``a`` in the HIGH half; :func:`cvt_pack`
names its arguments ``hi`` and ``lo`` so the order cannot be misread.
"""

from __future__ import annotations

from pyfuse.backend_ptx.instructions.arith import FLOAT_ROUNDINGS
from pyfuse.backend_ptx.operands import (
    Instr,
    Kind,
    Reg,
    check_choice,
    check_reg,
    check_reg_relaxed,
    type_info,
)

CVT_TYPES = ("u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64", "f16", "bf16", "f32", "f64")
INT_ROUNDINGS = ("rni", "rzi", "rmi", "rpi")
_PACKED_TYPES = ("f16x2", "bf16x2")


def _is_float(ptype: str) -> bool:
    return type_info(ptype).kind is Kind.FLOAT


def _rounding_rule(dtype: str, atype: str) -> tuple[tuple[str, ...], bool, str]:
    """(allowed roundings, required?, reason) for converting atype to dtype."""
    d_bits, a_bits = type_info(dtype).bits, type_info(atype).bits
    d_float, a_float = _is_float(dtype), _is_float(atype)
    if d_float and a_float:
        if dtype == atype:
            return INT_ROUNDINGS, False, "a same-type float cvt rounds to an integral value"
        if d_bits < a_bits or d_bits == a_bits:
            return FLOAT_ROUNDINGS, True, "a narrowing float cvt must say how to round"
        return (), False, "a widening float cvt is exact and takes no rounding"
    if a_float:
        return INT_ROUNDINGS, True, "a float-to-int cvt must say how to round"
    if d_float:
        return FLOAT_ROUNDINGS, True, "an int-to-float cvt must say how to round"
    return (), False, "an int-to-int cvt takes no rounding"


def cvt(
    dtype: str,
    atype: str,
    d: Reg,
    a: Reg,
    *,
    rounding: str | None = None,
    ftz: bool = False,
    sat: bool = False,
    relu: bool = False,
) -> Instr:
    """Convert ``a`` (of type atype) to dtype into ``d``; see the module doc for rules."""
    check_choice(dtype, CVT_TYPES, "cvt: dtype")
    check_choice(atype, CVT_TYPES, "cvt: atype")
    allowed, required, reason = _rounding_rule(dtype, atype)
    if rounding is None:
        if required:
            raise ValueError(f"cvt.{dtype}.{atype}: {reason}; pass rounding in {list(allowed)}")
    else:
        if not allowed:
            raise ValueError(f"cvt.{dtype}.{atype}: {reason}, got rounding {rounding!r}")
        check_choice(rounding, allowed, f"cvt.{dtype}.{atype}: rounding")
    if ftz and "f32" not in (dtype, atype):
        raise ValueError(f"cvt: .ftz needs an f32 source or destination, got {dtype}.{atype}")
    if relu:
        if atype != "f32" or dtype not in ("f16", "bf16"):
            raise ValueError(f"cvt: .relu is defined for f32 -> f16/bf16, got {atype} -> {dtype}")
        if rounding not in ("rn", "rz"):
            raise ValueError(f"cvt .relu form needs rounding rn or rz, got {rounding!r}")
        if ftz or sat:
            raise ValueError("cvt: the .relu form takes no .ftz or .sat")
    check_reg_relaxed(d, dtype, f"cvt.{dtype}.{atype}: d")
    check_reg_relaxed(a, atype, f"cvt.{dtype}.{atype}: a")
    mods = [rounding or ""]
    if relu:
        mods.append("relu")
    if ftz:
        mods.append("ftz")
    if sat:
        mods.append("sat")
    text = ".".join(["cvt"] + [m for m in mods if m] + [dtype, atype])
    return Instr(f"{text} {d}, {a}")


def cvt_pack(
    dtype: str,
    d: Reg,
    hi: Reg,
    lo: Reg,
    *,
    rounding: str = "rn",
    relu: bool = False,
    satfinite: bool = False,
) -> Instr:
    """Two f32 into one packed ``bf16x2``/``f16x2``: ``hi`` -> bits 31:16, ``lo`` -> 15:0.

    PTX lists the high source first (``cvt.rn.bf16x2.f32 d, hi, lo``), the
    opposite of memory order, which is why the arguments are named.
    """
    check_choice(dtype, _PACKED_TYPES, "cvt_pack: dtype")
    check_choice(rounding, ("rn", "rz"), f"cvt_pack.{dtype}: rounding")
    check_reg(d, "b32", "cvt_pack: d")
    check_reg(hi, "f32", "cvt_pack: hi")
    check_reg(lo, "f32", "cvt_pack: lo")
    mods = [rounding, "relu" if relu else "", "satfinite" if satfinite else ""]
    text = ".".join(["cvt"] + [m for m in mods if m] + [dtype, "f32"])
    # .satfinite on the packed f32 conversions needs PTX 8.1 (ptxas says so below it).
    return Instr(f"{text} {d}, {hi}, {lo}", min_version=(8, 1) if satfinite else (0, 0))
