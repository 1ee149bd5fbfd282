"""The shape and view ops: ``reshape`` (``x.view``), ``permute``, ``transpose``, ``x.T``,
``unsqueeze``, ``squeeze``, ``broadcast_to`` (``x.expand``), the slices ``x[...]`` traces,
``cat`` and ``stack``.

All but ``cat`` and ``stack`` (which run in a kernel of their own scheduler) are views: they
compute nothing, and a view of an input is read in place where its layout allows. Each reads
its sizes and dims as torch does (:mod:`~pyfuse.frontend.arguments`) and runs under
:func:`user_op`; those that are also Tensor methods are registered with
:func:`~pyfuse.frontend.tensor_methods.tensor_method`. This module stands under
:mod:`~pyfuse.frontend.ops`, which re-exports its public ops (``pyfuse/__init__.py`` imports
every op from there).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence

from pyfuse.errors import FusionError
from pyfuse.frontend.arguments import Dims, int_argument, normalize_dim, reduction_dims, sizes
from pyfuse.frontend.location import user_op
from pyfuse.frontend.tensor import Tensor, tensor_view
from pyfuse.frontend.tensor_methods import tensor_method
from pyfuse.ir import layout_ops
from pyfuse.ir import ops as ir_ops


@tensor_method
@user_op("broadcast_to")
def broadcast_to(x: Tensor, shape: int | Sequence[int]) -> Tensor:
    """``x`` stretched to ``shape`` without a copy (torch.broadcast_to):
    ``pf.broadcast_to(row, (4, 7))``; -1 keeps an axis's size (``x.expand(-1, 7)``)."""
    tv = tensor_view(x)
    shape = sizes(shape)
    if builtins.any(size < -1 for size in shape):
        raise FusionError(f"sizes must be >= 0, or -1 to keep an axis's size, got {shape}")
    leading = len(shape) - tv.ndim
    if leading >= 0:  # else the IR's broadcast_to says why
        if -1 in shape[:leading]:
            raise FusionError(
                f"broadcast_to: -1 keeps an axis's size, and the new leading axes of {shape} "
                f"have none (x is {tuple(tv.shape)})"
            )
        own = zip(shape[leading:], tv.shape, strict=True)
        shape = shape[:leading] + tuple(mine if size == -1 else size for size, mine in own)
    return Tensor(ir_ops.broadcast_to(tv, shape))


@user_op("cat")
def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """The tensors joined along ``dim`` in their promoted dtype (torch.cat): ``pf.cat([a, b],
    -1)``. It runs as a kernel of its own that reads each tensor from memory."""
    if isinstance(tensors, Tensor) or not isinstance(tensors, Sequence):
        raise FusionError("cat takes a list or tuple of tensors")
    views = [tensor_view(t, "each tensor of cat") for t in tensors]
    return Tensor(layout_ops.cat(views, int_argument(dim, "dim")))


@user_op("stack")
def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """The tensors, of one shape, joined along a new axis ``dim`` (torch.stack):
    ``pf.stack([a, b], 0)``."""
    if isinstance(tensors, Tensor) or not isinstance(tensors, Sequence) or not tensors:
        raise FusionError("stack takes a non-empty list or tuple of tensors")
    views = [tensor_view(t, "each tensor of stack") for t in tensors]
    shapes = {tuple(tv.shape) for tv in views}
    if len(shapes) > 1:
        raise FusionError(f"stack needs tensors of one shape, got {sorted(shapes)}")
    axis = normalize_dim(dim, views[0].ndim + 1)  # the result's rank: one more
    return Tensor(layout_ops.cat([ir_ops.unsqueeze(tv, axis) for tv in views], axis))


@tensor_method
@user_op("getitem")
def slice_axes(
    x: Tensor, starts: Sequence[int], steps: Sequence[int], counts: Sequence[int]
) -> Tensor:
    """Elements ``starts[d] + steps[d] * i`` (``i < counts[d]``) of every axis ``d``: what
    ``x[...]`` traces (a view of an input is read in place)."""
    return Tensor(layout_ops.slice_axes(tensor_view(x), starts, steps, counts))


@tensor_method
@user_op("unsqueeze")
def unsqueeze(x: Tensor, dim: int) -> Tensor:
    """A new size-1 axis at ``dim`` (torch.unsqueeze): ``pf.unsqueeze(v, 0)``."""
    return Tensor(ir_ops.unsqueeze(tensor_view(x), normalize_dim(dim, x.ndim + 1)))


@tensor_method
@user_op("squeeze")
def squeeze(x: Tensor, dim: Dims = None) -> Tensor:
    """Drop size-1 axes (those of ``dim`` only, when given; other sizes stay, like torch):
    ``pf.squeeze(x, 0)``."""
    dims = None if dim is None else reduction_dims(x, dim, empty_is_all=False)
    return Tensor(ir_ops.squeeze(tensor_view(x), dims))


@tensor_method
@user_op("permute")
def permute(x: Tensor, dims: int | Sequence[int]) -> Tensor:
    """The axes of ``x`` reordered (torch.permute): ``pf.permute(x, (2, 0, 1))``."""
    return Tensor(layout_ops.permute(tensor_view(x), sizes(dims, "dims")))


@tensor_method
@user_op("transpose")
def transpose(x: Tensor, dim0: int, dim1: int) -> Tensor:
    """``x`` with axes ``dim0`` and ``dim1`` swapped (torch.transpose):
    ``pf.transpose(x, 0, 1)``."""
    tv = tensor_view(x)
    return Tensor(
        layout_ops.transpose(tv, normalize_dim(dim0, tv.ndim), normalize_dim(dim1, tv.ndim))
    )


@tensor_method
@user_op("t")
def t(x: Tensor) -> Tensor:
    """``x.T``: reverses the axes (a transpose for 2-D, like torch)."""
    tv = tensor_view(x)
    return Tensor(layout_ops.permute(tv, tuple(reversed(range(tv.ndim)))))


@tensor_method
@user_op("reshape")
def reshape(x: Tensor, shape: int | Sequence[int]) -> Tensor:
    """``x`` viewed with ``shape``, one size may be -1 (torch.reshape):
    ``pf.reshape(x, (2, -1))``."""
    return Tensor(layout_ops.reshape(tensor_view(x), sizes(shape, "shape")))
