"""Kernel IR expressions: immutable scalar trees with a dtype (an index is an int32 or int64
expression; tensor math uses the tensor dtypes), and the builders (:func:`add`, :func:`mul`,
:func:`floordiv`, :func:`mod`, ...) that fold constants and use the known ranges of loop
variables, so that indices derived from splits and merges come out as simple as a person
would write them.

The statements and the kernel over them are :mod:`pyfuse.ir.kernel_ir`, which re-exports
every name here (``kir.add``, ``kir.Var``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import TypeVar

from pyfuse.ir import dtypes
from pyfuse.ir.dtypes import DType
from pyfuse.ir.records import record
from pyfuse.ir.tensor import MemoryType

# ---- expressions --------------------------------------------------------------------------


class KExpr:
    """A scalar expression; immutable and hashable."""

    dtype: DType

    def __str__(self) -> str:
        raise NotImplementedError

    def __getstate__(self) -> dict[str, object]:
        # Copies and unpickled nodes compute their own hash (see _hash_once): Load's hashes its
        # buffer's id, and string hashes differ from one process to the next.
        return {name: value for name, value in self.__dict__.items() if name != "_hash"}


_Expression = TypeVar("_Expression", bound=KExpr)


def _hash_once(cls: type[_Expression]) -> type[_Expression]:
    """Cache the dataclass-generated hash of an expression class on each node.

    The generated ``__hash__`` hashes every field, so hashing an expression walks its whole
    tree; the emitter hashes every node it visits (its per-statement memo), which made those
    walks a large part of emission. The cached value is the generated one, so dicts and sets
    of expressions behave exactly as before.
    """
    field_hash: Callable[[_Expression], int] = cls.__hash__

    def cached_hash(self: _Expression) -> int:
        value: int | None = self.__dict__.get("_hash")
        if value is None:
            value = field_hash(self)
            object.__setattr__(self, "_hash", value)  # not a field: eq and repr ignore it
        return value

    cls.__hash__ = cached_hash  # type: ignore[method-assign, assignment]
    return cls


@_hash_once
@record(frozen=True)
class Const(KExpr):
    """A literal of ``dtype``."""

    value: bool | int | float
    dtype: DType = dtypes.int64

    def __str__(self) -> str:
        return str(self.value)


@_hash_once
@record(frozen=True)
class Var(KExpr):
    """A scalar variable: a loop index (with its trip count as ``extent``) or a let-bound value.
    ``extent`` bounds a loop index to ``[0, extent)``; it drives index simplification."""

    name: str
    dtype: DType = dtypes.int64
    extent: int | None = None

    def __str__(self) -> str:
        return self.name


class SpecialKind(enum.Enum):
    TID_X = "tid.x"
    TID_Y = "tid.y"
    TID_Z = "tid.z"
    CTAID_X = "ctaid.x"
    CTAID_Y = "ctaid.y"
    CTAID_Z = "ctaid.z"
    NTID_X = "ntid.x"
    NCTAID_X = "nctaid.x"


@_hash_once
@record(frozen=True)
class Special(KExpr):
    """A special register (thread or block index); ``extent`` is its launch size."""

    kind: SpecialKind
    extent: int | None = None
    dtype: DType = dtypes.int32

    def __str__(self) -> str:
        return f"%{self.kind.value}"


@_hash_once
@record(frozen=True)
class Param(KExpr):
    """A scalar kernel parameter."""

    name: str
    dtype: DType = dtypes.int64

    def __str__(self) -> str:
        return f"${self.name}"


@_hash_once
@record(frozen=True)
class Binary(KExpr):
    """``lhs op rhs``. Index ops: add sub mul floordiv mod min max; compares give bool; tensor
    math uses the pointwise op names of :class:`pyfuse.ir.exprs.BinaryOpType`."""

    op: str
    lhs: KExpr
    rhs: KExpr
    dtype: DType

    def __str__(self) -> str:
        symbol = _INFIX.get(self.op)
        if symbol is not None:
            return f"({self.lhs} {symbol} {self.rhs})"
        return f"{self.op}({self.lhs}, {self.rhs})"


_INFIX = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "div": "/",
    "floordiv": "//",
    "mod": "%",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "eq": "==",
    "ne": "!=",
    "logical_and": "&&",
    "logical_or": "||",
}


@_hash_once
@record(frozen=True)
class Unary(KExpr):
    """``op(operand)`` with the op names of :class:`pyfuse.ir.exprs.UnaryOpType`."""

    op: str
    operand: KExpr
    dtype: DType

    def __str__(self) -> str:
        return f"{self.op}({self.operand})"


@_hash_once
@record(frozen=True)
class Select(KExpr):
    """``condition ? if_true : if_false``."""

    condition: KExpr
    if_true: KExpr
    if_false: KExpr
    dtype: DType

    def __str__(self) -> str:
        return f"({self.condition} ? {self.if_true} : {self.if_false})"


@_hash_once
@record(frozen=True)
class Cast(KExpr):
    """``operand`` converted to ``dtype``."""

    operand: KExpr
    dtype: DType

    def __str__(self) -> str:
        return f"{self.dtype.short}({self.operand})"


@record(eq=False)
class Buffer:
    """Storage of one tensor in a kernel: a global tensor (a pointer parameter), a shared
    memory region, or a local register array of ``size`` elements."""

    name: str
    dtype: DType
    memory: MemoryType
    size: int = 1
    # Byte offset of a shared buffer inside the kernel's dynamic shared memory.
    smem_offset: int = 0

    def __str__(self) -> str:
        return self.name


@_hash_once
@record(frozen=True)
class Load(KExpr):
    """``buffer[index]`` (element index)."""

    buffer: Buffer
    index: KExpr
    dtype: DType

    def __str__(self) -> str:
        return f"{self.buffer.name}[{self.index}]"

    def __hash__(self) -> int:
        return hash((id(self.buffer), self.index))


# ---- simplifying builders ------------------------------------------------------------------


def const(value: int, dtype: DType = dtypes.int64) -> Const:
    return Const(value, dtype)


def _value(expr: KExpr) -> int | None:
    if isinstance(expr, Const) and isinstance(expr.value, int) and not isinstance(expr.value, bool):
        return expr.value
    return None


def upper_bound(expr: KExpr) -> int | None:
    """An exclusive upper bound of a non-negative index expression, when one is known."""
    if isinstance(expr, Const):
        return int(expr.value) + 1
    if isinstance(expr, Var | Special):
        return expr.extent
    if isinstance(expr, Binary):
        lhs, rhs = upper_bound(expr.lhs), upper_bound(expr.rhs)
        if expr.op == "add" and lhs is not None and rhs is not None:
            return lhs + rhs - 1
        if expr.op == "mul" and lhs is not None and rhs is not None:
            return (lhs - 1) * (rhs - 1) + 1
        if expr.op == "mod" and _value(expr.rhs) is not None:
            bound = _value(expr.rhs)
            assert bound is not None
            return bound if lhs is None else min(lhs, bound)
        if expr.op == "floordiv" and lhs is not None and _value(expr.rhs):
            divisor = _value(expr.rhs)
            assert divisor is not None
            return -(-lhs // divisor)
    return None


def _index_dtype(a: KExpr, b: KExpr) -> DType:
    return dtypes.int64 if dtypes.int64 in (a.dtype, b.dtype) else a.dtype


def _recombined(a: KExpr, b: KExpr) -> KExpr | None:
    """``x`` when ``a + b`` is ``(x // c) * c + x % c`` (a merge undone by its split)."""
    if not (isinstance(a, Binary) and a.op == "mul" and isinstance(a.lhs, Binary)):
        return None
    quotient = a.lhs
    if not (isinstance(b, Binary) and b.op == "mod" and quotient.op == "floordiv"):
        return None
    if quotient.lhs == b.lhs and quotient.rhs == b.rhs == a.rhs:
        return b.lhs
    return None


def add(a: KExpr, b: KExpr) -> KExpr:
    va, vb = _value(a), _value(b)
    if va is not None and vb is not None:
        return Const(va + vb, _index_dtype(a, b))
    if va == 0:
        return b
    if vb == 0:
        return a
    recombined = _recombined(a, b)
    if recombined is not None:
        return recombined
    return Binary("add", a, b, _index_dtype(a, b))


def mul(a: KExpr, b: KExpr) -> KExpr:
    va, vb = _value(a), _value(b)
    if va is not None and vb is not None:
        return Const(va * vb, _index_dtype(a, b))
    if va == 0 or vb == 0:
        return Const(0, _index_dtype(a, b))
    if va == 1:
        return b
    if vb == 1:
        return a
    return Binary("mul", a, b, _index_dtype(a, b))


def _split_index(a: KExpr, divisor: int | None) -> tuple[KExpr, KExpr] | None:
    """``(x, y)`` when ``a`` is ``x * divisor + y`` with ``0 <= y < divisor``: the index of a
    split's outer and inner loops, which ``// divisor`` and ``% divisor`` take apart again."""
    if divisor is None or not (isinstance(a, Binary) and a.op == "add"):
        return None
    outer, inner = a.lhs, a.rhs
    inner_bound = upper_bound(inner)
    if (
        isinstance(outer, Binary)
        and outer.op == "mul"
        and _value(outer.rhs) == divisor
        and inner_bound is not None
        and inner_bound <= divisor
    ):
        return outer.lhs, inner
    return None


def floordiv(a: KExpr, b: KExpr) -> KExpr:
    va, vb = _value(a), _value(b)
    if vb == 1:
        return a
    if va is not None and vb is not None:
        return Const(va // vb, _index_dtype(a, b))
    bound = upper_bound(a)
    if vb is not None and bound is not None and bound <= vb:
        return Const(0, _index_dtype(a, b))
    parts = _split_index(a, vb)
    if parts is not None:
        return parts[0]  # (x * c + y) // c == x
    return Binary("floordiv", a, b, _index_dtype(a, b))


def mod(a: KExpr, b: KExpr) -> KExpr:
    va, vb = _value(a), _value(b)
    if vb == 1:
        return Const(0, _index_dtype(a, b))
    if va is not None and vb is not None:
        return Const(va % vb, _index_dtype(a, b))
    bound = upper_bound(a)
    if vb is not None and bound is not None and bound <= vb:
        return a
    parts = _split_index(a, vb)
    if parts is not None:
        return parts[1]  # (x * c + y) % c == y
    return Binary("mod", a, b, _index_dtype(a, b))


def less_than(a: KExpr, b: KExpr) -> KExpr:
    va, vb = _value(a), _value(b)
    if va is not None and vb is not None:
        return Const(va < vb, dtypes.bool_)
    bound = upper_bound(a)
    if vb is not None and bound is not None and bound <= vb:
        return Const(True, dtypes.bool_)
    return Binary("lt", a, b, dtypes.bool_)


def logical_and(a: KExpr, b: KExpr) -> KExpr:
    if isinstance(a, Const):
        return b if a.value else a
    if isinstance(b, Const):
        return a if b.value else b
    return Binary("logical_and", a, b, dtypes.bool_)


def all_of(conditions: Sequence[KExpr]) -> KExpr:
    result: KExpr = Const(True, dtypes.bool_)
    for condition in conditions:
        result = logical_and(result, condition)
    return result


def is_true(expr: KExpr) -> bool:
    return isinstance(expr, Const) and expr.value is True
