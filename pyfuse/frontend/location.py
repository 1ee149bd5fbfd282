"""Where in the user's code an op was traced, and turning IR errors into user errors.

Every public op runs under :func:`user_op`: it finds the first stack frame outside the
pyfuse package (the user's line: :func:`~pyfuse.runtime.location.user_location`),
attributes the exprs it creates to that line, and re-raises any :class:`FusionError` with
the op's name and that line; arguments that do not fit the op's signature become a
FusionError too, and any other exception raised inside pyfuse an :class:`InternalError`
(:mod:`pyfuse.frontend.trace_errors`; an exception of the user's own code passes unchanged).
A composite op (softmax) calls other ops; the outermost call's line wins, so the user sees
their own line, never one inside pyfuse.

What is refused outside any op (``float(x)``, ``x[0]``, an unknown NumPy ufunc) goes through
:func:`refuse`: a FusionError at the innermost frame outside pyfuse and NumPy. This module
imports no other frontend module: every one of them may use it.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import NoReturn, ParamSpec, TypeVar

from pyfuse.errors import FusionError, PyfuseError
from pyfuse.ir.naming import current_source, source_location
from pyfuse.runtime.location import PACKAGE_DIR, user_location

P = ParamSpec("P")
R = TypeVar("R")


def user_op(name: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a public op: record the user's line and name the op in its errors."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def traced(*args: P.args, **kwargs: P.kwargs) -> R:
            outer = current_source()
            where = outer if outer is not None else user_location()
            with source_location(where):
                try:
                    return fn(*args, **kwargs)
                except FusionError as error:
                    if outer is not None:
                        raise  # the outermost op reports it
                    raise FusionError(
                        error.bare_message, op=error.op or name, where=where
                    ) from None
                except PyfuseError:
                    raise
                except Exception as error:
                    if outer is not None:
                        raise  # the outermost op reports it
                    called = error.__traceback__
                    if isinstance(error, TypeError) and called and called.tb_next is None:
                        # Raised by the call itself: arguments that do not fit the signature.
                        raise FusionError(str(error), op=name, where=where) from None
                    # Both load only for an error.
                    from pyfuse.frontend import trace_errors
                    from pyfuse.runtime import diagnose

                    if not diagnose.is_pyfuse_bug(error):
                        raise  # the user's own code (a callback of theirs) raised it
                    raise trace_errors.trace_internal_error(
                        error, name, where, args, kwargs
                    ) from error

        return traced

    return decorate


def _outside_libraries() -> str | None:
    """The user's ``file:line``: the innermost frame outside pyfuse and NumPy (a NumPy
    function that converts its argument, ``np.where(x, ...)``, is not the user's line)."""
    numpy = sys.modules.get("numpy")
    skipped = [PACKAGE_DIR + os.sep]
    if numpy is not None and numpy.__file__:
        skipped.append(os.path.dirname(os.path.abspath(numpy.__file__)) + os.sep)
    frame = sys._getframe(1)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not any(filename.startswith(folder) for folder in skipped):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return user_location()


def refuse(op: str, message: str) -> NoReturn:
    """Raise a FusionError for ``op`` at the user's line."""
    raise FusionError(message, op=op, where=_outside_libraries())
