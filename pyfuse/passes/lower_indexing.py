"""Index derivation for lowering: from loop indices to every tensor's element.

The mixin :class:`IndexDerivation` holds what :mod:`pyfuse.passes.lower` (and the matmul
lowering built on it) needs to turn loop positions into indices: which reference loop
position each tensor axis replays, the reference's logical indices (its splits and merges
walked backwards), each tensor's logical index through the IdModel, producers' indices
through the op's axis map, global offsets from memory strides, register and shared-memory
buffer indices, and the predicates that guard ragged splits and oversized launch
dimensions. It expects the attributes listed on the class, set by the lowering.
"""

from __future__ import annotations

from pyfuse.errors import ScheduleError
from pyfuse.ir import kernel_ir as k
from pyfuse.ir.dtypes import DType
from pyfuse.ir.exprs import Expr
from pyfuse.ir.id_model import IdMappingMode, IdModel
from pyfuse.ir.iterdomain import IterDomain, Merge, ParallelType, Reorder, Split, Swizzle
from pyfuse.ir.tensor import MemoryType, TensorView, tensor_transforms
from pyfuse.passes.skip_intermediates import alias_strides, view_offset


class IndexDerivation:
    """Index and predicate computation over a scheduled kernel fusion (see the module doc)."""

    name: str
    reference: TensorView
    id_model: IdModel
    index_dtype: DType
    launch: dict[ParallelType, int]
    specials: dict[ParallelType, k.Var]
    ref_positions: dict[int, list[int | None]]
    varies_along: dict[tuple[int, int], bool]
    window_anchors: dict[int, TensorView | None]
    window_candidates: list[TensorView]  # the kernel's global tensors, in a fixed order

    def _allocated_axes(self, tv: TensorView) -> list[IterDomain]:
        """Loop axes right of the inline position that give a tensor's buffer its size."""
        axes = []
        for axis in tv.loop[tv.inline_position :]:
            if axis.is_reduction or axis.extent == 1:
                continue
            if axis.parallel_type.is_block_dim:
                continue
            if tv.memory_type == MemoryType.LOCAL and axis.parallel_type.is_thread_dim:
                continue
            axes.append(axis)
        return axes

    # -- positions and indices ----------------------------------------------------------------
    def _ref_positions(self, tv: TensorView) -> list[int | None]:
        """For each loop axis of ``tv``, the reference loop position it replays."""
        cached = self.ref_positions.get(id(tv))
        if cached is not None:
            return cached
        ref_loop = self.reference.loop
        # The strictest relation first for every axis (see transform_replay._logical_map):
        # a looser match taken early would steal the position another axis maps to exactly.
        found: dict[int, int] = {}
        used: set[int] = set()
        for mode in (IdMappingMode.EXACT, IdMappingMode.BROADCAST, IdMappingMode.PERMISSIVE):
            for index, axis in enumerate(tv.loop):
                if index in found:
                    continue
                for position, ref_axis in enumerate(ref_loop):
                    if position not in used and self.id_model.mapped(axis, ref_axis, mode):
                        found[index] = position
                        used.add(position)
                        break
        positions: list[int | None] = [found.get(index) for index in range(len(tv.loop))]
        self.ref_positions[id(tv)] = positions
        return positions

    def _reference_indices(self, by_position: dict[int, k.KExpr]) -> dict[int, k.KExpr]:
        """Index of every axis of the reference (loop to logical), from its loop indices. A
        window split's input index is shifted back by its row's start modulo the vector
        (:class:`~pyfuse.ir.iterdomain.Split`), which needs the row indices first: the walk
        runs once unshifted, then again with each window's shift."""
        windows = self._windows()
        if not windows:
            return self._walk_reference(by_position, {})
        # The row's start needs the row's indices even where the tensor at hand does not vary
        # along the row (a layer_norm's weight, read at the row's shifted columns): the
        # reference's block and thread indices stand in for positions not given.
        rows = dict(by_position)
        columns = {id(axis) for split in windows for axis in _derived(split.input)}
        for position, axis in enumerate(self.reference.loop):
            if position in rows or id(axis) in columns or axis.extent == 1:
                continue
            if not axis.parallel_type.is_hardware_index:
                raise ScheduleError(
                    f"kernel {self.name}: a window's row start needs loop {axis} of "
                    f"T{self.reference.name}, which is not open here"
                )
            rows[position] = self.specials[axis.parallel_type]
        unshifted = self._walk_reference(rows, {})
        shifts = {id(split): self._window_shift(split, unshifted) for split in windows}
        return self._walk_reference(by_position, shifts)

    def _walk_reference(
        self, by_position: dict[int, k.KExpr], shifts: dict[int, k.KExpr]
    ) -> dict[int, k.KExpr]:
        ref = self.reference
        index: dict[int, k.KExpr] = {}
        for position, axis in enumerate(ref.loop):
            index[id(axis)] = by_position.get(position, k.const(0, self.index_dtype))
        zero = k.const(0, self.index_dtype)
        # Loop to logical first (the history, last step first), then logical to root (a
        # reshaped reference's own steps), so a tensor read before the reshape finds its
        # index among the root axes.
        transforms = tensor_transforms(ref)
        scheduled = len([step for step in ref.history if not isinstance(step, Reorder)])
        ordered = [*reversed(transforms[:scheduled]), *reversed(transforms[scheduled:])]
        for transform in ordered:
            if isinstance(transform, Split):
                outer = index.get(id(transform.outer), zero)
                inner = index.get(id(transform.inner), zero)
                extent = k.const(transform.inner.extent, self.index_dtype)
                joined = k.add(k.mul(outer, extent), inner)
                shift = shifts.get(id(transform))
                if shift is not None:
                    # A difference, not add(x, -s): index bounds assume non-negative terms.
                    joined = k.Binary("sub", joined, shift, self.index_dtype)
                index[id(transform.input)] = joined
            elif isinstance(transform, Merge):
                out = index.get(id(transform.output), zero)
                extent = k.const(transform.inner.extent, self.index_dtype)
                index[id(transform.outer)] = k.floordiv(out, extent)
                index[id(transform.inner)] = k.mod(out, extent)
            elif isinstance(transform, Swizzle):
                raise ScheduleError(f"kernel {self.name}: swizzled loops cannot be indexed yet")
        return index

    def _logical_index(self, tv: TensorView, ref_index: dict[int, k.KExpr]) -> dict[int, k.KExpr]:
        """Indices of ``tv``'s root and logical axes, derived from the reference's."""
        zero = k.const(0, self.index_dtype)
        result: dict[int, k.KExpr] = {}
        for axis in tv.logical:
            if axis.is_broadcast and axis.expanded_extent is None:
                result[id(axis)] = zero
                continue
            result[id(axis)] = self._mapped_reference_index(axis, ref_index)
        if tv.root is not None:
            for transform in reversed(tensor_transforms(tv)):
                if isinstance(transform, Split) and id(transform.outer) in result:
                    extent = k.const(transform.inner.extent, self.index_dtype)
                    result[id(transform.input)] = k.add(
                        k.mul(result[id(transform.outer)], extent), result[id(transform.inner)]
                    )
                elif isinstance(transform, Merge) and id(transform.output) in result:
                    extent = k.const(transform.inner.extent, self.index_dtype)
                    out = result[id(transform.output)]
                    result[id(transform.outer)] = k.floordiv(out, extent)
                    result[id(transform.inner)] = k.mod(out, extent)
            for axis in tv.root:
                result.setdefault(id(axis), zero)
        return result

    def _mapped_reference_index(self, axis: IterDomain, ref_index: dict[int, k.KExpr]) -> k.KExpr:
        ref_axes = [*self.reference.logical, *(self.reference.root or [])]
        for mode in (IdMappingMode.EXACT, IdMappingMode.BROADCAST):
            for ref_axis in ref_axes:
                if id(ref_axis) in ref_index and self.id_model.mapped(axis, ref_axis, mode):
                    return ref_index[id(ref_axis)]
        if axis.is_broadcast:
            return k.const(0, self.index_dtype)
        raise ScheduleError(
            f"kernel {self.name}: axis {axis} maps to no axis of the reference "
            f"T{self.reference.name}; the scheduler must pick a reference that covers it"
        )

    def _producer_index(
        self, expr: Expr, producer: TensorView, consumer_index: dict[int, k.KExpr]
    ) -> dict[int, k.KExpr]:
        zero = k.const(0, self.index_dtype)
        result: dict[int, k.KExpr] = {id(axis): zero for axis in producer.logical}
        for p_axis, c_axis in expr.logical_pairs(producer):
            if p_axis.is_broadcast and p_axis.expanded_extent is None:
                continue
            result[id(p_axis)] = consumer_index.get(id(c_axis), zero)
        return result

    def _global_offset(self, tv: TensorView, logical: dict[int, k.KExpr]) -> k.KExpr:
        # Adjacent memory axes that a merge split apart and whose strides nest (``x // c``
        # at stride ``c s`` beside ``x % c`` at stride ``s``) are one term, ``x`` at ``s``: a
        # row of a contiguous [10, 61, 61] tensor reduced whole is one multiply, not two
        # divisions and two remainders an element (those spilled 844 B at 1024 threads).
        terms: list[tuple[k.KExpr, int]] = []
        for axis, stride in self._strides(tv):
            terms.append((logical[id(axis)], stride))
            while len(terms) >= 2:
                whole = _unsplit(terms[-2], terms[-1])
                if whole is None:
                    break
                terms[-2:] = [whole]
        offset: k.KExpr = k.const(view_offset(tv), self.index_dtype)
        for index, stride in terms:
            offset = k.add(offset, k.mul(index, k.const(stride, self.index_dtype)))
        return offset

    def _strides(self, tv: TensorView) -> list[tuple[IterDomain, int]]:
        """(axis, element stride) of each memory axis of ``tv``, outermost first (an alias's
        through its chain: :func:`~pyfuse.passes.skip_intermediates.alias_strides`)."""
        try:
            return alias_strides(tv)
        except ScheduleError as error:
            raise ScheduleError(f"kernel {self.name}: {error.bare_message}") from None

    def _buffer_index(self, tv: TensorView, by_position: dict[int, k.KExpr]) -> k.KExpr:
        """Element index into a local or shared buffer from the loop indices."""
        index: k.KExpr = k.const(0, self.index_dtype)
        positions = self._ref_positions(tv)
        allocated = self._allocated_axes(tv)
        for axis in allocated:
            position = positions[tv.loop.index(axis)]
            if position is None:
                raise ScheduleError(
                    f"kernel {self.name}: T{tv.name}'s loop axis {axis} replays no axis of "
                    f"the reference T{self.reference.name}"
                )
            loop_index = by_position.get(position, k.const(0, self.index_dtype))
            index = k.add(k.mul(index, k.const(axis.extent, self.index_dtype)), loop_index)
        return index

    def _predicate(
        self, tv: TensorView, by_position: dict[int, k.KExpr], windows: bool = True
    ) -> k.KExpr:
        """True where the loop indices name an element inside ``tv``'s extents. Every tensor's
        logical axes map to the reference's, so the reference's ragged splits bound them all;
        a window split bounds its index on both sides (``windows=False`` leaves those out,
        for a vector access that guards its elements itself: lower_windows.py); a hardware
        index larger than its loop is guarded too."""
        ref_index = self._reference_indices(by_position)
        conditions: list[k.KExpr] = []
        for transform in tensor_transforms(self.reference):
            if (
                isinstance(transform, Split)
                and not transform.divisible
                and self._varies_along(tv, transform.input)
            ):
                if transform.window and not windows:
                    continue
                value = ref_index[id(transform.input)]
                if transform.window:
                    conditions.append(k.less_than(k.const(-1, self.index_dtype), value))
                conditions.append(k.less_than(value, k.const(transform.input.extent)))
        positions = self._ref_positions(tv)
        for index, axis in enumerate(tv.loop):
            if not axis.parallel_type.is_hardware_index or axis.is_broadcast:
                # A broadcast axis holds one value: every thread computes it (and may read it).
                continue
            # A loop shared with a consumer runs the consumer's (promoted) extent, and one
            # that replays a reference loop the reference's: a tensor lacking an axis the
            # reference merged in (a returned input beside a matmul's [M, N] rows) takes its
            # index from the merged one, so it is bounded by that loop, not by its own extent.
            extent = max(axis.extent, self.id_model.loop_promotion(axis).extent)
            position = positions[index]
            if position is not None:
                extent = max(extent, self.reference.loop[position].extent)
            if self.launch[axis.parallel_type] > extent:
                special = self.specials[axis.parallel_type]
                conditions.append(k.less_than(special, k.const(extent, self.index_dtype)))
        return k.all_of(conditions)

    # -- aligned windows (see iterdomain.Split) -------------------------------------------------
    def _windows(self) -> list[Split]:
        """The reference's window splits."""
        return [
            step
            for step in tensor_transforms(self.reference)
            if isinstance(step, Split) and step.window
        ]

    def _window_memory_axis(self, tv: TensorView, split: Split) -> IterDomain | None:
        """``tv``'s stride-1 memory axis when it is the window's input axis, else None."""
        if tv.memory_type != MemoryType.GLOBAL and tv.alias_of is None:
            return None
        strides = self._strides(tv)
        if not strides or strides[-1][1] != 1 or strides[-1][0].is_broadcast:
            return None
        axis = strides[-1][0]
        if not self.id_model.mapped(axis, split.input, IdMappingMode.EXACT):
            return None
        return axis

    def _window_anchor(self, split: Split) -> TensorView | None:
        """The global tensor whose rows the window's vectors align to: the largest holding
        the window's axis with stride 1 (a row of the reduced input, or of the output)."""
        cached = self.window_anchors.get(id(split))
        if cached is not None or id(split) in self.window_anchors:
            return cached
        candidates = [
            tv for tv in self.window_candidates if self._window_memory_axis(tv, split) is not None
        ]
        anchor = max(candidates, key=lambda tv: tv.numel, default=None)
        self.window_anchors[id(split)] = anchor
        return anchor

    def _window_shift(self, split: Split, index: dict[int, k.KExpr]) -> k.KExpr:
        """Where the anchor's row starts, modulo the vector: its offset at column 0."""
        anchor = self._window_anchor(split)
        if anchor is None:
            return k.const(0, self.index_dtype)
        logical = self._logical_index(anchor, index)
        column = self._window_memory_axis(anchor, split)
        assert column is not None
        logical[id(column)] = k.const(0, self.index_dtype)
        return k.mod(self._global_offset(anchor, logical), k.const(split.factor, self.index_dtype))

    def _window_aligned(self, tv: TensorView, split: Split) -> bool:
        """``tv``'s rows start where the anchor's do, modulo the vector, for every row: the
        same strides and view offset (else its vectors would not be aligned: it is read
        element by element)."""
        anchor = self._window_anchor(split)
        if anchor is None:
            return False
        if tv is anchor:
            return True
        mine, theirs = self._strides(tv), self._strides(anchor)
        if len(mine) != len(theirs) or (view_offset(tv) - view_offset(anchor)) % split.factor:
            return False
        return all(
            a_stride == b_stride and self.id_model.mapped(a_axis, b_axis, IdMappingMode.EXACT)
            for (a_axis, a_stride), (b_axis, b_stride) in zip(mine, theirs, strict=True)
        )

    def _varies_along(self, tv: TensorView, ref_axis: IterDomain) -> bool:
        """``tv`` has an iterated logical axis mapped to a reference logical axis that
        ``ref_axis`` is made from. Where it has none (a broadcast there, or no such axis),
        every index along ``ref_axis`` reads its one element, in bounds: bounding it by the
        reference's ragged split would leave all but the first thread without the value,
        and a value computed from it and written by every thread (``T[bx] = tanh(x[bx, 0])``)
        would differ between threads."""
        key = (id(tv), id(ref_axis))
        cached = self.varies_along.get(key)
        if cached is not None:
            return cached
        sources: list[IterDomain] = []
        frontier = [ref_axis]
        while frontier:
            axis = frontier.pop()
            if axis.definition is None:
                sources.append(axis)
            else:
                frontier.extend(axis.definition.inputs)
        varies = any(
            not (axis.is_broadcast and axis.expanded_extent is None)
            and any(
                self.id_model.mapped(axis, source, IdMappingMode.BROADCAST) for source in sources
            )
            for axis in tv.logical
        )
        self.varies_along[key] = varies
        return varies


def _derived(axis: IterDomain) -> list[IterDomain]:
    """``axis`` and every axis its uses make, transitively."""
    found, frontier = [], [axis]
    while frontier:
        current = frontier.pop()
        found.append(current)
        for use in current.uses:
            frontier.extend(use.outputs)
    return found


def _unsplit(outer: tuple[k.KExpr, int], inner: tuple[k.KExpr, int]) -> tuple[k.KExpr, int] | None:
    """``(x, s)`` for the memory terms ``(x // c, c s)`` and ``(x % c, s)``, else None."""
    (quotient, outer_stride), (remainder, inner_stride) = outer, inner
    if not (isinstance(quotient, k.Binary) and isinstance(remainder, k.Binary)):
        return None
    if quotient.op != "floordiv" or remainder.op != "mod":
        return None
    divisor = quotient.rhs
    if not isinstance(divisor, k.Const) or remainder.rhs != divisor:
        return None
    if quotient.lhs != remainder.lhs or outer_stride != inner_stride * int(divisor.value):
        return None
    return quotient.lhs, inner_stride


def _mentions(expr: k.KExpr, var: k.Var) -> bool:
    if expr == var:
        return True
    for child in vars(expr).values() if hasattr(expr, "__dict__") else ():
        if isinstance(child, k.KExpr) and _mentions(child, var):
            return True
    return False


def _expr_children(expr: k.KExpr) -> list[k.KExpr]:
    return [v for v in vars(expr).values() if isinstance(v, k.KExpr)]


def _local_indices(stmt: k.Stmt) -> list[k.KExpr]:
    """Index expressions into local buffers inside ``stmt`` (loads and stores)."""
    found: list[k.KExpr] = []

    def visit_expr(expr: k.KExpr) -> None:
        if isinstance(expr, k.Load) and expr.buffer.memory == MemoryType.LOCAL:
            found.append(expr.index)
        for child in _expr_children(expr):
            visit_expr(child)

    def visit(node: k.Stmt) -> None:
        for value in vars(node).values():
            if isinstance(value, k.KExpr):
                visit_expr(value)
        if isinstance(node, k.Store) and node.buffer.memory == MemoryType.LOCAL:
            found.append(node.index)
        if isinstance(node, k.VectorLoad):
            found.append(node.target_index)
        if isinstance(node, k.VectorStore):
            found.append(node.source_index)
        for block in node.children():
            for child in block:
                visit(child)

    visit(stmt)
    return found


def indexes_registers(loop: k.For) -> bool:
    return any(_mentions(index, loop.var) for index in _local_indices(loop))
