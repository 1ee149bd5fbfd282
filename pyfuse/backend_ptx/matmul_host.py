"""Host-side facts of the warp-specialized Hopper matmul (the PTX is ``matmul_template``).

- :class:`TileOrder`: which output tile each CTA computes, in which order.
- :func:`operand_layout`: how one :class:`TmaOperand`'s boxes fill a pipeline stage, and
  the wgmma descriptor fields (LBO, SBO, k-step offsets) that read it; the checks refuse a
  layout the descriptors would misread instead of computing a wrong product.
- :func:`register_split`: the ``setmaxnreg`` counts of the producer and the consumers.
- :func:`tensor_map_plans` / :func:`encode_tensor_maps`: one tiled, swizzled tensor map
  per operand, dims in the operand's memory order, encoded from the buffers'
  device addresses and cached by those addresses (a launch with the same tensors encodes
  nothing).
- :func:`matmul_launch`: the same maps as launch data (:mod:`tensor_maps`), which the
  compile keeps on the kernel so that its launch needs no kernel IR.

**Tile order.** Tiles are numbered ``t = b * (m_tiles * n_tiles) + g * (S * n_tiles) + w``
for batch ``b``, M-tile group ``g`` (``S = grid_swizzle`` M tiles; the last group has
``rows = m_tiles - S g`` when ragged) and ``w`` inside the group, with
``m_tile = S g + w % rows`` and ``n_tile = w // rows``: ``S`` consecutive tiles share one
N tile (one B tile stays hot in L2 while ``S`` A tiles stream). Persistent CTAs take
``t = blockIdx.x, blockIdx.x + gridDim.x, ...``; otherwise ``(w, g, b) = blockIdx`` and a
CTA with ``w >= rows * n_tiles`` (the ragged last group) has no tile.

**Clusters.** With ``cluster_m x cluster_n`` CTAs per cluster the order above walks cluster
tiles (``cluster_m`` M tiles by ``cluster_n`` N tiles; the swizzle counts cluster tiles,
``grid_swizzle // cluster_m`` of them); cluster rank ``r`` takes the tile
``(r % cluster_m, r // cluster_m)`` inside it. CTAs of one cluster that share an operand
tile (the ``cluster_m`` CTAs of a cluster column share the B tile, the ``cluster_n`` of a
row the A tile) each load one slice of it with TMA multicast, which writes the slice into
every sharer's shared memory: whole boxes when the boxes divide evenly, else each box cut
along its outer dim in whole swizzle atoms. Tiles past a ragged edge are computed on
zero-filled operands and store nothing, so every CTA of a cluster walks the same tiles.

**Operand layouts.** Each operand's swizzle (``TmaOperand.swizzle_bytes``, ``W`` = 128, 64
or 32 bytes: ``w = W / 2`` bf16/f16 elements a row) is the widest whose rows tile its
contiguous tile extent; the tensor map and the wgmma descriptor use the same one. Every box
starts on a 1024-byte boundary (a multiple of every swizzle pattern, ``8 W`` bytes), so the
descriptors' base offset is 0 (PTX ISA, "Matrix Descriptor Format"; the canonical layouts
of "Shared Memory Matrix Layout" give the LBO/SBO below):

- K-major (K contiguous: one ``W``-byte row per M/N index, ``tile_k / w`` boxes along K):
  LBO 16 (unused), SBO ``8 W`` (8 rows); k-step ``j`` starts ``32 j`` bytes into its box
  (``16 j`` elements, in the box ``16 j // w``).
- MN-major (M/N contiguous: boxes of ``w`` M/N elements by ``tile_k`` K rows side by side):
  LBO = one box's bytes (the next ``w`` M/N elements), SBO ``8 W`` (8 K rows); k-step ``j``
  starts ``16 j`` K rows (``16 j W`` bytes) in; wgmma's transpose bit is 1. A B tile of N
  columns is ``tile_n / w`` boxes: N = 16 takes one 32-byte-swizzled box, 96 three 64-byte
  ones (the 128-byte swizzle was checked on the H200; 64 and 32 follow the same tables).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from pyfuse.backend_ptx import smem_desc, tensor_maps
from pyfuse.backend_ptx import tma as tma_host
from pyfuse.backend_ptx.abi import ParamKind
from pyfuse.backend_ptx.emitter import Directives, Param
from pyfuse.backend_ptx.instructions import mbarrier, wgmma
from pyfuse.backend_ptx.matmul_handoff import check_handoff
from pyfuse.backend_ptx.matmul_residuals import check_residuals
from pyfuse.backend_ptx.matmul_staging import check_stores
from pyfuse.backend_ptx.matmul_vectors import check_vectors
from pyfuse.backend_ptx.tensor_maps import MatmulLaunch
from pyfuse.ir import dtypes
from pyfuse.ir.hopper import SM90
from pyfuse.ir.kernel_ir import Kernel, MatmulMainLoop, TmaOperand, TmaResidual, TmaStore
from pyfuse.ir.records import record
from pyfuse.ir.target import HOPPER, TargetInfo
from pyfuse.ir.target import register_split as target_register_split

# The swizzles an operand tile may use, by the bytes of one swizzled row (TmaOperand's
# ``swizzle_bytes``): the tensor map and the wgmma descriptor of the operand both take it.
SWIZZLES = {
    span: next(s for s in smem_desc.Swizzle if s.span_bytes == span) for span in SM90.swizzle_spans
}
# wgmma operand types, by pyfuse dtype (also the TMA dtype names).
WGMMA_TYPES = {dtypes.bfloat16: "bf16", dtypes.float16: "f16"}
# TMA element types of the outputs a TMA store writes (matmul_epilogue.STAGED_DTYPES).
STORE_TYPES = {**WGMMA_TYPES, dtypes.float32: "f32"}
# TMA element types of the epilogue vectors, by element size: a copy moves bits unchanged.
VECTOR_TYPES = {1: "u8", 2: "u16", 4: "u32", 8: "u64"}


# ---- tile order -----------------------------------------------------------------------------


@record(frozen=True)
class TileOrder:
    """The order in which output tiles are visited (see the module docstring)."""

    m_tiles: int
    n_tiles: int
    batch: int
    swizzle: int

    @staticmethod
    def of(stmt: MatmulMainLoop) -> TileOrder:
        """The order of ``stmt``'s tiles, or of its cluster tiles when it has clusters."""
        m_tiles = -(-stmt.m // stmt.tile_m)
        n_tiles = -(-stmt.n // stmt.tile_n)
        cm, cn = stmt.cluster_m, stmt.cluster_n
        return TileOrder(
            -(-m_tiles // cm), -(-n_tiles // cn), stmt.batch, max(1, stmt.grid_swizzle // cm)
        )

    @property
    def tiles(self) -> int:
        return self.batch * self.m_tiles * self.n_tiles

    @property
    def groups(self) -> int:
        return -(-self.m_tiles // self.swizzle)

    @property
    def last_rows(self) -> int:
        """M tiles in the last group (fewer than ``swizzle`` when it is ragged)."""
        return self.m_tiles - (self.groups - 1) * self.swizzle

    def grid(self) -> tuple[int, int, int]:
        """The non-persistent launch grid: (w, g, b) = blockIdx."""
        return self.n_tiles * self.swizzle, self.groups, self.batch

    def tile(self, batch: int, group: int, within: int) -> tuple[int, int, int] | None:
        """(batch, m_tile, n_tile) of position ``within`` of ``group``; None past its end."""
        rows = self.last_rows if group == self.groups - 1 else self.swizzle
        if within >= rows * self.n_tiles:
            return None
        return batch, group * self.swizzle + within % rows, within // rows

    def linear(self, t: int) -> tuple[int, int, int]:
        """(batch, m_tile, n_tile) of tile number ``t`` (persistent kernels)."""
        batch, rest = divmod(t, self.m_tiles * self.n_tiles)
        group, within = divmod(rest, self.swizzle * self.n_tiles)
        found = self.tile(batch, group, within)
        assert found is not None
        return found


# ---- operand layouts in shared memory -------------------------------------------------------


@record(frozen=True)
class OperandLayout:
    """How one TMA operand sits in a stage and how wgmma reads it."""

    operand: TmaOperand
    role: str  # "m" (an A operand) or "n" (a B operand)
    copies: int
    box_bytes: int
    lbo: int
    sbo: int
    k_steps: tuple[int, ...]  # byte offset of each k16 step from the stage tile
    rows64_bytes: int  # bytes between consecutive 64-row (M/N) blocks
    # Multicast: ``slices`` CTAs share this tile and each loads one slice of it. ``loads``
    # are slice 0's TMA loads of ``load_box`` each, as (byte offset in the stage tile,
    # coordinate offsets in memory order); slice ``s`` adds ``s * slice_bytes`` and
    # ``s * slice_coords``. Without a cluster: one slice, one load per box.
    slices: int = 1
    load_box: tuple[int, ...] = ()
    loads: tuple[tuple[int, tuple[int, ...]], ...] = ()
    slice_bytes: int = 0
    slice_coords: tuple[int, ...] = ()
    swizzle: smem_desc.Swizzle = smem_desc.Swizzle.B128

    @property
    def k_major(self) -> bool:
        return self.operand.k_major


def _fail(stmt: MatmulMainLoop, operand: TmaOperand, message: str) -> ValueError:
    return ValueError(
        f"matmul main loop ({stmt.m}x{stmt.n}x{stmt.k}, tile {stmt.tile_m}x{stmt.tile_n}x"
        f"{stmt.tile_k}): operand {operand.buffer_name} {message}"
    )


def operand_layout(stmt: MatmulMainLoop, operand: TmaOperand) -> OperandLayout:
    """Check that ``operand``'s boxes tile its stage the way the descriptors assume."""
    roles = operand.roles
    if operand.dtype not in WGMMA_TYPES:
        raise _fail(stmt, operand, f"is {operand.dtype.name}; wgmma reads bf16 or f16")
    swizzle = SWIZZLES.get(operand.swizzle_bytes)
    if swizzle is None:
        raise _fail(
            stmt,
            operand,
            f"uses a {operand.swizzle_bytes}-byte swizzle; wgmma reads {sorted(SWIZZLES)}",
        )
    mn_roles = [r for r in roles if r in ("m", "n")]
    if len(mn_roles) != 1 or roles.count("k") != 1:
        raise _fail(stmt, operand, f"needs one M or N dim and one K dim, has roles {roles}")
    role = mn_roles[0]
    rows = stmt.tile_m if role == "m" else stmt.tile_n
    itemsize = operand.dtype.itemsize
    span = swizzle.span_bytes // itemsize
    wgmma_k = SM90.wgmma_k(itemsize)
    box = dict(zip(roles, operand.box, strict=True))
    for dim_role, extent in zip(roles, operand.box, strict=True):
        if dim_role == "batch" and extent != 1:
            raise _fail(stmt, operand, f"has a batch box of {extent}; it must be 1")
    if box[roles[-1]] != span:
        raise _fail(
            stmt,
            operand,
            f"box {list(operand.box)}: the contiguous dim must be one {swizzle.span_bytes}-byte "
            f"swizzle row ({span} elements); TMA zero-fills past the tensor's end, so the box "
            "must not be clipped to a smaller extent",
        )
    box_bytes = operand.box_bytes
    if operand.k_major:
        wanted = {role: rows, "k": span}
        copies = stmt.tile_k // span
        k_steps = tuple(
            (k // span) * box_bytes + (k % span) * itemsize for k in range(0, stmt.tile_k, wgmma_k)
        )
        lbo, sbo = smem_desc.k_major(swizzle)
        rows64_bytes = SM90.wgmma_m * swizzle.span_bytes
    else:
        wanted = {role: span, "k": stmt.tile_k}
        copies = rows // span
        k_steps = tuple(k * swizzle.span_bytes for k in range(0, stmt.tile_k, wgmma_k))
        lbo, sbo = box_bytes, SM90.swizzle_atom_rows * swizzle.span_bytes
        rows64_bytes = box_bytes * SM90.wgmma_m // span
    for dim_role, extent in wanted.items():
        if box[dim_role] != extent:
            raise _fail(
                stmt,
                operand,
                f"box {list(operand.box)} (roles {list(roles)}) must be {extent} along "
                f"{dim_role.upper()} to fill the {stmt.tile_m}x{stmt.tile_n}x{stmt.tile_k} "
                "tile; TMA zero-fills out-of-bounds elements, so boxes are never clipped",
            )
    layout_ok = copies * span == (stmt.tile_k if operand.k_major else rows)
    if not layout_ok or copies * box_bytes != operand.stage_tile_bytes:
        raise _fail(
            stmt,
            operand,
            f"stage tile of {operand.stage_tile_bytes} bytes is not {copies} boxes of "
            f"{box_bytes} bytes",
        )
    pattern = swizzle.pattern_bytes
    if operand.smem_offset % pattern or operand.stage_bytes % pattern or box_bytes % pattern:
        raise _fail(
            stmt,
            operand,
            f"smem offset {operand.smem_offset}, stage stride {operand.stage_bytes} and box "
            f"bytes {box_bytes} must be multiples of {pattern} (the swizzle pattern)",
        )
    slices = stmt.cluster_n if role == "m" else stmt.cluster_m
    load_box, loads, slice_bytes, slice_coords = _slice_loads(
        stmt, operand, role, copies, box_bytes, slices
    )
    return OperandLayout(
        operand,
        role,
        copies,
        box_bytes,
        lbo,
        sbo,
        k_steps,
        rows64_bytes,
        slices,
        load_box,
        loads,
        slice_bytes,
        slice_coords,
        swizzle,
    )


def _slice_loads(
    stmt: MatmulMainLoop,
    operand: TmaOperand,
    role: str,
    copies: int,
    box_bytes: int,
    slices: int,
) -> tuple[tuple[int, ...], tuple[tuple[int, tuple[int, ...]], ...], int, tuple[int, ...]]:
    """(load box, slice 0's loads, slice byte stride, slice coordinate stride); see
    :class:`OperandLayout`. Boxes sit side by side along the contiguous (last) dim."""
    rank = len(operand.roles)
    last = rank - 1
    span = operand.box[last]

    def along(dim: int, amount: int) -> tuple[int, ...]:
        return tuple(amount if d == dim else 0 for d in range(rank))

    if copies % slices == 0:
        per_slice = copies // slices
        loads = tuple((c * box_bytes, along(last, c * span)) for c in range(per_slice))
        return operand.box, loads, per_slice * box_bytes, along(last, per_slice * span)
    # Fewer boxes than sharers: cut every box along its outer dim (whole swizzle atoms).
    outer = next(d for d, r in enumerate(operand.roles) if r in (role, "k") and d != last)
    extent = operand.box[outer]
    atom_rows = SM90.swizzle_atom_rows
    if extent % (atom_rows * slices):
        raise _fail(
            stmt,
            operand,
            f"cannot be multicast to {slices} CTAs of a {stmt.cluster_m}x{stmt.cluster_n} "
            f"cluster: its {copies} box(es) of {list(operand.box)} split neither into {slices} "
            f"groups of boxes nor into {slices} slices of whole {atom_rows}-row swizzle atoms",
        )
    part = extent // slices
    load_box = tuple(part if d == outer else e for d, e in enumerate(operand.box))
    loads = tuple((c * box_bytes, along(last, c * span)) for c in range(copies))
    return load_box, loads, box_bytes // slices, along(outer, part)


def find_main_loop(kernel: Kernel) -> MatmulMainLoop:
    stmt = kernel.main_loop()
    if stmt is None:
        raise ValueError(f"kernel {kernel.name} has no MatmulMainLoop")
    return stmt


# ---- checks ---------------------------------------------------------------------------------


def check_main_loop(
    stmt: MatmulMainLoop,
    kernel: Kernel,
    directives: Directives,
    declared: Sequence[Param],
    layouts: Sequence[OperandLayout],
    order: TileOrder,
    tensor_map_params: Sequence[Param],
) -> None:
    """Refuse a main loop the template would emit wrongly: the block, the tile and wgmma
    shapes, the operands' dtypes, roles and shared memory, the cluster and grid, the
    register cap setmaxnreg needs, the tensor-map params, the TMA stores."""
    c = stmt.consumer_warpgroups
    rows, warpgroup = SM90.wgmma_m, SM90.warpgroup_threads
    if stmt.pingpong:
        if c != 2 or stmt.tile_m % rows or not stmt.persistent:
            raise ValueError(
                f"kernel {kernel.name}: a ping-pong kernel is persistent, with 2 consumer "
                f"warpgroups and whole 64-row blocks; got {c}, tile_m {stmt.tile_m}"
            )
    elif stmt.tile_m != rows * c * stmt.row_blocks:
        raise ValueError(
            f"kernel {kernel.name}: tile_m {stmt.tile_m} is no whole number of 64-row blocks "
            f"for each of {c} consumer warpgroups"
        )
    if kernel.block != (warpgroup, c + 1, 1):
        raise ValueError(
            f"kernel {kernel.name}: {c} consumer warpgroups need block ({warpgroup}, {c + 1}, "
            f"1); got {kernel.block}"
        )
    wgmma.check_n(stmt.tile_n)
    k_step = wgmma.WGMMA_K[WGMMA_TYPES[stmt.operands[0].dtype]]
    if stmt.tile_k % k_step:
        raise ValueError(f"tile_k must be a multiple of {k_step}, got {stmt.tile_k}")
    if len({layout.operand.dtype for layout in layouts}) != 1:
        raise ValueError(f"kernel {kernel.name}: operands of different dtypes")
    for a, b, _ in stmt.mmas:
        if layouts[a].role != "m" or layouts[b].role != "n":
            raise ValueError(f"kernel {kernel.name}: MMA ({a}, {b}) needs an M and an N operand")
    lowest = min(layout.operand.smem_offset for layout in layouts)
    if 2 * stmt.stages * SM90.mbarrier_bytes > lowest:
        raise ValueError(f"{2 * stmt.stages} mbarriers do not fit below smem offset {lowest}")
    end = max(
        o.operand.smem_offset + (stmt.stages - 1) * o.operand.stage_bytes + o.copies * o.box_bytes
        for o in layouts
    )
    if end > kernel.smem_bytes:
        raise ValueError(
            f"kernel {kernel.name}: the stages need {end} B of smem, has {kernel.smem_bytes}"
        )
    if len({layout.operand.stage_bytes for layout in layouts}) != 1:
        raise ValueError(f"kernel {kernel.name}: operands disagree on the stage stride")
    stage_tx = sum(layout.copies * layout.box_bytes for layout in layouts)
    if stage_tx > mbarrier.MAX_TX_BYTES:
        raise ValueError(f"a stage of {stage_tx} B exceeds the mbarrier tx limit")
    size = stmt.cluster_size
    if kernel.cluster != (size, 1, 1):
        raise ValueError(
            f"kernel {kernel.name}: a {stmt.cluster_m}x{stmt.cluster_n} tile cluster is "
            f"launched as cluster ({size}, 1, 1), got {kernel.cluster}"
        )
    if size > 1:
        if kernel.grid[1:] != (1, 1) or kernel.grid[0] % size:
            raise ValueError(
                f"kernel {kernel.name}: a cluster kernel's grid is (clusters x {size}, 1, "
                f"1), got {kernel.grid}"
            )
        if not stmt.persistent and kernel.grid[0] != order.tiles * size:
            raise ValueError(
                f"kernel {kernel.name}: a non-persistent cluster grid must be "
                f"({order.tiles * size}, 1, 1) (one cluster per cluster tile), got "
                f"{kernel.grid}"
            )
    elif not stmt.persistent and kernel.grid != order.grid():
        raise ValueError(
            f"kernel {kernel.name}: a non-persistent grid must be {order.grid()} "
            f"(N tiles x swizzle, M tile groups, batch), got {kernel.grid}"
        )
    if directives.maxnreg is None and directives.minnctapersm is None:
        raise ValueError(
            f"kernel {kernel.name}: setmaxnreg needs a register cap at entry; build the "
            "KernelBuilder with matmul_directives(kernel)"
        )
    maps_needed = len(mapped_buffers(stmt))
    if len(tensor_map_params) != maps_needed:
        raise ValueError(
            f"kernel {kernel.name}: {maps_needed} tensor maps needed, got "
            f"{len(tensor_map_params)} (use tensor_map_params_for)"
        )
    check_stores(stmt, kernel.smem_bytes)
    check_vectors(stmt, kernel.smem_bytes, lowest)
    check_residuals(stmt, lowest)
    check_handoff(stmt, kernel.smem_bytes, lowest)
    for param in tensor_map_params:
        if param.kind is not ParamKind.TENSOR_MAP or param not in declared:
            raise ValueError(f"param {param.name} must be a declared TENSOR_MAP param")


# ---- registers ------------------------------------------------------------------------------


def register_split(
    stmt: MatmulMainLoop, directives: Directives, target: TargetInfo = HOPPER
) -> tuple[int, int]:
    """(producer, consumer) ``setmaxnreg`` counts of ``stmt``'s kernel
    (:func:`pyfuse.ir.target.register_split`)."""
    return target_register_split(
        stmt.consumer_warpgroups, stmt.handoff is not None, target, directives.maxnreg
    )


# ---- tensor maps ----------------------------------------------------------------------------


def mapped_buffers(stmt: MatmulMainLoop) -> list[str]:
    """The buffer of each tensor map, in parameter order: the operands', the stores', the
    epilogue vectors', then the residuals'."""
    return (
        [o.buffer_name for o in stmt.operands]
        + [s.buffer_name for s in stmt.stores]
        + [v.buffer_name for v in stmt.vectors]
        + [r.buffer_name for r in stmt.residuals]
    )


def tensor_map_plans(kernel: Kernel) -> list[tma_host.TensorMapPlan]:
    """One tiled-map plan per TMA operand (checked against the smem layout first), then one
    per TMA-stored output (a box of 64 rows by ``chunk_cols``, swizzled by its row), one
    per epilogue vector (one row, unswizzled, its elements copied as raw bits), then one per
    residual (its store's box and swizzle)."""
    stmt = find_main_loop(kernel)
    plans = []
    for operand in stmt.operands:
        layout = operand_layout(stmt, operand)
        plans.append(
            tma_host.plan_tiled(
                WGMMA_TYPES[operand.dtype],
                operand.shape,
                operand.strides,
                layout.load_box,
                swizzle=layout.swizzle,
                l2_promotion=tma_host.L2Promotion.B256,
            )
        )
    plans += [_staged_plan(store) for store in stmt.stores]
    for vector in stmt.vectors:
        # A rank-2 map of one row: the driver refuses rank-1 maps (cuTensorMapEncodeTiled
        # gave CUDA_ERROR_INVALID_VALUE for every one on the H200, 2026-12-05), and the row's
        # pitch, never stepped over, only has to be a legal stride.
        pitch = -(-vector.extent * vector.dtype.itemsize // SM90.tma_alignment)
        pitch = pitch * SM90.tma_alignment // vector.dtype.itemsize
        plans.append(
            tma_host.plan_tiled(
                VECTOR_TYPES[vector.dtype.itemsize],
                (1, vector.extent),
                (pitch, 1),
                (1, vector.span),
            )
        )
    # A residual has its store's box and swizzle over the input's memory: a chunk lands where
    # the store's output for it is written.
    plans += [_staged_plan(residual) for residual in stmt.residuals]
    return plans


def _staged_plan(staged: TmaStore | TmaResidual) -> tma_host.TensorMapPlan:
    """The map of a staging buffer's chunk: a store's box of 64 rows, swizzled by its row."""
    return tma_host.plan_tiled(
        STORE_TYPES[staged.dtype],
        staged.shape,
        staged.strides,
        staged.box,
        swizzle=SWIZZLES[staged.swizzle_bytes],
    )


def matmul_launch(kernel: Kernel) -> MatmulLaunch:
    """What launching ``kernel`` needs beyond its pointers (see :mod:`tensor_maps`): its
    operands' tensor maps, which pointer argument is each one's base, whether the launch may
    shrink a persistent grid of clusters, and the stream-K flags it zeroes. Made once, when
    the kernel is built."""
    stmt = find_main_loop(kernel)
    position = {param.buffer_name: index for index, param in enumerate(kernel.params)}
    buffers = mapped_buffers(stmt)
    missing = [name for name in buffers if name not in position]
    if missing:
        raise ValueError(f"kernel {kernel.name}: no device pointer for operands {missing}")
    zeroed = None
    if stmt.stream_k is not None:
        zeroed = (position[stmt.stream_k.buffer_name], stmt.stream_k.flag_bytes)
    return MatmulLaunch(
        maps=tuple(plan.tiled_map() for plan in tensor_map_plans(kernel)),
        pointer_arguments=tuple(position[name] for name in buffers),
        persistent=stmt.persistent,
        cluster_ctas=kernel.cluster[0],
        zeroed=zeroed,
    )


# Per kernel (dropped with it): the maps encoded for each tuple of operand addresses.
_CACHE: weakref.WeakKeyDictionary[Kernel, tensor_maps.EncodedMaps] = weakref.WeakKeyDictionary()


def _maps_of(kernel: Kernel) -> tensor_maps.EncodedMaps:
    cached = _CACHE.get(kernel)
    if cached is None:
        maps = tuple(plan.tiled_map() for plan in tensor_map_plans(kernel))
        cached = tensor_maps.EncodedMaps(maps, OrderedDict())
        _CACHE[kernel] = cached
    return cached


def encode_tensor_maps(kernel: Kernel, pointers: Mapping[str, int] | Sequence[int]) -> list[Any]:
    """The CUtensorMaps to pass, in ``tensor_map_params_for(kernel)`` order.

    ``pointers``: device addresses by buffer name, or one per ``kernel.params`` entry in
    order. Maps are cached per kernel by the operands' addresses, so repeated launches on
    the same tensors skip ``cuTensorMapEncodeTiled``. (Launches of compiled kernels encode
    from the kernel's stored :func:`matmul_launch` instead, without the kernel IR.)
    """
    stmt = find_main_loop(kernel)
    if not isinstance(pointers, Mapping):
        if len(pointers) != len(kernel.params):
            raise ValueError(
                f"kernel {kernel.name}: {len(kernel.params)} pointers expected "
                f"({[p.buffer_name for p in kernel.params]}), got {len(pointers)}"
            )
        named = zip(kernel.params, pointers, strict=True)
        pointers = {param.buffer_name: pointer for param, pointer in named}
    buffers = mapped_buffers(stmt)
    missing = [name for name in buffers if name not in pointers]
    if missing:
        raise ValueError(f"kernel {kernel.name}: no device pointer for operands {missing}")
    return _maps_of(kernel).maps_for(tuple(int(pointers[name]) for name in buffers))
