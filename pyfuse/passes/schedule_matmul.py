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
- a persistent schedule merges the tile loops and splits them by the SM count
  (``[tiles/SMs (serial), SMs (BIDx)]``); both compose;
- each distinct operand gets a shared-memory cache loaded by TMA (``LoadStoreKind.TMA_LOAD``)
  with its box axes marked ``Bulk``, a swizzled allocation (128, 64 or 32 bytes, the widest
  whose rows tile the contiguous tile; the XOR of the 128-byte line in the 8-row atom with
  the 16-byte chunk, as a ``Swizzle`` in its allocation transforms) and
  ``circular_buffer_stages = stages``; it is inlined inside the K-tile loop;
- the epilogue tensors replay the accumulator's tile structure and inline into it;
- ``params`` holds the full :class:`MatmulParams` (user fields kept, the rest chosen here);
  ``cluster_m``/``cluster_n`` are launch facts the lowering realizes (CTA clusters walking
  cluster tiles with TMA multicast of the shared operand tiles), not loop transforms.

It declines, with the reason, what a TMA/wgmma kernel cannot take: operand dtypes other than
bf16/f16, an operand computed by a non-metadata op (a *prologue*: the segmenter computes it
in its own kernel), strides TMA cannot describe, MMAs of different shapes, and reductions or
unrelated outputs in the epilogue.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

from pyfuse.ir import dtypes
from pyfuse.ir.caching import cache_after, cache_before
from pyfuse.ir.exprs import Expr, LoadStoreKind, LoadStoreOp, MmaOp, ReductionOp, ReshapeOp
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
from pyfuse.ir.tensor import MemoryType, TensorView, memory_strides
from pyfuse.passes.matmul_epilogue import staged_outputs, staging_bytes
from pyfuse.passes.matmul_tiles import consumer_warpgroups, default_tiles, filling_tiles
from pyfuse.passes.plan import MATMUL_SCHEDULER
from pyfuse.passes.skip_intermediates import (
    is_metadata_op,
    is_row_major_contiguous,
    metadata_source,
)
from pyfuse.passes.transform_replay import replay_like

NAME = MATMUL_SCHEDULER
OPERAND_DTYPES = (dtypes.bfloat16, dtypes.float16)
# One wgmma K for every operand dtype (both are 2 bytes): the K tile's inner split.
(WGMMA_K,) = {SM90.wgmma_k(dtype.itemsize) for dtype in OPERAND_DTYPES}
# The widest swizzle (bytes of one swizzled row): one row of the default K tile, and the line
# whose index the narrower swizzles XOR into their chunks. Every operand tile takes the
# widest of SM90.swizzle_spans whose rows tile its contiguous extent exactly.
WIDEST_SWIZZLE_BYTES = SM90.swizzle_spans[0]
# The front of shared memory holds the mbarriers, padded so the first operand tile starts on
# the widest swizzle's pattern boundary (which every narrower pattern divides).
BARRIER_REGION_BYTES = SM90.max_swizzle_pattern_bytes
# fp32 accumulator registers a ping-pong consumer thread may hold (a 128x128 tile): the rest
# of its 240 keep the epilogue's values and the addresses.
PINGPONG_ACCUMULATORS = 128


def _mmas(fusion: Fusion) -> list[MmaOp]:
    return [e for e in fusion.exprs() if isinstance(e, MmaOp)]


def operand_root(fusion: Fusion, operand: TensorView) -> TensorView | None:
    """The fusion input an MMA operand views through metadata ops, or None if computed."""
    source = metadata_source(operand)
    return source if fusion.is_input(source) else None


def operand_memory(fusion: Fusion, operand: TensorView) -> TensorView | None:
    """The tensor whose memory axes say how an MMA operand reads its input: the input, or
    the reshape of a row-major input nearest the MMA in the operand's metadata chain (a
    view, contiguous over its own logical axes: how ``split_k`` splits K into a batch).
    None when the chain computes, or reshapes a tensor that is not row-major memory."""
    tv = operand
    while not fusion.is_input(tv):
        definition = tv.definition
        if definition is None or not is_metadata_op(definition):
            return None
        if isinstance(definition, ReshapeOp):
            source = definition.tensor_inputs[0]
            if not fusion.is_input(source) or not is_row_major_contiguous(source):
                return None
            return tv
        tv = definition.tensor_inputs[0]
    return tv


def operand_swizzle_bytes(contiguous_tile: int, itemsize: int) -> int | None:
    """The swizzle of an operand tile whose contiguous dim spans ``contiguous_tile``
    elements: the widest mode whose rows tile it exactly (several boxes side by side when
    wider), None when no mode does (the tile is not a multiple of 32 bytes)."""
    for mode in SM90.swizzle_spans:
        if contiguous_tile * itemsize % mode == 0:
            return mode
    return None


def contiguous_role(fusion: Fusion, mma: MmaOp, operand: TensorView) -> str | None:
    """The role (m, n or k) of ``operand``'s contiguous memory dim, None when TMA cannot
    load it."""
    memory = operand_memory(fusion, operand)
    if memory is None:
        return None
    dims = operand_memory_roles(mma, operand, memory)
    return dims[-1][2] if dims else None


def tma_reason(root: TensorView) -> str | None:
    """Why TMA cannot load ``root`` (None when it can)."""
    strides = memory_strides(root)
    if not strides:
        return f"T{root.name} has no memory axes"
    if len(strides) > 5:
        return f"T{root.name} has {len(strides)} memory axes; a tensor map has at most 5"
    if strides[-1][1] != 1:
        return f"T{root.name}'s innermost stride is {strides[-1][1]}, TMA needs 1"
    for axis, stride in strides[:-1]:
        if stride * root.dtype.itemsize % SM90.tma_alignment:
            return (
                f"T{root.name}'s stride {stride} along {axis} is {stride * root.dtype.itemsize} "
                f"bytes, not a multiple of {SM90.tma_alignment} (a TMA copy needs that)"
            )
    return None


def operand_axis_roles(mma: MmaOp, operand: TensorView, memory: TensorView) -> dict[int, str]:
    """The role (m, n, k or batch) of every axis on the metadata chain from ``memory`` to
    ``operand`` (an input of ``mma``, or a cache of one), *for this use*: the operand's axes
    take the roles of the MMA output axes at their positions, and each op of the chain hands
    them back to its producer's axes. One tensor read as both operands (``a @ a``,
    ``x @ x.T``) thus has one set of roles per operand, which the IdModel cannot give: it
    maps such an input's axes to M, N and K at once."""
    return {key: role for key, (role, _) in _operand_axis_places(mma, operand, memory).items()}


def _operand_axis_places(
    mma: MmaOp, operand: TensorView, memory: TensorView
) -> dict[int, tuple[str, int]]:
    """:func:`operand_axis_roles` with each axis's position in ``operand``'s logical domain:
    the tile merges the axes of one role in that order."""
    places = {
        id(axis): (role, position)
        for position, (axis, role) in enumerate(zip(operand.logical, mma.roles(), strict=True))
    }
    tv = operand
    while tv is not memory:
        definition = tv.definition
        if definition is None or not (
            is_metadata_op(definition) or isinstance(definition, LoadStoreOp)
        ):
            break
        producer = definition.tensor_inputs[0]
        for producer_axis, consumer_axis in definition.logical_pairs(producer):
            place = places.get(id(consumer_axis))
            if place is not None:
                places.setdefault(id(producer_axis), place)
        tv = producer
    return places


def operand_memory_roles(
    mma: MmaOp, operand: TensorView, memory: TensorView
) -> list[tuple[int, int, str]] | None:
    """The memory dims of ``memory`` (an operand's input, or the split-K view of it) as
    (extent, element stride, role) for ``operand``'s use by ``mma``, outermost first, with
    adjacent dims of one role collapsed where their strides make one run; None when some
    memory axis has no M/N/K/batch role (a reshaped view)."""
    dims: list[tuple[int, int, str]] = []
    places = _operand_axis_places(mma, operand, memory)
    previous_position = -1
    for axis, stride in memory_strides(memory):
        place = places.get(id(axis))
        if place is None:
            return None
        role, position = place
        extent = axis.logical_extent
        # Two dims make one run only in the operand's own order: the tile merges the axes
        # of a role outer to inner as the operand lists them, so a batch-major view of
        # M-major memory (strides (256, 512, 1) for [batch, M, K]) is two runs, not one.
        if (
            dims
            and dims[-1][2] == role
            and dims[-1][1] == stride * extent
            and position > previous_position
        ):
            outer_extent, _, _ = dims[-1]
            dims[-1] = (outer_extent * extent, stride, role)
        else:
            dims.append((extent, stride, role))
        previous_position = position
    return dims


def layout_reason(mma: MmaOp, operand: TensorView, memory: TensorView) -> str | None:
    """Why one TMA box per tile cannot cover ``operand`` read from ``memory``: its M, N and
    K axes must each be one run of memory, and its batch axes one run of the MMA's batch
    (one batch coordinate indexes it) or broadcast."""
    dims = operand_memory_roles(mma, operand, memory)
    if dims is None:
        return f"T{memory.name}'s memory axes do not all map to MMA axes"
    own = "m" if operand is mma.a else "n"
    for role in (own, "k"):
        if sum(1 for _, _, r in dims if r == role) != 1:
            return (
                f"T{memory.name}'s {role.upper()} axes are not one run of memory "
                f"(dims {[(e, s, r) for e, s, r in dims]}); one TMA box cannot cover a tile"
            )
    batch = [extent for extent, _, role in dims if role == "batch" and extent > 1]
    if batch and (len(batch) > 1 or batch[0] != _extents(mma)["batch"]):
        return (
            f"T{memory.name}'s batch dims {batch} are not one run of the matmul's batch of "
            f"{_extents(mma)['batch']}; one batch coordinate cannot index them"
        )
    return None


def _extents(mma: MmaOp) -> dict[str, int]:
    sizes = {"m": 1, "n": 1, "k": 1, "batch": 1}
    for axis, role in zip(mma.output.logical, mma.roles(), strict=True):
        sizes[role] *= axis.logical_extent
    return sizes


def _downstream(fusion: Fusion, roots: list[TensorView]) -> list[Expr]:
    reached = {id(tv) for tv in roots}
    found = []
    for expr in fusion.exprs():
        if any(id(tv) in reached for tv in expr.tensor_inputs):
            found.append(expr)
            reached.add(id(expr.output))
    return found


def operand_load_reason(fusion: Fusion, mma: MmaOp, name: str, root: TensorView) -> str | None:
    """Why TMA cannot load MMA operand ``name`` (``mma.a`` for "A", else ``mma.b``), which
    views input ``root``; None when it can."""
    operand = mma.a if name == "A" else mma.b
    memory = operand_memory(fusion, operand)
    if memory is None:
        return f"operand {name} reshapes T{root.name}, which is not row-major memory"
    return tma_reason(memory) or layout_reason(mma, operand, memory)


def decline_reason(fusion: Fusion, target: TargetInfo) -> str | None:
    mmas = _mmas(fusion)
    if not mmas:
        return "no MMA"
    shape = _extents(mmas[0])
    for mma in mmas:
        if _extents(mma) != shape:
            return f"MMAs of different shapes {_extents(mma)} and {shape} need separate kernels"
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
    epilogue = _downstream(fusion, [m.output for m in mmas])
    for expr in epilogue:
        if isinstance(expr, ReductionOp | MmaOp):
            return f"the epilogue has a {expr.op_name} (T{expr.output.name}); it must be pointwise"
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


def choose_params(fusion: Fusion, user: MatmulParams | None, target: TargetInfo) -> MatmulParams:
    """The user's fields as given; every ``None`` chosen from the shape and the device."""
    mmas = _mmas(fusion)
    shape = _extents(mmas[0])
    operands = {id(m.a) for m in mmas} | {id(m.b) for m in mmas}
    tile_m, tile_n = default_tiles(shape["m"], shape["n"], single_mma=len(mmas) == 1)
    if len(mmas) == 1:
        tile_m, tile_n = filling_tiles(shape, tile_m, tile_n, target)
    tile_k = WIDEST_SWIZZLE_BYTES // mmas[0].a.dtype.itemsize
    itemsize = mmas[0].a.dtype.itemsize
    given = user or MatmulParams()
    given, tile_m, tile_n = _pingpong_tiles(given, tile_m, tile_n, len(mmas))
    tile_m = given.tile_m or tile_m
    tile_n = _mn_major_tile_n(fusion, mmas, given.tile_n or tile_n, itemsize, given.tile_n)
    if given.tile_n is not None and given.tile_n != tile_n:
        given = dataclasses.replace(given, tile_n=tile_n)  # rounded up, with a warning
    tile_k = given.tile_k or tile_k
    a_count = len({id(m.a) for m in mmas})
    b_count = len(operands) - a_count
    stage_bytes = (tile_m * a_count + tile_n * b_count) * tile_k * itemsize
    budget = target.max_smem_per_block - BARRIER_REGION_BYTES
    warpgroups = consumer_warpgroups(tile_m, given.pingpong)
    smem_epilogue, epilogue_bytes = _smem_epilogue(
        fusion, mmas[0], shape, warpgroups, tile_n, given
    )
    if smem_epilogue and given.smem_epilogue is None and budget - epilogue_bytes < 2 * stage_bytes:
        smem_epilogue, epilogue_bytes = False, 0  # two stages beat staging the output
    stages = max(1, min(8, (budget - epilogue_bytes) // stage_bytes))
    m_tiles = ceil_div(shape["m"], tile_m)
    tiles = m_tiles * ceil_div(shape["n"], tile_n) * shape["batch"]
    defaults = MatmulParams(
        tile_m=tile_m,
        tile_n=tile_n,
        tile_k=tile_k,
        stages=stages,
        grid_swizzle=_grid_swizzle(m_tiles, tile_m, tile_n, target),
        persistent=tiles > target.sm_count or bool(given.pingpong),
        splitk=1,
        cluster_m=_cluster_m(m_tiles, tiles, tile_n, tile_k, given, target),
        cluster_n=1,
        warp_specialized=True,
        smem_epilogue=smem_epilogue,
        pingpong=False,
    )
    params = given.merged(defaults)
    _check_params(params, tile_n_limit=SM90.wgmma_n_max)
    _warn_unused(params)
    return params


def _smem_epilogue(
    fusion: Fusion,
    mma: MmaOp,
    shape: dict[str, int],
    warpgroups: int,
    tile_n: int,
    given: MatmulParams,
) -> tuple[bool, int]:
    """Whether the epilogue stages its outputs in shared memory for TMA stores (by default
    whenever an output can be, :mod:`matmul_epilogue`), and the bytes that takes."""
    if given.smem_epilogue is False:
        return False, 0
    staged = [out for out, _ in staged_outputs(fusion, mma, shape["batch"])]
    nbytes = staging_bytes(staged, warpgroups, tile_n)
    if nbytes == 0 and given.smem_epilogue:
        warnings.warn(
            "pyfuse: MatmulParams(smem_epilogue=True) not applied: no output of this matmul "
            "can be stored with TMA (it needs a contiguous N axis, 16-byte aligned strides, "
            "a bf16, f16 or f32 dtype, and a tile_n of whole 32-byte rows); the epilogue "
            "stores from registers",
            UserWarning,
            stacklevel=4,
        )
    return nbytes > 0, nbytes


def _pingpong_tiles(
    given: MatmulParams, tile_m: int, tile_n: int, mma_count: int
) -> tuple[MatmulParams, int, int]:
    """A ping-pong warpgroup holds a whole tile's accumulators: at most
    ``PINGPONG_ACCUMULATORS`` fp32 registers a thread over the MMAs. Tiles the user left
    open shrink to fit (128x128 for one MMA, 64x128 for two); a persistent=False or a user's
    tile that does not fit turns ping-pong off, with a warning."""
    if not given.pingpong:
        return given, tile_m, tile_n

    def registers(m: int, n: int) -> int:
        return n // 2 * (m // SM90.wgmma_m) * mma_count

    if (
        given.tile_m is None
        and given.tile_n is None
        and registers(tile_m, tile_n) > (PINGPONG_ACCUMULATORS)
    ):
        tile_m, tile_n = (128, 128) if mma_count == 1 else (64, 128)
    m, n = given.tile_m or tile_m, given.tile_n or tile_n
    reason = None
    if given.persistent is False:
        reason = "it needs a persistent kernel"
    elif registers(m, n) > PINGPONG_ACCUMULATORS:
        reason = (
            f"a {m}x{n} tile holds {registers(m, n)} accumulator registers a thread, more than "
            f"{PINGPONG_ACCUMULATORS}"
        )
    if reason is not None:
        warnings.warn(
            f"pyfuse: MatmulParams(pingpong=True) not applied: {reason}; the kernel is cooperative",
            UserWarning,
            stacklevel=4,
        )
        given = dataclasses.replace(given, pingpong=False)
    return given, tile_m, tile_n


def _mn_major_tile_n(
    fusion: Fusion, mmas: list[MmaOp], tile_n: int, itemsize: int, requested: int | None
) -> int:
    """``tile_n``, rounded up to whole rows of the narrowest swizzle (32 bytes: 16 bf16/f16
    elements) when a B operand is stored N-major, whose tile rows are N; a K-major B takes
    any multiple of 8 (its rows are K)."""
    if all(contiguous_role(fusion, mma, mma.b) != "n" for mma in mmas):
        return tile_n
    narrowest = SM90.swizzle_spans[-1]
    row = narrowest // itemsize
    rounded = ceil_div(tile_n, row) * row
    if requested is not None and rounded != requested:
        warnings.warn(
            f"pyfuse: MatmulParams(tile_n={requested}) rounded up to {rounded}: an N-major B "
            f"operand is loaded in rows of {narrowest} bytes ({row} elements)",
            UserWarning,
            stacklevel=3,
        )
    return rounded


def _cluster_m(
    m_tiles: int, tiles: int, tile_n: int, tile_k: int, given: MatmulParams, target: TargetInfo
) -> int:
    """2 (pairs of M tiles share their B tile through TMA multicast) for matmuls of at least
    two waves of tiles, where it ran 3-5% faster on the H200 (8192^3: 0.94-0.95x cuBLAS
    against 0.90-0.91x in two runs); 1 for smaller ones, when the user asked for a
    ``cluster_n``, or when the tile does not split into two multicast halves."""
    if (given.cluster_n or 1) > 1 or m_tiles < 2 or tiles < 2 * target.sm_count:
        return 1
    if tile_n % (SM90.swizzle_atom_rows * 2) or tile_k % (SM90.swizzle_atom_rows * 2):
        return 1  # the two CTAs would not each load whole swizzle atoms
    return 2


def _warn_unused(params: MatmulParams) -> None:
    """Say so when a requested setting is scheduled in the IR but not yet carried out by the
    kernel (the result is still exact: the kernel reduces all of K in each CTA)."""
    unused = []
    if (params.splitk or 1) > 1:  # the pipeline's split_k pass takes it from the params
        unused.append(f"splitk={params.splitk} (reached the kernel scheduler unsplit)")
    if params.warp_specialized is False:
        unused.append("warp_specialized=False (the kernel is always warp-specialized)")
    if unused:
        warnings.warn(
            f"pyfuse: MatmulParams {'; '.join(unused)} not applied by the Hopper kernel yet; "
            "the matmul runs without it",
            UserWarning,
            stacklevel=2,
        )


def _grid_swizzle(m_tiles: int, tile_m: int, tile_n: int, target: TargetInfo) -> int:
    """M tiles walked together per N tile: the tiles in flight (one per SM) then touch about
    ``s * tile_m`` rows of A and ``SMs / s * tile_n`` rows of B, least at
    ``s = sqrt(SMs * tile_n / tile_m)`` (16 for 128x256 tiles on 132 SMs: on the H200 that
    ran 6% faster than 4 at 4096x14336x4096), as a power of two no larger than the M tiles."""
    best = math.sqrt(target.sm_count * tile_n / tile_m)
    swizzle = 1
    while swizzle * 2 <= min(best, m_tiles):
        swizzle *= 2
    return swizzle


def _check_params(params: MatmulParams, tile_n_limit: int) -> None:
    assert params.tile_m and params.tile_n and params.tile_k  # filled by merged()
    if params.tile_m % SM90.wgmma_m:
        raise ValueError(f"tile_m must be a multiple of {SM90.wgmma_m}, got {params.tile_m}")
    step = SM90.wgmma_n_step
    if params.tile_n % step or params.tile_n > tile_n_limit:
        raise ValueError(
            f"tile_n must be a multiple of {step} and at most {tile_n_limit}, got {params.tile_n}"
        )
    if params.tile_k % WGMMA_K:
        raise ValueError(f"tile_k must be a multiple of {WGMMA_K}, got {params.tile_k}")
    cluster_m, cluster_n = params.cluster_m or 1, params.cluster_n or 1
    if cluster_m * cluster_n > SM90.max_portable_cluster_ctas:
        raise ValueError(
            f"cluster_m x cluster_n = {cluster_m} x {cluster_n} CTAs; a portable cluster has at "
            f"most {SM90.max_portable_cluster_ctas}"
        )
    # Each of the CTAs sharing an operand tile loads a slice of it in whole 8-row swizzle
    # atoms: B tiles are shared by cluster_m CTAs, A tiles by cluster_n.
    for sharers, extents in (
        (cluster_m, (params.tile_n, params.tile_k)),
        (cluster_n, (params.tile_m, params.tile_k)),
    ):
        whole_atoms = SM90.swizzle_atom_rows * sharers
        if sharers > 1 and any(extent % whole_atoms for extent in extents):
            raise ValueError(
                f"a {cluster_m}x{cluster_n} cluster splits operand tiles of {extents[0]}x"
                f"{extents[1]} among {sharers} CTAs, which needs both extents to be multiples "
                f"of {whole_atoms}"
            )


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
        for _ in range(tile_loops - 1):
            accumulator.merge(0)
        accumulator.split(0, target.sm_count)
        accumulator.parallelize(1, ParallelType.BIDX)
        tile_loops = 2  # [tiles / SMs, SMs], whatever the batch merged in
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
    mmas = _mmas(fusion)

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
    mmas = _mmas(fusion)
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
