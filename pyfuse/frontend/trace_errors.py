"""Internal errors raised while tracing: a bug met inside a public op, in the user's terms.

:func:`trace_internal_error` is called by :func:`~pyfuse.frontend.location.user_op` for an
exception that a pyfuse frame raised inside the outermost op
(:func:`pyfuse.runtime.diagnose.is_pyfuse_bug`): the :class:`InternalError` names the op's
call as the user wrote it (``pf.sum(T2, 1)``) and the user's line, and carries a repro
script that traces what the op's tensor arguments were computed from, then calls the op
(:mod:`pyfuse.ir.script`), also written to a temporary file. Loaded only for an error.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from pyfuse.errors import InternalError
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.script import fusion_to_script, literal
from pyfuse.ir.tensor import TensorView
from pyfuse.runtime.diagnose import write_repro


def _traced(value: object) -> TensorView | None:
    """The TensorView of a traced Tensor (its one slot, ``tv``); None for any other value.
    Read by attribute: the Tensor class lives with the ops, which import this module's
    caller (:func:`~pyfuse.frontend.location.user_op`), so importing it here would close
    a circle."""
    tv = getattr(value, "tv", None)
    return tv if isinstance(tv, TensorView) else None


def _argument(value: object) -> str:
    tv = _traced(value)
    if tv is not None:
        return f"T{tv.name}"
    if isinstance(value, list):
        return f"[{', '.join(_argument(item) for item in value)}]"
    if isinstance(value, tuple):
        items = [_argument(item) for item in value]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    return literal(value)


def _tensors_in(values: Sequence[object]) -> Iterator[TensorView]:
    for value in values:
        tv = _traced(value)
        if tv is not None:
            yield tv
        elif isinstance(value, list | tuple):
            yield from _tensors_in(value)


def _call_source(op: str, args: Sequence[object], kwargs: Mapping[str, object]) -> str:
    if op == "t":
        return f"{_argument(args[0])}.T"
    texts = [_argument(arg) for arg in args]
    texts += [f"{key}={_argument(value)}" for key, value in kwargs.items()]
    module = "ir_ops" if op in ("broadcast", "set_copy", "materialize") else "pf"
    return f"{module}.{op}({', '.join(texts)})"


def trace_internal_error(
    error: BaseException,
    op: str,
    where: str | None,
    args: Sequence[object],
    kwargs: Mapping[str, object],
) -> InternalError:
    """An InternalError for ``error`` raised inside the public op ``op`` while tracing: its
    repro traces what the op's tensor arguments were computed from, then calls the op."""
    operands: list[TensorView] = []
    for tv in _tensors_in([*args, *kwargs.values()]):
        if all(tv is not seen for seen in operands):
            operands.append(tv)
    partial = Fusion("repro")
    leaves: dict[int, TensorView] = {}
    partial.outputs = operands
    for expr in partial.exprs():
        for val in expr.inputs:
            if isinstance(val, TensorView) and val.definition is None:
                leaves[id(val)] = val
    for tv in operands:
        if tv.definition is None:
            leaves[id(tv)] = tv
    # Inputs are made first, in order, so their numbers give the order of the arguments.
    partial.inputs = sorted(leaves.values(), key=lambda tv: tv.name)
    call = _call_source(op, args, kwargs)
    if where is not None:
        call += f"  # {where}"
    header = [f"pyfuse repro: {type(error).__name__} while tracing {op}", "run it with python"]
    script: str | None
    try:
        script = fusion_to_script(partial, last_call=call, header=header)
    except Exception:  # a fusion the printer cannot write has no repro
        script = None
    cause = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    message = f"{cause} raised inside pyfuse while tracing {call.split('  #')[0]}"
    path = write_repro(script, op) if script is not None else None
    internal = InternalError(message, where=where, repro=script, repro_path=path)
    internal.op = op
    return internal
