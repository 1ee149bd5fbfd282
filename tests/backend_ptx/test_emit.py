"""emit_ptx: kernels from the real pipeline assemble cleanly with ptxas (no spills, no local
memory, no warnings); hand-built kernel IR pins down folding, control flow, memory forms and
errors; the f32 math expansions meet their accuracy in a NumPy float32 emulation."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

import pyfuse as pf
from pyfuse.backend_ptx import emit_math, ptxas
from pyfuse.backend_ptx.emit import emit_ptx
from pyfuse.errors import ScheduleError
from pyfuse.ir import dtypes
from pyfuse.ir import kernel_ir as kir
from pyfuse.ir.dtypes import DType
from pyfuse.ir.target import HOPPER
from pyfuse.ir.tensor import MemoryType
from pyfuse.passes import pipeline
from pyfuse.runtime.spec import Spec

Array = npt.NDArray[Any]
Assemble = Callable[[str], ptxas.PtxasResult]  # the assemble_clean fixture of conftest.py
f32, bf16, f16, f64 = pf.float32, pf.bfloat16, pf.float16, dtypes.float64
i32, i64, boolean = pf.int32, pf.int64, pf.bool


def kernels_of(fn: Callable[..., Any], *specs: Spec) -> list[kir.Kernel]:
    result = pipeline.run(pf.fuse(fn).trace(*specs), HOPPER)
    return [stages.kernel_ir for stages in result.kernels]


def assemble_all(
    assemble_clean: Assemble, fn: Callable[..., Any], *specs: Spec
) -> dict[str, tuple[str, int]]:
    """Emit and assemble every kernel of ``fn``: {name: (ptx, registers)}."""
    out = {}
    for kernel in kernels_of(fn, *specs):
        ptx = emit_ptx(kernel, HOPPER)
        resources = assemble_clean(ptx).kernel(kernel.name)
        out[kernel.name] = (ptx, resources.registers)
    return out


def spec(shape: Sequence[int], dtype: DType) -> Spec:
    return pf.spec(tuple(shape), dtype)


# ---- the pipeline corpus -------------------------------------------------------------------

BIG = (16384, 4096)

CORPUS: list[tuple[str, Callable[..., Any], list[Spec]]] = [
    ("gelu_mul_broadcast_f32_7x32769", lambda x, y: pf.gelu(x) * y,
     [spec((7, 32769), f32), spec((32769,), f32)]),
    ("add_broadcast_bf16_1000x1000", lambda x, y: x * y + 1.0,
     [spec((1000, 1000), bf16), spec((1000, 1), bf16)]),
    ("silu_f16_single", lambda x: pf.silu(x), [spec((1,), f16)]),
    ("exp_bf16_7", lambda x: pf.exp(x) + 1.0, [spec((7,), bf16)]),
    ("mixed_f16_bf16", lambda x, y: x + y, [spec((33, 65), f16), spec((33, 65), bf16)]),
    ("int64_indexing_2p31", lambda x: x * 2.0, [spec((2**31 + 5,), bf16)]),
    ("where_compare_int32", lambda x, y: pf.where(x < y, x, y),
     [spec((1000,), i32), spec((1000,), i32)]),
    ("int64_arith", lambda x, y: pf.maximum(x * y + 3, -x), [spec((999,), i64), spec((999,), i64)]),
    ("bool_logic", lambda x, y: pf.logical_or(pf.logical_and(x > 0, y), pf.logical_not(y)),
     [spec((1000,), f32), spec((1000,), boolean)]),
    ("bool_ragged", lambda x, y: pf.logical_and(x, y),
     [spec((7, 13), boolean), spec((13,), boolean)]),
    ("casts", lambda x: pf.cast(pf.cast(x, i32), f16), [spec((1000,), f32)]),
    ("cast_to_bool_and_back", lambda x: pf.cast(pf.cast(x, boolean), bf16) + pf.cast(x > 1, f32),
     [spec((257,), bf16)]),
    ("cast_int64_float", lambda x: pf.cast(x, f32) * 0.5, [spec((4, 100), i64)]),
    ("softmax_bf16_big", lambda x: pf.softmax(x, -1), [spec(BIG, bf16)]),
    ("rms_norm_bf16_big", lambda x, w: pf.rms_norm(x, w), [spec(BIG, bf16), spec(BIG[1:], bf16)]),
    ("layer_norm_bf16_big", lambda x, w, b: pf.layer_norm(x, w, b),
     [spec(BIG, bf16), spec(BIG[1:], bf16), spec(BIG[1:], bf16)]),
    ("softmax_f32_5x1000", lambda x: pf.softmax(x, -1), [spec((5, 1000), f32)]),
    ("softmax_bf16_3x7", lambda x: pf.softmax(x, -1), [spec((3, 7), bf16)]),
    ("layer_norm_bf16_5x1000", lambda x, w, b: pf.layer_norm(x, w, b),
     [spec((5, 1000), bf16), spec((1000,), bf16), spec((1000,), bf16)]),
    ("rms_norm_f16_3x77", lambda x, w: pf.rms_norm(x, w), [spec((3, 77), f16), spec((77,), f16)]),
    ("sum_inner_f32_64x100000", lambda x: pf.sum(x, 1), [spec((64, 100000), f32)]),
    ("max_inner_f32_1000x1000", lambda x: pf.max(x, 1), [spec((1000, 1000), f32)]),
    ("min_inner_bf16_9x4099", lambda x: pf.min(x, 1), [spec((9, 4099), bf16)]),
    ("sum_inner_int32", lambda x: pf.sum(x, -1), [spec((17, 300), i32)]),
    ("sum_outer_f32_1000x1000", lambda x: pf.sum(x, 0), [spec((1000, 1000), f32)]),
    ("max_outer_bf16_3000x33", lambda x: pf.max(x, 0), [spec((3000, 33), bf16)]),
    ("min_outer_f16_8x3000x33", lambda x: pf.min(x, 1), [spec((8, 3000, 33), f16)]),
    ("mean_f64", lambda x: pf.mean(x, -1), [spec((16, 512), f64)]),
]  # fmt: skip


@pytest.mark.parametrize(("name", "fn", "specs"), CORPUS, ids=[c[0] for c in CORPUS])
def test_corpus_assembles_clean(
    assemble_clean: Assemble, name: str, fn: Callable[..., Any], specs: list[Spec]
) -> None:
    for ptx, registers in assemble_all(assemble_clean, fn, *specs).values():
        assert ".maxntid" in ptx and registers > 0


def test_big_normalizations_stay_in_budget(assemble_clean: Assemble) -> None:
    """The register counts the report quotes; a jump here means a codegen regression."""
    for fn, specs in [
        (lambda x: pf.softmax(x, -1), [spec(BIG, bf16)]),
        (lambda x, w: pf.rms_norm(x, w), [spec(BIG, bf16), spec(BIG[1:], bf16)]),
    ]:
        for ptx, registers in assemble_all(assemble_clean, fn, *specs).values():
            assert registers <= 96, registers
            assert "ld.global.nc.v4.b32" in ptx and "st.global.v4.b32" in ptx
            assert "shfl.sync.bfly.b32" in ptx and "bar.sync 0" in ptx


UNARY = ["neg", "abs", "exp", "log", "tanh", "sigmoid", "relu", "gelu", "gelu_tanh", "silu",
         "sqrt", "rsqrt", "reciprocal", "sin", "cos"]  # fmt: skip
BINARY = ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt",
          "ge"]  # fmt: skip


def _unary(op: str) -> Callable[[pf.Tensor], pf.Tensor]:
    if op == "gelu_tanh":
        return lambda x: pf.gelu(x, approximate="tanh")
    function: Callable[[pf.Tensor], pf.Tensor] = getattr(pf, op)
    return function


@pytest.mark.parametrize("dtype", [f32, bf16, f16], ids=lambda d: d.name)
@pytest.mark.parametrize("op", UNARY)
def test_every_unary_op(assemble_clean: Assemble, op: str, dtype: DType) -> None:
    ((ptx, _),) = assemble_all(assemble_clean, _unary(op), spec((1000,), dtype)).values()
    assert "tanh.approx" not in ptx  # ~5e-4 relative: too coarse for f32 results


@pytest.mark.parametrize("dtype", [f32, bf16, f16, i32, i64], ids=lambda d: d.name)
@pytest.mark.parametrize("op", BINARY)
def test_every_binary_op(assemble_clean: Assemble, op: str, dtype: DType) -> None:
    function = getattr(pf, op)
    assemble_all(assemble_clean, function, spec((31, 70), dtype), spec((70,), dtype))


@pytest.mark.parametrize("op", ["add", "mul", "div", "maximum", "lt", "ne", "sqrt", "rsqrt",
                                "reciprocal", "relu", "abs"])  # fmt: skip
def test_float64_arithmetic(assemble_clean: Assemble, op: str) -> None:
    if op in UNARY:
        assemble_all(assemble_clean, _unary(op), spec((100,), f64))
    else:
        assemble_all(assemble_clean, getattr(pf, op), spec((100,), f64), spec((100,), f64))


@pytest.mark.parametrize("dtype", [f32, bf16], ids=lambda d: d.name)
@pytest.mark.parametrize("exponent", [2, 2.0, 0.5, -1.0, 3])
def test_pow_constant_exponents(assemble_clean: Assemble, exponent: float, dtype: DType) -> None:
    (ptx, _), = assemble_all(assemble_clean, lambda x: pf.pow(x, exponent),
                             spec((100,), dtype)).values()  # fmt: skip
    if exponent == 2:
        assert "lg2" not in ptx and "ex2" not in ptx  # x*x, exact


def test_logical_ops_on_bool(assemble_clean: Assemble) -> None:
    for op in ("logical_and", "logical_or", "eq", "ne", "lt", "ge", "maximum"):
        assemble_all(assemble_clean, getattr(pf, op), spec((64,), boolean), spec((64,), boolean))


@pytest.mark.parametrize("op", UNARY)
def test_every_unary_op_in_float64(assemble_clean: Assemble, op: str) -> None:
    """f64 has no approximate instructions: every op is IEEE arithmetic (emit_math64)."""
    ((ptx, _),) = assemble_all(assemble_clean, _unary(op), spec((1000,), f64)).values()
    assert not re.search(r"\b(ex2|lg2|sin|cos|rsqrt)\.approx", ptx)


def test_float64_pow_with_a_tensor_exponent(assemble_clean: Assemble) -> None:
    assemble_all(assemble_clean, lambda x, y: x**y, spec((100,), f64), spec((100,), f64))


# ---- structure of the emitted text ----------------------------------------------------------


def test_emission_is_deterministic() -> None:
    def build() -> list[str]:
        fn = lambda x, w, b: pf.layer_norm(x, w, b)  # noqa: E731
        specs = [spec((5, 1000), bf16), spec((1000,), bf16), spec((1000,), bf16)]
        return [emit_ptx(k, HOPPER) for k in kernels_of(fn, *specs)]

    first = build()
    assert first == build()
    (kernel,) = kernels_of(lambda x: pf.softmax(x, -1), spec((64, 512), f32))
    assert emit_ptx(kernel, HOPPER) == emit_ptx(kernel, HOPPER)


def test_emission_does_not_depend_on_hash_seeds() -> None:
    script = (
        "import pyfuse as pf, hashlib\n"
        "from pyfuse.passes import pipeline\n"
        "from pyfuse.ir.target import HOPPER\n"
        "from pyfuse.backend_ptx.emit import emit_ptx\n"
        "f = pf.fuse(lambda x, w, b: pf.layer_norm(x, w, b) > 0)\n"
        "w = pf.spec((1000,), pf.bfloat16)\n"
        "r = pipeline.run(f.trace(pf.spec((5, 1000), pf.bfloat16), w, w), HOPPER)\n"
        "print(hashlib.sha256(''.join(emit_ptx(k.kernel_ir, HOPPER) for k in r.kernels)"
        ".encode()).hexdigest())\n"
    )
    digests = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                             text=True, check=True)  # fmt: skip
        digests.add(run.stdout.strip())
    assert len(digests) == 1


def test_params_directives_and_read_only_loads() -> None:
    (kernel,) = kernels_of(lambda x, y: x + y, spec((1000,), f32), spec((1000,), f32))
    ptx = emit_ptx(kernel, HOPPER)
    names = [p.buffer_name for p in kernel.params]
    declared = re.findall(r"\.param \.u64 (\w+)", ptx)
    assert declared == names
    assert ptx.count("cvta.to.global.u64") == len(names)
    x, y = kernel.block[0], kernel.block[1]
    assert f".maxntid {x}, {y}, {kernel.block[2]}" in ptx
    assert re.search(r"ld\.global\.nc\.v4\.f32", ptx)
    assert "st.global.v4.f32" in ptx and "ld.global.v4" not in ptx
    assert ".extern .shared" not in ptx  # smem_bytes == 0


@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.int64])
def test_integer_negation_is_not_then_add(dtype: DType) -> None:
    # ptxas drops one of several neg.s32 that feed an integer max chain (GPU fuzzer, seed
    # 503); -x, 0 - x and x * -1 are all emitted as ~x + 1, which it compiles right.
    (kernel,) = kernels_of(
        lambda x: (pf.max(-x, 1), pf.min(0 - x, 1), pf.max(x * -1, 1)), spec((146, 128), dtype)
    )
    ptx = emit_ptx(kernel, HOPPER)
    bits = dtype.itemsize * 8
    assert not re.search(rf"neg\.s{bits}|sub\.s{bits} %r\w*, 0,|mul\.lo\.s{bits} .*, -1;", ptx)
    assert ptx.count(f"not.b{bits}") >= 3 * 4


def test_int64_kernels_compute_addresses_in_64_bits() -> None:
    (kernel,) = kernels_of(lambda x: x * 2.0, spec((2**31 + 5,), bf16))
    assert kernel.index_dtype == dtypes.int64
    ptx = emit_ptx(kernel, HOPPER)
    assert "mad.lo.s64" in ptx and "setp.lt.s64" in ptx and "2147483653" in ptx


def test_unrolled_copies_differ_only_in_their_offset() -> None:
    """The four vector loads of a softmax row: same address terms, immediate offsets."""
    (kernel,) = kernels_of(lambda x: pf.softmax(x, -1), spec(BIG, bf16))
    ptx = emit_ptx(kernel, HOPPER)
    offsets = re.findall(r"ld\.global\.nc\.v4\.b32 \{[^}]*\}, \[%rd\d+\+?(\d*)\]", ptx)
    assert offsets == ["", "2048", "4096", "6144"]
    assert ptx.count("mad.wide.s32") == 2 * 8  # (row, column) terms of 4 loads and 4 stores


# ---- hand-built kernel IR -------------------------------------------------------------------

TID = kir.Special(kir.SpecialKind.TID_X, 128)


def gbuf(name: str, dtype: DType = f32) -> kir.Buffer:
    return kir.Buffer(name, dtype, MemoryType.GLOBAL)


def make_kernel(
    body: list[kir.Stmt], buffers: Sequence[kir.Buffer], *, inputs: int = 1,
    block: tuple[int, int, int] = (128, 1, 1), smem: int = 0,
) -> kir.Kernel:  # fmt: skip
    params = [
        kir.TensorParam(b.name, b.dtype,
                        kir.ParamRole.INPUT if i < inputs else kir.ParamRole.OUTPUT, i, (1 << 20,))
        for i, b in enumerate(buffers)
    ]  # fmt: skip
    return kir.Kernel("probe", params, {b.name: b for b in buffers}, body, (4, 1, 1), block, smem)


def c(value: int) -> kir.Const:
    return kir.Const(value, i32)


def test_unrolled_loop_folds_register_indices(assemble_clean: Assemble) -> None:
    src, dst = gbuf("src"), gbuf("dst")
    regs = kir.Buffer("r", f32, MemoryType.LOCAL, 8)
    i = kir.Var("i", i32, 8)
    j = kir.Var("j", i32)
    index = kir.add(kir.mul(TID, c(8)), i)
    body: list[kir.Stmt] = [
        kir.Alloc(regs),
        kir.For(i, c(8), [
            kir.Let(j, kir.Binary("sub", kir.Binary("mul", i, c(3), i32), kir.Binary(
                "mul", kir.Binary("floordiv", i, c(2), i32), c(2), i32), i32)),
            kir.Store(regs, kir.Binary("mod", kir.Binary("add", i, j, i32), c(8), i32),
                      kir.Load(src, index, f32)),
        ], unroll=True),
        kir.For(i, c(8), [kir.Store(dst, index, kir.Load(regs, i, f32))], unroll=True),
    ]  # fmt: skip
    ptx = emit_ptx(make_kernel(body, [src, dst]), HOPPER)
    assemble_clean(ptx)
    # No index arithmetic survives: one address register, eight immediate offsets each way.
    assert "rem." not in ptx and "div." not in ptx
    assert len(re.findall(r"ld\.global\.nc\.f32 %f\d+, \[%rd\d+(?:\+\d+)?\]", ptx)) == 8
    assert {f"+{4 * k}]" for k in range(1, 8)} <= set(re.findall(r"\+\d+\]", ptx))


def test_non_constant_register_index_is_refused() -> None:
    regs = kir.Buffer("r", f32, MemoryType.LOCAL, 4)
    dst = gbuf("dst")
    body: list[kir.Stmt] = [kir.Alloc(regs), kir.Store(dst, TID, kir.Load(regs, TID, f32))]
    with pytest.raises(ScheduleError, match="does not fold to a constant"):
        emit_ptx(make_kernel(body, [dst], inputs=0), HOPPER)


def test_unrolled_loop_needs_a_constant_extent() -> None:
    body: list[kir.Stmt] = [kir.For(kir.Var("i", i32), TID, [], unroll=True)]
    with pytest.raises(ScheduleError, match="constant extent"):
        emit_ptx(make_kernel(body, []), HOPPER)


def test_scalar_params_and_global_allocs_are_refused() -> None:
    dst = gbuf("dst")
    load_param = kir.Store(dst, TID, kir.Cast(kir.Param("n", i32), f32))
    with pytest.raises(ScheduleError, match="scalar param"):
        emit_ptx(make_kernel([load_param], [dst], inputs=0), HOPPER)
    with pytest.raises(ScheduleError, match="global buffer"):
        emit_ptx(make_kernel([kir.Alloc(dst)], [dst], inputs=0), HOPPER)
    src = gbuf("src")
    with pytest.raises(ScheduleError, match="read-only"):
        emit_ptx(make_kernel([kir.Store(src, TID, kir.Const(1.0, f32))], [src]), HOPPER)


def test_serial_loop_if_else_and_accumulator(assemble_clean: Assemble) -> None:
    src, dst = gbuf("src"), gbuf("dst")
    i, acc = kir.Var("i", i32, 100), kir.Var("acc", f32)
    odd = kir.Binary("eq", kir.Binary("mod", i, c(2), i32), c(1), boolean)
    element = kir.Load(src, kir.add(kir.mul(i, c(128)), TID), f32)
    body: list[kir.Stmt] = [
        kir.Let(acc, kir.Const(0.0, f32)),
        kir.For(i, c(100), [kir.If(odd, [kir.Assign(acc, kir.Binary("add", acc, element, f32))],
                                   [kir.Assign(acc, kir.Binary("sub", acc, element, f32))])]),
        kir.For(kir.Var("once", i32, 1), c(1), [kir.Comment("runs once,\ninline")]),
        kir.Store(dst, TID, acc),
    ]  # fmt: skip
    ptx = emit_ptx(make_kernel(body, [src, dst]), HOPPER)
    assemble_clean(ptx)
    assert ptx.count("$L__loop_0") == 2  # one real loop: its label and its back edge
    assert "$L__else_" in ptx and "$L__endif_" in ptx
    assert "// runs once, inline" in ptx


def test_constant_let_and_constant_if_fold() -> None:
    dst = gbuf("dst")
    k = kir.Var("k", i32)
    body: list[kir.Stmt] = [
        kir.Let(k, kir.Binary("add", c(5), c(7), i32)),
        kir.If(kir.Binary("lt", k, c(10), boolean), [kir.Store(dst, TID, kir.Const(1.0, f32))],
               [kir.Store(dst, TID, kir.Cast(k, f32))]),
    ]  # fmt: skip
    ptx = emit_ptx(make_kernel(body, [dst], inputs=0), HOPPER)
    assert "bra" not in ptx and "0f41400000" in ptx  # 12.0 stored, no branch


def test_guards_that_cannot_fail_in_an_unrolled_copy_are_dropped(assemble_clean: Assemble) -> None:
    """A ragged row split [S, T]: ``s * 128 + t < 389`` fails only in the copy s = 3; the
    other copies are emitted without their compare and branch (a guard on each copy spilled
    ragged persistent rows at 1024 threads: tests/lowering_cases.py, ragged_wide_*)."""
    src, dst = gbuf("src"), gbuf("dst")
    s, v = kir.Var("s", i32, 4), kir.Var("v", i32, 2)
    column = kir.Binary("add", kir.Binary("mul", s, c(128), i32), TID, i32)
    inside = kir.Binary("lt", column, c(389), boolean)
    element = kir.Binary("add", kir.Binary("mul", column, c(2), i32), v, i32)
    # A remainder and a quotient bound too; a Var of no extent (a Let's) is never bounded.
    bounded = kir.Binary(
        "logical_and", inside,
        kir.Binary("lt", kir.Binary("floordiv", kir.Binary("mod", TID, c(64), i32), c(2), i32),
                   c(32), boolean), boolean,
    )  # fmt: skip
    unknown = kir.Var("unknown", i32)
    body: list[kir.Stmt] = [
        kir.For(s, c(4), [
            kir.For(v, c(2), [
                kir.If(bounded, [kir.Store(dst, element, kir.Load(src, element, f32))]),
            ], unroll=True),
        ], unroll=True),
        kir.Let(unknown, kir.Cast(kir.Load(src, TID, f32), i32)),
        kir.If(kir.Binary("lt", unknown, c(1 << 30), boolean),
               [kir.Store(dst, TID, kir.Const(1.0, f32))]),
    ]  # fmt: skip
    ptx = emit_ptx(make_kernel(body, [src, dst]), HOPPER)
    assemble_clean(ptx)
    # The last copy's two elements keep their guard; the 6 others and the remainder's go.
    assert len(re.findall(r"setp\.lt\.s32 %p\d+, %r\d+, 389;", ptx)) == 2
    assert ptx.count("bra") == 3  # those two, and the one around the unknown value's store
    assert len(re.findall(r"ld\.global\.nc\.f32", ptx)) == 8 + 1


def test_lets_on_both_sides_of_a_branch_share_a_register(assemble_clean: Assemble) -> None:
    dst, v = gbuf("dst"), kir.Var("v", f32)
    lower_half = kir.Binary("lt", TID, c(64), boolean)
    body: list[kir.Stmt] = [
        kir.If(lower_half, [kir.Let(v, kir.Const(1.0, f32))], [kir.Let(v, kir.Const(2.0, f32))]),
        kir.Store(dst, TID, v),
    ]
    ptx = emit_ptx(make_kernel(body, [dst], inputs=0), HOPPER)
    assemble_clean(ptx)
    one = re.search(r"mov\.f32 (%f\d+), 0f3F800000", ptx)
    two = re.search(r"mov\.f32 (%f\d+), 0f40000000", ptx)
    stored = re.search(r"st\.global\.f32 \[%rd\d+\], (%f\d+)", ptx)
    assert one and two and stored
    assert one.group(1) == two.group(1) == stored.group(1)


def test_bool_vectors_and_half_vectors(assemble_clean: Assemble) -> None:
    flags_in, flags_out = gbuf("flags_in", boolean), gbuf("flags_out", boolean)
    half_in, half_out = gbuf("half_in", bf16), gbuf("half_out", bf16)
    body: list[kir.Stmt] = []
    for width, src, dst in [(16, flags_in, flags_out), (4, flags_in, flags_out),
                            (2, flags_in, flags_out), (8, half_in, half_out),
                            (2, half_in, half_out), (1, half_in, half_out)]:  # fmt: skip
        regs = kir.Buffer(f"r{width}{src.name}", src.dtype, MemoryType.LOCAL, width)
        offset = kir.mul(TID, c(width))
        body += [kir.Alloc(regs), kir.VectorLoad(regs, c(0), src, offset, width),
                 kir.VectorStore(dst, offset, regs, c(0), width)]  # fmt: skip
    ptx = emit_ptx(make_kernel(body, [flags_in, half_in, flags_out, half_out], inputs=2), HOPPER)
    assemble_clean(ptx)
    for form in ("ld.global.nc.v4.b32", "ld.global.nc.u16", "ld.global.nc.b32", "st.global.u16",
                 "mov.b32 {%rs", "st.global.b16"):  # fmt: skip
        assert form in ptx, form


@pytest.mark.parametrize("dtype", [f32, f64, i64, bf16], ids=lambda d: d.name)
@pytest.mark.parametrize(
    ("threads", "block"), [(16, (64, 2, 1)), (8, (8, 1, 1)), (256, (512, 1, 1))]
)
def test_thread_reduce_shapes(
    assemble_clean: Assemble, dtype: DType, threads: int, block: tuple[int, int, int]
) -> None:
    src, dst = gbuf("src", dtype), gbuf("dst", dtype)
    red = kir.Var("red", dtype)
    workspace = None
    smem = 0
    if threads > 32:
        workspace = kir.Buffer("ws", dtype, MemoryType.SHARED, block[0] // 32, smem_offset=16)
        smem = 16 + workspace.size * dtype.itemsize
    tid = kir.Special(kir.SpecialKind.TID_X, block[0])
    body: list[kir.Stmt] = [
        kir.Let(red, kir.Load(src, tid, dtype)),
        kir.ThreadReduce(red, "max", threads, workspace),
        kir.ThreadReduce(red, "sum", threads, workspace),
        kir.Store(dst, tid, red),
    ]
    ptx = emit_ptx(make_kernel(body, [src, dst], block=block, smem=smem), HOPPER)
    assemble_clean(ptx)
    steps = min(threads, 32).bit_length() - 1
    per_value = 2 if dtype.itemsize == 8 else 1
    assert ptx.count("shfl.sync.bfly.b32") == 2 * steps * per_value
    mask = "0xffffffff" if block[0] * block[1] >= 32 else "255"
    assert all(line.endswith(f"{mask};") for line in ptx.splitlines() if "shfl" in line)
    assert ptx.count("bar.sync 0") == (4 if threads > 32 else 0)


def test_cross_warp_reduce_needs_a_one_dimensional_block() -> None:
    red = kir.Var("red", f32)
    workspace = kir.Buffer("ws", f32, MemoryType.SHARED, 4)
    body: list[kir.Stmt] = [kir.Let(red, kir.Const(1.0, f32)),
                            kir.ThreadReduce(red, "sum", 128, workspace)]  # fmt: skip
    with pytest.raises(ScheduleError, match="one-dimensional block"):
        emit_ptx(make_kernel(body, [], block=(128, 2, 1), smem=16), HOPPER)


def test_integer_pow_and_selects(assemble_clean: Assemble) -> None:
    base, exponent, dst = gbuf("base", i32), gbuf("exponent", i32), gbuf("dst", i32)
    flags = gbuf("flags", boolean)
    b, e = kir.Load(base, TID, i32), kir.Load(exponent, TID, i32)
    condition = kir.Load(flags, TID, boolean)
    picked = kir.Select(condition, kir.Binary("pow", b, e, i32), kir.Binary("pow", b, c(5), i32),
                        i32)  # fmt: skip
    flag = kir.Select(condition, kir.Binary("gt", b, e, boolean), kir.Const(False, boolean),
                      boolean)  # fmt: skip
    body: list[kir.Stmt] = [
        kir.Store(dst, TID, kir.Binary("add", picked, kir.Cast(flag, i32), i32)),
        kir.Store(dst, kir.add(TID, c(128)),
                  kir.Select(kir.Const(True, boolean), b, kir.Load(base, c(-1), i32), i32)),
    ]  # fmt: skip
    ptx = emit_ptx(make_kernel(body, [base, exponent, flags, dst], inputs=3), HOPPER)
    assemble_clean(ptx)
    assert "$L__pow_" in ptx and "shr.u32" in ptx
    assert "[%rd" in ptx and "+-4]" not in ptx  # the dead side of a constant select is not emitted


@pytest.mark.parametrize("dtype", [i32, pf.int64, pf.int8])
def test_integer_pow_with_negative_exponents_is_torch_s(dtype: DType) -> None:
    # torch gives 0 for a negative exponent, but 1 for a base of 1 and +-1 for -1 by the
    # exponent's parity; the loop took the exponent's bits as unsigned (5 of 40 elements off
    # as PTX on the simulator), and the reference refused it as NumPy does.
    import numpy as np

    from pyfuse.ir.reference_math import power
    from pyfuse.testing.run import run_function

    want = [1, -1, 1, 0, 0, 9]
    got = power(np.array([1, -1, -1, 2, 0, 3]), np.array([-3, -3, -2, -1, 2, 2]))
    assert got.tolist() == want
    specs = [pf.spec((40,), dtype), pf.spec((40,), dtype)]
    for fn in (lambda x, y: x**y, lambda x, y: pf.remainder(x, 3) ** (y % 7 - 3)):
        outcome = run_function(fn, specs)
        assert outcome.cls == "ok", outcome


# ---- constant folding -----------------------------------------------------------------------


def test_fold_integer_semantics() -> None:
    fold = emit_math.fold_binary
    assert fold("add", 2**31 - 1, 1, i32) == -(2**31)  # wraps like int32
    assert fold("mul", 2**40, 2**30, i64) == 0
    assert fold("floordiv", -7, 2, i32) == -3 and fold("mod", -7, 2, i32) == -1  # C division
    assert fold("floordiv", 7, 0, i32) is None  # left to the GPU
    assert fold("pow", 3, 4, i32) == 81 and fold("pow", 2, -1, i32) is None
    assert fold("max", 3, 9, i32) == 9 and fold("lt", 3, 9, i32) is True
    assert fold("logical_and", True, False, boolean) is False
    assert emit_math.fold_unary("neg", -(2**31), i32) == -(2**31)


def test_fold_float_semantics() -> None:
    fold = emit_math.fold_binary
    assert math.isnan(float(fold("maximum", math.nan, 1.0, f32) or 0.0))
    assert fold("add", 1.0, 2.0**-30, f32) == 1.0  # rounded to f32
    assert fold("add", 1.0, 1 / 256, bf16) == 1.0  # f32 result rounded once more to bf16
    assert fold("div", 1.0, 0.0, f32) == math.inf
    assert fold("ne", math.nan, math.nan, f32) is True
    assert emit_math.round_to(0.1, bf16) == 0.10009765625
    assert emit_math.half_bits(1.0, bf16) == 0x3F80 and emit_math.half_bits(1.0, f16) == 0x3C00


def test_fold_casts() -> None:
    cast = emit_math.fold_cast
    assert cast(-2.7, i32) == -2 and cast(1e20, i32) == 2**31 - 1 and cast(math.nan, i64) == 0
    assert cast(math.nan, boolean) is True and cast(0.0, boolean) is False
    assert cast(True, f32) == 1.0 and cast(2**31 + 7, i32) == -(2**31) + 7
    assert cast(16777217, f32) == 16777216.0


# ---- on a GPU: emitted kernels against the kernel-IR interpreter ----------------------------


def _host_inputs(kernel: kir.Kernel, rng: np.random.Generator, low: int) -> list[Array]:
    inputs = sorted((p for p in kernel.params if p.role == kir.ParamRole.INPUT),
                    key=lambda p: p.index)  # fmt: skip
    arrays = []
    for param in inputs:
        if param.dtype.is_bool:
            arrays.append(rng.random(param.shape) < 0.5)
        elif param.dtype.is_integer:
            arrays.append(rng.integers(low, 8, param.shape).astype(param.dtype.numpy()))
        else:
            arrays.append((rng.standard_normal(param.shape) * 3).astype(param.dtype.numpy()))
    return arrays


def _run_on_gpu(kernel: kir.Kernel, inputs: list[Array]) -> list[Array]:
    """Launch ``kernel``'s PTX once on fresh buffers."""
    from pyfuse.backend_ptx import driver
    from pyfuse.backend_ptx.abi import ParamKind

    outputs = {p.index: np.zeros(p.shape, p.dtype.numpy()) for p in kernel.params
               if p.role == kir.ParamRole.OUTPUT}  # fmt: skip
    launcher = driver.Launcher(
        driver.load_kernel(emit_ptx(kernel, HOPPER), kernel.name),
        [ParamKind.PTR] * len(kernel.params),
    )
    buffers = []
    try:
        for param in kernel.params:
            if param.role == kir.ParamRole.INPUT:
                bytes_ = np.ascontiguousarray(inputs[param.index]).view(np.uint8)
                buffers.append(driver.DeviceBuffer.from_host(bytes_))
            else:
                nbytes = outputs[param.index].nbytes
                buffers.append(driver.DeviceBuffer(nbytes))
                driver.memset_d8(buffers[-1].ptr, 0xFF, nbytes)  # poison: unwritten shows
        launcher.launch(kernel.grid, kernel.block, kernel.smem_bytes, 0, buffers)
        driver.synchronize()
        for param, buffer in zip(kernel.params, buffers, strict=True):
            if param.role == kir.ParamRole.OUTPUT:
                buffer.download(outputs[param.index].view(np.uint8))
    finally:
        for buffer in buffers:
            buffer.free()
    return [outputs[i] for i in sorted(outputs)]


# Relative tolerance by output dtype: 16-bit outputs may round the other way (one ulp) when
# the f32 result differs from float64 math by the expansions' error.
_GPU_RTOL = {f32: 6e-6, f64: 1e-12, bf16: 2**-7, f16: 2**-10}
GPU_CASES: list[tuple[str, Callable[..., Any], list[Spec]]] = [
    *[(f"unary_{op}_{d.name}", _unary(op), [spec((1000,), d)])
      for op in UNARY for d in (f32, bf16)],
    *[(f"binary_{op}_{d.name}", getattr(pf, op), [spec((31, 70), d), spec((70,), d)])
      for op in BINARY for d in (f32, bf16, i32) if (op, d) != ("pow", i32)],
    # Unragged: the interpreter would raise on the poison (-1) exponents of padded lanes.
    ("binary_pow_int32", pf.pow, [spec((32, 64), i32), spec((64,), i32)]),
    # One-kernel cases only (sum_inner_f32_64x100000 splits into two kernels, whose
    # intermediate this harness does not bind; the frontend GPU tests run it end to end).
    *[c for c in CORPUS if not c[0].endswith("_big") and "2p31" not in c[0]
      and c[0] != "sum_inner_f32_64x100000"],
    ("softmax_bf16_256x4096", lambda x: pf.softmax(x, -1), [spec((256, 4096), bf16)]),
    ("rms_norm_bf16_64x4096", lambda x, w: pf.rms_norm(x, w),
     [spec((64, 4096), bf16), spec((4096,), bf16)]),
]  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize(("name", "fn", "specs"), GPU_CASES, ids=[c[0] for c in GPU_CASES])
def test_gpu_results_match_the_interpreter(
    name: str, fn: Callable[..., Any], specs: list[Spec]
) -> None:
    from pyfuse.ir.kernel_interpreter import launch

    (kernel,) = kernels_of(fn, *specs)
    inputs = _host_inputs(kernel, np.random.default_rng(len(name)), 0 if "pow" in name else -7)
    if "sum" in name or "mean" in name:  # positive terms: float sums in any order agree
        inputs = [np.abs(a) if a.dtype.kind == "f" or a.dtype == bf16.numpy() else a
                  for a in inputs]  # fmt: skip
    got = _run_on_gpu(kernel, inputs)
    want = [np.zeros_like(a) for a in got]
    launch(kernel, inputs, want)
    output_dtypes = [p.dtype for p in kernel.params if p.role == kir.ParamRole.OUTPUT]
    for param_dtype, g, w in zip(output_dtypes, got, want, strict=True):
        if not param_dtype.is_floating:
            np.testing.assert_array_equal(g, w)
            continue
        rtol = _GPU_RTOL[param_dtype] * (4 if "pow" in name else 1)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol,
                                   atol=1e-6, equal_nan=True)  # fmt: skip


@pytest.mark.gpu
def test_gpu_int64_indexing_past_2p31() -> None:
    (kernel,) = kernels_of(lambda x: x * 2.0, spec((2**31 + 5,), bf16))
    x = (np.arange(2**31 + 5, dtype=np.int64) % 251 - 125).astype(np.float32).astype(bf16.numpy())
    (got,) = _run_on_gpu(kernel, [x])
    assert np.array_equal(got.view(np.uint16), (x.astype(np.float32) * 2).astype(x.dtype).view(
        np.uint16))  # fmt: skip
