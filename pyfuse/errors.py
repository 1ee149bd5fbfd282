"""The exceptions pyfuse raises at the user's call site.

Every error names the op and, where one is known, the user's source line that
created it (recorded when the op was traced). This module imports nothing of
pyfuse so every layer can raise these.
"""

from __future__ import annotations

import linecache


class PyfuseError(Exception):
    """Base class of every error pyfuse raises on purpose."""

    def __init__(self, message: str, *, op: str | None = None, where: str | None = None) -> None:
        self.op = op
        self.where = where
        self.bare_message = message
        parts = []
        if op is not None:
            parts.append(f"{op}: ")
        parts.append(message)
        if where is not None:
            parts.append(f"\n  at {where}")
            code = _source_text(where)
            if code:
                parts.append(f"\n    {code}")
        super().__init__("".join(parts))


class FusionError(PyfuseError):
    """Tracing failed: shape or dtype mismatch, unsupported op or argument."""


class ScheduleError(PyfuseError):
    """No scheduler accepts a segment, or a schedule breaks an invariant lowering needs."""


class LaunchError(PyfuseError):
    """The CUDA driver refused a module load or a launch (or there is no driver)."""


class InputError(PyfuseError):
    """An argument does not match the compiled signature (dtype, rank, device, alignment)."""


def _source_text(where: str) -> str:
    """The stripped source line at ``file:line`` (empty when it cannot be read)."""
    filename, _, line = where.rpartition(":")
    if not line.isdigit():
        return ""
    return linecache.getline(filename, int(line)).strip()
