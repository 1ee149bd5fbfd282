"""The on-disk variant cache: a process that traces a fusion that an earlier process compiled
(same traced IR, same target, same pyfuse) skips the passes and PTX emission, and the import
of both.

A *variant* is what one ``compile`` makes: the kernels' PTX, scheduled IR text, launch shapes
and argument mapping, and the workspace plan. Its record is keyed by the sha256 of

- a format number and pyfuse's *source stamp*: the path, size and modification time of every
  module of the installed package, so an edited pyfuse never reads another's records;
- the traced fusion, serialized structurally (:func:`fingerprint`): every object reachable
  from the fusion's inputs, outputs and exprs, attribute by attribute, with shared objects
  written once and referenced by number. Shapes, dtypes, strides, constants (floats in hex),
  op attributes and each op's source line are all in it; an object of a type the serializer
  does not know makes the variant uncacheable rather than risk two fusions sharing a key;
- the target (device limits, vector width) and the ``MatmulParams``.

Records are JSON, framed and published like cubins (:mod:`pyfuse.frontend.cache`): a
concurrent reader sees no record or a whole one, and a corrupt one reads as a miss. The
restored :class:`~pyfuse.frontend.compiled.Compiled` rebuilds its kernel IR by compiling
again only if something asks for it. Stored are variants whose kernels all launch without
kernel IR (no matmul kernel: a matmul launch encodes its tensor maps from the kernel IR).
Functions with ``MatmulParams`` are not keyed at all: the params only shape matmuls, and the
passes' only warnings (about matmul params and matmul schedules) must repeat in every process.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyfuse
from pyfuse import knobs
from pyfuse.frontend import cache
from pyfuse.frontend.compiled import Compiled, Kernel
from pyfuse.ir.dtypes import DType
from pyfuse.ir.fusion import Fusion

FORMAT = 1
MAGIC = b"PYFUSE-VARIANT-1\n"
# A kernel of this scheduler needs its kernel IR at launch (tensor maps, resident grid).
_NEEDS_KERNEL_IR = frozenset({"matmul"})


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


@functools.cache
def source_stamp() -> str:
    """The stamp of the installed pyfuse package (computed once per process)."""
    return stamp_of(Path(pyfuse.__file__).resolve().parent)


def stamp_of(root: Path) -> str:
    """A digest of the ``.py`` files under ``root``: relative path, size, modification time
    (as Python's own bytecode cache checks sources; reading every file would cost more)."""
    digest = hashlib.sha256(pyfuse.__version__.encode())
    pending = [str(root)]
    prefix = len(str(root))
    entries = []
    while pending:
        with os.scandir(pending.pop()) as scan:
            for entry in scan:
                if entry.is_dir() and entry.name != "__pycache__":
                    pending.append(entry.path)
                elif entry.name.endswith(".py"):
                    stat = entry.stat()
                    entries.append(f"{entry.path[prefix:]}:{stat.st_size}:{stat.st_mtime_ns}")
    for line in sorted(entries):
        digest.update(line.encode() + b"\n")
    return digest.hexdigest()


def variant_key(fusion: Fusion, target: object, matmul: object) -> str | None:
    """The record name for this traced fusion on ``target``; None when not cacheable (matmul
    params given, or ``PYFUSE_VERIFY`` asking for the passes to be checked as they run)."""
    if matmul is not None or knobs.verify_level() > 0:
        return None
    structure = fingerprint(fusion)
    if structure is None:
        return None
    digest = hashlib.sha256()
    for part in (str(FORMAT), source_stamp(), repr(target)):
        digest.update(part.encode() + b"\0")
    digest.update(structure)
    return digest.hexdigest()


def record_path(key: str) -> Path:
    return knobs.cache_dir() / "variant" / f"{key}.json"


def _record(compiled: Compiled) -> dict[str, Any] | None:
    """The JSON record of ``compiled``; None when a kernel needs its IR at launch or a value
    would not come back from JSON as it went in."""
    if any(kernel.scheduler in _NEEDS_KERNEL_IR for kernel in compiled.kernels):
        return None
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
            }
            for kernel in compiled.kernels
        ],
    }
    try:
        if json.loads(json.dumps(record)) != record:
            return None  # e.g. a tuple among the params, which JSON returns as a list
    except (TypeError, ValueError):
        return None
    return record


def store(key: str, compiled: Compiled) -> None:
    """Publish the record of ``compiled`` under ``key`` (nothing when it is not storable);
    a cache directory that cannot be written is the cubin cache's to report."""
    record = _record(compiled)
    if record is None:
        return
    with contextlib.suppress(OSError):
        cache.write_entry(record_path(key), json.dumps(record).encode(), MAGIC)


def load(key: str, fusion: Fusion, recompile: Callable[[], Compiled]) -> Compiled | None:
    """The variant stored under ``key`` as a Compiled for ``fusion``; None on a miss or a
    record that does not read back whole."""
    payload = cache.read_entry(record_path(key), MAGIC)
    if payload is None:
        return None
    try:
        record = json.loads(payload)
        if record["format"] != FORMAT:
            return None
        kernels = [
            Kernel(
                name=str(item["name"]),
                scheduler=str(item["scheduler"]),
                ptx=str(item["ptx"]),
                ir=str(item["ir"]),
                grid=_triple(item["grid"]),
                block=_triple(item["block"]),
                smem_bytes=int(item["smem_bytes"]),
                params=dict(item["params"]),
                arguments=[(str(kind), where) for kind, where in item["arguments"]],
            )
            for item in record["kernels"]
        ]
        return Compiled(
            name=str(record["name"]),
            kernels=kernels,
            global_intermediates=[str(name) for name in record["global_intermediates"]],
            timings={},
            math_ir=str(record["math_ir"]),
            fusion=fusion,
            intermediate_bytes={
                str(name): int(size) for name, size in record["intermediate_bytes"].items()
            },
            recompile=recompile,
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def _triple(values: list[int]) -> tuple[int, int, int]:
    x, y, z = (int(v) for v in values)
    return (x, y, z)
