"""The fuzzer's noisy references: a fusion evaluated with float32-sized noise on every rounded
result, to find the outputs float32 cannot determine.

Expects: what :func:`pyfuse.ir.interpreter.evaluate` expects, and that interpreter's exact
values of the same inputs (:func:`~pyfuse.ir.interpreter.evaluate_all`).

Guarantees, for :func:`evaluate_noisy`:

- Every float result a kernel rounds on its own way (arithmetic, transcendentals, sums,
  matmuls) is first scaled by ``1 + JITTER * u`` before its rounding: ``u`` uniform in
  [-1, 1] from a Generator, or the given float for every element. A pow moves by as much
  more as its documented error grows with ``|y log2 |x||``; a sum, difference or matmul also
  by ``JITTER * u`` times the sum of its terms' magnitudes (a kernel adds in another order:
  its error scales with the terms, not with a result they cancelled to). With a Generator,
  and with ``jitter=-1.0``, float32 denormals flush to zero, as the GPU's approximate
  functions flush them.
- Ops a kernel computes exactly (moves, casts, where, neg/abs/relu, max/min, floor/ceil/
  round/trunc, floor_divide) take no noise of their own: their results stay what the op
  gives, so a rounded value stays integral.
- An op that jumps (floor, ceil, round, trunc; floor_divide, remainder, fmod by their
  quotient) whose operand's noise, as this run moved it from the exact value (at least
  JITTER of it where an operand carries noise at all) and as far again the other way,
  reaches a jump is *undetermined*: it is marked +inf in the run with
  ``jitter=1.0``, -inf with ``-1.0`` and NaN with a Generator, so every op after it differs
  between the runs too (GPU fuzzer, seed 437: remainders of e**46 by 0.75, and ``x // y``
  with ``x = floor(e)``, ``y = round(e)`` where a kernel's ``e`` lay one ulp over a half).
  A product whose partial products overflow and underflow float32 together is marked the
  same way (``sign * inf``, ``sign * 0``, NaN), and so is a sin or cos whose operand's
  noise reaches 2**-7 radians (of ``cos(exp(x))``).
- A float's cast to bool, and ``==``/``!=`` of floats, whose operand's noise reaches 0 (of
  ``x - y``) or whose operand is an undetermined value's mark, and an argmax's hit test
  over near-ties, are undetermined bools: True in the
  run with ``jitter=1.0``, False with ``-1.0``, flipped with a Generator.

Where the runs move an output past a comparison's tolerance, it is ill-conditioned in float32
(a sqrt of a cancellation, a comparison of two near values, a value that underflowed), and
:func:`pyfuse.testing.run.compare` does not hold a kernel to it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from pyfuse.ir import dtypes
from pyfuse.ir.dtypes import DType
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
from pyfuse.ir.interpreter import (
    Env,
    check_inputs,
    common_dtype,
    evaluate_expr,
    narrow,
    widen,
)
from pyfuse.ir.tensor import TensorView

Array = npt.NDArray[Any]

# The relative size of the noise: a few float32 ulps, what a float32 kernel's own rounding and
# summation order add to each result.
JITTER = 2.0**-21

Jitter = np.random.Generator | float

_SMALLEST_NORMAL_F32 = float(np.finfo(np.float32).tiny)

# Exprs whose result a kernel computes exactly from its operands.
_EXACT_EXPRS = (
    BroadcastOp, CastOp, CatOp, ExpandOp, FullOp, IotaOp, LoadStoreOp, PermuteOp, ReshapeOp,
    SliceOp, SqueezeOp, TernaryOp,
)  # fmt: skip
_ROUNDING = {
    UnaryOpType.FLOOR: np.floor, UnaryOpType.CEIL: np.ceil, UnaryOpType.ROUND: np.rint,
    UnaryOpType.TRUNC: np.trunc,
}  # fmt: skip
_EXACT_UNARY = frozenset({UnaryOpType.NEG, UnaryOpType.ABS, UnaryOpType.RELU, *_ROUNDING})
_EXACT_BINARY = frozenset({BinaryOpType.MAXIMUM, BinaryOpType.MINIMUM, BinaryOpType.FLOOR_DIVIDE})
# sin and cos of an operand whose noise reaches this many radians are undetermined: past it a
# kernel's result moves by far more than float32's tolerance, and where a relu or a clamp after
# it cuts the runs' moves off, they do not show it (GPU fuzzer, seed 471: relu(cos(exp(x))),
# x up to 50, one ulp of exp(50) is 2**49 radians).
_PERIODIC = frozenset({UnaryOpType.SIN, UnaryOpType.COS})
_PHASE_NOISE = 2.0**-7
# The integral part each division-like op takes of its quotient (where it jumps).
_QUOTIENT_PART = {
    BinaryOpType.FLOOR_DIVIDE: np.floor, BinaryOpType.REMAINDER: np.floor,
    BinaryOpType.FMOD: np.trunc,
}  # fmt: skip


def evaluate_noisy(
    fusion: Fusion, inputs: Sequence[Array], jitter: Jitter, exact: dict[TensorView, Array]
) -> list[Array]:
    """The fusion's outputs under ``jitter`` (see the module doc); ``exact`` is
    :func:`~pyfuse.ir.interpreter.evaluate_all` of the same inputs."""
    check_inputs(fusion, inputs)
    env = Env()
    for tv, array in zip(fusion.inputs, inputs, strict=True):
        env.values[tv] = array
    exact_env = Env()
    exact_env.values = exact
    carries_noise: set[TensorView] = set()
    with np.errstate(all="ignore"):
        for expr in fusion.exprs():
            noisy_inputs = any(tv in carries_noise for tv in expr.tensor_inputs)
            env.values[expr.output] = _noisy_result(expr, env, exact_env, jitter, noisy_inputs)
            if _quantizes(expr):
                continue  # an integral result is exact, or marked where it is not
            if noisy_inputs or (expr.output.dtype.is_floating and not _is_exact(expr)):
                carries_noise.add(expr.output)
    return [np.array(env.values[out], order="C", copy=True) for out in fusion.outputs]


def _noisy_result(expr: Expr, env: Env, exact: Env, jitter: Jitter, noisy_inputs: bool) -> Array:
    dtype = expr.output.dtype
    if not dtype.is_floating or _is_exact(expr):
        value = evaluate_expr(expr, env)
    else:
        # Moved before its rounding: a 16-bit result's rounding is where a kernel's float32
        # math (a matmul's accumulator) may land on the other side.
        value = np.asarray(evaluate_expr(expr, env, rounded=False))
        if value.size:
            if isinstance(expr, ReductionOp) and expr.op == ReductionOpType.PROD:
                value = _float32_product(expr, env, _product_order(jitter))
            magnitude = _magnitude(expr, env) if _accumulates(expr) else None
            value = _jittered(value, dtype, jitter, magnitude, _error_scale(expr, env))
        else:
            value = narrow(value, dtype)
    if dtype.is_floating and value.size:
        undetermined = _undetermined_jump(expr, env, exact, noisy_inputs)
        if undetermined is not None and undetermined.any():
            value = np.where(undetermined, _mark(jitter), value).astype(value.dtype)
    if dtype.is_bool and value.size and noisy_inputs:
        exact_value = np.asarray(exact.tensor(expr.output))
        # An ordered comparison the run's noise already flipped stays flipped: a mark could
        # undo it (an argmax's index, moved by the noise, then compared with 0.25: GPU fuzzer,
        # seed 559). An equality's flip stays the marks' (see _bool_mark).
        moved = value != exact_value if _is_ordered(expr) else np.zeros(value.shape, bool)
        for undetermined in (
            _near_tie_with_extremum(expr, exact),
            _near_zero(expr, env, exact),
            _compares_a_mark(expr, env, exact, jitter),
        ):
            if undetermined is not None and undetermined.any():
                marked = _bool_mark(jitter, exact_value)
                value = np.where(undetermined & ~moved, marked, value)
    return np.asarray(value)


def _row_extremum_of(candidate: TensorView, values: TensorView) -> ReductionOp | None:
    """The max or min reduction of ``values`` that ``candidate`` is (kept dims broadcast)."""
    definition = candidate.definition
    if isinstance(definition, BroadcastOp):
        definition = definition.tensor_inputs[0].definition
    if (
        isinstance(definition, ReductionOp)
        and definition.op in (ReductionOpType.MAX, ReductionOpType.MIN)
        and definition.input is values
    ):
        return definition
    return None


def _near_tie_with_extremum(expr: Expr, exact: Env) -> Array | None:
    """For ``values == extremum(values)`` (an argmax's hit test) and ``!=``: the elements
    within the noise of a row's extremum where the row has two or more such elements. Which
    of them a kernel finds equal to its own max is undetermined (GPU fuzzer, seeds 461 and
    463: rms_norm over a dim of 1 makes every value about +-w; softmax rows of equal inputs
    whose sums a kernel adds in different orders)."""
    if not (isinstance(expr, BinaryOp) and expr.op in (BinaryOpType.EQ, BinaryOpType.NE)):
        return None
    lhs, rhs = expr.inputs
    if not (isinstance(lhs, TensorView) and isinstance(rhs, TensorView)):
        return None
    for values, candidate in ((lhs, rhs), (rhs, lhs)):
        reduction = _row_extremum_of(candidate, values)
        if reduction is None or not values.dtype.is_floating:
            continue
        v, m = exact.tensor(values), exact.tensor(candidate)
        near = np.abs(v - m) <= 2 * JITTER * np.abs(m)
        # Subnormals tie with one another: a kernel's flush-to-zero math may make any of them
        # 0, the row's extremum (GPU fuzzer, seed 701: the argmin of a softmax's column whose
        # smallest values were float32 subnormals; ex2.approx.ftz flushed two of four).
        tiny = np.finfo(np.float32 if values.dtype.itemsize <= 4 else np.float64).tiny
        near |= (np.abs(v) < tiny) & (np.abs(m) < tiny)
        ties = np.sum(near, axis=reduction.axes, keepdims=True) >= 2
        return np.broadcast_to(near & ties, expr.output.shape)
    return None


def _compares_a_mark(expr: Expr, env: Env, exact: Env, jitter: Jitter) -> Array | None:
    """For ``==`` and ``!=`` of floats: where an operand is an undetermined value's mark in
    this run (infinite or NaN where the exact value is finite). Marks compare equal to one
    another, so an argmax's hit test over a row of them found the first index in every run,
    and a ``where`` after it could map that onto the exact answer (GPU fuzzer, seed 559: the
    argmax of ``cos(amax(exp(x)))``, whose operands' noise is far past a radian)."""
    if not (isinstance(expr, BinaryOp) and expr.op in (BinaryOpType.EQ, BinaryOpType.NE)):
        return None
    common = common_dtype(expr.inputs)
    if not common.is_floating:
        return None
    marks = []
    for val in expr.inputs:
        if not isinstance(val, TensorView):
            continue
        noisy = np.asarray(env.operand(val, common), dtype=np.float64)
        true = np.asarray(exact.operand(val, common), dtype=np.float64)
        marks.append(np.broadcast_to(~np.isfinite(noisy) & np.isfinite(true), expr.output.shape))
    if not marks:
        return None
    marked = np.logical_or.reduce(marks)
    if not isinstance(jitter, float):
        # NaN marks (the run with a Generator): a number compared with a NaN keeps float
        # semantics, as a kernel's NaN does, and only a comparison of marks is a coin. A
        # row's NaN max then hits only the row's NaNs, the kernel's answer where a float32
        # product overflowed into inf * 0 (CPU fuzzer, seed 1202 case 4638: the argmax of
        # [55, NaN] is 1 on the GPU, while the runs' marks all hit the 55 first).
        marked = np.logical_and.reduce(marks)
    return np.asarray(marked)


def _near_zero(expr: Expr, env: Env, exact: Env) -> Array | None:
    """For a float's cast to bool (``x != 0``) and a comparison of floats (``x == y``,
    ``x < y``, ...): where the noise of ``x`` (of ``x - y``), as far as this run moved it and
    at least JITTER of the operands, reaches 0. The noise moves a value across 0 but never
    onto it, where a kernel may land exactly (GPU fuzzer, seed 471: a layer_norm of equal
    values is exactly 0 on the GPU and a few ulps off in the reference, so its cast to bool
    was True there and False here; seed 1440: the variance of equal values, exactly 0 on the
    GPU, compared with ``>=`` to a sum of standard deviations that were not, where every run
    moved the variance further above it).
    Below float64, an exact value a float32 subnormal away from 0 reaches it too: the GPU's
    ``.ftz`` math flushes it (CPU fuzzer, seed 801: a softmax's subnormals, 0 from
    ``ex2.approx.ftz``, made ``x != 0`` False where the reference had True)."""
    if isinstance(expr, CastOp):
        (inp,) = expr.tensor_inputs
        if not inp.dtype.is_floating:
            return None
        noisy, true = env.tensor(inp), exact.tensor(inp)
        scale = np.abs(true)
        flushes = inp.dtype != dtypes.float64
    elif isinstance(expr, BinaryOp) and expr.op.is_comparison:
        common = common_dtype(expr.inputs)
        if not common.is_floating:
            return None
        x, y = (env.operand(val, common) for val in expr.inputs)
        x0, y0 = (exact.operand(val, common) for val in expr.inputs)
        noisy, true, scale = x - y, x0 - y0, np.abs(x0) + np.abs(y0)
        flushes = common != dtypes.float64
    else:
        return None
    moved = np.abs(noisy - true)
    distance = np.maximum(moved, JITTER * scale)
    low = np.minimum(noisy, true) - distance
    high = np.maximum(noisy, true) + distance
    # A value no run moved (a relu's 0, an input's) is exact in a kernel too.
    reaches = np.isfinite(low) & np.isfinite(high) & (low <= 0) & (high >= 0) & (moved > 0)
    if flushes:
        reaches |= _flushable(true)
    return np.broadcast_to(reaches, expr.output.shape)


def _flushable(values: Array) -> Array:
    """Where a value is a nonzero float32 subnormal, which a kernel's ``.ftz`` math may make 0."""
    wide = np.asarray(values, dtype=np.float64)
    return np.asarray((wide != 0) & (np.abs(wide) < _SMALLEST_NORMAL_F32))


def _bool_mark(jitter: Jitter, exact: Array) -> Array | bool:
    """An undetermined bool: True in the run with ``jitter=1.0``, False with ``-1.0``, and a
    coin toss with a Generator, so that the runs differ from the reference there (and an
    argmax after it differs between them). Flipping the noisy run's own value
    instead undid its change where the noise had already moved it (CPU fuzzer, seed 525: a
    softmax's subnormal flushed to 0 by the random run, then its cast to bool flipped back to
    the reference's True, while the GPU's ``ex2.approx.ftz`` gives 0)."""
    if not isinstance(jitter, float):
        # A coin per element, not the exact value flipped: over an argmax's near-ties, the
        # first hit is then any of them, not always the first past the exact one (GPU fuzzer,
        # seed 701: the three runs' indices 8, 8 and none agreed with the exact 32 modulo 2
        # and 4, while a kernel's 15 did not). The runs with +-1 still give both values.
        return np.asarray(jitter.random(exact.shape) < 0.5)
    return jitter >= 0


def _is_ordered(expr: Expr) -> bool:
    """``<``, ``<=``, ``>`` or ``>=``."""
    return (
        isinstance(expr, BinaryOp)
        and expr.op.is_comparison
        and expr.op not in (BinaryOpType.EQ, BinaryOpType.NE)
    )


def _is_exact(expr: Expr) -> bool:
    if isinstance(expr, _EXACT_EXPRS):
        return True
    if isinstance(expr, UnaryOp):
        return expr.op in _EXACT_UNARY
    if isinstance(expr, BinaryOp):
        return expr.op in _EXACT_BINARY
    return isinstance(expr, ReductionOp) and expr.op in (ReductionOpType.MAX, ReductionOpType.MIN)


def _quantizes(expr: Expr) -> bool:
    """floor, ceil, round, trunc and floor_divide: integral results."""
    if isinstance(expr, UnaryOp):
        return expr.op in _ROUNDING
    return isinstance(expr, BinaryOp) and expr.op == BinaryOpType.FLOOR_DIVIDE


def _mark(jitter: Jitter) -> float:
    if not isinstance(jitter, float):
        return math.nan
    return math.inf if jitter >= 0 else -math.inf


def _reaches_jump(part: Any, noisy: Array, exact: Array, floor: Array | float) -> Array:
    """Where ``part`` (floor, rint, ...) differs across the values from ``exact`` to ``noisy``
    widened by their distance (at least ``floor``) on both sides."""
    distance = np.maximum(np.abs(noisy - exact), floor)
    low = np.minimum(noisy, exact) - distance
    high = np.maximum(noisy, exact) + distance
    finite = np.isfinite(low) & np.isfinite(high)
    return np.asarray(finite & (part(low) != part(high)))


def _undetermined_jump(expr: Expr, env: Env, exact: Env, noisy_inputs: bool) -> Array | None:
    """Where a jumping op's result (or a sin or cos of a noisy operand past _PHASE_NOISE) is
    undetermined. Its operand's noise is how far this run
    moved it, and at least JITTER of it where an operand carries noise at all: the noise of
    two ops may cancel in a run (rsqrt(x + 1) with both moved up) where a kernel's does not
    (GPU fuzzer, seed 451: 8 // rsqrt(9), 23 by f32(1/3) and 24 by rsqrt.approx)."""
    if isinstance(expr, UnaryOp) and expr.op in _ROUNDING:
        (inp,) = expr.tensor_inputs
        if not inp.dtype.is_floating:
            return None
        noisy, true = env.tensor(inp), exact.tensor(inp)
        floor = JITTER * np.abs(true) if noisy_inputs else 0.0
        part = _ROUNDING[expr.op]
        flushes = inp.dtype != dtypes.float64
        if flushes:
            # A subnormal this run flushed: the kernel has it or 0, nothing beyond either.
            noisy = np.where((noisy == 0) & _flushable(true), true, noisy)
        jumps = _reaches_jump(part, noisy, true, floor)
        if flushes:
            jumps = jumps | (_flushable(true) & (part(true) != 0))
        return np.broadcast_to(jumps, expr.output.shape)
    if isinstance(expr, UnaryOp) and expr.op in _PERIODIC and noisy_inputs:
        (inp,) = expr.tensor_inputs
        noisy, true = env.tensor(inp), exact.tensor(inp)
        distance = np.maximum(np.abs(noisy - true), JITTER * np.abs(true))
        return np.broadcast_to(np.isfinite(true) & (distance >= _PHASE_NOISE), expr.output.shape)
    if _accumulates(expr) and not isinstance(expr, BinaryOp):
        # A sum or matmul whose terms' magnitudes add up past the accumulator's largest
        # finite value: some order of a kernel's partial sums overflows (to inf) where
        # another does not (CPU fuzzer, seed 605 case 3074: a matmul of exp(88)s, 1.6e38
        # exactly, inf in the kernel's order).
        # Only finite terms count: an infinite one (or NaN) gives every order the same
        # non-finite sum unless a finite term overflows on its own (CPU fuzzer, seed 605
        # case 3074 again: inf and 1.65e38 * -2.08, NaN in float32 where inf is exact).
        wide = any(tv.dtype == dtypes.float64 for tv in (*expr.tensor_inputs, expr.output))
        largest = float(np.finfo(np.float64 if wide else np.float32).max)
        return np.broadcast_to(_terms_magnitude(expr, env) > largest, expr.output.shape)
    if isinstance(expr, BinaryOp) and expr.op in _QUOTIENT_PART:
        common = common_dtype(expr.inputs)
        if not common.is_floating:
            return None
        x, y = (env.operand(val, common) for val in expr.inputs)
        x0, y0 = (exact.operand(val, common) for val in expr.inputs)
        quotient = x0 / y0
        floor = 2 * JITTER * np.abs(quotient) if noisy_inputs else 0.0
        part = _QUOTIENT_PART[expr.op]
        flushes = common != dtypes.float64
        if flushes:
            # A dividend this run flushed: the kernel's quotient is the exact one or 0 (below).
            x = np.where((x == 0) & _flushable(x0), x0, x)
        with np.errstate(divide="ignore", invalid="ignore"):
            jumps = _reaches_jump(part, x / y, quotient, floor)
        if flushes:
            # A float32 subnormal operand may be flushed to 0 by the kernel's ``.ftz`` math
            # before the division (CPU fuzzer, seed 901: a softmax's subnormal // -0.75 is
            # -1 in NumPy and -0 on the GPU, whose ex2.approx.ftz gave 0): the quotient of
            # a flushed dividend is 0, and a flushed divisor has none.
            jumps = jumps | (_flushable(x0) & (part(quotient) != 0)) | _flushable(y0)
        return np.broadcast_to(jumps, expr.output.shape)
    return None


def rounds(expr: Expr) -> bool:
    """Whether a kernel rounds ``expr``'s result its own way (it takes noise here)."""
    return not _is_exact(expr)


def _float32_product(expr: ReductionOp, env: Env, order: str) -> Array:
    """The product taken in float32 in one ``order``: ``"forward"``, ``"reverse"`` or
    ``"tree"`` (pairs, as threads and warps combine partial products). Where partial
    products overflow in one place and underflow in another (inf times 0 is NaN), a float32
    kernel's answer depends on its order, and the comparison must not hold it to float64's."""
    value = np.asarray(env.tensor(expr.input), dtype=np.float32)
    axes = expr.axes
    rows = np.moveaxis(value, axes, tuple(range(-len(axes), 0)))
    rows = rows.reshape(*rows.shape[: rows.ndim - len(axes)], -1)
    product = _ordered_product(rows, order)
    # Where the factors above 1 overflow float32 together, or those below 1 underflow, some
    # order of a kernel's partial products does (inf, 0, or inf * 0): such an element is one
    # float32 cannot determine. The runs mark it with each extreme, so that an op after it
    # (a comparison to 0 of a bool output: GPU fuzzer, seed 433) shows it undetermined too:
    # +-inf in the forward run, +-0 in the reverse one, NaN in the tree one. (evaluate_noisy
    # runs this with float warnings off.)
    logs = np.log2(np.abs(rows.astype(np.float64)))
    large = np.sum(np.where(logs > 0, logs, 0.0), axis=-1)
    small = np.sum(np.where((logs < 0) & np.isfinite(logs), logs, 0.0), axis=-1)
    sign = np.prod(np.sign(rows.astype(np.float64)), axis=-1)
    extreme = {"forward": sign * np.inf, "reverse": sign * 0.0}.get(order, np.nan)
    return np.where((large > 128) | (small < -126), extreme, product)


def _ordered_product(rows: Array, order: str) -> Array:
    with np.errstate(all="ignore"):
        if order == "tree":
            while rows.shape[-1] > 1:
                if rows.shape[-1] % 2:
                    rows = np.concatenate([rows, np.ones_like(rows[..., :1])], axis=-1)
                rows = rows[..., 0::2] * rows[..., 1::2]
            return np.asarray(
                rows[..., 0] if rows.shape[-1] else np.ones(rows.shape[:-1]), dtype=np.float64
            )
        if order == "reverse":
            rows = rows[..., ::-1]
        return np.asarray(np.multiply.reduce(rows, axis=-1, dtype=np.float32), dtype=np.float64)


def _product_order(jitter: Jitter) -> str:
    if not isinstance(jitter, float):
        return "tree"
    return "forward" if jitter >= 0 else "reverse"


def _accumulates(expr: Expr) -> bool:
    """A sum of terms (a sum reduction or a matmul), which a kernel adds in its own order, or
    an addition or subtraction, whose operands carry their own float32 errors: its error
    scales with them, not with a result they cancelled to (``x - logsumexp(x)`` near 0 as
    a divisor: CPU fuzzer, seed 419)."""
    if isinstance(expr, ReductionOp):
        return expr.op == ReductionOpType.SUM
    if isinstance(expr, BinaryOp):
        return expr.op in (BinaryOpType.ADD, BinaryOpType.SUB)
    return isinstance(expr, MatmulOp | LinearOp | MmaOp)


def _magnitude(expr: Expr, env: Env) -> Array:
    """``expr`` evaluated on the magnitudes of its tensor inputs (the sum of the magnitudes of
    its terms, with a bias's), times how the error of a float32 sum grows with its number of
    terms ``K``: ``sqrt(K)`` for a sum (rounded additions in a tree or in a row), ``K`` for a
    matmul, which may run on tensor cores, whose additions truncate (the error of each has
    one sign; Fasi et al., "Numerical behavior of NVIDIA tensor cores", 2021)."""
    if isinstance(expr, BinaryOp):
        common = expr.output.dtype
        lhs, rhs = (np.abs(env.operand(val, common)) for val in expr.inputs)
        return np.asarray(lhs + rhs, dtype=np.float64)
    if isinstance(expr, ReductionOp):
        growth = math.sqrt(max(1, expr.input.numel // max(1, expr.output.numel)))
    else:
        growth = float(
            max(1, expr.tensor_inputs[0].shape[-1] if expr.tensor_inputs[0].shape else 1)
        )
    return _terms_magnitude(expr, env) * growth


def _terms_magnitude(expr: Expr, env: Env) -> Array:
    """A sum's or matmul's finite terms' magnitudes added up: ``expr`` on its inputs'
    magnitudes, a non-finite input value taken as 0 (the term it makes is not finite)."""
    magnitudes = Env()
    for tv in expr.tensor_inputs:
        value = np.abs(np.asarray(env.values[tv]))
        magnitudes.values[tv] = np.where(np.isfinite(value), value, 0).astype(value.dtype)
    return np.asarray(evaluate_expr(expr, magnitudes, rounded=False), dtype=np.float64)


# The relative error of the kernels' pow per unit of |y log2 |x||, in JITTERs (emit_math: about
# 1.7e-7 |y log2 |x||, the rounding of y log2 |x| passed through ex2).
_POW_ERROR = 1.7e-7 / JITTER


def _error_scale(expr: Expr, env: Env) -> Array | float:
    """How many JITTERs of relative error the kernels' form of ``expr`` may add: 1; for a
    product of K factors ``sqrt(K)`` (each multiply rounds); for a float pow
    ``1 + _POW_ERROR |y log2 |x||`` (a large exponent of a large or tiny base)."""
    if isinstance(expr, ReductionOp) and expr.op == ReductionOpType.PROD:
        return math.sqrt(max(1, expr.input.numel // max(1, expr.output.numel)))
    if not (isinstance(expr, BinaryOp) and expr.op == BinaryOpType.POW):
        return 1.0
    common = common_dtype(expr.inputs)
    if not common.is_floating:
        return 1.0
    base, exponent = (env.operand(v, common) for v in expr.inputs)
    with np.errstate(all="ignore"):
        scale = 1.0 + _POW_ERROR * np.abs(exponent * np.log2(np.abs(base)))
    finite: Array = np.nan_to_num(np.broadcast_to(scale, expr.output.shape), nan=1.0, posinf=1.0)
    return finite


def _jittered(
    value: Array, dtype: DType, jitter: Jitter, magnitude: Array | None, scale: Array | float
) -> Array:
    if isinstance(jitter, float):
        noise: Array | float = JITTER * jitter
    else:
        noise = jitter.uniform(-JITTER, JITTER, np.shape(value))
    wide = widen(value, dtype) * (1.0 + noise * scale)
    if magnitude is not None:
        # An infinite term's magnitude moves nothing: the sum is that infinity (or NaN) in
        # every order, not inf - inf.
        wide = wide + np.where(np.isfinite(magnitude), noise * magnitude, 0.0)
    if not isinstance(jitter, float) or jitter < 0:
        # The random run and the run that moves every result down flush float32 denormals,
        # as the GPU's approximate functions do; the run that moves them up keeps them, as
        # its plain arithmetic does. (Only the random run flushed: an exp's subnormal, flushed
        # to 0 by ex2.approx.ftz and then scaled into a normal float by a multiply, was
        # undetermined in that run alone, where its cast to bool is a coin toss: CPU fuzzer,
        # seed 1415, softmax(x) * col != 0.)
        wide = np.where(np.abs(wide) < _SMALLEST_NORMAL_F32, np.copysign(0.0, wide), wide)
    return narrow(wide, dtype)
