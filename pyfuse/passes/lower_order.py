"""The order in which lowering computes a kernel's exprs: what may go before the reductions.

Expects the exprs of a scheduled kernel fusion in a topological order. Guarantees:
:func:`side_branches` names the exprs that neither read a reduction's result (directly or
through other exprs) nor feed an expr that does. Computing those before the first
reduction (``passes/lower.py`` does) keeps a valid order, and a row's side output
(``tril(x)`` beside ``amax(expm1(x))``) no longer holds the row's registers across the
reduction; what the exprs after a reduction read keeps its place, since computed early it
would be held across the reduction instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyfuse.ir.exprs import Expr, ReductionOp


def side_branches(exprs: Sequence[Expr]) -> set[int]:
    """The ids of the exprs of ``exprs`` (topologically ordered) that neither read a
    reduction's result (directly or not) nor feed an expr that does: what a kernel with
    reductions may compute before the first of them (none without a reduction)."""
    if not any(isinstance(expr, ReductionOp) for expr in exprs):
        return set()
    tainted: set[int] = set()
    after: set[int] = set()
    for expr in exprs:
        if isinstance(expr, ReductionOp) or any(id(tv) in tainted for tv in expr.tensor_inputs):
            after.add(id(expr))
            tainted.update(id(out) for out in expr.outputs)
    # What the exprs after a reduction read (a layer_norm's weight and its cast) keeps its
    # place: computed early, it would be held across the reduction instead.
    feeding: set[int] = set()
    for expr in reversed(exprs):
        if id(expr) in after or any(id(out) in feeding for out in expr.outputs):
            feeding.update(id(tv) for tv in expr.tensor_inputs)
    return {
        id(expr)
        for expr in exprs
        if id(expr) not in after and not any(id(out) in feeding for out in expr.outputs)
    }
