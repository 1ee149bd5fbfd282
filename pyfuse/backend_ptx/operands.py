"""The vocabulary every PTX helper speaks: types, registers, operands, lines.

An instruction helper takes registers and immediates, checks them against the
PTX type it is about to emit, and returns an :class:`Instr`. Nothing here knows
an instruction; this module only knows what a legal operand of a given PTX type
looks like, so the checks live in one place instead of in every helper.

PTX operand type checking (PTX ISA "Operand Type Information"): a register of a
bit-size type (``.b16/.b32/.b64``) is compatible with every type of the same
width, while a ``.f32``/``.f64`` register is compatible only with the float and
bit types of its width (ptxas: "Arguments mismatch" for ``add.u32 %r, %f, ...``).
``ld``/``st``/``cvt`` relax this: an integer or bit value may sit in a wider
integer register. Float immediates must be written as ``0fXXXXXXXX`` /
``0dXXXXXXXXXXXXXXXX``; ptxas rejects ``add.f32 %f1, %f2, 1``.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from dataclasses import replace

from pyfuse.ir.records import record


class RegClass(enum.Enum):
    """A register file class; one ``.reg`` declaration line per class used."""

    PRED = "pred"
    B16 = "b16"
    B32 = "b32"
    B64 = "b64"
    F32 = "f32"
    F64 = "f64"

    # Members are singletons, so hashing by identity is exact (and done in C): Enum's own
    # __hash__ hashes the member name in Python, and the emitter looks registers up by class
    # (name prefix, width, count) for nearly every operand it writes.
    __hash__ = object.__hash__


# Register name prefixes follow nvcc's (%p, %rs, %r, %rd, %f, %fd) so that dumps
# read like the PTX people are used to.
REG_PREFIX: dict[RegClass, str] = {
    RegClass.PRED: "%p",
    RegClass.B16: "%rs",
    RegClass.B32: "%r",
    RegClass.B64: "%rd",
    RegClass.F32: "%f",
    RegClass.F64: "%fd",
}

REG_BITS: dict[RegClass, int] = {
    RegClass.PRED: 1,
    RegClass.B16: 16,
    RegClass.B32: 32,
    RegClass.B64: 64,
    RegClass.F32: 32,
    RegClass.F64: 64,
}


class Kind(enum.Enum):
    """What family a PTX scalar type belongs to; decides immediates and checks."""

    PRED = "pred"
    BITS = "bits"
    UNSIGNED = "unsigned"
    SIGNED = "signed"
    FLOAT = "float"
    # Two 16-bit floats packed in a 32-bit register (f16x2, bf16x2).
    PACKED = "packed"


@record(frozen=True, eq=False)  # table entries, one per name: never compared
class TypeInfo:
    """A PTX scalar type: its name, width and family."""

    name: str
    bits: int
    kind: Kind


_TYPE_LIST: tuple[TypeInfo, ...] = (
    TypeInfo("pred", 1, Kind.PRED),
    TypeInfo("b8", 8, Kind.BITS),
    TypeInfo("b16", 16, Kind.BITS),
    TypeInfo("b32", 32, Kind.BITS),
    TypeInfo("b64", 64, Kind.BITS),
    TypeInfo("b128", 128, Kind.BITS),
    TypeInfo("u8", 8, Kind.UNSIGNED),
    TypeInfo("u16", 16, Kind.UNSIGNED),
    TypeInfo("u32", 32, Kind.UNSIGNED),
    TypeInfo("u64", 64, Kind.UNSIGNED),
    TypeInfo("s8", 8, Kind.SIGNED),
    TypeInfo("s16", 16, Kind.SIGNED),
    TypeInfo("s32", 32, Kind.SIGNED),
    TypeInfo("s64", 64, Kind.SIGNED),
    TypeInfo("f16", 16, Kind.FLOAT),
    TypeInfo("bf16", 16, Kind.FLOAT),
    TypeInfo("f32", 32, Kind.FLOAT),
    TypeInfo("f64", 64, Kind.FLOAT),
    TypeInfo("f16x2", 32, Kind.PACKED),
    TypeInfo("bf16x2", 32, Kind.PACKED),
)

PTX_TYPES: dict[str, TypeInfo] = {info.name: info for info in _TYPE_LIST}

INT_KINDS = frozenset({Kind.BITS, Kind.UNSIGNED, Kind.SIGNED})


def type_info(ptype: str, *, what: str = "type") -> TypeInfo:
    """The table entry for ``ptype``, or a ValueError listing the known names."""
    info = PTX_TYPES.get(ptype)
    if info is None:
        raise ValueError(f"{what} must be a PTX type name such as 'f32', got {ptype!r}")
    return info


def check_choice(value: str, allowed: Sequence[str], what: str) -> str:
    """Reject a modifier that is not in ``allowed`` with a message naming both."""
    if value not in allowed:
        raise ValueError(f"{what} must be one of {list(allowed)}, got {value!r}")
    return value


@record(frozen=True)
class Reg:
    """A virtual register, e.g. ``%r7``; made only by ``KernelBuilder.reg``."""

    cls: RegClass
    index: int

    def __str__(self) -> str:
        return f"{REG_PREFIX[self.cls]}{self.index}"

    @property
    def bits(self) -> int:
        return REG_BITS[self.cls]


@record(frozen=True)
class Symbol:
    """A module- or kernel-scope name used as an operand: a param, ``smem``, a label."""

    name: str

    def __str__(self) -> str:
        return self.name


Operand = Reg | int | float


def _reg_accepts(cls: RegClass, info: TypeInfo) -> bool:
    if cls is RegClass.PRED:
        return info.kind is Kind.PRED
    if info.kind is Kind.PRED:
        return False
    if REG_BITS[cls] != info.bits:
        return False
    if cls in (RegClass.F32, RegClass.F64):
        # A float register is compatible only with float and bit types of its width.
        return info.kind in (Kind.FLOAT, Kind.BITS)
    return True


# The register classes that may hold an operand of each PTX type: the rule of _reg_accepts,
# tabulated once because the emitter checks every operand it writes.
_ACCEPTING_CLASSES: dict[str, tuple[RegClass, ...]] = {
    name: tuple(cls for cls in RegClass if _reg_accepts(cls, info))
    for name, info in PTX_TYPES.items()
}


def check_reg(reg: object, ptype: str, what: str) -> Reg:
    """``reg`` must be a register whose class may hold a ``.ptype`` operand."""
    if isinstance(reg, Reg) and reg.cls in _ACCEPTING_CLASSES.get(ptype, ()):
        return reg
    info = type_info(ptype)
    if not isinstance(reg, Reg):
        raise ValueError(f"{what} must be a register for .{ptype}, got {reg!r}")
    if not _reg_accepts(reg.cls, info):
        raise ValueError(
            f"{what} must be a register compatible with .{ptype} "
            f"({info.bits}-bit), got {reg} of class .{reg.cls.value}"
        )
    return reg


def check_reg_relaxed(reg: object, ptype: str, what: str) -> Reg:
    """The ld/st/cvt rule: integer and bit values may live in a wider integer register."""
    info = type_info(ptype)
    if (
        isinstance(reg, Reg)
        and info.kind in INT_KINDS
        and reg.cls in (RegClass.B16, RegClass.B32, RegClass.B64)
        and reg.bits >= info.bits
    ):
        return reg
    return check_reg(reg, ptype, what)


def check_pred(reg: object, what: str) -> Reg:
    if not isinstance(reg, Reg) or reg.cls is not RegClass.PRED:
        raise ValueError(f"{what} must be a predicate register, got {reg!r}")
    return reg


def check_int(value: object, what: str, low: int, high: int) -> int:
    """An immediate integer in [low, high] (bools are refused: they hide bugs)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{what} must be an integer in [{low}, {high}], got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{what} must be in [{low}, {high}], got {value}")
    return value


def _int_range(info: TypeInfo) -> tuple[int, int]:
    if info.kind is Kind.SIGNED:
        return -(1 << (info.bits - 1)), (1 << (info.bits - 1)) - 1
    if info.kind is Kind.UNSIGNED:
        return 0, (1 << info.bits) - 1
    # Bit types accept either reading of the pattern.
    return -(1 << (info.bits - 1)), (1 << info.bits) - 1


def float_literal(value: float, ptype: str) -> str:
    """The exact hex spelling PTX wants for a float immediate (round-trips bits)."""
    if ptype == "f32":
        (bits,) = struct.unpack("<I", struct.pack("<f", value))
        return f"0f{bits:08X}"
    if ptype == "f64":
        (bits,) = struct.unpack("<Q", struct.pack("<d", value))
        return f"0d{bits:016X}"
    raise ValueError(f"PTX has float immediates only for f32 and f64, not .{ptype}")


def fmt_operand(value: Operand, ptype: str, what: str) -> str:
    """Render a source operand of type ``.ptype``: a checked register or an immediate."""
    if isinstance(value, Reg):
        return str(check_reg(value, ptype, what))
    info = type_info(ptype)
    if isinstance(value, bool):
        raise ValueError(f"{what}: use 0/1 or a predicate register, not {value!r}")
    if info.kind is Kind.FLOAT:
        if isinstance(value, (int, float)):
            return float_literal(float(value), ptype)
    elif info.kind in INT_KINDS and isinstance(value, int):
        low, high = _int_range(info)
        check_int(value, f"{what} (.{ptype} immediate)", low, high)
        if info.kind is Kind.BITS and value > 0xFFFF:
            # Bit patterns (masks, descriptors) read better in hex.
            return f"0x{value:X}"
        return str(value)
    raise ValueError(f"{what} must be a register or an immediate valid for .{ptype}, got {value!r}")


def fmt_vector(regs: Sequence[Reg]) -> str:
    return "{" + ", ".join(str(r) for r in regs) + "}"


@record(frozen=True)
class Address:
    """A memory operand ``[base+offset]``; base is a register or a symbol name."""

    base: Reg | Symbol
    offset: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.base, Reg) and self.base.cls not in (RegClass.B32, RegClass.B64):
            raise ValueError(f"an address base must be a .b32 or .b64 register, got {self.base}")
        if not isinstance(self.offset, int) or isinstance(self.offset, bool):
            raise ValueError(f"an address offset must be an integer, got {self.offset!r}")

    def __str__(self) -> str:
        if self.offset == 0:
            return f"[{self.base}]"
        # nvcc spells negative offsets as "+-4"; ptxas accepts exactly that.
        return f"[{self.base}+{self.offset}]"

    @property
    def is_32bit(self) -> bool:
        return isinstance(self.base, Reg) and self.base.cls is RegClass.B32


AddressLike = Address | Reg | Symbol


def as_address(addr: AddressLike, what: str) -> Address:
    """Accept a bare register or symbol where an address is expected."""
    if isinstance(addr, Address):
        return addr
    if isinstance(addr, (Reg, Symbol)):
        return Address(addr)
    raise ValueError(f"{what} must be an Address, a .b32/.b64 register or a symbol, got {addr!r}")


PtxVersion = tuple[int, int]


# The lines of a kernel body (Instr, Label, Comment) are plain records, never compared or
# hashed. Not frozen, as nothing mutates them (guarded() returns a copy): one is built for
# every PTX line, and a plain __init__ is the cheapest.
@record(eq=False)
class Instr:
    """One PTX instruction, without its guard and trailing ``;``.

    ``min_version`` and ``needs_arch_specific`` record what the instruction
    requires from the module header, so ``PtxModule.render`` can refuse a
    header that ptxas or the driver would reject (pitfalls 11 and 12 in the
    notes) instead of failing later inside the JIT.
    """

    text: str
    guard: Reg | None = None
    guard_negated: bool = False
    min_version: PtxVersion = (0, 0)
    needs_arch_specific: bool = False

    def guarded(self, pred: Reg, *, negate: bool = False) -> Instr:
        """The same instruction executed only where ``pred`` (or ``!pred``) holds."""
        check_pred(pred, "guard")
        if self.guard is not None:
            raise ValueError(f"instruction is already guarded by {self.guard}: {self.text}")
        return replace(self, guard=pred, guard_negated=negate)

    def render(self) -> str:
        if self.guard is None:
            return f"{self.text};"
        bang = "!" if self.guard_negated else ""
        return f"@{bang}{self.guard} {self.text};"


@record(eq=False)
class Label:
    """A branch target; names come from ``KernelBuilder.new_label`` so they are unique."""

    name: str

    def render(self) -> str:
        return f"{self.name}:"


@record(eq=False)
class Comment:
    """A ``//`` comment line."""

    text: str

    def render(self) -> str:
        return f"// {self.text}"


Line = Instr | Label | Comment
