"""skip_intermediates: metadata ops right after fusion inputs become aliases of those inputs.

Expects: a fusion (math IR or a kernel's sub-fusion, before operand caches are made); a
scheduler calls it on the fusion it is about to schedule.

Guarantees, in place:

- A *metadata op* is a PermuteOp, SqueezeOp, BroadcastOp, ExpandOp, a plain LoadStoreOp
  (kind ``set``, same dtype) or a ReshapeOp of a tensor whose memory is row-major and
  contiguous (a view). Its output is aliased when its input is a fusion input or an aliased
  tensor (chains of any length), the output is not a fusion output, and the op moves no data:
  no producer broadcast axis becomes a real axis (a materializing copy), and the output has no
  allocation domain of its own that differs from the one computed here.
- An aliased tensor gets memory type GLOBAL, ``alias_of`` = the fusion input at the root of its
  chain, and an allocation domain that describes that input's memory: each axis of the
  producer's allocation domain is mapped through ``Expr.logical_pairs`` to the consumer, in
  the producer's (physical) order, with the producer's contiguity flags. Broadcast axes born in
  the chain are not allocated; squeezed broadcast axes drop out; a permute keeps the producer's
  physical order; a reshaped view is allocated as its own logical domain, contiguous.
  Lowering reads the root input in place; no global intermediate is written for them.
- A *slice* (SliceOp) of an input or of an alias is aliased too, with its own allocation:
  its windowed axes keep their producer's memory order, a stride times the step
  (:func:`alias_strides`), and the element of index 0 lies :func:`view_offset` elements
  into the input. It is the only way a slice is read, so ``slices_only`` (a fallback plan
  without aliases) still aliases slices.
- A fusion output is never aliased, and the chain stops there: its consumers read the written
  output, not the input (nvFuser aliases past it; stopping is the simple, safe choice).
- A tensor with several uses continues along every use that is a metadata op (nvFuser stops
  unless there is exactly one use). Aliasing is read-only, so any number of readers can read
  the input in place; ``x`` broadcast once for two matmuls stays one alias.
- The math is unchanged (the interpreter ignores memory types and aliases).

Returns the aliased tensors in topological order. Running it again changes nothing.
"""

from __future__ import annotations

from pyfuse.errors import ScheduleError
from pyfuse.ir.caching import cache_before
from pyfuse.ir.exprs import (
    BroadcastOp,
    ExpandOp,
    Expr,
    LoadStoreKind,
    LoadStoreOp,
    PermuteOp,
    ReshapeOp,
    SliceOp,
    SqueezeOp,
)
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.iterdomain import IterDomain
from pyfuse.ir.tensor import MemoryType, TensorView, memory_strides

Allocation = tuple[list[IterDomain], list[bool | None]]


def skip_intermediates(fusion: Fusion, slices_only: bool = False) -> list[TensorView]:
    """Alias the metadata ops right after ``fusion``'s inputs (see the module doc); with
    ``slices_only``, only the slices (and what they view through)."""
    root_of: dict[int, TensorView] = {id(inp): inp for inp in fusion.inputs}
    aliased: list[TensorView] = []
    _copy_viewed_outputs(fusion)
    for expr in fusion.exprs():
        if not is_view_op(expr) or (slices_only and not isinstance(expr, SliceOp)):
            continue
        producer = expr.tensor_inputs[0]
        root = root_of.get(id(producer))
        consumer = expr.output
        if root is None or fusion.is_output(consumer):
            continue
        allocation = view_allocation(expr, producer)
        if allocation is None or not _allocation_agrees(consumer, allocation):
            continue
        axes, contiguity = allocation
        consumer.set_allocation(axes, contiguity)
        consumer.memory_type = MemoryType.GLOBAL
        consumer.alias_of = root
        root_of[id(consumer)] = root
        aliased.append(consumer)
    return aliased


def _copy_viewed_outputs(fusion: Fusion) -> None:
    """An output that is a view of an input (``return x.reshape(-1)``, ``return x.T``) is
    written as a copy of that view: the view becomes an alias read in place, and the kernel's
    loop runs over the output, whose every index the view derives (reading the input's cache
    in registers instead would leave the input's axes outside the output's loop)."""
    for expr in fusion.exprs():
        output = expr.output
        if not fusion.is_output(output) or not is_view_op(expr):
            continue
        if isinstance(expr, LoadStoreOp) or view_source(output).definition is not None:
            continue
        if view_allocation(expr, expr.tensor_inputs[0]) is not None:
            cache_before(fusion, output)


def global_intermediates(fusion: Fusion) -> list[str]:
    """Names (``T<n>``) of tensors in global memory that are neither fusion inputs, fusion
    outputs nor aliases: the buffers a compiled fusion writes besides its outputs."""
    return [
        f"T{tv.name}"
        for tv in fusion.tensors()
        if tv.memory_type == MemoryType.GLOBAL
        and tv.alias_of is None
        and not fusion.is_input(tv)
        and not fusion.is_output(tv)
    ]


def is_metadata_op(expr: Expr) -> bool:
    """An op that only reinterprets its input's memory (when :func:`view_allocation` agrees)."""
    if isinstance(expr, LoadStoreOp):
        return expr.kind == LoadStoreKind.SET
    return isinstance(expr, PermuteOp | SqueezeOp | BroadcastOp | ExpandOp | ReshapeOp)


def is_view_op(expr: Expr) -> bool:
    """A metadata op or a slice: an op whose output :func:`skip_intermediates` may alias."""
    return is_metadata_op(expr) or isinstance(expr, SliceOp)


def view_source(tv: TensorView) -> TensorView:
    """The tensor ``tv`` views through a chain of view ops (metadata ops and slices)."""
    while tv.definition is not None and is_view_op(tv.definition):
        tv = tv.definition.tensor_inputs[0]
    return tv


def reads_in_place(fusion: Fusion, expr: Expr) -> bool:
    """A view of an input that an alias reads in place (what :func:`skip_intermediates`
    will make of it)."""
    return (
        is_view_op(expr)
        and fusion.is_input(view_source(expr.output))
        and view_allocation(expr, expr.tensor_inputs[0]) is not None
    )


def alias_strides(tv: TensorView) -> list[tuple[IterDomain, int]]:
    """(axis, element stride) of each memory axis of ``tv``, outermost first. An alias has
    its producer's strides on the axes its allocation maps them to (a reshaped view has its
    own row-major ones), a slice's windowed axis the stride times its step."""
    definition = tv.definition
    if tv.alias_of is None or isinstance(definition, ReshapeOp):
        return memory_strides(tv)
    producer = definition.tensor_inputs[0] if definition is not None else tv.alias_of
    producer_strides = alias_strides(producer)
    if isinstance(definition, SliceOp):
        window_of = {id(p): (c, step) for p, c, _, step in definition.windows(producer)}
        strides = []
        for axis, stride in producer_strides:
            consumer, step = window_of[id(axis)]
            if not consumer.is_broadcast:
                strides.append((consumer, stride * step))
        return strides
    axes = [a for a in tv.maybe_allocation if not a.is_broadcast]
    if len(axes) != len(producer_strides):
        raise ScheduleError(
            f"alias T{tv.name} has {len(axes)} memory axes but T{producer.name} has "
            f"{len(producer_strides)}"
        )
    return list(zip(axes, [stride for _, stride in producer_strides], strict=True))


def alias_root(tv: TensorView) -> TensorView:
    """The tensor whose memory ``tv`` views through its chain of aliases (``tv`` itself when
    it is no alias)."""
    while tv.alias_of is not None:
        tv = tv.alias_of
    return tv


def view_offset(tv: TensorView) -> int:
    """How many elements into its input's memory an alias's element 0 lies (the slices on
    its chain moved it); 0 for any other tensor."""
    offset = 0
    while tv.alias_of is not None and tv.definition is not None:
        definition = tv.definition
        producer = definition.tensor_inputs[0]
        if isinstance(definition, SliceOp):
            stride_of = {id(axis): stride for axis, stride in alias_strides(producer)}
            offset += sum(
                start * stride_of.get(id(p), 0) for p, _, start, _ in definition.windows(producer)
            )
        tv = producer
    return offset


def metadata_source(tv: TensorView) -> TensorView:
    """The tensor ``tv`` views through a chain of metadata ops: the first one back that an
    input is, or that another kind of op computes."""
    while tv.definition is not None and is_metadata_op(tv.definition):
        tv = tv.definition.tensor_inputs[0]
    return tv


def view_allocation(expr: Expr, producer: TensorView) -> Allocation | None:
    """The allocation domain and contiguity under which ``expr``'s output reads ``producer``'s
    memory in place, or None when ``expr`` moves data."""
    consumer = expr.output
    if consumer.dtype != producer.dtype:
        return None
    if isinstance(expr, SliceOp):
        return _slice_allocation(expr, producer)
    if isinstance(expr, ReshapeOp):
        if not is_row_major_contiguous(producer):
            return None
        axes = [axis for axis in consumer.no_reductions if not axis.is_broadcast]
        return axes, [True] * len(axes)
    pairs = expr.logical_pairs(producer)
    if any(p.is_broadcast and not c.is_broadcast for p, c in pairs):
        return None  # a broadcast made real (materialized): new memory
    consumer_of = {id(p): c for p, c in pairs}
    axes = []
    contiguity: list[bool | None] = []
    for axis, flag in zip(producer.maybe_allocation, producer.maybe_contiguity, strict=True):
        mapped = consumer_of.get(id(axis))
        if mapped is None:
            if axis.is_broadcast:
                continue  # a squeezed broadcast axis takes no memory
            return None  # a real axis with no image: not a view
        axes.append(mapped)
        contiguity.append(flag)
    return axes, contiguity


def _slice_allocation(expr: SliceOp, producer: TensorView) -> Allocation:
    """A slice's allocation: its axes in the producer's memory order (an axis cut to one
    element takes no memory: its start is in the offset). Contiguity is kept only where the
    window keeps it: a step breaks an axis's own, a partial window the next outer one's."""
    window_of = {id(p): (c, start, step) for p, c, start, step in expr.windows(producer)}
    axes: list[IterDomain] = []
    contiguity: list[bool | None] = []
    inner_partial = False
    pairs = list(zip(producer.maybe_allocation, producer.maybe_contiguity, strict=True))
    for axis, flag in reversed(pairs):  # innermost first: a window breaks its outer neighbour
        consumer, start, step = window_of[id(axis)]
        partial = (start, step) != (0, 1) or consumer.logical_extent != axis.logical_extent
        if consumer.is_broadcast and not axis.is_broadcast:
            inner_partial = inner_partial or partial
            continue  # one element left: not allocated
        if not consumer.is_broadcast:
            flag = flag and step == 1 and not inner_partial
        axes.append(consumer)
        contiguity.append(flag)
        inner_partial = partial if not consumer.is_broadcast else inner_partial
    return axes[::-1], contiguity[::-1]


def is_row_major_contiguous(tv: TensorView) -> bool:
    """``tv``'s real axes lie in logical order, each contiguous with the next."""
    allocated = [
        (axis, flag)
        for axis, flag in zip(tv.maybe_allocation, tv.maybe_contiguity, strict=True)
        if not axis.is_broadcast
    ]
    logical = [axis for axis in tv.no_reductions if not axis.is_broadcast]
    same_order = len(allocated) == len(logical) and all(
        axis is expected for (axis, _), expected in zip(allocated, logical, strict=True)
    )
    return same_order and all(flag for _, flag in allocated)


def _allocation_agrees(tv: TensorView, allocation: Allocation) -> bool:
    """True when ``tv`` has no allocation domain yet or exactly ``allocation``: one set by a
    scheduler (a real transpose into a new layout) is a data movement, not a view."""
    if tv.allocation is None:
        return True
    axes, contiguity = allocation
    same_axes = len(tv.allocation) == len(axes) and all(
        mine is theirs for mine, theirs in zip(tv.allocation, axes, strict=True)
    )
    return same_axes and tv.maybe_contiguity == contiguity
