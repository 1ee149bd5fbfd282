"""The on-disk cubin cache: a process that finds a kernel here skips the driver's JIT.

The first JIT of even a trivial kernel costs ~40 ms; a cubin loads in well under one. A
cubin entry is named by the sha256 of everything that decides the cubin: the PTX text, the target
arch, pyfuse's version and the driver's version. Its file holds a header (magic, payload
length, payload sha256) and the cubin, so a truncated or corrupt file is noticed, ignored and
rewritten. Entries are written to a temporary file in the cache directory and published
with ``os.replace`` (atomic within one file system): a concurrent reader sees no entry or a
whole one, never half of one. The variant cache (:mod:`pyfuse.frontend.variant_cache`) stores
its records with the same framing under its own magic.

``knobs.cache_enabled()`` False (``PYFUSE_DISABLE_CACHE=1``, or any ``PYFUSE_DUMP``) skips
the cache: the PTX is loaded and JIT-compiled by the driver directly.
"""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile
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

# Where a module came from: the disk cache, a JIT whose cubin was stored, or a direct PTX load.
FROM_CACHE = "cache"
FROM_JIT = "jit"
FROM_PTX = "ptx"


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


def load_module(ptx: str, name: str, *, device: int, arch: str) -> tuple[Module, str]:
    """Load the module of ``ptx`` on ``device``: from the cache, else JIT it to a cubin, store
    that and load it. Returns the module and where it came from (FROM_CACHE, FROM_JIT, FROM_PTX).
    """
    from pyfuse.backend_ptx import driver

    if not knobs.cache_enabled():
        return driver.load_module(ptx, name, device=device), FROM_PTX
    path = entry_path(entry_key(ptx, arch, driver.driver_version()))
    cubin = read_entry(path)
    if cubin is not None:
        try:
            return driver.load_module(cubin, name, device=device), FROM_CACHE
        except LaunchError:
            pass  # an entry the driver refuses (a bad write that kept its checksum): rebuild it
    cubin = driver.cubin_from_ptx(ptx, name, device=device)
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
