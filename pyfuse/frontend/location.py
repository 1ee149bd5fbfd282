"""Where in the user's code an op was traced, and turning IR errors into user errors.

Every public op runs under :func:`user_op`: it finds the first stack frame outside the
pyfuse package (the user's line: :func:`~pyfuse.runtime.location.user_location`),
attributes the exprs it creates to that line, and re-raises any :class:`FusionError` with
the op's name and that line; arguments that do not fit the op's signature become a
FusionError too, as do arguments annotated ``Tensor`` that are no traced tensor (every op
reads its tensors' shape and dtype first: a float there would be an AttributeError inside
pyfuse), and any other exception raised inside pyfuse an :class:`InternalError`
(:mod:`pyfuse.frontend.trace_errors`; an exception of the user's own code passes unchanged).
A composite op (softmax) calls other ops; the outermost call's line wins, so the user sees
their own line, never one inside pyfuse.

What is refused outside any op (``float(x)``, ``x[0]``, an unknown NumPy ufunc) goes through
:func:`refuse`: a FusionError at the innermost frame outside pyfuse and NumPy. A Tensor method
called with arguments that do not fit its signature (``x.transpose(0)``) raises Python's
TypeError before any op runs: :func:`checked_calls` makes it a FusionError naming the method
and the user's line. This module imports no other frontend module but
:mod:`~pyfuse.frontend.arguments` (which imports none): every one of them may use it.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn, ParamSpec, TypeVar

from pyfuse.errors import FusionError, PyfuseError
from pyfuse.frontend.arguments import check_traced
from pyfuse.ir.naming import current_source, source_location
from pyfuse.runtime.location import PACKAGE_DIR, user_location

P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C", bound=type)


# The annotations (strings: every frontend module has ``from __future__ import annotations``)
# of the parameters that take a traced tensor, or None.
_TENSOR_ANNOTATIONS = {"Tensor": False, "Tensor | None": True}


# A parameter annotated ``Tensor``: its position among the positional parameters (None for a
# keyword-only one), its name, and whether it may be None.
_TensorSlot = tuple["int | None", str, bool]


def _tensor_slots(signature: inspect.Signature, skipped: Sequence[str]) -> list[_TensorSlot]:
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    slots: list[_TensorSlot] = []
    for position, parameter in enumerate(signature.parameters.values()):
        if parameter.annotation in _TENSOR_ANNOTATIONS and parameter.name not in skipped:
            index = position if parameter.kind in positional else None
            slots.append((index, parameter.name, _TENSOR_ANNOTATIONS[parameter.annotation]))
    return slots


def _check_tensors(
    slots: Sequence[_TensorSlot], args: Sequence[object], kwargs: Mapping[str, object]
) -> None:
    """A FusionError for a parameter annotated ``Tensor`` given something else. Read from the
    argument slots directly (``Signature.bind`` on every op cost a fifth of the tracing); a
    call that does not fit the signature raises its own TypeError when the op runs."""
    for position, name, optional in slots:
        if position is not None and position < len(args):
            value = args[position]
        elif name in kwargs:
            value = kwargs[name]
        else:
            continue  # the default
        if not (optional and value is None):
            check_traced(value, name)


def user_op(
    name: str, checks_itself: Sequence[str] = ()
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a public op: record the user's line and name the op in its errors. The
    parameters annotated ``Tensor`` are checked to be traced tensors, except those named in
    ``checks_itself``: the op refuses a wrong value there with a message of its own."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        tensors = _tensor_slots(inspect.signature(fn), checks_itself)

        @functools.wraps(fn)
        def traced(*args: P.args, **kwargs: P.kwargs) -> R:
            outer = current_source()
            where = outer if outer is not None else user_location()
            with source_location(where):
                try:
                    if tensors:
                        _check_tensors(tensors, args, kwargs)
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


def checked_calls(cls: C) -> C:
    """Make a call of any public method of ``cls`` whose arguments do not fit its signature
    (``x.sum(1, 2, 3, 4, 5)``, ``x.transpose(0)``, ``x.sum(axes=1)``) a FusionError naming the
    method, its signature and the user's line, as :func:`user_op` does for the ops. Python
    raises that TypeError before the method runs, so each method gets a thin wrapper: one
    call more per method call, and the signature is read only for an error."""
    for name, member in list(vars(cls).items()):
        if inspect.isfunction(member) and not name.startswith("_"):
            setattr(cls, name, _checked_method(member, name))
    return cls


def _checked_method(method: Callable[..., R], name: str) -> Callable[..., R]:
    @functools.wraps(method)
    def checked(*args: Any, **kwargs: Any) -> R:
        try:
            return method(*args, **kwargs)
        except TypeError as error:
            called = error.__traceback__
            if called is None or called.tb_next is not None or current_source() is not None:
                # Raised inside the method, or a pyfuse op called it wrongly: that op's
                # user_op reports a bug of pyfuse's.
                raise
            message = _mismatch(method, name, args, kwargs)
            raise FusionError(message, op=name, where=_outside_libraries()) from None

    return checked


def _mismatch(
    method: Callable[..., object], name: str, args: Sequence[object], kwargs: Mapping[str, object]
) -> str:
    """What is wrong with the call ``x.name(*args[1:], **kwargs)``, with the method's
    signature as the user calls it (no ``self``, no annotations)."""
    signature = inspect.signature(method)
    try:
        signature.bind(*args, **kwargs)
        reason = "the arguments do not fit"  # bind accepts what the call refused: not expected
    except TypeError as error:
        reason = str(error)
    if reason == "too many positional arguments":
        reason += f" ({len(args) - 1} given)"
    shown = [
        parameter.replace(annotation=inspect.Parameter.empty)
        for parameter in list(signature.parameters.values())[1:]
    ]
    plain = signature.replace(parameters=shown, return_annotation=inspect.Signature.empty)
    return f"x.{name}{plain}: {reason}"
