"""Decompose the matmuls that translation left alone into broadcast, multiply and sum.

Expects the fusion after ``translate_patterns``: any MatmulOp or LinearOp still present was
refused for the tensor-core path (fp32 operands, a 1-D operand, a size-1 M, N or K).
Guarantees: each becomes ``sum_K(a[..., M, 1, K] * b[..., 1, N, K])`` computed in fp32 (fp32
operands stay fp32-accurate: no tf32) and cast to the op's dtype, plus the bias for a
LinearOp; where N or M is 1, ``sum_K(a[..., M, K] * b[..., 1, K])`` (or the same with the
roles swapped) with the size-1 axis put back on the sum, both operands at the product's rank
before their casts; where K is 1, the outer product. The values are those of the original
op (checked against the interpreter in tests). The reduction scheduler then takes the
result like any other reduction.
"""

from __future__ import annotations

from pyfuse.ir import dtypes, layout_ops
from pyfuse.ir import ops as ir_ops
from pyfuse.ir.exprs import BinaryOpType, LinearOp, MatmulOp, MmaOp, ReductionOpType
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.hopper import SM90
from pyfuse.ir.naming import source_location
from pyfuse.ir.target import TargetInfo
from pyfuse.ir.tensor import TensorView


def _contract(a: TensorView, b_nk: TensorView, out_dtype: dtypes.DType) -> TensorView:
    """``a [..., M, K]`` times ``b_nk [..., N, K]`` summed over K, batch axes broadcast.

    Where N or M is 1 (a matrix times a vector, or a vector times a matrix) the product is
    taken without the size-1 axis (``[..., M, K] * [..., 1, K]``, one reduction over rows),
    and the axis is put back on the sum: a size-1 axis in the middle of the product left a
    broadcast operand the reduction schedule could not loop over, and a bf16 ``x @ v``
    became 7 to 10 kernels, one storing the whole product."""
    math = dtypes.float32 if out_dtype.itemsize < 4 else out_dtype
    if b_nk.shape[-2] == 1 or a.shape[-2] == 1:
        # Both operands at the product's rank before their casts: a cast of a lower-rank
        # vector broadcast after it covers part of the rows, which the reduction schedule
        # cannot loop over (the fallback plan "broadcasts before casts" would move it).
        while a.ndim < b_nk.ndim:
            a = ir_ops.unsqueeze(a, 0)
        while b_nk.ndim < a.ndim:
            b_nk = ir_ops.unsqueeze(b_nk, 0)
    a_m, b_m = ir_ops.cast(a, math), ir_ops.cast(b_nk, math)
    if b_nk.shape[-2] == 1:  # N = 1: [..., M, K] * [..., 1, K], summed into [..., M, 1]
        product = ir_ops.binary(BinaryOpType.MUL, a_m, b_m)
        return ir_ops.unsqueeze(ir_ops.reduce(ReductionOpType.SUM, product, -1), -1)
    if a.shape[-2] == 1:  # M = 1: [..., 1, K] * [..., N, K], summed into [..., 1, N]
        product = ir_ops.binary(BinaryOpType.MUL, a_m, b_m)
        return ir_ops.unsqueeze(ir_ops.reduce(ReductionOpType.SUM, product, -1), -2)
    a_b = ir_ops.unsqueeze(a_m, -2)  # [..., M, 1, K]
    b_b = ir_ops.unsqueeze(b_m, -3)  # [..., 1, N, K]
    product = ir_ops.binary(BinaryOpType.MUL, a_b, b_b)
    return ir_ops.reduce(ReductionOpType.SUM, product, -1)


def _outer(a: TensorView, b_n: TensorView, out_dtype: dtypes.DType) -> TensorView:
    """``a [..., M, 1]`` times ``b_n [..., N]`` (a matmul of K = 1, its K squeezed from b):
    the outer product, one pointwise multiply, with no size-1 sum left for a scheduler."""
    math = dtypes.float32 if out_dtype.itemsize < 4 else out_dtype
    b_row = ir_ops.unsqueeze(ir_ops.cast(b_n, math), -2)  # [..., 1, N]
    product = ir_ops.binary(BinaryOpType.MUL, ir_ops.cast(a, math), b_row)
    if not math.is_floating:
        return product
    # A one-term sum still starts from +0.0: ``0 * -1`` is -0.0, its matmul +0.0.
    return ir_ops.binary(BinaryOpType.ADD, product, 0.0)


def decompose_matmuls(fusion: Fusion) -> int:
    """Rewrite every remaining MatmulOp/LinearOp in place; returns how many were rewritten."""
    count = 0
    for expr in fusion.exprs():
        if not isinstance(expr, MatmulOp | LinearOp):
            continue
        out = expr.output
        with fusion, source_location(expr.source):
            if isinstance(expr, MatmulOp):
                a, b = expr.a, expr.b
                a2 = ir_ops.unsqueeze(a, 0) if a.ndim == 1 else a
                b2 = ir_ops.unsqueeze(b, 1) if b.ndim == 1 else b
                if a2.shape[-1] == 1:  # K = 1: b2 is [..., 1, N]
                    result = _outer(a2, ir_ops.squeeze(b2, b2.ndim - 2), out.dtype)
                else:
                    # A vector b is [1, K] as it stands (no transpose of its [K, 1]).
                    b_nk = (
                        ir_ops.unsqueeze(b, 0) if b.ndim == 1 else layout_ops.transpose(b2, -1, -2)
                    )
                    result = _contract(a2, b_nk, out.dtype)
                if a.ndim == 1:
                    result = ir_ops.squeeze(result, result.ndim - 2)
                if b.ndim == 1:
                    result = ir_ops.squeeze(result, result.ndim - 1)
            else:
                x, weight, bias = expr.x, expr.weight, expr.bias
                x2 = ir_ops.unsqueeze(x, 0) if x.ndim == 1 else x
                if x2.shape[-1] == 1:  # K = 1: the weight is [N, 1]
                    result = _outer(x2, ir_ops.squeeze(weight, 1), out.dtype)
                else:
                    result = _contract(x2, weight, out.dtype)
                if bias is not None:
                    result = ir_ops.binary(
                        BinaryOpType.ADD, result, ir_ops.cast(bias, result.dtype)
                    )
                if x.ndim == 1:
                    result = ir_ops.squeeze(result, 0)
            result = ir_ops.cast(result, out.dtype)
        fusion.replace_uses(out, result)  # output slots too: an output keeps its place
        expr.unlink()
        count += 1
    return count


def decompose_unschedulable_mmas(fusion: Fusion, target: TargetInfo) -> int:
    """Rewrite MMAs whose operands TMA cannot load (strides that are not 16-byte multiples,
    M/N/K axes split across memory, inputs whose addresses are not 16-byte aligned: the
    target of such a call has ``vector_bytes`` below 16) into multiply + sum, so they still
    run — on the reduction path — instead of failing. Returns how many were rewritten."""

    mmas = [expr for expr in fusion.exprs() if isinstance(expr, MmaOp)]
    if not mmas:
        return 0
    from pyfuse.passes import matmul_operands  # loads with the first MMA

    count = 0
    for expr in mmas:
        unloadable = target.vector_bytes < SM90.tma_alignment  # unaligned inputs
        for name, operand in (("A", expr.a), ("B", expr.b)):
            root = matmul_operands.operand_root(fusion, operand)
            if unloadable or root is None:
                continue  # a computed operand: segmentation gives it a kernel of its own
            reason = matmul_operands.operand_load_reason(fusion, expr, name, root)
            unloadable = reason is not None
        if any(axis.is_reduction and axis.extent == 0 for axis in expr.output.logical):
            # K = 0: no tile to load (a TMA box of extent 0 is invalid); the sum over no
            # elements then folds to zeros (fold_empty_reductions).
            unloadable = True
        a_root = matmul_operands.operand_root(fusion, expr.a)
        if a_root is not None and a_root is matmul_operands.operand_root(fusion, expr.b):
            # One input as both operands (``x @ x.T``): the tensor-core kernel faulted with a
            # misaligned address on the H200 (2026-12-01); multiply+sum until it is found.
            unloadable = True
        if not unloadable:
            continue
        mma_to_multiply_sum(fusion, expr)
        count += 1
    return count


def mma_to_multiply_sum(fusion: Fusion, expr: MmaOp) -> None:
    """Rewrite one MmaOp in place as ``sum_K(a * b)`` in fp32 (its operands are broadcast to
    ``[..., M, N, K]`` already); its uses, and an output slot, read the sum."""
    out = expr.output
    with fusion, source_location(expr.source):
        a = ir_ops.cast(expr.a, dtypes.float32)
        b = ir_ops.cast(expr.b, dtypes.float32)
        product = ir_ops.binary(BinaryOpType.MUL, a, b)
        axes = [i for i, axis in enumerate(out.logical) if axis.is_reduction]
        result = ir_ops.reduce(ReductionOpType.SUM, product, axes)
        if out.dtype != dtypes.float32:
            # The MMA rounded its fp32 accumulator to its output dtype: so does the sum.
            result = ir_ops.cast(result, out.dtype)
    fusion.replace_uses(out, result)  # output slots too: an output keeps its place
    expr.unlink()
