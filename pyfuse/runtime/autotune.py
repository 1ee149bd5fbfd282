"""Matmul autotuning that remembers: ``pf.fuse(fn, autotune=True)``.

Expects a traced fusion whose default compile has a matmul kernel, the call's GPU arrays,
and a way to compile the fusion with given :class:`~pyfuse.ir.params.MatmulParams`;
guarantees that the variant returned is the fastest of a pruned set of configurations
measured on this device for these exact shapes, dtypes, layouts and epilogue, and that the
winner is stored on disk so that later calls and later processes compile it without timing.

How a configuration is measured: compiled (the driver JIT of each starts on a background
thread as soon as its PTX exists), run once (a config that fails to compile or launch is
skipped), then timed with CUDA events around each launch on the stream the call launches
on, with the L2 flushed by a memset of twice its size before every run; the median of the
runs counts. A candidate whose result differs from the default's beyond the float32
accumulation order (a sample of the first output, compared on the host) is discarded with a
warning: tuning never changes results.

The candidates (:func:`candidates`) vary only the fields the user left ``None``: tile shapes
(128x256, 128x128, 256x128, 128x192, 64x256, 64x128, within what the output needs, and the
widths that fill the waves best, :func:`filling_widths`), ping-pong, the epilogue warps,
the grid swizzle, the cluster, split-K for grids that leave most SMs idle, and stream-K.

The record is ``<cache dir>/autotune/<key>.json``: the winner's fields, its time and the
default's, every trial (by name, and with its resolved params). The key digests the device's
name, the target facts, the traced fusion's structure
(:func:`~pyfuse.runtime.variant_cache.fingerprint`: shapes, dtypes, strides, ops, constants)
and the user's params; pyfuse's version is not in it (a remembered config that no longer
compiles falls back to the heuristic).
``PYFUSE_AUTOTUNE=1`` tunes every function, ``0`` none, unset (default) as each asks.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import statistics
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pyfuse import knobs
from pyfuse.errors import PyfuseError
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.params import MatmulParams
from pyfuse.ir.target import TargetInfo

FORMAT = 1
MATMUL_FIELDS = tuple(field.name for field in dataclasses.fields(MatmulParams))
# Tile shapes tried, in the order of how often they won on the H200 (a tie keeps the first).
TILE_SHAPES = ((128, 256), (128, 128), (256, 128), (128, 192), (64, 256), (64, 128))
SWIZZLES = (1, 4, 8)
SPLITS = (2, 4)
MAX_CANDIDATES = 14
TIMED_MS_PER_CANDIDATE = 30.0  # measure each config for about this long ...
MIN_RUNS, MAX_RUNS = 5, 25  # ... in this many runs
MIN_GAIN = 0.02  # a config must beat the heuristic's by this fraction to replace it
SAMPLE_BYTES = 1 << 20  # from each end of the first output, for the result check

_memo: dict[str, MatmulParams] = {}
_memo_lock = threading.Lock()

Compile = Callable[[MatmulParams | None], Any]


# ---- the record on disk -----------------------------------------------------------------------


def tune_key(
    fusion: Fusion, target: TargetInfo, device_name: str, user: MatmulParams | None
) -> str | None:
    """The record's name; None when the fusion has no structural fingerprint."""
    from pyfuse.runtime import variant_cache

    structure = variant_cache.fingerprint(fusion)
    if structure is None:
        return None
    digest = hashlib.sha256()
    for part in (str(FORMAT), device_name, repr(dataclasses.astuple(target)), repr(user)):
        digest.update(part.encode() + b"\0")
    digest.update(structure)
    return digest.hexdigest()


def record_path(key: str) -> Path:
    return knobs.cache_dir() / "autotune" / f"{key}.json"


def remembered(key: str | None) -> MatmulParams | None:
    """The winner stored for ``key`` (this process's memo first), or None."""
    if key is None:
        return None
    with _memo_lock:
        if key in _memo:
            return _memo[key]
    params = None
    try:
        data = json.loads(record_path(key).read_text())
        if data.get("format") == FORMAT:
            params = MatmulParams(**{k: v for k, v in data["params"].items() if k in MATMUL_FIELDS})
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        params = None  # no record, or one this version cannot read: tune again
    if params is not None:
        with _memo_lock:
            _memo[key] = params
    return params


def _store(key: str, record: dict[str, Any]) -> None:
    path = record_path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{threading.get_ident()}.tmp")
        partial.write_text(json.dumps(record, indent=1, sort_keys=True))
        partial.replace(path)  # atomic: a reader sees the old record or the new one
    except OSError as error:
        warnings.warn(f"pyfuse: autotune result not stored ({error})", UserWarning, stacklevel=3)


def forget() -> None:
    """Drop this process's memo of remembered winners (tests; the disk is untouched)."""
    with _memo_lock:
        _memo.clear()


# ---- candidates -----------------------------------------------------------------------------


def matmul_params_of(compiled: Any) -> dict[str, Any] | None:
    """The first tensor-core matmul kernel's resolved params (a kernel with a TMA launch
    plan), or None when the variant has none."""
    for kernel in compiled.kernels:
        if kernel.matmul_launch is not None:
            return {name: kernel.params.get(name) for name in MATMUL_FIELDS}
    return None


def candidates(
    default: dict[str, Any],
    user: MatmulParams | None,
    sm_count: int,
    grid_ctas: int,
    problem: tuple[int, int, int] | None = None,
) -> list[MatmulParams]:
    """The configs to time, the heuristic's first (``MatmulParams()``): every one varies only
    fields the user left ``None`` and stays within what the default's tile says the output
    needs (a 64-row default means M <= 64; a tile narrower than 128 means N is that narrow).
    Given the ``(M, N, batch)`` of the problem, also the tile widths that fill the waves best
    (:func:`filling_widths`)."""
    given = user or MatmulParams()
    free = {name for name in MATMUL_FIELDS if getattr(given, name) is None}
    tile_m, tile_n = int(default["tile_m"] or 128), int(default["tile_n"] or 128)
    found: list[MatmulParams] = [MatmulParams()]

    def add(**fields: Any) -> None:
        if not set(fields) <= free:
            return
        params = MatmulParams(**fields)
        if params not in found:
            found.append(params)

    for m, n in TILE_SHAPES:
        if (m, n) == (tile_m, tile_n) or n > max(tile_n, 128):
            continue  # the default itself, or columns the output (or its MMAs) cannot use
        if tile_m <= 64 and m > 64:
            continue
        add(tile_m=m, tile_n=n)
    if problem is not None:
        # Decode outputs too (M <= 64): 16x14336 takes 112 tiles of 64x128 on 132 SMs, 128
        # of 64x112, and a weight-bound kernel reads at the rate of the SMs that pull it.
        for width in filling_widths(problem, tile_m, tile_n, sm_count):
            add(tile_m=tile_m, tile_n=width)
    if tile_n < 128:  # a narrow output: only the row tile and the split are worth varying
        add(tile_m=64)
    if tile_m > 64:
        # Ping-pong 128x128 tiles: faster on H200 for some outputs of about a wave or two,
        # slower on most (docs/performance.md, "The TMA-store epilogue, the ping-pong kernel").
        add(pingpong=True)
        # The epilogue in the producer warpgroup's idle warps, under the next tile's main
        # loop (or, where the heuristic chose them, the consumers'): only where the epilogue
        # can be handed over (else a warning drops it).
        add(epilogue_warps=not default.get("epilogue_warps"))
        # Stream-K (it splits the last wave's tiles along K) against the heuristic's choice.
        add(stream_k=not default.get("stream_k"))
    for swizzle in SWIZZLES:
        if swizzle != default["grid_swizzle"]:
            add(grid_swizzle=swizzle)
    other_cluster = 1 if default["cluster_m"] == 2 else 2
    add(cluster_m=other_cluster)
    if grid_ctas * 2 <= sm_count and not default["persistent"]:
        for split in SPLITS:
            add(splitk=split)
    return found[:MAX_CANDIDATES]


# Widths tried for a wave-filling tile: whole 16-column steps (the narrowest TMA-store chunk).
FILLING_WIDTH_STEP = 16
FILLING_WIDTHS = 2  # the best this many
FILLING_GAIN = 1.05  # of the default width's filling, at least


def filling(problem: tuple[int, int, int], tile_m: int, tile_n: int, sm_count: int) -> float:
    """The share of the SMs' time over the waves of ``tile_m x tile_n`` tiles that computes
    output elements: ``M N batch / (waves * SMs * tile_m * tile_n)`` (a ragged last wave and
    tiles past the edge both waste it)."""
    m, n, batch = problem
    tiles = -(-m // tile_m) * -(-n // tile_n) * batch
    waves = -(-tiles // sm_count)
    return m * n * batch / (waves * sm_count * tile_m * tile_n)


def filling_widths(
    problem: tuple[int, int, int], tile_m: int, tile_n: int, sm_count: int
) -> list[int]:
    """Tile widths (whole 16-column steps from 96 to ``tile_n``) that fill the waves at least
    ``FILLING_GAIN`` times better than ``tile_n``, best first (a wider one on a tie):
    3000x1600 at 128x256 takes 2 waves of 168 tiles, 56% of them computing; at 128x160 it
    takes 2 waves of 240, 89%."""
    base = filling(problem, tile_m, tile_n, sm_count)
    widths = range(tile_n - FILLING_WIDTH_STEP, 96 - 1, -FILLING_WIDTH_STEP)
    scored = [(filling(problem, tile_m, width, sm_count), width) for width in widths]
    better = [(score, width) for score, width in scored if score >= FILLING_GAIN * base]
    better.sort(key=lambda pair: (-pair[0], -pair[1]))
    return [width for _, width in better[:FILLING_WIDTHS]]


def describe(params: MatmulParams) -> str:
    """``tile 128x256 swizzle 8``: the fields a candidate sets, in words."""
    set_fields = {k: v for k, v in dataclasses.asdict(params).items() if v is not None}
    if not set_fields:
        return "heuristic"
    parts = []
    if "tile_m" in set_fields or "tile_n" in set_fields:
        parts.append(f"tile {set_fields.pop('tile_m', '-')}x{set_fields.pop('tile_n', '-')}")
    parts += [f"{k}={v}" for k, v in sorted(set_fields.items())]
    return " ".join(parts)


# ---- timing ---------------------------------------------------------------------------------


class _Timer:
    """Times runs of bound variants: CUDA events around each, the L2 flushed before it."""

    def __init__(self, device: int, stream: int) -> None:
        from pyfuse.backend_ptx import driver

        self.driver, self.device, self.stream = driver, device, stream
        self.flush_bytes = 2 * driver.device_info(device).l2_bytes
        self.flush = driver.DeviceBuffer(self.flush_bytes, device=device)
        self.events = [driver.Event(device=device) for _ in range(2 * MAX_RUNS)]

    def close(self) -> None:
        for event in self.events:
            event.destroy()
        self.flush.free()

    def measure(self, run: Callable[[], object], estimate_ms: float) -> float:
        """The median time of ``run`` in ms over enough runs to fill the time budget."""
        runs = int(min(MAX_RUNS, max(MIN_RUNS, TIMED_MS_PER_CANDIDATE / max(estimate_ms, 1e-3))))
        for index in range(runs):
            self.driver.memset_d8_async(
                int(self.flush), index & 0xFF, self.flush_bytes, self.stream
            )
            self.events[2 * index].record(self.stream)
            run()
            self.events[2 * index + 1].record(self.stream)
        self.events[2 * runs - 1].synchronize()
        return statistics.median(
            self.events[2 * i].elapsed_ms(self.events[2 * i + 1]) for i in range(runs)
        )

    def first_run(self, run: Callable[[], object]) -> tuple[object, float]:
        """One run (a launch error raises here; it also waits for the kernel's JIT), then one
        timed run: the first's result and the second's time in ms, the estimate that sizes
        :meth:`measure`."""
        result = run()
        self.driver.synchronize(self.device)
        self.events[0].record(self.stream)
        run()
        self.events[1].record(self.stream)
        self.events[1].synchronize()
        return result, self.events[0].elapsed_ms(self.events[1])


def _sample(output: object) -> np.ndarray | None:
    """Up to SAMPLE_BYTES from each end of the (first) output, as float32; None if unknown."""
    from pyfuse.backend_ptx import driver
    from pyfuse.runtime.arrays import gpu_info

    if isinstance(output, tuple):
        output = output[0]
    info = gpu_info(output)
    if info is None or 0 in info.shape or any(s < 0 for s in info.strides):
        return None
    itemsize = info.dtype.itemsize
    span = (max((n - 1) * s for n, s in zip(info.shape, info.strides, strict=True)) + 1) * itemsize
    take = min(span, SAMPLE_BYTES) // itemsize * itemsize
    head = np.empty(take, dtype=np.uint8)
    tail = np.empty(take, dtype=np.uint8)
    driver.memcpy_dtoh(head, info.pointer)
    driver.memcpy_dtoh(tail, info.pointer + span - take)
    numpy_dtype = info.dtype.numpy()
    return np.concatenate([head.view(numpy_dtype), tail.view(numpy_dtype)]).astype(np.float32)


def _agrees(sample: np.ndarray | None, reference: np.ndarray | None) -> bool:
    """Within float32 accumulation-order noise at the output's precision (or uncheckable)."""
    if sample is None or reference is None or sample.shape != reference.shape:
        return True
    finite = np.isfinite(reference)
    if not np.array_equal(finite, np.isfinite(sample)):
        return False
    scale = float(np.max(np.abs(reference[finite]), initial=0.0)) or 1.0
    return bool(np.max(np.abs(sample[finite] - reference[finite]), initial=0.0) <= 2e-2 * scale)


# ---- tuning ---------------------------------------------------------------------------------


def tune(
    *,
    name: str,
    key: str | None,
    default_compiled: Any,
    user: MatmulParams | None,
    compile_with: Compile,
    bind: Callable[[Any], Any],
    arrays: Sequence[object],
    pointers: list[int],
    stream: int,
    call_stream: int | None,
    device: int,
) -> Any:
    """Time the candidates for this call and return the fastest variant (see the module
    docstring); the winner is stored under ``key`` (when there is one). ``stream`` is where
    the variants launch (the events go there), ``call_stream`` what the call key found."""
    from pyfuse.backend_ptx import driver

    default = matmul_params_of(default_compiled)
    if default is None:
        return default_compiled
    info = driver.device_info(device)
    grid = default_compiled.kernels[0].grid
    configs = candidates(
        default, user, info.sm_count, grid[0] * grid[1] * grid[2], _problem(default_compiled)
    )
    started = time.perf_counter()
    compiled: list[tuple[MatmulParams, Any]] = [(configs[0], default_compiled)]
    seen = {_schedule_of(default_compiled)}
    for config in configs[1:]:  # every PTX first: the driver JITs them while the rest compile
        variant = _compiled_or_none(compile_with, _merged(user, config))
        if variant is None or matmul_params_of(variant) is None:
            continue
        schedule = _schedule_of(variant)
        if schedule not in seen:  # a config the heuristic would have chosen anyway
            seen.add(schedule)
            compiled.append((config, variant))
    timer = _Timer(device, stream)
    trials: list[tuple[MatmulParams, Any, float]] = []
    reference = None
    try:
        for config, variant in compiled:
            try:
                bound = bind(variant)

                def run(bound: Any = bound) -> object:
                    return bound.run(arrays, list(pointers), call_stream)

                result, wall_ms = timer.first_run(run)
            except PyfuseError:
                continue  # a config the device rejects (too many resources, say)
            sample = _sample(result)
            del result
            if reference is None:
                reference = sample
            elif not _agrees(sample, reference):
                warnings.warn(
                    f"pyfuse: autotuning {name}: {describe(config)} gave a different result "
                    "than the heuristic's config; skipped (please report this)",
                    UserWarning,
                    stacklevel=4,
                )
                continue
            trials.append((config, variant, timer.measure(run, wall_ms)))
    finally:
        timer.close()
    if not trials:
        return default_compiled
    best_config, best, best_ms = min(trials, key=lambda trial: trial[2])
    heuristic = next((trial for trial in trials if trial[0] == configs[0]), None)
    default_ms = best_ms if heuristic is None else heuristic[2]
    if heuristic is not None and best_ms > default_ms * (1 - MIN_GAIN):
        best_config, best, best_ms = heuristic  # within the noise: keep the heuristic's
    seconds = time.perf_counter() - started
    print(
        f"pyfuse: autotuned {name}: {len(trials)} configs in {seconds:.1f} s; "
        f"{describe(best_config)} {best_ms:.3f} ms (heuristic {default_ms:.3f} ms, "
        f"{default_ms / best_ms:.2f}x)",
        file=sys.stderr,
    )
    if key is not None:
        winner = _merged(user, best_config)
        _store(
            key,
            {
                "format": FORMAT,
                "name": name,
                "device": info.name,
                "params": {k: v for k, v in dataclasses.asdict(winner).items() if v is not None},
                "ms": best_ms,
                "heuristic_ms": default_ms,
                "seconds": seconds,
                "trials": [[describe(config), ms] for config, _, ms in trials],
                # Each trial's resolved params (the heuristic's fields filled in): the data
                # the heuristic's cost model is fitted to (benchmarks/fit_cost_model.py).
                "trial_params": [[_trial_facts(variant), ms] for _, variant, ms in trials],
            },
        )
        with _memo_lock:
            _memo[key] = winner
    return best


def _main_loop(compiled: Any) -> Any:
    """The first matmul kernel's main loop, where its kernel IR is at hand (a variant just
    compiled; a restored one would have to be compiled again), or None."""
    for kernel in compiled.kernels:
        loop = kernel.built_ir.main_loop() if kernel.built_ir is not None else None
        if loop is not None:
            return loop
    return None


def _problem(compiled: Any) -> tuple[int, int, int] | None:
    """(M, N, batch) of the variant's first matmul kernel (see :func:`_main_loop`)."""
    loop = _main_loop(compiled)
    return None if loop is None else (loop.m, loop.n, loop.batch)


def _trial_facts(compiled: Any) -> dict[str, Any] | None:
    """A trial's resolved params, and what its matmul kernel computes (``kernel_problem``:
    M, N, K and the batch, which holds split-K's parts) and how many kernels it launches."""
    params = matmul_params_of(compiled)
    if params is None:
        return None
    loop = _main_loop(compiled)
    if loop is not None:
        params["kernel_problem"] = [loop.m, loop.n, loop.k, loop.batch]
    params["kernels"] = len(compiled.kernels)
    return params


def _schedule_of(compiled: Any) -> tuple[object, ...]:
    """What tells two variants apart: every kernel's scheduler, params and launch shape."""
    return tuple(
        (kernel.scheduler, repr(sorted(kernel.params.items())), kernel.grid, kernel.block)
        for kernel in compiled.kernels
    )


def _merged(user: MatmulParams | None, config: MatmulParams) -> MatmulParams:
    return config.merged(user) if user is not None else config


def _compiled_or_none(compile_with: Compile, params: MatmulParams) -> Any:
    """The variant for ``params``, or None when the schedule rejects them (a config that
    does not fit this matmul) or they would not be carried out (a warning says so)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        try:
            return compile_with(params)
        except (PyfuseError, ValueError, UserWarning):
            return None
