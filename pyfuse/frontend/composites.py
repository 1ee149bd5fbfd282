"""The composite ops: torch's activations, reductions and predicates traced from the
primitive ops of :mod:`pyfuse.frontend.ops`.

Each composite is a short composition of ops the IR already has, so the kernels it gives use
only IR ops that are tested on their own; the reference (``FusedFunction.reference``)
evaluates the same composition in float64. Float composites compute 16-bit inputs in fp32
and round once at the end, as torch's opmath does. Where torch's semantics are the subtle
part (NaN, empty and 0-d inputs, all -inf rows of logsumexp, the threshold of softplus), the
docstring says which rule is followed. Every op runs under :func:`user_op`: an error names
the op and the user's line. Those that are also Tensor methods (``x.clamp``, ``x.softmax``)
are registered with :func:`~pyfuse.frontend.tensor_methods.tensor_method`.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence

from pyfuse.errors import FusionError
from pyfuse.frontend import ops
from pyfuse.frontend.arguments import (
    Dims,
    Keepdims,
    check_scalar_fits,
    dtype_argument,
    flag,
    normalize_dim,
    reduction_arguments,
    reduction_dims,
    scalar_value,
    sizes,
)
from pyfuse.frontend.location import user_op
from pyfuse.frontend.ops import cast
from pyfuse.frontend.tensor import Tensor, TensorLike
from pyfuse.frontend.tensor_methods import tensor_method
from pyfuse.ir import dtypes
from pyfuse.ir import ops as ir_ops
from pyfuse.ir.dtypes import DType

# The largest finite value of each float dtype (torch.finfo(dtype).max): nan_to_num's default.
_FLOAT_MAX = {
    dtypes.float32.name: 3.4028234663852886e38,
    dtypes.float16.name: 65504.0,
    dtypes.bfloat16.name: 3.3895313892515355e38,
    dtypes.float64.name: 1.7976931348623157e308,
}


def _math_dtype(dtype: DType) -> DType:
    """The dtype torch computes a float op in: fp32 for the 16-bit floats."""
    if not dtype.is_floating:
        raise FusionError(f"needs a floating tensor, got {dtype.name}")
    return dtypes.float32 if dtype.itemsize < 4 else dtype


def _promoted(x: Tensor) -> tuple[Tensor, DType]:
    """``x`` in its math dtype and the result dtype of a float function of it: integers and
    bools give float32, as torch's exp and log do."""
    result = x.dtype if x.dtype.is_floating else dtypes.float32
    return cast(x, _math_dtype(result)), result


def _count(x: Tensor, dims: Sequence[int]) -> int:
    return math.prod(x.shape[d] for d in dims)


# ---- elementwise -----------------------------------------------------------------------------


@tensor_method
@user_op("clamp")
def clamp(x: Tensor, min: TensorLike | None = None, max: TensorLike | None = None) -> Tensor:  # noqa: A002
    """``minimum(maximum(x, min), max)`` (torch.clamp): NaN in any operand gives NaN, and
    ``min > max`` gives ``max``; the dtype is torch's promotion of all three:
    ``pf.clamp(x, 0.0, 6.0)``."""
    if min is None and max is None:
        raise FusionError("At least one of 'min' or 'max' must not be None")
    if x.dtype.is_bool:
        raise FusionError("clamp of a bool tensor is not supported (as in torch)")
    result = x
    if min is not None:
        result = ops.maximum(result, min)
    if max is not None:
        result = ops.minimum(result, max)
    return result


clip = clamp


@user_op("leaky_relu")
def leaky_relu(x: Tensor, negative_slope: float = 0.01) -> Tensor:
    """``x`` where ``x > 0``, else ``negative_slope * x`` (torch.nn.functional.leaky_relu):
    ``pf.leaky_relu(x, 0.2)``."""
    math_x = cast(x, _math_dtype(x.dtype))
    return cast(ops.where(math_x > 0, math_x, math_x * negative_slope), x.dtype)


def _expm1(x: Tensor) -> Tensor:
    """``exp(x) - 1`` without its cancellation near 0: the Taylor series (to x**8, 1e-8
    relative) below ``|x| = 0.5``, ``exp(x) - 1`` above."""
    series = x * (1.0 / 40320.0) + 1.0 / 5040.0
    for coefficient in (1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0):
        series = series * x + coefficient
    return ops.where(ops.abs(x) < 0.5, series * x, ops.exp(x) - 1.0)


def _log1p(x: Tensor) -> Tensor:
    """``log(1 + x)`` accurate near 0: ``2 atanh(s)`` with ``s = x / (2 + x)`` by its series
    (to s**17, 1e-9 relative) below ``|x| = 0.5``, ``log(1 + x)`` above (where log is
    accurate: its argument is away from 1)."""
    s = x / (x + 2.0)
    s2 = s * s
    series = s2 * (1.0 / 17.0) + 1.0 / 15.0
    for coefficient in (1.0 / 13.0, 1.0 / 11.0, 1.0 / 9.0, 1.0 / 7.0, 0.2, 1.0 / 3.0, 1.0):
        series = series * s2 + coefficient
    return ops.where(ops.abs(x) < 0.5, 2.0 * s * series, ops.log(x + 1.0))


@tensor_method
@user_op("expm1")
def expm1(x: Tensor) -> Tensor:
    """``exp(x) - 1``, accurate near 0 (torch.expm1): ``pf.expm1(x)``."""
    math_x, dtype = _promoted(x)
    return cast(_expm1(math_x), dtype)


@tensor_method
@user_op("log1p")
def log1p(x: Tensor) -> Tensor:
    """``log(1 + x)``, accurate near 0 (torch.log1p): ``pf.log1p(x)``."""
    math_x, dtype = _promoted(x)
    return cast(_log1p(math_x), dtype)


@user_op("elu")
def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """``x`` where ``x > 0``, else ``alpha * expm1(x)`` (torch.nn.functional.elu):
    ``pf.elu(x)``."""
    math_x = cast(x, _math_dtype(x.dtype))
    return cast(ops.where(math_x > 0, math_x, _expm1(math_x) * alpha), x.dtype)


@user_op("softplus")
def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta x)) / beta``, and ``x`` itself where ``beta x > threshold``
    (torch.nn.functional.softplus), computed as ``max(z, 0) + log1p(exp(-|z|))`` so that no
    exp overflows: ``pf.softplus(x)``."""
    math_x = cast(x, _math_dtype(x.dtype))
    z = math_x * beta
    smooth = (ops.maximum(z, 0.0) + _log1p(ops.exp(-ops.abs(z)))) / beta
    return cast(ops.where(z > threshold, math_x, smooth), x.dtype)


def _relu6_of_x_plus_3(x: Tensor) -> Tensor:
    return ops.minimum(ops.maximum(x + 3.0, 0.0), 6.0)


@user_op("hardsigmoid")
def hardsigmoid(x: Tensor) -> Tensor:
    """``min(max(x + 3, 0), 6) / 6`` (torch.nn.functional.hardsigmoid): ``pf.hardsigmoid(x)``."""
    math_x = cast(x, _math_dtype(x.dtype))
    return cast(_relu6_of_x_plus_3(math_x) / 6.0, x.dtype)


@user_op("hardswish")
def hardswish(x: Tensor) -> Tensor:
    """``x * min(max(x + 3, 0), 6) / 6`` (torch.nn.functional.hardswish): ``pf.hardswish(x)``."""
    math_x = cast(x, _math_dtype(x.dtype))
    return cast(math_x * _relu6_of_x_plus_3(math_x) / 6.0, x.dtype)


@tensor_method
@user_op("sign")
def sign(x: Tensor) -> Tensor:
    """-1, 0 or 1 in ``x``'s dtype (torch.sign); NaN gives 0 as in torch (NumPy gives NaN),
    a bool tensor is itself: ``pf.sign(x)``."""
    if x.dtype.is_bool:
        return x
    return cast(x > 0, x.dtype) - cast(x < 0, x.dtype)


@tensor_method
@user_op("isnan")
def isnan(x: Tensor) -> Tensor:
    """True where ``x`` is NaN (torch.isnan; never for integers): ``pf.isnan(x)``."""
    return ops.ne(x, x)


@tensor_method
@user_op("isinf")
def isinf(x: Tensor) -> Tensor:
    """True where ``x`` is +-inf (torch.isinf): ``pf.isinf(x)``."""
    if not x.dtype.is_floating:
        return ops.ne(x, x)  # all False, in x's shape
    return ops.eq(ops.abs(x), math.inf)


@tensor_method
@user_op("isfinite")
def isfinite(x: Tensor) -> Tensor:
    """True where ``x`` is neither NaN nor +-inf (torch.isfinite): ``pf.isfinite(x)``."""
    if not x.dtype.is_floating:
        return ops.eq(x, x)  # all True, in x's shape
    return ops.lt(ops.abs(x), math.inf)


@tensor_method
@user_op("nan_to_num")
def nan_to_num(
    x: Tensor, nan: float | None = 0.0, posinf: float | None = None, neginf: float | None = None
) -> Tensor:
    """NaN, +inf and -inf replaced by ``nan``, ``posinf`` and ``neginf``; the infinities by
    default by the dtype's largest and lowest finite values (torch.nan_to_num); integers
    and bools are unchanged: ``pf.nan_to_num(x)``; ``nan=None`` is 0, as in torch."""
    if not x.dtype.is_floating:
        return x
    largest = _FLOAT_MAX[x.dtype.name]
    high = largest if posinf is None else posinf
    low = -largest if neginf is None else neginf
    result = ops.where(ops.eq(x, -math.inf), low, x)
    result = ops.where(ops.eq(x, math.inf), high, result)
    return ops.where(ops.ne(x, x), 0.0 if nan is None else nan, result)


@tensor_method
@user_op("exp2")
def exp2(x: Tensor) -> Tensor:
    """``2 ** x`` (torch.exp2; integers give float32): ``pf.exp2(x)``."""
    math_x, dtype = _promoted(x)
    return cast(ops.pow(2.0, math_x), dtype)


@tensor_method
@user_op("log2")
def log2(x: Tensor) -> Tensor:
    """Base-2 logarithm, as ``log(x) / ln 2`` (torch.log2; a few ulps from exact at powers of
    two): ``pf.log2(x)``."""
    math_x, dtype = _promoted(x)
    return cast(ops.log(math_x) * (1.0 / math.log(2.0)), dtype)


@tensor_method
@user_op("log10")
def log10(x: Tensor) -> Tensor:
    """Base-10 logarithm, as ``log(x) / ln 10`` (torch.log10): ``pf.log10(x)``."""
    math_x, dtype = _promoted(x)
    return cast(ops.log(math_x) * (1.0 / math.log(10.0)), dtype)


def _truth(value: TensorLike) -> Tensor | bool:
    if isinstance(value, Tensor):
        return value if value.dtype.is_bool else ops.ne(value, 0)
    number = scalar_value(value)
    if number is None:
        raise FusionError(f"operand must be a tensor or a Python number, got {value!r}")
    return builtins.bool(number)


@tensor_method
@user_op("logical_xor")
def logical_xor(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """Exactly one nonzero, as a bool tensor (torch.logical_xor):
    ``pf.logical_xor(x > 0, y > 0)``."""
    a, b = _truth(lhs), _truth(rhs)
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise FusionError("at least one operand must be a tensor")
    return ops.logical_or(ops.logical_and(a, _not(b)), ops.logical_and(_not(a), b))


def _not(value: Tensor | bool) -> Tensor | bool:
    return ops.logical_not(value) if isinstance(value, Tensor) else not value


# ---- tensor creation -------------------------------------------------------------------------


def _fill_dtype(fill_value: bool | int | float) -> DType:
    """torch.full's dtype for a fill value: bool, int64 or float32."""
    return dtypes.scalar_dtype(fill_value)


def _filled(shape: Sequence[int], fill_value: object, dtype: DType | None) -> Tensor:
    value = scalar_value(fill_value)
    if value is None:
        raise FusionError(f"fill_value must be a Python number, got {type(fill_value).__name__}")
    dtype = _fill_dtype(value) if dtype is None else dtype_argument(dtype)
    if builtins.any(not isinstance(extent, int) or extent < 0 for extent in shape):
        raise FusionError(f"size must be non-negative ints, got {tuple(shape)}")
    check_scalar_fits(value, dtype)
    if dtype.is_integer and isinstance(value, float) and not math.isfinite(value):
        raise FusionError(f"value {value} cannot be converted to type {dtype.name}")
    return Tensor(ir_ops.full(tuple(shape), value, dtype))


@user_op("full")
def full(size: int | Sequence[int], fill_value: float, dtype: DType | None = None) -> Tensor:
    """A tensor of ``size`` holding ``fill_value`` (torch.full; the dtype is the value's:
    bool, int64 or float32, unless given): ``pf.full((4, 8), 0.5)``."""
    return _filled(sizes(size), fill_value, dtype)


@user_op("full_like")
def full_like(x: Tensor, fill_value: float, dtype: DType | None = None) -> Tensor:
    """A tensor of ``x``'s shape (and dtype, unless given) holding ``fill_value``
    (torch.full_like): ``pf.full_like(x, -1.0)``."""
    return _filled(x.shape, fill_value, x.dtype if dtype is None else dtype)


@user_op("zeros_like")
def zeros_like(x: Tensor, dtype: DType | None = None) -> Tensor:
    """Zeros of ``x``'s shape and dtype (torch.zeros_like): ``pf.zeros_like(x)``."""
    chosen = x.dtype if dtype is None else dtype_argument(dtype)
    return _filled(x.shape, False if chosen.is_bool else 0, chosen)


@user_op("ones_like")
def ones_like(x: Tensor, dtype: DType | None = None) -> Tensor:
    """Ones of ``x``'s shape and dtype (torch.ones_like): ``pf.ones_like(x)``."""
    chosen = x.dtype if dtype is None else dtype_argument(dtype)
    return _filled(x.shape, True if chosen.is_bool else 1, chosen)


# ---- reductions ------------------------------------------------------------------------------
# ``dim`` and ``keepdim`` also go by NumPy's names, ``axis`` and ``keepdims``, as in torch (see
# :func:`~pyfuse.frontend.arguments.reduction_arguments`).


@tensor_method
@user_op("amax")
def amax(
    x: Tensor,
    dim: Dims = None,
    keepdim: bool = False,
    *,
    axis: Dims = None,
    keepdims: Keepdims = None,
) -> Tensor:
    """The largest value over ``dim`` (all by default, or for ``()``), NaN propagating
    (torch.amax): ``pf.amax(x, -1)``."""
    # The dims are read here: pf.max(x, other) of a tensor is the elementwise maximum, which
    # torch.amax(x, other) is not.
    dim, keepdim = reduction_arguments(dim, keepdim, axis, keepdims)
    return ops.max(x, reduction_dims(x, dim), keepdim)


@tensor_method
@user_op("amin")
def amin(
    x: Tensor,
    dim: Dims = None,
    keepdim: bool = False,
    *,
    axis: Dims = None,
    keepdims: Keepdims = None,
) -> Tensor:
    """The smallest value over ``dim`` (all by default, or for ``()``), NaN propagating
    (torch.amin): ``pf.amin(x, (0, 1))``."""
    dim, keepdim = reduction_arguments(dim, keepdim, axis, keepdims)
    return ops.min(x, reduction_dims(x, dim), keepdim)


@tensor_method
@user_op("any")
def any(  # noqa: A001 - torch's name
    x: Tensor,
    dim: Dims = None,
    keepdim: bool = False,
    *,
    axis: Dims = None,
    keepdims: Keepdims = None,
) -> Tensor:
    """True where some element over ``dim`` is nonzero (NaN counts), False over no elements
    (torch.any): ``pf.any(x > 0, -1)``."""
    dim, keepdim = reduction_arguments(dim, keepdim, axis, keepdims)
    dims = reduction_dims(x, dim)
    truth = x if x.dtype.is_bool else ops.ne(x, 0)
    if builtins.any(x.shape[d] == 0 for d in dims):
        return ops.gt(ops.sum(truth, dims, keepdim), 0)  # max has no identity for no elements
    return ops.max(truth, dims, keepdim)


@tensor_method
@user_op("all")
def all(  # noqa: A001 - torch's name
    x: Tensor,
    dim: Dims = None,
    keepdim: bool = False,
    *,
    axis: Dims = None,
    keepdims: Keepdims = None,
) -> Tensor:
    """True where every element over ``dim`` is nonzero, True over no elements (torch.all):
    ``pf.all(mask)``."""
    dim, keepdim = reduction_arguments(dim, keepdim, axis, keepdims)
    dims = reduction_dims(x, dim)
    truth = x if x.dtype.is_bool else ops.ne(x, 0)
    if builtins.any(x.shape[d] == 0 for d in dims):
        return ops.eq(ops.sum(ops.logical_not(truth), dims, keepdim), 0)
    return ops.min(truth, dims, keepdim)


def _correction(unbiased: bool | None, correction: float | None) -> float:
    if unbiased is not None and correction is not None:
        raise FusionError("give either unbiased or correction, not both")
    if correction is not None:
        value = scalar_value(correction)
        if value is None or isinstance(value, bool):
            raise FusionError(f"correction must be a number, got {correction!r}")
        return value
    return 0 if unbiased is not None and not flag(unbiased, "unbiased") else 1


@tensor_method
@user_op("var")
def var(
    x: Tensor,
    dim: Dims | bool = None,
    unbiased: bool | None = None,
    keepdim: bool = False,
    *,
    correction: float | None = None,
    axis: Dims = None,
    keepdims: Keepdims = None,
) -> Tensor:
    """``sum((x - mean)**2) / max(0, N - correction)`` over ``dim`` (torch.var; ``unbiased``
    is the older spelling of correction 1 or 0); NaN or inf when ``N <= correction``, as
    in torch: ``pf.var(x, -1, keepdim=True)``."""
    if isinstance(dim, bool):  # torch.var(x, False): the legacy unbiased flag
        dim, unbiased = None, dim
    dim, keepdim = reduction_arguments(dim, keepdim, axis, keepdims)
    if not x.dtype.is_floating:
        raise FusionError(f"var and std need a floating tensor, got {x.dtype.name}")
    dims = reduction_dims(x, dim)
    math_x = cast(x, _math_dtype(x.dtype))
    centered = math_x - ops.mean(math_x, dims, keepdim=True)
    total = ops.sum(centered * centered, dims, keepdim)
    dof = builtins.max(0.0, float(_count(x, dims)) - _correction(unbiased, correction))
    # No degrees of freedom: total / 0 is NaN (or inf), the value torch gives.
    return cast(total * (1.0 / dof) if dof else total / 0.0, x.dtype)


@tensor_method
@user_op("std")
def std(
    x: Tensor,
    dim: Dims | bool = None,
    unbiased: bool | None = None,
    keepdim: bool = False,
    *,
    correction: float | None = None,
    axis: Dims = None,
    keepdims: Keepdims = None,
) -> Tensor:
    """The square root of :func:`var` (torch.std): ``pf.std(x, 0, correction=0)``."""
    if not x.dtype.is_floating:
        raise FusionError(f"var and std need a floating tensor, got {x.dtype.name}")
    math_x = cast(x, _math_dtype(x.dtype))
    variance = var(
        math_x, dim, unbiased, keepdim, correction=correction, axis=axis, keepdims=keepdims
    )
    return cast(ops.sqrt(variance), x.dtype)


@tensor_method
@user_op("logsumexp")
def logsumexp(
    x: Tensor,
    dim: Dims = None,
    keepdim: bool = False,
    *,
    axis: Dims = None,
    keepdims: Keepdims = None,
) -> Tensor:
    """``log(sum(exp(x)))`` over ``dim`` (required, as in torch; or ``axis``), stable: the max
    is subtracted first, and an infinite max is replaced by 0 as torch does, so a row of -inf
    gives -inf and a +inf gives +inf; no elements give -inf: ``pf.logsumexp(x, -1)``."""
    # keepdim is read as a flag here, before it picks the result's shape below.
    dim, keepdim = reduction_arguments(dim, keepdim, axis, keepdims)
    if dim is None:
        raise FusionError("logsumexp() needs dim (or axis), as in torch")
    math_x, dtype = _promoted(x)
    dims = reduction_dims(x, dim)
    if builtins.any(x.shape[d] == 0 for d in dims):
        return cast(ops.log(ops.sum(ops.exp(math_x), dims, keepdim)), dtype)
    peak = ops.max(math_x, dims, keepdim=True)
    peak = ops.where(ops.eq(ops.abs(peak), math.inf), 0.0, peak)
    total = ops.sum(ops.exp(math_x - peak), dims, keepdim)
    return cast(ops.log(total) + (peak if keepdim else ops.squeeze(peak, dims)), dtype)


def _shifted_by_max(x: Tensor, dim: int) -> Tensor:
    """``x - max(x, dim)`` in the math dtype; ``x`` itself along an empty dim, whose result
    has no elements (and whose max has no identity)."""
    math_x = cast(x, _math_dtype(x.dtype))
    if x.ndim and x.shape[dim] == 0:
        return math_x
    return math_x - ops.max(math_x, dim, keepdim=True)


@tensor_method
@user_op("softmax")
def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """``exp(x - max) / sum(exp(x - max))`` along ``dim``, in fp32 for 16-bit inputs
    (torch.softmax; a 0-d tensor gives 1): ``pf.softmax(x, -1)``."""
    # One int dim, as torch: None would read as every dim here, not as torch's legacy choice.
    dim = normalize_dim(dim, x.ndim)
    shifted = _shifted_by_max(x, dim)
    numerator = ops.exp(shifted)
    return cast(numerator / ops.sum(numerator, dim, keepdim=True), x.dtype)


@tensor_method
@user_op("log_softmax")
def log_softmax(x: Tensor, dim: int) -> Tensor:
    """``x - max - log(sum(exp(x - max)))`` along ``dim`` (torch.log_softmax; a row of -inf
    gives NaN, as in torch): ``pf.log_softmax(x, -1)``."""
    dim = normalize_dim(dim, x.ndim)
    shifted = _shifted_by_max(x, dim)
    return cast(shifted - ops.log(ops.sum(ops.exp(shifted), dim, keepdim=True)), x.dtype)


def _normalized_dims(x: Tensor, weight: Tensor | None) -> tuple[int, ...]:
    if weight is not None and not isinstance(weight, Tensor):
        # torch's layer_norm takes normalized_shape second; pyfuse's takes the weight.
        raise FusionError(
            f"the weight must be a tensor, got {type(weight).__name__} {weight!r}: the "
            "normalized dims are the trailing dims the weight covers (the last without one)"
        )
    count = 1 if weight is None else weight.ndim
    if count > x.ndim or (weight is not None and x.shape[-count:] != weight.shape):
        shape = None if weight is None else weight.shape
        raise FusionError(f"weight shape {shape} does not match the last dims of {x.shape}")
    return tuple(range(x.ndim - count, x.ndim))


@user_op("layer_norm", checks_itself=("weight",))  # torch passes a shape there
def layer_norm(
    x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5
) -> Tensor:
    """Normalize over the trailing dims that ``weight`` covers (the last dim without a weight)
    with the biased variance (torch.nn.functional.layer_norm): ``pf.layer_norm(x, w, b)``."""
    dims = _normalized_dims(x, weight)
    normalized = tuple(x.shape[d] for d in dims)
    if bias is not None and bias.shape != normalized:
        # torch's bias has the normalized shape; another one would broadcast over other dims.
        raise FusionError(f"bias shape {bias.shape} differs from the normalized shape {normalized}")
    math_dtype = _math_dtype(x.dtype)
    math_x = cast(x, math_dtype)
    centered = math_x - ops.mean(math_x, dims, keepdim=True)
    variance = ops.mean(centered * centered, dims, keepdim=True)
    result = centered * ops.rsqrt(variance + eps)
    if weight is not None:
        result = result * cast(weight, math_dtype)
    if bias is not None:
        result = result + cast(bias, math_dtype)
    return cast(result, x.dtype)


@user_op("rms_norm", checks_itself=("weight",))
def rms_norm(x: Tensor, weight: Tensor | None = None, eps: float = 1e-6) -> Tensor:
    """``x * rsqrt(mean(x^2) + eps) * weight`` over the trailing dims ``weight`` covers
    (torch.nn.functional.rms_norm): ``pf.rms_norm(x, w)``."""
    dims = _normalized_dims(x, weight)
    math_dtype = _math_dtype(x.dtype)
    math_x = cast(x, math_dtype)
    result = math_x * ops.rsqrt(ops.mean(math_x * math_x, dims, keepdim=True) + eps)
    if weight is not None:
        result = result * cast(weight, math_dtype)
    return cast(result, x.dtype)
