"""The on-disk cubin cache: a process that finds a kernel here skips the driver's JIT.

The driver's JIT of a kernel takes tens of milliseconds; a cubin loads in well under one
(docs/performance.md, "Measured design choices"). A cubin entry is named by the sha256 of
everything that decides the cubin: the PTX text, the target arch, pyfuse's version and the
driver's version. Its file holds a header (magic, payload length, payload sha256) and the
cubin, so a truncated or corrupt file is noticed, ignored and rewritten. Entries are written
to a temporary file in the cache directory and published with ``os.replace`` (atomic within
one file system): a concurrent reader sees no entry or a whole one, never half of one. The
variant cache (:mod:`pyfuse.runtime.variant_cache`) stores its records with the same framing
under its own magic.

``knobs.cache_enabled()`` False (``PYFUSE_DISABLE_CACHE=1``, or any ``PYFUSE_DUMP``) skips
the cache: nothing is read or written there; a kernel loads the cubin :func:`jit_ahead`
built for it, or else its PTX, which the driver JIT-compiles as it loads it.

JIT ahead: a first call that compiles a fusion hands each kernel's PTX to
:func:`jit_ahead` as soon as it is emitted. A background thread (one per kernel) runs the
driver's JIT, which releases the GIL, while the caller goes on (emitting the next kernel, whose
JIT then runs beside this one, storing the variant record, building the launch plan);
:func:`load_module` then waits for that cubin instead of compiling again. Every build is the
driver's optimized one (ptxas's default ``-O4``), so a kernel's first launch already runs the
code every later launch runs. A JIT that failed in the background is done again by the
caller, so its error is raised where the call was made. A process that exits while a JIT
runs waits for it, so the disk cache still gets the cubin.
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

from pyfuse import knobs, version
from pyfuse.errors import LaunchError

if TYPE_CHECKING:
    from pyfuse.backend_ptx.driver import Module

MAGIC = b"PYFUSE-CUBIN-1\n"
_HEADER = struct.Struct("<Q32s")  # payload length, payload sha256

# Where a module came from: the disk cache, a JIT whose cubin was stored, a direct PTX load.
FROM_CACHE = "cache"
FROM_JIT = "jit"
FROM_PTX = "ptx"

_THREAD_PREFIX = "pyfuse-jit-"
# The longest jit_ahead waits for its thread's compile to start: the steps before it take
# well under a millisecond once uncontended, but a first context creation without torch
# takes about 100 ms, which the caller then spends on its own work beside it.
_COMPILE_START_WAIT_S = 0.02


def entry_key(ptx: str, arch: str, driver_version: int) -> str:
    """The hex sha256 naming the cache entry of ``ptx`` for ``arch`` under this driver."""
    digest = hashlib.sha256()
    for part in (arch, version.__version__, str(driver_version)):
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
    """A kernel's PTX being compiled by the driver on a background thread."""

    def __init__(self) -> None:
        # Set when the thread has entered the driver's compile (or ended).
        self.compiling = threading.Event()
        self.finished = threading.Event()
        self.ok = False  # set when finished: the JIT succeeded
        # The cubin, kept in memory only while it is not in the disk cache: a job that is
        # never taken (a compile() never launched) then holds no more than this record.
        self.cubin: bytes | None = None


# Keyed by (cache entry path, device): started and not yet taken by a load.
_ahead: dict[tuple[Path, int], _CubinAhead] = {}
_ahead_lock = threading.Lock()


def _forget_ahead() -> None:
    # A forked child has none of the parent's threads: their jobs would never finish.
    _ahead.clear()


os.register_at_fork(after_in_child=_forget_ahead)


def jit_ahead(ptx: str, name: str, *, device: int, arch: str) -> None:
    """Start the driver's JIT of ``ptx`` for ``device`` on a background thread, unless the
    cache already holds its cubin or the same JIT is under way. Never raises: whatever goes
    wrong here, :func:`load_module` meets again at the launch and reports."""
    from pyfuse.backend_ptx import driver

    try:
        path = entry_path(entry_key(ptx, arch, driver.driver_version()))
        if knobs.cache_enabled() and os.path.exists(path):
            return
    except Exception:
        return
    key = (path, device)
    job = _CubinAhead()
    with _ahead_lock:
        if key in _ahead:
            return
        _ahead[key] = job
    # Not a daemon: the interpreter waits for a JIT in flight at exit rather than tearing the
    # driver down under it (and the cubin still reaches the disk cache).
    thread = threading.Thread(
        target=_compile_ahead, args=(job, ptx, name, device, path), name=_THREAD_PREFIX + name
    )
    try:
        thread.start()
    except BaseException as error:  # RuntimeError: no threads left, or the interpreter stops
        # A job left in the table unstarted would make the next load wait for ever.
        with _ahead_lock:
            _ahead.pop(key, None)
        job.finished.set()
        if not isinstance(error, RuntimeError):
            raise
        return
    # Hand the thread the GIL until its compile is under way. Each driver call before it
    # (context, cuLinkCreate) gives the GIL up, and getting it back from a caller busy with
    # Python (emitting the next kernel, building the launch plan) waits out the interpreter's
    # switch interval, 5 ms a call: that delayed the compile, which the first launch waits
    # for, by about as long as the caller was busy.
    job.compiling.wait(_COMPILE_START_WAIT_S)


def _compile_ahead(job: _CubinAhead, ptx: str, name: str, device: int, path: Path) -> None:
    from pyfuse.backend_ptx import driver

    relaxed = contextlib.ExitStack()
    try:
        # Another thread may be capturing a CUDA graph in the global mode, under which the
        # driver refuses calls it deems unsafe from every thread (and invalidates the
        # capture): this thread's mode is relaxed, as a JIT enqueues nothing on any stream.
        relaxed.enter_context(driver.capture_tolerant())
        cubin = driver.cubin_from_ptx(ptx, name, device=device, on_compile=job.compiling.set)
        job.ok = True
        job.cubin = cubin
        if knobs.cache_enabled():
            # Stored here, so a compile() that is never launched still fills the cache;
            # the load stores it again (and warns) if this fails.
            with contextlib.suppress(OSError):
                write_entry(path, cubin)
                job.cubin = None  # on disk now
    except Exception:
        pass  # the load compiles again and raises the error at the caller
    finally:
        with contextlib.suppress(Exception):  # nothing may keep the events below unset
            relaxed.close()
        job.compiling.set()
        job.finished.set()


def wait_for_jits(timeout: float | None = None) -> None:
    """Wait for this process's background JITs (those of kernels compiled and not loaded
    yet; a load waits for its own): tests join them before they swap the driver out."""
    for thread in threading.enumerate():
        if thread.name.startswith(_THREAD_PREFIX):
            thread.join(timeout)


def _take_ahead(path: Path, device: int) -> tuple[bytes | None, bool]:
    """The cubin a background JIT made for this entry (waiting for it), and whether it is
    already in the disk cache; (None, False) if none was started, it failed, or its stored
    entry has gone since."""
    with _ahead_lock:
        job = _ahead.pop((path, device), None)
    if job is None:
        return None, False
    job.finished.wait()
    if not job.ok:
        return None, False
    if job.cubin is not None:
        return job.cubin, False
    cubin = read_entry(path)
    return cubin, cubin is not None


def load_module(ptx: str, name: str, *, device: int, arch: str) -> tuple[Module, str]:
    """Load the module of ``ptx`` on ``device``: from the cache, else JIT it to a cubin (or
    take the one :func:`jit_ahead` made, waiting for it), store that and load it. Returns the
    module and where it came from (FROM_CACHE, FROM_JIT, FROM_PTX)."""
    from pyfuse.backend_ptx import driver

    path = entry_path(entry_key(ptx, arch, driver.driver_version()))
    cubin, stored = _take_ahead(path, device)
    if not knobs.cache_enabled():
        if cubin is not None:
            return driver.load_module(cubin, name, device=device), FROM_JIT
        return driver.load_module(ptx, name, device=device), FROM_PTX
    if cubin is None:
        cached = read_entry(path)
        if cached is not None:
            try:
                return driver.load_module(cached, name, device=device), FROM_CACHE
            except LaunchError:
                pass  # an entry the driver refuses (a bad write that kept its checksum): rebuild
        cubin = driver.cubin_from_ptx(ptx, name, device=device)
    if not stored:
        try:
            write_entry(path, cubin)
        except OSError as error:
            warnings.warn(
                f"pyfuse: cannot write the kernel cache entry {path}: {error}; "
                "set PYFUSE_CACHE_DIR to a writable directory or PYFUSE_DISABLE_CACHE=1",
                RuntimeWarning,
                stacklevel=2,
            )
    return driver.load_module(cubin, name, device=device), FROM_JIT
