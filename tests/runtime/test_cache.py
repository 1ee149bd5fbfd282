"""The on-disk cubin cache: keys, atomic publication, corrupt entries, and loads (fake driver)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backend_ptx"))
from ptx_fake_driver import FakeDriver

import pyfuse as pf
from pyfuse import knobs, version
from pyfuse.backend_ptx import driver
from pyfuse.ir.target import HOPPER
from pyfuse.runtime import cache

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
        # A test that failed with a held link must not leave its thread blocked.
        if fake_driver.link_gate is not None:
            fake_driver.link_gate.set()
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
    monkeypatch.setattr(version, "__version__", "9.9.9")
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
        from pyfuse.runtime import cache
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
    from pyfuse.runtime import compile as compile_module
    from pyfuse.runtime.arrays import DeviceArray

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
    input array, and the names of the threads that ran the driver's JIT (one per link)."""
    from pyfuse.runtime import compile as compile_module
    from pyfuse.runtime.arrays import DeviceArray

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
    fused(x)
    assert fake.links() == 1
    (compiled,) = fused.__dict__["_pyfuse_runtime"].compiled.values()
    (kernel,) = compiled.kernels
    assert compiled.runtime.loaded[0].sources == [cache.FROM_JIT]
    # One JIT, and not on the caller's thread; its cubin was stored and then loaded.
    assert jit_threads == [f"pyfuse-jit-{kernel.name}"]
    assert cache.read_entry(_entry(kernel.ptx)) == fake.cubin
    loads = [c[1] for c in fake.calls if c[0] == "cuModuleLoadDataEx"]
    assert loads == [fake.cubin]
    assert not cache._ahead  # taken by the load
    # The JIT thread relaxed its capture mode for the build (another thread may be capturing
    # a CUDA graph in the global mode), then restored it.
    relaxed = fake.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    restored = fake.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL
    exchanges = [c[1:] for c in fake.calls if c[0] == "cuThreadExchangeStreamCaptureMode"]
    assert [mode for mode, name in exchanges if name == jit_threads[0]] == [relaxed, restored]


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
    assert job.ok and job.cubin is None  # on disk: a job never taken holds no cubin
    fused(x)  # the launch takes the cubin the background JIT made: no further JIT
    assert fake.links() == 1 and not cache._ahead
    assert jit_threads == [f"pyfuse-jit-{kernel.name}"]
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
    job = cache._CubinAhead()
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

    def held_compile(state: Any, *args: Any) -> tuple[Any, ...]:
        compiling.set()
        release.wait()
        return add_data(state, *args)

    fake.cuLinkAddData = held_compile  # type: ignore[method-assign]
    start = time.perf_counter()
    try:
        cache.jit_ahead(PTX, "k", device=0, arch="sm_90a")
        # The thread's calls before the compile gave the GIL up; the caller waited for them,
        # and for no more: the compile is still held.
        assert compiling.is_set() and time.perf_counter() - start < 0.5
    finally:
        release.set()


def test_jit_ahead_does_not_wait_for_a_thread_that_failed_before_its_compile(
    cache_dir: Path, fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache, "_COMPILE_START_WAIT_S", 1.0)
    fake.cuLinkCreate = lambda *args: (fake.CUresult.CUDA_ERROR_INVALID_CONTEXT, None)  # type: ignore[method-assign]
    start = time.perf_counter()
    cache.jit_ahead(PTX, "k", device=0, arch="sm_90a")
    assert time.perf_counter() - start < 0.5


def test_jit_ahead_waits_for_the_compile_to_start_a_bounded_time(
    cache_dir: Path, fake: FakeDriver
) -> None:
    _slow_link_create(fake, 0.5)
    start = time.perf_counter()
    cache.jit_ahead(PTX, "k", device=0, arch="sm_90a")
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
    monkeypatch.setitem(cache._ahead, (Path("x"), 0), cache._CubinAhead())
    cache._forget_ahead()  # registered with os.register_at_fork(after_in_child=...)
    assert not cache._ahead


# ---- a first launch waits for its JIT -----------------------------------------------------


def test_the_first_launch_waits_for_the_background_jit(
    cache_dir: Path, fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.link_gate = threading.Event()
    fused, x, jit_threads = _gpu_function(fake, monkeypatch)
    call = threading.Thread(target=fused, args=(x,), name="first-call")
    call.start()
    call.join(0.2)
    # While the link is held nothing is loaded or launched: no other build to run meanwhile.
    assert call.is_alive() and not fake.launches
    assert "cuModuleLoadDataEx" not in fake.names()
    fake.link_gate.set()
    call.join(5)
    assert not call.is_alive()
    (compiled,) = fused.__dict__["_pyfuse_runtime"].compiled.values()
    (kernel,) = compiled.kernels
    assert compiled.runtime.loaded[0].sources == [cache.FROM_JIT]
    assert jit_threads == [f"pyfuse-jit-{kernel.name}"] and fake.links() == 1
    assert [c[1] for c in fake.calls if c[0] == "cuModuleLoadDataEx"] == [fake.cubin]
    assert len(fake.launches) == 1


def test_a_jit_finishing_during_a_global_graph_capture_leaves_it_valid(
    cache_dir: Path, fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.link_gate = threading.Event()
    fused, x, _ = _gpu_function(fake, monkeypatch)
    fused.compile(x)  # its JIT runs on, held
    # The fake refuses what the driver refuses during a global capture, and the capture is
    # lost: a module load from a thread whose mode is not relaxed, say.
    fake.capturing = True
    with pytest.raises(pf.LaunchError, match="CAPTURE_UNSUPPORTED"):
        driver.load_module(fake.cubin, "k")
    fake.capture_invalidated = False
    fake.link_gate.set()  # the JIT thread completes its link while the capture is under way
    cache.wait_for_jits()
    fake.capturing = False
    assert not fake.capture_invalidated
    ((_, job),) = cache._ahead.items()
    assert job.ok


def test_a_launch_without_a_jit_ahead_jits_on_the_callers_thread(
    cache_dir: Path, fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    fused, x, jit_threads = _gpu_function(fake, monkeypatch)
    compiled = fused.compile(pf.spec((4,), pf.float32))  # specs: no JIT started
    assert jit_threads == []
    compiled(x)
    assert compiled.runtime.loaded[0].sources == [cache.FROM_JIT]
    assert jit_threads == [threading.current_thread().name]


def test_compile_hands_every_kernels_ptx_to_the_jit_hook_as_it_is_emitted() -> None:
    from pyfuse.runtime.compile import compile_fusion

    handed: list[tuple[str, str]] = []
    two_kernels = pf.fuse(lambda x: (x - x.mean(1, keepdim=True)).sum(0), name="two")
    compiled = compile_fusion(
        two_kernels.trace(pf.spec((8, 40000), pf.float32)),
        HOPPER,
        jit=lambda name, ptx: handed.append((name, ptx)),
    )
    assert len(compiled.kernels) == 2
    assert handed == [(kernel.name, kernel.ptx) for kernel in compiled.kernels]
    vector = pf.spec((256, 256), pf.bfloat16)
    handed.clear()
    compiled = compile_fusion(
        pf.fuse(lambda a, b: pf.matmul(a, b)).trace(vector, vector),
        HOPPER,
        jit=lambda name, ptx: handed.append((name, ptx)),
    )
    assert handed == [(kernel.name, kernel.ptx) for kernel in compiled.kernels]


def test_a_process_exiting_during_a_background_jit_still_stores_it(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys, threading
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1] / "backend_ptx")!r})
        from ptx_fake_driver import FakeDriver
        from pyfuse.backend_ptx import driver
        from pyfuse.runtime import cache

        fake = FakeDriver(link_gate=threading.Event())
        using = driver.use_driver(fake)  # kept: the context ends when collected
        using.__enter__()
        cache.jit_ahead({PTX!r}, "k", device=0, arch="sm_90a")
        assert cache._ahead and not fake.link_gate.is_set()
        threading.Timer(0.3, fake.link_gate.set).start()
        print("returning", flush=True)
        """
    )
    env = {**os.environ, "PYFUSE_CACHE_DIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "returning\n"
    with knobs.overrides(cache_dir=tmp_path):
        assert cache.read_entry(_entry()) == FakeDriver().cubin
