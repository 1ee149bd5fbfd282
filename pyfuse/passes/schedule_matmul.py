"""Hopper matmul scheduler: the loop structure of a warp-specialized TMA + wgmma matmul, written
as domain transforms on the fusion's tensors.

Expects a kernel fusion after ``translate_patterns`` and ``skip_intermediates``: one or more
MmaOps over the same ``M x N x K`` space, each operand a chain of metadata ops (now aliases)
from a fusion input, and an epilogue of pointwise ops only. Guarantees, on success:

- the reference is the first MMA's fp32 accumulator (registers); its loop domain is
  ``[batch?, Mo, No, Ko, Mi/64 (TIDy: consumer warpgroup), 64 (MMA), Ni (MMA), Ki/16, 16 (MMA)]``
  after merging the M, N and K axes of each role and splitting by ``tile_m/n/k``;
- a grid swizzle of factor ``s`` splits the M tile count by ``s`` and merges the inner part
  with the N tile count (``[Mo/s, s*No]``), exactly the seed case of the IdModel tests;
- a persistent schedule merges the tile loops and splits them by the CTA count, the fewest
  that take them in as many waves as one per SM (``matmul_tiles.persistent_ctas``;
  ``[tiles/CTAs (serial), CTAs (BIDx)]``); both compose;
- each distinct operand gets a shared-memory cache loaded by TMA (``LoadStoreKind.TMA_LOAD``)
  with its box axes marked ``Bulk``, a swizzled allocation (128, 64 or 32 bytes, the widest
  whose rows tile the contiguous tile; the XOR of the 128-byte line in the 8-row atom with
  the 16-byte chunk, as a ``Swizzle`` in its allocation transforms) and
  ``circular_buffer_stages = stages``; it is inlined inside the K-tile loop;
- the epilogue tensors replay the accumulator's tile structure and inline into it;
- ``params`` holds the full :class:`MatmulParams` (user fields kept, the rest chosen by
  :func:`~pyfuse.passes.matmul_params.choose_params`);
  ``cluster_m``/``cluster_n`` are launch facts the lowering realizes (CTA clusters walking
  cluster tiles with TMA multicast of the shared operand tiles), not loop transforms.

It declines, with the reason (from the operand facts of :mod:`matmul_operands`), what a
TMA/wgmma kernel cannot take: operand dtypes other than
bf16/f16, an operand computed by a non-metadata op (a *prologue*: the segmenter computes it
in its own kernel), strides TMA cannot describe, MMAs of different shapes, reductions or
unrelated outputs in the epilogue, and float64 ``fmod``/``remainder``/``floor_divide`` in it
(their exact reduction divides with ``div.rn.f64``, whose slow-path calls inside a persistent
tile loop took ptxas a minute; the segmenter moves them to a pointwise kernel).
"""

from __future__ import annotations

from pyfuse.ir import dtypes
from pyfuse.ir.caching import cache_after, cache_before
from pyfuse.ir.exprs import BinaryOp, BinaryOpType, LoadStoreKind, MmaOp, ReductionOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.hopper import SM90
from pyfuse.ir.id_model import IdModel
from pyfuse.ir.iterdomain import (
    IterDomain,
    Merge,
    ParallelType,
    Split,
    Swizzle,
    SwizzleKind,
    ceil_div,
)
from pyfuse.ir.params import MatmulParams
from pyfuse.ir.target import TargetInfo
from pyfuse.ir.tensor import MemoryType, TensorView
from pyfuse.passes.matmul_operands import (
    OPERAND_DTYPES,
    WGMMA_K,
    WIDEST_SWIZZLE_BYTES,
    contiguous_role,
    downstream_exprs,
    mma_extents,
    mma_ops,
    operand_load_reason,
    operand_root,
    operand_swizzle_bytes,
)
from pyfuse.passes.matmul_params import choose_params
from pyfuse.passes.matmul_tiles import persistent_ctas
from pyfuse.passes.plan import MATMUL_SCHEDULER
from pyfuse.passes.skip_intermediates import (
    metadata_source,
)
from pyfuse.passes.transform_replay import replay_like

NAME = MATMUL_SCHEDULER

# float64 division-like ops: each element's exact reduction makes a dozen div.rn.f64 calls;
# one per accumulator element in a persistent matmul epilogue took ptxas 62 s to assemble.
_SLOW_F64_DIVISIONS = frozenset(
    {BinaryOpType.FMOD, BinaryOpType.REMAINDER, BinaryOpType.FLOOR_DIVIDE}
)


def decline_reason(fusion: Fusion, target: TargetInfo) -> str | None:
    mmas = mma_ops(fusion)
    if not mmas:
        return "no MMA"
    shape = mma_extents(mmas[0])
    for mma in mmas:
        if mma_extents(mma) != shape:
            return f"MMAs of different shapes {mma_extents(mma)} and {shape} need separate kernels"
        for name, operand in (("A", mma.a), ("B", mma.b)):
            if operand.dtype not in OPERAND_DTYPES:
                return f"operand {name} is {operand.dtype.name}; wgmma takes bf16 or f16"
            root = operand_root(fusion, operand)
            if root is None:
                computed = metadata_source(operand)
                producer = computed.definition
                op = producer.op_name if producer is not None else "?"
                return (
                    f"operand {name} (T{computed.name}) is computed by {op} before the MMA; "
                    "operands are loaded by TMA from global memory, so a prologue runs in its "
                    "own kernel"
                )
            reason = operand_load_reason(fusion, mma, name, root)
            if reason is not None:
                return reason
    epilogue = downstream_exprs(fusion, [m.output for m in mmas])
    for expr in epilogue:
        if isinstance(expr, ReductionOp | MmaOp):
            return f"the epilogue has a {expr.op_name} (T{expr.output.name}); it must be pointwise"
        if (
            isinstance(expr, BinaryOp)
            and expr.op in _SLOW_F64_DIVISIONS
            and expr.output.dtype == dtypes.float64
        ):
            return (
                f"the epilogue's float64 {expr.op_name} (T{expr.output.name}) compiles slowly "
                "in a matmul kernel; it runs in a kernel of its own"
            )
    results = {id(e.output) for e in epilogue} | {id(m.output) for m in mmas}
    for out in fusion.outputs:
        if id(out) not in results:
            return f"output T{out.name} does not depend on an MMA"
    tile_elements = mmas[0].output.numel  # numel counts the kept axes only
    for expr in epilogue:
        if expr.output.numel > tile_elements:
            # broadcast_to(a @ b, (2, *shape)): each accumulator element would be stored
            # at several places, which the epilogue's one store per element cannot do (the
            # H200 left half of such an output unwritten).
            return (
                f"the epilogue's T{expr.output.name} has more elements than the MMA result "
                "(a broadcast of it); it runs in a kernel of its own"
            )
    del target
    return None


def _role_axes(tv: TensorView, roles: list[str], role: str) -> list[IterDomain]:
    return [axis for axis, r in zip(tv.logical, roles, strict=True) if r == role]


def _merge_group(tv: TensorView, axes: list[IterDomain]) -> IterDomain | None:
    """Merge ``axes`` (in order, already adjacent in the loop domain) into one; returns it."""
    if not axes:
        return None
    merged = axes[0]
    for axis in axes[1:]:
        tv.merge(tv.loop.index(merged), tv.loop.index(axis))
        step = tv.history[-1]
        assert isinstance(step, Merge)
        merged = step.output
    return merged


def schedule_accumulator(
    accumulator: TensorView, roles: list[str], params: MatmulParams, target: TargetInfo
) -> None:
    """The reference loop structure (see the module docstring) on the MMA output."""
    assert params.tile_m and params.tile_n and params.tile_k
    batch = _role_axes(accumulator, roles, "batch")
    m_axes = _role_axes(accumulator, roles, "m")
    n_axes = _role_axes(accumulator, roles, "n")
    k_axes = _role_axes(accumulator, roles, "k")
    order = [*batch, *m_axes, *n_axes, *k_axes]
    accumulator.reorder({accumulator.loop.index(a): i for i, a in enumerate(order)})
    batch_axis = _merge_group(accumulator, batch)
    m_axis = _merge_group(accumulator, m_axes)
    n_axis = _merge_group(accumulator, n_axes)
    k_axis = _merge_group(accumulator, k_axes)
    assert m_axis is not None and n_axis is not None and k_axis is not None
    lead = 1 if batch_axis is not None else 0

    # [B?, M, N, K] -> [B?, Mo, Mi, No, Ni, Ko, Ki] -> [B?, Mo, No, Ko, Mi, Ni, Ki]
    accumulator.split(lead, params.tile_m)
    accumulator.split(lead + 2, params.tile_n)
    accumulator.split(lead + 4, params.tile_k)
    accumulator.reorder(
        {lead + 1: lead + 3, lead + 2: lead + 1, lead + 3: lead + 4, lead + 4: lead + 2}
    )
    tile_m_pos, tile_n_pos = lead, lead + 1
    swizzle = params.grid_swizzle or 1
    if swizzle > 1:
        # Split the M tile count and merge the inner part into the N tile count, so that
        # `swizzle` consecutive tiles share one N tile (B's tile stays hot in L2):
        # [Mo/s, No*s], walking the s M tiles fastest.
        accumulator.split(tile_m_pos, swizzle)
        accumulator.merge(tile_n_pos + 1, tile_m_pos + 1)
    tile_loops = lead + 2
    if params.persistent:
        ctas = persistent_ctas(
            ceil_div(m_axis.extent, params.tile_m),
            ceil_div(n_axis.extent, params.tile_n),
            batch_axis.extent if batch_axis is not None else 1,
            params.cluster_m or 1,
            params.cluster_n or 1,
            target.sm_count,
        )
        for _ in range(tile_loops - 1):
            accumulator.merge(0)
        accumulator.split(0, ctas)
        accumulator.parallelize(1, ParallelType.BIDX)
        tile_loops = 2  # [tiles / CTAs, CTAs], whatever the batch merged in
    else:
        accumulator.parallelize(tile_n_pos, ParallelType.BIDX)
        accumulator.parallelize(tile_m_pos, ParallelType.BIDY)
        if batch_axis is not None:
            accumulator.parallelize(0, ParallelType.BIDZ)
    k_outer = tile_loops  # Ko
    if (params.splitk or 1) > 1:
        accumulator.split(k_outer, params.splitk or 1, inner_split=False)
        accumulator.parallelize(k_outer, ParallelType.BIDZ)
        k_outer += 1
    mi = k_outer + 1
    accumulator.split(mi, SM90.wgmma_m)  # [Mi/64 (warpgroup), 64]
    accumulator.parallelize(mi, ParallelType.TIDY)
    accumulator.parallelize(mi + 1, ParallelType.MMA)
    accumulator.parallelize(mi + 2, ParallelType.MMA)  # Ni
    accumulator.split(mi + 3, WGMMA_K)  # [Ki/16, 16]
    accumulator.parallelize(mi + 4, ParallelType.MMA)


def k_tile_position(tv: TensorView) -> int:
    """Loop position just inside the K-tile loop: the first non-block reduction axis plus one."""
    for index, axis in enumerate(tv.loop):
        if axis.is_reduction and not axis.parallel_type.is_block_dim:
            return index + 1
    return len(tv.loop)


def _tile_axis(tv: TensorView, factor: int) -> IterDomain | None:
    """The tile made by the first inner split of a real axis by ``factor`` in ``tv``'s history."""
    for step in tv.history:
        if (
            isinstance(step, Split)
            and step.inner_split
            and step.factor == factor
            and not step.input.is_broadcast
        ):
            return step.inner
    return None


def swizzle_operand_allocation(
    operand: TensorView, rows: IterDomain, contiguous: IterDomain, swizzle_bytes: int
) -> None:
    """Record the swizzle of a shared-memory operand tile as its allocation, which is how TMA
    writes the tile and wgmma reads it: boxes of one ``swizzle_bytes`` row side by side along
    the contiguous axis (when the tile is wider), 16-byte chunks in a row, and the rows in
    8-row atoms whose 128-byte lines (``128 / swizzle_bytes`` rows each) XOR their line number
    into the chunk index."""
    chunk = SM90.tma_alignment // operand.dtype.itemsize  # the swizzle moves 16-byte chunks
    span = swizzle_bytes // operand.dtype.itemsize
    boxes: list[IterDomain] = []
    if swizzle_bytes != WIDEST_SWIZZLE_BYTES and contiguous.extent > span:
        box_split = Split(contiguous, span)
        boxes, contiguous = [box_split.outer], box_split.inner
    row_split = Split(rows, SM90.swizzle_atom_rows)
    lines, line_rows = row_split.inner, []
    if swizzle_bytes != WIDEST_SWIZZLE_BYTES:
        line_split = Split(row_split.inner, WIDEST_SWIZZLE_BYTES // swizzle_bytes)
        lines, line_rows = line_split.outer, [line_split.inner]
    chunk_split = Split(contiguous, chunk)
    swizzle = Swizzle(lines, chunk_split.outer, SwizzleKind.XOR)
    allocation = [
        *boxes,
        row_split.outer,
        swizzle.outputs[0],
        *line_rows,
        swizzle.outputs[1],
        chunk_split.inner,
    ]
    operand.set_allocation(allocation, [True] * len(allocation))


def schedule(
    fusion: Fusion, user: MatmulParams | None, target: TargetInfo
) -> tuple[TensorView, MatmulParams]:
    """Schedule ``fusion`` in place; returns the reference (accumulator) and the params."""
    reason = decline_reason(fusion, target)
    if reason is not None:
        raise ValueError(f"matmul scheduler cannot take this fusion: {reason}")
    params = choose_params(fusion, user, target)
    mmas = mma_ops(fusion)

    # Shared-memory operand caches (one per distinct operand), loaded by TMA.
    distinct: list[TensorView] = []
    for mma in mmas:
        for operand in (mma.a, mma.b):
            if all(operand is not seen for seen in distinct):
                distinct.append(operand)
    smem_operands = [
        cache_after(fusion, operand, MemoryType.SHARED, LoadStoreKind.TMA_LOAD)
        for operand in distinct  # one shared tile per operand, read by every MMA using it
    ]
    epilogue_outputs = list(fusion.outputs)
    for tv in epilogue_outputs:
        cache_before(fusion, tv)
    # An MMA result that is itself an output (split-K partials) now writes the cache: the
    # accumulator is the cache's.
    mmas = mma_ops(fusion)
    reference = mmas[0].output
    roles = mmas[0].roles()

    schedule_accumulator(reference, roles, params, target)
    id_model = IdModel(fusion)
    for tv in fusion.tensors():
        if tv is reference or fusion.is_input(tv) or tv.alias_of is not None:
            continue
        replay_like(tv, reference, id_model)

    k_position = k_tile_position(reference)
    for operand in smem_operands:
        operand.circular_buffer_stages = params.stages or 1
        for axis in operand.loop[k_position:]:
            axis.parallel_type = ParallelType.BULK
        source = operand.definition.tensor_inputs[0] if operand.definition else operand
        reader = next(m for m in mmas if operand is m.a or operand is m.b)
        row_role = "m" if operand is reader.a else "n"
        assert params.tile_m and params.tile_n and params.tile_k  # filled by choose_params
        tiles = {"m": params.tile_m, "n": params.tile_n, "k": params.tile_k}
        rows = _tile_axis(operand, tiles[row_role])
        k_tile = _tile_axis(operand, params.tile_k)
        if rows is None or k_tile is None:
            continue
        role = contiguous_role(fusion, reader, source) or "k"
        swizzle_bytes = operand_swizzle_bytes(tiles[role], operand.dtype.itemsize)
        if swizzle_bytes is None:
            continue
        if role == "k":
            swizzle_operand_allocation(operand, rows, k_tile, swizzle_bytes)
        else:
            swizzle_operand_allocation(operand, k_tile, rows, swizzle_bytes)
    return reference, params
