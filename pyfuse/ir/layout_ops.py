"""IR builders that rearrange elements: slices, ``cat``, permutations and reshapes.

Like :mod:`pyfuse.ir.ops` (the pointwise, broadcast, reduction and matmul builders), each
function appends one op to the fusion being built and returns the new tensor, or returns its
input where the op would change nothing; bad shapes raise
:class:`pyfuse.errors.FusionError` with the constraint and the actual values.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyfuse.errors import FusionError
from pyfuse.ir import dtypes
from pyfuse.ir.exprs import CatOp, PermuteOp, ReshapeOp, SliceOp
from pyfuse.ir.iterdomain import IterDomain, IterType, Merge, Split
from pyfuse.ir.ops import cast, extent_axis, materialize, normalize_dim
from pyfuse.ir.tensor import TensorView, new_axes_like


def _window_axis(axis: IterDomain, count: int) -> IterDomain:
    """The axis of ``count`` elements a slice makes of ``axis``: an expanded broadcast (no
    memory along it) stays one."""
    if axis.expanded_extent is not None and count > 1:
        return IterDomain(1, IterType.BROADCAST, expanded_extent=count)
    return extent_axis(count)


def slice_axes(
    x: TensorView, starts: Sequence[int], steps: Sequence[int], counts: Sequence[int]
) -> TensorView:
    """Elements ``starts[d] + steps[d] * i`` for ``i < counts[d]`` of every axis ``d``
    (``x`` itself when that is every element)."""
    windows = list(zip(x.shape, starts, steps, counts, strict=True))
    for extent, start, step, count in windows:
        if step < 1 or count < 0 or start < 0 or (count and start + step * (count - 1) >= extent):
            raise FusionError(
                f"slice of an axis of {extent} elements from {start} by {step}, {count} times, "
                "is out of range"
            )
    if all(start == 0 and step == 1 and count == e for e, start, step, count in windows):
        return x
    axes = [
        IterDomain(axis.extent, axis.iter_type, expanded_extent=axis.expanded_extent)
        if (start, step, count) == (0, 1, extent)
        else _window_axis(axis, count)
        for axis, (extent, start, step, count) in zip(x.no_reductions, windows, strict=True)
    ]
    out = TensorView(axes, x.dtype)
    SliceOp(out, x, [w[1] for w in windows], [w[2] for w in windows])
    return out


def cat(tensors: Sequence[TensorView], dim: int) -> TensorView:
    """``torch.cat``: the tensors joined along ``dim``, in the promoted dtype. Every tensor has
    the same rank and the same extents off ``dim``; 1-D empty tensors are skipped, as torch
    does (its legacy rule)."""
    if not tensors:
        raise FusionError("cat needs at least one tensor")
    dtype = dtypes.result_type([tv.dtype for tv in tensors], [])
    kept = [tv for tv in tensors if not (tv.ndim == 1 and tv.shape[0] == 0)] or [tensors[0]]
    first = kept[0]
    if first.ndim == 0:
        raise FusionError("cat of 0-d tensors: unsqueeze them first, or use stack")
    axis = normalize_dim(dim, first.ndim)
    for tv in kept[1:]:
        if tv.ndim != first.ndim:
            raise FusionError(
                f"cat of tensors of rank {first.ndim} and {tv.ndim}: ranks must be equal"
            )
        for d, (a, b) in enumerate(zip(first.shape, tv.shape, strict=True)):
            if d != axis and a != b:
                raise FusionError(
                    f"cat along dim {axis}: shapes {list(first.shape)} and {list(tv.shape)} "
                    f"differ in dim {d}"
                )
    if len(kept) == 1:
        return cast(first, dtype)
    extents = list(first.shape)
    extents[axis] = sum(tv.shape[axis] for tv in kept)
    out = TensorView([extent_axis(extent) for extent in extents], dtype)
    CatOp(out, kept, axis)
    return out


def permute(x: TensorView, perm: Sequence[int]) -> TensorView:
    order = [normalize_dim(d, x.ndim) for d in perm]
    if sorted(order) != list(range(x.ndim)):
        raise FusionError(f"permutation {list(perm)} is not a permutation of {x.ndim} dims")
    if order == list(range(x.ndim)):
        return x
    axes = x.no_reductions
    out = TensorView(new_axes_like([axes[source] for source in order]), x.dtype)
    PermuteOp(out, x, order)
    return out


def transpose(x: TensorView, dim0: int, dim1: int) -> TensorView:
    order = list(range(x.ndim))
    a, b = normalize_dim(dim0, x.ndim), normalize_dim(dim1, x.ndim)
    order[a], order[b] = order[b], order[a]
    return permute(x, order)


def _infer_shape(shape: Sequence[int], numel: int) -> tuple[int, ...]:
    shape = list(shape)
    unknown = [i for i, extent in enumerate(shape) if extent == -1]
    if len(unknown) > 1:
        raise FusionError(f"reshape to {shape}: only one size may be -1")
    if any(extent < -1 for extent in shape):
        raise FusionError(f"reshape to {shape}: sizes must be >= 0 or -1")
    known = 1
    for extent in shape:
        if extent != -1:
            known *= extent
    if unknown:
        if known == 0 or numel % known:
            raise FusionError(f"reshape to {shape} does not fit {numel} elements")
        shape[unknown[0]] = numel // known
    elif known != numel:
        raise FusionError(f"reshape to {tuple(shape)} has {known} elements, the input {numel}")
    return tuple(shape)


def reshape(x: TensorView, shape: Sequence[int]) -> TensorView:
    """A view reshape. The output's root axes copy the input's; its logical axes come from
    merging each group of root axes whose product matches a group of output sizes, then
    splitting the merged axis into the output sizes. Size-1 axes stand apart."""
    new_shape = _infer_shape(shape, x.numel)
    if new_shape == x.shape:
        return x
    if any(axis.expanded_extent is not None for axis in x.no_reductions):
        # An expanded broadcast has no memory to view: reshape a materialized copy.
        x = materialize(x)
    root = new_axes_like(x.no_reductions)
    if x.numel == 0:
        # No element to keep in place: the output's axes need no derivation from the input's
        # (and sizes of 0 have no merge and split that relate them).
        axes = [extent_axis(extent) for extent in new_shape]
        empty = TensorView(axes, x.dtype, root=root)
        ReshapeOp(empty, x)
        return empty
    sources = [axis for axis in root if axis.logical_extent != 1]
    targets = [extent for extent in new_shape if extent != 1]
    derived: list[IterDomain] = []
    s_index = 0
    t_index = 0
    while t_index < len(targets):
        group_in = [sources[s_index]]
        group_out = [targets[t_index]]
        s_index += 1
        t_index += 1
        product_in, product_out = group_in[0].extent, group_out[0]
        while product_in != product_out:
            if product_in < product_out:
                group_in.append(sources[s_index])
                product_in *= sources[s_index].extent
                s_index += 1
            else:
                group_out.append(targets[t_index])
                product_out *= targets[t_index]
                t_index += 1
        merged = group_in[0]
        for axis in group_in[1:]:
            merged = Merge(merged, axis).output
        for extent in group_out[:-1]:
            split = Split(merged, extent, inner_split=False)
            derived.append(split.outer)
            merged = split.inner
        derived.append(merged)
    derived_iter = iter(derived)
    logical = [
        IterDomain(1, IterType.BROADCAST) if extent == 1 else next(derived_iter)
        for extent in new_shape
    ]
    out = TensorView(logical, x.dtype, root=root)
    ReshapeOp(out, x)
    return out
