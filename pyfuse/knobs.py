"""Every pyfuse setting, in one typed place.

Each knob has its environment name, type, default and one line of doc. Values are
read from the environment when asked for (never at import), and a test can
override any of them with :func:`overrides`:

    with knobs.overrides(dump=frozenset({"ptx"})):
        ...

A knob that changes what is printed or compiled (``dump``) also bypasses the
kernel cache, so ``cache_enabled()`` is the one place that decision is made.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pyfuse.ir.records import record

DUMP_STAGES = frozenset({"ir", "scheduled", "kernel", "ptx"})


def _parse_bool(text: str) -> bool:
    return text.strip().lower() in {"1", "true", "yes", "on"}


def _parse_dump(text: str) -> frozenset[str]:
    stages = frozenset(part.strip() for part in text.split(",") if part.strip())
    unknown = stages - DUMP_STAGES
    if unknown:
        raise ValueError(
            f"PYFUSE_DUMP: unknown stage(s) {sorted(unknown)}; known: {sorted(DUMP_STAGES)}"
        )
    return stages


def _parse_verify(text: str) -> int:
    level = int(text) if text.strip() else 0
    if level not in (0, 1, 2):
        raise ValueError(f"PYFUSE_VERIFY must be 0, 1 or 2, got {text!r}")
    return level


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pyfuse"


@record(frozen=True)
class Knob:
    env: str
    doc: str
    parse: Callable[[str], Any]
    default: Callable[[], Any]


KNOBS: dict[str, Knob] = {
    "dump": Knob(
        "PYFUSE_DUMP",
        "comma list of stages (ir, scheduled, kernel, ptx) printed to stderr; bypasses the cache",
        _parse_dump,
        lambda: frozenset(),
    ),
    "cache_dir": Knob(
        "PYFUSE_CACHE_DIR",
        "directory of the on-disk caches: cubins and compiled variants",
        Path,
        _default_cache_dir,
    ),
    "disable_cache": Knob(
        "PYFUSE_DISABLE_CACHE",
        "1 turns off the in-memory and on-disk caches (cubins, compiled variants)",
        _parse_bool,
        lambda: False,
    ),
    "verify": Knob(
        "PYFUSE_VERIFY",
        "1 runs the IR verifier at the pipeline's boundaries, 2 after every pass",
        _parse_verify,
        lambda: 0,
    ),
    "require_ptxas": Knob(
        "PYFUSE_REQUIRE_PTXAS",
        "1 makes tests that assemble PTX fail (not skip) when ptxas is missing",
        _parse_bool,
        lambda: False,
    ),
    "ptxas": Knob("PYFUSE_PTXAS", "path of the ptxas binary used by checks", str, lambda: "ptxas"),
}

_overrides: dict[str, Any] = {}


def get(name: str) -> Any:
    """The current value of knob ``name`` (override, else environment, else default)."""
    if name in _overrides:
        return _overrides[name]
    knob = KNOBS[name]
    text = os.environ.get(knob.env)
    if text is None or text == "":
        return knob.default()
    return knob.parse(text)


def dump() -> frozenset[str]:
    return get("dump")  # type: ignore[no-any-return]


def cache_dir() -> Path:
    return get("cache_dir")  # type: ignore[no-any-return]


def verify_level() -> int:
    return get("verify")  # type: ignore[no-any-return]


def require_ptxas() -> bool:
    return get("require_ptxas")  # type: ignore[no-any-return]


def ptxas_path() -> str:
    return get("ptxas")  # type: ignore[no-any-return]


def cache_enabled() -> bool:
    """Caching is off when asked, and whenever a dump is requested (dumps must show work)."""
    return not get("disable_cache") and not dump()


@contextlib.contextmanager
def overrides(**values: Any) -> Iterator[None]:
    """Temporarily set knobs by name, for tests."""
    for name in values:
        if name not in KNOBS:
            raise KeyError(f"unknown knob {name!r}; known: {sorted(KNOBS)}")
    saved = dict(_overrides)
    _overrides.update(values)
    try:
        yield
    finally:
        _overrides.clear()
        _overrides.update(saved)
