"""torch's rounding and division-like ops: ``floor``, ``ceil``, ``round``, ``trunc``, ``erf``,
``fmod``, ``remainder`` (``%``) and ``floor_divide`` (``//``), traced like the ops of
:mod:`pyfuse.frontend.ops`; the Tensor methods and operators reach them through the
registry of :mod:`pyfuse.frontend.tensor_methods`. PTX: ``backend_ptx/emit_divide.py``."""

from __future__ import annotations

from pyfuse.errors import FusionError
from pyfuse.frontend.arguments import int_argument
from pyfuse.frontend.location import user_op
from pyfuse.frontend.ops import _binary, _unary
from pyfuse.frontend.tensor import Tensor, TensorLike
from pyfuse.frontend.tensor_methods import tensor_method
from pyfuse.ir.exprs import BinaryOpType, UnaryOpType


@tensor_method
@user_op("erf")
def erf(x: Tensor) -> Tensor:
    """The error function, about 1e-7 from exact in float32 (torch.erf): ``pf.erf(x)``."""
    return _unary(UnaryOpType.ERF, x)


@tensor_method
@user_op("floor")
def floor(x: Tensor) -> Tensor:
    """The largest integral value not above ``x``; integers unchanged (torch.floor):
    ``pf.floor(x)``."""
    return _unary(UnaryOpType.FLOOR, x)


@tensor_method
@user_op("ceil")
def ceil(x: Tensor) -> Tensor:
    """The smallest integral value not below ``x``; integers unchanged (torch.ceil):
    ``pf.ceil(x)``."""
    return _unary(UnaryOpType.CEIL, x)


@tensor_method
@user_op("round")
def round(x: Tensor, decimals: int = 0) -> Tensor:  # noqa: A001 - torch's name
    """The nearest integral value, halves to even; integers unchanged (torch.round without
    ``decimals``): ``pf.round(x)``."""
    if int_argument(decimals, "decimals") != 0:
        raise FusionError(f"round(decimals={decimals}) is not supported; only decimals=0")
    return _unary(UnaryOpType.ROUND, x)


@tensor_method
@user_op("trunc")
def trunc(x: Tensor) -> Tensor:
    """``x`` rounded toward zero; integers unchanged (torch.trunc): ``pf.trunc(x)``."""
    return _unary(UnaryOpType.TRUNC, x)


@tensor_method
@user_op("fmod")
def fmod(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """``lhs - trunc(lhs / rhs) * rhs``, the sign of ``lhs`` (torch.fmod; integers by 0 give 0):
    ``pf.fmod(x, 3.0)``."""
    return _binary(BinaryOpType.FMOD, lhs, rhs)


@tensor_method
@user_op("remainder")
def remainder(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """``lhs - floor(lhs / rhs) * rhs``, the sign of ``rhs`` (torch.remainder, Python's ``%``;
    integers by 0 give 0): ``pf.remainder(x, 3)``."""
    return _binary(BinaryOpType.REMAINDER, lhs, rhs)


@tensor_method
@user_op("floor_divide")
def floor_divide(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """``floor(lhs / rhs)`` in the operands' dtype (torch.floor_divide, Python's ``//``;
    integers by 0 give 0): ``pf.floor_divide(x, 2)``."""
    return _binary(BinaryOpType.FLOOR_DIVIDE, lhs, rhs)
