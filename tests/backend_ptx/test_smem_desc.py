"""wgmma shared-memory descriptors against values worked out by hand from the PTX ISA table.

Bit layout (PTX ISA, matrix descriptor format): start (addr & 0x3FFFF) >> 4 in bits
0-13, LBO >> 4 in 16-29, SBO >> 4 in 32-45, base offset in 49-51, swizzle in 62-63
with 128B = 1, 64B = 2, 32B = 3.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pyfuse.backend_ptx import smem_desc
from pyfuse.backend_ptx.emitter import ParamKind, PtxModule
from pyfuse.backend_ptx.instructions import control, memory
from pyfuse.backend_ptx.operands import RegClass
from pyfuse.backend_ptx.smem_desc import Swizzle


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        # K-major bf16 tile at 0x400, 128B swizzle: start 0x40, LBO 16 B -> 1, SBO 1024 B -> 64.
        (dict(start_address=0x400, lbo=16, sbo=1024, swizzle=Swizzle.B128), 0x4000_0040_0001_0040),
        # The H200-verified constant part (notes 4.3) is the same with start address 0.
        (dict(start_address=0, lbo=16, sbo=1024, swizzle=Swizzle.B128), 0x4000_0040_0001_0000),
        # MN-major B: LBO 8192 -> 512 (0x200 << 16), SBO 1024, start 0x2400 -> 0x240.
        (
            dict(start_address=0x2400, lbo=8192, sbo=1024, swizzle=Swizzle.B128),
            0x4000_0040_0200_0240,
        ),
        # 64B swizzle (code 2 -> 0x8 in the top nibble), SBO 512 -> 32, start 0x800 -> 0x80.
        (dict(start_address=0x800, lbo=16, sbo=512, swizzle=Swizzle.B64), 0x8000_0020_0001_0080),
        # 32B swizzle (code 3 -> 0xC), SBO 256 -> 16.
        (dict(start_address=0x100, lbo=16, sbo=256, swizzle=Swizzle.B32), 0xC000_0010_0001_0010),
        # No swizzle (interleave): LBO 128 -> 8, SBO 256 -> 16.
        (dict(start_address=0x10, lbo=128, sbo=256, swizzle=Swizzle.NONE), 0x0000_0010_0008_0001),
        # Base offset 1 sits at bit 49.
        (
            dict(start_address=0x480, lbo=16, sbo=1024, swizzle=Swizzle.B128, base_offset=1),
            0x4002_0040_0001_0048,
        ),
        # Largest start address that fits: 0x3FFF0 -> 0x3FFF.
        (dict(start_address=0x3FFF0, lbo=0, sbo=0, swizzle=Swizzle.NONE), 0x3FFF),
    ],
)
def test_encode_matches_hand_derived_values(kwargs: dict[str, Any], expected: int) -> None:
    assert smem_desc.encode(**kwargs) == expected
    decoded = smem_desc.decode(expected)
    assert decoded.start_address == kwargs["start_address"]
    assert decoded.lbo == kwargs["lbo"] and decoded.sbo == kwargs["sbo"]
    assert decoded.swizzle is kwargs["swizzle"]
    assert decoded.base_offset == kwargs.get("base_offset", 0)


def test_swizzle_codes_differ_between_descriptor_and_tma() -> None:
    """Pitfall 1 in the notes: TMA SWIZZLE_128B is 3, the descriptor's 128B is 1."""
    assert (Swizzle.B128.desc_code, Swizzle.B128.tma_code) == (1, 3)
    assert (Swizzle.B64.desc_code, Swizzle.B64.tma_code) == (2, 2)
    assert (Swizzle.B32.desc_code, Swizzle.B32.tma_code) == (3, 1)
    assert (Swizzle.NONE.desc_code, Swizzle.NONE.tma_code) == (0, 0)
    assert [s.pattern_bytes for s in (Swizzle.B32, Swizzle.B64, Swizzle.B128)] == [256, 512, 1024]


def test_base_offset_is_zero_on_the_pattern_boundary() -> None:
    assert smem_desc.base_offset_for(0x400, Swizzle.B128) == 0
    assert smem_desc.base_offset_for(0x480, Swizzle.B128) == 1
    assert smem_desc.base_offset_for(0x780, Swizzle.B128) == 7
    assert smem_desc.base_offset_for(0x480, Swizzle.NONE) == 0


def test_k_major_defaults() -> None:
    assert smem_desc.k_major(Swizzle.B128) == (16, 1024)
    assert smem_desc.k_major(Swizzle.B64) == (16, 512)
    assert smem_desc.k_major(Swizzle.B128, rows_stride_bytes=2048) == (16, 2048)
    with pytest.raises(ValueError, match="explicit LBO/SBO"):
        smem_desc.k_major(Swizzle.NONE)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(start_address=0x40000, lbo=16, sbo=1024, swizzle=Swizzle.B128), "below 2\\*\\*18"),
        (dict(start_address=0x408, lbo=16, sbo=1024, swizzle=Swizzle.B128), "16-byte aligned"),
        (dict(start_address=0, lbo=24, sbo=1024, swizzle=Swizzle.B128), "LBO .* multiple of 16"),
        (dict(start_address=0, lbo=16, sbo=1 << 18, swizzle=Swizzle.B128), "SBO .* must be in"),
        (dict(start_address=0, lbo=16, sbo=1024, swizzle=1), "must be a Swizzle"),
        (
            dict(start_address=0, lbo=16, sbo=1024, swizzle=Swizzle.B128, base_offset=8),
            "base offset",
        ),
    ],
)
def test_encode_validation(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        smem_desc.encode(**kwargs)


def test_emitted_descriptor_instructions_and_assembly(assemble_clean: Callable[..., Any]) -> None:
    module = PtxModule()
    kb = module.kernel("desc")
    out = kb.param("out", ParamKind.PTR)
    base = kb.reg(RegClass.B32)
    kb.emit(memory.mov_address(base, kb.dynamic_smem()))
    desc = smem_desc.emit_descriptor(kb, base, lbo=16, sbo=1024, swizzle=Swizzle.B128)
    advanced = smem_desc.emit_advance(kb, desc, 64)
    texts = [i.text for i in kb.instructions()[1:]]
    assert texts == [
        "and.b32 %r1, %r0, 0x3FFFF",
        "shr.b32 %r1, %r1, 4",
        "cvt.u64.u32 %rd0, %r1",
        "or.b64 %rd1, %rd0, 0x4000004000010000",
        "add.s64 %rd2, %rd1, 4",
    ]
    raw, pointer = kb.regs(RegClass.B64, 2)
    kb.emit(
        memory.ld_param(raw, out),
        memory.cvta("global", pointer, raw, to=True),
        memory.st("global", "b64", pointer, advanced),
        control.ret(),
    )
    assemble_clean(module.render())
    with pytest.raises(ValueError, match="multiple of 16"):
        smem_desc.emit_advance(kb, desc, 8)
