"""The NumPy reference: evaluate a :class:`Fusion` on the CPU.

Expects: a fusion whose exprs are the math IR of :mod:`pyfuse.ir.exprs` (scheduling state such
as loop domains, memory types and aliases is ignored), and one NumPy array per fusion input
with exactly that input's shape and dtype (bf16 as ``ml_dtypes.bfloat16``). Anything else
raises :class:`~pyfuse.errors.InputError`.

Guarantees:

- Math follows torch. Each expr computes in float64 (integers in int64, bools as bool) and its
  result is cast to the expr's output dtype, so a bf16 or f16 intermediate is rounded where the
  GPU would round it. Rounding to a 16-bit float goes through float32, as on a GPU that
  computes in float32 and rounds once more on the store.
- Operands are first brought to the op's common dtype (torch's type promotion); a
  :class:`~pyfuse.ir.tensor.Scalar` takes its own dtype and then the op's math type (float32
  for 16-bit floats), as torch does with a CPU scalar on the GPU.
- ``div`` is true division, float-to-integer casts truncate toward zero, ``maximum``,
  ``minimum``, ``max`` and ``min`` propagate NaN, ``sum`` of integers or bools accumulates in
  int64, IEEE overflow and invalid results give inf and NaN without warnings.
- :func:`evaluate` returns fresh, writeable, C-contiguous arrays in the outputs' dtypes, one
  per fusion output (never a view of an input or of another output).
- A malformed fusion (an expr whose result does not have its output's shape, an expr kind with
  no rule here) raises :class:`~pyfuse.errors.FusionError` naming the expr.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from pyfuse.errors import FusionError, InputError
from pyfuse.ir.dtypes import DType, bool_, float32, promote_pair
from pyfuse.ir.exprs import (
    BinaryOp,
    BinaryOpType,
    BroadcastOp,
    CastOp,
    CatOp,
    ExpandOp,
    Expr,
    FullOp,
    IotaOp,
    LinearOp,
    LoadStoreOp,
    MatmulOp,
    MmaOp,
    PermuteOp,
    ReductionOp,
    ReductionOpType,
    ReshapeOp,
    SliceOp,
    SqueezeOp,
    TernaryOp,
    UnaryOp,
    UnaryOpType,
)
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.printer import expr_to_str
from pyfuse.ir.reference_math import (
    erf,
    gelu,
    gelu_tanh,
    power,
    reciprocal,
    relu,
    remainder,
    rsqrt,
    sigmoid,
    silu,
)
from pyfuse.ir.tensor import Scalar, TensorView, Val

Array = npt.NDArray[Any]


def evaluate(fusion: Fusion, inputs: Sequence[Array]) -> list[Array]:
    """The fusion's outputs on ``inputs``, in ``fusion.outputs`` order (see the module doc)."""
    values = evaluate_all(fusion, inputs)
    return [np.array(values[out], order="C", copy=True) for out in fusion.outputs]


def evaluate_all(fusion: Fusion, inputs: Sequence[Array]) -> dict[TensorView, Array]:
    """Every tensor's value, keyed by TensorView: the inputs as given, then each expr's result
    in its output dtype. Values may be read-only broadcast views; copy before writing."""
    check_inputs(fusion, inputs)
    env = Env()
    for tv, array in zip(fusion.inputs, inputs, strict=True):
        env.values[tv] = array
    with np.errstate(all="ignore"):
        for expr in fusion.exprs():
            env.values[expr.output] = evaluate_expr(expr, env)
    return env.values


def check_inputs(fusion: Fusion, inputs: Sequence[Array]) -> None:
    """Raise :class:`InputError` unless ``inputs`` match the fusion inputs in count, dtype and
    shape exactly (nothing is converted silently)."""
    if isinstance(inputs, np.ndarray):
        raise InputError("pass the inputs as a sequence of arrays, e.g. [x], not one array")
    expected_names = ", ".join(f"T{tv.name}" for tv in fusion.inputs)
    if len(inputs) != len(fusion.inputs):
        raise InputError(
            f"expected {len(fusion.inputs)} input arrays ({expected_names}), got {len(inputs)}"
        )
    for index, (tv, array) in enumerate(zip(fusion.inputs, inputs, strict=True)):
        where = f"argument {index} (T{tv.name})"
        if not isinstance(array, np.ndarray):
            raise InputError(
                f"{where}: expected a NumPy array of dtype {tv.dtype.name} and shape "
                f"{tv.shape}, got {type(array).__name__}; convert with "
                f"np.asarray(x, dtype={_dtype_hint(tv.dtype)})"
            )
        problems = []
        if array.dtype != tv.dtype.numpy():
            problems.append(
                f"expected dtype {tv.dtype.name}, got {array.dtype.name} "
                f"(convert with x.astype({_dtype_hint(tv.dtype)}))"
            )
        if array.shape != tv.shape:
            problems.append(f"expected shape {tv.shape}, got {array.shape}")
        if problems:
            raise InputError(f"{where}: " + "; ".join(problems))


def _dtype_hint(dtype: DType) -> str:
    if dtype.name == "bfloat16":
        return "ml_dtypes.bfloat16"
    if dtype.is_bool:
        return "np.bool_"
    return f"np.{dtype.name}"


# ---- dtype conversions ------------------------------------------------------------------------


def widen(value: Array, dtype: DType) -> Array:
    """``value`` (of ``dtype``) in its math type: float64, int64 or bool."""
    if dtype.is_floating:
        return value.astype(np.float64, copy=False)
    if dtype.is_integer:
        return value.astype(np.int64, copy=False)
    return value.astype(np.bool_, copy=False)


def narrow(value: Array | np.generic | float, dtype: DType) -> Array:
    """A math-type ``value`` cast to ``dtype`` with torch's rules."""
    array = np.asarray(value)
    target = dtype.numpy()
    if dtype.is_bool:
        return array if array.dtype == np.bool_ else array != 0
    if dtype.is_integer:
        if array.dtype.kind == "f":
            # Truncate toward zero, saturating out of range and NaN giving 0: torch's cast on
            # the GPU (``cvt.rzi`` rounds so), which the kernels do too.
            info = np.iinfo(target)
            wide = np.nan_to_num(np.trunc(array.astype(np.float64)), nan=0.0)
            high = wide >= float(info.max)  # float(info.max) may round up past the range
            low = wide <= float(info.min)
            inside = np.where(high | low, 0.0, wide).astype(np.int64)
            array = np.where(high, info.max, np.where(low, info.min, inside))
        return array.astype(target, copy=False)
    if dtype.itemsize < 4:
        # ml_dtypes rounds float64 -> bf16 through float32 anyway; do it for f16 too, so both
        # 16-bit types round the way a float32 GPU computation does.
        array = array.astype(np.float32, copy=False)
    return array.astype(target, copy=False)


def _math_dtype(dtype: DType) -> DType:
    """The type torch computes ``dtype`` in on a GPU (its opmath type)."""
    return float32 if dtype.is_floating and dtype.itemsize < 4 else dtype


def common_dtype(vals: Sequence[Val]) -> DType:
    """torch's result type of an op's operands: tensors promote; a scalar only raises the
    category (and then brings its own dtype)."""
    tensors = [val.dtype for val in vals if isinstance(val, TensorView)]
    scalars = [val.dtype for val in vals if not isinstance(val, TensorView)]
    pool = tensors if tensors else scalars
    common = pool[0]
    for dtype in pool[1:]:
        common = promote_pair(common, dtype)
    for dtype in scalars:
        if dtype.category > common.category:
            common = dtype
    return common


class Env:
    """Tensor values (in their own dtypes) and reading them in math types."""

    def __init__(self) -> None:
        self.values: dict[TensorView, Array] = {}

    def tensor(self, tv: TensorView) -> Array:
        """``tv``'s value in its math type."""
        if tv not in self.values:
            raise FusionError(
                f"T{tv.name} is read but is neither a fusion input nor produced by an expr "
                "that the outputs depend on"
            )
        return widen(self.values[tv], tv.dtype)

    def operand(self, val: Val, common: DType) -> Array:
        """``val`` as an operand of an op whose common dtype is ``common``, in math type."""
        if isinstance(val, TensorView):
            value = self.tensor(val)
            if val.dtype != common:
                value = widen(narrow(value, common), common)
            return value
        if isinstance(val, Scalar):
            own = narrow(val.value, val.dtype)
            math_dtype = _math_dtype(common)
            return widen(narrow(widen(own, val.dtype), math_dtype), math_dtype)
        raise FusionError(f"cannot read operand of type {type(val).__name__}")


_UNARY: dict[UnaryOpType, Callable[[Array], Array]] = {
    UnaryOpType.NEG: np.negative,
    UnaryOpType.ABS: np.abs,
    UnaryOpType.EXP: np.exp,
    UnaryOpType.LOG: np.log,
    UnaryOpType.TANH: np.tanh,
    UnaryOpType.SIGMOID: sigmoid,
    UnaryOpType.RELU: relu,
    UnaryOpType.GELU: gelu,
    UnaryOpType.GELU_TANH: gelu_tanh,
    UnaryOpType.SILU: silu,
    UnaryOpType.SQRT: np.sqrt,
    UnaryOpType.RSQRT: rsqrt,
    UnaryOpType.RECIPROCAL: reciprocal,
    UnaryOpType.SIN: np.sin,
    UnaryOpType.COS: np.cos,
    UnaryOpType.ERF: erf,
    UnaryOpType.FLOOR: np.floor,
    UnaryOpType.CEIL: np.ceil,
    UnaryOpType.ROUND: np.rint,  # half to even, as torch.round
    UnaryOpType.TRUNC: np.trunc,
    UnaryOpType.LOGICAL_NOT: np.logical_not,
    UnaryOpType.BITWISE_NOT: np.invert,
}

# Ops that keep an integer input integral (torch.neg(int) is int); the rest compute in float.
_INTEGRAL_UNARY = frozenset(
    {
        UnaryOpType.NEG,
        UnaryOpType.ABS,
        UnaryOpType.RELU,
        UnaryOpType.LOGICAL_NOT,
        UnaryOpType.BITWISE_NOT,
    }
)


def _eval_unary(expr: UnaryOp, env: Env) -> Array:
    (inp,) = expr.tensor_inputs
    value = env.tensor(inp)
    if expr.op not in _INTEGRAL_UNARY:
        value = value.astype(np.float64, copy=False)
    return _UNARY[expr.op](value)


# ---- binary and ternary ops --------------------------------------------------------------------


_BINARY: dict[BinaryOpType, Callable[[Array, Array], Array]] = {
    BinaryOpType.ADD: np.add,
    BinaryOpType.SUB: np.subtract,
    BinaryOpType.MUL: np.multiply,
    BinaryOpType.DIV: np.true_divide,
    BinaryOpType.POW: power,
    BinaryOpType.MAXIMUM: np.maximum,
    BinaryOpType.MINIMUM: np.minimum,
    BinaryOpType.EQ: np.equal,
    BinaryOpType.NE: np.not_equal,
    BinaryOpType.LT: np.less,
    BinaryOpType.LE: np.less_equal,
    BinaryOpType.GT: np.greater,
    BinaryOpType.GE: np.greater_equal,
    BinaryOpType.LOGICAL_AND: np.logical_and,
    BinaryOpType.LOGICAL_OR: np.logical_or,
    # Integer division by zero gives 0 in all three (NumPy's rule; the kernels agree).
    BinaryOpType.FMOD: np.fmod,
    BinaryOpType.REMAINDER: remainder,
    BinaryOpType.FLOOR_DIVIDE: np.floor_divide,
    BinaryOpType.BITWISE_AND: np.bitwise_and,
    BinaryOpType.BITWISE_OR: np.bitwise_or,
    BinaryOpType.BITWISE_XOR: np.bitwise_xor,
}

_LOGICAL = frozenset({BinaryOpType.LOGICAL_AND, BinaryOpType.LOGICAL_OR})


def _eval_binary(expr: BinaryOp, env: Env) -> Array:
    lhs_val, rhs_val = expr.inputs
    if expr.op in _LOGICAL:
        lhs = env.operand(lhs_val, bool_)
        rhs = env.operand(rhs_val, bool_)
        return np.asarray(_BINARY[expr.op](lhs, rhs))
    common = common_dtype(expr.inputs)
    lhs = env.operand(lhs_val, common)
    rhs = env.operand(rhs_val, common)
    if expr.op == BinaryOpType.DIV:
        # torch.div without a rounding mode is true division, even of integers.
        lhs = lhs.astype(np.float64, copy=False)
        rhs = rhs.astype(np.float64, copy=False)
    elif common.is_bool and not expr.op.is_comparison:
        # bool + bool is logical or in torch; int64 math then the cast to bool gives that.
        lhs = lhs.astype(np.int64)
        rhs = rhs.astype(np.int64)
    return np.asarray(_BINARY[expr.op](lhs, rhs))


def _eval_where(expr: TernaryOp, env: Env) -> Array:
    condition_val, if_true_val, if_false_val = expr.inputs
    condition = env.operand(condition_val, bool_)
    common = common_dtype([if_true_val, if_false_val])
    if_true = env.operand(if_true_val, common)
    if_false = env.operand(if_false_val, common)
    return np.where(condition, if_true, if_false)


# ---- data movement -----------------------------------------------------------------------------


def _eval_iota(expr: IotaOp, env: Env) -> Array:
    shape = expr.output.shape
    along = [1] * len(shape)
    along[expr.dim] = shape[expr.dim]
    return np.broadcast_to(np.arange(shape[expr.dim], dtype=np.int64).reshape(along), shape)


def _eval_full(expr: FullOp, env: Env) -> Array:
    return np.full(expr.output.shape, env.operand(expr.value, expr.output.dtype))


def _eval_set(expr: LoadStoreOp | CastOp, env: Env) -> Array:
    (inp,) = expr.tensor_inputs
    return env.tensor(inp)


def _eval_broadcast(expr: BroadcastOp, env: Env) -> Array:
    (inp,) = expr.tensor_inputs
    value = env.tensor(inp)
    kept = iter(value.shape)
    shape = [1 if new else next(kept) for new in expr.is_new]
    # A new axis may be born expanded; broadcast_to gives it its size without copying.
    return np.broadcast_to(value.reshape(shape), expr.output.shape)


def _eval_expand(expr: ExpandOp, env: Env) -> Array:
    (inp,) = expr.tensor_inputs
    return np.broadcast_to(env.tensor(inp), expr.output.shape)


def _eval_squeeze(expr: SqueezeOp, env: Env) -> Array:
    (inp,) = expr.tensor_inputs
    value = env.tensor(inp)
    dims = {dim % value.ndim for dim in expr.dims}
    # Index 0 rather than np.squeeze: an expanded broadcast axis has size > 1 in the array.
    index = tuple(0 if axis in dims else slice(None) for axis in range(value.ndim))
    return value[index]


def _eval_slice(expr: SliceOp, env: Env) -> Array:
    value = env.tensor(expr.tensor_inputs[0])
    window = tuple(
        slice(start, start + step * axis.logical_extent, step)
        for axis, start, step in zip(expr.output.logical, expr.starts, expr.steps, strict=True)
    )
    return np.asarray(value[window])


def _eval_cat(expr: CatOp, env: Env) -> Array:
    pieces = [narrow(np.asarray(env.tensor(tv)), expr.output.dtype) for tv in expr.tensor_inputs]
    return np.concatenate(pieces, axis=expr.dim)


def _eval_permute(expr: PermuteOp, env: Env) -> Array:
    (inp,) = expr.tensor_inputs
    return np.transpose(env.tensor(inp), expr.perm)


def _eval_reshape(expr: ReshapeOp, env: Env) -> Array:
    (inp,) = expr.tensor_inputs
    return np.reshape(env.tensor(inp), expr.output.shape)


# ---- reductions and matmuls --------------------------------------------------------------------


def _eval_reduction(expr: ReductionOp, env: Env) -> Array:
    value = env.tensor(expr.input)
    axes = expr.axes
    if expr.op == ReductionOpType.SUM:
        if value.dtype != np.float64:
            value = value.astype(np.int64)  # torch sums ints and bools in int64
        return np.asarray(np.sum(value, axis=axes))
    if expr.op == ReductionOpType.PROD:
        if value.dtype != np.float64:
            value = value.astype(np.int64)  # torch multiplies ints and bools in int64
        return np.asarray(np.prod(value, axis=axes))
    if expr.op == ReductionOpType.MAX:
        return np.asarray(np.max(value, axis=axes))  # NaN propagates, as in torch
    return np.asarray(np.min(value, axis=axes))


def _matmul_operands(expr: Expr, env: Env) -> list[Array]:
    """The tensor operands in one math type (bools as int64: a matmul of bools counts)."""
    tensors = expr.tensor_inputs
    common = common_dtype(tensors)
    operands = [env.operand(tv, common) for tv in tensors]
    if common.is_bool:
        operands = [operand.astype(np.int64) for operand in operands]
    return operands


def _eval_matmul(expr: MatmulOp, env: Env) -> Array:
    a, b = _matmul_operands(expr, env)
    return np.asarray(np.matmul(a, b))


def _eval_linear(expr: LinearOp, env: Env) -> Array:
    operands = _matmul_operands(expr, env)
    x, weight = operands[0], operands[1]
    result = np.matmul(x, np.swapaxes(weight, -1, -2) if weight.ndim >= 2 else weight)
    if len(operands) > 2:
        result = result + operands[2]
    return np.asarray(result)


def _eval_mma(expr: MmaOp, env: Env) -> Array:
    a, b = _matmul_operands(expr, env)
    out_axes = expr.output.logical
    if a.ndim != len(out_axes) or b.ndim != len(out_axes):
        raise FusionError(
            f"operands have ranks {a.ndim} and {b.ndim}, the output has {len(out_axes)} axes"
        )
    letters = [chr(ord("a") + i) if i < 26 else chr(ord("A") + i - 26) for i in range(a.ndim)]
    a_index: list[Any] = []
    b_index: list[Any] = []
    a_letters, b_letters = "", ""
    for axis, letter in enumerate(letters):
        # An axis of size 1 against a larger one is a broadcast: drop it, so einsum sees a
        # plain contraction (and dispatches to BLAS instead of materializing M*N*K).
        drop_a = a.shape[axis] == 1 and b.shape[axis] != 1
        drop_b = b.shape[axis] == 1 and a.shape[axis] != 1
        a_index.append(0 if drop_a else slice(None))
        b_index.append(0 if drop_b else slice(None))
        a_letters += "" if drop_a else letter
        b_letters += "" if drop_b else letter
    out_letters = "".join(
        letter for letter, axis in zip(letters, out_axes, strict=True) if not axis.is_reduction
    )
    spec = f"{a_letters},{b_letters}->{out_letters}"
    return np.asarray(np.einsum(spec, a[tuple(a_index)], b[tuple(b_index)], optimize=True))


# ---- dispatch ----------------------------------------------------------------------------------

_RULES: dict[type[Expr], Callable[[Any, Env], Array]] = {
    LoadStoreOp: _eval_set,
    CastOp: _eval_set,  # the cast itself is the rounding every expr's result gets
    UnaryOp: _eval_unary,
    BinaryOp: _eval_binary,
    TernaryOp: _eval_where,
    FullOp: _eval_full,
    IotaOp: _eval_iota,
    BroadcastOp: _eval_broadcast,
    ExpandOp: _eval_expand,
    SqueezeOp: _eval_squeeze,
    PermuteOp: _eval_permute,
    SliceOp: _eval_slice,
    CatOp: _eval_cat,
    ReshapeOp: _eval_reshape,
    ReductionOp: _eval_reduction,
    MatmulOp: _eval_matmul,
    LinearOp: _eval_linear,
    MmaOp: _eval_mma,
}


def _rule_for(expr: Expr) -> Callable[[Any, Env], Array]:
    for cls in type(expr).__mro__:
        rule = _RULES.get(cls)
        if rule is not None:
            return rule
    raise FusionError(f"the interpreter has no rule for {type(expr).__name__}", op=expr.op_name)


def evaluate_expr(expr: Expr, env: Env, rounded: bool = True) -> Array:
    """``expr``'s result, cast to its output dtype (unless not ``rounded``: then in its math
    type) and checked against its output shape."""
    rule = _rule_for(expr)
    out = expr.output
    try:
        result = np.asarray(rule(expr, env))
        if rounded:
            result = narrow(result, out.dtype)
    except FusionError as error:
        raise FusionError(
            f"{error.bare_message}\n  in {expr_to_str(expr)}", op=expr.op_name, where=expr.source
        ) from error
    except (ValueError, TypeError, IndexError) as error:
        raise FusionError(
            f"cannot evaluate {expr_to_str(expr)}: {error}", op=expr.op_name, where=expr.source
        ) from error
    if result.shape != out.shape:
        raise FusionError(
            f"result has shape {result.shape} but T{out.name} has shape {out.shape}\n"
            f"  in {expr_to_str(expr)}",
            op=expr.op_name,
            where=expr.source,
        )
    return result
