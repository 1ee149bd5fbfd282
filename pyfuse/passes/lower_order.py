"""The order in which lowering computes a kernel's exprs: what may go before the reductions.

Expects the exprs of a scheduled kernel fusion in a topological order. Guarantees:
:func:`lowering_order` is a topological order of them built from the two sets below;
:func:`side_branches` names the exprs that neither read a reduction's result (directly or
through other exprs) nor feed an expr that does. Computing those before the first
reduction (:func:`lowering_order` does) keeps a valid order, and a row's side output
(``tril(x)`` beside ``amax(expm1(x))``) no longer holds the row's registers across the
reduction. :func:`only_after_reductions` names the exprs that read no reduction's result
and feed only exprs that do; computing each right before its first reader (as
:func:`lowering_order` does) keeps a valid order too, and an input's register copy that
only a row's epilogue reads is not held across the reductions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pyfuse.ir.exprs import Expr, ReductionOp
from pyfuse.ir.tensor import TensorView


def lowering_order(exprs: Sequence[Expr], shares_loops: Callable[[TensorView], bool]) -> list[Expr]:
    """The order in which lowering computes ``exprs`` (topologically ordered): one in which
    the exprs computed inside one loop nest are adjacent (for each expr, first everything its
    inlined producers need from outside the nest, then the inlined producers themselves, then
    the expr), side branches first and what only the exprs after the reductions read right
    before its first reader. ``shares_loops(tv)``: ``tv`` is computed inside a serial loop of
    its consumers."""
    live = {id(e) for e in exprs}
    order: list[Expr] = []
    emitted: set[int] = set()

    def inlined_group(expr: Expr) -> list[Expr]:
        group: list[Expr] = []
        stack = [expr]
        while stack:
            current = stack.pop()
            if id(current) in emitted or current in group:
                continue
            group.append(current)
            for tv in current.tensor_inputs:
                producer = tv.definition
                if producer is not None and id(producer) in live and shares_loops(tv):
                    stack.append(producer)
        return group

    def emit(expr: Expr) -> None:
        if id(expr) in emitted:
            return
        group = inlined_group(expr)
        members = {id(e) for e in group}
        # What only the exprs after the reductions read, in the order of the fusion.
        wanted = {
            id(tv.definition)
            for member in group
            for tv in member.tensor_inputs
            if tv.definition is not None and id(tv.definition) in deferred
        }
        if wanted:
            for candidate in exprs:
                if id(candidate) in wanted and id(candidate) not in members:
                    emit(candidate)
        for member in group:
            for tv in member.tensor_inputs:
                producer = tv.definition
                if producer is not None and id(producer) in live and id(producer) not in members:
                    emit(producer)
        for member in exprs:  # the group in topological order
            if id(member) in members and id(member) not in emitted:
                emitted.add(id(member))
                order.append(member)

    # Start from the exprs whose results are not computed inside a consumer's loops; each
    # pulls in the exprs inlined into it. Side branches go first: a side output of a
    # row (``tril(x)`` beside ``amax(expm1(x))``) is then computed while the row's
    # elements are live for the reduction anyway, instead of holding them in registers
    # across it (76 B spilled at 37 elements a thread: the CPU fuzzer, seed 1421). What only
    # the exprs after the reductions read waits for its first reader: an input's register
    # copy made at the start held 31 float64 a thread across a logsumexp beside the row's own
    # arrays (8 B spilled at 512 threads: the CPU fuzzer, seed 1443).
    side = side_branches(exprs)
    deferred = only_after_reductions(exprs)
    starts = [e for e in exprs if id(e) in side]
    starts += [e for e in exprs if id(e) not in side]
    for expr in starts:
        if not shares_loops(expr.output) and id(expr) not in deferred:
            emit(expr)
    for expr in starts:
        emit(expr)
    return order


def side_branches(exprs: Sequence[Expr]) -> set[int]:
    """The ids of the exprs of ``exprs`` (topologically ordered) that neither read a
    reduction's result (directly or not) nor feed an expr that does: what a kernel with
    reductions may compute before the first of them (none without a reduction)."""
    if not any(isinstance(expr, ReductionOp) for expr in exprs):
        return set()
    after = _reading_reductions(exprs) | {
        id(expr) for expr in exprs if isinstance(expr, ReductionOp)
    }
    # What the exprs after a reduction read (a layer_norm's weight and its cast) is not a
    # side branch: computed early, it would be held across the reduction instead.
    feeding: set[int] = set()
    for expr in reversed(exprs):
        if id(expr) in after or any(id(out) in feeding for out in expr.outputs):
            feeding.update(id(tv) for tv in expr.tensor_inputs)
    return {
        id(expr)
        for expr in exprs
        if id(expr) not in after and not any(id(out) in feeding for out in expr.outputs)
    }


def only_after_reductions(exprs: Sequence[Expr]) -> set[int]:
    """The ids of the exprs of ``exprs`` (topologically ordered) that read no reduction's
    result and feed only exprs that do (an input's register copy read by a row's epilogue):
    computed where their first reader needs them, they are not held across the reductions."""
    if not any(isinstance(expr, ReductionOp) for expr in exprs):
        return set()
    after = _reading_reductions(exprs)
    readers: dict[int, list[Expr]] = {}
    for expr in exprs:
        for tv in expr.tensor_inputs:
            readers.setdefault(id(tv), []).append(expr)
    only_after: set[int] = set()
    for expr in reversed(exprs):
        if id(expr) in after or isinstance(expr, ReductionOp):
            continue
        uses = [use for out in expr.outputs for use in readers.get(id(out), [])]
        if uses and all(id(use) in after or id(use) in only_after for use in uses):
            only_after.add(id(expr))
    return only_after


def _reading_reductions(exprs: Sequence[Expr]) -> set[int]:
    """The ids of the exprs that read a reduction's result, directly or through other exprs
    (a reduction of a row before any other is not one of them)."""
    tainted: set[int] = set()
    reading: set[int] = set()
    for expr in exprs:
        if any(id(tv) in tainted for tv in expr.tensor_inputs):
            reading.add(id(expr))
        if id(expr) in reading or isinstance(expr, ReductionOp):
            tainted.update(id(out) for out in expr.outputs)
    return reading
