"""Arithmetic, conversion and bit instructions: exact text, validation, and ptxas acceptance."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ptx_probes
import pytest

from pyfuse.backend_ptx.instructions import arith, convert, logic
from pyfuse.backend_ptx.operands import Instr, Reg, RegClass

P = Reg(RegClass.PRED, 0)
Q = Reg(RegClass.PRED, 1)
H = Reg(RegClass.B16, 0)
R = Reg(RegClass.B32, 0)
R1 = Reg(RegClass.B32, 1)
RD = Reg(RegClass.B64, 0)
F = Reg(RegClass.F32, 0)
F1 = Reg(RegClass.F32, 1)
FD = Reg(RegClass.F64, 0)


@pytest.mark.parametrize(
    ("instr", "text"),
    [
        (arith.add("s32", R, R, 5, sat=True), "add.sat.s32 %r0, %r0, 5"),
        (arith.add("f32", F, F, F1, rounding="rz", ftz=True), "add.rz.ftz.f32 %f0, %f0, %f1"),
        (arith.sub("bf16", H, H, H, rounding="rn"), "sub.rn.bf16 %rs0, %rs0, %rs0"),
        (arith.mul("u32", RD, R, 4, mode="wide"), "mul.wide.u32 %rd0, %r0, 4"),
        (arith.mul("s32", R, R, R1, mode="hi"), "mul.hi.s32 %r0, %r0, %r1"),
        (arith.mad("u32", R, R, 3, R1), "mad.lo.u32 %r0, %r0, 3, %r1"),
        (arith.fma("f32", F, F, F1, 0.5), "fma.rn.f32 %f0, %f0, %f1, 0f3F000000"),
        (arith.div("f32", F, F, F1, mode="approx"), "div.approx.f32 %f0, %f0, %f1"),
        (arith.div("s32", R, R, 7), "div.s32 %r0, %r0, 7"),
        (arith.rem("u32", R, R, 7), "rem.u32 %r0, %r0, 7"),
        (arith.neg("f32", F, F1), "neg.f32 %f0, %f1"),
        (arith.abs_("s32", R, R1), "abs.s32 %r0, %r1"),
        (arith.max_("f32", F, F, F1, nan=True), "max.NaN.f32 %f0, %f0, %f1"),
        (arith.min_("u32", R, R, 9), "min.u32 %r0, %r0, 9"),
        (arith.ex2("f32", F, F1, ftz=True), "ex2.approx.ftz.f32 %f0, %f1"),
        (arith.ex2("bf16", H, H), "ex2.approx.ftz.bf16 %rs0, %rs0"),
        (arith.lg2("f32", F, F1), "lg2.approx.f32 %f0, %f1"),
        (arith.rcp("f32", F, F1, mode="approx", ftz=True), "rcp.approx.ftz.f32 %f0, %f1"),
        (arith.rcp("f64", FD, FD), "rcp.rn.f64 %fd0, %fd0"),
        (arith.sqrt("f32", F, F1), "sqrt.rn.f32 %f0, %f1"),
        (arith.rsqrt("f32", F, F1), "rsqrt.approx.f32 %f0, %f1"),
        (arith.tanh("f32", F, F1), "tanh.approx.f32 %f0, %f1"),
        (arith.setp("lt", "f32", P, F, 0.0), "setp.lt.f32 %p0, %f0, 0f00000000"),
        (arith.setp("hs", "u32", P, R, R1, q=Q), "setp.hs.u32 %p0|%p1, %r0, %r1"),
        (
            arith.setp("ne", "s32", P, R, 0, bool_op="and", c=Q, c_negated=True),
            "setp.ne.and.s32 %p0, %r0, 0, !%p1",
        ),
        (arith.selp("f32", F, F1, 1.0, P), "selp.f32 %f0, %f1, 0f3F800000, %p0"),
        (arith.mov("pred", P, 1), "mov.pred %p0, 1"),
        (arith.pack(RD, [R, R1]), "mov.b64 %rd0, {%r0, %r1}"),
        (arith.unpack([R, R1], RD), "mov.b64 {%r0, %r1}, %rd0"),
        (convert.cvt("f32", "bf16", F, H), "cvt.f32.bf16 %f0, %rs0"),
        (convert.cvt("bf16", "f32", H, F, rounding="rn"), "cvt.rn.bf16.f32 %rs0, %f0"),
        (
            convert.cvt("f16", "f32", H, F, rounding="rn", relu=True),
            "cvt.rn.relu.f16.f32 %rs0, %f0",
        ),
        (convert.cvt("s32", "f32", R, F, rounding="rzi"), "cvt.rzi.s32.f32 %r0, %f0"),
        (convert.cvt("f32", "u32", F, R, rounding="rn"), "cvt.rn.f32.u32 %f0, %r0"),
        (convert.cvt("f32", "f32", F, F1, rounding="rni"), "cvt.rni.f32.f32 %f0, %f1"),
        (convert.cvt("u8", "u32", H, R, sat=True), "cvt.sat.u8.u32 %rs0, %r0"),
        (convert.cvt("u64", "u32", RD, R), "cvt.u64.u32 %rd0, %r0"),
        (convert.cvt_pack("bf16x2", R, hi=F1, lo=F), "cvt.rn.bf16x2.f32 %r0, %f1, %f0"),
        (logic.and_("b32", R, F, 0x7FFFFFFF), "and.b32 %r0, %f0, 0x7FFFFFFF"),
        (logic.or_("pred", P, P, Q), "or.pred %p0, %p0, %p1"),
        (logic.not_("b32", R, R1), "not.b32 %r0, %r1"),
        (logic.shl("b32", R, R1, 3), "shl.b32 %r0, %r1, 3"),
        (logic.shr("s32", R, R1, R), "shr.s32 %r0, %r1, %r0"),
        (logic.popc("b64", R, RD), "popc.b64 %r0, %rd0"),
        (logic.bfe("u32", R, R1, 8, 4), "bfe.u32 %r0, %r1, 8, 4"),
        (logic.prmt(R, R, R1, 0x5410), "prmt.b32 %r0, %r0, %r1, 21520"),
        (logic.lop3(R, R, R1, R, 0x96), "lop3.b32 %r0, %r0, %r1, %r0, 150"),
    ],
)
def test_exact_text(instr: Instr, text: str) -> None:
    assert instr.text == text


Thunk = Callable[[], object]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: arith.add("u8", R, R, R), r"add: dtype must be one of"),
        (lambda: arith.add("u32", R, R, R, sat=True), r"\.sat is defined for s32 only"),
        (lambda: arith.add("f64", FD, FD, FD, ftz=True), r"\.ftz applies to f32"),
        (lambda: arith.add("bf16", H, H, H, rounding="rz"), r"rounding must be one of \['rn'\]"),
        (lambda: arith.add("f32", R1, F, 1.5), None),  # b32 destination is legal
        (
            lambda: arith.mul("u64", RD, RD, RD, mode="wide"),
            r"mul\.wide is defined for 16- and 32-bit",
        ),
        (lambda: arith.mul("u32", R, R, R, mode="lo", rounding="rn"), "takes no rounding"),
        (lambda: arith.mul("u32", R, R, R, mode="wide"), r"compatible with \.u64"),
        (lambda: arith.div("f32", F, F, F), r"div\.f32 needs a mode"),
        (lambda: arith.div("f64", FD, FD, FD, mode="approx"), r"mode must be one of"),
        (lambda: arith.neg("u32", R, R), "dtype must be one of"),
        (lambda: arith.max_("f64", FD, FD, FD, nan=True), r"\.NaN is not defined for f64"),
        (lambda: arith.lg2("f64", FD, FD), "dtype must be one of"),
        (lambda: arith.rcp("f64", FD, FD, mode="approx"), r"rcp\.approx\.ftz\.f64"),
        (lambda: arith.sqrt("f64", FD, FD, mode="approx"), "mode must be one of"),
        (lambda: arith.setp("lo", "s32", P, R, R), "comparison must be one of"),
        (lambda: arith.setp("lt", "b32", P, R, R), "comparison must be one of"),
        (lambda: arith.setp("lt", "f32", R, F, F), "predicate register"),
        (lambda: arith.setp("lt", "f32", P, F, F, bool_op="and"), "given together"),
        (lambda: arith.selp("f32", F, F, F, R), "predicate register"),
        (lambda: arith.mov("pred", P, 2), "0 or 1"),
        (lambda: arith.mov("f32", F, True), "not True"),
        (lambda: arith.mov("u32", R, 1.5), "immediate valid for .u32"),
        (lambda: arith.pack(RD, [R, H]), "one width"),
        (lambda: convert.cvt("bf16", "f32", H, F), "narrowing float cvt must say how to round"),
        (lambda: convert.cvt("f32", "bf16", F, H, rounding="rn"), "widening float cvt"),
        (lambda: convert.cvt("f32", "f32", F, F, rounding="rn"), "rounding must be one of"),
        (lambda: convert.cvt("s32", "f32", R, F), "float-to-int cvt must say how to round"),
        (lambda: convert.cvt("f32", "s32", F, R), "int-to-float cvt must say how to round"),
        (
            lambda: convert.cvt("u32", "s32", R, R, rounding="rzi"),
            "int-to-int cvt takes no rounding",
        ),
        (lambda: convert.cvt("f64", "s32", FD, R, rounding="rn", ftz=True), "ftz needs an f32"),
        (lambda: convert.cvt("f16", "f64", H, FD, rounding="rn", relu=True), r"\.relu is defined"),
        (lambda: convert.cvt("f32", "bf16", F, R), r"compatible with \.bf16"),
        (
            lambda: convert.cvt_pack("bf16x2", R, hi=R, lo=F, rounding="rm"),
            "rounding must be one of",
        ),
        (lambda: convert.cvt_pack("bf16x2", H, hi=F, lo=F), r"compatible with \.b32"),
        (lambda: logic.and_("u32", R, R, R), "dtype must be one of"),
        (lambda: logic.or_("pred", P, P, 1), "predicate register"),
        (lambda: logic.shl("b32", R, R, -1), r"must be in \[0, 4294967295\]"),
        (lambda: logic.lop3(R, R, R, R, 256), r"lut must be in \[0, 255\]"),
        (lambda: logic.prmt(R, R, R, 0, mode="xyz"), "mode must be one of"),
    ],
)
def test_validation(call: Thunk, message: str | None) -> None:
    if message is None:
        call()
        return
    with pytest.raises(ValueError, match=message):
        call()


def test_every_arith_form_assembles(assemble_lines: Callable[..., Any]) -> None:
    assemble_lines(ptx_probes.arith_probe)
