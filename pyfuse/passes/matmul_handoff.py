"""The split of a matmul epilogue for the epilogue warps (``MatmulParams(epilogue_warps=)``).

In the cooperative kernel the consumer warpgroups run the whole epilogue after each tile's
main loop, and the tensor cores wait for it: for linear + bias + gelu at 128x256, some 2,200
instructions a thread per tile. With epilogue warps the consumers compute the epilogue only
up to one 16-bit tensor per MMA, the *handoffs* (a linear's result with its bias, rounded to
bf16; the two products of a gate/up pair), write them into shared tiles and start their next
main loop; the producer warpgroup's three idle warps compute the rest from the tiles (the
gelu; silu(gate) * up) and store the output over the first with TMA
(``backend_ptx/matmul_handoff.py``).

Expects a fusion with MMAs (after ``translate_patterns``), whose outputs have their
allocation domains. Guarantees: :func:`handoff_tensors` returns tensors ``T_i``, one per
MMA, only when

- each ``T_i`` is a bf16 or f16 tensor computed from its MMA's result and no other's,
  neither an input nor an output;
- the fusion has one output, of the ``T_i``'s dtype, which a TMA store writes exactly
  (:func:`matmul_epilogue.staged_layout`), and which the exprs after them compute;
- no expr after them reads an MMA result or a tensor computed on the way to a ``T_i``,
  other than the ``T_i`` themselves (so the consumers' part ends with them).

:func:`split_epilogue` then says, per epilogue tensor, which part computes it.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyfuse.ir.exprs import Expr, MmaOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.id_model import IdModel
from pyfuse.ir.tensor import TensorView
from pyfuse.passes.matmul_epilogue import staged_outputs

HANDOFF_ITEMSIZE = 2  # bf16 or f16: a staged row of 64 elements is one 128-byte swizzle row
# The consumer warpgroups epilogue warps can serve: with more, the producer warpgroup's share
# of the registers (pyfuse.ir.target.EPILOGUE_REGISTERS a thread) no longer fits beside theirs.
MAX_HANDOFF_WARPGROUPS = 2


def epilogue_exprs(fusion: Fusion, mmas: Sequence[MmaOp]) -> list[Expr]:
    """The exprs of the epilogue in order: every expr but the MMAs and those their operands
    are computed by (their broadcasts and shared-memory caches)."""
    operand_cone = _cone([operand for mma in mmas for operand in (mma.a, mma.b)])
    skipped = {id(mma) for mma in mmas}
    return [
        expr
        for expr in fusion.exprs()
        if id(expr) not in skipped and not any(id(out) in operand_cone for out in expr.outputs)
    ]


def handoff_tensors(
    fusion: Fusion, mmas: Sequence[MmaOp], batch: int, id_model: IdModel | None = None
) -> list[TensorView] | None:
    """The tensors the consumers can hand over, one per MMA (see the module), or None. Each
    is the first 16-bit tensor of the epilogue computed from its MMA's result and no other's
    (a linear's rounded result; each of a gate/up pair's two products)."""
    if len(fusion.outputs) != 1 or not mmas:
        return None
    (out,) = fusion.outputs
    staged = staged_outputs(fusion, mmas[0], batch, id_model)
    if len(staged) != 1 or out.dtype.itemsize != HANDOFF_ITEMSIZE:
        return None
    exprs = epilogue_exprs(fusion, mmas)
    handoffs: list[TensorView] = []
    for mma in mmas:
        others = {id(other.output) for other in mmas if other is not mma}
        for expr in exprs:
            handoff = expr.output
            if handoff.dtype != out.dtype or fusion.is_output(handoff) or handoff.alias_of:
                continue
            early = split_epilogue(exprs, mmas, [handoff])
            if id(mma.output) in early and not early & others:
                handoffs.append(handoff)
                break
        else:
            return None  # this MMA's result reaches the output in no 16-bit tensor of its own
    early = split_epilogue(exprs, mmas, handoffs)
    late = [e for e in exprs if id(e.output) not in early]
    if not any(e.output is out for e in late):
        return None
    handed = {id(tv) for tv in handoffs}
    if any(id(tv) in early and id(tv) not in handed for e in late for tv in e.tensor_inputs):
        return None  # the rest reads more of the consumers' part than the handoffs
    return handoffs


def split_epilogue(
    exprs: list[Expr], mmas: Sequence[MmaOp], handoffs: Sequence[TensorView]
) -> set[int]:
    """The ids of the tensors the consumers compute on the way to ``handoffs``: the MMA
    results and every epilogue tensor a handoff depends on, the handoffs included (the rest
    of ``exprs`` is the epilogue warps')."""
    produced = {id(out) for expr in exprs for out in expr.outputs}
    produced.update(id(mma.output) for mma in mmas)
    by_output = {id(out): expr for expr in exprs for out in expr.outputs}
    early: set[int] = set()
    stack = list(handoffs)
    while stack:
        tv = stack.pop()
        if id(tv) in early or id(tv) not in produced:
            continue
        early.add(id(tv))
        definition = by_output.get(id(tv))
        if definition is not None:
            stack.extend(definition.tensor_inputs)
    return early


def _cone(tensors: list[TensorView]) -> set[int]:
    """Ids of ``tensors`` and every tensor they are computed from."""
    seen: set[int] = set()
    stack = list(tensors)
    while stack:
        tv = stack.pop()
        if id(tv) in seen:
            continue
        seen.add(id(tv))
        if tv.definition is not None:
            stack.extend(tv.definition.tensor_inputs)
    return seen
