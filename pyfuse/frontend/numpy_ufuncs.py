"""NumPy on traced tensors: ``np.maximum(x, 0)`` traces ``pf.maximum(x, 0)``; ``np.sum(x)``
is refused, naming the pf op to use.

:meth:`Tensor.__array_ufunc__ <pyfuse.frontend.tensor_methods.TensorMethods.__array_ufunc__>`
calls :func:`apply_ufunc` (registered with :func:`~pyfuse.frontend.tensor_methods.tensor_method`;
``pyfuse/__init__.py`` imports this module), which maps the ufuncs that have a pf op of the
same meaning and refuses every other one (and the ufunc methods, ``np.add.reduce``, and
``out=``) with a FusionError at the user's line. The pf op follows torch: ``np.maximum``
propagates NaN (as NumPy's does), ``np.divide`` of integers is true division,
``np.sign(nan)`` is 0 (torch's; NumPy gives NaN). NumPy scalars are Python numbers here; a
NumPy array is not a traced tensor and is refused (pass it to the fused function as an
argument).

Every other NumPy function (``np.sum``, ``np.where``, ``np.concatenate``...) reaches
``Tensor.__array_function__``: it answers the ones that read only the shape (``np.shape``,
``np.ndim``, ``np.size``) and calls :func:`refuse_array_function` for the rest: a
FusionError at the user's line that names the pf op of that meaning, where there is one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from pyfuse.frontend import bitwise, ops, rounding
from pyfuse.frontend import composites as pc
from pyfuse.frontend.arguments import scalar_value
from pyfuse.frontend.location import refuse
from pyfuse.frontend.tensor_methods import tensor_method


def _square(x: ops.Tensor) -> ops.Tensor:
    return ops.mul(x, x)


def _positive(x: ops.Tensor) -> ops.Tensor:
    return x


# The ufunc's ``__name__`` -> the pf op. NumPy 1 names true division "true_divide", NumPy 2
# "divide"; both are np.divide.
_UFUNCS: dict[str, Callable[..., ops.Tensor]] = {
    "add": ops.add,
    "subtract": ops.sub,
    "multiply": ops.mul,
    "divide": ops.div,
    "true_divide": ops.div,
    "power": ops.pow,
    "maximum": ops.maximum,
    "minimum": ops.minimum,
    "greater": ops.gt,
    "greater_equal": ops.ge,
    "less": ops.lt,
    "less_equal": ops.le,
    "equal": ops.eq,
    "not_equal": ops.ne,
    "logical_and": ops.logical_and,
    "logical_or": ops.logical_or,
    "logical_xor": pc.logical_xor,
    "logical_not": ops.logical_not,
    "bitwise_and": bitwise.bitwise_and,
    "bitwise_or": bitwise.bitwise_or,
    "bitwise_xor": bitwise.bitwise_xor,
    "invert": bitwise.bitwise_not,
    "negative": ops.neg,
    "positive": _positive,
    "absolute": ops.abs,
    "fabs": ops.abs,
    "exp": ops.exp,
    "exp2": pc.exp2,
    "expm1": pc.expm1,
    "log": ops.log,
    "log2": pc.log2,
    "log10": pc.log10,
    "log1p": pc.log1p,
    "sqrt": ops.sqrt,
    "square": _square,
    "reciprocal": ops.reciprocal,
    "tanh": ops.tanh,
    "sin": ops.sin,
    "floor": rounding.floor,
    "ceil": rounding.ceil,
    "rint": rounding.round,
    "trunc": rounding.trunc,
    "fmod": rounding.fmod,
    "remainder": rounding.remainder,
    "floor_divide": rounding.floor_divide,
    "cos": ops.cos,
    "matmul": ops.matmul,  # a generalized ufunc: torch.matmul's meaning, batch dims broadcast
    "sign": pc.sign,
    "isnan": pc.isnan,
    "isinf": pc.isinf,
    "isfinite": pc.isfinite,
}


def _argument(name: str, value: object) -> object:
    if isinstance(value, ops.Tensor):
        return value
    number = scalar_value(value)
    if number is not None:
        return number
    refuse(
        f"np.{name}",
        f"a {type(value).__name__} is not a traced tensor: pass NumPy arrays to the fused "
        "function as arguments",
    )


@tensor_method
def apply_ufunc(
    ufunc: Any, method: str, inputs: Sequence[object], kwargs: Mapping[str, object]
) -> ops.Tensor:
    """The pf op for ``ufunc(*inputs)`` (see the module doc)."""
    name = str(getattr(ufunc, "__name__", ufunc))
    if method != "__call__":
        refuse(f"np.{name}", f"np.{name}.{method} is not supported on traced tensors")
    if kwargs:
        refuse(f"np.{name}", f"np.{name} with {', '.join(kwargs)}= is not supported while tracing")
    op = _UFUNCS.get(name)
    if op is None:
        refuse(
            f"np.{name}",
            f"np.{name} has no pyfuse op yet; the ufuncs traced are {', '.join(sorted(_UFUNCS))}",
        )
    return op(*(_argument(name, value) for value in inputs))


# NumPy functions (by ``__name__``) -> the pf op of the same meaning, named in the refusal.
_PF_EQUIVALENTS = {
    "sum": "pf.sum(x, dim)",
    "mean": "pf.mean(x, dim)",
    "prod": "pf.prod(x, dim)",
    "max": "pf.amax(x, dim)",
    "amax": "pf.amax(x, dim)",
    "min": "pf.amin(x, dim)",
    "amin": "pf.amin(x, dim)",
    "any": "pf.any(x, dim)",
    "all": "pf.all(x, dim)",
    "var": "pf.var(x, dim)",
    "std": "pf.std(x, dim)",
    "argmax": "pf.argmax(x, dim)",
    "argmin": "pf.argmin(x, dim)",
    "where": "pf.where(condition, x, y)",
    "clip": "pf.clamp(x, min, max)",
    "round": "pf.round(x)",
    "around": "pf.round(x)",
    "transpose": "pf.permute(x, dims) or x.T",
    "reshape": "pf.reshape(x, shape)",
    "squeeze": "pf.squeeze(x, dim)",
    "expand_dims": "pf.unsqueeze(x, dim)",
    "broadcast_to": "pf.broadcast_to(x, shape)",
    "concatenate": "pf.cat(tensors, dim)",
    "stack": "pf.stack(tensors, dim)",
    "dot": "pf.matmul(a, b)",
    "tril": "pf.tril(x)",
    "triu": "pf.triu(x)",
    "nan_to_num": "pf.nan_to_num(x)",
    "full_like": "pf.full_like(x, value)",
    "zeros_like": "pf.zeros_like(x)",
    "ones_like": "pf.ones_like(x)",
    "size": "x.shape[axis]",
}


@tensor_method
def refuse_array_function(func: Any) -> NoReturn:
    """The FusionError for a NumPy function (not a ufunc) given a traced tensor: it names the
    pf op of that meaning, where there is one."""
    name = str(getattr(func, "__name__", func))
    equivalent = _PF_EQUIVALENTS.get(name)
    hint = f"use {equivalent}" if equivalent else "compute it with pf ops"
    refuse(
        f"np.{name}",
        f"np.{name} cannot take a traced tensor, which has no values while tracing: {hint}",
    )
