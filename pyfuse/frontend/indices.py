"""Values computed from indices: ``iota``, ``arange``, ``tril``, ``triu``, and the indices of
extrema: ``argmax``, ``argmin`` (and so ``x.max(dim).indices``).

They trace :class:`~pyfuse.ir.exprs.IotaOp`, which reads no tensor: a kernel computes the
index from its loop indices, so a causal mask (``pf.tril``, or ``arange(S)[:, None] >=
arange(S)``) costs a compare in the kernel and is never loaded from memory. An argmax is the
smallest index where the value equals the row's max (or is NaN): a max, a compare and a min
of indices, which the normalization scheduler runs as one kernel.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence

from pyfuse.errors import FusionError
from pyfuse.frontend import ops
from pyfuse.frontend.arguments import (
    Keepdims,
    dtype_argument,
    flag,
    int_argument,
    reduction_arguments,
    reduction_dims,
    scalar_value,
    sizes,
)
from pyfuse.frontend.location import user_op
from pyfuse.frontend.tensor import Tensor
from pyfuse.frontend.tensor_methods import tensor_method
from pyfuse.ir import dtypes
from pyfuse.ir import ops as ir_ops
from pyfuse.ir.dtypes import DType

Number = int | float


@user_op("iota")
def iota(shape: int | Sequence[int], dim: int = 0, dtype: DType = dtypes.int64) -> Tensor:
    """A tensor of ``shape`` holding each element's index along ``dim`` (jax.lax's
    broadcasted_iota): ``pf.iota((4, 8), 1)`` is ``[[0, 1, ..., 7]] * 4``."""
    extents = sizes(shape, "shape")
    return Tensor(ir_ops.iota(extents, int_argument(dim, "dim"), dtype_argument(dtype, "pf.int64")))


@user_op("arange")
def arange(
    start: Number, end: Number | None = None, step: Number = 1, dtype: DType | None = None
) -> Tensor:
    """``start, start + step, ...`` up to ``end`` (excluded), as torch.arange: int64 when
    every bound is an int, float32 otherwise (unless ``dtype``): ``pf.arange(seq_len)``."""
    if end is None:
        start, end = 0, start
    bounds: list[Number] = []
    for name, value in (("start", start), ("end", end), ("step", step)):
        number = scalar_value(value)  # a NumPy scalar is a number, as in torch
        if number is None or isinstance(number, bool):
            raise FusionError(f"arange: {name} must be a Python number, got {value!r}")
        if not math.isfinite(number):
            raise FusionError(f"arange: {name} must be finite, got {value!r}")
        bounds.append(number)
    start, end, step = bounds
    if step == 0:
        raise FusionError("arange: step must be nonzero")
    if (end - start) * step < 0:
        raise FusionError(
            f"arange: upper bound and larger bound inconsistent with step sign "
            f"(start={start}, end={end}, step={step})"
        )
    integral = builtins.all(isinstance(v, int) for v in (start, end, step))
    chosen = (
        (dtypes.int64 if integral else dtypes.float32) if dtype is None else dtype_argument(dtype)
    )
    count = max(0, math.ceil((end - start) / step))
    index = Tensor(ir_ops.iota((count,), 0, chosen))
    if step != 1:
        index = ops.mul(index, step)
    return index if start == 0 else ops.add(index, start)


def _triangle(x: Tensor, diagonal: int, lower: bool) -> Tensor:
    if x.ndim < 2:
        raise FusionError(f"needs a tensor of 2 or more dims, got {x.ndim}")
    diagonal = int_argument(diagonal, "diagonal")
    rows, cols = x.shape[-2:]
    offset = ops.sub(iota((rows, cols), 1, dtypes.int32), iota((rows, cols), 0, dtypes.int32))
    keep = ops.le(offset, diagonal) if lower else ops.ge(offset, diagonal)
    return ops.where(keep, x, False if x.dtype.is_bool else 0)


@tensor_method
@user_op("tril")
def tril(x: Tensor, diagonal: int = 0) -> Tensor:
    """``x`` with the elements above the ``diagonal``-th diagonal of its last two dims zeroed
    (torch.tril): ``pf.where(pf.tril(pf.ones_like(s)) > 0, s, -inf)`` masks causally."""
    return _triangle(x, diagonal, lower=True)


@tensor_method
@user_op("triu")
def triu(x: Tensor, diagonal: int = 0) -> Tensor:
    """``x`` with the elements below the ``diagonal``-th diagonal of its last two dims zeroed
    (torch.triu): ``pf.triu(x, 1)``."""
    return _triangle(x, diagonal, lower=False)


def _arg_extremum(x: Tensor, dim: int | None, keepdim: bool, largest: bool) -> Tensor:
    """The first index along ``dim`` (of the flattened ``x`` for None) of the largest or
    smallest value, a NaN counting as both (torch.argmax and torch.argmin)."""
    if x.dtype.is_bool:
        raise FusionError("needs a numeric tensor, got bool (as torch, which has no bool argmax)")
    dim = None if dim is None else int_argument(dim, "dim")  # one dim, as torch (no tuple)
    keepdim = flag(keepdim, "keepdim")
    values = x if dim is not None or x.ndim <= 1 else ops.reshape(x, (-1,))
    (axis,) = reduction_dims(values, 0 if dim is None else dim) or [0]
    if values.ndim == 0:
        # The index of a 0-d tensor is 0 (torch), computed from the input so that the
        # output is a kernel's (an integer times 0: a NaN cast to an integer is no 0 on
        # every path).
        index = ops.mul(ops.cast(ops.ne(values, values), dtypes.int64), 0)
        return ops.reshape(index, (1,) * x.ndim) if keepdim else index
    extent = values.shape[axis]
    if extent == 0:
        raise FusionError(
            f"expected reduction dim {axis} to have non-zero size (an arg-extremum of no "
            "elements has no value, as torch says)"
        )
    extremum = (ops.max if largest else ops.min)(values, axis, True)
    hit = ops.eq(values, extremum)
    if values.dtype.is_floating:
        hit = ops.logical_or(hit, ops.ne(values, values))  # NaN is the extremum, as in torch
    position = iota(values.shape, axis, dtypes.int64)
    first = ops.min(ops.where(hit, position, extent), axis, keepdim and dim is not None)
    if keepdim and dim is None:
        return ops.reshape(first, (1,) * x.ndim)
    return first


# ``dim`` and ``keepdim`` also go by NumPy's names, ``axis`` and ``keepdims``, as in torch.
@tensor_method
@user_op("argmax")
def argmax(
    x: Tensor,
    dim: int | None = None,
    keepdim: bool = False,
    *,
    axis: int | None = None,
    keepdims: Keepdims = None,
) -> Tensor:
    """The int64 index of the largest value along ``dim`` (of the flattened tensor for
    None): the first one on ties, a NaN's if there is one (torch.argmax):
    ``pf.argmax(logits, -1)``."""
    dim, keepdim = reduction_arguments(dim, keepdim, axis, keepdims)
    return _arg_extremum(x, dim, keepdim, largest=True)


@tensor_method
@user_op("argmin")
def argmin(
    x: Tensor,
    dim: int | None = None,
    keepdim: bool = False,
    *,
    axis: int | None = None,
    keepdims: Keepdims = None,
) -> Tensor:
    """The int64 index of the smallest value along ``dim`` (of the flattened tensor for
    None): the first one on ties, a NaN's if there is one (torch.argmin):
    ``pf.argmin(distances, 1)``."""
    dim, keepdim = reduction_arguments(dim, keepdim, axis, keepdims)
    return _arg_extremum(x, dim, keepdim, largest=False)
