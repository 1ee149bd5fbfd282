"""torch's bitwise ops: ``bitwise_and``, ``bitwise_or``, ``bitwise_xor`` and ``bitwise_not``,
the operators ``& | ^ ~`` (through the registry of :mod:`pyfuse.frontend.tensor_methods`)
and NumPy's ``bitwise_*``/``invert`` ufuncs.

On integers they are two's-complement bit logic (the IR's ``BITWISE_*`` ops, one ``and``,
``or``, ``xor`` or ``not`` instruction in PTX); on bools they are the logical ops, as in
torch. Floats are refused, as torch refuses them.
"""

from __future__ import annotations

from pyfuse.errors import FusionError
from pyfuse.frontend.composites import logical_xor
from pyfuse.frontend.location import refuse, user_op
from pyfuse.frontend.ops import _binary, _unary, logical_and, logical_not, logical_or
from pyfuse.frontend.tensor import Tensor, TensorLike
from pyfuse.frontend.tensor_methods import tensor_method
from pyfuse.ir.exprs import BinaryOpType, UnaryOpType


def _is_boolean(value: TensorLike) -> bool:
    return isinstance(value, bool) or (isinstance(value, Tensor) and value.dtype.is_bool)


def _check_integral(lhs: TensorLike, rhs: TensorLike) -> None:
    for value in (lhs, rhs):
        floating = (
            value.dtype.is_floating if isinstance(value, Tensor) else not isinstance(value, int)
        )
        if floating:
            what = value.dtype.name if isinstance(value, Tensor) else type(value).__name__
            raise FusionError(f"needs integer or bool operands (as in torch), got {what}")


_LOGICAL_OF = {"and": logical_and, "or": logical_or, "xor": logical_xor}
_BITWISE_OF = {
    "and": BinaryOpType.BITWISE_AND,
    "or": BinaryOpType.BITWISE_OR,
    "xor": BinaryOpType.BITWISE_XOR,
}


def _bit_logic(kind: str, lhs: TensorLike, rhs: TensorLike) -> Tensor:
    _check_integral(lhs, rhs)
    if _is_boolean(lhs) and _is_boolean(rhs):
        return _LOGICAL_OF[kind](lhs, rhs)
    return _binary(_BITWISE_OF[kind], lhs, rhs)


@user_op("bitwise_and")
def bitwise_and(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """The bits set in both (torch.bitwise_and, ``&``); logical and of bools:
    ``pf.bitwise_and(x, 0xFF)``."""
    return _bit_logic("and", lhs, rhs)


@user_op("bitwise_or")
def bitwise_or(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """The bits set in either (torch.bitwise_or, ``|``); logical or of bools:
    ``pf.bitwise_or(x, 1 << 4)``."""
    return _bit_logic("or", lhs, rhs)


@user_op("bitwise_xor")
def bitwise_xor(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """The bits set in exactly one (torch.bitwise_xor, ``^``); logical xor of bools:
    ``pf.bitwise_xor(x, y)``."""
    return _bit_logic("xor", lhs, rhs)


@tensor_method
@user_op("bitwise_not")
def bitwise_not(x: Tensor) -> Tensor:
    """The bits flipped (torch.bitwise_not, ``~``; ``~x == -x - 1``); logical not of a bool:
    ``~mask``."""
    if not isinstance(x, Tensor):
        refuse("bitwise_not", f"needs a tensor, got {type(x).__name__}")
    if x.dtype.is_floating:
        refuse("bitwise_not", f"needs an integer or bool tensor (as in torch), got {x.dtype.name}")
    if x.dtype.is_bool:
        return logical_not(x)
    return _unary(UnaryOpType.BITWISE_NOT, x)


_BY_KIND = {"and": bitwise_and, "or": bitwise_or, "xor": bitwise_xor}


@tensor_method
def bitwise(kind: str, lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """The operators ``&``, ``|`` and ``^`` (``kind`` and, or, xor)."""
    return _BY_KIND[kind](lhs, rhs)
