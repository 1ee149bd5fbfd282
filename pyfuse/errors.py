"""The exceptions pyfuse raises at the user's call site.

Every error names the op and, where one is known, the user's source line that
created it (recorded when the op was traced). This module imports nothing of
pyfuse so every layer can raise these.
"""

from __future__ import annotations

import contextlib
import linecache
from collections.abc import Iterator


class PyfuseError(Exception):
    """Base class of every error pyfuse raises on purpose: ``except pf.PyfuseError as e:``."""

    def __init__(self, message: str, *, op: str | None = None, where: str | None = None) -> None:
        self.op = op
        self.where = where
        self.bare_message = message
        super().__init__(self._render())

    def _render(self) -> str:
        parts = []
        if self.op is not None:
            parts.append(f"{self.op}: ")
        parts.append(self.bare_message)
        if self.where is not None:
            if self.where not in self.bare_message:  # a message may name the line itself
                parts.append(f"\n  at {self.where}")
            code = _source_text(self.where)
            if code:
                parts.append(f"\n    {code}")
        return "".join(parts)

    def reword(self, message: str, *, op: str | None, where: str | None) -> None:
        """Replace the message, op and line in place: the frontend rewrites an error the
        compiler raised in its own terms (T-numbers) in the user's, keeping its traceback."""
        self.bare_message = message
        self.op = op
        self.where = where
        self.args = (self._render(),)


class FusionError(PyfuseError):
    """Tracing failed: shape or dtype mismatch, unsupported op or argument; ``error.op`` and
    ``error.where`` name the op and the user's line: ``pf.add(x_4x8, y_3x8)`` raises it."""


class ScheduleError(PyfuseError):
    """No scheduler accepts a segment, or a schedule breaks an invariant lowering needs:
    ``fused.compile(x)`` raises it naming the op."""


class LaunchError(PyfuseError):
    """The CUDA driver refused a module load or a launch (or there is no driver):
    ``fused(x_cuda)`` on a machine without a GPU raises it."""


class InputError(PyfuseError):
    """An argument does not match the compiled signature (dtype, rank, device, alignment):
    ``fused(x_int64)`` for a function compiled for float32 raises it."""


class InternalError(PyfuseError):
    """A bug in pyfuse: an exception that is not a :class:`PyfuseError` escaped it while it
    traced, compiled or prepared a launch. It names the op being processed and the user's
    line of that op where they are known, chains the original exception (``__cause__``) and
    carries ``repro``, a Python script that rebuilds the fusion and compiles it (also written
    to the file ``repro_path`` where one could be made)."""

    def __init__(
        self,
        message: str,
        *,
        op: str | None = None,
        where: str | None = None,
        repro: str | None = None,
        repro_path: str | None = None,
    ) -> None:
        self.repro = repro
        self.repro_path = repro_path
        super().__init__(message, op=op, where=where)

    def _render(self) -> str:
        text = super()._render()
        if self.repro_path is not None:
            text += f"\n  a script that reproduces it: {self.repro_path} (also error.repro)"
        elif self.repro is not None:
            text += "\n  error.repro holds a script that reproduces it"
        report = " with that script" if self.repro is not None else ""
        return text + f"\n  this is a bug in pyfuse; please report it{report}"


@contextlib.contextmanager
def working_on(subject: object) -> Iterator[None]:
    """Name what the compiler is processing inside the block (an expr, a tensor, a kernel's
    plan or fusion): an exception leaving the block carries it as ``pyfuse_subject`` (the
    innermost block's wins), and the frontend names that op in the error it reports."""
    try:
        yield
    except Exception as error:
        if getattr(error, "pyfuse_subject", None) is None:
            with contextlib.suppress(AttributeError):  # an exception type without a __dict__
                error.pyfuse_subject = subject  # type: ignore[attr-defined]
        raise


def _source_text(where: str) -> str:
    """The stripped source line at ``file:line`` (empty when it cannot be read)."""
    filename, _, line = where.rpartition(":")
    if not line.isdigit():
        return ""
    return linecache.getline(filename, int(line)).strip()
