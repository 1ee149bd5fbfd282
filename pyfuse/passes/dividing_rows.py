"""Rows that divide: which reduction rows call a division's slow-path subroutine, and what
that costs them.

``div.rn`` and ``rcp.rn`` (f32 and f64) fall back to a subroutine call whose convention takes
registers while a row's elements are live; float fmod, remainder and floor_divide divide in
f64 up to six times an element; f64 math is expanded with ``div.rn.f64``. The reduction
scheduler gives such rows at most MAX_PERSISTENT_THREADS threads and DIVIDING_ROW_BUDGET
elements a thread per persistent tensor (schedule_reduction.py). Expects a kernel fusion;
changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyfuse.ir import dtypes
from pyfuse.ir.exprs import BinaryOp, BinaryOpType, ReductionOp, UnaryOp, UnaryOpType
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.tensor import TensorView
from pyfuse.passes.scheduler_utils import upstream

# Elements per thread of each persistent tensor of a row that divides by computed values on
# the way into its reduction. div.rn's slow path is a subroutine call whose convention takes
# about 44 registers while the row's elements are live: layer_norm(softplus(x)) (softplus's
# t / (t + 2)) spilled 8 to 52 bytes at 30 and 32 elements per thread at 512 threads and at
# 28 at 1024 (CPU fuzzer, seed 473), and assembled clean at 24 at 512. A division after the
# reduction (softmax's) runs when the row's other values are dead: 48 hold there, and 1024
# threads (64 registers) hold softmax rows of 32768. A row dividing on the way in runs at most
# MAX_PERSISTENT_THREADS: at 1024 the slow path itself spilled 4 bytes (a streaming row of
# 8192 elements of that layer_norm's statistics).
DIVIDING_ROW_BUDGET = 24


def _divides(tensors: Iterable[TensorView]) -> bool:
    """Some float tensor of ``tensors`` is a division by a computed value or a reciprocal
    (a div.rn or rcp.rn, whose slow path is a subroutine call), or an f64 division by
    anything: div.rn.f64 calls its subroutine whatever the divisor (see
    _F64_DIVIDING_UNARY for what that subroutine spilled)."""
    for tv in tensors:
        expr = tv.definition
        if not tv.dtype.is_floating:
            continue
        if isinstance(expr, UnaryOp) and expr.op == UnaryOpType.RECIPROCAL:
            return True
        if (
            isinstance(expr, BinaryOp)
            and expr.op == BinaryOpType.DIV
            and (isinstance(expr.inputs[1], TensorView) or tv.dtype == dtypes.float64)
        ):
            return True
    return False


# Float fmod, remainder and floor_divide reduce in f64 by up to six divisions an element
# (backend_ptx/emit_divide.py): a row computing one beside its reduction spilled 32 bytes at
# 1024 threads with 40 bf16 elements per thread (an argmax beside a remainder: the CPU
# fuzzer, seed 549), wherever the op sits in the row.
_EXACT_DIVISIONS = (BinaryOpType.FMOD, BinaryOpType.REMAINDER, BinaryOpType.FLOOR_DIVIDE)


# f64 math the emitter expands with div.rn.f64 (backend_ptx/emit_math64.py), whose slow
# path is a subroutine: an f64 erf beside a sum at 1024 threads spilled 76 B inside
# ``__cuda_sm20_div_rn_f64_full`` (CPU fuzzer, seed 1473), wherever the op sits in the row.
_F64_DIVIDING_UNARY = frozenset(
    {
        UnaryOpType.LOG,
        UnaryOpType.TANH,
        UnaryOpType.SIGMOID,
        UnaryOpType.SILU,
        UnaryOpType.GELU,
        UnaryOpType.GELU_TANH,
        UnaryOpType.ERF,
    }
)


def divides_on_the_way_in(fusion: Fusion) -> bool:
    """A division (see :func:`_divides`) feeds some reduction, or a float fmod, remainder or
    floor_divide, an f64 pow or f64 math expanded with divisions sits anywhere in the row."""
    for expr in fusion.exprs():
        if (
            isinstance(expr, BinaryOp)
            and expr.op in _EXACT_DIVISIONS
            and expr.output.dtype.is_floating
        ):
            return True
        if expr.output.dtype == dtypes.float64 and (
            (isinstance(expr, UnaryOp) and expr.op in _F64_DIVIDING_UNARY)
            or (isinstance(expr, BinaryOp) and expr.op == BinaryOpType.POW)
        ):
            return True
    return any(
        _divides(upstream([r.input]).values()) for r in fusion.exprs() if isinstance(r, ReductionOp)
    )
