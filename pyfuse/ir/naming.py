"""Name counters for IR values.

Tensors print as ``T<n>`` and IterDomains as ``<n>`` inside ``iS<n>{...}``. The
numbers come from the fusion being built (so a fusion's printout is stable no
matter what was traced before it); outside any fusion a process-wide counter is
used.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
from collections.abc import Iterator


class Namer:
    """Hands out increasing numbers per kind of value ("tv", "id", "scalar")."""

    def __init__(self) -> None:
        self._counters: dict[str, itertools.count[int]] = {}

    def next(self, kind: str) -> int:
        counter = self._counters.setdefault(kind, itertools.count())
        return next(counter)

    def counters(self) -> list[tuple[str, int]]:
        """The next number of each kind, without taking it (an ``itertools.count`` shows its
        next value only in its repr, ``count(7)``; it is kept for its thread-safe ``next``)."""
        return [
            (kind, int(repr(count)[len("count(") : -1])) for kind, count in self._counters.items()
        ]


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
