"""split_k: a matmul's K dimension split into ``S`` parts that run on separate CTAs.

A matmul with few output tiles and a long K keeps most SMs idle: every CTA reduces a whole
K. ``MatmulParams(splitk=S)`` asks for ``S`` CTAs per output tile instead; left ``None``,
:func:`auto_parts` picks ``S`` for each matmul whose tiles fill at most a quarter of the
SMs.
Expects the math IR before ``translate_patterns``; rewrites, in place, each MatmulOp and
LinearOp whose operands allow it as

    parts  = matmul(a_view [..., S, M, K/S], b_view [..., S, K/S, N])   # fp32, a batch of S
    result = cast(sum(parts, the S axis) (+ bias), the original dtype)

Each view reshapes an operand's *stored* tensor, a fusion input in row-major memory or such
an input under one transpose of its last two axes: splitting an axis of a row-major tensor
is a view, so ``skip_intermediates`` aliases it and TMA reads the input in place (the batch
of ``S`` is one more batch dim of the TMA box walk). The partial products stay in fp32
(translation elides the bf16 round trip), so the result is as accurate as one CTA's sum.
The segmenter then puts the batched matmul in one kernel and the sum with the epilogue in a
second one (a matmul epilogue takes no reduction): the ``[S, M, N]`` fp32 partials go
through global memory.

Guarantees: math unchanged up to fp32 summation order; a matmul left alone has a reason in
the returned list (K not a multiple of ``8 S`` — each part's row must stay 16-byte aligned
for TMA —, operands that are not stored row-major or that TMA cannot load — a row pitch of
no multiple of 16 bytes, unaligned inputs: the parts would be decomposed —, 1-D operands,
an M, N or K of 1 — a decode step's ``[1, K]`` input is no tensor-core matmul —, a batched
B — the parts would be a second batch run —, dtypes wgmma does not take).
"""

from __future__ import annotations

from pyfuse.ir import dtypes, layout_ops
from pyfuse.ir import ops as ir_ops
from pyfuse.ir.exprs import BinaryOpType, Expr, LinearOp, MatmulOp, PermuteOp, ReductionOpType
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.hopper import SM90
from pyfuse.ir.iterdomain import ceil_div
from pyfuse.ir.naming import source_location
from pyfuse.ir.target import HOPPER, TargetInfo
from pyfuse.ir.tensor import TensorView
from pyfuse.passes.matmul_tiles import default_tiles
from pyfuse.passes.skip_intermediates import is_row_major_contiguous

# Elements per part of K that keep every part's start 16-byte aligned for bf16/f16 TMA.
K_ALIGNMENT = SM90.tma_alignment // 2
# The shortest K part the heuristic makes: 16 K tiles of 64, enough to fill the pipeline.
MIN_AUTO_PART = 1024
# The heuristic splits only matmuls whose tiles fill at most 1/AUTO_MAX_SM_FRACTION of the SMs.
AUTO_MAX_SM_FRACTION = 4
SPLIT_DTYPES = (dtypes.bfloat16, dtypes.float16)


def split_k(fusion: Fusion, parts: int | None, target: TargetInfo = HOPPER) -> list[str]:
    """Rewrite every matmul of ``fusion`` that allows it (module docstring) into ``parts``
    parts, or with ``parts=None`` into :func:`auto_parts` of each; returns why the matmuls
    asked for were left alone, one line each (an automatic choice is never reported)."""
    if parts is not None and parts <= 1:
        return []
    skipped = []
    for expr in fusion.exprs():
        if not isinstance(expr, MatmulOp | LinearOp):
            continue
        count = parts if parts is not None else auto_parts(expr, target)
        if count <= 1:
            continue
        reason = _split(fusion, expr, count, target)
        if parts is None:
            continue
        if reason is not None:
            where = f" at {expr.source}" if expr.source else ""
            skipped.append(f"{expr.op_name} T{expr.output.name}{where}: {reason}")
    return skipped


def auto_parts(expr: MatmulOp | LinearOp, target: TargetInfo) -> int:
    """Parts for a matmul left to the heuristic: when its output tiles (at the tile the
    matmul scheduler picks) fill at most a quarter of the SMs, the largest power of two that
    keeps ``tiles * parts`` within the SMs and every part at least ``MIN_AUTO_PART`` long;
    else 1. (On the H200 split-K made a GEMM of 8 tiles and a long K several times faster,
    and slowed one of 56 tiles, where the sum's kernel and the fp32 partials cost more than
    the idle SMs: docs/performance.md, "Matmul run: commit 2cdae1c".)"""
    a, b = (expr.a, expr.b) if isinstance(expr, MatmulOp) else (expr.x, expr.weight)
    if a.dtype not in SPLIT_DTYPES or len(a.shape) < 2 or len(b.shape) < 2:
        return 1
    if _size_one_dims(expr) or _batched_b(expr):
        return 1
    m, k = a.shape[-2], a.shape[-1]
    n = b.shape[-1] if isinstance(expr, MatmulOp) else b.shape[-2]
    batch = expr.output.numel // max(1, m * n)
    tile_m, tile_n = default_tiles(m, n, single_mma=True)
    tiles = ceil_div(m, tile_m) * ceil_div(n, tile_n) * batch
    if tiles * AUTO_MAX_SM_FRACTION > target.sm_count:
        return 1
    parts = 1
    while (
        tiles * parts * 2 <= target.sm_count
        and k // (parts * 2) >= MIN_AUTO_PART
        and k % (parts * 2 * K_ALIGNMENT) == 0
    ):
        parts *= 2
    return parts


def _batched_b(expr: MatmulOp | LinearOp) -> bool:
    """A MatmulOp whose B has batch dims: an A batched alike would hold its batch and the
    parts as two separate runs of memory, an unbatched A makes the batch an N dim of B split
    from N by K. (A batched A against a 2-D B is fine: the batch is part of M.)"""
    return isinstance(expr, MatmulOp) and any(extent > 1 for extent in expr.b.shape[:-2])


def _size_one_dims(expr: MatmulOp | LinearOp) -> list[str]:
    """The dims of M, N and K of extent 1 (broadcast axes): translation leaves such a matmul
    to the multiply-sum decomposition, which a split would only make longer."""
    if isinstance(expr, MatmulOp):
        m, k, n = expr.a.shape[-2], expr.a.shape[-1], expr.b.shape[-1]
    else:
        m, k, n = expr.x.shape[-2], expr.x.shape[-1], expr.weight.shape[-2]
    return [name for name, extent in (("M", m), ("N", n), ("K", k)) if extent == 1]


def _split(fusion: Fusion, expr: MatmulOp | LinearOp, parts: int, target: TargetInfo) -> str | None:
    """Rewrite ``expr`` with ``parts`` parts of K, or say why not."""
    if isinstance(expr, MatmulOp):
        a, b, bias = expr.a, expr.b, None
        b_k_last = False  # b is [..., K, N]
    else:
        a, b, bias = expr.x, expr.weight, expr.bias
        b_k_last = True  # the weight is [N, K]
    if a.dtype not in SPLIT_DTYPES:
        return f"operands are {a.dtype.name}; split-K runs on the bf16/f16 tensor-core path"
    if len(a.shape) < 2 or len(b.shape) < 2:
        return "1-D operands"
    if _batched_b(expr):
        return (
            "B is batched: the K parts would be a batch dim of each operand apart from its "
            "batch (or, against an unbatched A, from N), which the kernel's one batch "
            "coordinate per tile cannot index"
        )
    size_one = _size_one_dims(expr)
    if size_one:
        return (
            f"{' and '.join(size_one)} = 1: the matmul is not one for the tensor cores "
            "(it runs as multiply + sum)"
        )
    k = a.shape[-1]
    if k % (parts * K_ALIGNMENT):
        return f"K = {k} is not a multiple of {parts} parts of {K_ALIGNMENT} elements"
    unloadable = _tma_refusal(a, b, target)
    if unloadable is not None:
        return unloadable
    with fusion, source_location(expr.source):
        a_view = _k_view(a, k_last=True, parts=parts)
        b_view = _k_view(b, k_last=b_k_last, parts=parts)
        if a_view is None or b_view is None:
            which = "A" if a_view is None else "B"
            return (
                f"operand {which} is not stored row-major (nor as the transpose of a row-major "
                "input), so its K cannot be split as a view"
            )
        if b_k_last:  # the weight's view is [S, N, K/S]: put K/S before N, as matmul wants
            b_view = layout_ops.transpose(b_view, -1, -2)
        partial = ir_ops.matmul(a_view, b_view, out_dtype=dtypes.float32)  # no bf16 round
        result = ir_ops.reduce(ReductionOpType.SUM, partial, -3)
        if bias is not None:
            result = ir_ops.binary(BinaryOpType.ADD, result, ir_ops.cast(bias, dtypes.float32))
        result = ir_ops.cast(result, expr.output.dtype)
    fusion.replace_uses(expr.output, result)
    expr.unlink()
    return None


def _tma_refusal(a: TensorView, b: TensorView, target: TargetInfo) -> str | None:
    """Why TMA could not load the operands' stored tensors (the tensor-core path would then
    decompose the parts into multiply + sum, where a split only costs), or None."""
    from pyfuse.passes.matmul_operands import tma_reason  # with the matmul

    if target.vector_bytes < SM90.tma_alignment:
        return (
            f"the inputs' addresses are not {SM90.tma_alignment}-byte aligned: TMA cannot load them"
        )
    for operand in (a, b):
        stored, _ = _stored(operand)
        reason = tma_reason(stored) if stored is not None else None
        if reason is not None:
            return f"TMA cannot load the operands ({reason})"
    return None


def _k_view(operand: TensorView, *, k_last: bool, parts: int) -> TensorView | None:
    """``operand`` ([..., X, K] when ``k_last``, else [..., K, X]) as [..., S, X, K/S] or
    [..., S, K/S, X], made by reshaping its stored row-major tensor; None when it has none."""
    stored, transposed = _stored(operand)
    if stored is None:
        return None
    # K's place in the stored tensor: last when exactly one of (k_last, transposed) holds.
    stored_k_last = k_last != transposed
    *batch, rows, cols = stored.shape
    if stored_k_last:
        k = cols
        view = layout_ops.reshape(stored, [*batch, rows, parts, k // parts])  # [.., X, S, K/S]
        lead = len(batch)
        # -> [.., S, X, K/S] (stored [X, K]) or [.., S, K/S, X] (stored is the transpose).
        order = [lead + 1, lead, lead + 2] if not transposed else [lead + 1, lead + 2, lead]
    else:
        k = rows
        view = layout_ops.reshape(stored, [*batch, parts, k // parts, cols])  # [.., S, K/S, X]
        lead = len(batch)
        order = [lead, lead + 1, lead + 2] if not transposed else [lead, lead + 2, lead + 1]
    perm = [*range(lead), *order]
    if perm == list(range(len(perm))):
        return view
    return layout_ops.permute(view, perm)


def _stored(operand: TensorView) -> tuple[TensorView | None, bool]:
    """(the row-major fusion input ``operand`` reads, whether it is read transposed in its
    last two axes); (None, False) for anything else."""
    source: Expr | None = operand.definition
    transposed = False
    if isinstance(source, PermuteOp):
        rank = len(operand.shape)
        swap = [*range(rank - 2), rank - 1, rank - 2]
        if list(source.perm) != swap:
            return None, False
        operand = source.tensor_inputs[0]
        transposed = True
    if operand.definition is not None or not is_row_major_contiguous(operand):
        return None, False
    return operand, transposed
