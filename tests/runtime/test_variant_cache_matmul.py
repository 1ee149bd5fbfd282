"""Restored matmul variants launch without their kernel IR: a record's tensor maps that do not
add up make a miss, and a restored variant's launch on the fake driver (grid, pointers, the
``cuTensorMapEncodeTiled`` calls, a persistent cluster grid sized to the resident clusters) is
the fresh compile's, in this process and in a fresh one that never loads the compiler."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from check_utils import run_fresh_process

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backend_ptx"))
from ptx_fake_driver import CUresult, FakeDriver

import pyfuse as pf
from pyfuse import knobs
from pyfuse.backend_ptx import driver
from pyfuse.backend_ptx.abi import ParamKind
from pyfuse.ir.target import HOPPER
from pyfuse.runtime import cache, launch, variant_cache

bf16 = pf.bfloat16
_LINEAR_SPECS = [pf.spec((256, 512), bf16), pf.spec((1024, 512), bf16), pf.spec((1024,), bf16)]


@pytest.fixture
def cache_dir(tmp_path: Path) -> Iterator[Path]:
    with knobs.overrides(cache_dir=tmp_path, disable_cache=False, dump=frozenset()):
        yield tmp_path


def _linear_bias_gelu(x: Any, w: Any, b: Any) -> Any:
    return pf.gelu(pf.linear(x, w, b), approximate="tanh")


def _matmul(a: Any, b: Any) -> Any:
    return a @ b  # one source line for every function of it (the key holds op lines)


def _records(cache_dir: Path) -> list[Path]:
    return sorted((cache_dir / "variant").glob("*.json"))


@pytest.mark.parametrize(
    "damage",
    [
        lambda launch: launch.update(pointer_arguments=[0, 4]),  # the kernel has 4 arguments
        lambda launch: launch["maps"][0].update(box_dims=[64]),
        lambda launch: launch.pop("cluster_ctas"),
    ],
)
def test_a_matmul_record_whose_launch_does_not_add_up_is_a_miss(
    cache_dir: Path, damage: Callable[[dict[str, Any]], None]
) -> None:
    pf.fuse(_linear_bias_gelu, name="odd_mm").compile(*_LINEAR_SPECS)
    (path,) = _records(cache_dir)
    record = json.loads(cache.read_entry(path, variant_cache.MAGIC) or b"")
    damage(record["kernels"][0]["matmul_launch"])
    cache.write_entry(path, json.dumps(record).encode(), variant_cache.MAGIC)
    assert "emit" in pf.fuse(_linear_bias_gelu, name="odd_mm").compile(*_LINEAR_SPECS).timings


def _fake_driver() -> FakeDriver:
    fake = FakeDriver()
    fake.CUtensorMapL2promotion = int  # type: ignore[misc,assignment]  # the fake stops at 128B
    return fake


def _launch(compiled: pf.Compiled, fake: FakeDriver) -> dict[str, Any]:
    """The launch of a one-kernel ``compiled`` on the fake driver, on made-up addresses, with
    every argument decoded (pointers, then each tensor map's 128 bytes)."""
    (kernel,) = compiled.kernels
    assert kernel.matmul_launch is not None
    plan = launch.Plan.of(compiled)
    loaded = launch.Loaded(compiled, plan, 0, HOPPER.arch)
    fake.expect_params = [ParamKind.PTR] * len(kernel.arguments)
    fake.expect_params += [ParamKind.TENSOR_MAP] * len(kernel.matmul_launch.maps)
    loaded.launch([0x7000_0000 + 0x100_0000 * slot for slot in range(len(kernel.arguments))], 0)
    (launched,) = fake.launches
    return {key: value for key, value in launched.items() if key != "params_address"}


def test_a_restored_matmul_variant_launches_without_its_kernel_ir(cache_dir: Path) -> None:
    """On the fake driver: the restored variant's launch (grid, shared memory, pointers, and
    the tensor maps' encoding calls) is the fresh compile's, and no kernel IR is rebuilt."""
    fresh = pf.fuse(_linear_bias_gelu, name="launched").compile(*_LINEAR_SPECS)
    restored = pf.fuse(_linear_bias_gelu, name="launched").compile(*_LINEAR_SPECS)
    assert set(restored.timings) == {"trace", "variant_cache"}
    results = []
    for compiled in (fresh, restored):
        fake = _fake_driver()
        with driver.use_driver(fake):
            launched = _launch(compiled, fake)
        encodes = [call for call in fake.calls if call[0] == "cuTensorMapEncodeTiled"]
        results.append((launched, encodes))
    assert results[0] == results[1]
    (launched, encodes) = results[1]
    assert len(encodes) == 4  # A, B, the TMA-stored output and the bias vector
    assert len(launched["args"]) == 4 + 4  # x, w, b, out, then the maps of A, B, out and b
    assert launched["grid"] == tuple(fresh.kernels[0].grid)
    assert all(kernel.built_ir is None for kernel in restored.kernels)
    assert restored.built_segmented is None


def _sixty_clusters(*_: object) -> tuple[CUresult, int]:
    return (CUresult.CUDA_SUCCESS, 60)  # cuOccupancyMaxActiveClusters: 60 fit at once


def test_a_restored_persistent_cluster_kernel_sizes_its_grid_to_the_resident_clusters(
    cache_dir: Path,
) -> None:
    """4096^3 runs persistent in 2-CTA clusters: with 60 clusters resident, the restored
    variant launches 120 CTAs, as the fresh compile does, from the stored launch data."""
    specs = [pf.spec((4096, 4096), bf16)] * 2
    fresh = pf.fuse(_matmul, name="persistent").compile(*specs)
    restored = pf.fuse(_matmul, name="persistent").compile(*specs)
    assert set(restored.timings) == {"trace", "variant_cache"}
    grids = []
    for compiled in (fresh, restored):
        (kernel,) = compiled.kernels
        assert kernel.matmul_launch is not None
        assert kernel.matmul_launch.persistent and kernel.matmul_launch.cluster_ctas == 2
        assert kernel.grid[0] > 120
        fake = _fake_driver()
        fake.cuOccupancyMaxActiveClusters = _sixty_clusters  # type: ignore[attr-defined]
        with driver.use_driver(fake):
            grids.append(_launch(compiled, fake)["grid"])
    assert grids == [(120, 1, 1), (120, 1, 1)]
    assert all(kernel.built_ir is None for kernel in restored.kernels)


def _matmul_bt(a: Any, b: Any) -> Any:
    return a @ b.T


def test_a_restored_stream_k_variant_zeroes_its_flags_before_each_launch(cache_dir: Path) -> None:
    """3000x3584x7168 (112 K tiles, 2.5 waves of 2x1 clusters) takes the heuristic's
    stream-K: the restored variant clears the same workspace bytes (its flags) in the
    stream's order before the launch, as the fresh compile does."""
    specs = [pf.spec((3000, 7168), bf16), pf.spec((3584, 7168), bf16)]
    fresh = pf.fuse(_matmul_bt, name="streamed").compile(*specs)
    restored = pf.fuse(_matmul_bt, name="streamed").compile(*specs)
    assert set(restored.timings) == {"trace", "variant_cache"}
    seen = []
    for compiled in (fresh, restored):
        (kernel,) = compiled.kernels
        assert kernel.params["stream_k"] and kernel.matmul_launch is not None
        assert kernel.matmul_launch.zeroed is not None
        fake = _fake_driver()
        with driver.use_driver(fake):
            launched = _launch(compiled, fake)
        (memset,) = [call[1:] for call in fake.calls if call[0] == "cuMemsetD8Async"]
        position, nbytes = kernel.matmul_launch.zeroed
        # The workspace argument's first bytes, zeroed before the (one) launch.
        assert memset == (launched["args"][position], 0, nbytes, 0)
        seen.append((memset, launched["grid"]))
    assert seen[0] == seen[1]


_MATMUL_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import pyfuse as pf

    fused = pf.fuse(lambda x, w, b: pf.gelu(pf.linear(x, w, b), approximate="tanh"), name="mm")
    specs = [pf.spec((256, 512), pf.bfloat16), pf.spec((1024, 512), pf.bfloat16),
             pf.spec((1024,), pf.bfloat16)]
    compiled = fused.compile(*specs)
    timings = sorted(compiled.timings)

    # Launch it on the fake driver: the tensor maps come from the record, not the kernel IR.
    sys.path.insert(0, sys.argv[1])
    from ptx_fake_driver import CUresult, FakeDriver
    from pyfuse.backend_ptx import driver
    from pyfuse.runtime import launch

    fake = FakeDriver()
    fake.CUtensorMapL2promotion = int  # the fake's enum stops at 128B
    with driver.use_driver(fake):
        plan = launch.Plan.of(compiled)
        buffers = [0x7000_0000 + (n << 24) for n in range(4)]
        launch.Loaded(compiled, plan, 0, "sm_90a").launch(buffers, 0)
    encodes = [[repr(part) for part in call[1:]] for call in fake.calls
               if call[0] == "cuTensorMapEncodeTiled"]
    loaded = sorted(name for name in sys.modules if name.startswith("pyfuse."))
    print(json.dumps({"timings": timings, "ptx": compiled.ptx, "modules": loaded,
                      "encodes": encodes, "launches": len(fake.launches),
                      "ir_rebuilt": any(k.built_ir is not None for k in compiled.kernels)}))
    """
)


def test_a_fresh_process_launches_a_cached_matmul_without_the_compiler(tmp_path: Path) -> None:
    """linear + bias + gelu: the second process restores the variant, encodes the same tensor
    maps (fake driver) and launches the kernel with none of the compiler or kernel IR loaded."""
    fakes = str(Path(__file__).resolve().parents[1] / "backend_ptx")
    first = run_fresh_process(_MATMUL_SCRIPT, tmp_path, fakes)
    second = run_fresh_process(_MATMUL_SCRIPT, tmp_path, fakes)
    assert "emit" in first["timings"] and "pyfuse.backend_ptx.matmul_template" in first["modules"]
    assert second["timings"] == ["trace", "variant_cache"]  # as compiled, before the launch
    assert second["ptx"] == first["ptx"]
    assert second["encodes"] == first["encodes"] and len(second["encodes"]) == 4
    assert second["launches"] == first["launches"] == 1
    assert not second["ir_rebuilt"]
    compiler = [
        m
        for m in second["modules"]
        if m.startswith(("pyfuse.passes", "pyfuse.backend_ptx.emit"))
        or m
        in (
            "pyfuse.ir.kernel_ir",
            "pyfuse.backend_ptx.matmul_template",
            "pyfuse.backend_ptx.matmul_host",
            "pyfuse.backend_ptx.smem_desc",
            "pyfuse.backend_ptx.tma",
        )
    ]
    assert compiler == []
    assert "pyfuse.backend_ptx.tensor_maps" in second["modules"]
