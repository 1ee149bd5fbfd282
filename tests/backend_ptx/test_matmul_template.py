"""The warp-specialized matmul main loop: tile order, operand layouts, tensor maps, and the
PTX (assembled with ptxas: no spills, no local memory, no wgmma-serialization advisory).

``gemm_kernel`` builds the kernel IR the matmul lowering produces for a plain GEMM (full-tile
TMA boxes, the 1024-byte barrier area, the stage ring) and ``build_gemm_ptx`` turns it into
a module with :class:`StoreEpilogue`, a stand-in for ``emit.py``'s epilogue that stores each
accumulator as bf16 into a row-major ``[batch, M, N]`` output. The GPU test reuses both.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from pyfuse.backend_ptx import driver, matmul_host, matmul_template, ptxas
from pyfuse.backend_ptx.emitter import KernelBuilder, ParamKind, PtxModule
from pyfuse.backend_ptx.instructions import arith, control, convert, memory
from pyfuse.backend_ptx.matmul_host import TileOrder, operand_layout
from pyfuse.backend_ptx.operands import Address, Reg, RegClass
from pyfuse.backend_ptx.smem_desc import Swizzle
from pyfuse.ir import dtypes
from pyfuse.ir import kernel_ir as k
from pyfuse.ir.tensor import MemoryType

SM_COUNT = 132
LAYOUTS = [("k", "k"), ("k", "mn"), ("mn", "k"), ("mn", "mn")]
BARRIER_AREA = 1024
SMEM_LIMIT = 232448


# ---- kernel IR of a plain GEMM, as the lowering builds it --------------------------------------


@dataclass(frozen=True)
class Gemm:
    """C[b] = A[b] @ B_i[b] for each of ``mmas`` B operands. ``a_major``/``b_major`` say
    which dim is contiguous in memory: "k" or "mn" (A stored [K, M], B stored [K, N])."""

    m: int
    n: int
    k: int
    a_major: str = "k"
    b_major: str = "k"
    tile: tuple[int, int, int] = (128, 256, 64)
    stages: int | None = None
    persistent: bool = False
    swizzle: int = 1
    mmas: int = 1
    batch: int = 1
    a_batched: bool = True  # False: A is broadcast over the batch (no batch dim)
    cluster: tuple[int, int] = (1, 1)  # (cluster_m, cluster_n)

    @property
    def name(self) -> str:
        kind = "p" if self.persistent else "g"
        clustered = "" if self.cluster == (1, 1) else f"_c{self.cluster[0]}x{self.cluster[1]}"
        return (
            f"gemm_{self.m}x{self.n}x{self.k}_b{self.batch}_{self.a_major}{self.b_major}"
            f"_{self.tile[0]}x{self.tile[1]}_{kind}{self.swizzle}_x{self.mmas}{clustered}"
        )


def _operand(
    name: str, gemm: Gemm, role: str, major: str, batched: bool, offset: int
) -> k.TmaOperand:
    rows = {"m": gemm.m, "n": gemm.n}[role]
    tile_rows = {"m": gemm.tile[0], "n": gemm.tile[1]}[role]
    tile_k = gemm.tile[2]
    if major == "k":
        dims = [(rows, role, tile_rows), (gemm.k, "k", 64)]
    else:
        dims = [(gemm.k, "k", tile_k), (rows, role, 64)]
    if batched and gemm.batch > 1:
        dims.insert(0, (gemm.batch, "batch", 1))
    strides, stride = [], 1
    for extent, _, _ in reversed(dims):
        strides.insert(0, stride)
        stride *= extent
    tile_bytes = tile_rows * tile_k * 2
    return k.TmaOperand(
        buffer_name=name,
        dtype=dtypes.bfloat16,
        shape=tuple(extent for extent, _, _ in dims),
        strides=tuple(strides),
        box=tuple(box for _, _, box in dims),
        roles=tuple(role for _, role, _ in dims),
        swizzle_bytes=128,
        smem_offset=offset,
        stage_bytes=0,  # filled in once every operand is placed
        stage_tile_bytes=tile_bytes,
    )


def gemm_kernel(gemm: Gemm) -> k.Kernel:
    tile_m, tile_n, tile_k = gemm.tile
    names = ["A", *[f"B{i}" for i in range(gemm.mmas)]]
    operands: list[k.TmaOperand] = []
    offset = BARRIER_AREA
    for index, name in enumerate(names):
        role, major = ("m", gemm.a_major) if index == 0 else ("n", gemm.b_major)
        batched = gemm.a_batched or index > 0
        operand = _operand(name, gemm, role, major, batched, offset)
        operands.append(operand)
        offset += operand.stage_tile_bytes
    stage_total = offset - BARRIER_AREA
    stages = gemm.stages or min(8, (SMEM_LIMIT - BARRIER_AREA) // stage_total)
    operands = [
        k.TmaOperand(**{**operand.__dict__, "stage_bytes": stage_total}) for operand in operands
    ]
    warpgroups = tile_m // 64
    accumulators = [
        k.Buffer(f"acc{i}", dtypes.float32, MemoryType.LOCAL, tile_n // 2) for i in range(gemm.mmas)
    ]
    loop = k.MatmulMainLoop(
        operands=operands,
        mmas=[(0, i + 1, acc) for i, acc in enumerate(accumulators)],
        m=gemm.m,
        n=gemm.n,
        k=gemm.k,
        batch=gemm.batch,
        tile_m=tile_m,
        tile_n=tile_n,
        tile_k=tile_k,
        stages=stages,
        consumer_warpgroups=warpgroups,
        grid_swizzle=gemm.swizzle,
        persistent=gemm.persistent,
        row=k.Var("row", dtypes.int32),
        col=k.Var("col", dtypes.int32),
        batch_index=k.Var("batch", dtypes.int32),
        element=k.Var("element", dtypes.int32),
        cluster_m=gemm.cluster[0],
        cluster_n=gemm.cluster[1],
    )
    order = TileOrder.of(loop)
    size = loop.cluster_size
    if size > 1:
        clusters = min(SM_COUNT // size, order.tiles) if gemm.persistent else order.tiles
        grid = (clusters * size, 1, 1)
    else:
        grid = (min(SM_COUNT, order.tiles), 1, 1) if gemm.persistent else order.grid()
    params = [
        k.TensorParam(o.buffer_name, dtypes.bfloat16, k.ParamRole.INPUT, i, o.shape)
        for i, o in enumerate(operands)
    ]
    params += [
        k.TensorParam(f"C{i}", dtypes.bfloat16, k.ParamRole.OUTPUT, i, (gemm.batch, gemm.m, gemm.n))
        for i in range(gemm.mmas)
    ]
    buffers = {p.buffer_name: k.Buffer(p.buffer_name, p.dtype, MemoryType.GLOBAL) for p in params}
    return k.Kernel(
        name=gemm.name,
        params=params,
        buffers=buffers,
        body=[loop],
        grid=grid,
        block=(128, warpgroups + 1, 1),
        smem_bytes=BARRIER_AREA + stages * stage_total,
        cluster=(size, 1, 1),
    )


class StoreEpilogue:
    """Store accumulator registers (i, i + 1), adjacent columns, as one bf16x2 word into
    ``out[b, row, col]`` when row < M and col < N (N must be even)."""

    def __init__(
        self,
        kb: KernelBuilder,
        stmt: k.MatmulMainLoop,
        outputs: Sequence[Reg],
        accumulators: dict[k.Buffer, tuple[Reg, ...]],
    ) -> None:
        assert stmt.n % 2 == 0, "the stand-in stores column pairs"
        self.kb, self.stmt, self.outputs = kb, stmt, outputs
        self.accumulators = [accumulators[acc] for _, _, acc in stmt.mmas]

    def __call__(
        self,
        bindings: dict[k.Var, Reg],
        element: int,
        staging: Mapping[int, Address],
        reads: Mapping[int, Address],
    ) -> None:
        del staging, reads  # the stand-in stages and reads nothing
        if element % 2:
            return  # stored with element - 1
        kb, stmt = self.kb, self.stmt
        row, col, batch = bindings[stmt.row], bindings[stmt.col], bindings[stmt.batch_index]
        inside = kb.reg(RegClass.PRED)
        index, flat = kb.reg(RegClass.B32), kb.reg(RegClass.B64)
        kb.emit(
            arith.setp("lt", "u32", inside, row, stmt.m),
            arith.setp("lt", "u32", inside, col, stmt.n, bool_op="and", c=inside),
            arith.mad("u32", index, batch, stmt.m, row),
            arith.mul("u32", flat, index, stmt.n, mode="wide"),
        )
        column = kb.reg(RegClass.B64)
        kb.emit(convert.cvt("u64", "u32", column, col), arith.add("s64", flat, flat, column))
        for output, registers in zip(self.outputs, self.accumulators, strict=True):
            address, packed = kb.reg(RegClass.B64), kb.reg(RegClass.B32)
            kb.emit(
                arith.mad("u64", address, flat, 2, output),
                convert.cvt_pack("bf16x2", packed, registers[element + 1], registers[element]),
                memory.st("global", "b32", address, packed).guarded(inside),
            )


@dataclass(frozen=True)
class BuiltGemm:
    kernel: k.Kernel
    ptx: str
    params: tuple[ParamKind, ...]


def build_gemm_ptx(gemm: Gemm) -> BuiltGemm:
    kernel = gemm_kernel(gemm)
    stmt = matmul_host.find_main_loop(kernel)
    module = PtxModule()
    kb = module.kernel(kernel.name, matmul_template.matmul_directives(kernel))
    maps = [kb.param(p.name, p.kind) for p in matmul_template.tensor_map_params_for(kernel)]
    outputs = []
    for index in range(gemm.mmas):
        param = kb.param(f"C{index}", ParamKind.PTR)
        raw, pointer = kb.reg(RegClass.B64), kb.reg(RegClass.B64)
        kb.emit(memory.ld_param(raw, param), memory.cvta("global", pointer, raw, to=True))
        outputs.append(pointer)
    accumulators = matmul_template.allocate_accumulators(kb, stmt)
    epilogue = StoreEpilogue(kb, stmt, outputs, accumulators)
    matmul_template.emit_matmul_main_loop(
        kb, stmt, kernel, maps, epilogue, accumulators=accumulators
    )
    kb.emit(control.ret())
    return BuiltGemm(kernel, module.render(), tuple(p.kind for p in kb.params))


# ---- tile order ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("m_tiles", "n_tiles", "batch", "swizzle"),
    [(1, 1, 1, 1), (8, 8, 1, 4), (7, 5, 2, 4), (3, 4, 1, 4), (64, 32, 1, 4), (5, 3, 3, 2)],
)
def test_tile_order_visits_every_tile_once(
    m_tiles: int, n_tiles: int, batch: int, swizzle: int
) -> None:
    order = TileOrder(m_tiles, n_tiles, batch, swizzle)
    every = {(b, m, n) for b in range(batch) for m in range(m_tiles) for n in range(n_tiles)}
    linear = [order.linear(t) for t in range(order.tiles)]
    assert sorted(linear) == sorted(every)
    gx, gy, gz = order.grid()
    by_cta = [order.tile(z, y, x) for z in range(gz) for y in range(gy) for x in range(gx)]
    assert sorted(t for t in by_cta if t is not None) == sorted(every)
    # The persistent walk and the grid agree: tile t is CTA (w, g, b) of the grid.
    per_group = swizzle * n_tiles
    for t, tile in enumerate(linear):
        b, rest = divmod(t, m_tiles * n_tiles)
        assert order.tile(b, rest // per_group, rest % per_group) == tile


def test_tile_order_walks_swizzle_m_tiles_per_n_tile() -> None:
    order = TileOrder(m_tiles=6, n_tiles=3, batch=1, swizzle=4)
    walk = [order.linear(t)[1:] for t in range(order.tiles)]
    assert walk[:8] == [(0, 0), (1, 0), (2, 0), (3, 0), (0, 1), (1, 1), (2, 1), (3, 1)]
    # The ragged last group (M tiles 4 and 5) walks 2 M tiles per N tile.
    assert walk[12:] == [(4, 0), (5, 0), (4, 1), (5, 1), (4, 2), (5, 2)]


@pytest.mark.parametrize(("cluster_m", "cluster_n"), [(2, 1), (1, 2), (2, 2), (4, 1), (1, 4)])
@pytest.mark.parametrize(("m_tiles", "n_tiles", "batch", "swizzle"), [(7, 5, 2, 4), (8, 8, 1, 16)])
def test_cluster_ranks_cover_every_tile_once(
    cluster_m: int, cluster_n: int, m_tiles: int, n_tiles: int, batch: int, swizzle: int
) -> None:
    """The template's walk: cluster tile t from the order, rank r takes (r % cm, r // cm) of
    it; tiles past the edge compute on zero-filled operands and store nothing."""
    gemm = Gemm(
        128 * m_tiles,
        256 * n_tiles,
        64,
        swizzle=swizzle,
        batch=batch,
        cluster=(cluster_m, cluster_n),
    )
    order = TileOrder.of(_loop(gemm))
    assert order.m_tiles == -(-m_tiles // cluster_m) and order.n_tiles == -(-n_tiles // cluster_n)
    assert order.swizzle == max(1, swizzle // cluster_m)
    visited = []
    for t in range(order.tiles):
        b, mc, nc = order.linear(t)
        for rank in range(cluster_m * cluster_n):
            m, n = mc * cluster_m + rank % cluster_m, nc * cluster_n + rank // cluster_m
            if m < m_tiles and n < n_tiles:
                visited.append((b, m, n))
    every = [(b, m, n) for b in range(batch) for m in range(m_tiles) for n in range(n_tiles)]
    assert sorted(visited) == every


# ---- operand layouts and descriptors ---------------------------------------------------------


def _loop(gemm: Gemm) -> k.MatmulMainLoop:
    return matmul_host.find_main_loop(gemm_kernel(gemm))


def test_k_major_layout() -> None:
    stmt = _loop(Gemm(1024, 1024, 1024))
    a, b = (operand_layout(stmt, o) for o in stmt.operands)
    assert (a.copies, a.box_bytes, a.lbo, a.sbo) == (1, 128 * 128, 16, 1024)
    assert a.k_steps == (0, 32, 64, 96)
    assert a.rows64_bytes == 64 * 128
    assert (b.copies, b.box_bytes) == (1, 256 * 128)
    assert b.k_major and a.role == "m" and b.role == "n"


def test_mn_major_layout_spans_several_atoms() -> None:
    stmt = _loop(Gemm(1024, 1024, 1024, a_major="mn", b_major="mn"))
    a, b = (operand_layout(stmt, o) for o in stmt.operands)
    # B: [K, N] with N contiguous; tile_n 256 is four 64-column boxes of 64 K rows.
    assert (b.copies, b.box_bytes, b.lbo, b.sbo) == (4, 64 * 128, 8192, 1024)
    assert b.k_steps == (0, 2048, 4096, 6144)
    assert not b.k_major
    # A: [K, M]; consumer warpgroup w reads the w-th 64-column box.
    assert (a.copies, a.rows64_bytes, a.lbo) == (2, 8192, 8192)


@pytest.mark.parametrize("cluster", [(1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 4)])
@pytest.mark.parametrize(("a_major", "b_major"), LAYOUTS)
def test_multicast_slices_tile_the_stage_exactly(
    a_major: str, b_major: str, cluster: tuple[int, int]
) -> None:
    """The slices of all sharers together load every byte of the stage tile once, and each
    load's bytes sit where the full-box layout puts its coordinates."""
    stmt = _loop(Gemm(1024, 1024, 1024, a_major, b_major, cluster=cluster))
    for layout in (operand_layout(stmt, o) for o in stmt.operands):
        assert layout.slices == (cluster[1] if layout.role == "m" else cluster[0])
        operand, last = layout.operand, len(layout.operand.roles) - 1
        outer = next(d for d, r in enumerate(operand.roles) if r != "batch" and d != last)
        span = operand.box[last]
        load_bytes = math.prod(layout.load_box) * operand.dtype.itemsize
        covered: list[tuple[int, int]] = []
        for s in range(layout.slices):
            for offset, coords in layout.loads:
                start = offset + s * layout.slice_bytes
                at = [c + s * d for c, d in zip(coords, layout.slice_coords, strict=True)]
                row_bytes = span * operand.dtype.itemsize
                assert start == at[last] // span * layout.box_bytes + at[outer] * row_bytes
                assert start % 1024 == 0  # every load starts on a swizzle-pattern boundary
                covered.append((start, start + load_bytes))
        covered.sort()
        assert covered[0][0] == 0 and covered[-1][1] == operand.stage_tile_bytes
        assert all(a[1] == b[0] for a, b in itertools.pairwise(covered))


def test_k_major_b_tile_is_cut_in_two_for_a_2x1_cluster() -> None:
    stmt = _loop(Gemm(1024, 1024, 1024, cluster=(2, 1)))
    a, b = (operand_layout(stmt, o) for o in stmt.operands)
    assert a.slices == 1 and a.load_box == a.operand.box
    # One 256x64 box per stage; each CTA loads (and multicasts) 128 of its rows.
    assert b.slices == 2 and b.load_box == (128, 64) and b.slice_bytes == 128 * 128
    assert b.loads == ((0, (0, 0)),) and b.slice_coords == (128, 0)
    plans = matmul_host.tensor_map_plans(gemm_kernel(Gemm(1024, 1024, 1024, cluster=(2, 1))))
    assert [list(p.box_dims) for p in plans] == [[64, 128], [64, 128]]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("box", (64, 32), "contiguous dim must be one 128-byte"),
        ("box", (64, 64), "must be 128 along M"),
        ("stage_tile_bytes", 4096, "is not 1 boxes"),
        ("smem_offset", 1536, "multiples of 1024"),
    ],
)
def test_layouts_the_descriptors_would_misread_are_refused(
    field: str, value: Any, message: str
) -> None:
    stmt = _loop(Gemm(1024, 1024, 1024))
    operand = k.TmaOperand(**{**stmt.operands[0].__dict__, field: value})
    with pytest.raises(ValueError, match=message):
        operand_layout(stmt, operand)


def test_ambiguous_batch_dims_are_refused() -> None:
    gemm = Gemm(256, 256, 64, batch=6)
    kernel = gemm_kernel(gemm)
    stmt = matmul_host.find_main_loop(kernel)
    a = stmt.operands[0]
    split = k.TmaOperand(
        **{
            **a.__dict__,
            "shape": (2, 3, *a.shape[1:]),
            "strides": (a.strides[0] * 3, a.strides[0], *a.strides[1:]),
            "box": (1, 1, *a.box[1:]),
            "roles": ("batch", "batch", *a.roles[1:]),
        }
    )
    stmt.operands[0] = split
    with pytest.raises(ValueError, match="one batch index"):
        build_gemm_ptx_from(kernel)


def build_gemm_ptx_from(kernel: k.Kernel) -> str:
    stmt = matmul_host.find_main_loop(kernel)
    module = PtxModule()
    kb = module.kernel(kernel.name, matmul_template.matmul_directives(kernel))
    maps = [kb.param(p.name, p.kind) for p in matmul_template.tensor_map_params_for(kernel)]
    matmul_template.emit_matmul_main_loop(kb, stmt, kernel, maps, lambda bindings, element: None)
    kb.emit(control.ret())
    return module.render()


def test_missing_register_cap_is_refused() -> None:
    kernel = gemm_kernel(Gemm(256, 256, 64))
    stmt = matmul_host.find_main_loop(kernel)
    kb = PtxModule().kernel("k")
    maps = [kb.param(p.name, p.kind) for p in matmul_template.tensor_map_params_for(kernel)]
    with pytest.raises(ValueError, match="matmul_directives"):
        matmul_template.emit_matmul_main_loop(kb, stmt, kernel, maps, lambda b, e: None)


def test_register_split_balances_the_register_file() -> None:
    for tile_m, split in ((64, (40, 240)), (128, (40, 232))):
        kernel = gemm_kernel(Gemm(1024, 1024, 1024, tile=(tile_m, 128, 64)))
        stmt = matmul_host.find_main_loop(kernel)
        directives = matmul_template.matmul_directives(kernel)
        assert matmul_host.register_split(stmt, directives) == split


# ---- tensor maps -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a_major", "b_major", "a_plan", "b_plan"),
    [
        ("k", "k", ((512, 1000), (1024,), (64, 128)), ((512, 304), (1024,), (64, 256))),
        ("mn", "k", ((1000, 512), (2000,), (64, 64)), ((512, 304), (1024,), (64, 256))),
        ("k", "mn", ((512, 1000), (1024,), (64, 128)), ((304, 512), (608,), (64, 64))),
        ("mn", "mn", ((1000, 512), (2000,), (64, 64)), ((304, 512), (608,), (64, 64))),
    ],
)
def test_tensor_map_plans_follow_memory_order(
    a_major: str, b_major: str, a_plan: tuple[Any, ...], b_plan: tuple[Any, ...]
) -> None:
    kernel = gemm_kernel(Gemm(1000, 304, 512, a_major=a_major, b_major=b_major))
    plans = matmul_host.tensor_map_plans(kernel)
    for plan, (dims, strides, box) in zip(plans, (a_plan, b_plan), strict=True):
        assert (plan.global_dims, plan.global_strides, plan.box_dims) == (dims, strides, box)
        assert plan.swizzle is Swizzle.B128 and plan.dtype == "bf16"


def test_tensor_map_plans_for_a_batched_and_a_broadcast_operand() -> None:
    kernel = gemm_kernel(Gemm(256, 128, 64, tile=(128, 128, 64), batch=3, a_batched=False))
    a, b = matmul_host.tensor_map_plans(kernel)
    assert a.global_dims == (64, 256) and a.box_dims == (64, 128)
    assert b.global_dims == (64, 128, 3) and b.global_strides == (128, 128 * 64 * 2)
    assert b.box_dims == (64, 128, 1)


@pytest.fixture
def fake_driver() -> Iterator[Any]:
    from ptx_fake_driver import FakeDriver

    fake = FakeDriver()
    fake.CUtensorMapL2promotion = int  # the fake's enum stops at L2_128B; the maps ask 256B
    with driver.use_driver(fake):
        yield fake


def test_tensor_maps_are_encoded_once_per_pointer_tuple(fake_driver: Any) -> None:
    kernel = gemm_kernel(Gemm(256, 256, 64))
    first = matmul_host.encode_tensor_maps(kernel, {"A": 0x10000, "B0": 0x20000})
    again = matmul_host.encode_tensor_maps(kernel, [0x10000, 0x20000, 0x30000])
    assert first is again and len(first) == 2
    encodes = [c for c in fake_driver.calls if c[0] == "cuTensorMapEncodeTiled"]
    assert len(encodes) == 2
    matmul_host.encode_tensor_maps(kernel, {"A": 0x10000, "B0": 0x40000})
    encodes = [c for c in fake_driver.calls if c[0] == "cuTensorMapEncodeTiled"]
    assert len(encodes) == 4
    assert [d.value for d in encodes[-1][4]] == [64, 256]  # global dims, innermost first


def test_tensor_maps_need_every_operand_pointer() -> None:
    kernel = gemm_kernel(Gemm(256, 256, 64))
    with pytest.raises(ValueError, match=r"operands \['B0'\]"):
        matmul_host.encode_tensor_maps(kernel, {"A": 0x10000})


# ---- PTX through ptxas -----------------------------------------------------------------------

ASSEMBLED = [
    *[
        Gemm(4096, 4096, 4096, a, b, (128, 256, 64), 4, persistent, 4)
        for a, b in LAYOUTS
        for persistent in (False, True)
    ],
    *[
        Gemm(4096, 14336, 4096, a, b, (128, 128, 64), persistent=p, swizzle=4, mmas=2)
        for a, b in (("k", "k"), ("mn", "mn"))
        for p in (False, True)
    ],
    Gemm(64, 64, 64, tile=(64, 128, 64)),
    Gemm(1000, 1000, 1000, "mn", "mn", persistent=True, swizzle=4, batch=3, a_batched=False),
    *[
        Gemm(4096, 4096, 4096, a, b, (128, 256, 64), 4, persistent, 16, cluster=cluster)
        for a, b in LAYOUTS
        for persistent in (False, True)
        for cluster in ((2, 1), (1, 2))
    ],
    Gemm(1000, 1000, 1000, "k", "mn", (128, 128, 64), persistent=True, mmas=2, cluster=(2, 2)),
]


@pytest.fixture
def ptxas_or_skip() -> None:
    if not ptxas.ptxas_available():
        pytest.skip("ptxas not found")


@pytest.mark.parametrize("gemm", ASSEMBLED, ids=lambda g: g.name)
def test_main_loop_assembles_cleanly(gemm: Gemm, ptxas_or_skip: None) -> None:
    built = build_gemm_ptx(gemm)
    for needle in (
        "wgmma.mma_async.sync.aligned.m64n",
        "cp.async.bulk.tensor.",
        "mbarrier.try_wait.parity",
        "mbarrier.arrive.expect_tx",
        "setmaxnreg.inc.sync.aligned.u32",
        ".minnctapersm 1",
    ):
        assert needle in built.ptx, needle
    result = ptxas.assemble(built.ptx)
    assert result.problems() == [], "\n".join(result.problems())
    resources = result.kernel(built.kernel.name)
    assert resources.spill_store_bytes == resources.local_bytes == 0
    cap = 168 if gemm.tile[0] == 128 else 255  # the register file over the threads
    assert 0 < resources.registers <= cap
    if gemm.cluster != (1, 1):
        size = gemm.cluster[0] * gemm.cluster[1]
        for needle in (
            f".reqnctapercluster {size}, 1, 1",
            ".multicast::cluster",
            "mapa.shared::cluster.u32",
            "mbarrier.arrive.release.cta.shared::cluster.b64",
            "barrier.cluster.wait",
        ):
            assert needle in built.ptx, needle
