"""Hand-built kernels that exercise the emitter and every instruction family end to end.

Each builder returns a :class:`SampleKernel`: the PTX text, the entry name, the
param kinds in launch order and the launch shape it was written for. The CPU
tests assemble them with ptxas (0 spills, 0 local memory, no advisories); the
GPU tests run them against numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyfuse.backend_ptx import smem_desc
from pyfuse.backend_ptx.abi import ParamKind
from pyfuse.backend_ptx.emitter import Directives, KernelBuilder, Param, PtxModule
from pyfuse.backend_ptx.instructions import (
    arith,
    control,
    logic,
    mbarrier,
    memory,
    shuffle,
    special,
    tma,
    wgmma,
)
from pyfuse.backend_ptx.operands import Address, Reg, RegClass


@dataclass(frozen=True)
class SampleKernel:
    name: str
    ptx: str
    params: tuple[ParamKind, ...]
    block: tuple[int, int, int]
    smem_bytes: int = 0


def _global_pointer(kb: KernelBuilder, param: Param) -> Reg:
    raw, ptr = kb.reg(RegClass.B64), kb.reg(RegClass.B64)
    kb.emit(memory.ld_param(raw, param), memory.cvta("global", ptr, raw, to=True))
    return ptr


def _sreg(kb: KernelBuilder, name: str) -> Reg:
    reg = kb.reg(RegClass.B32)
    kb.emit(special.read_sreg(reg, name))
    return reg


def _byte_address(kb: KernelBuilder, base: Reg, index: Reg, elem_bytes: int) -> Reg:
    offset, address = kb.reg(RegClass.B64), kb.reg(RegClass.B64)
    kb.emit(
        arith.mul("u32", offset, index, elem_bytes, mode="wide"),
        arith.add("s64", address, base, offset),
    )
    return address


# ---- 1. vectorized elementwise add with a predicated tail --------------------------------------


def vector_add(vec: int = 4, block: int = 256) -> SampleKernel:
    """out[i] = a[i] + b[i] (f32); v4 loads for full chunks, predicated scalars at the tail."""
    module = PtxModule()
    kb = module.kernel("vector_add", Directives(maxntid=(block,)))
    a_p, b_p, out_p = (kb.param(n, ParamKind.PTR) for n in ("a", "b", "out"))
    n_p = kb.param("n", ParamKind.U32)
    a, b, out = (_global_pointer(kb, p) for p in (a_p, b_p, out_p))
    n = kb.reg(RegClass.B32)
    kb.emit(memory.ld_param(n, n_p))
    tid, ctaid, ntid = _sreg(kb, "tid.x"), _sreg(kb, "ctaid.x"), _sreg(kb, "ntid.x")
    gid, first, end = kb.regs(RegClass.B32, 3)
    tail = kb.reg(RegClass.PRED)
    kb.emit(
        arith.mad("u32", gid, ctaid, ntid, tid),
        arith.mul("u32", first, gid, vec),
        arith.add("u32", end, first, vec),
        arith.setp("gt", "u32", tail, end, n),
    )
    pa, pb, po = (_byte_address(kb, base, first, 4) for base in (a, b, out))
    tail_label = kb.new_label("tail")
    kb.emit(control.bra(tail_label).guarded(tail))
    xa, xb = kb.regs(RegClass.F32, vec), kb.regs(RegClass.F32, vec)
    kb.emit(
        memory.ld("global", "f32", xa, pa, nc=True), memory.ld("global", "f32", xb, pb, nc=True)
    )
    kb.emit(arith.add("f32", x, x, y) for x, y in zip(xa, xb, strict=True))
    kb.emit(memory.st("global", "f32", po, xa), control.ret())
    kb.place(tail_label)
    for j in range(vec):
        index, in_range = kb.reg(RegClass.B32), kb.reg(RegClass.PRED)
        x, y = kb.regs(RegClass.F32, 2)
        kb.emit(
            arith.add("u32", index, first, j),
            arith.setp("lt", "u32", in_range, index, n),
            memory.ld("global", "f32", x, Address(pa, 4 * j), nc=True).guarded(in_range),
            memory.ld("global", "f32", y, Address(pb, 4 * j), nc=True).guarded(in_range),
            arith.add("f32", x, x, y).guarded(in_range),
            memory.st("global", "f32", Address(po, 4 * j), x).guarded(in_range),
        )
    kb.emit(control.ret())
    return SampleKernel(
        "vector_add", module.render(), tuple(p.kind for p in kb.params), (block, 1, 1)
    )


# ---- 2. one warp per row: strided loads then a shuffle butterfly -------------------------------

ROWS_PER_CTA = 4


def row_sum() -> SampleKernel:
    """out[r] = sum(x[r, :]) for f32 x of shape (rows, cols); one warp per row."""
    module = PtxModule()
    kb = module.kernel("row_sum", Directives(reqntid=(32 * ROWS_PER_CTA,)))
    x_p, out_p = kb.param("x", ParamKind.PTR), kb.param("out", ParamKind.PTR)
    rows_p, cols_p = kb.param("rows", ParamKind.U32), kb.param("cols", ParamKind.U32)
    x, out = _global_pointer(kb, x_p), _global_pointer(kb, out_p)
    rows, cols = kb.regs(RegClass.B32, 2)
    kb.emit(memory.ld_param(rows, rows_p), memory.ld_param(cols, cols_p))
    tid, ctaid = _sreg(kb, "tid.x"), _sreg(kb, "ctaid.x")
    lane, warp, row, col = kb.regs(RegClass.B32, 4)
    outside = kb.reg(RegClass.PRED)
    kb.emit(
        logic.and_("b32", lane, tid, 31),
        logic.shr("u32", warp, tid, 5),
        arith.mad("u32", row, ctaid, ROWS_PER_CTA, warp),
        arith.setp("ge", "u32", outside, row, rows),
        control.ret().guarded(outside),  # the whole warp leaves together
    )
    acc = kb.reg(RegClass.F32)
    kb.emit(arith.mov("f32", acc, 0.0), arith.mov("u32", col, lane))
    loop, done = kb.new_label("cols"), kb.new_label("reduce")
    finished = kb.reg(RegClass.PRED)
    element, value = kb.reg(RegClass.B32), kb.reg(RegClass.F32)
    kb.place(loop)
    kb.emit(
        arith.setp("ge", "u32", finished, col, cols),
        control.bra(done).guarded(finished),
        arith.mad("u32", element, row, cols, col),
    )
    address = _byte_address(kb, x, element, 4)
    kb.emit(
        memory.ld("global", "f32", value, address, nc=True),
        arith.add("f32", acc, acc, value),
        arith.add("u32", col, col, 32),
        control.bra(loop),
    )
    kb.place(done)
    partner = kb.reg(RegClass.F32)
    for offset in (16, 8, 4, 2, 1):
        kb.emit(
            shuffle.shfl_sync("bfly", partner, acc, offset), arith.add("f32", acc, acc, partner)
        )
    leader = kb.reg(RegClass.PRED)
    out_address = _byte_address(kb, out, row, 4)
    kb.emit(
        arith.setp("eq", "u32", leader, lane, 0),
        memory.st("global", "f32", out_address, acc).guarded(leader),
        control.ret(),
    )
    return SampleKernel("row_sum", module.render(), tuple(p.kind for p in kb.params), (128, 1, 1))


# ---- shared pieces of the two wgmma kernels ----------------------------------------------------

TILE_K = 64  # bf16 elements per 128-byte swizzled row
K_STEP_BYTES = 32  # one k16 step inside a 128B-swizzle atom
N_TILE = 64


def _wgmma_k_tile(
    kb: KernelBuilder, acc: tuple[Reg, ...], a_tile: Reg, b_tile: Reg, first_scale: Reg | int
) -> None:
    """Four m64n64k16 steps over one 64-wide K tile; both operands K-major, 128B swizzle."""
    lbo, sbo = smem_desc.k_major(smem_desc.Swizzle.B128)
    desc_a = smem_desc.emit_descriptor(kb, a_tile, lbo=lbo, sbo=sbo, swizzle=smem_desc.Swizzle.B128)
    desc_b = smem_desc.emit_descriptor(kb, b_tile, lbo=lbo, sbo=sbo, swizzle=smem_desc.Swizzle.B128)
    kb.emit(wgmma.fence())
    for k in range(TILE_K // 16):
        step_a = desc_a if k == 0 else smem_desc.emit_advance(kb, desc_a, k * K_STEP_BYTES)
        step_b = desc_b if k == 0 else smem_desc.emit_advance(kb, desc_b, k * K_STEP_BYTES)
        scale = first_scale if k == 0 else 1
        kb.emit(wgmma.mma_async(N_TILE, acc, step_a, step_b, scale_d=scale))
    kb.emit(wgmma.commit_group(), wgmma.wait_group(0))


def _store_accumulators(
    kb: KernelBuilder, acc: tuple[Reg, ...], out: Reg, pitch: Reg, row0: Reg, col0: Reg, tid: Reg
) -> None:
    """Write the m64n64 f32 fragment to row-major ``out``.

    Register d[i] of lane l in warp w holds row 16w + l/4 + 8((i>>1)&1), column
    8(i>>2) + 2(l%4) + (i&1); so (i, i+1) are adjacent columns, stored as one v2.
    """
    lane, warp, row, col, element = kb.regs(RegClass.B32, 5)
    kb.emit(
        logic.and_("b32", lane, tid, 31),
        logic.shr("u32", warp, tid, 5),
        logic.and_("b32", warp, warp, 3),
        logic.shr("u32", row, lane, 2),
        arith.mad("u32", row, warp, 16, row),
        arith.add("u32", row, row, row0),
        logic.and_("b32", col, lane, 3),
        arith.mad("u32", col, col, 2, col0),
        arith.mad("u32", element, row, pitch, col),
    )
    top = _byte_address(kb, out, element, 4)
    row_bytes = kb.reg(RegClass.B64)
    bottom = kb.reg(RegClass.B64)
    kb.emit(
        arith.mul("u32", row_bytes, pitch, 32, mode="wide"),  # 8 rows x 4 bytes
        arith.add("s64", bottom, top, row_bytes),
    )
    for j in range(N_TILE // 8):
        kb.emit(
            memory.st("global", "f32", Address(top, 32 * j), [acc[4 * j], acc[4 * j + 1]]),
            memory.st("global", "f32", Address(bottom, 32 * j), [acc[4 * j + 2], acc[4 * j + 3]]),
        )


# ---- 3. mbarrier + TMA + wgmma: one 64x64x64 tile ----------------------------------------------

TILE_BYTES = 64 * TILE_K * 2


def tma_wgmma_tile() -> SampleKernel:
    """out[0:64, 0:64] = A[0:64, 0:64] @ B[0:64, 0:64].T (bf16 in, f32 out), one warpgroup."""
    module = PtxModule()
    kb = module.kernel("tma_wgmma_tile", Directives(reqntid=(128,)))
    map_a, map_b = kb.param("map_a", ParamKind.TENSOR_MAP), kb.param("map_b", ParamKind.TENSOR_MAP)
    out_p, pitch_p = kb.param("out", ParamKind.PTR), kb.param("pitch", ParamKind.U32)
    out = _global_pointer(kb, out_p)
    pitch = kb.reg(RegClass.B32)
    kb.emit(memory.ld_param(pitch, pitch_p))
    tma_a, tma_b = kb.reg(RegClass.B64), kb.reg(RegClass.B64)
    kb.emit(memory.tensor_map_address(tma_a, map_a), memory.tensor_map_address(tma_b, map_b))
    base, a_tile, b_tile = kb.regs(RegClass.B32, 3)
    kb.emit(
        memory.mov_address(base, kb.dynamic_smem()),
        arith.add("u32", a_tile, base, 1024),  # the barrier lives below the 1024-aligned tiles
        arith.add("u32", b_tile, base, 1024 + TILE_BYTES),
    )
    tid = _sreg(kb, "tid.x")
    leader = kb.reg(RegClass.PRED)
    kb.emit(
        arith.setp("eq", "u32", leader, tid, 0),
        mbarrier.init(base, 1).guarded(leader),
        mbarrier.fence_init().guarded(leader),
        control.bar_sync(0),
        tma.prefetch_tensormap(tma_a).guarded(leader),
        tma.prefetch_tensormap(tma_b).guarded(leader),
        mbarrier.arrive_expect_tx(base, 2 * TILE_BYTES).guarded(leader),
        tma.load_tile(a_tile, tma_a, [0, 0], base).guarded(leader),
        tma.load_tile(b_tile, tma_b, [0, 0], base, dst_space="shared::cta").guarded(leader),
    )
    ready = kb.reg(RegClass.PRED)
    kb.emit(mbarrier.wait_parity(ready, base, 0, kb.new_label("full")))
    acc = kb.regs(RegClass.F32, wgmma.accumulator_count(N_TILE))
    _wgmma_k_tile(kb, acc, a_tile, b_tile, first_scale=0)
    zero = kb.reg(RegClass.B32)
    kb.emit(arith.mov("u32", zero, 0))
    _store_accumulators(kb, acc, out, pitch, zero, zero, tid)
    kb.emit(control.ret())
    return SampleKernel(
        "tma_wgmma_tile",
        module.render(),
        tuple(p.kind for p in kb.params),
        (128, 1, 1),
        smem_bytes=1024 + 2 * TILE_BYTES,
    )


# ---- 4. warp-specialized pipeline: TMA producer, two wgmma consumers, setmaxnreg ---------------

STAGES = 2
BLOCK_M = 128
A_STAGE_BYTES = BLOCK_M * TILE_K * 2
B_STAGE_BYTES = N_TILE * TILE_K * 2
STAGE_BYTES = A_STAGE_BYTES + B_STAGE_BYTES
PRODUCER_REGS, CONSUMER_REGS = 40, 232
CONSUMER_THREADS = 256


def warp_specialized_gemm() -> SampleKernel:
    """out = A @ B.T for bf16 A (M, K), B (N, K), f32 out; 128x64 tiles, K in 64-wide steps.

    Warpgroup 0 gives registers back and one thread issues TMA loads into a
    2-stage ring guarded by full/empty mbarriers; warpgroups 1 and 2 take the
    registers, each multiplies its 64-row half, and release the stage.
    """
    module = PtxModule()
    kb = module.kernel("ws_gemm", Directives(maxntid=(384,), minnctapersm=1))
    map_a, map_b = kb.param("map_a", ParamKind.TENSOR_MAP), kb.param("map_b", ParamKind.TENSOR_MAP)
    out_p, pitch_p = kb.param("out", ParamKind.PTR), kb.param("pitch", ParamKind.U32)
    k_tiles_p = kb.param("k_tiles", ParamKind.U32)
    tma_a, tma_b = kb.reg(RegClass.B64), kb.reg(RegClass.B64)
    kb.emit(memory.tensor_map_address(tma_a, map_a), memory.tensor_map_address(tma_b, map_b))
    k_tiles = kb.reg(RegClass.B32)
    kb.emit(memory.ld_param(k_tiles, k_tiles_p))
    base = kb.reg(RegClass.B32)
    kb.emit(memory.mov_address(base, kb.dynamic_smem()))
    tid, ctaid_x, ctaid_y = _sreg(kb, "tid.x"), _sreg(kb, "ctaid.x"), _sreg(kb, "ctaid.y")
    leader = kb.reg(RegClass.PRED)
    kb.emit(arith.setp("eq", "u32", leader, tid, 0))
    for stage in range(STAGES):
        kb.emit(
            mbarrier.init(Address(base, 8 * stage), 1).guarded(leader),  # full
            mbarrier.init(Address(base, 8 * (STAGES + stage)), CONSUMER_THREADS).guarded(leader),
        )
    kb.emit(mbarrier.fence_init().guarded(leader), control.bar_sync(0))

    # Ring state shared by both roles: k tile, stage, phase parity, barrier/tile addresses.
    kt, stage, phase, m0, n0 = kb.regs(RegClass.B32, 5)
    full, empty, a_tile, b_tile = kb.regs(RegClass.B32, 4)
    kb.emit(
        arith.mul("u32", m0, ctaid_x, BLOCK_M),
        arith.mul("u32", n0, ctaid_y, N_TILE),
    )

    def ring_start() -> None:
        kb.emit(arith.mov("u32", kt, 0), arith.mov("u32", stage, 0), arith.mov("u32", phase, 0))

    def ring_addresses() -> None:
        kb.emit(
            arith.mad("u32", full, stage, 8, base),
            arith.add("u32", empty, full, 8 * STAGES),
            arith.mad("u32", a_tile, stage, STAGE_BYTES, base),
            arith.add("u32", a_tile, a_tile, 1024),
            arith.add("u32", b_tile, a_tile, A_STAGE_BYTES),
        )

    def ring_advance() -> None:
        wrapped = kb.reg(RegClass.PRED)
        kb.emit(
            arith.add("u32", kt, kt, 1),
            arith.add("u32", stage, stage, 1),
            arith.setp("eq", "u32", wrapped, stage, STAGES),
            arith.mov("u32", stage, 0).guarded(wrapped),
            logic.xor("b32", phase, phase, 1).guarded(wrapped),
        )

    warpgroup, done = kb.reg(RegClass.B32), kb.reg(RegClass.PRED)
    is_producer = kb.reg(RegClass.PRED)
    consumer_label, exit_label = kb.new_label("consumer"), kb.new_label("exit")
    kb.emit(
        logic.shr("u32", warpgroup, tid, 7),
        arith.setp("ne", "u32", is_producer, warpgroup, 0),
        control.bra(consumer_label, uni=True).guarded(is_producer),
    )

    # Producer warpgroup: shrink, then one thread streams tiles.
    kb.emit(
        special.setmaxnreg("dec", PRODUCER_REGS),
        control.bra(exit_label).guarded(leader, negate=True),
    )
    ring_start()
    produce, waited = kb.new_label("produce"), kb.reg(RegClass.PRED)
    empty_parity, k_coord = kb.regs(RegClass.B32, 2)
    kb.place(produce)
    kb.emit(arith.setp("ge", "u32", done, kt, k_tiles), control.bra(exit_label).guarded(done))
    ring_addresses()
    kb.emit(logic.xor("b32", empty_parity, phase, 1))  # a fresh barrier passes parity 1 at once
    kb.emit(mbarrier.wait_parity(waited, empty, empty_parity, kb.new_label("empty")))
    kb.emit(
        mbarrier.arrive_expect_tx(full, STAGE_BYTES),
        arith.mul("u32", k_coord, kt, TILE_K),
        tma.load_tile(a_tile, tma_a, [k_coord, m0], full),
        tma.load_tile(b_tile, tma_b, [k_coord, n0], full),
    )
    ring_advance()
    kb.emit(control.bra(produce))

    # Consumer warpgroups: grow, then multiply their 64-row half of each stage.
    kb.place(consumer_label)
    kb.emit(special.setmaxnreg("inc", CONSUMER_REGS))
    acc = kb.regs(RegClass.F32, wgmma.accumulator_count(N_TILE))
    half_offset, a_half = kb.regs(RegClass.B32, 2)
    kb.emit(
        arith.sub("u32", half_offset, warpgroup, 1),
        arith.mul("u32", half_offset, half_offset, 64 * TILE_K * 2),
    )
    ring_start()
    consume, ready, accumulate = (
        kb.new_label("consume"),
        kb.reg(RegClass.PRED),
        kb.reg(RegClass.PRED),
    )
    store_label = kb.new_label("store")
    kb.place(consume)
    kb.emit(arith.setp("ge", "u32", done, kt, k_tiles), control.bra(store_label).guarded(done))
    ring_addresses()
    kb.emit(mbarrier.wait_parity(ready, full, phase, kb.new_label("full")))
    kb.emit(
        arith.add("u32", a_half, a_tile, half_offset),
        arith.setp("ne", "u32", accumulate, kt, 0),  # scale_d = 0 on the first tile
    )
    _wgmma_k_tile(kb, acc, a_half, b_tile, first_scale=accumulate)
    kb.emit(mbarrier.arrive(empty))
    ring_advance()
    kb.emit(control.bra(consume))

    kb.place(store_label)
    out = _global_pointer(kb, out_p)
    pitch, row0 = kb.regs(RegClass.B32, 2)
    kb.emit(
        memory.ld_param(pitch, pitch_p),
        arith.sub("u32", row0, warpgroup, 1),
        arith.mad("u32", row0, row0, 64, m0),
    )
    _store_accumulators(kb, acc, out, pitch, row0, n0, tid)
    kb.place(exit_label)
    kb.emit(control.ret())
    return SampleKernel(
        "ws_gemm",
        module.render(),
        tuple(p.kind for p in kb.params),
        (384, 1, 1),
        smem_bytes=1024 + STAGES * STAGE_BYTES,
    )


ALL_SAMPLES = (vector_add, row_sum, tma_wgmma_tile, warp_specialized_gemm)
