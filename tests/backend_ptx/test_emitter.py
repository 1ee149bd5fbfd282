"""The module/kernel skeleton: params, directives, registers, labels, determinism, checks."""

from __future__ import annotations

import pytest

from pyfuse.backend_ptx.emitter import (
    PTX_VERSION,
    Directives,
    KernelBuilder,
    ParamKind,
    PtxModule,
)
from pyfuse.backend_ptx.instructions import arith, control, memory, special, wgmma
from pyfuse.backend_ptx.operands import Address, Instr, Reg, RegClass, Symbol


def _tiny_module(**module_args: object) -> tuple[PtxModule, KernelBuilder]:
    module = PtxModule(**module_args)  # type: ignore[arg-type]
    kb = module.kernel("tiny", Directives(maxntid=(128,)))
    return module, kb


def test_header_params_registers_and_body_render_exactly() -> None:
    module = PtxModule()
    kb = module.kernel("k", Directives(maxntid=(128,)))
    out = kb.param("out", ParamKind.PTR)
    n = kb.param("n", ParamKind.U32)
    kb.param("scale", ParamKind.F32)
    kb.param("map", ParamKind.TENSOR_MAP)
    raw, ptr = kb.reg(RegClass.B64), kb.reg(RegClass.B64)
    count, tid = kb.reg(RegClass.B32), kb.reg(RegClass.B32)
    kb.emit(memory.ld_param(raw, out), memory.cvta("global", ptr, raw, to=True))
    kb.emit(memory.ld_param(count, n), special.read_sreg(tid, "tid.x"))
    kb.emit(memory.st("global", "u32", ptr, tid), control.ret())
    assert module.render() == (
        ".version 9.0\n"
        ".target sm_90a\n"
        ".address_size 64\n"
        "\n"
        ".visible .entry k(\n"
        "    .param .u64 out,\n"
        "    .param .u32 n,\n"
        "    .param .f32 scale,\n"
        "    .param .align 64 .b8 map[128]\n"
        ")\n"
        ".maxntid 128, 1, 1\n"
        "{\n"
        "    .reg .b32 %r<2>;\n"
        "    .reg .b64 %rd<2>;\n"
        "\n"
        "    ld.param.u64 %rd0, [out];\n"
        "    cvta.to.global.u64 %rd1, %rd0;\n"
        "    ld.param.u32 %r0, [n];\n"
        "    mov.u32 %r1, %tid.x;\n"
        "    st.global.u32 [%rd1], %r1;\n"
        "    ret;\n"
        "}\n"
    )


def test_dynamic_smem_is_declared_once_at_module_scope() -> None:
    module = PtxModule()
    for name in ("a", "b"):
        kb = module.kernel(name)
        base = kb.reg(RegClass.B32)
        kb.emit(memory.mov_address(base, kb.dynamic_smem()), control.ret())
    text = module.render()
    assert text.count(".extern .shared .align 1024 .b8 smem[];") == 1
    assert "mov.u32 %r0, smem;" in text


def test_render_is_deterministic() -> None:
    def build() -> str:
        module, kb = _tiny_module()
        regs = kb.regs(RegClass.F32, 3)
        pred = kb.reg(RegClass.PRED)
        label = kb.new_label("loop")
        kb.place(label)
        kb.emit(
            arith.add("f32", regs[0], regs[1], regs[2]), arith.setp("lt", "f32", pred, regs[0], 1.0)
        )
        kb.emit(control.bra(label).guarded(pred), control.ret())
        return module.render()

    assert build() == build()


def test_register_classes_are_declared_in_fixed_order_with_counts() -> None:
    module, kb = _tiny_module()
    kb.regs(RegClass.F64, 1)
    kb.regs(RegClass.PRED, 2)
    kb.regs(RegClass.B16, 3)
    kb.emit(control.ret())
    body = module.render()
    decls = [line.strip() for line in body.splitlines() if line.strip().startswith(".reg")]
    assert decls == [".reg .pred %p<2>;", ".reg .b16 %rs<3>;", ".reg .f64 %fd<1>;"]


def test_labels_are_unique_and_guarded_instructions_render() -> None:
    kb = KernelBuilder("k")
    first, second = kb.new_label("wait"), kb.new_label("wait")
    assert first != second
    pred = kb.reg(RegClass.PRED)
    assert control.bra(first).guarded(pred, negate=True).render() == f"@!%p0 bra {first.name};"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"maxntid": (128,), "reqntid": (128,)}, "cannot be combined"),
        ({"minnctapersm": 1}, "needs .maxntid or .reqntid"),
        ({"maxntid": (2048,)}, r"\[1, 1024\]"),
        ({"maxntid": (64, 64)}, "at most 1024 threads"),
        ({"maxnreg": 300}, r"\.maxnreg must be an integer in \[1, 255\]"),
        ({"reqnctapercluster": (2, 1, 1, 1)}, "1 to 3 extents"),
        ({"reqnctapercluster": (2,), "maxclusterrank": 4}, "cannot both be given"),
    ],
)
def test_directive_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Directives(**kwargs)  # type: ignore[arg-type]


def test_directives_render_between_params_and_body() -> None:
    d = Directives(maxntid=(384,), minnctapersm=1, maxnreg=168, reqnctapercluster=(2, 1))
    assert d.lines() == [
        ".maxntid 384, 1, 1",
        ".minnctapersm 1",
        ".maxnreg 168",
        ".reqnctapercluster 2, 1, 1",
    ]


@pytest.mark.parametrize(
    ("name", "kind", "message"),
    [
        ("smem", ParamKind.PTR, "reserved"),
        ("1abc", ParamKind.PTR, "PTX identifier"),
        ("x", "u32", "ParamKind"),
    ],
)
def test_param_validation(name: str, kind: object, message: str) -> None:
    kb = KernelBuilder("k")
    with pytest.raises(ValueError, match=message):
        kb.param(name, kind)  # type: ignore[arg-type]


def test_duplicate_names_are_rejected() -> None:
    module, kb = _tiny_module()
    kb.param("x", ParamKind.PTR)
    with pytest.raises(ValueError, match="already has a param"):
        kb.param("x", ParamKind.U32)
    with pytest.raises(ValueError, match="already has a kernel"):
        module.kernel("tiny")


def test_tensor_map_param_cannot_be_ld_param() -> None:
    kb = KernelBuilder("k")
    tmap = kb.param("map", ParamKind.TENSOR_MAP)
    with pytest.raises(ValueError, match=r"never ld\.param"):
        memory.ld_param(kb.reg(RegClass.B64), tmap)


def test_emit_refuses_raw_text() -> None:
    kb = KernelBuilder("k")
    with pytest.raises(ValueError, match="not text"):
        kb.emit("ret;")  # type: ignore[arg-type]


def test_version_header_checks() -> None:
    with pytest.raises(ValueError, match="newer than"):
        PtxModule(version=(9, 1))
    with pytest.raises(ValueError, match="target"):
        PtxModule(target="hopper")
    with pytest.raises(ValueError, match="at least one kernel"):
        PtxModule().render()
    assert PTX_VERSION == (9, 0)


def test_instruction_requirements_are_checked_against_the_header() -> None:
    module, kb = _tiny_module(version=(8, 0))
    base = kb.reg(RegClass.B32)
    kb.emit(
        memory.red("global", "add", "f32", Address(kb.reg(RegClass.B64)), kb.regs(RegClass.F32, 4))
    )
    with pytest.raises(ValueError, match=r"needs PTX \.version 8\.1"):
        module.render()
    module, kb = _tiny_module(target="sm_90")
    kb.emit(wgmma.fence())
    with pytest.raises(ValueError, match="arch-specific target"):
        module.render()
    del base


def test_operand_formatting_rules() -> None:
    f = Reg(RegClass.F32, 0)
    r = Reg(RegClass.B32, 0)
    assert arith.add("f32", f, f, 1).text == "add.f32 %f0, %f0, 0f3F800000"
    assert arith.mov("f64", Reg(RegClass.F64, 1), -2.5).text == "mov.f64 %fd1, 0dC004000000000000"
    assert arith.mov("b32", r, 0xFFFF0000).text == "mov.b32 %r0, 0xFFFF0000"
    assert (
        arith.add("f32", f, r, r).text == "add.f32 %f0, %r0, %r0"
    )  # b32 regs hold any 32-bit type
    with pytest.raises(ValueError, match=r"compatible with \.u32"):
        arith.add("u32", r, f, r)  # ptxas: "Arguments mismatch"
    with pytest.raises(ValueError, match=r"must be in \[0, 4294967295\], got -1"):
        arith.add("u32", r, r, -1)
    assert str(Address(Symbol("p"), -4)) == "[p+-4]"
    assert Instr("exit").render() == "exit;"
