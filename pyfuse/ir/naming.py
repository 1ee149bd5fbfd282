"""Name counters for IR values.

Tensors print as ``T<n>`` and IterDomains as ``<n>`` inside ``iS<n>{...}``. The
numbers come from the fusion being built (so a fusion's printout is stable no
matter what was traced before it); outside any fusion a process-wide counter is
used.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator, Mapping


class Namer:
    """Hands out increasing numbers per kind of value ("tv", "id", "scalar"); thread-safe.
    A deep copy (a cloned fusion's) goes on from the same numbers on its own."""

    def __init__(self, counters: Mapping[str, int] | None = None) -> None:
        self._next: dict[str, int] = dict(counters or {})
        self._lock = threading.Lock()

    def next(self, kind: str) -> int:
        with self._lock:
            number = self._next.get(kind, 0)
            self._next[kind] = number + 1
        return number

    def counters(self) -> list[tuple[str, int]]:
        """The next number of each kind, without taking it."""
        with self._lock:
            return list(self._next.items())

    def __deepcopy__(self, memo: dict[int, object]) -> Namer:
        # A lock cannot be copied (nor could an itertools.count past Python 3.13).
        return Namer(dict(self.counters()))


_GLOBAL_NAMER = Namer()
_current: contextvars.ContextVar[Namer | None] = contextvars.ContextVar(
    "pyfuse_namer", default=None
)


def next_name(kind: str) -> int:
    namer = _current.get()
    return (namer or _GLOBAL_NAMER).next(kind)


@contextlib.contextmanager
def naming(namer: Namer) -> Iterator[None]:
    """Number every value created inside the block with ``namer``."""
    token = _current.set(namer)
    try:
        yield
    finally:
        _current.reset(token)


_source: contextvars.ContextVar[str | None] = contextvars.ContextVar("pyfuse_source", default=None)


def current_source() -> str | None:
    """The user's ``file:line`` of the op being traced, if any."""
    return _source.get()


@contextlib.contextmanager
def source_location(where: str | None) -> Iterator[None]:
    """Attribute every expr created inside the block to the user's line ``where``."""
    token = _source.set(where)
    try:
        yield
    finally:
        _source.reset(token)
