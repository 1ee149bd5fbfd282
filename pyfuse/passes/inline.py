"""Inlining: choose each tensor's inline (compute-at) position from the IdModel.

Expects a scheduled kernel fusion: loop domains replayed so that positions line up.
Guarantees: every tensor that is neither a fusion input nor a fusion output gets the
largest inline position its consumers allow (maximal inlining), where

- position ``i`` is allowed when the tensor's loop axis ``i`` maps (PERMISSIVE) to
  axis ``i`` of every consumer, stopping at the tensor's own reduction axes (the loop
  must close before the value is complete) and at vectorized or bulk axes;
- a *persistent* tensor, one read both on the way into a reduction and, by another
  path, after it (the row softmax and layer_norm read before and after their
  reductions), stops before that reduction's first reduction axis: its loop must not
  be shared with the reduction loop, since its later readers need the finished
  reduction;
- a tensor that is broadcast along a consumer's unrolled loop (its axis there is a
  broadcast, the consumer's is not) stops before that loop: its value is the same in every
  iteration, so it is computed (a global input: loaded) once, outside the loop. This is
  how the pointwise scheduler's 2-D schedule reads ``bias[N]`` once per thread for all
  the rows the thread walks;
- a tensor read by consumers computed in different loop nests keeps only the block and
  thread indices in common with them and lives in registers of its own nest;
- inputs and outputs stay at position 0: they live in global memory.

The LOOP relation of an IdModel built after this pass follows these positions.
"""

from __future__ import annotations

from pyfuse.ir.exprs import Expr, ReductionOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.id_model import IdModel
from pyfuse.ir.iterdomain import ParallelType
from pyfuse.ir.tensor import MemoryType, TensorView


def _downstream(fusion: Fusion, start: TensorView, skip: Expr | None) -> set[int]:
    """Ids of tensors reachable from ``start`` through uses, not passing through ``skip``."""
    seen: set[int] = set()
    frontier = [start]
    while frontier:
        tv = frontier.pop()
        for use in fusion.uses_in_fusion(tv):
            if use is skip:
                continue
            out = use.output
            if id(out) not in seen:
                seen.add(id(out))
                frontier.append(out)
    return seen


def persistent_limit(fusion: Fusion, tv: TensorView) -> int | None:
    """The position a persistent tensor must stop at, or None when ``tv`` is not persistent.

    Only a tensor read by two exprs can be needed by two loop nests: one with a single
    consumer is computed inside that consumer's nest (which is itself persistent when the
    value must outlive the reduction). Inlining it there also gives it the consumer's loop
    extents: a rank-1 weight kept on a nest of its own would run its own, shorter loop."""
    if len(fusion.uses_in_fusion(tv)) < 2:
        return None
    limit: int | None = None
    for expr in fusion.exprs():
        if not isinstance(expr, ReductionOp):
            continue
        reduction = expr.output
        feeds = tv is expr.input or id(expr.input) in _downstream(fusion, tv, None)
        if not feeds:
            continue
        after = _downstream(fusion, reduction, None)
        if _downstream(fusion, tv, expr) & after:
            first = next(
                (i for i, axis in enumerate(reduction.loop) if axis.is_reduction),
                len(reduction.loop),
            )
            limit = first if limit is None else min(limit, first)
    return limit


def hoist_limit(tv: TensorView, consumers: list[TensorView]) -> int | None:
    """The first loop position where ``tv`` is broadcast while a consumer runs an unrolled
    loop there (one that is not a broadcast), or None. Only unrolled loops count, which only
    the pointwise scheduler makes: the serial loops of the reduction and matmul schedules
    keep the placement the other rules give them."""
    for index, axis in enumerate(tv.loop):
        if not axis.is_broadcast or axis.parallel_type.is_hardware_index:
            continue
        for consumer in consumers:
            if index >= len(consumer.loop):
                continue
            other = consumer.loop[index]
            if other.parallel_type == ParallelType.UNROLL and not other.is_broadcast:
                return index
    return None


def _shares_loops(tv: TensorView) -> bool:
    return any(not a.parallel_type.is_hardware_index for a in tv.loop[: tv.inline_position])


def _hardware_prefix(tv: TensorView) -> int:
    count = 0
    for axis in tv.loop:
        if not axis.parallel_type.is_hardware_index:
            break
        count += 1
    return min(count, tv.inline_position)


def _nest_root(tv: TensorView, id_model: IdModel) -> TensorView:
    """The tensor whose loop nest ``tv`` is computed in (following inlined consumers)."""
    seen: set[int] = set()
    while _shares_loops(tv) and id(tv) not in seen:
        seen.add(id(tv))
        consumers = id_model.consumers_of(tv)
        if not consumers:
            break
        tv = consumers[0]
    return tv


def _separate_split_consumers(fusion: Fusion, id_model: IdModel) -> None:
    """A tensor inlined into consumers that live in different loop nests cannot share a loop
    with all of them; keep it in registers of its own nest instead (repeat until stable)."""
    changed = True
    while changed:
        changed = False
        for tv in fusion.tensors():
            consumers = id_model.consumers_of(tv)
            if len(consumers) < 2 or not _shares_loops(tv):
                continue
            roots = {id(_nest_root(c, id_model)) for c in consumers}
            if len(roots) > 1:
                tv.inline_at(_hardware_prefix(tv))
                changed = True


def inline_most(fusion: Fusion) -> None:
    """Set the inline position of every intermediate tensor of ``fusion`` in place."""
    id_model = IdModel(fusion)
    for tv in fusion.tensors():
        if fusion.is_input(tv) or fusion.is_output(tv) or tv.memory_type == MemoryType.GLOBAL:
            tv.inline_position = 0
            continue
        consumers = id_model.consumers_of(tv)
        if not consumers:
            continue
        position = id_model.max_inline_position(tv)
        for limit in (persistent_limit(fusion, tv), hoist_limit(tv, consumers)):
            if limit is not None:
                position = min(position, limit)
        tv.inline_at(position)
    _separate_split_consumers(fusion, id_model)
