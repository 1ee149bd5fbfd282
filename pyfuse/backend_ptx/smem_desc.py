"""The 64-bit wgmma shared-memory matrix descriptor, and the swizzle modes behind it.

Layout (PTX ISA, "Matrix Descriptor Format" for wgmma; sm_90):

    bits  0-13  start address   (addr & 0x3FFFF) >> 4
    bits 16-29  leading-dimension byte offset (LBO) >> 4
    bits 32-45  stride-dimension byte offset (SBO) >> 4
    bits 49-51  base offset     0 when the tile starts on its swizzle-pattern
                                boundary (1024/512/256 B), else (addr >> 7) & 7
    bits 62-63  layout type     0 none, 1 = 128B, 2 = 64B, 3 = 32B swizzle

The swizzle *codes* here differ from the TMA enum (``CU_TENSOR_MAP_SWIZZLE_128B``
is 3 but the descriptor's 128B is 1), which is why :class:`Swizzle` carries both:
one fact, one place. The span widths pyfuse uses for operand tiles and the 8-row atom are
:data:`pyfuse.ir.hopper.SM90`'s; a pattern is 8 rows of its span.

For K-major operands with a swizzle, LBO is unused (CUTLASS writes 1, i.e. 16 B)
and SBO is the distance between 8-row groups (8 x swizzle span when dense);
advancing along K inside one swizzle atom adds k x 32 B to the start address.
For MN-major operands LBO is the distance between swizzle-atom columns and SBO
between groups of 8 K-rows (verified on H200: swapping them gives wrong results).
"""

from __future__ import annotations

import enum

from pyfuse.backend_ptx.emitter import KernelBuilder
from pyfuse.backend_ptx.instructions import arith, convert, logic
from pyfuse.backend_ptx.operands import Reg, RegClass, check_reg
from pyfuse.ir.hopper import SM90
from pyfuse.ir.records import record


@record(frozen=True)
class SwizzleInfo:
    span_bytes: int  # bytes in one swizzled row segment (the "atom" width)
    desc_code: int  # wgmma descriptor bits 62-63
    tma_code: int  # CUtensorMapSwizzle value


class Swizzle(enum.Enum):
    NONE = SwizzleInfo(span_bytes=16, desc_code=0, tma_code=0)
    B32 = SwizzleInfo(span_bytes=32, desc_code=3, tma_code=1)
    B64 = SwizzleInfo(span_bytes=64, desc_code=2, tma_code=2)
    B128 = SwizzleInfo(span_bytes=128, desc_code=1, tma_code=3)

    @property
    def span_bytes(self) -> int:
        return self.value.span_bytes

    @property
    def pattern_bytes(self) -> int:
        """The pattern repeats every swizzle atom: 8 rows of ``span_bytes``."""
        return SM90.swizzle_atom_rows * self.value.span_bytes

    @property
    def desc_code(self) -> int:
        return self.value.desc_code

    @property
    def tma_code(self) -> int:
        return self.value.tma_code


SMEM_ADDRESS_BITS = 18  # the descriptor keeps (addr & 0x3FFFF) >> 4
_FIELD_MASK = (1 << 14) - 1
_MAX_OFFSET_BYTES = _FIELD_MASK << 4


def _check_bytes(value: int, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{what} must be an integer number of bytes, got {value!r}")
    if value % 16:
        raise ValueError(f"{what} must be a multiple of 16 bytes, got {value}")
    if not 0 <= value <= _MAX_OFFSET_BYTES:
        raise ValueError(f"{what} must be in [0, {_MAX_OFFSET_BYTES}] bytes, got {value}")
    return value


def base_offset_for(address: int, swizzle: Swizzle) -> int:
    """The descriptor's base offset for a tile starting at ``address`` (0 when aligned)."""
    if swizzle is Swizzle.NONE or address % swizzle.pattern_bytes == 0:
        return 0
    return (address >> 7) & 0x7


def encode(
    start_address: int,
    *,
    lbo: int,
    sbo: int,
    swizzle: Swizzle,
    base_offset: int = 0,
) -> int:
    """Pack a descriptor from byte values (start address, LBO, SBO) and the swizzle."""
    if not isinstance(swizzle, Swizzle):
        raise ValueError(f"swizzle must be a Swizzle, got {swizzle!r}")
    if not isinstance(start_address, int) or not 0 <= start_address < (1 << SMEM_ADDRESS_BITS):
        raise ValueError(
            f"start address must be a shared-memory byte address below 2**18, got {start_address!r}"
        )
    if start_address % 16:
        raise ValueError(f"start address must be 16-byte aligned, got {start_address}")
    _check_bytes(lbo, "LBO (leading-dimension byte offset)")
    _check_bytes(sbo, "SBO (stride-dimension byte offset)")
    if not isinstance(base_offset, int) or not 0 <= base_offset <= 7:
        raise ValueError(f"base offset must be in [0, 7], got {base_offset!r}")
    return (
        ((start_address & 0x3FFFF) >> 4)
        | ((lbo >> 4) << 16)
        | ((sbo >> 4) << 32)
        | (base_offset << 49)
        | (swizzle.desc_code << 62)
    )


@record(frozen=True)
class Descriptor:
    """The fields of a decoded descriptor, in bytes (for tests and dumps)."""

    start_address: int
    lbo: int
    sbo: int
    base_offset: int
    swizzle: Swizzle


_BY_DESC_CODE = {s.desc_code: s for s in Swizzle}


def decode(desc: int) -> Descriptor:
    if not isinstance(desc, int) or not 0 <= desc < (1 << 64):
        raise ValueError(f"a descriptor is a 64-bit unsigned integer, got {desc!r}")
    return Descriptor(
        start_address=(desc & _FIELD_MASK) << 4,
        lbo=((desc >> 16) & _FIELD_MASK) << 4,
        sbo=((desc >> 32) & _FIELD_MASK) << 4,
        base_offset=(desc >> 49) & 0x7,
        swizzle=_BY_DESC_CODE[(desc >> 62) & 0x3],
    )


def k_major(swizzle: Swizzle, *, rows_stride_bytes: int | None = None) -> tuple[int, int]:
    """(LBO, SBO) for a densely packed K-major tile with ``swizzle`` (CUTLASS convention).

    Swizzled: LBO is ignored by hardware (16 B written), SBO = 8 rows x span.
    ``rows_stride_bytes`` overrides SBO when 8-row groups are not dense.
    """
    if swizzle is Swizzle.NONE:
        raise ValueError("k_major: an unswizzled (interleave) layout needs explicit LBO/SBO")
    sbo = rows_stride_bytes if rows_stride_bytes is not None else swizzle.pattern_bytes
    return 16, sbo


def emit_descriptor(
    kb: KernelBuilder,
    smem_address: Reg,
    *,
    lbo: int,
    sbo: int,
    swizzle: Swizzle,
    base_offset: int = 0,
) -> Reg:
    """Build a descriptor in a fresh .b64 register from a 32-bit shared address register.

    The constant fields are folded into one 64-bit immediate, so this is four
    instructions that ptxas reduces further when the address is uniform.
    """
    check_reg(smem_address, "b32", "emit_descriptor: smem address")
    constant = encode(0, lbo=lbo, sbo=sbo, swizzle=swizzle, base_offset=base_offset)
    field = kb.reg(RegClass.B32)
    wide = kb.reg(RegClass.B64)
    desc = kb.reg(RegClass.B64)
    kb.emit(
        logic.and_("b32", field, smem_address, 0x3FFFF),
        logic.shr("b32", field, field, 4),
        convert.cvt("u64", "u32", wide, field),
        logic.or_("b64", desc, wide, constant),
    )
    return desc


def emit_advance(kb: KernelBuilder, desc: Reg, byte_offset: int) -> Reg:
    """A new descriptor whose start address is ``byte_offset`` bytes further.

    Used for the K-steps inside a swizzle atom (+32 B per k16 for bf16) and for
    moving to the next 64-row block. Only the start-address field changes, so the
    offset must keep the address inside shared memory.
    """
    check_reg(desc, "b64", "emit_advance: descriptor")
    if not isinstance(byte_offset, int) or byte_offset % 16:
        raise ValueError(f"emit_advance: byte offset must be a multiple of 16, got {byte_offset!r}")
    if not -(1 << SMEM_ADDRESS_BITS) < byte_offset < (1 << SMEM_ADDRESS_BITS):
        raise ValueError(f"emit_advance: byte offset must stay below 2**18, got {byte_offset}")
    out = kb.reg(RegClass.B64)
    kb.emit(arith.add("s64", out, desc, byte_offset >> 4))
    return out
