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
import dataclasses
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Generic, TypeVar, cast

Value = TypeVar("Value", covariant=True)  # a Knob[bool] is a Knob[object]

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


@dataclasses.dataclass(frozen=True)
class Knob(Generic[Value]):
    """One setting: its environment name, how its text parses, its default when unset."""

    name: str
    env: str
    doc: str
    parse: Callable[[str], Value]
    default: Callable[[], Value]

    def get(self) -> Value:
        """The current value: an :func:`overrides` value, else the environment's, else the
        default."""
        if self.name in _overrides:
            return cast(Value, _overrides[self.name])
        text = os.environ.get(self.env)
        if text is None or text == "":
            return self.default()
        return self.parse(text)


DUMP: Knob[frozenset[str]] = Knob(
    "dump",
    "PYFUSE_DUMP",
    "comma list of stages (ir, scheduled, kernel, ptx) printed to stderr; bypasses the cache",
    _parse_dump,
    frozenset,
)
CACHE_DIR: Knob[Path] = Knob(
    "cache_dir",
    "PYFUSE_CACHE_DIR",
    "directory of the on-disk caches: cubins and compiled variants",
    Path,
    _default_cache_dir,
)
DISABLE_CACHE: Knob[bool] = Knob(
    "disable_cache",
    "PYFUSE_DISABLE_CACHE",
    "1 turns off the in-memory and on-disk caches (cubins, compiled variants)",
    _parse_bool,
    lambda: False,
)
VERIFY: Knob[int] = Knob(
    "verify",
    "PYFUSE_VERIFY",
    "1 runs the IR verifier at the pipeline's boundaries, 2 after every pass",
    _parse_verify,
    lambda: 0,
)
REQUIRE_PTXAS: Knob[bool] = Knob(
    "require_ptxas",
    "PYFUSE_REQUIRE_PTXAS",
    "1 makes tests that assemble PTX fail (not skip) when ptxas is missing",
    _parse_bool,
    lambda: False,
)
PTXAS: Knob[str] = Knob(
    "ptxas", "PYFUSE_PTXAS", "path of the ptxas binary used by checks", str, lambda: "ptxas"
)

AUTOTUNE: Knob[bool | None] = Knob(
    "autotune",
    "PYFUSE_AUTOTUNE",
    "1 autotunes the matmuls of every fused function, 0 of none; unset: as pf.fuse(autotune=) says",
    _parse_bool,
    lambda: None,
)

KNOBS: dict[str, Knob[object]] = {
    knob.name: knob
    for knob in (DUMP, CACHE_DIR, DISABLE_CACHE, VERIFY, REQUIRE_PTXAS, PTXAS, AUTOTUNE)
}

_overrides: dict[str, object] = {}


def dump() -> frozenset[str]:
    return DUMP.get()


def cache_dir() -> Path:
    return CACHE_DIR.get()


def verify_level() -> int:
    return VERIFY.get()


def require_ptxas() -> bool:
    return REQUIRE_PTXAS.get()


def ptxas_path() -> str:
    return PTXAS.get()


def autotune() -> bool | None:
    return AUTOTUNE.get()


def cache_enabled() -> bool:
    """Caching is off when asked, and whenever a dump is requested (dumps must show work)."""
    return not DISABLE_CACHE.get() and not dump()


@contextlib.contextmanager
def overrides(**values: object) -> Iterator[None]:
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
