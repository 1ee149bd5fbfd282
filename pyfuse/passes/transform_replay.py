"""Transform propagation: give tensors the loop structure of a reference tensor.

A scheduler transforms one reference tensor (split, merge, reorder, swizzle) and then
replays those steps on every other tensor of the kernel with :func:`replay_like`, so
their loop domains line up position by position and can be inlined.

Replay maps the reference's logical axes to the target's through the IdModel's
PERMISSIVE relation (a broadcast axis follows what it is broadcast against). A step
whose inputs the target lacks is skipped: a merge with one missing input maps its
output to the present input, a split of a missing axis has no counterpart. The
target's loop domain ends as its replayed axes in the reference's loop order,
followed by any axes the reference does not have.

Expects: reference and target in the same fusion; the target's loop domain still its
logical domain (it has not been scheduled). Guarantees: the target's history records
every applied step, and position ``i`` of both loop domains is PERMISSIVE-mapped for
every ``i`` below the number of replayed axes.
"""

from __future__ import annotations

from pyfuse.ir.id_model import IdMappingMode, IdModel
from pyfuse.ir.iterdomain import IterDomain, Merge, Reorder, Split, Swizzle
from pyfuse.ir.tensor import TensorView


def _logical_map(
    reference: TensorView, target: TensorView, id_model: IdModel
) -> dict[int, IterDomain]:
    """reference logical axis id -> the target logical axis it maps to.

    The strictest relation is matched first for every axis, then looser ones for the axes
    still unmatched: PERMISSIVE alone can tie a broadcast of the reference to an unrelated
    iteration axis of the target (``x[M, 1] + sum(x.T, 1, keepdim=True)`` maps the size-1
    axis to ``M`` through the add), and taking the first such candidate would give the
    target the wrong loop."""
    mapping: dict[int, IterDomain] = {}
    taken: set[int] = set()
    for mode in (IdMappingMode.EXACT, IdMappingMode.BROADCAST, IdMappingMode.PERMISSIVE):
        for ref_axis in reference.logical:
            if id(ref_axis) in mapping:
                continue
            for candidate in target.logical:
                if id(candidate) in taken:
                    continue
                if id_model.mapped(ref_axis, candidate, mode):
                    mapping[id(ref_axis)] = candidate
                    taken.add(id(candidate))
                    break
    return mapping


def replay_like(target: TensorView, reference: TensorView, id_model: IdModel) -> int:
    """Apply ``reference``'s loop transforms to ``target``; returns how many leading loop
    positions of the two now correspond."""
    if target.history:
        raise ValueError(f"T{target.name} is already scheduled; replay needs a fresh tensor")
    mapping = _logical_map(reference, target, id_model)
    for step in reference.history:
        if isinstance(step, Reorder):
            continue  # the final order is taken from the reference's loop domain below
        if isinstance(step, Split):
            source = mapping.get(id(step.input))
            if source is None:
                continue
            index = target.loop.index(source)
            target.split(index, step.factor, inner_split=step.inner_split, window=step.window)
            mapping[id(step.outer)] = target.loop[index]
            mapping[id(step.inner)] = target.loop[index + 1]
        elif isinstance(step, Merge):
            outer = mapping.get(id(step.outer))
            inner = mapping.get(id(step.inner))
            if outer is not None and inner is not None:
                outer_index = target.loop.index(outer)
                inner_index = target.loop.index(inner)
                target.merge(outer_index, inner_index)
                applied_merge = target.history[-1]
                assert isinstance(applied_merge, Merge)
                if applied_merge.output.is_iteration and (outer.is_broadcast or inner.is_broadcast):
                    # A broadcast merged with what the reference iterates runs the
                    # reference's trips (loop promotion): a tensor computed in a nest of its
                    # own (a persistent one, kept before a reduction) needs a value at every
                    # position its consumers read, not one per broadcast element.
                    applied_merge.output.extent = step.output.extent
                mapping[id(step.output)] = applied_merge.output
            elif outer is not None or inner is not None:
                present = outer if outer is not None else inner
                assert present is not None
                missing = step.inner if inner is None else step.outer
                if not missing.is_broadcast and missing.extent > 1:
                    target.replay_short = True
                mapping[id(step.output)] = present
        elif isinstance(step, Swizzle):
            x = mapping.get(id(step.inputs[0]))
            y = mapping.get(id(step.inputs[1]))
            if x is not None and y is not None:
                target.swizzle(step.kind, target.loop.index(x), target.loop.index(y))
                applied = target.history[-1]
                assert isinstance(applied, Swizzle)
                mapping[id(step.outputs[0])] = applied.outputs[0]
                mapping[id(step.outputs[1])] = applied.outputs[1]
    ordered: list[IterDomain] = []
    for ref_axis in reference.loop:
        axis = mapping.get(id(ref_axis))
        if axis is not None and axis in target.loop and axis not in ordered:
            ordered.append(axis)
    rest = [axis for axis in target.loop if axis not in ordered]
    new_loop = ordered + rest
    if new_loop != target.loop:
        order = {target.loop.index(axis): position for position, axis in enumerate(new_loop)}
        target.reorder(order)
    for ref_axis in reference.loop:
        axis = mapping.get(id(ref_axis))
        if axis is not None and axis in target.loop:
            axis.parallel_type = ref_axis.parallel_type
    return len(ordered)
