"""Cold start: what a fresh process loads for ``import pyfuse`` and for its first compile.

Each check runs in a fresh interpreter and inspects ``sys.modules``, so a heavy import that
creeps back onto the path (the driver bindings, the matmul backend, the interpreters) fails
here rather than in a benchmark. ``benchmarks/cold_start.py`` measures the times.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
from check_utils import run_fresh_process

import pyfuse as pf
from pyfuse import knobs
from pyfuse.errors import LaunchError

REPO = Path(__file__).resolve().parents[2]

# Loaded by neither ``import pyfuse`` nor the first compile of a pointwise fusion.
NEVER_FOR_POINTWISE = [
    "torch",
    "cupy",
    "pyfuse.ir.interpreter",
    "pyfuse.ir.kernel_interpreter",
    "pyfuse.ir.kernel_printer",
    "pyfuse.backend_ptx.ptxas",
    "pyfuse.passes.lower_matmul",
    "pyfuse.passes.remove_broadcasts",
    # The matmul scheduler and pattern matching load with the first fusion that has a matmul
    # (or, for the patterns, a reduction that may be a multiply-then-sum).
    "pyfuse.passes.schedule_matmul",
    "pyfuse.passes.translate_patterns",
    "pyfuse.passes.matmul_patterns",
]


def _run_fresh(code: str) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter; it prints one JSON object as its last line. Its
    caches start empty (a variant record would stand in for the compile these tests watch)."""
    with tempfile.TemporaryDirectory(prefix="pyfuse-cold-start-test-") as folder:
        return run_fresh_process(textwrap.dedent(code), Path(folder))


def _driver_library_loads() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def test_import_pyfuse_loads_no_driver_compiler_or_matmul_backend() -> None:
    loaded = _run_fresh(
        """
        import json, sys
        import pyfuse
        print(json.dumps({"modules": sorted(sys.modules)}))
        """
    )
    modules = loaded["modules"]
    assert isinstance(modules, list)
    heavy = [
        name
        for name in modules
        if name.split(".")[0] in ("cuda", "torch", "cupy", "ml_dtypes")
        or name.startswith(("pyfuse.backend_ptx", "pyfuse.passes"))
        or name
        in (
            "pyfuse.runtime.compile",
            "pyfuse.runtime.calls",
            "pyfuse.runtime.launch",
            "pyfuse.runtime.arrays",
            "pyfuse.runtime.cache",
            "pyfuse.ir.kernel_ir",
            "pyfuse.ir.id_model",
        )
        or name in NEVER_FOR_POINTWISE
    ]
    assert heavy == [], f"import pyfuse loaded {heavy}"


def test_first_pointwise_compile_loads_no_matmul_lowering_printer_or_ptxas() -> None:
    loaded = _run_fresh(
        """
        import json, sys, time
        start = time.perf_counter()
        import pyfuse as pf
        x = pf.spec((1024, 1024), pf.bfloat16)
        ptx = pf.fuse(lambda a, b, c: pf.gelu(a * b + c)).ptx(x, x, x)
        seconds = time.perf_counter() - start
        print(json.dumps({"modules": sorted(sys.modules), "seconds": seconds, "ptx": len(ptx)}))
        """
    )
    modules = loaded["modules"]
    assert isinstance(modules, list) and loaded["ptx"]
    assert [name for name in NEVER_FOR_POINTWISE if name in modules] == []
    # The one time bound, loose on purpose (about 0.3 s on a slow CI core): import pyfuse plus
    # the first compile in a fresh process. A regression here is usually an import-time table.
    seconds = loaded["seconds"]
    assert isinstance(seconds, float) and seconds < 5.0, f"first compile took {seconds:.2f} s"


@pytest.mark.skipif(_driver_library_loads(), reason="a CUDA driver library loads here")
def test_without_a_driver_library_compile_does_not_import_the_bindings() -> None:
    loaded = _run_fresh(
        """
        import json, sys
        import pyfuse as pf
        from pyfuse.backend_ptx import driver
        x = pf.spec((64,), pf.float32)
        pf.fuse(lambda a: a + 1).compile(x)
        print(json.dumps({"bindings": "cuda.bindings" in sys.modules,
                          "available": driver.available()}))
        """
    )
    assert loaded == {"bindings": False, "available": False}


def test_a_driver_library_that_does_not_load_means_no_driver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pyfuse.backend_ptx import driver
    from pyfuse.backend_ptx.driver import core

    if sys.platform not in core._DRIVER_LIBRARY:
        pytest.skip("no driver-library probe on this platform")
    monkeypatch.setitem(core._DRIVER_LIBRARY, sys.platform, "libpyfuse_no_such_driver.so.1")
    with driver.use_driver(None):  # a fresh driver state that loads the real bindings
        assert driver.available() is False
        with pytest.raises(LaunchError, match="no CUDA driver: cannot load libpyfuse_no_such"):
            driver.device_count()


def test_dumps_still_render_every_stage(capsys: pytest.CaptureFixture[str]) -> None:
    # The stage printers load only for a dump; asking for every stage prints all four.
    with knobs.overrides(dump=knobs.DUMP_STAGES):
        pf.fuse(lambda a: pf.exp(a) * 2).compile(pf.spec((256,), pf.float32))
    err = capsys.readouterr().err
    for stage in ("ir", "scheduled", "kernel", "ptx"):
        assert f"==== pyfuse {stage} ====" in err


def test_cold_start_benchmark_runs_without_a_gpu(tmp_path: Path) -> None:
    report_path = tmp_path / "cold_start.json"
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "cold_start.py"),
            "--cpu-only",
            "--reps",
            "1",
            "--shape",
            "256",
            "256",
            "--json",
            str(report_path),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "GPU stages skipped" in result.stdout
    report = json.loads(report_path.read_text())
    for column in ("cpu", "cpu, no .pyc"):
        stages = report["medians_ms"][column]
        assert stages["emit"] > 0 and stages["passes"] > 0 and stages["import pyfuse"] > 0
    assert "first launch + sync" in report["skipped"]


def test_cold_start_lists_first_calls_by_the_processes_python_speed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import cold_start

    def run(call_ms: float, loop_ms: float) -> dict[str, Any]:
        return {"stages": {"first call, end to end": call_ms}, "notes": {"python loop ms": loop_ms}}

    runs = {
        ("torch, cold", "end_to_end"): [run(120.0, 40.0), run(80.0, 20.0), run(95.5, 21.25)],
        ("torch, cold", "call"): [run(1.0, 1.0)],  # stage-by-stage children are not listed
        ("torch, warm", "end_to_end"): [run(30.0, 22.0)],
    }
    lines = cold_start._calls_by_python_speed(runs, ["torch, cold", "torch, warm"])
    assert lines[1:] == [
        "  torch, cold: 80.0 (20.0), 95.5 (21.2), 120.0 (40.0)",
        "  torch, warm: 30.0 (22.0)",
    ]
    assert cold_start._python_loop_ms() > 0
