"""Helpers shared by the pointwise and reduction schedulers."""

from __future__ import annotations

from collections.abc import Sequence

from pyfuse.ir.caching import cache_after, cache_before
from pyfuse.ir.exprs import ReshapeOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.id_model import IdMappingMode, IdModel
from pyfuse.ir.iterdomain import IterDomain
from pyfuse.ir.target import TargetInfo
from pyfuse.ir.tensor import TensorView
from pyfuse.passes.skip_intermediates import (
    alias_strides,
    is_view_op,
    view_allocation,
    view_offset,
    view_source,
)


def upstream(tensors: Sequence[TensorView]) -> dict[int, TensorView]:
    """``tensors`` and every tensor they are computed from, by id."""
    found: dict[int, TensorView] = {}
    frontier = list(tensors)
    while frontier:
        tv = frontier.pop()
        if id(tv) not in found:
            found[id(tv)] = tv
            if tv.definition is not None:
                frontier.extend(tv.definition.tensor_inputs)
    return found


def holds_innermost(tv: TensorView, innermost: IterDomain, id_model: IdModel) -> bool:
    """``tv`` lacks ``innermost`` (it is broadcast there) or stores it innermost with stride 1."""
    present = [
        axis
        for axis in tv.no_reductions
        if not axis.is_broadcast and id_model.mapped(axis, innermost, IdMappingMode.PERMISSIVE)
    ]
    if not present:
        return True
    allocation = [axis for axis in tv.maybe_allocation if not axis.is_broadcast]
    if not allocation or allocation[-1] is not present[-1]:
        return False
    return tv.maybe_contiguity[-1] is True


def vector_width(
    fusion: Fusion, innermost: IterDomain, inner_extent: int, target: TargetInfo
) -> int:
    """Elements per vector access: 16 bytes of the widest global tensor, halved until it
    divides the innermost extent (so no vector crosses a row); 1 when some global tensor
    does not hold the innermost axis contiguously."""
    if innermost.is_broadcast:
        return 1
    globals_ = [*global_sources(fusion), *fusion.outputs]
    widest = max(tv.dtype.itemsize for tv in globals_)
    width = max(1, target.vector_bytes // widest)
    while width > 1 and inner_extent % width:
        width //= 2
    # A vector must also start aligned in every row: a padded row (``base[:, :128]`` of a
    # ``(4, 131)`` buffer) starts 131 elements after the last, so only widths dividing every
    # outer stride keep each row's vectors aligned.
    for tv in globals_:
        source = tv.alias_of if tv.alias_of is not None else tv
        strides = list(source.strides or ())
        if tv.alias_of is not None:
            # A slice moves where rows start: its offset and its own strides must divide too.
            strides += [view_offset(tv), *(stride for _, stride in alias_strides(tv)[:-1])]
        for stride in strides:
            while width > 1 and stride % width:
                width //= 2
    id_model = IdModel(fusion)
    if not all(holds_innermost(tv, innermost, id_model) for tv in globals_):
        return 1
    return width


# The shortest row read through aligned windows (iterdomain.Split's ``window``): each row's
# first and last vectors are copied element by element, which pays only when they are a
# small part of the row.
MIN_WINDOW_VECTORS = 8


def window_width(fusion: Fusion, innermost: IterDomain, target: TargetInfo) -> int:
    """The vector width of aligned windows over rows of ``innermost`` (16 bytes of the
    widest global tensor), or 1 where they do not apply: a broadcast axis, rows shorter than
    MIN_WINDOW_VECTORS vectors, a global tensor holding the axis other than innermost and
    contiguous, or two laying the rows out differently. The scheduler takes them where
    :func:`vector_width` is narrower."""
    if innermost.is_broadcast:
        return 1
    globals_ = [*_indexed_sources(fusion), *fusion.outputs]
    width = max(1, target.vector_bytes // max(tv.dtype.itemsize for tv in globals_))
    if width == 1 or innermost.logical_extent < MIN_WINDOW_VECTORS * width:
        return 1
    id_model = IdModel(fusion)
    if not all(holds_innermost(tv, innermost, id_model) for tv in globals_):
        return 1
    # Every tensor holding the rows must lay them out alike (the same strides, and views
    # starting alike modulo the vector): a vector aligned in one is aligned in all. A
    # layer_norm's weight (one row for every row) or a slice beside a contiguous output
    # would be read element by element, and those plans spilled (1016 B in a bf16
    # layer_norm of 24001 at 512 threads).
    layouts = {
        (tuple(stride for _, stride in alias_strides(tv)), view_offset(tv) % width)
        for tv in globals_
        if any(
            not axis.is_broadcast and id_model.mapped(axis, innermost, IdMappingMode.PERMISSIVE)
            for axis in tv.no_reductions
        )
    }
    return width if len(layouts) == 1 else 1


def _indexed_sources(fusion: Fusion) -> list[TensorView]:
    """The global sources a kernel indexes: an input read only through reshapes of its
    row-major memory (``logits.view(-1, V)``) is indexed as those views, which
    skip_intermediates makes aliases with row-major strides of their own (the lowering's
    window anchor is chosen among the same tensors)."""
    found: list[TensorView] = []
    for tv in global_sources(fusion):
        uses = fusion.uses_in_fusion(tv)
        views = [
            use.output
            for use in uses
            if isinstance(use, ReshapeOp) and view_allocation(use, tv) is not None
        ]
        if fusion.is_input(tv) and uses and len(views) == len(uses):
            found.extend(views)
        else:
            found.append(tv)
    return found


def dense_flat_width(fusion: Fusion, reference: TensorView, target: TargetInfo) -> int:
    """Elements per vector of a flat schedule over ``reference`` whose vectors may cross rows:
    16 bytes of the widest global tensor, halved until it divides the element count, where
    every global tensor is the reference's shape stored densely row-major in its axis order
    (consecutive flat indices are consecutive addresses: ``x * y`` of two [8192, 50257]
    tensors), its view offset a multiple of the width; else 1."""
    globals_ = [*global_sources(fusion), *fusion.outputs]
    width = max(1, target.vector_bytes // max(tv.dtype.itemsize for tv in globals_))
    while width > 1 and reference.numel % width:
        width //= 2
    if width == 1:
        return 1
    id_model = IdModel(fusion)
    ref_axes = [axis for axis in reference.no_reductions if axis.extent != 1]
    for tv in globals_:
        memory = [(axis, stride) for axis, stride in alias_strides(tv) if axis.extent != 1]
        if len(memory) != len(ref_axes) or view_offset(tv) % width:
            return 1
        expected = 1
        for (axis, stride), ref_axis in zip(reversed(memory), reversed(ref_axes), strict=True):
            if stride != expected or not id_model.mapped(axis, ref_axis, IdMappingMode.EXACT):
                return 1
            expected *= axis.extent
    return width


def varying_axes(tv: TensorView, reference_axes: list[IterDomain], id_model: IdModel) -> list[bool]:
    """For each of ``reference_axes``: whether ``tv`` varies along it, i.e. has a
    non-broadcast axis mapped to it (False where ``tv`` is broadcast there or lacks it)."""
    own = [axis for axis in tv.logical if not axis.is_broadcast]
    return [
        any(id_model.mapped(axis, ref_axis, IdMappingMode.EXACT) for axis in own)
        for ref_axis in reference_axes
    ]


# Rows (blocks of one row each) per SM below which a row-per-block plan leaves the GPU
# mostly idle: split_reductions.py splits fewer rows' reductions across blocks, and the
# reduction scheduler reads rows again (reread_rows.py) only from this many.
ROWS_PER_SM_TO_FILL = 2


def global_sources(fusion: Fusion) -> list[TensorView]:
    """Tensors read from global memory: the inputs and the aliases that view them in place."""
    return [tv for tv in fusion.tensors() if fusion.is_input(tv) or tv.alias_of is not None]


def cache_inputs_and_outputs(fusion: Fusion) -> None:
    """Route global reads and writes through local copies (the vectorizable accesses). A use
    that is itself an alias (a view of the input) keeps reading in place."""
    for tv in global_sources(fusion):
        uses = [u for u in fusion.uses_in_fusion(tv) if u.output.alias_of is None]
        if uses:
            cache_after(fusion, tv, uses=uses)
    for tv in list(fusion.outputs):
        cache_before(fusion, tv)


def replay_everywhere(fusion: Fusion, reference: TensorView) -> None:
    """Give every non-input tensor the reference's loop structure."""
    from pyfuse.passes.transform_replay import replay_like

    id_model = IdModel(fusion)
    for tv in fusion.tensors():
        if tv is reference or fusion.is_input(tv) or tv.alias_of is not None:
            continue
        replay_like(tv, reference, id_model)


def _only_viewed(fusion: Fusion, tv: TensorView) -> bool:
    """``tv`` views an input and is only viewed further (a link of a chain of views, such as
    ``x[1:][::2]``): it is aliased and never indexed itself."""
    uses = fusion.uses_in_fusion(tv)
    return (
        bool(uses)
        and all(is_view_op(use) for use in uses)
        and fusion.is_input(view_source(tv))
        and not fusion.is_output(tv)
    )


def uncovered_axis(fusion: Fusion, reference: TensorView) -> str | None:
    """A tensor axis whose index cannot be derived from the reference's (lowering derives
    every index from the reference), described for a decline reason; None when all map."""
    id_model = IdModel(fusion)
    for tv in fusion.tensors():
        if fusion.is_input(tv) or _only_viewed(fusion, tv):
            continue
        for axis in tv.logical:
            if axis.is_broadcast and axis.expanded_extent is None:
                continue
            if not any(
                id_model.mapped(axis, ref_axis, IdMappingMode.BROADCAST)
                for ref_axis in reference.logical
            ):
                return (
                    f"T{tv.name}'s axis {axis} is outside the iteration space of T{reference.name}"
                )
    return None
