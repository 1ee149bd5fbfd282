"""The matmul heuristic's tile shape: :func:`default_tiles` (from M, N and the MMA count)
and :func:`filling_tiles` (smaller tiles where they fill the last wave better).

Expects output extents in elements; guarantees tiles that wgmma takes (rows a multiple of
64, columns a multiple of 8 up to 256) and no wider or taller than the default. Used by
the matmul heuristic (``matmul_params.choose_params``) and by split-K's tile count
(``split_k.auto_parts``, the default alone).
"""

from __future__ import annotations

from pyfuse.ir.hopper import SM90
from pyfuse.ir.iterdomain import ceil_div
from pyfuse.ir.target import TargetInfo
from pyfuse.passes.matmul_cost import CostModel, Problem, Schedule, hand_table


def default_tiles(m: int, n: int, *, single_mma: bool) -> tuple[int, int]:
    """The heuristic's (tile_m, tile_n) for an M x N output."""
    rows = SM90.wgmma_m  # one consumer warpgroup's rows; two above that
    tile_m = 2 * rows if m > rows else rows
    widest, step = SM90.wgmma_n_max, SM90.wgmma_n_step
    wide = single_mma and n >= widest
    # wgmma takes N in multiples of 8 up to 256: no wider than N needs.
    tile_n = min(widest if wide else 128, max(step, ceil_div(n, step) * step))
    return tile_m, tile_n


# The tiles the heuristic weighs, with their throughput per SM relative to 128x256 (wgmma's
# issue rate falls with the tile: fewer MMAs per operand byte loaded). 128x192 fills a wave
# that 128x256 leaves a third or more empty: the autotuner picked it on the H100 at 256x9216,
# 256x10240 and 512x4416 (docs/performance.md, "Quotients without a division, 128x192 tiles").
# 128x160 fills waves that neither 192 nor 128 does (256x18944, 3000x1600), at a rate the
# public set's shapes timed at each width put at 0.9 (docs/performance.md, "Tiles 160 wide").
FILL_TILES = (
    (128, 256, 1.0), (128, 192, 0.95), (128, 160, 0.9), (128, 128, 0.9), (64, 256, 0.8),
    (64, 128, 0.7),
)  # fmt: skip


def filling_tiles(
    shape: dict[str, int], tile_m: int, tile_n: int, target: TargetInfo, *, n_major_b: bool = False
) -> tuple[int, int]:
    """The tile of least estimated time, ``waves * area / throughput``, among the default
    and the smaller :data:`FILL_TILES` (none wider or taller than the default, which already
    fits M <= 64 and narrow N); the default where none is estimated faster. The last wave
    is what smaller tiles fill:

    - under one wave: at M = 256, N = 8192 the default's 64 tiles use half the SMs, 128x128's
      128 use nearly all (autotuning measured it far faster);
    - just past a whole wave: 256x18944's 148 tiles of 128x256 take two waves on 132 SMs, the
      second nearly empty; 296 tiles of 128x128 take three waves of half the work each.
      Every shape of the public set the default put there ran well under cuBLAS
      (docs/performance.md, "Tiles by waves").

    With ``n_major_b`` (a B operand stored N-major: its tile rows run along N) only tiles
    of a power-of-two width, which the operand's XOR swizzle needs (a 128x192 plan failed
    there, and the kernel fell back to multiply+sum)."""

    def count(m: int, n: int) -> int:
        return ceil_div(shape["m"], m) * ceil_div(shape["n"], n) * shape["batch"]

    options = [(tile_m, tile_n)] + [
        (m, n)
        for m, n, _ in FILL_TILES
        if m <= tile_m and n <= tile_n and not (n_major_b and n & (n - 1))
    ]
    model = FITTED
    if model is None or not all(model.knows(Schedule(m, n)) for m, n in options):
        throughput = {(m, n): value for m, n, value in FILL_TILES}
        model = hand_table({option: throughput.get(option, 1.0) for option in options})
    problem = Problem(shape["m"], shape["n"], shape["k"], shape["batch"])

    def cost(m: int, n: int) -> float:
        return model.estimate(problem, Schedule(m, n), target.sm_count)

    best = (tile_m, tile_n)
    for m, n in options[1:]:
        if cost(m, n) < cost(*best):
            best = (m, n)
    past_a_wave = count(tile_m, tile_n) >= target.sm_count
    if past_a_wave and cost(*best) > PAST_A_WAVE_GAIN * cost(tile_m, tile_n):
        return tile_m, tile_n  # a few percent is within the estimate's error
    return best


# Past one wave, a smaller tile must be estimated this much faster than the default.
PAST_A_WAVE_GAIN = 0.95

# The cost model fitted to autotune measurements (benchmarks/fit_cost_model.py), or None:
# then the hand table above (waves x area / throughput) decides.
FITTED: CostModel | None = None


def cluster_tiles(m_tiles: int, n_tiles: int, batch: int, cluster_m: int, cluster_n: int) -> int:
    """The units of work of a clustered matmul: ``cluster_m x cluster_n`` tiles each."""
    return ceil_div(m_tiles, cluster_m) * ceil_div(n_tiles, cluster_n) * batch


def persistent_ctas(
    m_tiles: int, n_tiles: int, batch: int, cluster_m: int, cluster_n: int, sm_count: int
) -> int:
    """The CTAs of a persistent matmul: as few clusters (or CTAs) as take the cluster tiles in
    as many waves as one per SM would, so each takes the same number of tiles, give or take
    one, and none sits out part of a last wave while the others finish theirs. 8192^3 at
    128x256 in 2x1 clusters: 1024 cluster tiles take 16 waves on 66 clusters (the last
    half full) and the same 16 on 64, all full; fewer SMs then share the power and L2
    bandwidth for the same time (fast.cu ran 128 of 132 SMs for this)."""
    cluster = cluster_m * cluster_n
    work = cluster_tiles(m_tiles, n_tiles, batch, cluster_m, cluster_n)
    slots = min(max(1, sm_count // cluster), work)
    waves = ceil_div(work, slots)
    return ceil_div(work, waves) * cluster


# Consumer warpgroups of a cooperative CTA, at most: a taller tile gives each several 64-row
# blocks (a 256x128 tile: two warpgroups of two blocks, 128 accumulators a thread at 232
# registers, where four of one block had 104 registers and ran far slower: docs/
# performance.md, "Stages released at once, 256-row tiles as two warpgroups").
MAX_COOPERATIVE_WARPGROUPS = 2


def consumer_warpgroups(tile_m: int, pingpong: bool | None) -> int:
    """Consumer warpgroups of a CTA: two taking whole tiles in turn (ping-pong), else one
    per 64 rows of the tile, at most ``MAX_COOPERATIVE_WARPGROUPS`` (cooperative)."""
    if pingpong:
        return 2
    return min(tile_m // SM90.wgmma_m, MAX_COOPERATIVE_WARPGROUPS)


def row_blocks(tile_m: int, pingpong: bool | None) -> int:
    """64-row blocks of a tile one consumer warpgroup computes: all of them in a ping-pong
    kernel, else the tile's share of its warpgroups."""
    blocks = tile_m // SM90.wgmma_m
    return blocks if pingpong else blocks // consumer_warpgroups(tile_m, pingpong)
