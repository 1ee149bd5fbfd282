"""The split of a matmul epilogue for the epilogue warps (``MatmulParams(epilogue_warps=)``).

In the cooperative kernel the consumer warpgroups run the whole epilogue after each tile's
main loop, and the tensor cores wait for it: for linear + bias + gelu at 128x256, some 2,200
instructions a thread per tile. With epilogue warps the consumers compute the epilogue only
up to one 16-bit tensor, the *handoff* (a linear's result with its bias, rounded to bf16),
write it into a shared tile and start their next main loop; the producer warpgroup's three
idle warps compute the rest from the tile (the gelu) in place and store the output with TMA
(``backend_ptx/matmul_handoff.py``).

Expects a fusion with one MMA (after ``translate_patterns``), whose outputs have their
allocation domains. Guarantees: :func:`handoff_tensor` returns a tensor ``T`` only when

- ``T`` is a bf16 or f16 tensor computed from the MMA result, neither an input nor an
  output;
- the fusion has one output, of ``T``'s dtype, which a TMA store writes exactly
  (:func:`matmul_epilogue.staged_layout`), and which the exprs after ``T`` compute;
- no expr after ``T`` reads the MMA result or a tensor computed on the way to ``T``, other
  than ``T`` itself (so the consumers' part ends with ``T``).

:func:`split_epilogue` then says, per epilogue tensor, which part computes it.
"""

from __future__ import annotations

from pyfuse.ir.exprs import Expr, MmaOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.id_model import IdModel
from pyfuse.ir.tensor import TensorView
from pyfuse.passes.matmul_epilogue import staged_outputs

HANDOFF_ITEMSIZE = 2  # bf16 or f16: a staged row of 64 elements is one 128-byte swizzle row
# The consumer warpgroups epilogue warps can serve: with more, the producer warpgroup's share
# of the registers (88 a thread) no longer fits beside theirs.
MAX_HANDOFF_WARPGROUPS = 2


def epilogue_exprs(fusion: Fusion, mma: MmaOp) -> list[Expr]:
    """The exprs of the epilogue in order: every expr but the MMA and those its operands
    are computed by (their broadcasts and shared-memory caches)."""
    operand_cone = _cone([mma.a, mma.b])
    return [
        expr
        for expr in fusion.exprs()
        if expr is not mma and not any(id(out) in operand_cone for out in expr.outputs)
    ]


def handoff_tensor(
    fusion: Fusion, mma: MmaOp, batch: int, id_model: IdModel | None = None
) -> TensorView | None:
    """The first tensor of the epilogue the consumers can hand over (see the module), or
    None."""
    if len(fusion.outputs) != 1:
        return None
    (out,) = fusion.outputs
    staged = staged_outputs(fusion, mma, batch, id_model)
    if len(staged) != 1 or out.dtype.itemsize != HANDOFF_ITEMSIZE:
        return None
    exprs = epilogue_exprs(fusion, mma)
    for expr in exprs:
        handoff = expr.output
        if handoff.dtype != out.dtype or fusion.is_output(handoff) or handoff.alias_of:
            continue
        early = split_epilogue(exprs, mma, handoff)
        if id(mma.output) not in early:
            continue  # not computed from the MMA result
        late = [e for e in exprs if id(e.output) not in early]
        if not any(e.output is out for e in late):
            continue
        if all(id(tv) not in early or tv is handoff for e in late for tv in e.tensor_inputs):
            return handoff
    return None


def split_epilogue(exprs: list[Expr], mma: MmaOp, handoff: TensorView) -> set[int]:
    """The ids of the tensors the consumers compute on the way to ``handoff``: the MMA
    result and every epilogue tensor ``handoff`` depends on, itself included (the rest of
    ``exprs`` is the epilogue warps')."""
    produced = {id(out) for expr in exprs for out in expr.outputs}
    produced.add(id(mma.output))
    by_output = {id(out): expr for expr in exprs for out in expr.outputs}
    early: set[int] = set()
    stack = [handoff]
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
