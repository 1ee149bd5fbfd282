"""Reductions over no elements: their identity, without a kernel that reads nothing.

A reduction whose input has no element but whose output has some (``sum(x, 1)`` of an
``x[4, 0]``) leaves the reduction's identity in every output element: 0 for a sum (the
mean's NaN follows from its multiply by 1/0). A loop of no trips over a reference of no
elements is what the schedulers meet least and get wrong most, so this pass states the
result instead: the reduction's uses read a ``full`` tensor of the identity. (max and min
of an empty dim raise at trace, as in torch.)

Expects the math IR. Guarantees: no ReductionOp of the result reads a tensor of no elements
while writing one of some; the values are unchanged.
"""

from __future__ import annotations

from pyfuse.ir import ops as ir_ops
from pyfuse.ir.exprs import ReductionOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.naming import source_location
from pyfuse.passes.lower import reduction_init


def fold_empty_reductions(fusion: Fusion) -> int:
    """Replace the reductions (module docstring) in place; returns how many were replaced."""
    count = 0
    for expr in fusion.exprs():
        if not isinstance(expr, ReductionOp):
            continue
        out = expr.output
        if expr.input.numel > 0 or out.numel == 0:
            continue
        identity = reduction_init(expr.op, out.dtype)
        with fusion, source_location(expr.source):
            filled = ir_ops.full(out.shape, identity, out.dtype)
        fusion.replace_uses(out, filled)  # output slots too: an output keeps its place
        expr.unlink()
        count += 1
    return count
