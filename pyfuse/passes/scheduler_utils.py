"""Helpers shared by the pointwise and reduction schedulers."""

from __future__ import annotations

from collections.abc import Sequence

from pyfuse.ir.caching import cache_after, cache_before
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.id_model import IdMappingMode, IdModel
from pyfuse.ir.iterdomain import IterDomain
from pyfuse.ir.target import TargetInfo
from pyfuse.ir.tensor import TensorView
from pyfuse.passes.skip_intermediates import alias_strides, is_view_op, view_offset, view_source


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


def varying_axes(tv: TensorView, reference_axes: list[IterDomain], id_model: IdModel) -> list[bool]:
    """For each of ``reference_axes``: whether ``tv`` varies along it, i.e. has a
    non-broadcast axis mapped to it (False where ``tv`` is broadcast there or lacks it)."""
    own = [axis for axis in tv.logical if not axis.is_broadcast]
    return [
        any(id_model.mapped(axis, ref_axis, IdMappingMode.EXACT) for axis in own)
        for ref_axis in reference_axes
    ]


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
