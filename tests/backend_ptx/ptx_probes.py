"""Kernels bodies that use every form of every instruction helper, for assembly tests.

Each probe takes a KernelBuilder (to declare params and registers) and returns the
lines of a kernel body. The test files assemble them with ptxas; test_versions
re-assembles them at each instruction's declared minimum PTX version.
"""

from __future__ import annotations

from pyfuse.backend_ptx.abi import ParamKind
from pyfuse.backend_ptx.emitter import Directives, KernelBuilder
from pyfuse.backend_ptx.instructions import (
    arith,
    control,
    convert,
    logic,
    mbarrier,
    memory,
    shuffle,
    special,
    tma,
    wgmma,
)
from pyfuse.backend_ptx.operands import Address, Line, RegClass


def arith_probe(kb: KernelBuilder) -> list[Line]:
    p, q = kb.regs(RegClass.PRED, 2)
    h = kb.regs(RegClass.B16, 2)
    r = kb.regs(RegClass.B32, 4)
    rd = kb.regs(RegClass.B64, 2)
    f = kb.regs(RegClass.F32, 4)
    fd = kb.regs(RegClass.F64, 2)
    return [
        arith.mov("u32", r[0], 7),
        arith.mov("f32", f[0], 1.5),
        arith.mov("f64", fd[0], 2.0),
        arith.mov("b16", h[0], 0x3F80),
        arith.add("s32", r[1], r[0], 5, sat=True),
        arith.add("f32", f[1], f[0], 2.0, rounding="rz", ftz=True),
        arith.add("bf16", h[1], h[0], h[0], rounding="rn"),
        arith.sub("f64", fd[1], fd[0], fd[0], rounding="rm"),
        arith.mul("u32", rd[0], r[1], 4, mode="wide"),
        arith.mul("s32", r[2], r[1], r[0], mode="hi"),
        arith.mul("f32", f[2], f[1], f[0]),
        arith.mad("u32", r[2], r[2], 3, r[1]),
        arith.mad("u32", rd[1], r[2], 3, rd[0], mode="wide"),
        arith.fma("f32", f[2], f[1], f[0], 0.5),
        arith.fma("bf16", h[1], h[1], h[0], h[0]),
        arith.div("f32", f[2], f[2], f[1], mode="full"),
        arith.div("f32", f[2], f[2], f[1], mode="rn", ftz=True),
        arith.div("f64", fd[1], fd[1], fd[0], mode="rn"),
        arith.div("u32", r[2], r[2], r[0]),
        arith.rem("s32", r[3], r[2], r[0]),
        arith.neg("f32", f[3], f[2]),
        arith.neg("bf16", h[1], h[1]),
        arith.abs_("f32", f[3], f[3], ftz=True),
        arith.min_("f32", f[3], f[3], f[2], nan=True),
        arith.max_("s32", r[3], r[3], r[2]),
        arith.max_("bf16", h[1], h[1], h[0], nan=True),
        arith.ex2("f32", f[3], f[3], ftz=True),
        arith.ex2("bf16", h[1], h[1]),
        arith.lg2("f32", f[3], f[3]),
        arith.sin("f32", f[3], f[3]),
        arith.cos("f32", f[3], f[3]),
        arith.tanh("f32", f[3], f[3]),
        arith.tanh("bf16", h[1], h[1]),
        arith.rcp("f32", f[3], f[3], mode="approx", ftz=True),
        arith.rcp("f32", f[3], f[3]),
        arith.rcp("f64", fd[1], fd[1], mode="approx", ftz=True),
        arith.sqrt("f32", f[3], f[3], mode="approx"),
        arith.sqrt("f64", fd[1], fd[1]),
        arith.rsqrt("f32", f[3], f[3], ftz=True),
        arith.rsqrt("f64", fd[1], fd[1]),
        arith.setp("ltu", "f32", p, f[3], f[2]),
        arith.setp("hs", "u32", p, r[3], r[2], q=q),
        arith.setp("ne", "s32", q, r[3], 0, bool_op="and", c=p, c_negated=True),
        arith.setp("gt", "bf16", p, h[1], h[0]),
        arith.selp("f32", f[3], f[2], 1.0, p),
        arith.selp("b64", rd[1], rd[0], rd[1], q),
        arith.mov("pred", q, p),
        arith.pack(rd[1], [r[2], r[3]]),
        arith.unpack([r[2], r[3]], rd[1]),
        arith.pack(r[3], [h[0], h[1]]),
        convert.cvt("f32", "bf16", f[3], h[1]),
        convert.cvt("f32", "f16", f[3], h[1]),
        convert.cvt("bf16", "f32", h[1], f[3], rounding="rn"),
        convert.cvt("f16", "f32", h[1], f[3], rounding="rz", relu=True),
        convert.cvt("s32", "f32", r[3], f[3], rounding="rzi"),
        convert.cvt("f32", "u32", f[3], r[3], rounding="rn"),
        convert.cvt("f32", "f32", f[3], f[2], rounding="rni"),
        convert.cvt("f32", "f64", f[3], fd[1], rounding="rn"),
        convert.cvt("f64", "f32", fd[1], f[3]),
        convert.cvt("bf16", "f16", h[1], h[0], rounding="rn"),
        convert.cvt("u8", "u32", h[1], r[3], sat=True),
        convert.cvt("u32", "u8", r[3], h[1]),
        convert.cvt("u64", "u32", rd[1], r[3]),
        convert.cvt("s32", "s64", r[3], rd[1]),
        convert.cvt_pack("bf16x2", r[3], hi=f[3], lo=f[2]),
        convert.cvt_pack("f16x2", r[3], hi=f[3], lo=f[2], rounding="rz", relu=True, satfinite=True),
        logic.and_("b32", r[3], f[3], 0x7FFFFFFF),
        logic.or_("pred", p, p, q),
        logic.xor("b64", rd[1], rd[1], rd[0]),
        logic.not_("pred", q, p),
        logic.shl("b64", rd[1], rd[1], 3),
        logic.shr("s32", r[3], r[3], r[2]),
        logic.shr("u16", h[1], h[1], 2),
        logic.popc("b64", r[3], rd[1]),
        logic.clz("b32", r[3], r[3]),
        logic.brev("b32", r[3], r[3]),
        logic.bfe("s32", r[3], r[3], 8, 4),
        logic.bfi("b32", r[3], r[2], r[3], 8, 4),
        logic.prmt(r[3], r[3], r[2], 0x5410),
        logic.prmt(r[3], r[3], r[2], 1, mode="ecl"),
        logic.lop3(r[3], r[3], r[2], r[1], 0x96),
    ]


def memory_probe(kb: KernelBuilder) -> list[Line]:
    out = kb.param("out", ParamKind.PTR)
    r = kb.regs(RegClass.B32, 6)
    rd = kb.regs(RegClass.B64, 4)
    f = kb.regs(RegClass.F32, 4)
    h = kb.reg(RegClass.B16)
    smem = kb.dynamic_smem()
    return [
        memory.ld_param(rd[0], out),
        memory.cvta("global", rd[1], rd[0], to=True),
        memory.mov_address(r[0], smem),
        memory.mov_address(rd[2], smem),
        memory.cvta("shared", rd[3], rd[2], to=False),
        memory.ld("global", "f32", f, rd[1], nc=True),
        memory.ld("global", "u32", r[1:3], Address(rd[1], 8), nc=True, eviction="L1::no_allocate"),
        memory.ld("global", "u8", r[3], rd[1], cache="cg"),
        memory.ld("global", "s8", h, rd[1]),
        memory.ld("shared::cta", "b32", r[4], r[0]),
        memory.ld("shared", "f32", f[:2], Address(r[0], 16)),
        memory.ld("global", "b64", rd[2], rd[3]),  # generic address used as global: fine for ptxas
        memory.st("global", "f32", Address(rd[1], -4), f[0]),
        memory.st("shared", "u32", r[0], 0),
        memory.st("shared::cta", "f32", Address(r[0], 16), f),
        memory.st("global", "b64", rd[1], [rd[2], rd[3]]),
        memory.st("global", "u16", rd[1], h, cache="cs"),
        memory.atom("global", "add", "f32", f[0], rd[1], f[1]),
        memory.atom(
            "shared::cta", "cas", "b32", r[4], r[0], r[1], r[2], sem="acq_rel", scope="cta"
        ),
        memory.atom("global", "exch", "b64", rd[2], rd[1], rd[3]),
        memory.atom("global", "inc", "u32", r[4], rd[1], 100),
        memory.atom("global", "min", "s64", rd[2], rd[1], rd[3]),
        memory.atom("global", "add", "bf16x2", r[4], rd[1], r[1]),
        memory.red("global", "add", "f32", rd[1], f[0]),
        memory.red("global", "add", "f32", rd[1], f),
        memory.red("global", "add", "f32", rd[1], f[:2], sem="relaxed", scope="gpu"),
        memory.red("global", "max", "u32", rd[1], r[1], sem="release", scope="sys"),
        memory.red("shared::cta", "or", "b32", r[0], r[1]),
        memory.red("global", "add", "bf16x2", rd[1], r[1:3]),
        memory.mapa(r[5], r[0], 0),
        memory.ldmatrix(r[1:5], r[0]),
        memory.ldmatrix(r[1:3], r[0], trans=True),
        memory.stmatrix(r[0], r[1:5]),
        memory.stmatrix(r[0], r[1:2], trans=True),
    ]


def sync_probe(kb: KernelBuilder) -> list[Line]:
    p, q = kb.regs(RegClass.PRED, 2)
    r = kb.regs(RegClass.B32, 6)
    rd = kb.regs(RegClass.B64, 2)
    f = kb.regs(RegClass.F32, 2)
    bar = kb.reg(RegClass.B32)
    lines: list[Line] = [special.read_sreg(r[0], name) for name in ("tid.x", "ctaid.y", "ntid.z")]
    lines += [
        special.read_sreg(r[1], "laneid"),
        special.read_sreg(r[2], "cluster_ctarank"),
        special.read_sreg(r[2], "dynamic_smem_size"),
        special.read_sreg(rd[0], "clock64"),
        memory.mov_address(bar, kb.dynamic_smem()),
        special.elect_sync(p, lane=r[3]),
        mbarrier.init(bar, 1).guarded(p),
        mbarrier.init(Address(bar, 8), r[1]).guarded(p),
        mbarrier.fence_init().guarded(p),
        control.bar_sync(0),
        mbarrier.arrive_expect_tx(bar, 1024).guarded(p),
        mbarrier.arrive_expect_tx(bar, r[1], state=rd[1]),
        mbarrier.expect_tx(bar, 128),
        mbarrier.expect_tx(bar, 128, scope="cta"),
        mbarrier.arrive(Address(bar, 8)),
        mbarrier.arrive(bar, count=2, sem="relaxed", scope="cluster"),
        mbarrier.test_wait_parity(q, bar, 0),
        mbarrier.try_wait_parity(q, bar, r[1], suspend_hint=1000),
        *mbarrier.wait_parity(q, bar, 0, kb.new_label("wait")),
        mbarrier.fence_proxy_async(),
        mbarrier.fence_proxy_async("global"),
        mbarrier.fence_proxy_async(None),
        mbarrier.inval(Address(bar, 8)),
        shuffle.shfl_sync("bfly", f[1], f[0], 16),
        shuffle.shfl_sync("down", r[4], r[1], r[2], p=q),
        shuffle.shfl_sync("up", r[4], r[1], 1),
        shuffle.shfl_sync("idx", r[4], r[1], 0, c=0x1F, membermask=r[5]),
        shuffle.redux_sync("max", "s32", r[4], r[1]),
        shuffle.redux_sync("xor", "b32", r[4], r[1]),
        shuffle.vote_sync("any", q, p),
        shuffle.vote_sync("ballot", r[4], p, negate=True),
        shuffle.activemask(r[5]),
        control.bar_sync(1, 128),
        control.bar_arrive(2, 64),
        control.bar_sync(r[1]),
        control.barrier_cluster_arrive(),
        control.barrier_cluster_wait(),
        control.barrier_cluster_arrive(sem="relaxed", aligned=False),
        control.barrier_cluster_wait(acquire=False, aligned=False),
        control.fence("cta"),
        control.fence("sys", sem="sc"),
        control.membar("cta"),
        control.griddepcontrol_wait(),
        control.griddepcontrol_launch_dependents(),
        control.nanosleep(100),
        special.setmaxnreg("dec", 40),
        special.setmaxnreg("inc", 232),
    ]
    exit_label = kb.new_label("out")
    lines += [control.bra(exit_label, uni=True), exit_label]
    return lines


def tma_wgmma_probe(kb: KernelBuilder) -> list[Line]:
    tmap = kb.param("map", ParamKind.TENSOR_MAP)
    tmap_address = kb.reg(RegClass.B64)
    base, coord = kb.regs(RegClass.B32, 2)
    mask = kb.reg(RegClass.B16)
    policy, desc_a, desc_b = kb.regs(RegClass.B64, 3)
    p = kb.reg(RegClass.PRED)
    a_frag = kb.regs(RegClass.B32, 4)
    acc = kb.regs(RegClass.F32, wgmma.accumulator_count(256))
    acc16 = kb.regs(RegClass.B32, wgmma.accumulator_count(64, "f16"))
    return [
        *memory.tensor_map_address(tmap_address, tmap),
        memory.mov_address(base, kb.dynamic_smem()),
        memory.mov_address(coord, kb.dynamic_smem()),
        tma.prefetch_tensormap(tmap_address),
        *(
            tma.load_tile(Address(base, 1024), tmap_address, [coord] * rank, base)
            for rank in range(1, 6)
        ),
        tma.load_tile(base, tmap_address, [0, coord], base, dst_space="shared::cta"),
        tma.load_tile(base, tmap_address, [0, 0], base, multicast_mask=3),
        tma.load_tile(base, tmap_address, [0, 0], base, multicast_mask=mask, cache_policy=policy),
        tma.prefetch_tile_l2(tmap_address, [0, coord]),
        tma.store_tile(tmap_address, [0, 0], Address(base, 1024)),
        tma.store_tile(tmap_address, [0, 0, 0], base, cache_policy=policy),
        tma.reduce_tile("add", tmap_address, [0, 0], base),
        tma.reduce_tile("max", tmap_address, [0], base),
        tma.commit_group(),
        tma.wait_group(0, read=True),
        tma.wait_group(0),
        wgmma.fence(),
        wgmma.mma_async(256, acc, desc_a, desc_b, scale_d=0),
        wgmma.mma_async(256, acc, desc_a, desc_b, scale_d=p, scale_a=-1, trans_a=1, trans_b=1),
        wgmma.mma_async(256, acc, a_frag, desc_b, ab_dtype="f16"),
        wgmma.mma_async(64, acc16, desc_a, desc_b, ab_dtype="f16", acc_dtype="f16"),
        wgmma.commit_group(),
        wgmma.wait_group(0),
    ]


# (probe, directives it needs): setmaxnreg needs a register cap at entry.
ALL_PROBES = (
    (arith_probe, None),
    (memory_probe, None),
    (sync_probe, Directives(maxntid=(384,), minnctapersm=1)),
    (tma_wgmma_probe, Directives(reqntid=(128,))),
)
