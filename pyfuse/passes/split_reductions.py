"""Split long reductions over few rows into two reductions, so that the whole GPU works on them.

A block reduces one row, so a reduction with fewer rows than the device has SMs leaves most
of the GPU idle, however long the rows are (``x.sum()`` over 2^27 elements would run on one
block). Expects the math IR; guarantees, in place: every sum/max/min whose reduced axes are
the leading or the trailing axes of its input, that has fewer kept elements than
``2 * sm_count``, at least ``MIN_SPLIT_EXTENT`` reduced elements, and whose result is not
broadcast back over its input (a normalization keeps its single persistent kernel), is
rewritten as (kept axes of extent 1 count as neither: they may lie between reduced ones)

    partial = reduce(reshape(input, [..., P, C / P]), the C / P axis)   # P parts per row
    result  = reduce(partial, the P axis)

with the same dtype and values (sum reassociates, as any parallel reduction does). The two
reductions reduce different axes, so the segmenter gives each its own kernel: the first has
``rows * P`` rows. ``P`` divides the reduced extent (no split when only 1 does).
"""

from __future__ import annotations

from pyfuse.ir import layout_ops
from pyfuse.ir import ops as ir_ops
from pyfuse.ir.exprs import ReductionOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.naming import source_location
from pyfuse.ir.target import TargetInfo
from pyfuse.passes.schedule_reduction import broadcast_back
from pyfuse.passes.scheduler_utils import ROWS_PER_SM_TO_FILL

MIN_SPLIT_EXTENT = 8192
MAX_PARTS = 1024
MIN_PART = 64


def _parts(reduced: int, kept: int, inner: bool, target: TargetInfo) -> int:
    """Parts per row: the largest divisor of the reduced extent that gives the first pass
    about two waves of work (blocks for an inner reduction, threads for an outer one, where
    each thread walks a column) and leaves at least ``MIN_PART`` elements per part."""
    work = ROWS_PER_SM_TO_FILL * target.sm_count * (1 if inner else 128)
    wanted = min(MAX_PARTS, max(1, work // max(kept, 1)), reduced // MIN_PART)
    for parts in range(wanted, 1, -1):
        if reduced % parts == 0:
            return parts
    return 1


def split_long_reductions(fusion: Fusion, target: TargetInfo) -> int:
    """Rewrite the reductions described in the module docstring; returns how many."""
    count = 0
    for expr in fusion.exprs():
        if not isinstance(expr, ReductionOp) or broadcast_back(fusion, expr):
            continue
        source = expr.input
        shape = source.shape
        all_flags = [axis.is_reduction for axis in expr.output.logical]
        # A kept axis of extent 1 orders nothing: x.sum((0, 2, 3)) of an (N, 1, H, W) tensor
        # reduces all of it, as one run of memory order.
        flags = [f for f, e in zip(all_flags, shape, strict=True) if f or e != 1]
        n = len(flags)
        reduced_count = sum(flags)
        leading = flags == [True] * reduced_count + [False] * (n - reduced_count)
        trailing = flags == [False] * (n - reduced_count) + [True] * reduced_count
        if not (leading or trailing) or reduced_count == 0:
            continue
        reduced = 1
        for extent, flag in zip(shape, all_flags, strict=True):
            if flag:
                reduced *= extent
        kept = source.numel // max(reduced, 1)
        if reduced < MIN_SPLIT_EXTENT or kept >= ROWS_PER_SM_TO_FILL * target.sm_count:
            continue
        parts = _parts(reduced, kept, trailing, target)
        if parts == 1:
            continue
        kept_shape = [e for e, f in zip(shape, all_flags, strict=True) if not f]
        with fusion, source_location(expr.source):
            if trailing:
                view = layout_ops.reshape(source, [*kept_shape, parts, reduced // parts])
                partial = ir_ops.reduce(expr.op, view, -1)
                result = ir_ops.reduce(expr.op, partial, -1)
            else:
                view = layout_ops.reshape(source, [parts, reduced // parts, *kept_shape])
                partial = ir_ops.reduce(expr.op, view, 1)
                result = ir_ops.reduce(expr.op, partial, 0)
            result = ir_ops.cast(result, expr.output.dtype)
        fusion.replace_uses(expr.output, result)
        expr.unlink()
        count += 1
    return count
