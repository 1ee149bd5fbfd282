"""Tuning parameters that users may pass: :class:`MatmulParams`.

Frozen and hashable so a config is usable as a cache key. A field left ``None`` is
chosen by the matmul scheduler's heuristic from the shape and the device. A standard frozen
``dataclass`` (not a :func:`pyfuse.ir.records.record`): users hold it, so ``dataclasses``
and ``inspect`` see exactly what they expect (``replace``, ``asdict``, the signature).
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class MatmulParams:
    """Hopper matmul schedule. Tiles are in elements; ``grid_swizzle`` is the number of M tiles
    walked together (1 = none); ``persistent`` makes each CTA loop over tiles; ``splitk``
    splits K across CTAs; ``cluster_m``/``cluster_n`` set the CTA cluster; ``smem_epilogue``
    stores the output through shared memory (and TMA); ``pingpong`` gives each of two
    consumer warpgroups whole tiles in turn (one's epilogue under the other's main loop;
    persistent, at most 128x128 accumulator elements per warpgroup); ``epilogue_warps``
    hands the epilogue after its first 16-bit tensor to the producer warpgroup's idle warps,
    which run it while the consumers start their next tile (one MMA, one TMA-stored 16-bit
    output); ``stream_k`` splits the tiles of a persistent kernel's last, partly filled
    waves along K over all its CTAs (partial sums through a workspace; cooperative kernels
    without epilogue warps); ``tma_residuals`` loads an epilogue input the size of the
    output into the TMA-stored output's staging buffers with TMA, ahead of the epilogue that
    reads it (by default in cooperative kernels, where it measured faster; ``True`` in
    ping-pong ones too; ``False``: a global load per pair of columns)."""

    tile_m: int | None = None
    tile_n: int | None = None
    tile_k: int | None = None
    stages: int | None = None
    grid_swizzle: int | None = None
    persistent: bool | None = None
    splitk: int | None = None
    cluster_m: int | None = None
    cluster_n: int | None = None
    smem_epilogue: bool | None = None
    pingpong: bool | None = None
    epilogue_warps: bool | None = None
    stream_k: bool | None = None
    tma_residuals: bool | None = None

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if value is None:
                continue
            if field.type in ("bool | None",):
                if not isinstance(value, bool):
                    raise ValueError(f"MatmulParams.{field.name} must be a bool, got {value!r}")
            elif isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"MatmulParams.{field.name} must be a positive int, got {value!r}")

    def merged(self, defaults: MatmulParams) -> MatmulParams:
        """These params with every ``None`` field taken from ``defaults``."""
        values = {
            field.name: getattr(defaults, field.name)
            if getattr(self, field.name) is None
            else getattr(self, field.name)
            for field in fields(self)
        }
        return MatmulParams(**values)
