"""The matmul heuristic's parameters: :func:`choose_params` fills every field of
:class:`~pyfuse.ir.params.MatmulParams` the user left ``None`` from the problem's shape and
the device (tiles by :mod:`matmul_tiles`, stages from shared memory, the grid swizzle, the
cluster, the TMA-store epilogue, the epilogue warps for a costly epilogue, ping-pong's
tiles), keeps the user's fields, and warns where a requested setting cannot be carried out.

Expects a kernel fusion the matmul scheduler accepts (:func:`schedule_matmul.decline_reason`
is None). Guarantees parameters the kernel takes (checked by ``_check_params``).
"""

from __future__ import annotations

import dataclasses
import math
import warnings

from pyfuse.ir.exprs import MmaOp, UnaryOp, UnaryOpType
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.hopper import SM90
from pyfuse.ir.iterdomain import (
    ceil_div,
)
from pyfuse.ir.ops import FLOAT_ONLY_UNARY
from pyfuse.ir.params import MatmulParams
from pyfuse.ir.target import TargetInfo, register_split
from pyfuse.passes.matmul_epilogue import chunk_cols, staged_outputs, staging_bytes
from pyfuse.passes.matmul_handoff import (
    HANDOFF_ITEMSIZE,
    MAX_HANDOFF_WARPGROUPS,
    epilogue_exprs,
    handoff_tensors,
    split_epilogue,
)
from pyfuse.passes.matmul_operands import (
    BARRIER_REGION_BYTES,
    WGMMA_K,
    WIDEST_SWIZZLE_BYTES,
    contiguous_role,
    mma_extents,
    mma_ops,
    operand_root,
)
from pyfuse.passes.matmul_tiles import (
    cluster_tiles,
    consumer_warpgroups,
    default_tiles,
    filling_tiles,
    row_blocks,
)

# fp32 accumulator registers a ping-pong consumer thread may hold (a 128x128 tile): the rest
# of its 240 keep the epilogue's values and the addresses.
PINGPONG_ACCUMULATORS = 128


def choose_params(fusion: Fusion, user: MatmulParams | None, target: TargetInfo) -> MatmulParams:
    """The user's fields as given; every ``None`` chosen from the shape and the device."""
    mmas = mma_ops(fusion)
    shape = mma_extents(mmas[0])
    operands = {id(m.a) for m in mmas} | {id(m.b) for m in mmas}
    tile_m, tile_n = default_tiles(shape["m"], shape["n"], single_mma=len(mmas) == 1)
    if len(mmas) == 1:
        n_major_b = contiguous_role(fusion, mmas[0], mmas[0].b) == "n"
        tile_m, tile_n = filling_tiles(shape, tile_m, tile_n, target, n_major_b=n_major_b)
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
    if (
        given.epilogue_warps is None
        and not given.stream_k
        and _epilogue_warps_pay(
            fusion, mmas, shape, given, tile_m, tile_n, budget, stage_bytes, target.sm_count
        )
    ):
        given = dataclasses.replace(given, epilogue_warps=True)
    given = _epilogue_warps(fusion, mmas, shape, given, tile_m, tile_n)
    crowded = _crowded_accumulators(len(mmas), tile_m, tile_n, warpgroups, given, target)
    asked = user or MatmulParams()
    if crowded is not None and given.epilogue_warps and asked.epilogue_warps is None:
        # The heuristic's epilogue warps take the consumers' registers: the user's tile
        # keeps them instead, where it fits without.
        without = dataclasses.replace(given, epilogue_warps=False)
        if _crowded_accumulators(len(mmas), tile_m, tile_n, warpgroups, without, target) is None:
            given, crowded = without, None
    if crowded is not None and (asked.tile_m is not None or asked.tile_n is not None):
        warnings.warn(
            f"pyfuse: MatmulParams(tile_m={asked.tile_m}, tile_n={asked.tile_n}) not applied: "
            f"{crowded}; the heuristic's tile instead",
            UserWarning,
            stacklevel=3,
        )
        # The user's other fields as given: the heuristic chooses again for its own tile.
        return choose_params(fusion, dataclasses.replace(asked, tile_m=None, tile_n=None), target)

    def epilogue_smem(given: MatmulParams) -> tuple[bool, int]:
        if given.epilogue_warps:
            # The consumers hand each tile over whole, one tensor per MMA; the output is
            # stored from over the first.
            return True, len(mmas) * tile_m * tile_n * HANDOFF_ITEMSIZE
        return _smem_epilogue(fusion, mmas[0], shape, warpgroups, tile_n, given)

    # Two stages at least: a ping-pong consumer frees a stage only once the next K tile's
    # MMAs are issued, so one stage deadlocks a K of two tiles or more; a cooperative one
    # frees it at once but would leave the producer nothing to load ahead (and with one K
    # tile, a second stage loads the next tile's operands under this one's epilogue).
    k_tiles = ceil_div(shape["k"], tile_k)
    smem_epilogue, epilogue_bytes = epilogue_smem(given)
    if given.epilogue_warps and budget - epilogue_bytes < 2 * stage_bytes:
        _refuse_epilogue_warps(
            f"its {tile_m}x{tile_n} handoff tiles would leave fewer than two stages"
        )
        given = dataclasses.replace(given, epilogue_warps=False)
        smem_epilogue, epilogue_bytes = epilogue_smem(given)
    if smem_epilogue and budget - epilogue_bytes < 2 * stage_bytes:
        if given.smem_epilogue and k_tiles > 1:
            warnings.warn(
                "pyfuse: MatmulParams(smem_epilogue=True) not applied: staging the output "
                f"beside {tile_m}x{tile_n}x{tile_k} stages would leave fewer than two; the "
                "epilogue stores from registers",
                UserWarning,
                stacklevel=3,
            )
        if given.smem_epilogue is None or k_tiles > 1:
            smem_epilogue, epilogue_bytes = False, 0
            given = dataclasses.replace(given, smem_epilogue=None)
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
        cluster_m=(
            1
            if _fused_epilogue(fusion, mmas)
            else _cluster_m(m_tiles, tiles, k_tiles, tile_n, tile_k, given, target)
        ),
        cluster_n=1,
        smem_epilogue=smem_epilogue,
        pingpong=False,
        epilogue_warps=False,
        stream_k=False,
    )
    params = _fit_cluster(given.merged(defaults), given)
    if (params.grid_swizzle or 1) > m_tiles:
        # More M tiles walked together than there are would launch CTAs with no tile.
        params = dataclasses.replace(params, grid_swizzle=m_tiles)
    params = _stream_k(params, given, shape, k_tiles, target, _reads_a_residual(fusion, mmas))
    _check_params(params, tile_n_limit=SM90.wgmma_n_max, k_tiles=k_tiles)
    _warn_unused(params)
    return params


# Registers a consumer thread keeps beside its accumulators, at least: the epilogue's values
# and addresses, the pipeline's phases. A gate/up pair at 64x256 (256 accumulators) spilled
# 3.5 KB, at 128x192 with the epilogue warps (192 of 200) 4 B; with four warpgroups of 104
# registers, one MMA's 256x128 (64 of them) did not spill, two MMAs' (128) 1.9 KB.
EPILOGUE_RESERVE_REGISTERS = 40


def accumulator_registers(mma_count: int, rows: int, tile_n: int) -> int:
    """fp32 accumulator registers a consumer thread holds for ``rows`` rows of a tile
    ``tile_n`` wide over ``mma_count`` MMAs (m64nNk16: N/2 a thread per 64 rows)."""
    return tile_n // 2 * (rows // SM90.wgmma_m) * mma_count


def _crowded_accumulators(
    mma_count: int,
    tile_m: int,
    tile_n: int,
    warpgroups: int,
    given: MatmulParams,
    target: TargetInfo,
) -> str | None:
    """Why a consumer thread's accumulators would leave too few of its registers (so the
    kernel would spill), or None: a cooperative warpgroup holds 64 rows of the tile, a
    ping-pong one the whole tile, each fp32 accumulator one register of 128 threads."""
    rows = SM90.wgmma_m * row_blocks(tile_m, given.pingpong)
    accumulators = accumulator_registers(mma_count, rows, tile_n)
    _, consumer = register_split(warpgroups, bool(given.epilogue_warps), target)
    if accumulators + EPILOGUE_RESERVE_REGISTERS <= consumer:
        return None
    return (
        f"a {tile_m}x{tile_n} tile of {mma_count} MMA(s) holds {accumulators} accumulator "
        f"registers a thread, of the {consumer} its warpgroups get (it would spill)"
    )


# Stream-K by default (see _stream_k_pays): a K of at least this many tiles, and fewer than
# this many waves of cluster tiles.
STREAM_K_MIN_K_TILES = 112
STREAM_K_MAX_WAVES = 8


def _stream_k(
    params: MatmulParams,
    given: MatmulParams,
    shape: dict[str, int],
    k_tiles: int,
    target: TargetInfo,
    residual: bool,
) -> MatmulParams:
    """``params`` with stream-K where the user (or the autotuner) asked for it: a persistent
    kernel then; refused with a warning for ping-pong, the epilogue warps or a kernel the
    user made non-persistent. Left ``None``, the heuristic chooses it where it measured
    faster (``_stream_k_pays``), and not for an epilogue that reads a ``residual``: its
    fixup reads it by global loads, where the whole-tile kernel loads it by TMA (at
    4096x4096x14336 on the H100, 643 TFLOP/s with stream-K, 692 without; 659 without and
    with global loads: docs/performance.md, "Residuals by TMA")."""
    if given.stream_k is None:
        if not residual and _stream_k_pays(params, shape, k_tiles, target):
            return dataclasses.replace(params, stream_k=True)
        return params
    if not given.stream_k:
        return params
    if not params.pingpong and not params.epilogue_warps and given.persistent is not False:
        return dataclasses.replace(params, persistent=True)
    warnings.warn(
        "pyfuse: MatmulParams(stream_k=True) not applied: stream-K runs in a persistent "
        "cooperative kernel without epilogue warps",
        UserWarning,
        stacklevel=3,
    )
    return dataclasses.replace(params, stream_k=False)


def _fused_epilogue(fusion: Fusion, mmas: list[MmaOp]) -> bool:
    """The epilogue has a second MMA or a costly op (a gelu, a silu). Such kernels take no
    cluster by default: on the H100 (947fb62) linear+bias+gelu at 4096x14336x4096 and 8192^3
    and the gate/up pair ran 1-3% faster without one, in five of the six kernels timed
    (docs/performance.md, "Residuals by TMA"); plain GEMMs run faster with one
    (``_cluster_m``), and lighter epilogues (a bias, a residual) were not timed without."""
    if len(mmas) > 1:
        return True
    return any(
        isinstance(expr, UnaryOp) and expr.op in _COSTLY_UNARY
        for expr in epilogue_exprs(fusion, mmas)
    )


def _reads_a_residual(fusion: Fusion, mmas: list[MmaOp]) -> bool:
    """The epilogue reads an input with as many elements as the output (a residual)."""
    out = mmas[0].output
    size = math.prod(a.logical_extent for a in out.logical if not a.is_reduction)
    operands = {id(operand_root(fusion, t)) for m in mmas for t in (m.a, m.b)}
    return any(id(tv) not in operands and tv.numel == size and tv.numel > 1 for tv in fusion.inputs)


def _stream_k_pays(
    params: MatmulParams, shape: dict[str, int], k_tiles: int, target: TargetInfo
) -> bool:
    """Whether a plain persistent cooperative kernel of 128-row tiles should split its last
    wave's tiles along K: a long K (``STREAM_K_MIN_K_TILES`` tiles or more), at least two and
    fewer than ``STREAM_K_MAX_WAVES`` whole waves of cluster tiles over the SMs' workers, and
    a ragged last wave. (Decode's 64-row tiles were not measured with stream-K.) There the
    public set's shapes ran faster in geomean; with a short K or many waves stream-K's fixup
    and walk cost more than the idle SMs of the last wave (docs/performance.md, "Stream-K
    last piece first")."""
    if not params.persistent or params.pingpong or params.epilogue_warps:
        return False
    if (params.tile_m or 0) < 128:
        return False
    if (params.splitk or 1) > 1 or k_tiles < STREAM_K_MIN_K_TILES:
        return False
    cluster_m, cluster_n = params.cluster_m or 1, params.cluster_n or 1
    workers = target.sm_count // (cluster_m * cluster_n)
    m_tiles = ceil_div(shape["m"], params.tile_m or 1)
    n_tiles = ceil_div(shape["n"], params.tile_n or 1)
    work = cluster_tiles(m_tiles, n_tiles, shape["batch"], cluster_m, cluster_n)
    waves, last = divmod(work, workers)
    return 2 <= waves < STREAM_K_MAX_WAVES and last > 0


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


def _epilogue_warps(
    fusion: Fusion,
    mmas: list[MmaOp],
    shape: dict[str, int],
    given: MatmulParams,
    tile_m: int,
    tile_n: int,
) -> MatmulParams:
    """``given``, with ``epilogue_warps`` turned off (and a warning) where the kernel
    cannot hand its epilogue over (:mod:`matmul_handoff`)."""
    if not given.epilogue_warps:
        return given
    tile_m, tile_n = given.tile_m or tile_m, given.tile_n or tile_n
    reason = None
    if given.pingpong:
        reason = "a ping-pong kernel overlaps its epilogue already"
    elif given.smem_epilogue is False:
        reason = "the output is stored from registers (smem_epilogue=False)"
    elif consumer_warpgroups(tile_m, False) > MAX_HANDOFF_WARPGROUPS:
        # More consumers leave the producer warpgroup too few registers for the epilogue.
        reason = f"a {tile_m}-row tile has more than {MAX_HANDOFF_WARPGROUPS} consumer warpgroups"
    elif row_blocks(tile_m, False) > 1:
        # The handoff tile has one 64-row block per consumer warpgroup.
        reason = f"a {tile_m}-row tile gives each consumer warpgroup several 64-row blocks"
    elif chunk_cols([HANDOFF_ITEMSIZE], tile_n) is None:
        reason = f"a {tile_n}-column tile is no whole number of TMA-store chunks"
    elif handoff_tensors(fusion, mmas, shape["batch"]) is None:
        reason = (
            "the epilogue has no 16-bit tensor per MMA after which it reads only those and "
            "inputs, with one TMA-stored output of their dtype"
        )
    if reason is None:
        return given
    _refuse_epilogue_warps(reason)
    return dataclasses.replace(given, epilogue_warps=False)


# Epilogue ops that cost the consumers many instructions per element (MUFU and the polynomial
# around it): where the late epilogue has one, handing it to the epilogue warps pays.
_COSTLY_UNARY = FLOAT_ONLY_UNARY - {UnaryOpType.SQRT, UnaryOpType.RSQRT, UnaryOpType.RECIPROCAL}

# The shortest K the epilogue warps are chosen for by default: the three warps run a tile's
# late epilogue slower than the consumers' eight would, so it hides only under a main loop
# at least as long. Measured on the H200 at K = 4096 and 8192 (docs/performance.md).
EPILOGUE_WARPS_MIN_K = 2048


def _epilogue_warps_pay(
    fusion: Fusion,
    mmas: list[MmaOp],
    shape: dict[str, int],
    given: MatmulParams,
    tile_m: int,
    tile_n: int,
    budget: int,
    stage_bytes: int,
    sm_count: int,
) -> bool:
    """Whether the heuristic turns the epilogue warps on: the epilogue after the handoffs
    has a costly op (linear+bias+gelu and gate/up ran faster, a plain GEMM a little slower:
    docs/performance.md, "The first GPU run of the epilogue vectors and the epilogue
    warps"), the main loop is long, a CTA takes more than
    one tile (the late epilogue hides under the next tile's main loop, or nowhere), the
    kernel can hand over (no warning: the checks of :func:`_epilogue_warps`), and three
    stages stay."""
    tile_m, tile_n = given.tile_m or tile_m, given.tile_n or tile_n
    tiles = ceil_div(shape["m"], tile_m) * ceil_div(shape["n"], tile_n) * shape["batch"]
    if (
        tiles <= sm_count
        or given.pingpong
        or given.smem_epilogue is False
        or shape["k"] < EPILOGUE_WARPS_MIN_K
        or consumer_warpgroups(tile_m, False) > MAX_HANDOFF_WARPGROUPS
        or chunk_cols([HANDOFF_ITEMSIZE], tile_n) is None
        or budget - len(mmas) * tile_m * tile_n * HANDOFF_ITEMSIZE < 3 * stage_bytes
    ):
        return False
    handoffs = handoff_tensors(fusion, mmas, shape["batch"])
    if handoffs is None:
        return False
    exprs = epilogue_exprs(fusion, mmas)
    early = split_epilogue(exprs, mmas, handoffs)
    return any(
        isinstance(expr, UnaryOp) and expr.op in _COSTLY_UNARY
        for expr in exprs
        if id(expr.output) not in early
    )


def _refuse_epilogue_warps(reason: str) -> None:
    warnings.warn(
        f"pyfuse: MatmulParams(epilogue_warps=True) not applied: {reason}; the consumer "
        "warpgroups run the whole epilogue",
        UserWarning,
        stacklevel=5,
    )


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
        return accumulator_registers(mma_count, m, n)

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


# A K of two to this many tiles leaves the kernel bound by its output store (see _cluster_m).
SMALL_K_TILES = 4


def _cluster_m(
    m_tiles: int,
    tiles: int,
    k_tiles: int,
    tile_n: int,
    tile_k: int,
    given: MatmulParams,
    target: TargetInfo,
) -> int:
    """2 (pairs of M tiles share their B tile through TMA multicast) for matmuls of at least
    two waves of tiles, where it ran faster on the H200 (docs/performance.md, "Matmul run:
    commit 2cdae1c"); 1 for smaller ones, when the user asked for a
    ``cluster_n``, or when the tile does not split into two multicast halves. Also 1 for a
    K of two to ``SMALL_K_TILES`` tiles: there the output store, not the operand traffic
    that multicast halves, bounds the kernel, and the cluster costs more than it saves. On
    the H100, 4096x4096x64, 6000x2000x96, 8192x8192x128 and 16384x1024x256 ran 4.6-5.7%
    faster without a cluster in autotune's trials (ff291a2) and 2.9-8.8% faster in a second
    run (6ad2be5); with one K tile (4096x4096x16) the cluster was 2% and 6% faster."""
    if (given.cluster_n or 1) > 1 or m_tiles < 2 or tiles < 2 * target.sm_count:
        return 1
    if 1 < k_tiles <= SMALL_K_TILES:
        return 1
    if tile_n % (SM90.swizzle_atom_rows * 2) or tile_k % (SM90.swizzle_atom_rows * 2):
        return 1  # the two CTAs would not each load whole swizzle atoms
    return 2


def _fit_cluster(params: MatmulParams, given: MatmulParams) -> MatmulParams:
    """``params``, without a requested cluster whose CTAs cannot share the heuristic's tiles
    (a slice of whole swizzle atoms each, see ``_check_params``), with a warning; a cluster
    that conflicts with a tile extent the user set too stays, for ``_check_params`` to
    refuse (the kernel then falls back, saying why)."""
    assert params.tile_m and params.tile_n and params.tile_k
    cluster_m, cluster_n = params.cluster_m or 1, params.cluster_n or 1
    requested = {"cluster_m": given.cluster_m, "cluster_n": given.cluster_n}
    for name, sharers, extents, fields in (
        ("cluster_m", cluster_m, (params.tile_n, params.tile_k), (given.tile_n, given.tile_k)),
        ("cluster_n", cluster_n, (params.tile_m, params.tile_k), (given.tile_m, given.tile_k)),
    ):
        atoms = SM90.swizzle_atom_rows * sharers
        failing = [field for extent, field in zip(extents, fields, strict=True) if extent % atoms]
        # Kept where the cluster fits, was the heuristic's, or meets a tile the user set.
        if sharers == 1 or not failing or requested[name] is None:
            continue
        if any(field is not None for field in failing):
            continue
        warnings.warn(
            f"pyfuse: MatmulParams({name}={sharers}) not applied: its CTAs would share "
            f"{extents[0]}x{extents[1]} operand tiles, which split into whole {atoms}-row "
            "slices only at multiples of that; the kernel runs without a cluster",
            UserWarning,
            stacklevel=4,
        )
        if name == "cluster_m":
            params = dataclasses.replace(params, cluster_m=1)
        else:
            params = dataclasses.replace(params, cluster_n=1)
    return params


def _warn_unused(params: MatmulParams) -> None:
    """Say so when a requested setting is scheduled in the IR but not yet carried out by the
    kernel (the result is still exact: the kernel reduces all of K in each CTA)."""
    unused = []
    if (params.splitk or 1) > 1:  # the pipeline's split_k pass takes it from the params
        unused.append(f"splitk={params.splitk} (reached the kernel scheduler unsplit)")
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


def _check_params(params: MatmulParams, tile_n_limit: int, k_tiles: int) -> None:
    assert params.tile_m and params.tile_n and params.tile_k  # filled by merged()
    if k_tiles > 1 and (params.stages or 1) < 2:
        raise ValueError(
            f"a K of {k_tiles} tiles needs at least 2 stages (a stage is freed once the next "
            f"K tile's MMAs are issued), got {params.stages}"
        )
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
