"""IterDomains and the transforms between them.

An :class:`IterDomain` is one axis of a tensor: an extent, an :class:`IterType`
(iteration, broadcast or reduction), a :class:`ParallelType` and the transform that
defined it. Transforms (:class:`Split`, :class:`Merge`, :class:`Swizzle`) take
IterDomains and make new ones; a tensor's loop domain is reached from its logical
domain through a chain of them. Extents are concrete integers: pyfuse traces on
shapes, and the kernels it emits read sizes from their parameters.

Printing: ``iS4{8}`` is iteration (i), serial (S), IterDomain number 4, extent 8.
``bS5{1}`` is a broadcast, ``rS6{64}`` a reduction, ``iBx7{16}`` bound to
blockIdx.x. An expanded broadcast prints ``bS5{1 ex 8}``.
"""

from __future__ import annotations

import enum

from pyfuse.ir.naming import next_name
from pyfuse.ir.records import record


class IterType(enum.Enum):
    ITERATION = "i"
    BROADCAST = "b"
    REDUCTION = "r"


class ParallelType(enum.Enum):
    """How a loop is executed. The value is the printer's tag."""

    SERIAL = "S"
    BIDX = "Bx"
    BIDY = "By"
    BIDZ = "Bz"
    TIDX = "Tx"
    TIDY = "Ty"
    TIDZ = "Tz"
    VECTORIZE = "V"
    UNROLL = "U"
    UNSWITCH = "US"
    MMA = "MMA"
    BULK = "Bulk"
    STREAM = "St"  # a loop that is the persistent-tile / circular-buffer stream

    @property
    def is_block_dim(self) -> bool:
        return self in (ParallelType.BIDX, ParallelType.BIDY, ParallelType.BIDZ)

    @property
    def is_thread_dim(self) -> bool:
        return self in (ParallelType.TIDX, ParallelType.TIDY, ParallelType.TIDZ)

    @property
    def is_hardware_index(self) -> bool:
        """A dimension of the launch (blockIdx or threadIdx)."""
        return self.is_block_dim or self.is_thread_dim


class IterDomain:
    """One axis: extent, iteration type, parallel type, and its defining transform."""

    def __init__(
        self,
        extent: int,
        iter_type: IterType = IterType.ITERATION,
        *,
        expanded_extent: int | None = None,
        parallel_type: ParallelType = ParallelType.SERIAL,
    ) -> None:
        if extent < 0:
            raise ValueError(f"IterDomain extent must be >= 0, got {extent}")
        if expanded_extent is not None and iter_type != IterType.BROADCAST:
            raise ValueError("only a broadcast IterDomain can be expanded")
        self.name = next_name("id")
        self.extent = extent
        self.iter_type = iter_type
        self.expanded_extent = expanded_extent
        self.parallel_type = parallel_type
        self.definition: IdTransform | None = None
        self.uses: list[IdTransform] = []

    # -- queries -----------------------------------------------------------------------------
    @property
    def is_broadcast(self) -> bool:
        return self.iter_type == IterType.BROADCAST

    @property
    def is_reduction(self) -> bool:
        return self.iter_type == IterType.REDUCTION

    @property
    def is_iteration(self) -> bool:
        return self.iter_type == IterType.ITERATION

    @property
    def logical_extent(self) -> int:
        """The size this axis has in the tensor's shape (an expanded broadcast counts expanded)."""
        return self.expanded_extent if self.expanded_extent is not None else self.extent

    def parallelize(self, parallel_type: ParallelType) -> IterDomain:
        self.parallel_type = parallel_type
        return self

    def clone(self) -> IterDomain:
        """A fresh IterDomain of the same kind (new name, no definition, serial)."""
        return IterDomain(self.extent, self.iter_type, expanded_extent=self.expanded_extent)

    def __str__(self) -> str:
        extent = str(self.extent)
        if self.expanded_extent is not None:
            extent = f"{self.extent} ex {self.expanded_extent}"
        return f"{self.iter_type.value}{self.parallel_type.value}{self.name}{{{extent}}}"

    __repr__ = __str__


# ---- transforms -------------------------------------------------------------------------------


class IdTransform:
    """A transform from input IterDomains to output IterDomains."""

    inputs: tuple[IterDomain, ...]
    outputs: tuple[IterDomain, ...]

    def _link(self) -> None:
        for out in self.outputs:
            out.definition = self
        for inp in self.inputs:
            inp.uses.append(self)

    def same_kind(self, other: IdTransform) -> bool:
        """True when ``other`` is the same transform with the same parameters (for replay)."""
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class Split(IdTransform):
    """Split ``input`` by ``factor``: the inner output has extent ``factor`` (inner split) or the
    outer one does (outer split). ``divisible`` says the split needs no predicate.

    A **window** split (inner only) walks aligned vectors over rows that start anywhere: the
    outer axis counts ``ceil((extent + factor - 1) / factor)`` vectors, and element
    ``outer * factor + inner`` is ``input`` index ``outer * factor + inner - shift``, where
    ``shift`` is the row's start in memory modulo ``factor`` (the lowering derives it from the
    row indices: passes/lower_indexing.py). The first and last vectors of a row are partly
    outside it, so its elements are guarded on both sides (passes/lower_windows.py)."""

    def __init__(
        self, input_id: IterDomain, factor: int, *, inner_split: bool = True, window: bool = False
    ) -> None:
        if factor <= 0:
            raise ValueError(f"split factor must be positive, got {factor}")
        if window and not inner_split:
            raise ValueError("a window split is an inner split")
        self.factor = factor
        self.inner_split = inner_split
        self.window = window
        iter_type = input_id.iter_type
        if input_id.is_broadcast:
            # A broadcast stays extent 1 however it is split: its loop has one trip.
            outer = IterDomain(1, iter_type)
            inner = IterDomain(1, iter_type)
        elif inner_split:
            span = input_id.extent + (factor - 1 if window else 0)
            outer = IterDomain(ceil_div(span, factor), iter_type)
            inner = IterDomain(factor, iter_type)
        else:
            outer = IterDomain(factor, iter_type)
            inner = IterDomain(ceil_div(input_id.extent, factor), iter_type)
        self.inputs = (input_id,)
        self.outputs = (outer, inner)
        self._link()

    @property
    def input(self) -> IterDomain:
        return self.inputs[0]

    @property
    def outer(self) -> IterDomain:
        return self.outputs[0]

    @property
    def inner(self) -> IterDomain:
        return self.outputs[1]

    @property
    def divisible(self) -> bool:
        if self.input.is_broadcast:
            return True  # a broadcast's one element, windowed or not
        return not self.window and self.input.extent % self.factor == 0

    def same_kind(self, other: IdTransform) -> bool:
        return (
            isinstance(other, Split)
            and other.factor == self.factor
            and other.inner_split == self.inner_split
            and other.window == self.window
        )

    def describe(self) -> str:
        kind = "inner" if self.inner_split else "outer"
        ragged = ", aligned window" if self.window else "" if self.divisible else ", ragged"
        return (
            f"Split: {self.input} by {self.factor} ({kind}{ragged}) -> {self.outer}, {self.inner}"
        )


def _merged_type(outer: IterDomain, inner: IterDomain) -> IterType:
    if outer.is_reduction or inner.is_reduction:
        return IterType.REDUCTION
    if outer.is_broadcast and inner.is_broadcast:
        return IterType.BROADCAST
    # A broadcast merged with an iteration domain is an iteration domain: this is the
    # case (grid swizzle of a broadcast operand axis) that the IdModel must still map.
    return IterType.ITERATION


class Merge(IdTransform):
    """Merge ``outer`` and ``inner`` into one IterDomain of extent outer * inner."""

    def __init__(self, outer: IterDomain, inner: IterDomain) -> None:
        iter_type = _merged_type(outer, inner)
        if iter_type == IterType.BROADCAST:
            out = IterDomain(1, iter_type)
        else:
            out = IterDomain(outer.extent * inner.extent, iter_type)
        self.inputs = (outer, inner)
        self.outputs = (out,)
        self._link()

    @property
    def outer(self) -> IterDomain:
        return self.inputs[0]

    @property
    def inner(self) -> IterDomain:
        return self.inputs[1]

    @property
    def output(self) -> IterDomain:
        return self.outputs[0]

    def same_kind(self, other: IdTransform) -> bool:
        return isinstance(other, Merge)

    def describe(self) -> str:
        return f"Merge: {self.outer} and {self.inner} -> {self.output}"


class SwizzleKind(enum.Enum):
    """2-D swizzles. XOR: y' = y ^ x (extents powers of two). ZSHAPE: odd rows of x run y backwards
    (a serpentine walk that keeps neighbouring tiles close in L2)."""

    XOR = "xor"
    ZSHAPE = "zshape"


class Swizzle(IdTransform):
    """A bijective 2-D remapping of (x, y); the outputs keep the inputs' extents."""

    def __init__(self, x: IterDomain, y: IterDomain, kind: SwizzleKind) -> None:
        if kind == SwizzleKind.XOR:
            for axis in (x, y):
                if axis.extent & (axis.extent - 1):
                    raise ValueError(
                        f"an XOR swizzle needs power-of-two extents, got {axis} in ({x}, {y})"
                    )
        self.kind = kind
        self.inputs = (x, y)
        self.outputs = (x.clone(), y.clone())
        self._link()

    def same_kind(self, other: IdTransform) -> bool:
        return isinstance(other, Swizzle) and other.kind == self.kind

    def describe(self) -> str:
        x, y = self.inputs
        x_out, y_out = self.outputs
        return f"Swizzle({self.kind.value}): {x}, {y} -> {x_out}, {y_out}"


@record(frozen=True)
class Reorder:
    """A permutation of a loop domain; no new IterDomains. Kept for the transform history."""

    old_to_new: tuple[tuple[int, int], ...]

    def describe(self) -> str:
        moves = ", ".join(f"{old}->{new}" for old, new in self.old_to_new)
        return f"Reorder: {moves}"
