"""Kernels for a normalization whose rows do not fit one kernel: recompute, don't store.

Expects the math IR of a fusion no single scheduler accepted. Where it is a chain of
reductions over pointwise math (a softmax, log_softmax, layer_norm or rms_norm whose rows
exceed the reduction scheduler's persistent budget: a 128256-wide vocabulary), the greedy
walk of :mod:`segment` stores each cut's pointwise tensors and reads them back: a
log_softmax of 128256 columns became 7 to 9 kernels, 4 of them full-size pointwise passes.

Guarantees: :func:`recompute_groups` returns groups of exprs in launch order, one per
reduction (the reduction and every pointwise expr its input is computed by, back to the
fusion's inputs and the outputs of earlier reductions) and one for the outputs (the same
closure of every output that is not a reduction's), consecutive groups merged where one
scheduler takes them together. A pointwise expr may be in several groups: each kernel
recomputes it from the inputs, which it reads again, instead of reading a stored copy.
Only reduction results (one value per row) pass between kernels. (Where a kernel of these
groups fails every plan, the pipeline segments the fusion again without them.) :func:`cost_bytes`
weighs a grouping by the bytes its kernels read and write, for :mod:`segment` to choose
between this grouping and the greedy one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pyfuse.ir.exprs import CatOp, Expr, LinearOp, MatmulOp, MmaOp, ReductionOp, SliceOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.tensor import TensorView

# What a kernel does not recompute: products (a cost of their own), and cats and slices
# (read in place from memory: a computed tensor needs a kernel boundary before them).
_NOT_RECOMPUTED = (MmaOp, MatmulOp, LinearOp, CatOp, SliceOp)


def recompute_groups(
    fusion: Fusion, accepts: Callable[[list[Expr]], bool]
) -> list[list[Expr]] | None:
    """The groups described in the module docstring (each in topological order), or None
    where the fusion is not such a chain: no reduction, or a product, cat or slice.
    ``accepts(group)`` says whether one scheduler takes a group."""
    exprs = fusion.exprs()
    if not any(isinstance(e, ReductionOp) for e in exprs):
        return None
    if any(isinstance(e, _NOT_RECOMPUTED) for e in exprs):
        return None
    order = {id(e): i for i, e in enumerate(exprs)}
    reduced = {id(e.output) for e in exprs if isinstance(e, ReductionOp)}

    def closure(roots: Sequence[TensorView]) -> list[Expr]:
        """The exprs computing ``roots`` back to the inputs and reduction outputs."""
        found: dict[int, Expr] = {}
        frontier = list(roots)
        while frontier:
            tv = frontier.pop()
            definition = tv.definition
            if definition is None or id(definition) in found or id(tv) in reduced:
                continue
            found[id(definition)] = definition
            frontier.extend(definition.tensor_inputs)
        return sorted(found.values(), key=lambda e: order[id(e)])

    groups: list[list[Expr]] = []
    for expr in exprs:
        if isinstance(expr, ReductionOp):
            groups.append([*closure(expr.tensor_inputs), expr])
    outputs = [tv for tv in fusion.outputs if id(tv) not in reduced]
    if outputs:
        groups.append(closure(outputs))
    merged: list[list[Expr]] = []
    for group in groups:
        if merged:
            union = _union(merged[-1], group, order)
            if accepts(union):
                merged[-1] = union
                continue
        merged.append(group)
    return merged


def _union(first: list[Expr], second: list[Expr], order: dict[int, int]) -> list[Expr]:
    members = {id(e): e for e in (*first, *second)}
    return sorted(members.values(), key=lambda e: order[id(e)])


def cost_bytes(
    groups: Sequence[Sequence[Expr]],
    outputs_of: Callable[[int], list[TensorView]],
) -> int:
    """The bytes the kernels of ``groups`` read and write: every tensor a group reads that
    it does not compute, once, and every tensor ``outputs_of(index)`` says it writes."""
    total = 0
    for index, group in enumerate(groups):
        produced = {id(e.output) for e in group}
        read: dict[int, TensorView] = {}
        for expr in group:
            for tv in expr.tensor_inputs:
                if id(tv) not in produced:
                    read[id(tv)] = tv
        for tv in [*read.values(), *outputs_of(index)]:
            total += tv.numel * tv.dtype.itemsize
    return total
