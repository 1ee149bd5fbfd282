"""The on-disk variant cache: a process that traces a fusion that an earlier process compiled
(same traced IR, same target, same pyfuse) skips the passes and PTX emission, and the import
of both.

A *variant* is what one ``compile`` makes: the kernels' PTX, scheduled IR text, launch shapes
and argument mapping, and the workspace plan. Its record is keyed by the sha256 of

- a format number and pyfuse's *source stamp*: the install folder, the version, and the
  contents of every module of the package (contents, not modification times, which
  installers and build systems set equal on different files), so no other pyfuse reads
  these records (read once per process, and again only if a stat of the files changes; a
  scan's stamp is remembered under ``variant/stamps``, named by every file's path, size,
  inode, mtime and ctime, so later processes read one small file). The first compile on a
  cache directory that holds no record skips the lookup and reads the files when it stores
  the record, while the driver JIT-compiles the kernels;
- the traced fusion, serialized structurally (:func:`fingerprint`): every object reachable
  from the fusion's inputs, outputs and exprs, attribute by attribute, with shared objects
  written once and referenced by number, and the fusion's next value numbers (the passes
  continue them). Shapes, dtypes, strides, constants (floats in hex), op attributes and each
  op's source line are all in it; an object of a type the serializer does not know makes the
  variant uncacheable rather than risk two fusions sharing a key;
- every field of the target (device limits, vector width), and NumPy's version (the emitter
  folds constants with it).

A record is stored only while the package's files stat as they did when the key was made
and when the compiler was imported (:func:`remember_compiler_sources`): a process that keeps
running old code after its sources were edited never files its kernels under the new stamp.
Sources that cannot be scanned (a zipped install) make nothing cacheable.

Records are JSON, framed and published like cubins (:mod:`pyfuse.runtime.cache`): a
concurrent reader sees no record or a whole one, and a damaged one (bad framing, or content
that does not add up: no kernels, a bad launch shape, an argument from nowhere) reads as a
miss. The restored :class:`~pyfuse.runtime.compiled.Compiled` rebuilds its kernel IR by
compiling again only if something asks for it: every kernel launches without it, a matmul
kernel from its tensor maps planned at compile time (``Kernel.matmul_launch``, stored as
:func:`pyfuse.backend_ptx.tensor_maps.to_json` writes it; reading one loads that host-only
module, none of the compiler). Functions with ``MatmulParams`` are not keyed at all: the
params only shape matmuls, and the passes' only warnings (about matmul params and matmul
schedules) must repeat in every process. Params an autotuner chose are keyed (``tuned``):
a config that warns is never chosen.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pyfuse import knobs, version
from pyfuse.ir.dtypes import DType
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.records import record
from pyfuse.ir.target import TargetInfo
from pyfuse.runtime import cache
from pyfuse.runtime.compiled import Compiled, Kernel

if TYPE_CHECKING:
    from pyfuse.backend_ptx.tensor_maps import MatmulLaunch

FORMAT = 2  # 2: kernels carry their matmul launch
MAGIC = b"PYFUSE-VARIANT-1\n"


class _NotFingerprintableError(Exception):
    """The fusion holds an object the structural serializer does not know."""


def fingerprint(fusion: Fusion) -> bytes | None:
    """The structural serialization of ``fusion`` (None when it holds an unknown object).

    Breadth first over objects: each pyfuse object (tensor, axis, expr, scalar, params) gets a
    number when first met and is written once as ``module.Class{attr=value,...}`` with its
    attributes sorted by name; values are written inline (numbers, strings, enums, dtypes,
    lists, tuples, dicts) or as ``#number`` references, so the text determines the graph.
    """
    numbers: dict[int, int] = {}
    queue: list[object] = []

    def value(obj: object) -> str:
        kind = type(obj)
        if obj is None or kind is bool or kind is int or kind is str:
            return repr(obj)
        if isinstance(obj, float) and kind is float:
            return "f" + obj.hex()  # exact, unlike a decimal repr
        if isinstance(obj, enum.Enum):
            return f"{kind.__module__}.{kind.__qualname__}.{obj.name}"
        if isinstance(obj, DType) and kind is DType:
            return "dtype:" + obj.name
        if isinstance(obj, tuple | list) and kind in (tuple, list):
            inner = ",".join(value(item) for item in obj)
            return f"({inner})" if kind is tuple else f"[{inner}]"
        if isinstance(obj, dict) and kind is dict:
            items = sorted((value(key), value(item)) for key, item in obj.items())
            return "{" + ",".join(f"{key}:{item}" for key, item in items) + "}"
        if not kind.__module__.startswith("pyfuse.") or not hasattr(obj, "__dict__"):
            raise _NotFingerprintableError(f"{kind.__module__}.{kind.__qualname__}")
        number = numbers.get(id(obj))
        if number is None:
            number = numbers[id(obj)] = len(queue)
            queue.append(obj)
        return f"#{number}"

    try:
        lines = [
            "name=" + value(fusion.name),
            "inputs=" + value(list(fusion.inputs)),
            "outputs=" + value(list(fusion.outputs)),
            "exprs=" + value(list(fusion.exprs())),
            # The passes go on numbering from here: the names in the IR and the PTX depend on it.
            "namer=" + repr(sorted(fusion.namer.counters())),
        ]
        done = 0
        while done < len(queue):
            obj = queue[done]
            done += 1
            kind = type(obj)
            attributes = ",".join(
                f"{name}={value(item)}" for name, item in sorted(vars(obj).items())
            )
            lines.append(f"#{done - 1} {kind.__module__}.{kind.__qualname__}{{{attributes}}}")
    except _NotFingerprintableError:
        return None
    return "\n".join(lines).encode()


# The package's files as (relative path, size, mtime_ns, inode, ctime_ns), as seen by a scan.
Scan = tuple[tuple[str, int, int, int, int], ...]

STAMP_MAGIC = b"PYFUSE-STAMP-1\n"
# A scan's stamp is remembered on disk only when every file is older than this: a file
# edited within one tick of the file system's clock can keep its times (git's "racy" files).
RACY_NS = 2_000_000_000

# pyfuse's own folder (this file is pyfuse/runtime/variant_cache.py).
_ROOT = Path(__file__).resolve().parents[1]
_stamps: dict[Scan, str] = {}  # content stamp per scan: files are read again only on a change
_compiler_scan: Scan | None = None


def scan_sources(root: Path = _ROOT) -> Scan | None:
    """Stat every ``.py`` file under ``root``; None where that fails (a zipped install, an
    unreadable folder, an editor's lock file that vanished between listing and stat)."""
    entries = []
    pending = [str(root)]
    prefix = len(str(root))
    try:
        while pending:
            with os.scandir(pending.pop()) as listing:
                for entry in listing:
                    if entry.is_dir(follow_symlinks=False):
                        if entry.name != "__pycache__":
                            pending.append(entry.path)
                    elif entry.name.endswith(".py") and not entry.name.startswith("."):
                        info = entry.stat()
                        entries.append(
                            (
                                entry.path[prefix:],
                                info.st_size,
                                info.st_mtime_ns,
                                info.st_ino,
                                info.st_ctime_ns,
                            )
                        )
    except OSError:
        return None
    return tuple(sorted(entries))


def stamp_of(root: Path, scan: Scan) -> str | None:
    """The sha256 of the scanned files' contents and names under ``root``, with pyfuse's
    install folder and version (contents, not modification times: installers and build
    systems set equal times on different files)."""
    digest = hashlib.sha256(f"{version.__version__}\0{root}\0".encode())
    try:
        for relative, *_ in scan:
            data = Path(str(root) + relative).read_bytes()
            digest.update(f"{relative}\0{len(data)}\0".encode())
            digest.update(data)
    except OSError:
        return None
    return digest.hexdigest()


def remember_compiler_sources() -> None:
    """Called when the compiler (passes, emitter) is imported: the sources it was loaded from.
    A record is stored only while the package still scans the same, so a process whose files
    were edited after it loaded them never files old kernels under the new sources' stamp."""
    global _compiler_scan
    _compiler_scan = scan_sources()


def stamp_memo_path(root: Path, scan: Scan) -> Path:
    """Where the stamp of ``scan`` is remembered: named by the install folder and every
    file's path, size, inode and times. ctime is in it because nothing but the kernel sets
    it: a file rewritten or reinstalled (even with its mtime put back) scans differently.
    That trust needs a file system that keeps a real ctime (not a FAT or some network
    mounts, where a same-size edit that restores the mtime in place would go unseen: set
    ``PYFUSE_DISABLE_CACHE=1`` there while editing pyfuse)."""
    digest = hashlib.sha256(f"{version.__version__}\0{root}\0{scan!r}".encode())
    return knobs.cache_dir() / "variant" / "stamps" / digest.hexdigest()


def remembered_stamp(root: Path, scan: Scan) -> str | None:
    """The stamp of ``scan`` from its memo, else from the files' contents (remembered then,
    unless a file is too new for its times to be trusted). Reading one memo instead of every
    module shortens a first call (docs/performance.md, "Measured design choices")."""
    stamp = _memo_stamp(root, scan)
    if stamp is not None:
        return stamp
    stamp = stamp_of(root, scan)
    if stamp is not None:
        _remember(root, scan, stamp)
    return stamp


def _memo_stamp(root: Path, scan: Scan) -> str | None:
    payload = cache.read_entry(stamp_memo_path(root, scan), STAMP_MAGIC)
    if payload is not None and len(payload) == 64:
        with contextlib.suppress(UnicodeDecodeError):
            return payload.decode("ascii")
    return None


def _remember(root: Path, scan: Scan, stamp: str) -> None:
    """Write the memo of ``scan`` unless it exists or a file is too new to trust."""
    path = stamp_memo_path(root, scan)
    if _racy(scan) or path.exists():
        return
    with contextlib.suppress(OSError):
        cache.write_entry(path, stamp.encode("ascii"), STAMP_MAGIC)


def _racy(scan: Scan) -> bool:
    """Whether a file changed so recently that its times may not show a further edit."""
    now = time.time_ns()
    return any(now - max(mtime, ctime) <= RACY_NS for _, _, mtime, _, ctime in scan)


def _holds_records() -> bool:
    """Whether the cache directory holds any variant record (it stops at the first)."""
    try:
        with os.scandir(knobs.cache_dir() / "variant") as entries:
            return any(entry.name.endswith(".json") for entry in entries)
    except OSError:
        return False


def _known_stamp(scan: Scan) -> str | None:
    """The stamp of ``scan`` for the lookup; None when the lookup can only miss, and the
    stamp is then left to :func:`store` (read while the driver's JIT runs, not before the
    passes).

    From this process, else the memo, else the files' contents, except in a cache directory
    that holds no record at all (the first compile on it): there the lookup is skipped. A
    memo is named by a scan of file times and inodes, so a reinstall, a checkout or a copied
    cache can bring records whose scan has no memo yet: those are read for, as before.
    """
    stamp = _stamps.get(scan)
    if stamp is None:
        if not _holds_records():
            return None
        stamp = remembered_stamp(_ROOT, scan)
        if stamp is not None:
            _stamps[scan] = stamp
    return stamp


@record(frozen=True)
class VariantKey:
    """What names a variant's record: the scan of pyfuse's sources the key was made under,
    the digest of the target and traced fusion, and the sources' stamp (None until
    :func:`store` reads it, when neither this process nor the memo knew it)."""

    scan: Scan
    content: str
    stamp: str | None

    @property
    def name(self) -> str:
        if self.stamp is None:
            raise ValueError("the variant key's source stamp is not known yet")
        return _record_name(self.stamp, self.content)


def _record_name(stamp: str, content: str) -> str:
    return hashlib.sha256(f"{FORMAT}\0{stamp}\0{content}".encode()).hexdigest()


def variant_key(
    fusion: Fusion, target: TargetInfo, matmul: object, *, tuned: bool = False
) -> VariantKey | None:
    """The key of this traced fusion on ``target``; None when not cacheable (matmul params
    given by the user, not ``tuned`` ones; ``PYFUSE_VERIFY`` asking for the passes to be
    checked as they run; or sources that cannot be read)."""
    if (matmul is not None and not tuned) or knobs.verify_level() > 0:
        return None
    structure = fingerprint(fusion)
    if structure is None:
        return None
    scan = scan_sources()
    if scan is None:
        return None
    digest = hashlib.sha256()
    # Every field of the target, whatever its repr shows; NumPy folds the emitter's constants.
    for part in (repr(dataclasses.astuple(target)), np.__version__, repr(matmul)):
        digest.update(part.encode() + b"\0")
    digest.update(structure)
    return VariantKey(scan, digest.hexdigest(), _known_stamp(scan))


def record_path(key: VariantKey) -> Path:
    return knobs.cache_dir() / "variant" / f"{key.name}.json"


def _record(compiled: Compiled) -> bytes | None:
    """The encoded JSON record of ``compiled``; None when a value would not come back from
    JSON as it went in."""
    record = {
        "format": FORMAT,
        "name": compiled.name,
        "math_ir": compiled.math_ir,
        "global_intermediates": list(compiled.global_intermediates),
        "intermediate_bytes": dict(compiled.intermediate_bytes),
        "kernels": [
            {
                "name": kernel.name,
                "scheduler": kernel.scheduler,
                "ptx": kernel.ptx,
                "ir": kernel.ir,
                "grid": list(kernel.grid),
                "block": list(kernel.block),
                "smem_bytes": kernel.smem_bytes,
                "params": kernel.params,
                "arguments": [list(source) for source in kernel.arguments],
                "matmul_launch": _launch_json(kernel),
            }
            for kernel in compiled.kernels
        ],
    }
    try:
        text = json.dumps(record)
        if json.loads(text) != record:
            return None  # e.g. a tuple among the params, which JSON returns as a list
    except (TypeError, ValueError):
        return None
    return text.encode()


def _launch_json(kernel: Kernel) -> dict[str, Any] | None:
    if kernel.matmul_launch is None:
        return None
    from pyfuse.backend_ptx import tensor_maps  # loaded already: the compile planned the maps

    return tensor_maps.to_json(kernel.matmul_launch)


def _launch_from(value: object, arguments: int) -> MatmulLaunch | None:
    """A stored kernel's matmul launch (None for a kernel without one); ValueError when it
    does not fit, or names a pointer argument the kernel does not have."""
    if value is None:
        return None
    from pyfuse.backend_ptx import tensor_maps  # host-only: no compiler, no kernel IR

    launch = tensor_maps.from_json(value)
    if any(position >= arguments for position in launch.pointer_arguments):
        raise ValueError(f"a tensor map's base is no argument of the kernel: {value!r}")
    if launch.zeroed is not None and launch.zeroed[0] >= arguments:
        raise ValueError(f"a zeroed workspace is no argument of the kernel: {value!r}")
    return launch


def store(key: VariantKey, compiled: Compiled) -> None:
    """Publish the record of ``compiled`` under ``key`` (nothing when it is not storable, or
    when pyfuse's sources changed since the key was made or the compiler was loaded); a cache
    directory that cannot be written is the cubin cache's to report. A key made without the
    source stamp gets it here (and the memo with it)."""
    record = _record(compiled)
    if record is None or not key.scan or key.scan != _compiler_scan:
        return
    stamp = key.stamp if key.stamp is not None else stamp_of(_ROOT, key.scan)
    # After the stamp was read: the contents it hashed are those the scan (and so the
    # compiler's import) saw only if the files still stat the same.
    if stamp is None or scan_sources() != key.scan:
        return
    _stamps[key.scan] = stamp
    key = dataclasses.replace(key, stamp=stamp)
    with contextlib.suppress(OSError):
        cache.write_entry(record_path(key), record, MAGIC)
    # A directory with records has the memo of their scan (unless the files are too new):
    # a later process finds both without reading the sources.
    _remember(_ROOT, key.scan, stamp)


def load(key: VariantKey, fusion: Fusion, recompile: Callable[[], Compiled]) -> Compiled | None:
    """The variant stored under ``key`` as a Compiled for ``fusion``; None on a miss or on a
    record that does not read back whole and consistent (anything else it may hold), and
    without a lookup when the key's source stamp is not known yet."""
    if key.stamp is None:
        return None
    payload = cache.read_entry(record_path(key), MAGIC)
    if payload is None:
        return None
    try:
        return _compiled_from(json.loads(payload), fusion, recompile)
    except Exception:  # a record is only a cache: whatever is wrong with it, compile instead
        return None


def _compiled_from(
    record: dict[str, Any], fusion: Fusion, recompile: Callable[[], Compiled]
) -> Compiled | None:
    if record["format"] != FORMAT or not record["kernels"]:
        return None
    intermediate_bytes = {
        str(name): _count(size) for name, size in record["intermediate_bytes"].items()
    }
    kernels = []
    for item in record["kernels"]:
        arguments: list[tuple[str, int | str]] = []
        for kind, where in item["arguments"]:
            limit = {"input": len(fusion.inputs), "output": len(fusion.outputs)}.get(kind)
            if limit is not None and not (type(where) is int and 0 <= where < limit):
                return None
            if limit is None and not (kind == "intermediate" and where in intermediate_bytes):
                return None
            arguments.append((kind, where))
        kernels.append(
            Kernel(
                name=str(item["name"]),
                scheduler=str(item["scheduler"]),
                ptx=str(item["ptx"]),
                ir=str(item["ir"]),
                grid=_triple(item["grid"]),
                block=_triple(item["block"]),
                smem_bytes=_count(item["smem_bytes"]),
                params=dict(item["params"]),
                matmul_launch=_launch_from(item["matmul_launch"], len(arguments)),
                arguments=arguments,
            )
        )
    return Compiled(
        name=str(record["name"]),
        kernels=kernels,
        global_intermediates=[str(name) for name in record["global_intermediates"]],
        timings={},
        math_ir=str(record["math_ir"]),
        fusion=fusion,
        intermediate_bytes=intermediate_bytes,
        recompile=recompile,
    )


def _count(value: object) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"not a count: {value!r}")
    return value


def _triple(values: list[int]) -> tuple[int, int, int]:
    x, y, z = (_count(v) for v in values)
    if min(x, y, z) < 1:
        raise ValueError(f"not a launch shape: {values!r}")
    return (x, y, z)
