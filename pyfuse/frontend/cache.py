"""The on-disk cubin cache: a process that finds a kernel here skips the driver's JIT.

The driver's JIT of a pointwise kernel took 22-78 ms on the H200's host (a trivial kernel
12-17 ms); a cubin loads in well under a millisecond. A
cubin entry is named by the sha256 of everything that decides the cubin: the PTX text, the target
arch, pyfuse's version and the driver's version. Its file holds a header (magic, payload
length, payload sha256) and the cubin, so a truncated or corrupt file is noticed, ignored and
rewritten. Entries are written to a temporary file in the cache directory and published
with ``os.replace`` (atomic within one file system): a concurrent reader sees no entry or a
whole one, never half of one. The variant cache (:mod:`pyfuse.frontend.variant_cache`) stores
its records with the same framing under its own magic.

``knobs.cache_enabled()`` False (``PYFUSE_DISABLE_CACHE=1``, or any ``PYFUSE_DUMP``) skips
the cache: the PTX is loaded and JIT-compiled by the driver directly.

JIT ahead: a first call that compiles a fusion hands each kernel's PTX to
:func:`jit_ahead` as soon as it is emitted. A background thread runs the driver's JIT, which
releases the GIL, while the caller goes on (emitting the next kernel, storing the variant
record, building the launch plan); :func:`load_module` then takes that cubin instead of
compiling again. A JIT that failed in the background is done again by the caller, so its
error is raised where the call was made.

Quick first JIT: most of a JIT's time is ptxas optimizing. For a pointwise or reduction
kernel the background thread first builds at ``-O0`` (on the H200's host: gelu 17-25 ms
against 26-39 ms at the default ``-O4``, softmax 49-72 against 76-106), and
:func:`load_for_launch` gives the kernel's first launch that quick build with an
:class:`OptimizedBuild`. The same thread then builds at ``-O4`` and stores that cubin; the
launcher's next launch waits for it and swaps it in (only one launch runs the quick build,
or a benchmark right after a first call would time it). Where the kernel has a compact
form (``emit_compact_ptx``: element loops rolled, a fraction of the text), the quick build
compiles that instead: :func:`jit_compact` starts it before the PTX is emitted, and
:func:`jit_ahead` then hands the same job the PTX to optimize. Both builds compute the same
bits: pyfuse's PTX states the rounding of every floating-point operation, so no level may
contract or reorder them, and the compact form runs the same instructions in the same
order. Matmul kernels are not built twice (their first launch waits for the optimized
build), nor is any kernel when ``PYFUSE_QUICK_JIT=0``. A process that exits while an
optimized build runs waits for it, so the disk cache still gets the cubin.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import tempfile
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import pyfuse
from pyfuse import knobs
from pyfuse.errors import LaunchError

if TYPE_CHECKING:
    from pyfuse.backend_ptx.driver import Module

MAGIC = b"PYFUSE-CUBIN-1\n"
_HEADER = struct.Struct("<Q32s")  # payload length, payload sha256

# Where a module came from: the disk cache, a JIT whose cubin was stored, a direct PTX load,
# or the quick JIT whose build serves a kernel's first launch.
FROM_CACHE = "cache"
FROM_JIT = "jit"
FROM_PTX = "ptx"
FROM_QUICK_JIT = "quick jit"

# ptxas's optimization level of the quick build: -O0 is the fastest to build (-O1 already
# costs most of -O4's time on the kernels measured).
QUICK_OPTIMIZATION_LEVEL = 0
_THREAD_PREFIX = "pyfuse-jit-"
# The longest jit_ahead waits for its thread's compile to start: the steps before it take
# well under a millisecond once uncontended, but a first context creation without torch
# takes about 100 ms, which the caller then spends on its own work beside it.
_COMPILE_START_WAIT_S = 0.02
# The longest a compact form's job waits for its kernel's PTX (emitted right after it, in
# milliseconds): a compile that died without abandoning the job must not keep its thread, which
# the interpreter waits for at exit.
_PTX_WAIT_S = 60.0


def entry_key(ptx: str, arch: str, driver_version: int) -> str:
    """The hex sha256 naming the cache entry of ``ptx`` for ``arch`` under this driver."""
    digest = hashlib.sha256()
    for part in (arch, pyfuse.__version__, str(driver_version)):
        digest.update(part.encode())
        digest.update(b"\0")
    digest.update(ptx.encode())
    return digest.hexdigest()


def entry_path(key: str) -> Path:
    return knobs.cache_dir() / "cubin" / f"{key}.cubin"


def encode_entry(payload: bytes, magic: bytes = MAGIC) -> bytes:
    return magic + _HEADER.pack(len(payload), hashlib.sha256(payload).digest()) + payload


def read_entry(path: Path, magic: bytes = MAGIC) -> bytes | None:
    """The payload stored at ``path``; None when absent, truncated, corrupt or foreign."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    start = len(magic) + _HEADER.size
    if len(data) < start or not data.startswith(magic):
        return None
    length, digest = _HEADER.unpack_from(data, len(magic))
    payload = data[start:]
    if len(payload) != length or hashlib.sha256(payload).digest() != digest:
        return None
    return payload


def write_entry(path: Path, payload: bytes, magic: bytes = MAGIC) -> None:
    """Publish ``payload`` at ``path`` atomically (temporary file, then ``os.replace``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.stem[:16]}.", suffix=".tmp"
    )
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(encode_entry(payload, magic))
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


class _CubinAhead:
    """A kernel's PTX being compiled by the driver on a background thread: when asked, a
    quick build first, then the optimized one (the one the disk cache stores).

    The quick build compiles ``quick_ptx``: the kernel's own PTX, or its compact form
    (:func:`jit_compact`), whose job learns the PTX to optimize only once that is emitted."""

    def __init__(self, quick: bool, ptx: str | None = None, quick_ptx: str | None = None) -> None:
        # What the quick build compiles (None: no quick build); the compact form or the PTX.
        self.quick_ptx = quick_ptx if quick_ptx is not None else (ptx if quick else None)
        self.compact = quick_ptx is not None
        # The PTX of the optimized build and its cache entry, and set once they are known (or
        # will never be).
        self.ptx = ptx
        self.path: Path | None = None
        self.ptx_known = threading.Event()
        if ptx is not None:
            self.ptx_known.set()
        # Set once the quick build is made or has failed, and at once when none is asked for.
        self.quick_done = threading.Event()
        if self.quick_ptx is None:
            self.quick_done.set()
        # Dropped when the optimized build is done: from then on nobody takes it.
        self.quick_cubin: bytes | None = None
        # Set when the thread's first build has entered the driver's compile (or ended).
        self.compiling = threading.Event()
        self.finished = threading.Event()
        self.ok = False  # set when finished: the optimized JIT succeeded
        self.error = ""  # why it did not, when it ran and failed
        # The cubin, kept in memory only while it is not in the disk cache: a job that is
        # never taken (a compile() never launched) then holds no more than this record.
        self.cubin: bytes | None = None

    def abandon(self) -> None:
        """No optimized build will be asked of this compact job (its kernel's PTX was not
        emitted, is cached, or is being built by another job): it ends after its quick build,
        whose cubin nobody takes."""
        self.ptx = None
        self.ptx_known.set()


# Keyed by (cache entry path, device): started and not yet taken by a load.
_ahead: dict[tuple[Path, int], _CubinAhead] = {}
_ahead_lock = threading.Lock()


def _forget_ahead() -> None:
    # A forked child has none of the parent's threads: their jobs would never finish.
    _ahead.clear()


os.register_at_fork(after_in_child=_forget_ahead)


def jit_ahead(
    ptx: str,
    name: str,
    *,
    device: int,
    arch: str,
    quick: bool = False,
    compact: _CubinAhead | None = None,
) -> None:
    """Start the driver's JIT of ``ptx`` for ``device`` on a background thread, unless the
    cache already holds its cubin or the same JIT is under way; ``quick`` asks for a quick
    build first (ignored when ``PYFUSE_QUICK_JIT=0``). ``compact``, the job
    :func:`jit_compact` started on this kernel's compact form, becomes this PTX's job: its
    quick build serves the first launch and it builds ``ptx`` optimized next (or is
    abandoned when that is not needed). Never raises: whatever goes wrong here, the load at
    the launch meets again and reports."""
    from pyfuse.backend_ptx import driver

    try:
        path = entry_path(entry_key(ptx, arch, driver.driver_version()))
        cached = knobs.cache_enabled() and os.path.exists(path)
        quick = quick and knobs.quick_jit()
    except Exception:
        path, cached = None, True
    if compact is not None and compact.finished.is_set():
        compact = None  # it gave up waiting for this PTX: a job of its own, then
    if cached or path is None:
        if compact is not None:
            compact.abandon()
        return
    key = (path, device)
    job = compact if compact is not None else _CubinAhead(quick, ptx=ptx)
    job.path = path
    with _ahead_lock:
        if key in _ahead:
            if compact is not None:
                compact.abandon()
            return
        _ahead[key] = job
    if compact is not None:
        compact.ptx = ptx
        compact.ptx_known.set()
        return
    _start(job, name, device, key)


def jit_compact(ptx: str, name: str, *, device: int) -> _CubinAhead | None:
    """Start the quick build of a kernel's compact form (``emit_compact_ptx``) before its
    PTX is emitted; hand the job to :func:`jit_ahead` with that PTX, or call its
    ``abandon`` if the PTX will not come. None when quick builds are off or no thread
    starts (the PTX's own JIT ahead then runs as without a compact form)."""
    try:
        if not knobs.quick_jit():
            return None
    except Exception:
        return None
    job = _CubinAhead(True, quick_ptx=ptx)
    return job if _start(job, name, device, None) else None


def _start(job: _CubinAhead, name: str, device: int, key: tuple[Path, int] | None) -> bool:
    """Run ``job`` on a thread of its own; False (the job ended, unregistered) if none starts."""
    # Not a daemon: the interpreter waits for a JIT in flight at exit rather than tearing the
    # driver down under it (and the optimized build still reaches the disk cache).
    thread = threading.Thread(
        target=_compile_ahead, args=(job, name, device), name=_THREAD_PREFIX + name
    )
    try:
        thread.start()
    except BaseException as error:  # RuntimeError: no threads left, or the interpreter stops
        # A job left in the table unstarted would make the next load wait for ever.
        if key is not None:
            with _ahead_lock:
                _ahead.pop(key, None)
        job.quick_done.set()
        job.finished.set()
        if not isinstance(error, RuntimeError):
            raise
        return False
    # Hand the thread the GIL until its compile is under way. Each driver call before it
    # (context, cuLinkCreate) gives the GIL up, and getting it back from a caller busy with
    # Python (storing the variant record, building the launch plan) waits out the
    # interpreter's switch interval, 5 ms a call: that delayed the compile, which the first
    # launch waits for, by about as long as the caller was busy.
    job.compiling.wait(_COMPILE_START_WAIT_S)
    return True


def _compile_ahead(job: _CubinAhead, name: str, device: int) -> None:
    from pyfuse.backend_ptx import driver

    compiling = job.compiling.set
    relaxed = contextlib.ExitStack()
    try:
        # A launch may wait for this build while its thread captures a CUDA graph in the
        # global mode, under which the driver refuses calls it deems unsafe from every thread
        # (and invalidates the capture): this thread's mode is relaxed, as a JIT enqueues
        # nothing on any stream.
        relaxed.enter_context(driver.capture_tolerant())
        if job.quick_ptx is not None:
            try:
                job.quick_cubin = driver.cubin_from_ptx(
                    job.quick_ptx,
                    name,
                    device=device,
                    optimization_level=QUICK_OPTIMIZATION_LEVEL,
                    on_compile=compiling,
                )
            except Exception:
                # A failed quick build of the PTX itself ends the job (-O4 would fail alike);
                # one of the compact form leaves the first launch to the optimized build.
                if not job.compact:
                    raise
            finally:
                job.quick_done.set()
        if not job.ptx_known.wait(_PTX_WAIT_S):
            raise LaunchError(f"kernel {name}: its PTX did not follow its compact form")
        path = job.path
        if job.ptx is None or path is None:
            return  # abandoned: only the quick build was wanted, and nobody takes it
        cubin = driver.cubin_from_ptx(job.ptx, name, device=device, on_compile=compiling)
        job.ok = True
        job.cubin = cubin
        if knobs.cache_enabled():
            # Stored here, so a compile() that is never launched still fills the cache;
            # the load stores it again (and warns) if this fails.
            with contextlib.suppress(OSError):
                write_entry(path, cubin)
                job.cubin = None  # on disk now
    except Exception as error:
        # A load that finds no cubin compiles again and raises the error at the caller; a
        # kernel already running its quick build is told why (OptimizedBuild.load).
        job.error = str(error) or type(error).__name__
    finally:
        with contextlib.suppress(Exception):  # nothing may keep the events below unset
            relaxed.close()
        job.quick_cubin = None
        job.compiling.set()
        job.quick_done.set()
        job.finished.set()


def wait_for_jits(timeout: float | None = None) -> None:
    """Wait for this process's background JITs, optimized builds included: a benchmark that
    calls this after a first call times the optimized kernels from its next call on."""
    for thread in threading.enumerate():
        if thread.name.startswith(_THREAD_PREFIX):
            thread.join(timeout)


def _optimized_cubin(job: _CubinAhead, path: Path) -> tuple[bytes | None, bool]:
    """The job's optimized cubin (waiting for it) and whether it is in the disk cache; (None,
    False) if the JIT failed or its stored entry has gone since."""
    job.finished.wait()
    if not job.ok:
        return None, False
    if job.cubin is not None:
        return job.cubin, False
    cubin = read_entry(path)
    return cubin, cubin is not None


def _take_ahead(
    path: Path, device: int, accept_quick: bool
) -> tuple[bytes | None, bool, _CubinAhead | None]:
    """What a background JIT made for this entry: its optimized cubin (waiting for it) and
    whether that is in the disk cache, or, if ``accept_quick``, its quick build and the job
    still making the optimized one; (None, False, None) if none was started or its optimized
    cubin is lost."""
    with _ahead_lock:
        job = _ahead.pop((path, device), None)
    if job is None:
        return None, False, None
    if accept_quick:
        job.quick_done.wait()
        quick = job.quick_cubin
        if quick is not None and not job.finished.is_set():
            return quick, False, job
    cubin, stored = _optimized_cubin(job, path)
    return cubin, stored, None


def _store(path: Path, cubin: bytes) -> None:
    try:
        write_entry(path, cubin)
    except OSError as error:
        warnings.warn(
            f"pyfuse: cannot write the kernel cache entry {path}: {error}; "
            "set PYFUSE_CACHE_DIR to a writable directory or PYFUSE_DISABLE_CACHE=1",
            RuntimeWarning,
            stacklevel=3,
        )


class OptimizedBuild:
    """The optimized module of a kernel whose first launch runs its quick build."""

    def __init__(self, job: _CubinAhead, ptx: str, name: str, device: int, path: Path) -> None:
        self._job = job
        self._ptx = ptx
        self.name = name
        self._device = device
        self._path = path

    def ready(self) -> bool:
        return self._job.finished.is_set()

    def wait(self) -> None:
        """Block until the optimized build is done or has failed."""
        self._job.finished.wait()

    def load(self) -> Module:
        """The optimized module (waiting for it); LaunchError with the driver's reason if
        its JIT failed. One whose stored cubin has gone since is compiled again here."""
        from pyfuse.backend_ptx import driver

        cubin, stored = _optimized_cubin(self._job, self._path)
        if cubin is None and not self._job.ok:
            raise LaunchError(self._job.error or f"kernel {self.name}: the optimized JIT failed")
        if cubin is None:
            cubin = driver.cubin_from_ptx(self._ptx, self.name, device=self._device)
        if knobs.cache_enabled() and not stored:
            _store(self._path, cubin)
        return driver.load_module(cubin, self.name, device=self._device)


def load_module(ptx: str, name: str, *, device: int, arch: str) -> tuple[Module, str]:
    """Load the module of ``ptx`` on ``device``: from the cache, else JIT it to a cubin (or
    take the one :func:`jit_ahead` made), store that and load it. Returns the module and where
    it came from (FROM_CACHE, FROM_JIT, FROM_PTX); never a quick build.
    """
    module, source, _ = load_for_launch(ptx, name, device=device, arch=arch, quick=False)
    return module, source


def load_for_launch(
    ptx: str, name: str, *, device: int, arch: str, quick: bool
) -> tuple[Module, str, OptimizedBuild | None]:
    """:func:`load_module` for a kernel's first launch. With ``quick`` (and the kernel in no
    cache yet) that is its quick build, FROM_QUICK_JIT, with the :class:`OptimizedBuild` to
    swap in once ready; otherwise the OptimizedBuild is None."""
    from pyfuse.backend_ptx import driver

    path = entry_path(entry_key(ptx, arch, driver.driver_version()))
    quick = quick and knobs.quick_jit()
    if quick:
        # A launch without a JIT ahead (a compile() of specs, a restored variant whose cubin
        # is gone) starts one here: a no-op when one runs or the cubin is cached.
        jit_ahead(ptx, name, device=device, arch=arch, quick=True)
    cubin, stored, job = _take_ahead(path, device, accept_quick=quick)
    if job is not None:
        assert cubin is not None
        try:
            module = driver.load_module(cubin, name, device=device)
            return module, FROM_QUICK_JIT, OptimizedBuild(job, ptx, name, device, path)
        except LaunchError:
            cubin, stored = _optimized_cubin(job, path)  # the optimized build, then
    if not knobs.cache_enabled():
        if cubin is not None:
            return driver.load_module(cubin, name, device=device), FROM_JIT, None
        return driver.load_module(ptx, name, device=device), FROM_PTX, None
    if cubin is None:
        cached = read_entry(path)
        if cached is not None:
            try:
                return driver.load_module(cached, name, device=device), FROM_CACHE, None
            except LaunchError:
                pass  # an entry the driver refuses (a bad write that kept its checksum): rebuild
        cubin = driver.cubin_from_ptx(ptx, name, device=device)
    if not stored:
        _store(path, cubin)
    return driver.load_module(cubin, name, device=device), FROM_JIT, None
