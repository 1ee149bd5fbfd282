"""IR builders: each function appends one op (and the broadcasts or casts it needs) to the
fusion being built and returns the new tensor.

Builders check shapes and dtypes and raise :class:`pyfuse.errors.FusionError` with the
constraint and the actual values; the frontend adds the op name and the user's line.
Broadcasting follows NumPy: shapes align from the right, a size-1 (broadcast) axis
stretches. Type promotion follows torch (see :mod:`pyfuse.ir.dtypes`); the math happens
in the promoted type, with explicit :class:`CastOp` s on the operands that differ.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pyfuse.errors import FusionError
from pyfuse.ir import dtypes
from pyfuse.ir.dtypes import DType
from pyfuse.ir.exprs import (
    BinaryOp,
    BinaryOpType,
    BroadcastOp,
    CastOp,
    ExpandOp,
    FullOp,
    IotaOp,
    LinearOp,
    LoadStoreOp,
    MatmulOp,
    ReductionOp,
    ReductionOpType,
    SqueezeOp,
    TernaryOp,
    UnaryOp,
    UnaryOpType,
)
from pyfuse.ir.iterdomain import IterDomain, IterType
from pyfuse.ir.tensor import Scalar, TensorView, Val, new_axes_like

Operand = TensorView | bool | int | float

# Unary ops that are only defined on floats: an integer or bool input is promoted to f32.
FLOAT_ONLY_UNARY = frozenset(
    {
        UnaryOpType.EXP,
        UnaryOpType.LOG,
        UnaryOpType.TANH,
        UnaryOpType.SIGMOID,
        UnaryOpType.GELU,
        UnaryOpType.GELU_TANH,
        UnaryOpType.SILU,
        UnaryOpType.SQRT,
        UnaryOpType.RSQRT,
        UnaryOpType.RECIPROCAL,
        UnaryOpType.SIN,
        UnaryOpType.COS,
        UnaryOpType.ERF,
    }
)

# Rounding ops: an integer is its own floor (torch returns the integer tensor as it is).
ROUNDING_UNARY = frozenset(
    {UnaryOpType.FLOOR, UnaryOpType.CEIL, UnaryOpType.ROUND, UnaryOpType.TRUNC}
)
# Division-like ops torch refuses on bool.
_NO_BOOL_BINARY = frozenset(
    {BinaryOpType.SUB, BinaryOpType.FMOD, BinaryOpType.REMAINDER, BinaryOpType.FLOOR_DIVIDE}
)

LOGICAL_BINARY = frozenset({BinaryOpType.LOGICAL_AND, BinaryOpType.LOGICAL_OR})
BITWISE_BINARY = frozenset(
    {BinaryOpType.BITWISE_AND, BinaryOpType.BITWISE_OR, BinaryOpType.BITWISE_XOR}
)


def normalize_dim(dim: int, ndim: int) -> int:
    """``dim`` as an index in ``[0, ndim)`` (0 for a 0-d tensor); out of range raises."""
    if not -ndim <= dim < max(ndim, 1):
        raise FusionError(f"dim {dim} is out of range for a tensor of rank {ndim}")
    return dim % ndim if ndim else 0


def extent_axis(extent: int) -> IterDomain:
    """A new axis of ``extent`` elements: a broadcast when it is 1."""
    return IterDomain(extent, IterType.BROADCAST if extent == 1 else IterType.ITERATION)


# ---- casts and copies ------------------------------------------------------------------------


def cast(x: TensorView, dtype: DType) -> TensorView:
    """``x`` converted to ``dtype`` (``x`` itself when it already has that dtype)."""
    if x.dtype == dtype:
        return x
    out = TensorView(new_axes_like(x.no_reductions), dtype)
    CastOp(out, x)
    return out


def iota(shape: Sequence[int], dim: int, dtype: DType) -> TensorView:
    """A tensor of ``shape`` whose value is the index along ``dim`` (size-1 axes are
    broadcasts); ``dtype`` an integer or float dtype."""
    shape = [int(extent) for extent in shape]
    if any(extent < 0 for extent in shape):
        raise FusionError(f"iota: negative extent in shape {tuple(shape)}")
    dim = normalize_dim(dim, len(shape))
    if not shape or dtype.is_bool:
        raise FusionError("iota needs a shape of rank 1 or more and an integer or float dtype")
    out = TensorView([extent_axis(extent) for extent in shape], dtype)
    IotaOp(out, dim)
    return out


def full(shape: Sequence[int], value: bool | int | float, dtype: DType) -> TensorView:
    """A tensor of ``shape`` holding ``value`` everywhere (size-1 axes are broadcasts)."""
    out = TensorView([extent_axis(extent) for extent in shape], dtype)
    FullOp(out, Scalar(value, dtype))
    return out


def set_copy(x: TensorView) -> TensorView:
    """A plain copy of ``x`` (a new tensor with the same values)."""
    out = TensorView(new_axes_like(x.no_reductions), x.dtype)
    LoadStoreOp(out, x)
    return out


def materialize(x: TensorView) -> TensorView:
    """A copy of ``x`` whose expanded broadcast axes are real (iteration) axes."""
    axes = [
        IterDomain(axis.logical_extent, IterType.ITERATION)
        if axis.expanded_extent is not None
        else IterDomain(axis.extent, axis.iter_type)
        for axis in x.no_reductions
    ]
    out = TensorView(axes, x.dtype)
    LoadStoreOp(out, x)
    return out


# ---- broadcasting ---------------------------------------------------------------------------


def broadcast(x: TensorView, is_new: Sequence[bool]) -> TensorView:
    """Insert size-1 broadcast axes where ``is_new`` is True."""
    kept = [flag for flag in is_new if not flag]
    if len(kept) != x.ndim:
        raise FusionError(
            f"broadcast flags {list(is_new)} keep {len(kept)} axes but the tensor has rank {x.ndim}"
        )
    if not any(is_new):
        return x
    source = iter(x.no_reductions)
    axes = []
    for flag in is_new:
        if flag:
            axes.append(IterDomain(1, IterType.BROADCAST))
        else:
            old = next(source)
            axes.append(IterDomain(old.extent, old.iter_type, expanded_extent=old.expanded_extent))
    out = TensorView(axes, x.dtype)
    BroadcastOp(out, x, is_new)
    return out


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """NumPy's broadcast of ``shapes``; FusionError naming both sizes when they clash."""
    ndim = max((len(shape) for shape in shapes), default=0)
    result = []
    for position in range(ndim):
        extent = 1
        for shape in shapes:
            offset = position - (ndim - len(shape))
            if offset < 0:
                continue
            size = shape[offset]
            if size == 1 or size == extent:
                continue
            if extent != 1:
                raise FusionError(
                    f"shapes {[tuple(s) for s in shapes]} do not broadcast: size {extent} "
                    f"against {size} at dim {position}"
                )
            extent = size
        result.append(extent)
    return tuple(result)


def expand(x: TensorView, shape: Sequence[int]) -> TensorView:
    """Give the size-1 axes of ``x`` (same rank as ``shape``) the sizes in ``shape``."""
    if tuple(shape) == x.shape:
        return x
    axes = []
    for axis, extent in zip(x.no_reductions, shape, strict=True):
        if axis.logical_extent == extent:
            axes.append(
                IterDomain(axis.extent, axis.iter_type, expanded_extent=axis.expanded_extent)
            )
        elif axis.is_broadcast:
            axes.append(IterDomain(1, IterType.BROADCAST, expanded_extent=extent))
        else:
            raise FusionError(f"cannot expand size {axis.logical_extent} to {extent}")
    out = TensorView(axes, x.dtype)
    ExpandOp(out, x)
    return out


def broadcast_to(x: TensorView, shape: Sequence[int]) -> TensorView:
    """NumPy's ``broadcast_to``: new leading axes, then size-1 axes stretched."""
    shape = tuple(shape)
    if len(shape) < x.ndim:
        raise FusionError(f"cannot broadcast shape {x.shape} to the lower rank {shape}")
    if broadcast_shapes(x.shape, shape) != shape:
        raise FusionError(f"cannot broadcast shape {x.shape} to {shape}")
    lead = len(shape) - x.ndim
    x = broadcast(x, [True] * lead + [False] * x.ndim)
    return expand(x, shape)


def _to_rank(x: TensorView, ndim: int) -> TensorView:
    lead = ndim - x.ndim
    return broadcast(x, [True] * lead + [False] * x.ndim) if lead else x


def _output_axes(operands: Sequence[TensorView]) -> list[IterDomain]:
    """Axes of a pointwise output whose operands share a rank (NumPy broadcasting)."""
    shape = broadcast_shapes(*(op.shape for op in operands))
    axes = []
    for position, extent in enumerate(shape):
        concrete = [op.no_reductions[position] for op in operands]
        if all(axis.is_broadcast for axis in concrete):
            expanded = extent if extent != 1 else None
            axes.append(IterDomain(1, IterType.BROADCAST, expanded_extent=expanded))
        else:
            axes.append(IterDomain(extent, IterType.ITERATION))
    return axes


# ---- pointwise ------------------------------------------------------------------------------


def unary(op: UnaryOpType, x: TensorView) -> TensorView:
    if op in FLOAT_ONLY_UNARY and not x.dtype.is_floating:
        x = cast(x, dtypes.DEFAULT_FLOAT)
    if op == UnaryOpType.NEG and x.dtype.is_bool:
        raise FusionError("negation of a bool tensor is not supported; use logical_not")
    if op in ROUNDING_UNARY and x.dtype.is_bool:
        raise FusionError(f"{op.value} of a bool tensor is not supported (as in torch)")
    if op in ROUNDING_UNARY and x.dtype.is_integer:
        return x
    if op == UnaryOpType.BITWISE_NOT and not x.dtype.is_integer:
        raise FusionError(f"bitwise_not needs an integer tensor, got {x.dtype.name}")
    out_dtype = dtypes.bool_ if op == UnaryOpType.LOGICAL_NOT else x.dtype
    out = TensorView(new_axes_like(x.no_reductions), out_dtype)
    UnaryOp(op, out, x)
    return out


def _math_dtype(
    op: BinaryOpType, tensors: Sequence[TensorView], scalars: Sequence[object]
) -> DType:
    dtype = dtypes.result_type([t.dtype for t in tensors], scalars, [t.ndim == 0 for t in tensors])
    if op == BinaryOpType.DIV and not dtype.is_floating:
        return dtypes.DEFAULT_FLOAT  # true division, like torch's `/`
    if op in LOGICAL_BINARY:
        return dtypes.bool_
    return dtype


def _operand(value: Operand, dtype: DType) -> Val:
    if isinstance(value, TensorView):
        return cast(value, dtype)
    if isinstance(value, bool | int | float):
        return Scalar(value, dtype)
    raise FusionError(f"operand of type {type(value).__name__} is not a tensor or a number")


def binary(op: BinaryOpType, lhs: Operand, rhs: Operand) -> TensorView:
    tensors = [v for v in (lhs, rhs) if isinstance(v, TensorView)]
    if not tensors:
        raise FusionError("at least one operand must be a tensor")
    scalars = [v for v in (lhs, rhs) if not isinstance(v, TensorView)]
    for value in scalars:
        if not isinstance(value, bool | int | float):
            raise FusionError(f"operand of type {type(value).__name__} is not a tensor or a number")
    broadcast_shapes(*(t.shape for t in tensors))  # reports a clash in the user's shapes
    math_dtype = _math_dtype(op, tensors, scalars)
    if op == BinaryOpType.SUB and math_dtype.is_bool:
        raise FusionError(
            "subtraction of bool tensors is not supported (as in torch); use logical_xor, or "
            "cast to an integer dtype first"
        )
    if op in _NO_BOOL_BINARY and math_dtype.is_bool:
        raise FusionError(f"{op.value} of bool tensors is not supported (as in torch)")
    if op in BITWISE_BINARY and not math_dtype.is_integer:
        raise FusionError(
            f"{op.value} needs integer operands (as in torch), got {math_dtype.name}"
            + ("; bools take logical_and/or/xor" if math_dtype.is_bool else "")
        )
    ndim = max(t.ndim for t in tensors)
    ranked = iter([_to_rank(t, ndim) for t in tensors])
    operands = [
        _operand(next(ranked) if isinstance(value, TensorView) else value, math_dtype)
        for value in (lhs, rhs)
    ]
    axes = _output_axes([op for op in operands if isinstance(op, TensorView)])
    out_dtype = dtypes.bool_ if op.is_comparison else math_dtype
    out = TensorView(axes, out_dtype)
    BinaryOp(op, out, operands[0], operands[1])
    return out


def where(condition: Operand, if_true: Operand, if_false: Operand) -> TensorView:
    tensors = [v for v in (condition, if_true, if_false) if isinstance(v, TensorView)]
    if not tensors:
        raise FusionError("where needs at least one tensor operand")
    value_views = [v for v in (if_true, if_false) if isinstance(v, TensorView)]
    value_tensors = [v.dtype for v in value_views]
    value_scalars = [v for v in (if_true, if_false) if not isinstance(v, TensorView)]
    if value_tensors:
        dtype = dtypes.result_type(value_tensors, value_scalars, [v.ndim == 0 for v in value_views])
    else:
        dtype = dtypes.result_type([dtypes.scalar_dtype(value_scalars[0])], value_scalars[1:])
    broadcast_shapes(*(t.shape for t in tensors))
    ndim = max(t.ndim for t in tensors)
    ranked = {id(t): _to_rank(t, ndim) for t in tensors}

    def operand(value: Operand, operand_dtype: DType) -> Val:
        if isinstance(value, TensorView):
            return cast(ranked[id(value)], operand_dtype)
        return _operand(value, operand_dtype)

    operands = [operand(condition, dtypes.bool_), operand(if_true, dtype), operand(if_false, dtype)]
    out = TensorView(_output_axes([op for op in operands if isinstance(op, TensorView)]), dtype)
    TernaryOp(out, *operands)
    return out


# ---- reductions -----------------------------------------------------------------------------


def _reduction_dims(x: TensorView, dims: int | Sequence[int] | None) -> list[int]:
    if dims is None:
        return list(range(x.ndim))
    dim_list = [dims] if isinstance(dims, int) else list(dims)
    normalized = sorted({normalize_dim(d, x.ndim) for d in dim_list})
    if len(normalized) != len(dim_list):
        raise FusionError(f"reduction dims {dim_list} name an axis twice")
    return normalized


def reduce(
    op: ReductionOpType, x: TensorView, dims: int | Sequence[int] | None, keepdim: bool = False
) -> TensorView:
    """Reduce ``x`` over ``dims``. Sums and products of 16-bit floats accumulate in f32, of ints
    and bools in int64 (torch's types); max and min keep the dtype."""
    axes_to_reduce = _reduction_dims(x, dims)
    if any(axis.expanded_extent is not None for axis in x.no_reductions):
        # An expanded broadcast has one stored value; reduce a materialized copy (a kept
        # expanded axis too: the reduction's loops run over the axes its input iterates).
        x = materialize(x)
    trivial = [d for d in axes_to_reduce if x.no_reductions[d].is_broadcast]
    # sum and prod accumulate like torch (16-bit floats in f32, ints and bools in int64) and
    # have an identity for an empty dim; max and min keep the dtype and have none.
    accumulates = op in (ReductionOpType.SUM, ReductionOpType.PROD)
    if not accumulates:
        for d in axes_to_reduce:
            if x.shape[d] == 0:
                raise FusionError(
                    f"{op.value} of an empty dim: dim {d} of shape {list(x.shape)} has size 0 "
                    "and the reduction has no identity"
                )
    if len(trivial) == len(axes_to_reduce):
        # Reducing only size-1 axes (or none: a 0-d tensor) changes no value: squeeze them
        # (keep them for keepdim).
        dtype = x.dtype if not accumulates or x.dtype.is_floating else dtypes.int64
        result = cast(x, dtype) if dtype != x.dtype else set_copy(x)
        if op == ReductionOpType.SUM and dtype.is_floating and trivial:
            # A sum starts from +0.0: one element -0.0 sums to +0.0 (as NumPy's and torch's
            # sums, and a matmul of K = 1, give), so ``x + 0.0`` rather than a bare copy.
            result = binary(BinaryOpType.ADD, result, 0.0)
        return result if keepdim or not trivial else squeeze(result, trivial)
    # Size-1 axes among the reduced ones are left out of the reduction and squeezed after:
    # a reduction axis of one element would only add a loop (or a grid dimension) of one trip.
    real = [d for d in axes_to_reduce if d not in trivial]
    result_dtype = x.dtype
    math_input = x
    if x.dtype.is_bool:
        # max/min of bools is any/all: reduced as int32 (warp shuffles move 32-bit words).
        math_input = cast(x, dtypes.int32)
    if accumulates:
        if not x.dtype.is_floating:
            result_dtype = dtypes.int64
            math_input = cast(x, dtypes.int64)
        elif x.dtype.itemsize < 4:
            math_input = cast(x, dtypes.float32)
    axes = []
    for index, axis in enumerate(math_input.no_reductions):
        if index in real:
            axes.append(IterDomain(axis.logical_extent, IterType.REDUCTION))
        else:
            axes.append(
                IterDomain(axis.extent, axis.iter_type, expanded_extent=axis.expanded_extent)
            )
    out = TensorView(axes, math_input.dtype)
    ReductionOp(op, out, math_input)
    result = cast(out, result_dtype)
    if keepdim:
        flags = [index in real for index in range(x.ndim)]
        result = broadcast(result, flags)
    elif trivial:
        kept = [index for index in range(x.ndim) if index not in real]
        result = squeeze(result, [kept.index(d) for d in trivial])
    return result


def mean(x: TensorView, dims: int | Sequence[int] | None, keepdim: bool = False) -> TensorView:
    if not x.dtype.is_floating:
        raise FusionError(f"mean needs a floating tensor, got {x.dtype.name}; cast it first")
    count = 1
    for dim in _reduction_dims(x, dims):
        count *= x.shape[dim]
    total = reduce(ReductionOpType.SUM, cast(x, _accumulate_dtype(x.dtype)), dims, keepdim)
    # The mean of no elements is NaN, as in torch (0 * NaN).
    scale = 1.0 / count if count else math.nan
    return cast(binary(BinaryOpType.MUL, total, scale), x.dtype)


def _accumulate_dtype(dtype: DType) -> DType:
    return dtypes.float32 if dtype.itemsize < 4 else dtype


# ---- shape and metadata ---------------------------------------------------------------------


def unsqueeze(x: TensorView, dim: int) -> TensorView:
    position = normalize_dim(dim, x.ndim + 1)
    flags = [False] * x.ndim
    flags.insert(position, True)
    return broadcast(x, flags)


def squeeze(x: TensorView, dims: int | Sequence[int] | None = None) -> TensorView:
    """Remove size-1 axes (all of them, or those in ``dims``; other sizes are left, like torch)."""
    if dims is None:
        chosen = [i for i, extent in enumerate(x.shape) if extent == 1]
    else:
        dim_list = [dims] if isinstance(dims, int) else list(dims)
        chosen = sorted({normalize_dim(d, x.ndim) for d in dim_list if x.shape[d] == 1})
    if not chosen:
        return x
    kept = [axis for i, axis in enumerate(x.no_reductions) if i not in chosen]
    out = TensorView(new_axes_like(kept), x.dtype)
    SqueezeOp(out, x, chosen)
    return out


# ---- matmul ---------------------------------------------------------------------------------


def _check_matmul_dtypes(a: TensorView, b: TensorView) -> None:
    if a.dtype != b.dtype:
        raise FusionError(
            f"operands must have the same dtype, got {a.dtype.name} and {b.dtype.name}"
        )
    if not a.dtype.is_floating:
        raise FusionError(f"operands must be floating, got {a.dtype.name}")


def _without_expansion(x: TensorView) -> TensorView:
    if any(axis.expanded_extent is not None for axis in x.no_reductions):
        return materialize(x)
    return x


def matmul(a: TensorView, b: TensorView, out_dtype: DType | None = None) -> TensorView:
    """torch.matmul: ``[..., M, K] @ [..., K, N] -> [..., M, N]`` with batch broadcasting;
    a 1-D operand is a vector (its M or N axis is dropped). ``out_dtype`` (the operands'
    by default) is what the fp32 accumulator rounds to: split-K's parts keep fp32."""
    if a.ndim == 0 or b.ndim == 0:
        raise FusionError(f"operands must have rank >= 1, got shapes {a.shape} and {b.shape}")
    _check_matmul_dtypes(a, b)
    # An expanded broadcast has one stored value per row or column: multiply a real copy.
    a, b = _without_expansion(a), _without_expansion(b)
    k_a = a.shape[-1]
    k_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if k_a != k_b:
        raise FusionError(f"inner sizes differ: {a.shape} @ {b.shape} (K = {k_a} vs {k_b})")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a_axes, b_axes = a.no_reductions, b.no_reductions
    axes = [extent_axis(extent) for extent in batch]
    if a.ndim >= 2:
        axes.append(IterDomain(a_axes[-2].extent, a_axes[-2].iter_type))
    if b.ndim >= 2:
        axes.append(IterDomain(b_axes[-1].extent, b_axes[-1].iter_type))
    axes.append(IterDomain(k_a, IterType.REDUCTION))
    out = TensorView(axes, out_dtype or a.dtype)
    MatmulOp(out, a, b)
    return out


def linear(x: TensorView, weight: TensorView, bias: TensorView | None = None) -> TensorView:
    """``x @ weight.T + bias`` with ``weight [N, K]`` and ``bias [N]``."""
    if x.ndim == 0:
        raise FusionError(f"input must have rank >= 1, got shape {x.shape}")
    if weight.ndim != 2:
        raise FusionError(f"weight must be 2-D [N, K], got shape {weight.shape}")
    _check_matmul_dtypes(x, weight)
    x, weight = _without_expansion(x), _without_expansion(weight)
    if bias is not None:
        bias = _without_expansion(bias)
    n, k = weight.shape
    if x.shape[-1] != k:
        raise FusionError(f"input's last size {x.shape[-1]} differs from weight's K = {k}")
    if bias is not None:
        if bias.shape != (n,):
            raise FusionError(f"bias must have shape ({n},), got {bias.shape}")
        if bias.dtype != x.dtype:
            raise FusionError(f"bias dtype {bias.dtype.name} differs from input's {x.dtype.name}")
    axes = new_axes_like(x.no_reductions[:-1])
    axes.append(IterDomain(n, IterType.BROADCAST if n == 1 else IterType.ITERATION))
    axes.append(IterDomain(k, IterType.REDUCTION))
    out = TensorView(axes, x.dtype)
    LinearOp(out, x, weight, bias)
    return out
