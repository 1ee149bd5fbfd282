"""Values of the IR: :class:`TensorView` and :class:`Scalar`.

A TensorView has a dtype and four domains:

- ``root``: only for tensors whose logical axes are derived from others inside their
  defining op (a reshape); otherwise the logical domain itself;
- ``logical``: the axes of the math, reductions included (``rS``);
- ``allocation``: how the tensor lies in memory, outermost first, with a contiguity
  flag per axis (``None`` for broadcast axes, which take no memory); by default the
  logical domain without reductions, row-major and contiguous;
- ``loop``: the schedule, reached from the logical domain by split/merge/swizzle/reorder.

It also carries a memory type and an inline (compute-at) position: the number of
leading loop axes it shares with its consumers' loop nests.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pyfuse.ir.dtypes import DType, scalar_dtype
from pyfuse.ir.iterdomain import (
    IdTransform,
    IterDomain,
    IterType,
    Merge,
    ParallelType,
    Reorder,
    Split,
    Swizzle,
    SwizzleKind,
)
from pyfuse.ir.naming import next_name

if TYPE_CHECKING:
    # The one circle the IR keeps: a TensorView names its defining Expr and an Expr its
    # TensorViews, two halves of one graph (only the type checker follows this import).
    from pyfuse.ir.exprs import Expr


class MemoryType(enum.Enum):
    GLOBAL = "g"
    SHARED = "s"
    LOCAL = "l"


class Val:
    """Anything an expr reads or writes."""

    dtype: DType

    def __init__(self) -> None:
        self.definition: Expr | None = None
        self.uses: list[Expr] = []


class Scalar(Val):
    """A compile-time constant operand (a Python number in the user's function)."""

    def __init__(self, value: bool | int | float, dtype: DType | None = None) -> None:
        super().__init__()
        self.value = value
        self.dtype = dtype if dtype is not None else scalar_dtype(value)

    def __str__(self) -> str:
        return repr(self.value)

    __repr__ = __str__


class TensorView(Val):
    """A tensor in the IR with its domains, memory type and inline position."""

    def __init__(
        self,
        logical: Sequence[IterDomain],
        dtype: DType,
        *,
        root: Sequence[IterDomain] | None = None,
        memory_type: MemoryType = MemoryType.LOCAL,
    ) -> None:
        super().__init__()
        self.name = next_name("tv")
        self.dtype = dtype
        self.root: list[IterDomain] | None = list(root) if root is not None else None
        self.logical: list[IterDomain] = list(logical)
        self.allocation: list[IterDomain] | None = None
        self.contiguity: list[bool | None] | None = None
        self.loop: list[IterDomain] = list(logical)
        self.memory_type = memory_type
        self.inline_position = 0
        # Steps applied to the loop domain, in order, for printing and replay.
        self.history: list[IdTransform | Reorder] = []
        # Set by replay: the reference merged an axis this tensor lacks into one it has, so
        # its loops are shorter than the reference's and only its consumer's nest (whose
        # index is the reference's) computes it right (validate checks it is inlined).
        self.replay_short = False
        # Set by the scheduler: circular-buffer depth of a shared-memory operand.
        self.circular_buffer_stages = 0
        # Set by skip_intermediates/remove_broadcasts: the tensor whose memory this one reads.
        self.alias_of: TensorView | None = None
        # Element strides of a fusion input, per logical axis (None: row-major contiguous).
        self.strides: tuple[int, ...] | None = None

    # -- shape --------------------------------------------------------------------------------
    @property
    def maybe_root(self) -> list[IterDomain]:
        return self.root if self.root is not None else self.logical

    @property
    def no_reductions(self) -> list[IterDomain]:
        return [axis for axis in self.logical if not axis.is_reduction]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(axis.logical_extent for axis in self.no_reductions)

    @property
    def ndim(self) -> int:
        return len(self.no_reductions)

    @property
    def numel(self) -> int:
        count = 1
        for extent in self.shape:
            count *= extent
        return count

    @property
    def maybe_allocation(self) -> list[IterDomain]:
        """The allocation domain, or the default (logical without reductions)."""
        return self.allocation if self.allocation is not None else self.no_reductions

    @property
    def maybe_contiguity(self) -> list[bool | None]:
        if self.contiguity is not None:
            return self.contiguity
        return [None if axis.is_broadcast else True for axis in self.maybe_allocation]

    def set_allocation(
        self, domain: Sequence[IterDomain], contiguity: Sequence[bool | None] | None = None
    ) -> TensorView:
        domain = list(domain)
        if contiguity is None:
            contiguity = [None if axis.is_broadcast else True for axis in domain]
        if len(contiguity) != len(domain):
            raise ValueError(
                f"T{self.name}: allocation domain has {len(domain)} axes but "
                f"{len(contiguity)} contiguity flags"
            )
        self.allocation = domain
        self.contiguity = list(contiguity)
        return self

    # -- scheduling primitives (act on the loop domain) ---------------------------------------
    def _axis_index(self, axis: int) -> int:
        n = len(self.loop)
        if not -n <= axis < n:
            raise IndexError(f"T{self.name}: axis {axis} out of range for {n} loop axes")
        return axis % n

    def axis(self, axis: int) -> IterDomain:
        return self.loop[self._axis_index(axis)]

    def split(
        self, axis: int, factor: int, *, inner_split: bool = True, window: bool = False
    ) -> TensorView:
        """Split loop axis ``axis`` by ``factor`` into (outer, inner) in place (``window``: an
        aligned-window split, see :class:`~pyfuse.ir.iterdomain.Split`)."""
        index = self._axis_index(axis)
        split = Split(self.loop[index], factor, inner_split=inner_split, window=window)
        self.loop[index : index + 1] = [split.outer, split.inner]
        self.history.append(split)
        return self

    def merge(self, outer: int, inner: int | None = None) -> TensorView:
        """Merge loop axes ``outer`` and ``inner`` (default ``outer + 1``); the result takes the
        outer axis's place."""
        outer_index = self._axis_index(outer)
        inner_index = self._axis_index(outer_index + 1 if inner is None else inner)
        if outer_index == inner_index:
            raise ValueError(f"T{self.name}: cannot merge axis {outer_index} with itself")
        merge = Merge(self.loop[outer_index], self.loop[inner_index])
        self.loop[outer_index] = merge.output
        del self.loop[inner_index]
        self.history.append(merge)
        return self

    def reorder(self, old_to_new: dict[int, int]) -> TensorView:
        """Move loop axes: ``{old: new}``; axes not named keep their relative order."""
        n = len(self.loop)
        moves = {self._axis_index(old): new % n for old, new in old_to_new.items()}
        if len(set(moves.values())) != len(moves):
            raise ValueError(f"T{self.name}: reorder targets repeat in {old_to_new}")
        result: list[IterDomain | None] = [None] * n
        for old, new in moves.items():
            result[new] = self.loop[old]
        rest = iter(axis for index, axis in enumerate(self.loop) if index not in moves)
        reordered = [slot if slot is not None else next(rest) for slot in result]
        if reordered != self.loop:  # a reorder that moves nothing is not recorded
            self.loop = reordered
            self.history.append(Reorder(tuple(sorted(moves.items()))))
        return self

    def swizzle(self, kind: SwizzleKind, x_axis: int, y_axis: int) -> TensorView:
        x_index, y_index = self._axis_index(x_axis), self._axis_index(y_axis)
        swizzle = Swizzle(self.loop[x_index], self.loop[y_index], kind)
        self.loop[x_index], self.loop[y_index] = swizzle.outputs
        self.history.append(swizzle)
        return self

    def parallelize(self, axis: int, parallel_type: ParallelType) -> TensorView:
        self.axis(axis).parallelize(parallel_type)
        return self

    def inline_at(self, position: int) -> TensorView:
        if not 0 <= position <= len(self.loop):
            raise ValueError(
                f"T{self.name}: inline position {position} outside 0..{len(self.loop)}"
            )
        self.inline_position = position
        return self

    # -- printing -----------------------------------------------------------------------------
    @property
    def label(self) -> str:
        return f"T{self.name}_{self.memory_type.value}_{self.dtype.short}"

    def domain_str(self, domain: Sequence[IterDomain] | None = None) -> str:
        axes = self.loop if domain is None else domain
        return f"{self.label}[{', '.join(str(axis) for axis in axes)}]"

    def __str__(self) -> str:
        return self.domain_str(self.logical)

    def __repr__(self) -> str:
        return f"T{self.name}"


def memory_strides(tv: TensorView) -> list[tuple[IterDomain, int]]:
    """(axis, element stride) of each axis that takes memory, in memory order (outermost
    first): from a strided input's strides, else row-major over the allocation domain."""
    if tv.strides is not None:
        pairs = [
            (axis, stride)
            for axis, stride in zip(tv.no_reductions, tv.strides, strict=True)
            if not axis.is_broadcast
        ]
        return sorted(pairs, key=lambda pair: -pair[1])  # stable: ties keep logical order
    result = []
    stride = 1
    for axis in reversed(tv.maybe_allocation):
        if axis.is_broadcast:
            continue
        result.append((axis, stride))
        stride *= axis.logical_extent
    return result[::-1]


def new_axes_like(axes: Sequence[IterDomain]) -> list[IterDomain]:
    """Fresh IterDomains with the same extents and iteration types (for an op's output)."""
    return [
        IterDomain(axis.extent, axis.iter_type, expanded_extent=axis.expanded_extent)
        for axis in axes
    ]


def make_tensor(shape: Sequence[int], dtype: DType, **kwargs: object) -> TensorView:
    """A TensorView of ``shape``; size-1 axes are broadcast axes (numpy broadcasting rules)."""
    axes = [
        IterDomain(extent, IterType.BROADCAST if extent == 1 else IterType.ITERATION)
        for extent in shape
    ]
    return TensorView(axes, dtype, **kwargs)  # type: ignore[arg-type]


def tensor_transforms(tv: TensorView) -> list[IdTransform]:
    """The transforms from ``tv``'s root (or logical) domain to its logical, allocation and loop
    domains: the recorded ``history``, then any reached only through definitions (a reshape's
    root-to-logical steps, or a loop domain someone set directly), in the order applied."""
    history = [step for step in tv.history if isinstance(step, IdTransform)]
    known = {id(step) for step in history}
    stop = {id(axis) for axis in tv.maybe_root}
    seen: set[int] = set()
    stack = [*tv.loop, *tv.logical, *(tv.allocation or [])]
    reached: list[IdTransform] = []  # outputs-first: reversed below
    while stack:
        axis = stack.pop()
        if id(axis) in stop or id(axis) in seen:
            continue
        seen.add(id(axis))
        definition = axis.definition
        if definition is None:
            continue
        if id(definition) not in known:
            known.add(id(definition))
            reached.append(definition)
        stack.extend(reversed(definition.inputs))
    return history + reached[::-1]
