"""translate_patterns: rewrite every matmul pattern of the math IR to an :class:`MmaOp`.

Expects: a traced fusion (math IR, no schedule yet).

Guarantees, in place:

- Every translatable pattern becomes one ``MmaOp(acc, a, b)`` with an fp32 accumulator
  ``acc [..., M, N, rK]``:

  - ``MatmulOp(a [..., M, K], b [..., K, N])``: ``a`` is broadcast to ``[..., M, 1, K]``; ``b``
    is permuted to ``[..., N, K]`` (or, when ``b`` is itself a permute, the two permutes are
    composed, so ``x @ w.T`` reads ``w`` directly) and broadcast to ``[..., 1, N, K]``. Missing
    outer batch axes become broadcasts, so batch dims broadcast as in torch.
  - ``LinearOp(x [..., M, K], w [N, K], bias)``: ``x`` to ``[..., M, 1, K]``, ``w`` to
    ``[1..., 1, N, K]``; a bias becomes an epilogue ``acc + cast(broadcast(bias), f32)``.
  - ``sum_K(mul(A, B))`` (a sum over a mul of two tensors, a widening cast to f32 between them
    and casts to f32 right before the mul looked through): the sum is replaced by
    ``MmaOp(acc, A, B)`` on the tensors before those casts, in the user's axis order. Axes
    where exactly one operand is broadcast are M or N; the innermost such axis is N and its
    non-broadcast operand is B, whichever side of the mul it is on; summed axes must be
    iteration axes of both operands; at least one M and one N axis are needed.
  - An ``MmaOp`` already present is recorded as it is.

- The BroadcastOps and PermuteOps made for the operands stay in the fusion (so every output
  axis of the MMA maps to an axis of each operand); a tensor that already has a use with the
  same broadcast flags or permutation is reused, so two matmuls sharing an operand
  (``silu(x @ w1.T) * (x @ w3.T)``) read one broadcast of it.
- Casts: the MMA accumulates in fp32; one cast to the original (bf16/fp16) dtype follows it,
  and consumers read that, as they read the original result: a cast back to f32 after it
  keeps the rounding the user's program has (eliding that round trip changed f32 outputs by
  a bf16 ulp, which the fuzzer reported as wrong results against the reference).
- Ops the pass made dead (the original op, the mul and its casts, a composed permute, elided
  casts) are unlinked from their inputs' uses.
- Values are preserved up to the order of the K sum: a mul-sum's products are exact. A mul
  that rounds them to 16 bits is translated only where the sum is rounded back to 16 bits
  too (a bf16 tensor's ``(a * b).sum()``), whose rounding hides theirs; with the sum kept
  in f32 (``(a * b).float().sum()``) it is not.

Not translated (left in place, recorded with the reason in
:attr:`TranslationResult.untranslated`, so the interpreter path or another scheduler can take
them): a 1-D operand (a matrix-vector product: N or M is 1, below any MMA tile; refusing keeps
the MatmulOp whole for the segmenter rather than making a degenerate MMA), M, N or K of
extent 1, operands whose dtype is not in ``operand_dtypes`` (bf16 and fp16 by default: the
Hopper MMA path; an f32 mul-sum stays a reduction), and mul-sums whose product tensor has other
uses (translating would not remove the M*N*K product).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyfuse.ir import dtypes, layout_ops, ops
from pyfuse.ir.dtypes import DType
from pyfuse.ir.exprs import (
    BinaryOp,
    BinaryOpType,
    BroadcastOp,
    CastOp,
    Expr,
    LinearOp,
    MatmulOp,
    MmaOp,
    PermuteOp,
    ReductionOp,
    ReductionOpType,
)
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.iterdomain import IterDomain
from pyfuse.ir.naming import source_location
from pyfuse.ir.tensor import TensorView, new_axes_like
from pyfuse.passes.matmul_patterns import (
    PatternKind,
    TranslationResult,
    UntranslatedPattern,
    describe_mma,
)

__all__ = ["MMA_OPERAND_DTYPES", "TranslationResult", "match_mul_sum", "translate_patterns"]

MMA_OPERAND_DTYPES: tuple[DType, ...] = (dtypes.bfloat16, dtypes.float16)


def translate_patterns(
    fusion: Fusion, *, operand_dtypes: Sequence[DType] = MMA_OPERAND_DTYPES
) -> TranslationResult:
    """Rewrite every matmul pattern of ``fusion`` to an MmaOp (see the module doc)."""
    result = TranslationResult()
    translated: list[tuple[MmaOp, PatternKind]] = []
    with fusion:
        for expr in fusion.exprs():
            if not _is_live(expr):
                continue  # unlinked by an earlier translation
            outcome = _translate(fusion, expr, tuple(operand_dtypes), result)
            if outcome is None:
                continue
            kind, mma_or_reason = outcome
            if isinstance(mma_or_reason, str):
                result.untranslated.append(UntranslatedPattern(kind, expr, mma_or_reason))
            else:
                translated.append((mma_or_reason, kind))
    result.patterns = [describe_mma(fusion, mma, kind) for mma, kind in translated]
    return result


def _is_live(expr: Expr) -> bool:
    return all(any(use is expr for use in inp.uses) for inp in expr.inputs)


def _translate(
    fusion: Fusion, expr: Expr, operand_dtypes: tuple[DType, ...], result: TranslationResult
) -> tuple[PatternKind, MmaOp | str] | None:
    """The pattern kind and the new MmaOp (or why not), or None when ``expr`` is no pattern."""
    if isinstance(expr, MmaOp):
        return PatternKind.MMA, expr
    with source_location(expr.source):
        if isinstance(expr, MatmulOp):
            return PatternKind.MATMUL, _translate_matmul(fusion, expr, operand_dtypes, result)
        if isinstance(expr, LinearOp):
            return PatternKind.LINEAR, _translate_linear(fusion, expr, operand_dtypes, result)
        if isinstance(expr, ReductionOp):
            match = match_mul_sum(fusion, expr)
            if match is None:
                return None
            if isinstance(match, str):
                return PatternKind.MUL_SUM, match
            a, b = match
            return PatternKind.MUL_SUM, _translate_mul_sum(
                fusion, expr, a, b, operand_dtypes, result
            )
    return None


# ---- MatmulOp and LinearOp ----------------------------------------------------------------------


def _translate_matmul(
    fusion: Fusion, op: MatmulOp, operand_dtypes: tuple[DType, ...], result: TranslationResult
) -> MmaOp | str:
    a, b = op.a, op.b
    refusal = _dtype_refusal(a, b, operand_dtypes)
    if refusal is None and (a.ndim < 2 or b.ndim < 2):
        refusal = (
            f"a 1-D operand (shapes {a.shape} @ {b.shape}) is a matrix-vector product, "
            "below the MMA's tile; left as a MatmulOp"
        )
    if refusal is None:
        refusal = _extent_refusal(a.no_reductions[-2], b.no_reductions[-1], a.no_reductions[-1])
    if refusal is not None:
        return refusal
    n_batch = op.output.ndim - 2
    a_batch, b_batch = a.ndim - 2, b.ndim - 2
    b_nk = _transposed_last_two(fusion, b)
    a_operand = _broadcast(
        fusion, a, [True] * (n_batch - a_batch) + [False] * a_batch + [False, True, False]
    )
    b_operand = _broadcast(
        fusion, b_nk, [True] * (n_batch - b_batch) + [False] * b_batch + [True, False, False]
    )
    mma = _new_mma(op.output, a_operand, b_operand)
    _finalize(fusion, op, mma.output, result)
    return mma


def _translate_linear(
    fusion: Fusion, op: LinearOp, operand_dtypes: tuple[DType, ...], result: TranslationResult
) -> MmaOp | str:
    x, weight, bias = op.x, op.weight, op.bias
    refusal = _dtype_refusal(x, weight, operand_dtypes)
    if refusal is None and x.ndim < 2:
        refusal = (
            f"a 1-D input (shape {x.shape}) is a matrix-vector product, below the MMA's tile; "
            "left as a LinearOp"
        )
    if refusal is None:
        refusal = _extent_refusal(x.no_reductions[-2], weight.no_reductions[0], x.no_reductions[-1])
    if refusal is not None:
        return refusal
    n_lead = x.ndim - 2
    a_operand = _broadcast(fusion, x, [False] * n_lead + [False, True, False])
    b_operand = _broadcast(fusion, weight, [True] * n_lead + [True, False, False])
    mma = _new_mma(op.output, a_operand, b_operand)
    value = mma.output
    if bias is not None:
        # ops.binary broadcasts the bias to [1..., 1, N] and casts it to f32 (the math type).
        value = ops.binary(BinaryOpType.ADD, value, bias)
    _finalize(fusion, op, value, result)
    return mma


def _dtype_refusal(a: TensorView, b: TensorView, operand_dtypes: tuple[DType, ...]) -> str | None:
    if a.dtype != b.dtype:
        return f"operand dtypes differ ({a.dtype.name} and {b.dtype.name})"
    if a.dtype not in operand_dtypes:
        names = ", ".join(dtype.name for dtype in operand_dtypes)
        return f"{a.dtype.name} operands: the MMA path takes {names}"
    return None


def _extent_refusal(m_axis: IterDomain, n_axis: IterDomain, k_axis: IterDomain) -> str | None:
    for name, axis in (("M", m_axis), ("N", n_axis), ("K", k_axis)):
        if axis.is_broadcast:
            return f"{name} = 1: not a matmul for the MMA (a size-1 {name} axis is a broadcast)"
    return None


def _new_mma(original: TensorView, a: TensorView, b: TensorView) -> MmaOp:
    """An MmaOp with an fp32 output shaped like ``original`` ([..., M, N, rK])."""
    accumulator = TensorView(new_axes_like(original.logical), dtypes.float32)
    return MmaOp(accumulator, a, b)


# ---- multiply-sum -------------------------------------------------------------------------------


def match_mul_sum(fusion: Fusion, expr: ReductionOp) -> tuple[TensorView, TensorView] | str | None:
    """The (A, B) operands of a sum-of-mul matmul, a reason when ``expr`` sums a mul of two
    tensors but is no matmul, or None when it is no sum of a mul at all."""
    if expr.op != ReductionOpType.SUM:
        return None
    product = _before_f32_cast(expr.input)
    mul = product.definition
    if not isinstance(mul, BinaryOp) or mul.op != BinaryOpType.MUL:
        return None
    if len(mul.tensor_inputs) != 2:
        return None
    if product.dtype.itemsize < 4 and not _rounded_back(fusion, expr.output, product.dtype):
        # An MMA's products are exact. Where the sum goes back to the products' 16 bits (a
        # bf16 tensor's sum), its rounding hides theirs; kept in f32, the sum shows it.
        return f"the products are rounded to {product.dtype.name} and their sum kept in float32"
    for tv in {id(expr.input): expr.input, id(product): product}.values():
        if len(fusion.uses_in_fusion(tv)) != 1 or fusion.is_output(tv):
            return (
                f"the product T{tv.name} has other uses or is an output; translating would "
                "not remove the M*N*K product"
            )
    lhs, rhs = (_before_f32_cast(tv) for tv in mul.tensor_inputs)
    out_axes = expr.output.logical
    if not lhs.ndim == rhs.ndim == len(out_axes):
        return f"operand ranks {lhs.ndim}, {rhs.ndim} differ from the sum's {len(out_axes)}"
    # For each output axis where exactly one operand is broadcast: is it lhs that has it?
    one_sided: list[tuple[int, bool]] = []
    for index, (out_axis, l_axis, r_axis) in enumerate(
        zip(out_axes, lhs.no_reductions, rhs.no_reductions, strict=True)
    ):
        if out_axis.is_reduction:
            if l_axis.is_broadcast or r_axis.is_broadcast:
                return f"summed axis {index} is a broadcast in an operand"
        elif l_axis.is_broadcast != r_axis.is_broadcast:
            one_sided.append((index, r_axis.is_broadcast))
    if not one_sided:
        return "no axis where exactly one operand is broadcast: a reduction, not a matmul"
    # The innermost one-sided axis is N; the operand that has it is B.
    b_is_lhs = one_sided[-1][1]
    if all(lhs_has == b_is_lhs for _, lhs_has in one_sided):
        return "no M axis (every one-sided axis belongs to one operand): a matrix-vector product"
    return (rhs, lhs) if b_is_lhs else (lhs, rhs)


def _rounded_back(fusion: Fusion, total: TensorView, dtype: DType) -> bool:
    """Every use of ``total`` casts it to a float of at most ``dtype``'s size."""
    uses = fusion.uses_in_fusion(total)
    return (
        bool(uses)
        and not fusion.is_output(total)
        and all(
            isinstance(use, CastOp)
            and use.output.dtype.is_floating
            and use.output.dtype.itemsize <= dtype.itemsize
            for use in uses
        )
    )


def _before_f32_cast(tv: TensorView) -> TensorView:
    """The tensor a cast to f32 reads, or ``tv`` itself."""
    definition = tv.definition
    if isinstance(definition, CastOp) and tv.dtype == dtypes.float32:
        source = definition.tensor_inputs[0]
        if source.dtype.is_floating:
            return source
    return tv


def _translate_mul_sum(
    fusion: Fusion,
    expr: ReductionOp,
    a: TensorView,
    b: TensorView,
    operand_dtypes: tuple[DType, ...],
    result: TranslationResult,
) -> MmaOp | str:
    refusal = _dtype_refusal(a, b, operand_dtypes)
    if refusal is not None:
        return refusal
    mma = _new_mma(expr.output, a, b)
    _finalize(fusion, expr, mma.output, result)
    return mma


# ---- shared steps -------------------------------------------------------------------------------


def _broadcast(fusion: Fusion, tv: TensorView, is_new: Sequence[bool]) -> TensorView:
    """``tv`` broadcast by ``is_new``, reusing a live BroadcastOp of ``tv`` with those flags."""
    flags = tuple(is_new)
    if not any(flags):
        return tv
    for use in fusion.uses_in_fusion(tv):
        if isinstance(use, BroadcastOp) and use.is_new == flags:
            return use.output
    return ops.broadcast(tv, flags)


def _transposed_last_two(fusion: Fusion, tv: TensorView) -> TensorView:
    """``tv`` with its last two axes swapped. A permute of a permute is composed into one
    permute of the first one's input (none when they cancel); an existing use is reused."""
    perm = list(range(tv.ndim))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    source = tv
    definition = tv.definition
    if isinstance(definition, PermuteOp):
        source = definition.tensor_inputs[0]
        perm = [definition.perm[axis] for axis in perm]
    if perm == list(range(source.ndim)):
        return source
    for use in fusion.uses_in_fusion(source):
        if isinstance(use, PermuteOp) and list(use.perm) == perm:
            return use.output
    return layout_ops.permute(source, perm)


def _finalize(
    fusion: Fusion, original_expr: Expr, value: TensorView, result: TranslationResult
) -> None:
    """Make the consumers of ``original_expr``'s result read ``value`` (fp32) instead, with at
    most one cast back to the original dtype; then unlink what became dead."""
    original = original_expr.output
    replacement = value
    if original.dtype != value.dtype:
        # The user's matmul rounds to its dtype; a cast back to f32 after it keeps that
        # rounding (torch's values, bit for bit the unfused kernels'), so nothing is elided.
        replacement = ops.cast(value, original.dtype)
    fusion.replace_uses(original, replacement)  # an output slot stays in global memory
    result.replacements[original] = replacement
    original_expr.unlink()
    _unlink_dead(fusion, original_expr.tensor_inputs)


def _unlink_dead(fusion: Fusion, tensors: Sequence[TensorView]) -> None:
    """Unlink the definitions of ``tensors`` (and upstream) that no longer have any use."""
    stack = list(tensors)
    while stack:
        tv = stack.pop()
        definition = tv.definition
        if tv.uses or definition is None or fusion.is_output(tv) or fusion.is_input(tv):
            continue
        definition.unlink()
        stack.extend(definition.tensor_inputs)
