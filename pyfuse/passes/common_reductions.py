"""Common reductions: one reduction where the trace made two of the same values.

A trace repeats work the user wrote once: a softmax's row max beside the user's own
``amax(x)``, a variance and a standard deviation of one row, ``x.float()`` written out and
again by a type promotion before two sums. A repeated reduction is a second pass over the
row and a second all-reduce across the block.

Only reductions are merged. Two elementwise exprs of the same values (two casts of one
input) stay two: a kernel recomputes such a value from memory where it needs it, and one
shared copy held across a reduction can need more registers than the two did (a
logsumexp's input cast, read again after both reductions, made a row of two persistent
tensors that the reduction scheduler declined).

Expects the math IR. Guarantees: no two live ReductionOps compute the same values (same
kind, parameters and output axes, inputs computing the same values: equal by value
numbering through every expr, constants by value and dtype, floats by their bits), unless
both are fusion outputs; every use of a dropped reduction reads the kept
one (an output slot too, unless both are outputs); values are unchanged.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable

from pyfuse.ir.exprs import Expr, ReductionOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.iterdomain import IterDomain
from pyfuse.ir.tensor import Scalar, TensorView

_GRAPH_FIELDS = frozenset({"inputs", "outputs", "source"})


def merge_common_reductions(fusion: Fusion) -> int:
    """Drop the repeated reductions (module docstring) in place; returns how many."""
    # Value numbers: a tensor's number is the first tensor computed the same way.
    number: dict[int, int] = {}
    first_of: dict[Hashable, TensorView] = {}
    dropped = 0
    for expr in fusion.exprs():  # topological: an expr's inputs are numbered before it
        key = _key(expr, number)
        if key is None or len(expr.outputs) != 1:
            continue
        first = first_of.setdefault(key, expr.output)
        number[id(expr.output)] = id(first)
        if first is expr.output or (fusion.is_output(expr.output) and fusion.is_output(first)):
            continue  # (two outputs keep their own tensors; one moves to the kept one's)
        if isinstance(expr, ReductionOp):
            fusion.replace_uses(expr.output, first)
            expr.unlink()
            dropped += 1
    return dropped


def _key(expr: Expr, number: dict[int, int]) -> Hashable | None:
    """What makes two exprs compute the same values, given the inputs' value numbers; None
    where that cannot be told (a parameter of a kind not compared here)."""
    parameters = []
    for name, value in sorted(vars(expr).items()):
        if name in _GRAPH_FIELDS:
            continue
        if not _plain(value):
            return None
        parameters.append((name, _frozen(value)))
    inputs: list[Hashable] = []
    for value in expr.inputs:
        if isinstance(value, Scalar):
            inputs.append(("constant", value.dtype, _frozen(value.value)))
        else:
            inputs.append(number.get(id(value), id(value)))
    out = expr.output
    root = None if out.root is None else tuple(_axis(a) for a in out.root)
    axes = tuple(_axis(a) for a in out.logical)
    return (type(expr), expr.attributes(), tuple(parameters), tuple(inputs), out.dtype, axes, root)


def _axis(axis: IterDomain) -> Hashable:
    return (axis.extent, axis.expanded_extent, axis.is_reduction, axis.is_broadcast)


def _plain(value: object) -> bool:
    """A parameter compared by value: numbers, strings, enums, None, and tuples or lists of
    them."""
    if value is None or isinstance(value, bool | int | float | str | enum.Enum):
        return True
    if isinstance(value, tuple | list):
        return all(_plain(item) for item in value)
    return False


def _frozen(value: object) -> Hashable:
    """``value`` as a key: its type beside it (1, 1.0 and True are equal in Python), and a
    float by its bits (0.0 and -0.0 are equal too, and NaN equals nothing)."""
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(_frozen(item) for item in value))
    if isinstance(value, float):
        return ("float", value.hex())
    return (type(value).__name__, value)
