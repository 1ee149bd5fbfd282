"""Which outputs of a matmul kernel leave through shared memory and a TMA store.

The consumers of the Hopper matmul kernel write an output that qualifies into a swizzled
shared-memory staging tile, 64 rows (one consumer warpgroup's) by ``chunk_cols`` columns at
a time, and one thread per warpgroup stores each chunk with ``cp.async.bulk.tensor``; the
warpgroup goes on while the copy drains (``backend_ptx.matmul_template``). The tensor map
clips ragged edges, so no bounds code is needed for the store itself.

Expects a fusion with MMAs (after ``translate_patterns``) whose outputs have their
allocation domains (the matmul scheduler's view, or the lowering's).

Guarantees:

- :func:`staged_layout` (and :func:`tile_layout`, the same for any tensor, an input's view
  included): an output's memory as a TMA store sees it, ``(extent, stride,
  role)`` per dim outermost first with one "m" dim, one contiguous "n" dim last and at most
  one "batch" dim whose extent is the problem's, or None when a TMA store cannot write it
  exactly (an alias or input, an axis the accumulator does not index, strides that do not
  collapse, a stride or extent TMA refuses, a dtype TMA stores do not take here);
- :func:`staging_shape`: the staging buffers per consumer warpgroup and their widest row;
- :func:`chunk_cols`: the column chunk every staged output shares: the widest whose rows
  are a swizzle span (32, 64 or 128 bytes, at most the staging's widest row) for every
  output's dtype and that divides ``tile_n``, or None;
- :func:`staging_bytes`: the shared memory the staging buffers take (``staging_shape``'s
  buffers per consumer warpgroup per staged output), which the scheduler leaves out of the
  pipeline's stages.
"""

from __future__ import annotations

from pyfuse.ir import dtypes
from pyfuse.ir.exprs import MmaOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.hopper import SM90
from pyfuse.ir.id_model import IdMappingMode, IdModel
from pyfuse.ir.iterdomain import IterDomain
from pyfuse.ir.tensor import TensorView
from pyfuse.passes.skip_intermediates import alias_strides

# Output dtypes a staged store takes (the CUtensorMap types the encoder is given for them).
STAGED_DTYPES = (dtypes.bfloat16, dtypes.float16, dtypes.float32)
STAGING_ROWS = SM90.wgmma_m  # one consumer warpgroup's rows
# Staging buffers per consumer warpgroup and their widest row. Two of 128-byte rows: one
# fills while the previous chunk's TMA store reads the other. Four of 64-byte rows take the
# same shared memory for 2-byte outputs and keep up to three stores in flight (not measured
# yet). Epilogue warps always stage two (matmul_handoff's protocol).
BUFFERS_PER_WARPGROUP = 2
WIDEST_STAGED_ROW = 128


def staging_shape(epilogue_warps: bool) -> tuple[int, int]:
    """(buffers per consumer warpgroup, the widest staged row in bytes)."""
    if epilogue_warps:
        return 2, max(SM90.swizzle_spans)
    return BUFFERS_PER_WARPGROUP, WIDEST_STAGED_ROW


_MAX_TMA_EXTENT = 1 << 32

Layout = list[tuple[int, int, str]]


def staged_layout(
    fusion: Fusion, out: TensorView, mma: MmaOp, id_model: IdModel, batch: int
) -> Layout | None:
    """``out``'s memory as ``(extent, stride, role)`` dims for a TMA store, or None."""
    if out.alias_of is not None or fusion.is_input(out):
        return None
    return tile_layout(out, mma, id_model, batch)


def tile_layout(tv: TensorView, mma: MmaOp, id_model: IdModel, batch: int) -> Layout | None:
    """The memory of ``tv`` (an output, or a view of an input) as ``(extent, stride, role)``
    dims that a tensor map of the accumulator's rows and columns walks, or None (see the
    module: :func:`staged_layout`)."""
    if tv.dtype not in STAGED_DTYPES:
        return None
    reference = mma.output
    roles = mma.roles()
    ref_axes = [(a, r) for a, r in zip(reference.logical, roles, strict=True) if r != "k"]

    def role_of(axis: IterDomain) -> tuple[int, str] | None:
        for index, (ref_axis, role) in enumerate(ref_axes):
            if id_model.mapped(axis, ref_axis, IdMappingMode.EXACT):
                return index, role
        return None

    for axis in tv.logical:
        if axis.logical_extent > 1 and role_of(axis) is None:
            return None  # an axis the accumulator's row and column do not index
    dims: list[tuple[int, int, str, int]] = []  # extent, stride, role, reference position
    for axis, stride in alias_strides(tv):
        if axis.logical_extent == 1:
            continue
        found = role_of(axis)
        if found is None:
            return None
        position, role = found
        dims.append((axis.logical_extent, stride, role, position))
    collapsed: list[tuple[int, int, str, int]] = []
    for extent, stride, role, position in dims:
        if collapsed:
            outer_extent, outer_stride, outer_role, outer_position = collapsed[-1]
            if outer_role == role:
                # One dim of the merged index: adjacent in memory, nested as the accumulator
                # merges them (the outer axis first), strides of one row-major block.
                if outer_position > position or outer_stride != stride * extent:
                    return None
                collapsed[-1] = (outer_extent * extent, stride, role, position)
                continue
        collapsed.append((extent, stride, role, position))
    roles_seen = [role for _, _, role, _ in collapsed]
    if len(set(roles_seen)) != len(roles_seen):
        return None  # one role in two places: no single box dim walks it
    if not roles_seen or roles_seen[-1] != "n" or collapsed[-1][1] != 1 or "m" not in roles_seen:
        return None
    layout = [(extent, stride, role) for extent, stride, role, _ in collapsed]
    batch_extent = next((e for e, _, r in layout if r == "batch"), 1)
    if batch_extent != batch:
        return None
    itemsize = tv.dtype.itemsize
    if any(extent >= _MAX_TMA_EXTENT for extent, _, _ in layout):
        return None
    if any((stride * itemsize) % SM90.tma_alignment for _, stride, _ in layout[:-1]):
        return None
    return layout


def chunk_cols(itemsizes: list[int], tile_n: int, widest_row: int = 128) -> int | None:
    """The widest column chunk whose staged rows are a swizzle span of at most
    ``widest_row`` bytes for every itemsize and that divides ``tile_n``."""
    if not itemsizes:
        return None
    for span in SM90.swizzle_spans:
        if span > widest_row:
            continue
        cols = span // max(itemsizes)
        if cols >= 8 and tile_n % cols == 0:
            return cols
    return None


def staged_outputs(
    fusion: Fusion, mma: MmaOp, batch: int, id_model: IdModel | None = None
) -> list[tuple[TensorView, Layout]]:
    """The outputs a TMA store can write, with their layouts, in output order (``id_model``:
    the fusion's, when the caller has it)."""
    id_model = id_model or IdModel(fusion)
    result = []
    for out in fusion.outputs:
        layout = staged_layout(fusion, out, mma, id_model, batch)
        if layout is not None:
            result.append((out, layout))
    return result


def staging_bytes(outputs: list[TensorView], warpgroups: int, tile_n: int) -> int:
    """Shared bytes of the staging buffers: per output :func:`staging_shape`'s buffers per
    consumer warpgroup, each ``STAGING_ROWS`` rows of ``chunk_cols`` elements (0 when no
    chunk fits). (With epilogue warps the handoff tile takes their place.)"""
    buffers, widest_row = staging_shape(epilogue_warps=False)
    cols = chunk_cols([out.dtype.itemsize for out in outputs], tile_n, widest_row)
    if cols is None:
        return 0
    per_buffer = [STAGING_ROWS * cols * out.dtype.itemsize for out in outputs]
    return buffers * warpgroups * sum(per_buffer)
