"""IdModel: which IterDomains of a fusion are "the same axis", under four relations.

Expects a fusion (or a list of exprs, or the tensors a pass just scheduled) whose exprs
answer :meth:`Expr.logical_pairs`, whose tensors reach their loop domain from their
logical domain (and, for a reshape, their logical domain from their root) through
``IterDomain.definition`` chains and ``TensorView.history``. Extents are concrete ints.

Guarantees, for the IterDomains of every tensor it was built from (root, logical,
allocation, loop and every IterDomain in between):

- ``EXACT``: producer/consumer pairs whose broadcast-ness agrees (an iteration axis feeding a
  reduction axis counts), closed under replay: two Split/Merge/Swizzle transforms of the same
  kind with all inputs mapped have their outputs mapped, and with all outputs mapped (and input
  pairs of one extent and one broadcast-ness) have their inputs mapped.
- ``BROADCAST``: ``EXACT`` plus the pairs where one side is a broadcast, closed under replay
  (a broadcast input pair may differ in extent). When the MMA operands and output are tiled,
  swizzled or made persistent identically, replay here already maps A's merged
  ``4 * bNo`` to the output's ``4 * No``: the broadcast is a real IterDomain to replay from.
- ``PERMISSIVE``: ``BROADCAST`` plus ``Merge(i, b) ~ i`` (one broadcast input) and
  ``Merge(b1, b2) ~ b1``, closed under replay, for schedules that merge a broadcast in on one
  side only. It is lossy by design:
  after a grid swizzle the swizzle factor, the N tile loop and their merge all land in one
  group, so ask it whether loops may be shared, never how to index.
  Each relation contains the one before it.
- ``LOOP``: the loop axes inlining shares: a producer's loop axes before its inline position
  joined with the consumer loop axes they map to permissively, in order.
  :meth:`IdModel.loop_promotion` names the axis such a shared loop really iterates.

The model is a snapshot: it does not follow later scheduling. Passes rebuild it (cheap) after
they transform loops; asking about an IterDomain it never saw raises ``KeyError``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import Generic, TypeVar

from pyfuse.ir.exprs import Expr
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.iterdomain import IdTransform, IterDomain, Merge, ParallelType
from pyfuse.ir.tensor import TensorView, tensor_transforms

Item = TypeVar("Item")


class DisjointSets(Generic[Item]):
    """Union-find over objects keyed by identity (IterDomains have no value equality).

    Iteration follows insertion order and a group's representative is its earliest-inserted
    member, so everything derived from the sets is deterministic.
    """

    def __init__(self, items: Iterable[Item] = ()) -> None:
        self._items: dict[int, Item] = {}
        self._order: dict[int, int] = {}
        self._parent: dict[int, int] = {}
        for item in items:
            self.add(item)

    def add(self, item: Item) -> None:
        key = id(item)
        if key not in self._items:
            self._items[key] = item
            self._order[key] = len(self._order)
            self._parent[key] = key

    def __contains__(self, item: object) -> bool:
        return id(item) in self._items

    def __len__(self) -> int:
        return len(self._items)

    def _root(self, item: object) -> int:
        key = id(item)
        if key not in self._parent:
            raise KeyError(f"{item} is not in these disjoint sets")
        root = key
        while self._parent[root] != root:
            root = self._parent[root]
        # Path compression keeps repeated queries during the replay fixpoint cheap.
        while self._parent[key] != root:
            self._parent[key], key = root, self._parent[key]
        return root

    def find(self, item: Item) -> Item:
        return self._items[self._root(item)]

    def union(self, a: Item, b: Item) -> bool:
        """Join the groups of ``a`` and ``b`` (adding either if new); True if they were apart."""
        self.add(a)
        self.add(b)
        root_a, root_b = self._root(a), self._root(b)
        if root_a == root_b:
            return False
        if self._order[root_b] < self._order[root_a]:
            root_a, root_b = root_b, root_a
        self._parent[root_b] = root_a
        return True

    def same(self, a: Item, b: Item) -> bool:
        return self._root(a) == self._root(b)

    def groups(self) -> list[tuple[Item, ...]]:
        """Every group, members in insertion order, groups ordered by their first member."""
        by_root: dict[int, list[Item]] = {}
        for item in self._items.values():
            by_root.setdefault(self._root(item), []).append(item)
        return [tuple(members) for members in by_root.values()]

    def copy(self) -> DisjointSets[Item]:
        clone: DisjointSets[Item] = DisjointSets()
        clone._items = dict(self._items)
        clone._order = dict(self._order)
        clone._parent = dict(self._parent)
        return clone


class IdMappingMode(enum.Enum):
    EXACT = "exact"
    BROADCAST = "broadcast"
    PERMISSIVE = "permissive"
    LOOP = "loop"


# Loops a producer must keep to itself: a vectorized access or a TMA (bulk) box is issued by
# the producer as one instruction, so no consumer loop can sit around part of it.
_NOT_INLINABLE = frozenset({ParallelType.VECTORIZE, ParallelType.BULK})


def _by_name(axes: Iterable[IterDomain]) -> tuple[IterDomain, ...]:
    return tuple(sorted(axes, key=lambda axis: axis.name))


class IdModel:
    """The EXACT, BROADCAST, PERMISSIVE and LOOP relations over a fusion's IterDomains."""

    def __init__(
        self, source: Fusion | Sequence[Expr], *, tensors: Sequence[TensorView] = ()
    ) -> None:
        if isinstance(source, Fusion):
            self.exprs: list[Expr] = source.exprs()
            extra = [*source.inputs, *source.outputs, *tensors]
        else:
            self.exprs = list(source)
            extra = list(tensors)
        self.tensors = self._collect_tensors(extra)
        self.transforms: list[IdTransform] = []
        self._owner: dict[int, int] = {}  # loop IterDomain -> index of its tensor
        axes = self._collect_axes()

        exact_pairs, broadcast_pairs = self._logical_pairs()
        exact = DisjointSets(axes)
        for a, b in exact_pairs:
            exact.union(a, b)
        _replay(exact, self.transforms, allow_broadcast=False)

        broadcast = exact.copy()
        for a, b in broadcast_pairs:
            broadcast.union(a, b)
        _replay(broadcast, self.transforms, allow_broadcast=True)

        permissive = broadcast.copy()
        for transform in self.transforms:
            forwarded = _forwarded_input(transform)
            if forwarded is not None:
                permissive.union(transform.outputs[0], forwarded)
        _replay(permissive, self.transforms, allow_broadcast=True)

        self._sets: dict[IdMappingMode, DisjointSets[IterDomain]] = {
            IdMappingMode.EXACT: exact,
            IdMappingMode.BROADCAST: broadcast,
            IdMappingMode.PERMISSIVE: permissive,
        }
        self._sets[IdMappingMode.LOOP] = self._build_loop(axes)
        self._group_cache: dict[IdMappingMode, dict[int, tuple[IterDomain, ...]]] = {}
        self._promotion = self._build_promotion()

    @classmethod
    def from_tensors(cls, tensors: Sequence[TensorView]) -> IdModel:
        """A model of ``tensors`` and the exprs defining them (their producers join in through
        those exprs): what a pass that just scheduled these tensors needs."""
        exprs: dict[int, Expr] = {}
        for tv in tensors:
            if tv.definition is not None:
                exprs.setdefault(id(tv.definition), tv.definition)
        return cls(list(exprs.values()), tensors=tensors)

    # -- building -----------------------------------------------------------------------------
    def _collect_tensors(self, extra: Sequence[TensorView]) -> list[TensorView]:
        found: dict[int, TensorView] = {}
        for expr in self.exprs:
            for val in (*expr.inputs, *expr.outputs):
                if isinstance(val, TensorView):
                    found.setdefault(id(val), val)
        for tv in extra:
            found.setdefault(id(tv), tv)
        return list(found.values())

    def _collect_axes(self) -> list[IterDomain]:
        axes: dict[int, IterDomain] = {}
        transforms: dict[int, IdTransform] = {}
        for index, tv in enumerate(self.tensors):
            tv_transforms = tensor_transforms(tv)
            between = [axis for t in tv_transforms for axis in (*t.inputs, *t.outputs)]
            domains = [*tv.maybe_root, *tv.logical, *between, *tv.loop, *(tv.allocation or [])]
            for axis in domains:
                axes.setdefault(id(axis), axis)
            for transform in tv_transforms:
                transforms.setdefault(id(transform), transform)
            for axis in tv.loop:
                self._owner.setdefault(id(axis), index)
        self.transforms = list(transforms.values())
        return list(axes.values())

    def _logical_pairs(
        self,
    ) -> tuple[list[tuple[IterDomain, IterDomain]], list[tuple[IterDomain, IterDomain]]]:
        exact: list[tuple[IterDomain, IterDomain]] = []
        broadcast_only: list[tuple[IterDomain, IterDomain]] = []
        for expr in self.exprs:
            for producer in expr.tensor_inputs:
                for p_axis, c_axis in expr.logical_pairs(producer):
                    if p_axis.is_broadcast == c_axis.is_broadcast:
                        exact.append((p_axis, c_axis))
                    else:
                        broadcast_only.append((p_axis, c_axis))
        return exact, broadcast_only

    def _build_loop(self, axes: Sequence[IterDomain]) -> DisjointSets[IterDomain]:
        permissive = self._sets[IdMappingMode.PERMISSIVE]
        loop = DisjointSets(axes)
        for expr in self.exprs:
            consumers = [out for out in expr.outputs if isinstance(out, TensorView)]
            for producer in expr.tensor_inputs:
                for consumer in consumers:
                    for p_axis, c_axis in _inlined_pairs(producer, consumer, permissive):
                        loop.union(p_axis, c_axis)
        return loop

    def _build_promotion(self) -> dict[int, IterDomain]:
        promotion: dict[int, IterDomain] = {}
        for group in self._sets[IdMappingMode.LOOP].groups():
            if len(group) == 1:
                continue
            concrete = min(group, key=self._promotion_rank)
            for axis in group:
                promotion[id(axis)] = concrete
        return promotion

    def _promotion_rank(self, axis: IterDomain) -> tuple[bool, int, int, int]:
        # A shared loop iterates the concrete axis covering the others: not a broadcast, the
        # largest extent, the latest tensor in the model (a consumer, whose loop nest the
        # producers sit in), then the lowest name so the choice never depends on hashing.
        owner = self._owner.get(id(axis), -1)
        return (axis.is_broadcast, -axis.extent, -owner, axis.name)

    # -- queries ------------------------------------------------------------------------------
    def _relation(self, axis: IterDomain, mode: IdMappingMode) -> DisjointSets[IterDomain]:
        sets = self._sets[mode]
        if axis not in sets:
            raise KeyError(f"{axis} is not in this IdModel; rebuild the IdModel after scheduling")
        return sets

    def mapped(
        self, a: IterDomain, b: IterDomain, mode: IdMappingMode = IdMappingMode.EXACT
    ) -> bool:
        self._relation(b, mode)
        return self._relation(a, mode).same(a, b)

    def group(
        self, axis: IterDomain, mode: IdMappingMode = IdMappingMode.EXACT
    ) -> tuple[IterDomain, ...]:
        """The IterDomains mapped to ``axis`` (itself included), ordered by name."""
        sets = self._relation(axis, mode)
        cache = self._group_cache.get(mode)
        if cache is None:
            cache = {id(members[0]): _by_name(members) for members in sets.groups()}
            self._group_cache[mode] = cache
        return cache[id(sets.find(axis))]

    def groups(self, mode: IdMappingMode = IdMappingMode.EXACT) -> list[tuple[IterDomain, ...]]:
        """Every group of ``mode``, members ordered by name, groups by their first member."""
        return sorted((_by_name(g) for g in self._sets[mode].groups()), key=lambda g: g[0].name)

    def loop_promotion(self, axis: IterDomain) -> IterDomain:
        """The IterDomain the loop of ``axis`` really iterates (``axis`` itself if not shared)."""
        self._relation(axis, IdMappingMode.LOOP)
        return self._promotion.get(id(axis), axis)

    def consumers_of(self, producer: TensorView) -> list[TensorView]:
        found: dict[int, TensorView] = {}
        for expr in self.exprs:
            if any(inp is producer for inp in expr.tensor_inputs):
                for out in expr.outputs:
                    if isinstance(out, TensorView):
                        found.setdefault(id(out), out)
        return list(found.values())

    def max_inline_position(
        self,
        producer: TensorView,
        consumer: TensorView | None = None,
        mode: IdMappingMode = IdMappingMode.PERMISSIVE,
    ) -> int:
        """The largest k such that each of ``producer``'s first k loop axes maps in ``mode`` to
        ``consumer``'s loop axis at the same position (all of the producer's consumers in this
        model when ``consumer`` is None). It stops at a reduction axis of the producer (its
        loop must close before the value is complete), at a vectorized or bulk (TMA) axis, and
        at the first axis that does not map."""
        consumers = self.consumers_of(producer) if consumer is None else [consumer]
        position = 0
        for index, p_axis in enumerate(producer.loop):
            if p_axis.is_reduction or p_axis.parallel_type in _NOT_INLINABLE:
                break
            if not all(
                index < len(c.loop) and self.mapped(p_axis, c.loop[index], mode) for c in consumers
            ):
                break
            position += 1
        return position

    def unmapped_axes(
        self,
        producer: TensorView,
        consumer: TensorView,
        mode: IdMappingMode = IdMappingMode.PERMISSIVE,
    ) -> list[IterDomain]:
        """``producer``'s loop axes that map in ``mode`` to none of ``consumer``'s loop axes."""
        return [
            p_axis
            for p_axis in producer.loop
            if not any(self.mapped(p_axis, c_axis, mode) for c_axis in consumer.loop)
        ]

    def __str__(self) -> str:
        lines = [f"IdModel: {len(self._sets[IdMappingMode.EXACT])} IterDomains"]
        for mode in IdMappingMode:
            groups = [g for g in self.groups(mode) if len(g) > 1]
            singles = len(self._sets[mode]) - sum(len(g) for g in groups)
            lines.append(f"{mode.name} ({len(groups)} groups, {singles} unmapped):")
            for group in groups:
                line = f"  {{{', '.join(str(axis) for axis in group)}}}"
                if mode == IdMappingMode.LOOP:
                    line += f" -> {self.loop_promotion(group[0])}"
                lines.append(line)
        return "\n".join(lines)


# ---- relation building ------------------------------------------------------------------------


def _forwarded_input(transform: IdTransform) -> IterDomain | None:
    """The non-broadcast input of a Merge with exactly one broadcast input, the outer one of a
    Merge of two broadcasts, else None.

    Merging an axis with a broadcast does not change what it iterates, so PERMISSIVE treats
    ``Merge(i, b)`` as ``i``; this is the step that lets a grid swizzle of an operand's broadcast
    tile axis still map to the output's swizzled axis. A Merge of two broadcasts is the one
    element of either: as its outer, it lets a tensor that lacks the inner one (a decode
    GEMV's ``x[1, K]`` before its broadcast against ``W[N, K]``) be inlined where the reference
    merges ``[1, N]`` into its rows.
    """
    if not isinstance(transform, Merge):
        return None
    outer, inner = transform.inputs
    if outer.is_broadcast and inner.is_broadcast:
        return outer
    if outer.is_broadcast == inner.is_broadcast:
        return None
    return inner if outer.is_broadcast else outer


def _replay(
    sets: DisjointSets[IterDomain], transforms: Sequence[IdTransform], *, allow_broadcast: bool
) -> None:
    """Close ``sets`` under forward and backward replay of ``transforms``."""
    changed = True
    while changed:
        forward = _replay_once(sets, transforms, forward=True, allow_broadcast=allow_broadcast)
        backward = _replay_once(sets, transforms, forward=False, allow_broadcast=allow_broadcast)
        changed = forward or backward


def _replay_once(
    sets: DisjointSets[IterDomain],
    transforms: Sequence[IdTransform],
    *,
    forward: bool,
    allow_broadcast: bool,
) -> bool:
    # Bucket transforms by type and the groups of the side already known to match; within a
    # bucket, same_kind transforms get their other side mapped. Keys made before a union in
    # this sweep may go stale; the caller sweeps again until nothing changes.
    buckets: dict[tuple[object, ...], list[IdTransform]] = {}
    changed = False
    for transform in transforms:
        known = transform.inputs if forward else transform.outputs
        key = (type(transform), *(id(sets.find(axis)) for axis in known))
        bucket = buckets.setdefault(key, [])
        match = None
        for other in bucket:
            if other.same_kind(transform) and (
                forward or _inputs_compatible(other, transform, allow_broadcast)
            ):
                match = other
                break
        if match is None:
            bucket.append(transform)
            continue
        targets = zip(
            match.outputs if forward else match.inputs,
            transform.outputs if forward else transform.inputs,
            strict=True,
        )
        for a, b in targets:
            changed = sets.union(a, b) or changed
    return changed


def _inputs_compatible(a: IdTransform, b: IdTransform, allow_broadcast: bool) -> bool:
    # Equal merge outputs do not make equal inputs ([4, 6] and [6, 4] both merge to 24), so
    # backward replay also needs each input pair to have one extent; and EXACT must not pair a
    # broadcast with an iteration axis (Merge(i2, b1) and Merge(i2, i1) are both i2).
    for x, y in zip(a.inputs, b.inputs, strict=True):
        if x.is_broadcast != y.is_broadcast:
            if not allow_broadcast:
                return False
        elif x.extent != y.extent:
            return False
    return True


def _inlined_pairs(
    producer: TensorView, consumer: TensorView, permissive: DisjointSets[IterDomain]
) -> list[tuple[IterDomain, IterDomain]]:
    """Producer loop axes before its inline position, each with the next consumer loop axis
    (in order, never reusing one) it maps to permissively. Stops at the first axis with no
    partner: an inline position past it is invalid, which the inliner reports, not this model."""
    pairs: list[tuple[IterDomain, IterDomain]] = []
    cursor = 0
    for p_axis in producer.loop[: producer.inline_position]:
        for index in range(cursor, len(consumer.loop)):
            if permissive.same(p_axis, consumer.loop[index]):
                pairs.append((p_axis, consumer.loop[index]))
                cursor = index + 1
                break
        else:
            break
    return pairs
