"""The on-disk cubin cache: keys, atomic publication, corrupt entries, and loads (fake driver)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backend_ptx"))
from ptx_fake_driver import FakeDriver

import pyfuse as pf
from pyfuse import knobs
from pyfuse.backend_ptx import driver
from pyfuse.frontend import cache
from pyfuse.ir.target import HOPPER

PTX = ".version 9.0\n.target sm_90a\n.entry k()\n{ ret; }\n"


@pytest.fixture
def cache_dir(tmp_path: Path) -> Iterator[Path]:
    with knobs.overrides(cache_dir=tmp_path):
        yield tmp_path


@pytest.fixture
def fake() -> Iterator[FakeDriver]:
    fake_driver = FakeDriver()
    with driver.use_driver(fake_driver):
        yield fake_driver
        # A test that failed with a held optimized build must not leave its thread blocked.
        if fake_driver.optimized_gate is not None:
            fake_driver.optimized_gate.set()
        cache.wait_for_jits()
        cache._forget_ahead()  # jobs a test started and never took


def _entry(ptx: str = PTX) -> Path:
    return cache.entry_path(cache.entry_key(ptx, "sm_90a", 13000))


def test_key_covers_ptx_arch_version_and_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    base = cache.entry_key(PTX, "sm_90a", 13000)
    assert len(base) == 64 and base == cache.entry_key(PTX, "sm_90a", 13000)
    assert cache.entry_key(PTX + " ", "sm_90a", 13000) != base
    assert cache.entry_key(PTX, "sm_100a", 13000) != base
    assert cache.entry_key(PTX, "sm_90a", 13010) != base
    monkeypatch.setattr(pf, "__version__", "9.9.9")
    assert cache.entry_key(PTX, "sm_90a", 13000) != base


def test_round_trip_leaves_no_temporary_files(cache_dir: Path) -> None:
    path = _entry()
    cache.write_entry(path, b"\x7fELF cubin bytes")
    assert cache.read_entry(path) == b"\x7fELF cubin bytes"
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    assert path.parent.parent == cache_dir


def test_publication_is_a_rename_of_a_complete_file(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _entry()
    seen: list[tuple[bool, bytes]] = []
    real_replace = os.replace

    def replace(source: Any, target: Any) -> None:
        # At the moment of publication the entry does not exist yet, and the temporary file
        # (in the same directory, so the rename is atomic) already holds the whole entry.
        assert Path(source).parent == Path(target).parent
        seen.append((Path(target).exists(), Path(source).read_bytes()))
        real_replace(source, target)

    monkeypatch.setattr(cache.os, "replace", replace)
    cache.write_entry(path, b"cubin")
    assert seen == [(False, cache.encode_entry(b"cubin"))]


def test_concurrent_writers_never_expose_a_partial_entry(cache_dir: Path) -> None:
    path = _entry()
    payloads = [bytes([65 + n]) * (200_000 + n) for n in range(3)]
    writer = textwrap.dedent(
        f"""
        from pathlib import Path
        from pyfuse.frontend import cache
        payload = bytes([65 + N]) * (200_000 + N)
        for _ in range(40):
            cache.write_entry(Path({str(path)!r}), payload)
        """
    )
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", writer.replace("N", str(n))],
            env={**os.environ, "PYTHONPATH": str(Path(cache.__file__).parents[2])},
        )
        for n in range(3)
    ]
    reads = []
    while any(p.poll() is None for p in processes):
        reads.append(cache.read_entry(path))
    assert all(p.wait() == 0 for p in processes)
    assert all(r is None or r in payloads for r in reads)
    assert cache.read_entry(path) in payloads
    assert [p.name for p in path.parent.iterdir()] == [path.name]


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) - 3],  # truncated
        lambda data: data[:-1] + bytes([data[-1] ^ 1]),  # one flipped bit
        lambda data: b"not a pyfuse cache entry",
        lambda data: b"",
    ],
)
def test_damaged_entries_are_ignored_and_rewritten(
    cache_dir: Path, fake: FakeDriver, damage: Any
) -> None:
    path = _entry()
    path.parent.mkdir(parents=True)
    path.write_bytes(damage(cache.encode_entry(fake.cubin)))
    assert cache.read_entry(path) is None
    _, source = cache.load_module(PTX, "k", device=0, arch="sm_90a")
    assert source == cache.FROM_JIT and "cuLinkCreate" in fake.names()
    assert cache.read_entry(path) == fake.cubin


def test_miss_links_and_stores_then_hit_loads_the_cubin(cache_dir: Path, fake: FakeDriver) -> None:
    _, source = cache.load_module(PTX, "k", device=0, arch="sm_90a")
    assert source == cache.FROM_JIT
    assert fake.names().count("cuLinkCreate") == 1
    fake.calls.clear()
    _, source = cache.load_module(PTX, "k", device=0, arch="sm_90a")
    assert source == cache.FROM_CACHE and "cuLinkCreate" not in fake.names()
    (load,) = [c for c in fake.calls if c[0] == "cuModuleLoadDataEx"]
    assert load[1] == fake.cubin


def test_an_entry_the_driver_refuses_is_rebuilt(cache_dir: Path, fake: FakeDriver) -> None:
    path = _entry()
    cache.write_entry(path, b"\x7fELF bad cubin")  # checks out, but the fake driver refuses it
    _, source = cache.load_module(PTX, "k", device=0, arch="sm_90a")
    assert source == cache.FROM_JIT
    assert cache.read_entry(path) == fake.cubin


def test_disabled_cache_loads_ptx_and_writes_nothing(cache_dir: Path, fake: FakeDriver) -> None:
    with knobs.overrides(disable_cache=True):
        _, source = cache.load_module(PTX, "k", device=0, arch="sm_90a")
    assert source == cache.FROM_PTX
    (load,) = [c for c in fake.calls if c[0] == "cuModuleLoadDataEx"]
    assert load[1].startswith(b".version")
    assert not any(cache_dir.iterdir())


def test_a_dump_also_bypasses_the_cache(cache_dir: Path, fake: FakeDriver) -> None:
    with knobs.overrides(dump=frozenset({"ptx"})):
        _, source = cache.load_module(PTX, "k", device=0, arch="sm_90a")
    assert source == cache.FROM_PTX


def test_unwritable_cache_warns_and_still_loads(tmp_path: Path, fake: FakeDriver) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache directory should be")
    with knobs.overrides(cache_dir=blocker), pytest.warns(RuntimeWarning, match="cannot write"):
        _, source = cache.load_module(PTX, "k", device=0, arch="sm_90a")
    assert source == cache.FROM_JIT


def test_a_new_function_with_the_same_kernel_loads_from_disk(
    cache_dir: Path, fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyfuse.frontend import compile as compile_module
    from pyfuse.frontend.arrays import DeviceArray

    monkeypatch.setattr(compile_module, "emit_ptx", lambda kernel, target: f"// {kernel.name}\n")
    fake.cuMemAlloc = lambda nbytes: (0, 0x10000)  # type: ignore[attr-defined]
    fake.cuMemFree = lambda pointer: (0,)  # type: ignore[attr-defined]

    def run_fresh() -> tuple[list[str], set[str]]:
        f = pf.fuse(name="same")(lambda x: x + 1)
        x = DeviceArray((4,), pf.float32)
        f(x)
        (compiled,) = f.__dict__["_pyfuse_runtime"].compiled.values()
        assert compiled.timings["load"] > 0
        return list(compiled.runtime.loaded[0].sources), set(compiled.timings)

    # The quick build is another test's subject: here the first load is the optimized JIT,
    # not whichever of the two a loaded machine happens to finish first.
    monkeypatch.setitem(knobs._overrides, "quick_jit", False)
    sources, timings = run_fresh()
    assert sources == [cache.FROM_JIT] and "emit" in timings
    # The second function traces the same fusion: the variant cache gives its kernels (no
    # passes, no emission) and the cubin cache their modules (no JIT).
    sources, timings = run_fresh()
    assert sources == [cache.FROM_CACHE] and timings == {"trace", "variant_cache", "load"}


# ---- JIT ahead ----------------------------------------------------------------------------


def _gpu_function(
    fake: FakeDriver,
    monkeypatch: pytest.MonkeyPatch,
    body: str = "",
    fn: Any = lambda x: x * 2 + 1,
) -> tuple[Any, Any, list[str]]:
    """A new fusion ``fn`` on a fake GPU whose emitted PTX is ``// <kernel name><body>``, an
    input array, and the names of the threads that ran the driver's JIT (one per link). The
    compact form is the real emitter's: ``x * 2 + 1`` has none (too light), gelu has one."""
    from pyfuse.frontend import compile as compile_module
    from pyfuse.frontend.arrays import DeviceArray

    monkeypatch.setattr(
        compile_module, "emit_ptx", lambda kernel, target: f"// {kernel.name}{body}\n"
    )
    fake.cuMemAlloc = lambda nbytes: (0, 0x10000)  # type: ignore[attr-defined]
    fake.cuMemFree = lambda pointer: (0,)  # type: ignore[attr-defined]
    jit_threads: list[str] = []
    add_data = fake.cuLinkAddData

    def recording_add_data(*args: Any) -> tuple[Any, ...]:
        jit_threads.append(threading.current_thread().name)
        return add_data(*args)

    fake.cuLinkAddData = recording_add_data  # type: ignore[method-assign]
    fused = pf.fuse(name=f"ahead{len(body)}")(fn)
    return fused, DeviceArray((4,), pf.float32), jit_threads


def _join_jit_threads() -> None:
    for thread in threading.enumerate():
        if thread.name.startswith("pyfuse-jit-"):
            thread.join()


def test_a_first_call_jits_its_kernel_once_on_a_background_thread(
    cache_dir: Path, fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    fused, x, jit_threads = _gpu_function(fake, monkeypatch)
    with knobs.overrides(quick_jit=False):
        fused(x)
    assert fake.link_levels() == [4]
    (compiled,) = fused.__dict__["_pyfuse_runtime"].compiled.values()
    (kernel,) = compiled.kernels
    assert compiled.runtime.loaded[0].sources == [cache.FROM_JIT]
    # One JIT, and not on the caller's thread; its cubin was stored and then loaded.
    assert jit_threads == [f"pyfuse-jit-{kernel.name}"]
    assert cache.read_entry(_entry(kernel.ptx)) == fake.cubin
    loads = [c[1] for c in fake.calls if c[0] == "cuModuleLoadDataEx"]
    assert loads == [fake.cubin]
    assert not cache._ahead  # taken by the load


def test_a_failed_background_jit_is_redone_and_raised_at_the_call(
    cache_dir: Path, fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    fused, x, jit_threads = _gpu_function(fake, monkeypatch, body=" bad")
    with pytest.raises(pf.LaunchError, match="linking PTX to a cubin failed"):
        fused(x)
    assert jit_threads[0].startswith("pyfuse-jit-")
    assert jit_threads[1:] == [threading.current_thread().name]
    assert not any(cache_dir.rglob("*.cubin"))


def test_compile_for_gpu_arrays_fills_the_cache_without_a_launch(
    cache_dir: Path, fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    fused, x, jit_threads = _gpu_function(fake, monkeypatch)
    compiled = fused.compile(x)
    _join_jit_threads()
    (kernel,) = compiled.kernels
    assert cache.read_entry(_entry(kernel.ptx)) == fake.cubin
    ((_, job),) = cache._ahead.items()
    # On disk: a job never taken holds no cubin, not even its quick build.
    assert job.ok and job.cubin is None and job.quick_cubin is None
    fused(x)  # the launch takes the cubin the background JIT made: no further JIT
    assert fake.link_levels() == [0, 4] and not cache._ahead
    assert jit_threads == [f"pyfuse-jit-{kernel.name}"] * 2
    assert compiled.runtime.loaded[0].sources == [cache.FROM_JIT]


def test_compile_for_specs_starts_no_jit(
    cache_dir: Path, fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    fused, _, jit_threads = _gpu_function(fake, monkeypatch)
    fused.compile(pf.spec((4,), pf.float32))
    _join_jit_threads()
    assert jit_threads == [] and not cache._ahead


def test_a_background_jit_is_used_with_the_cache_disabled(
    cache_dir: Path, fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = cache._CubinAhead(quick=False)
    job.ok, job.cubin = True, fake.cubin
    job.finished.set()
    path = _entry()
    monkeypatch.setitem(cache._ahead, (path, 0), job)
    with knobs.overrides(disable_cache=True):
        _, source = cache.load_module(PTX, "k", device=0, arch="sm_90a")
    assert source == cache.FROM_JIT and not cache._ahead
    (load,) = [c for c in fake.calls if c[0] == "cuModuleLoadDataEx"]
    assert load[1] == fake.cubin and not any(cache_dir.iterdir())


def test_a_thread_that_cannot_start_leaves_the_call_working(
    cache_dir: Path, fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    fused, x, jit_threads = _gpu_function(fake, monkeypatch)

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    fused(x)  # the JIT runs on the caller's thread instead
    fused(x)
    assert jit_threads == [threading.current_thread().name] and not cache._ahead


def _slow_link_create(fake: FakeDriver, seconds: float) -> None:
    """Make cuLinkCreate give the GIL up for ``seconds``, as a driver call does."""
    create = fake.cuLinkCreate

    def slow(*args: Any) -> tuple[Any, ...]:
        time.sleep(seconds)
        return create(*args)

    fake.cuLinkCreate = slow  # type: ignore[method-assign]


def test_jit_ahead_returns_once_the_compile_is_under_way(
    cache_dir: Path, fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache, "_COMPILE_START_WAIT_S", 1.0)  # generous: a busy CI machine
    _slow_link_create(fake, 0.01)
    compiling, release = threading.Event(), threading.Event()
    add_data = fake.cuLinkAddData

    def held_quick_compile(state: Any, *args: Any) -> tuple[Any, ...]:
        if state.value == 0:
            compiling.set()
            release.wait()
        return add_data(state, *args)

    fake.cuLinkAddData = held_quick_compile  # type: ignore[method-assign]
    start = time.perf_counter()
    try:
        cache.jit_ahead(PTX, "k", device=0, arch="sm_90a", quick=True)
        # The thread's calls before the compile gave the GIL up; the caller waited for them,
        # and for no more: the quick build's compile is still held.
        assert compiling.is_set() and time.perf_counter() - start < 0.5
    finally:
        release.set()


def test_jit_ahead_does_not_wait_for_a_thread_that_failed_before_its_compile(
    cache_dir: Path, fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache, "_COMPILE_START_WAIT_S", 1.0)
    fake.cuLinkCreate = lambda *args: (fake.CUresult.CUDA_ERROR_INVALID_CONTEXT, None)  # type: ignore[method-assign]
    start = time.perf_counter()
    cache.jit_ahead(PTX, "k", device=0, arch="sm_90a", quick=True)
    assert time.perf_counter() - start < 0.5


def test_jit_ahead_waits_for_the_compile_to_start_a_bounded_time(
    cache_dir: Path, fake: FakeDriver
) -> None:
    _slow_link_create(fake, 0.5)
    start = time.perf_counter()
    cache.jit_ahead(PTX, "k", device=0, arch="sm_90a", quick=True)
    assert time.perf_counter() - start < 0.4
    assert "cuLinkAddData" not in fake.names()


def test_jit_ahead_never_raises(
    cache_dir: Path, fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreadable(key: str) -> Path:
        raise PermissionError("cache folder not readable")

    monkeypatch.setattr(cache, "entry_path", unreadable)
    cache.jit_ahead(PTX, "k", device=0, arch="sm_90a")
    assert not cache._ahead


def test_a_forked_child_forgets_the_jobs_of_its_parent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(cache._ahead, (Path("x"), 0), cache._CubinAhead(quick=True))
    cache._forget_ahead()  # registered with os.register_at_fork(after_in_child=...)
    assert not cache._ahead


# ---- quick first JIT ------------------------------------------------------------------------


def _function_loaded_by(fake: FakeDriver, image: bytes) -> Any:
    """The handle of the function from the only module loaded from ``image`` (the fake
    numbers modules by load and gives each function its module's number)."""
    loads = [c for c in fake.calls if c[0] == "cuModuleLoadDataEx"]
    (number,) = [c[-1] for c in loads if c[1] == image]
    return type(fake.launches[0]["function"])("function", number)


def _call_in_thread(fused: Any, x: Any, name: str = "second-call") -> threading.Thread:
    """``fused(x)`` on a thread of its own, started: a call that waits can be watched."""
    thread = threading.Thread(target=fused, args=(x,), name=name)
    thread.start()
    return thread


def test_the_first_launch_runs_the_quick_build_and_the_next_waits_for_the_optimized_one(
    cache_dir: Path, fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.optimized_gate = threading.Event()
    fused, x, jit_threads = _gpu_function(fake, monkeypatch)
    fused(x)
    (compiled,) = fused.__dict__["_pyfuse_runtime"].compiled.values()
    (kernel,) = compiled.kernels
    loaded = compiled.runtime.loaded[0]
    assert loaded.sources == [cache.FROM_QUICK_JIT] and loaded._quick_spent
    quick_function = _function_loaded_by(fake, fake.quick_cubin)
    assert [launch["function"] for launch in fake.launches] == [quick_function]
    assert cache.read_entry(_entry(kernel.ptx)) is None  # the optimized build is held

    # The second call waits for the optimized build: while its link is held, nothing launches.
    second = _call_in_thread(fused, x)
    second.join(0.2)
    assert second.is_alive() and len(fake.launches) == 1
    fake.optimized_gate.set()
    second.join(5)
    assert not second.is_alive()
    optimized_function = _function_loaded_by(fake, fake.cubin)
    assert [launch["function"] for launch in fake.launches] == [
        quick_function,
        optimized_function,
    ]
    assert loaded.sources == [cache.FROM_JIT] and not loaded._pending
    assert cache.read_entry(_entry(kernel.ptx)) == fake.cubin
    fused(x)  # warm: the optimized module, nothing loaded again
    assert fake.launches[-1]["function"] == optimized_function
    assert fake.names().count("cuModuleLoadDataEx") == 2
    # Both builds on the JIT thread, the quick one first, with that thread's capture mode
    # relaxed; the swap loaded the module with the waiting call's mode relaxed (a CUDA graph
    # capture may be under way), then restored.
    assert jit_threads == [f"pyfuse-jit-{kernel.name}"] * 2 and fake.link_levels() == [0, 4]
    relaxed = fake.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    restored = fake.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL
    exchanges = [c[1:] for c in fake.calls if c[0] == "cuThreadExchangeStreamCaptureMode"]
    for thread in (jit_threads[0], "second-call"):
        assert [mode for mode, name in exchanges if name == thread] == [relaxed, restored]
    swap = [i for i, c in enumerate(fake.calls) if c[0] == "cuModuleLoadDataEx"][1]
    relax = fake.calls.index(("cuThreadExchangeStreamCaptureMode", relaxed, "second-call"))
    assert relax < swap


def test_a_launch_inside_a_graph_capture_waits_for_the_optimized_build(
    cache_dir: Path, fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.optimized_gate = threading.Event()
    fused, x, _ = _gpu_function(fake, monkeypatch)
    fused(x)  # the quick build
    # The fake refuses what the driver refuses during a global capture, and the capture is
    # lost: a module load from a thread whose mode is not relaxed, say.
    fake.capturing = True
    with pytest.raises(pf.LaunchError, match="CAPTURE_UNSUPPORTED"):
        driver.load_module(fake.cubin, "k")
    fake.capture_invalidated = False
    fake.calls.clear()
    # A capture begins while the optimized link is held; the launch it records waits for the
    # build (finished on the JIT thread during the capture), swaps it in and launches it.
    threading.Timer(0.1, fake.optimized_gate.set).start()
    fused(x)
    fake.capturing = False
    assert not fake.capture_invalidated
    (compiled,) = fused.__dict__["_pyfuse_runtime"].compiled.values()
    assert compiled.runtime.loaded[0].sources == [cache.FROM_JIT]
    assert fake.launches[-1]["function"] == _function_loaded_by(fake, fake.cubin)


def test_quick_builds_can_be_turned_off(
    cache_dir: Path, fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    fused, x, _ = _gpu_function(fake, monkeypatch)
    monkeypatch.setenv("PYFUSE_QUICK_JIT", "0")
    fused(x)
    (compiled,) = fused.__dict__["_pyfuse_runtime"].compiled.values()
    assert fake.link_levels() == [4]
    assert compiled.runtime.loaded[0].sources == [cache.FROM_JIT]


def test_turning_quick_builds_off_after_the_compile_waits_for_the_optimized_one(
    cache_dir: Path, fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.optimized_gate = threading.Event()
    fused, x, _ = _gpu_function(fake, monkeypatch)
    compiled = fused.compile(x)  # the JIT ahead builds quickly first
    (job,) = cache._ahead.values()
    job.quick_done.wait()
    threading.Timer(0.3, fake.optimized_gate.set).start()
    with knobs.overrides(quick_jit=False):
        compiled(x)
    assert compiled.runtime.loaded[0].sources == [cache.FROM_JIT]


def test_a_launch_without_a_jit_ahead_starts_one_with_a_quick_build(
    cache_dir: Path, fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.optimized_gate = threading.Event()
    fused, x, jit_threads = _gpu_function(fake, monkeypatch)
    compiled = fused.compile(pf.spec((4,), pf.float32))  # specs: no JIT started
    assert jit_threads == []
    compiled(x)
    assert compiled.runtime.loaded[0].sources == [cache.FROM_QUICK_JIT]
    fake.optimized_gate.set()
    cache.wait_for_jits()
    compiled(x)
    assert compiled.runtime.loaded[0].sources == [cache.FROM_JIT]
    assert fake.link_levels() == [0, 4]


def _first_call_whose_optimized_build_fails(
    fake: FakeDriver, monkeypatch: pytest.MonkeyPatch, release: bool = True
) -> tuple[Any, Any]:
    """A new fusion called once (its quick build), whose optimized build then failed (or,
    without ``release``, fails once ``fake.optimized_gate`` is set)."""
    fake.optimized_gate = threading.Event()
    fused, x, _ = _gpu_function(fake, monkeypatch)
    complete = fake.cuLinkComplete

    def optimized_fails(state: Any) -> tuple[Any, ...]:
        if state.value == 0:
            return complete(state)
        assert fake.optimized_gate is not None
        fake.optimized_gate.wait()  # fails after the first launch took the quick build
        return (fake.CUresult.CUDA_ERROR_INVALID_PTX,)

    fake.cuLinkComplete = optimized_fails  # type: ignore[method-assign]
    fused(x)
    if release:
        fake.optimized_gate.set()
        cache.wait_for_jits()
    return fused, x


def test_an_optimized_build_that_fails_keeps_the_quick_one_with_a_warning(
    cache_dir: Path, fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    fused, x = _first_call_whose_optimized_build_fails(fake, monkeypatch)
    with pytest.warns(
        RuntimeWarning, match="keeps running its quick .-O0. build.*linking PTX"
    ) as seen:
        fused(x)  # the background JIT's reason, without compiling again; the call still runs
    assert [Path(w.filename).name for w in seen] == [Path(__file__).name]  # the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fused(x)  # warned once: nothing pending any more
    (compiled,) = fused.__dict__["_pyfuse_runtime"].compiled.values()
    loaded = compiled.runtime.loaded[0]
    assert loaded.sources == [cache.FROM_QUICK_JIT] and not loaded._pending
    quick_function = _function_loaded_by(fake, fake.quick_cubin)
    assert [launch["function"] for launch in fake.launches] == [quick_function] * 3
    assert fake.link_levels() == [0, 4]
    assert not any(cache_dir.rglob("*.cubin"))


def test_a_launch_waiting_for_an_optimized_build_that_fails_keeps_the_quick_one(
    cache_dir: Path, fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    fused, x = _first_call_whose_optimized_build_fails(fake, monkeypatch, release=False)
    assert fake.optimized_gate is not None
    threading.Timer(0.1, fake.optimized_gate.set).start()  # fails while the call waits
    with pytest.warns(RuntimeWarning, match="keeps running its quick .-O0. build") as seen:
        fused(x)
    assert len(seen) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fused(x)
        fused(x)
    quick_function = _function_loaded_by(fake, fake.quick_cubin)
    assert [launch["function"] for launch in fake.launches] == [quick_function] * 4
    assert fake.link_levels() == [0, 4]  # the failed build is not tried again


def test_warnings_as_errors_still_launch_and_warn_once(
    cache_dir: Path, fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    fused, x = _first_call_whose_optimized_build_fails(fake, monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeWarning, match="keeps running its quick"):
            fused(x)
        fused(x)
    assert len(fake.launches) == 3  # the call that raised the warning launched its kernel


def test_load_module_never_returns_a_quick_build(cache_dir: Path, fake: FakeDriver) -> None:
    fake.optimized_gate = threading.Event()
    cache.jit_ahead(PTX, "k", device=0, arch="sm_90a", quick=True)
    (job,) = cache._ahead.values()
    job.quick_done.wait()  # the quick build is there to take, the optimized one held
    threading.Timer(0.3, fake.optimized_gate.set).start()
    _, source = cache.load_module(PTX, "k", device=0, arch="sm_90a")
    assert source == cache.FROM_JIT
    (load,) = [c for c in fake.calls if c[0] == "cuModuleLoadDataEx"]
    assert load[1] == fake.cubin


class _JitRecorder:
    """JitHooks that record what a compile hands over: (name, quick) per PTX, and the names
    of the compact forms, each handed back with its PTX."""

    def __init__(self) -> None:
        self.full_calls: list[tuple[str, bool]] = []
        self.compacts: list[str] = []
        self.paired: list[str | None] = []

    def compact(self, name: str, ptx: str) -> Any:
        assert "compact form" in ptx
        self.compacts.append(name)
        return name

    def full(self, name: str, ptx: str, quick: bool, compact: Any) -> None:
        self.full_calls.append((name, quick))
        self.paired.append(compact)


def test_matmul_kernels_are_not_built_quickly() -> None:
    from pyfuse.frontend.compile import compile_fusion

    def kernels_asking_for_quick(fn: Any, *specs: Any) -> list[bool]:
        recorder = _JitRecorder()
        compile_fusion(pf.fuse(fn).trace(*specs), HOPPER, jit=recorder)
        return [quick for _, quick in recorder.full_calls]

    vector = pf.spec((256, 256), pf.bfloat16)
    assert kernels_asking_for_quick(lambda x: pf.gelu(x) * 2, vector) == [True]
    assert kernels_asking_for_quick(lambda x: pf.softmax(x, -1), vector) == [True]
    assert kernels_asking_for_quick(lambda a, b: pf.matmul(a, b), vector, vector) == [False]


def test_no_compact_form_is_emitted_with_quick_builds_off_or_when_it_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pyfuse.frontend import compile as compile_module

    vector = pf.spec((256, 256), pf.bfloat16)
    fusion = pf.fuse(lambda x, y: pf.gelu(x * y), name="off").trace(vector, vector)
    recorder = _JitRecorder()
    with knobs.overrides(quick_jit=False):
        compiled = compile_module.compile_fusion(fusion, HOPPER, jit=recorder)
    assert recorder.compacts == [] and "emit_compact" not in compiled.timings

    def refuse(kernel: Any, target: Any) -> str:
        raise pf.ScheduleError("an IR shape only unrolling handles")

    # The compact form only speeds first launches up: its failure leaves the compile whole.
    monkeypatch.setattr(compile_module, "emit_compact_ptx", refuse)
    recorder = _JitRecorder()
    compiled = compile_module.compile_fusion(fusion, HOPPER, jit=recorder)
    assert recorder.compacts == [] and recorder.full_calls == [("off_k0", True)]
    assert recorder.paired == [None] and compiled.ptx


def test_compile_hands_the_compact_form_first_and_pairs_it_with_the_ptx() -> None:
    from pyfuse.frontend.compile import compile_fusion

    recorder = _JitRecorder()
    vector = pf.spec((256, 256), pf.bfloat16)
    fusion = pf.fuse(lambda x, y: pf.gelu(x * y), name="pairs").trace(vector, vector)
    compiled = compile_fusion(fusion, HOPPER, jit=recorder)
    assert recorder.compacts == ["pairs_k0"]
    assert recorder.full_calls == [("pairs_k0", True)]
    assert recorder.paired == ["pairs_k0"]  # the compact start goes with its own kernel's PTX
    assert "emit_compact" in compiled.timings
    matmul = pf.fuse(lambda a, b: pf.matmul(a, b)).trace(vector, vector)
    recorder = _JitRecorder()
    compile_fusion(matmul, HOPPER, jit=recorder)
    assert recorder.compacts == [] and recorder.paired == [None]


def test_a_process_exiting_during_the_optimized_build_still_stores_it(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys, threading
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1] / "backend_ptx")!r})
        from ptx_fake_driver import FakeDriver
        from pyfuse.backend_ptx import driver
        from pyfuse.frontend import cache

        fake = FakeDriver(optimized_gate=threading.Event())
        using = driver.use_driver(fake)  # kept: the context ends when collected
        using.__enter__()
        module, source, optimized = cache.load_for_launch(
            {PTX!r}, "k", device=0, arch="sm_90a", quick=True
        )
        assert source == cache.FROM_QUICK_JIT and not optimized.ready()
        threading.Timer(0.3, fake.optimized_gate.set).start()
        print("returning", flush=True)
        """
    )
    env = {**os.environ, "PYFUSE_CACHE_DIR": str(tmp_path), "PYFUSE_QUICK_JIT": "1"}
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "returning\n"
    with knobs.overrides(cache_dir=tmp_path):
        assert cache.read_entry(_entry()) == FakeDriver().cubin


# ---- the compact form's quick build ---------------------------------------------------------


def _linked(fake: FakeDriver) -> list[tuple[int, bytes]]:
    """(optimization level, PTX) of every link so far, in order."""
    levels = fake.link_levels()
    sources = [c[2] for c in fake.calls if c[0] == "cuLinkAddData"]
    return list(zip(levels, sources, strict=True))


def test_a_first_call_builds_the_compact_form_quickly_and_the_ptx_optimized(
    cache_dir: Path, fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.optimized_gate = threading.Event()
    fused, x, jit_threads = _gpu_function(fake, monkeypatch, fn=lambda x: pf.gelu(x) * 2)
    fused(x)
    (compiled,) = fused.__dict__["_pyfuse_runtime"].compiled.values()
    (kernel,) = compiled.kernels
    quick_function = _function_loaded_by(fake, fake.quick_cubin)
    assert [launch["function"] for launch in fake.launches] == [quick_function]
    fake.optimized_gate.set()
    cache.wait_for_jits()
    # One job on one thread: the compact form at -O0 (the real emitter's, gelu over a vector
    # of four), then the kernel's PTX (this test's stand-in text) at -O4, stored.
    (quick, optimized) = _linked(fake)
    assert quick[0] == 0 and b"compact form" in quick[1] and b"ld.local" in quick[1]
    assert optimized == (4, kernel.ptx.encode() + b"\0")  # the driver gets C strings
    assert jit_threads == [f"pyfuse-jit-{kernel.name}"] * 2
    assert cache.read_entry(_entry(kernel.ptx)) == fake.cubin
    assert compiled.runtime.loaded[0].sources == [cache.FROM_QUICK_JIT]
    fused(x)  # swaps the optimized module in
    assert compiled.runtime.loaded[0].sources == [cache.FROM_JIT] and not cache._ahead


def test_a_compact_job_ends_after_its_quick_build_when_the_ptx_is_cached(
    cache_dir: Path, fake: FakeDriver
) -> None:
    cache.write_entry(_entry(), fake.cubin)
    job = cache.jit_compact("// compact\n", "k", device=0)
    assert job is not None
    cache.jit_ahead(PTX, "k", device=0, arch="sm_90a", quick=True, compact=job)
    assert job.finished.wait(5)
    assert fake.link_levels() == [0] and not job.ok and not cache._ahead
    _, source = cache.load_module(PTX, "k", device=0, arch="sm_90a")
    assert source == cache.FROM_CACHE


def test_a_compact_job_ends_when_another_job_builds_the_same_ptx(
    cache_dir: Path, fake: FakeDriver
) -> None:
    cache.jit_ahead(PTX, "k", device=0, arch="sm_90a", quick=False)
    job = cache.jit_compact("// compact\n", "k", device=0)
    assert job is not None
    cache.jit_ahead(PTX, "k", device=0, arch="sm_90a", quick=True, compact=job)
    cache.wait_for_jits()
    assert job.finished.is_set() and not job.ok
    assert sorted(fake.link_levels()) == [0, 4]  # its quick build, the other's optimized one


def test_a_failed_emission_abandons_the_compact_job(
    cache_dir: Path, fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyfuse.frontend import compile as compile_module

    fused, x, _ = _gpu_function(fake, monkeypatch, fn=lambda x: pf.gelu(x) * 2)

    def refuse(kernel: Any, target: Any) -> str:
        raise pf.ScheduleError("no rule for this kernel")

    monkeypatch.setattr(compile_module, "emit_ptx", refuse)
    with pytest.raises(pf.ScheduleError, match="no rule"):
        fused(x)
    start = time.perf_counter()
    cache.wait_for_jits()  # each job ends after its quick build, not after _PTX_WAIT_S
    assert time.perf_counter() - start < 5
    # Each fallback plan (passes/fallback.py) started a quick build and abandoned it.
    assert set(fake.link_levels()) == {0} and not cache._ahead


def test_a_compact_job_stops_waiting_for_its_ptx(
    cache_dir: Path, fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache, "_PTX_WAIT_S", 0.05)
    job = cache.jit_compact("// compact\n", "k", device=0)
    assert job is not None and job.finished.wait(5)
    assert "did not follow" in job.error
    # The PTX, when it comes after all, gets a job of its own.
    cache.jit_ahead(PTX, "k", device=0, arch="sm_90a", quick=True, compact=job)
    _, source = cache.load_module(PTX, "k", device=0, arch="sm_90a")
    assert source == cache.FROM_JIT and fake.link_levels() == [0, 0, 4]


def test_a_failed_compact_build_leaves_the_first_launch_to_the_optimized_one(
    cache_dir: Path, fake: FakeDriver
) -> None:
    job = cache.jit_compact("// compact, bad\n", "k", device=0)
    assert job is not None
    cache.jit_ahead(PTX, "k", device=0, arch="sm_90a", quick=True, compact=job)
    _, source, optimized = cache.load_for_launch(PTX, "k", device=0, arch="sm_90a", quick=True)
    assert source == cache.FROM_JIT and optimized is None and job.ok
    assert fake.link_levels() == [0, 4]


def test_no_compact_job_when_quick_builds_are_off(cache_dir: Path, fake: FakeDriver) -> None:
    with knobs.overrides(quick_jit=False):
        assert cache.jit_compact("// compact\n", "k", device=0) is None
    assert fake.link_levels() == []
