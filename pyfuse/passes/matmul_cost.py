"""The matmul heuristic's cost model: the estimated time of one schedule (tile shape,
cluster, persistent loop, split-K or stream-K) of an ``M x N x K`` problem on a device, as a
weighted sum of features of the schedule, with weights fitted to autotune measurements over
the public shape set (``benchmarks/fit_cost_model.py``; the fit and its table are in
``docs/performance.md``).

Expects a problem's extents and a schedule whose tile the kernel takes; guarantees an
estimate that grows with the work of each SM, so that the least estimate among schedules is
the heuristic's choice (``matmul_tiles.filling_tiles``). The estimate is relative: only its
order among schedules of one problem matters.

The features (each in units that keep the weights near one):

- ``mma <m>x<n> waves``: the waves of (cluster) tiles times one tile's MMA work, for the
  schedule's tile shape (a column per shape: wgmma's rate per output element differs).
  A wave that leaves SMs idle costs as much as a full one here ...
- ``mma <m>x<n> share``: ... and the same work spread evenly over the SMs here; the fit
  weighs the two (a GPU under its power cap runs a part-empty wave's SMs faster).
- ``mma in a cluster``, ``mma ping-pong``, ``mma with epilogue warps``: the MMA waves of a
  2-CTA cluster (multicast halves one operand's loads), of a ping-pong kernel, of one with
  epilogue warps (their weights may be negative: each may speed the main loop up).
- ``tiles``: waves of tiles (a tile's fixed cost: the pipeline's fill, the epilogue's sync).
- ``epilogue``: waves of output elements (the epilogue's work per element).
- ``launches``: kernels launched (split-K's sum is a second one).
- ``partials``: fp32 partial sums written and read back (split-K, stream-K).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyfuse.ir.iterdomain import ceil_div

# One unit of MMA work: 2**30 multiply-adds of one SM.
_MMA_UNIT = float(1 << 30)
_ELEMENT_UNIT = float(1 << 20)


@dataclass(frozen=True)
class Problem:
    m: int
    n: int
    k: int
    batch: int = 1


@dataclass(frozen=True)
class Schedule:
    """What the estimate reads of a kernel's params."""

    tile_m: int
    tile_n: int
    tile_k: int = 64
    cluster: int = 1  # CTAs of a cluster along M (they share B tiles)
    persistent: bool = False
    splitk: int = 1
    stream_k: bool = False
    pingpong: bool = False
    epilogue_warps: bool = False

    @classmethod
    def of(cls, params: Mapping[str, object]) -> Schedule:
        """From resolved params (``MatmulParams`` fields, as an autotune record holds them)."""

        def number(name: str, default: int) -> int:
            value = params.get(name)
            return int(value) if isinstance(value, int) and not isinstance(value, bool) else default

        return cls(
            tile_m=number("tile_m", 128),
            tile_n=number("tile_n", 128),
            tile_k=number("tile_k", 64),
            cluster=number("cluster_m", 1) * number("cluster_n", 1),
            persistent=bool(params.get("persistent")),
            splitk=max(1, number("splitk", 1)),
            stream_k=bool(params.get("stream_k")),
            pingpong=bool(params.get("pingpong")),
            epilogue_warps=bool(params.get("epilogue_warps")),
        )


def features(problem: Problem, schedule: Schedule, sm_count: int) -> dict[str, float]:
    """The schedule's features (see the module docstring), by name."""
    s = schedule
    k = ceil_div(problem.k, s.splitk)
    k_padded = ceil_div(k, s.tile_k) * s.tile_k
    m_tiles = ceil_div(problem.m, s.tile_m)
    n_tiles = ceil_div(problem.n, s.tile_n)
    cluster_tiles = ceil_div(m_tiles, s.cluster) * n_tiles * problem.batch * s.splitk
    slots = max(1, sm_count // s.cluster)
    waves = ceil_div(cluster_tiles, slots)
    share = cluster_tiles / slots
    if s.stream_k and s.persistent:
        waves_of_work = share  # the last waves are split along K over every worker
    else:
        waves_of_work = float(waves)
    tile_work = s.tile_m * s.tile_n * k_padded / _MMA_UNIT
    tile = f"{s.tile_m}x{s.tile_n}"
    found = {
        f"mma {tile} waves": waves_of_work * tile_work,
        f"mma {tile} share": share * tile_work,
        "mma in a cluster": waves_of_work * tile_work if s.cluster > 1 else 0.0,
        "mma ping-pong": waves_of_work * tile_work if s.pingpong else 0.0,
        "mma with epilogue warps": waves_of_work * tile_work if s.epilogue_warps else 0.0,
        "tiles": waves_of_work,
        "epilogue": waves_of_work * s.tile_m * s.tile_n / _ELEMENT_UNIT,
        "launches": 2.0 if s.splitk > 1 else 1.0,
        "partials": 0.0,
    }
    if s.splitk > 1:
        found["partials"] = problem.m * problem.n * problem.batch * s.splitk / _ELEMENT_UNIT
    elif s.stream_k and s.persistent and cluster_tiles % slots:
        # About one partial tile per worker in the split waves.
        found["partials"] = slots * s.cluster * s.tile_m * s.tile_n / _ELEMENT_UNIT
    return found


# The features whose weights may be negative (variants of the main loop).
SIGNED = frozenset({"mma in a cluster", "mma ping-pong", "mma with epilogue warps"})


@dataclass(frozen=True)
class CostModel:
    """Weights by feature name; a feature without a weight counts 0. ``source`` says where
    the weights came from (a fit: its commit, GPU and date)."""

    weights: Mapping[str, float]
    source: str
    # Weights that may be negative (the others are fitted non-negative).
    signed: frozenset[str] = field(default_factory=lambda: SIGNED)

    def estimate(self, problem: Problem, schedule: Schedule, sm_count: int) -> float:
        found = features(problem, schedule, sm_count)
        return sum(self.weights.get(name, 0.0) * value for name, value in found.items())

    def knows(self, schedule: Schedule) -> bool:
        """Whether the weights cover the schedule's tile shape."""
        return f"mma {schedule.tile_m}x{schedule.tile_n} waves" in self.weights


def hand_table(throughput: Mapping[tuple[int, int], float]) -> CostModel:
    """The model of waves times tile area over a tile's relative throughput (what the
    heuristic used before a fit): every wave costs as much as a full one."""
    weights = {f"mma {m}x{n} waves": 1.0 / value for (m, n), value in throughput.items()}
    return CostModel(weights, "hand table: waves x tile area / relative throughput")
