"""Loads, stores, cvta, atomics, reductions, ldmatrix/stmatrix."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ptx_probes
import pytest

from pyfuse.backend_ptx.abi import ParamKind
from pyfuse.backend_ptx.emitter import KernelBuilder
from pyfuse.backend_ptx.instructions import memory
from pyfuse.backend_ptx.operands import Address, Instr, Reg, RegClass, Symbol

R = [Reg(RegClass.B32, i) for i in range(4)]
RD = [Reg(RegClass.B64, i) for i in range(4)]
F = [Reg(RegClass.F32, i) for i in range(4)]
H = Reg(RegClass.B16, 0)
FD = Reg(RegClass.F64, 0)


@pytest.mark.parametrize(
    ("instr", "text"),
    [
        (
            memory.ld("global", "f32", F, RD[0], nc=True),
            "ld.global.nc.v4.f32 {%f0, %f1, %f2, %f3}, [%rd0]",
        ),
        (
            memory.ld(
                "global", "u32", R[:2], Address(RD[1], 8), nc=True, eviction="L1::no_allocate"
            ),
            "ld.global.nc.L1::no_allocate.v2.u32 {%r0, %r1}, [%rd1+8]",
        ),
        (memory.ld("shared::cta", "b32", R[0], R[1]), "ld.shared::cta.b32 %r0, [%r1]"),
        (memory.ld("global", "u8", R[0], RD[0], cache="cg"), "ld.global.cg.u8 %r0, [%rd0]"),
        (memory.st("global", "f32", Address(RD[0], -4), F[0]), "st.global.f32 [%rd0+-4], %f0"),
        (memory.st("shared", "u32", R[1], 0), "st.shared.u32 [%r1], 0"),
        (memory.st("global", "b64", RD[0], RD[1:3]), "st.global.v2.b64 [%rd0], {%rd1, %rd2}"),
        (memory.cvta("global", RD[1], RD[0], to=True), "cvta.to.global.u64 %rd1, %rd0"),
        (memory.cvta("shared", R[0], R[1], to=True), "cvta.to.shared.u32 %r0, %r1"),
        (memory.mov_address(R[0], Symbol("smem")), "mov.u32 %r0, smem"),
        (memory.mapa(R[0], R[1], 1), "mapa.shared::cluster.u32 %r0, %r1, 1"),
        (
            memory.atom("global", "add", "f32", F[0], RD[0], F[1]),
            "atom.global.add.f32 %f0, [%rd0], %f1",
        ),
        (
            memory.atom(
                "shared::cta", "cas", "b32", R[0], R[1], R[2], R[3], sem="acq_rel", scope="cta"
            ),
            "atom.acq_rel.cta.shared::cta.cas.b32 %r0, [%r1], %r2, %r3",
        ),
        (
            memory.atom("global", "add", "bf16x2", R[0], RD[0], R[1]),
            "atom.global.add.noftz.bf16x2 %r0, [%rd0], %r1",
        ),
        (memory.red("global", "add", "f32", RD[0], F[0]), "red.global.add.f32 [%rd0], %f0"),
        (
            memory.red("global", "add", "f32", RD[0], F),
            "red.global.add.v4.f32 [%rd0], {%f0, %f1, %f2, %f3}",
        ),
        (
            memory.red("global", "max", "u32", RD[0], R[0], sem="relaxed", scope="gpu"),
            "red.relaxed.gpu.global.max.u32 [%rd0], %r0",
        ),
        (
            memory.ldmatrix(R, R[0], trans=True),
            "ldmatrix.sync.aligned.m8n8.x4.trans.shared::cta.b16 {%r0, %r1, %r2, %r3}, [%r0]",
        ),
        (
            memory.stmatrix(R[0], R[:2]),
            "stmatrix.sync.aligned.m8n8.x2.shared::cta.b16 [%r0], {%r0, %r1}",
        ),
    ],
)
def test_exact_text(instr: Instr, text: str) -> None:
    assert instr.text == text


def test_vector_red_records_its_ptx_version() -> None:
    assert memory.red("global", "add", "f32", RD[0], F[:2]).min_version == (8, 1)
    assert memory.red("global", "add", "f32", RD[0], F[0]).min_version == (0, 0)


def test_tensor_map_address_is_mov_then_cvta_param() -> None:
    kb = KernelBuilder("k")
    tmap = kb.param("map", ParamKind.TENSOR_MAP)
    texts = [i.text for i in memory.tensor_map_address(RD[0], tmap)]
    assert texts == ["mov.b64 %rd0, map", "cvta.param.u64 %rd0, %rd0"]
    with pytest.raises(ValueError, match="not a tensor map"):
        memory.tensor_map_address(RD[0], kb.param("p", ParamKind.PTR))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: memory.ld("texture", "f32", F[0], RD[0]), "space must be one of"),
        (
            lambda: memory.ld("shared", "f32", F[0], R[0], nc=True),
            r"\.nc is only valid for \.global",
        ),
        (lambda: memory.ld("global", "f32", F[0], R[0]), "32-bit address register is only valid"),
        (lambda: memory.ld("global", "f32", F[:3], RD[0]), "vector width must be 1, 2 or 4"),
        (lambda: memory.ld("global", "b64", RD, RD[0]), "at most 128 bits"),
        (
            lambda: memory.ld("global", "f32", R[0], RD[0], cache="cg", eviction="L1::evict_last"),
            "cannot be combined",
        ),
        (lambda: memory.ld("global", "f32", H, RD[0]), r"compatible with \.f32"),
        (lambda: memory.ld("global", "u32", H, RD[0]), r"compatible with \.u32"),
        (
            lambda: memory.st("global", "f32", RD[0], 1.0, cache="ca"),
            "cache operator must be one of",
        ),
        (lambda: memory.st("param", "u32", RD[0], R[0]), "space must be one of"),
        (lambda: memory.cvta("global", R[0], RD[0], to=True), "32-bit result is only meaningful"),
        (
            lambda: memory.atom("global", "cas", "b32", R[0], RD[0], R[1]),
            "operand c is required for cas",
        ),
        (lambda: memory.atom("global", "add", "b32", R[0], RD[0], R[1]), "dtype must be one of"),
        (lambda: memory.atom("global", "pow", "u32", R[0], RD[0], R[1]), "op must be one of"),
        (
            lambda: memory.atom("global", "add", "u32", R[0], RD[0], R[1], sem="acquire_release"),
            "semantics",
        ),
        (lambda: memory.red("global", "exch", "b32", RD[0], R[0]), "returns a value; use atom"),
        (
            lambda: memory.red("global", "max", "f32", RD[0], F[:2]),
            r"red\.max: dtype must be one of",
        ),
        (lambda: memory.red("shared", "add", "f32", R[0], F[:2]), r"\.global only"),
        (
            lambda: memory.red("global", "add", "u32", RD[0], R[:2]),
            "vector form is defined for f32",
        ),
        (lambda: memory.ldmatrix(R[:3], R[0]), "1, 2 or 4 registers"),
        (lambda: memory.stmatrix(RD[0], R[:1]), None),
        (lambda: Address(F[0]), r"\.b32 or \.b64 register"),
    ],
)
def test_validation(call: Callable[[], object], message: str | None) -> None:
    if message is None:
        call()
        return
    with pytest.raises(ValueError, match=message):
        call()


def test_every_memory_form_assembles(assemble_lines: Callable[..., Any]) -> None:
    assemble_lines(ptx_probes.memory_probe)
