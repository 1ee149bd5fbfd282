"""Cold start: what the first call of a new pointwise fusion costs in a fresh process.

    PYTHONPATH=. python3 benchmarks/cold_start.py [--reps 5] [--shape 4096 4096] [--json out.json]

The fusion is ``gelu(x * y + z)`` on bf16 inputs. Every measurement runs in a fresh Python
process (this file, re-run with ``--child``), ``--reps`` times; the tables show medians in ms.

- **CPU stages** (no GPU needed): ``import pyfuse``, the import of the runtime modules that
  the first call loads and of the compiler's (passes, PTX emitter), the target lookup that
  ``compile`` makes for specs (it probes for a CUDA driver), trace, the variant cache lookup,
  the passes, PTX emission, and a second new fusion compiled in the same process. Columns:
  an empty cache; a warm one (the variant record of an earlier process: no passes, no
  emission, no compiler import); and pyfuse's modules compiled from source, as a checkout run
  under ``PYTHONDONTWRITEBYTECODE=1`` (no ``__pycache__``) compiles them in every process.
- **GPU stages** (skipped without a GPU): the same, plus ``import cuda.bindings.driver``,
  ``cuInit``, the primary context, device attributes, module load (driver JIT of the PTX, or
  the cubin from the cache), and the first launch with its synchronize. Columns: with torch
  already holding the GPU (as a torch user has it: torch made the primary context, so pyfuse
  retains it) or without torch (pyfuse's own ``DeviceArray`` inputs; pyfuse creates the
  context), each with a kernel cache that is cold (empty: a fusion never compiled on this
  machine), cubin (only the cubins of an earlier process: passes and emission run, the JIT
  does not) or warm (cubins and variant records: a fusion an earlier process compiled); and
  torch + warm cache with pyfuse compiled from source. The last rows time the first call end
  to end, ``fused(*inputs)`` plus a synchronize in a process that has only imported pyfuse
  (and made its inputs), and a second new fusion in the same process. Each end-to-end
  child also times a fixed Python loop just before its call, and the report lists every
  first call beside that loop time: on the lent machines the host's speed for Python varied
  by 1.7-2x from one process to the next, and the first call with it.

Children write ``.pyc`` files to a private ``PYTHONPYCACHEPREFIX`` warmed by unmeasured runs
(the first run with torch compiles torch's modules into it once: allow a minute), and run
with ``CUDA_CACHE_DISABLE=1`` so that the driver's own JIT cache cannot hide the JIT.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.machinery
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from common import REPO, commit

RESULT_PREFIX = "COLD_START_RESULT "
TARGET_MS = 100.0  # the goal: cold first call, trace to launched kernel

# Row order of the tables; a stage a scenario did not measure prints as "-".
CPU_ROWS = [
    "import pyfuse",
    "import runtime modules",
    "import compiler modules",
    "target for specs (driver probe)",
    "trace",
    "variant cache lookup",
    "passes",
    "emit",
    "compile other",
    "first compile, after import",
    "second new fusion, compile",
]
GPU_ROWS = [
    "import pyfuse",
    "import runtime modules",
    "import compiler modules",
    "import cuda.bindings.driver",
    "cuInit",
    "primary context",
    "device attributes",
    "trace",
    "variant cache lookup",
    "passes",
    "emit",
    "compile other",
    "module load",
    "first launch + sync",
    "first call, sum of stages after import",
    "first call, end to end",
    "second new fusion, first call",
]
# The GPU stages of one first call after ``import pyfuse``, in order.
AFTER_IMPORT = GPU_ROWS[1 : GPU_ROWS.index("first launch + sync") + 1]
# Compiled.timings keys that are not passes.
_NOT_PASSES = frozenset({"trace", "emit", "load", "variant_cache"})


# ---- children: one measurement each, in a fresh process --------------------------------------


class _SourceOnlyLoader(importlib.machinery.SourceFileLoader):
    """Reads no .pyc and writes none: the module is compiled from source on every import."""

    def get_data(self, path: str) -> bytes:
        if path.endswith(".pyc"):
            raise OSError("bytecode ignored for this measurement")
        return super().get_data(path)

    def set_data(self, path: str, data: bytes, *, _mode: int = 0o666) -> None:
        return None


class _SourceOnlyFinder:
    """Gives pyfuse's modules (only those) a :class:`_SourceOnlyLoader`."""

    @classmethod
    def find_spec(cls, name: str, path: Sequence[str] | None = None, target: Any = None) -> Any:
        if name != "pyfuse" and not name.startswith("pyfuse."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            spec.loader = _SourceOnlyLoader(name, spec.origin)
        return spec


@contextmanager
def _stage(stages: dict[str, float], name: str) -> Iterator[None]:
    start = time.perf_counter()
    yield
    stages[name] = (time.perf_counter() - start) * 1e3


def _fusion(pf: Any, second: bool = False) -> Any:
    if second:
        return pf.fuse(lambda x, y, z: pf.gelu(x * y - z), name="cold_start_second")
    return pf.fuse(lambda x, y, z: pf.gelu(x * y + z), name="cold_start_gelu")


def _compile_stages(stages: dict[str, float], compiled: Any, wall_ms: float) -> None:
    """trace / passes / emit from ``Compiled.timings``; the rest of the wall time as 'other'."""
    timings = {name: seconds * 1e3 for name, seconds in compiled.timings.items()}
    stages["trace"] = timings.get("trace", 0.0)
    stages["passes"] = sum(ms for name, ms in timings.items() if name not in _NOT_PASSES)
    stages["emit"] = timings.get("emit", 0.0)
    stages["variant cache lookup"] = timings.get("variant_cache", 0.0)
    named = ("trace", "passes", "emit", "variant cache lookup")
    stages["compile other"] = wall_ms - sum(stages.get(name, 0.0) for name in named)


def _import_stages(stages: dict[str, float], config: dict[str, Any]) -> None:
    """The modules a first call loads: the runtime's always; the compiler's (passes, PTX
    emitter) unless the variant cache is expected to hold the fusion (a warm cache)."""
    with _stage(stages, "import runtime modules"):
        import pyfuse.backend_ptx.driver
        import pyfuse.runtime.cache
        import pyfuse.runtime.calls
        import pyfuse.runtime.launch
        import pyfuse.runtime.variant_cache
    if config.get("cache") != "warm":
        with _stage(stages, "import compiler modules"):
            import pyfuse.runtime.compile  # noqa: F401


def _loaded_summary() -> dict[str, Any]:
    names = sorted(sys.modules)
    return {
        "pyfuse_modules": sum(1 for name in names if name.split(".")[0] == "pyfuse"),
        "numpy": "numpy" in sys.modules,
        "cuda.bindings": "cuda.bindings.driver" in sys.modules,
        "matmul_modules": [name for name in names if "matmul" in name and "pyfuse" in name],
    }


def _child_compile(config: dict[str, Any]) -> dict[str, Any]:
    """CPU path: import, then the first ``compile`` of specs, then a second new fusion."""
    stages: dict[str, float] = {}
    notes: dict[str, Any] = {}
    with _stage(stages, "import pyfuse"):
        import pyfuse as pf
    notes["after import pyfuse"] = _loaded_summary()
    start = time.perf_counter()
    _import_stages(stages, config)
    import pyfuse.runtime.launch

    with _stage(stages, "target for specs (driver probe)"):
        pyfuse.runtime.launch.target_for(None)  # what compile() of specs does first
    specs = [pf.spec(tuple(config["shape"]), pf.bfloat16)] * 3
    compile_start = time.perf_counter()
    compiled = _fusion(pf).compile(*specs)
    done = time.perf_counter()
    _compile_stages(stages, compiled, (done - compile_start) * 1e3)
    stages["first compile, after import"] = (done - start) * 1e3
    notes["after first compile"] = _loaded_summary()
    with _stage(stages, "second new fusion, compile"):
        _fusion(pf, second=True).compile(*specs)
    notes["ptx_lines"] = compiled.ptx.count("\n")
    return {"stages": stages, "notes": notes}


def _gpu_inputs(pf: Any, use_torch: bool, shape: tuple[int, ...]) -> tuple[list[Any], Any]:
    """Three random bf16 inputs on device 0 and a function that waits for the GPU."""
    if use_torch:
        import torch

        generator = torch.Generator(device="cuda").manual_seed(0)
        inputs = [
            torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=generator)
            for _ in range(3)
        ]
        torch.cuda.synchronize()
        return inputs, torch.cuda.synchronize
    import numpy as np

    from pyfuse.backend_ptx import driver
    from pyfuse.runtime.arrays import DeviceArray

    rng = np.random.default_rng(0)
    inputs = []
    for _ in range(3):
        array = DeviceArray(shape, pf.bfloat16)
        host = rng.standard_normal(shape).astype(pf.bfloat16.numpy())
        driver.memcpy_htod(array.pointer, host)
        inputs.append(array)
    driver.synchronize(0)
    return inputs, driver.synchronize


def _child_call(config: dict[str, Any]) -> dict[str, Any]:
    """GPU path, stage by stage: imports, driver, compile, load, first launch."""
    use_torch = bool(config["torch"])
    shape = tuple(config["shape"])
    stages: dict[str, float] = {}
    notes: dict[str, Any] = {}
    if use_torch:
        import torch

        torch.zeros(1, device="cuda")  # torch creates the primary context, as in a user's code
        torch.cuda.synchronize()
        notes["numpy imported by torch"] = "numpy" in sys.modules
    with _stage(stages, "import pyfuse"):
        import pyfuse as pf
    _import_stages(stages, config)
    with _stage(stages, "import cuda.bindings.driver"):
        import cuda.bindings.driver  # noqa: F401
    from pyfuse.backend_ptx import driver
    from pyfuse.backend_ptx.driver.core import driver_module

    with _stage(stages, "cuInit"):
        driver_module()
    with _stage(stages, "primary context"):
        driver.context(0)
    with _stage(stages, "device attributes"):
        info = driver.device_info(0)
    notes["gpu"] = info.name
    inputs, synchronize = _gpu_inputs(pf, use_torch, shape)

    start = time.perf_counter()
    compiled = _fusion(pf).compile(*inputs)
    _compile_stages(stages, compiled, (time.perf_counter() - start) * 1e3)
    start = time.perf_counter()
    compiled(*inputs)
    synchronize()
    wall_ms = (time.perf_counter() - start) * 1e3
    stages["module load"] = compiled.timings.get("load", 0.0) * 1e3
    stages["first launch + sync"] = wall_ms - stages["module load"]
    stages["first call, sum of stages after import"] = sum(
        stages.get(name, 0.0) for name in AFTER_IMPORT
    )
    notes["module source"] = [
        source for loaded in compiled.runtime.loaded.values() for source in loaded.sources
    ]

    second = _fusion(pf, second=True)
    with _stage(stages, "second new fusion, first call"):
        second(*inputs)
        synchronize()
    return {"stages": stages, "notes": notes}


# The host's speed for Python in this process: the lent machines' virtual CPUs ran the same
# loop 1.7-2x slower in some processes than in others, and every stage of a first call with
# them. Timed just before the first call and reported beside it.
YARDSTICK_STEPS = 300_000


def _python_loop_ms() -> float:
    start = time.perf_counter()
    total = 0
    for step in range(YARDSTICK_STEPS):
        total += step
    return (time.perf_counter() - start) * 1e3


def _child_end_to_end(config: dict[str, Any]) -> dict[str, Any]:
    """The first call as a user makes it: ``fused(*inputs)`` then a synchronize, timed whole."""
    use_torch = bool(config["torch"])
    stages: dict[str, float] = {}
    if use_torch:
        import torch

        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
    import pyfuse as pf  # timed by the "call" child; only the call is timed here

    # Without torch the inputs are pyfuse DeviceArrays: making them imports the driver
    # bindings and creates the context, before the call.
    inputs, synchronize = _gpu_inputs(pf, use_torch, tuple(config["shape"]))
    fused = _fusion(pf)
    loop_ms = _python_loop_ms()
    with _stage(stages, "first call, end to end"):
        fused(*inputs)
        synchronize()
    return {"stages": stages, "notes": {"python loop ms": loop_ms}}


def _child_probe(config: dict[str, Any]) -> dict[str, Any]:
    """What this machine has: a CUDA driver and device, torch with CUDA; warms the .pyc cache."""
    import numpy

    import pyfuse
    import pyfuse.runtime.calls
    import pyfuse.runtime.compile
    from pyfuse.backend_ptx import driver

    notes: dict[str, Any] = {"numpy": numpy.__version__, "pyfuse": pyfuse.__version__}
    notes["gpu"] = driver.available()
    if notes["gpu"]:
        notes["gpu_name"] = driver.device_info(0).name
        notes["driver_version"] = driver.driver_version()
    try:
        import torch

        notes["torch"] = torch.__version__
        notes["torch_cuda"] = bool(torch.cuda.is_available())
    except ImportError:
        notes["torch"] = None
        notes["torch_cuda"] = False
    return {"stages": {}, "notes": notes}


CHILDREN: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "probe": _child_probe,
    "compile": _child_compile,
    "call": _child_call,
    "end_to_end": _child_end_to_end,
}


def child_main(kind: str, config: dict[str, Any]) -> None:
    if config.get("source_only"):
        sys.meta_path.insert(0, _SourceOnlyFinder)
    result = CHILDREN[kind](config)
    print(RESULT_PREFIX + json.dumps(result), flush=True)


# ---- the parent: scenarios, repetitions, tables ------------------------------------------------


class Runner:
    """Spawns children with a private bytecode cache and parses their results."""

    def __init__(self, root: Path, verbose: bool) -> None:
        self.root = root
        self.verbose = verbose
        self.warm_cache = root / "warm-kernel-cache"  # filled by the unmeasured runs
        env = dict(os.environ)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
        env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
        )
        env["CUDA_CACHE_DISABLE"] = "1"
        self.env = env

    def run(self, kind: str, config: dict[str, Any], cache: str = "cold") -> dict[str, Any]:
        """One child with a kernel cache in state ``cache`` (see CACHE_STATES)."""
        env = dict(self.env)
        if cache == "warm":
            cache_dir = self.warm_cache
        else:
            cache_dir = Path(tempfile.mkdtemp(dir=self.root))  # empty, or a copy of the cubins
            if cache == "cubin":
                shutil.copytree(self.warm_cache / "cubin", cache_dir / "cubin")
        env["PYFUSE_CACHE_DIR"] = str(cache_dir)
        command = [sys.executable, str(Path(__file__).resolve()), "--child", kind]
        command += ["--config", json.dumps({**config, "cache": cache})]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
        if done.returncode != 0 or not lines:
            raise SystemExit(
                f"cold_start: child {kind} {config} failed (exit {done.returncode}):\n"
                f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
        result: dict[str, Any] = json.loads(lines[-1][len(RESULT_PREFIX) :])
        if self.verbose:
            stages = {name: round(ms, 2) for name, ms in result["stages"].items()}
            print(f"  {kind} {config}: {stages}", file=sys.stderr)
        return result


Scenario = tuple[str, str, dict[str, Any], str]  # name, child kind, config, cache: cold|warm


# Kernel cache states: "cold" an empty PYFUSE_CACHE_DIR (a fusion never compiled on this
# machine: passes, emission, driver JIT); "cubin" only the cubins of an earlier process (the
# passes and emission run, the JIT does not: what a fusion costs whose variant record is
# missing); "warm" cubins and variant records (a fusion compiled by an earlier process).
CACHE_STATES = ("cold", "cubin", "warm")


def _scenarios(shape: list[int], gpu: bool, torch_cuda: bool) -> list[Scenario]:
    result: list[Scenario] = [
        ("cpu", "compile", {"shape": shape}, "cold"),
        ("cpu, warm", "compile", {"shape": shape}, "warm"),
        ("cpu, no .pyc", "compile", {"shape": shape, "source_only": True}, "cold"),
    ]
    if not gpu:
        return result
    for use_torch in ([True] if torch_cuda else []) + [False]:
        label = "torch" if use_torch else "no torch"
        for cache in CACHE_STATES if use_torch else ("cold", "warm"):
            config = {"shape": shape, "torch": use_torch}
            result.append((f"{label}, {cache}", "call", config, cache))
            result.append((f"{label}, {cache}", "end_to_end", config, cache))
    # The same first call with pyfuse compiled from source (a checkout without .pyc files).
    config = {"shape": shape, "torch": torch_cuda, "source_only": True}
    name = f"{'torch' if torch_cuda else 'no torch'}, warm, no .pyc"
    result += [(name, "call", config, "warm"), (name, "end_to_end", config, "warm")]
    return result


def _median_table(runs: list[dict[str, Any]]) -> dict[str, float]:
    names: dict[str, None] = {}
    for run in runs:
        names.update(dict.fromkeys(run["stages"]))
    return {
        name: statistics.median(run["stages"][name] for run in runs if name in run["stages"])
        for name in names
    }


def _format_table(title: str, rows: list[str], columns: dict[str, dict[str, float]]) -> str:
    width = max(len(row) for row in rows) + 2
    cell = max(12, *(len(name) + 3 for name in columns))
    header = f"{title:<{width}}" + "".join(f"{name:>{cell}}" for name in columns)
    lines = [header, "-" * len(header)]
    for row in rows:
        cells = []
        for medians in columns.values():
            value = medians.get(row)
            cells.append(f"{value:>{cell}.1f}" if value is not None else f"{'-':>{cell}}")
        lines.append(f"{row:<{width}}" + "".join(cells))
    return "\n".join(lines)


def _calls_by_python_speed(
    runs: dict[tuple[str, str], list[dict[str, Any]]], names: list[str]
) -> list[str]:
    """Every end-to-end first call of each scenario beside its process's Python loop time,
    in order of the loop: on a host whose speed varies by process, the split shows."""
    lines = [
        f"every first call, end to end, ms (with the process's {YARDSTICK_STEPS:,}-step "
        "Python loop, ms, timed just before it), in order of the loop:"
    ]
    for name in names:
        pairs = sorted(
            (r["notes"]["python loop ms"], r["stages"]["first call, end to end"])
            for r in runs.get((name, "end_to_end"), [])
        )
        lines.append(f"  {name}: " + ", ".join(f"{call:.1f} ({loop:.1f})" for loop, call in pairs))
    return lines


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="fresh processes per scenario")
    parser.add_argument("--shape", type=int, nargs="+", default=[4096, 4096])
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--cpu-only", action="store_true", help="skip the GPU stages")
    parser.add_argument("--verbose", action="store_true", help="print every child's stages")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child_main(args.child, json.loads(args.config))
        return

    with tempfile.TemporaryDirectory(prefix="pyfuse-cold-start-") as temporary:
        root = Path(temporary)
        runner = Runner(root, args.verbose)
        # The probe and one unmeasured run per kind of child fill the .pyc cache (and the
        # pre-filled kernel cache of the warm scenarios).
        probe = runner.run("probe", {})["notes"]
        gpu = bool(probe["gpu"]) and not args.cpu_only
        torch_cuda = gpu and bool(probe.get("torch_cuda"))
        scenarios = _scenarios(args.shape, gpu, torch_cuda)
        for _, kind, config, _ in scenarios:
            if not config.get("source_only"):
                runner.run(kind, config, "warm")
        runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for _ in range(args.reps):  # repetitions interleaved, so drift spreads over scenarios
            for name, kind, config, cache in scenarios:
                result = runner.run(kind, config, cache)
                runs.setdefault((name, kind), []).append(result)

    columns: dict[str, dict[str, float]] = {}
    for (name, _), results in runs.items():
        columns.setdefault(name, {}).update(_median_table(results))
    cpu_columns = {name: columns[name] for name in ("cpu", "cpu, warm", "cpu, no .pyc")}
    gpu_columns = {name: medians for name, medians in columns.items() if name not in cpu_columns}

    shape = "x".join(str(extent) for extent in args.shape)
    print(
        f"pyfuse cold start: gelu(x*y+z), bf16 [{shape}]; medians of {args.reps} fresh "
        f"processes, ms\ncommit {commit()}, Python {platform.python_version()}, "
        f"CPU {_cpu_name()}, GPU {probe.get('gpu_name', 'none')}, torch {probe.get('torch')}"
    )
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print(
            "note: this shell sets PYTHONDONTWRITEBYTECODE; a checkout without __pycache__ then "
            "compiles pyfuse from source in every process (the 'no .pyc' column)"
        )
    print()
    print(_format_table("CPU stages", CPU_ROWS, cpu_columns))
    skipped: list[str] = []
    if gpu_columns:
        print()
        print(_format_table("GPU stages", GPU_ROWS, gpu_columns))
        print(
            "cold: an empty PYFUSE_CACHE_DIR (passes, emission, driver JIT); cubin: only cubins "
            "(passes and emission run); warm: cubins and variant records (neither runs)"
        )
        sources = {
            name: sorted({s for r in runs[(name, "call")] for s in r["notes"]["module source"]})
            for name in gpu_columns
        }
        print(f"module source per column: {sources}")
        preloaded = {
            r["notes"]["numpy imported by torch"]
            for (name, kind), results in runs.items()
            for r in results
            if kind == "call" and "numpy imported by torch" in r["notes"]
        }
        if preloaded:
            print(f"numpy already imported by torch before pyfuse: {sorted(preloaded)}")
        for name, medians in gpu_columns.items():
            total = medians.get("first call, end to end")
            if total is not None:
                verdict = "meets" if total < TARGET_MS else "misses"
                print(f"{name}: first call {total:.1f} ms {verdict} the {TARGET_MS:.0f} ms target")
        print("\n".join(_calls_by_python_speed(runs, list(gpu_columns))))
    else:
        reason = "--cpu-only" if args.cpu_only else "no CUDA driver or device"
        skipped = GPU_ROWS
        print(f"\nGPU stages skipped ({reason}): {', '.join(GPU_ROWS)}")

    if args.json:
        report = {
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "commit": commit(),
            "python": platform.python_version(),
            "cpu": _cpu_name(),
            "probe": probe,
            "shape": args.shape,
            "reps": args.reps,
            "target_ms": TARGET_MS,
            "medians_ms": columns,
            "runs": {f"{name} / {kind}": results for (name, kind), results in runs.items()},
            "skipped": skipped,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
