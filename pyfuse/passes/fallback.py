"""Fallback plans: what the pipeline tries when a kernel's first plan fails.

A segment a scheduler accepted can still fail later: its schedule breaks an invariant the
validator checks, the lowering or the emitter meets a shape it cannot handle, a TMA box
cannot be made. A valid fusion must still run, so the pipeline tries, in order, the plans
of :data:`ATTEMPTS` that apply to the kernel, each on a fresh copy of its segment:

1. the scheduler's own choice;
2. the same, with every broadcast of an input's cast moved ahead of the cast (through
   broadcasts of the input: ``broadcast_first.broadcasts_before_casts``), so that no
   computed tensor covers part of a reduction's merged rows (a bf16 ``x[B, M, K] @ v[K]``);
3. the same scheduler with one element per access (no vectors: nothing assumes alignment
   or divisibility of the innermost extent);
4. no aliases: metadata ops after inputs are computed, not read in place (their
   allocation domains are what lowering indexes through);
5. both;
6. for a matmul kernel the user gave ``MatmulParams``: the heuristic's params instead (a
   config the kernel cannot take, such as 128x192 tiles over an N-major B operand, then
   still runs on the tensor cores);
7. for a matmul kernel: its MMAs as multiply + sum in fp32 (the reduction path, which
   needs neither TMA nor wgmma), without vectors or aliases.

When every plan fails, the pipeline cuts the segment into one kernel per expr
(:func:`pyfuse.passes.segment.cut`) and starts over; a segment of one expr whose plans all
fail raises the first plan's error. The plan taken records on ``KernelPlan.fallback``
which plans failed and why, and ``params["fallback"]`` names it (``Kernel.params`` shows it).

Expects a segment fresh from :func:`pyfuse.passes.segment.replan`. Guarantees: every plan
computes the segment's values (only the schedule or, for 6 and 7, the matmul's accumulation
order changes).
"""

from __future__ import annotations

from pyfuse.ir.exprs import MmaOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.records import record
from pyfuse.passes.decompose_matmul import mma_to_multiply_sum


@record(frozen=True)
class Attempt:
    """One plan for a kernel: what the scheduler may use."""

    name: str
    alias_inputs: bool = True
    vectorize: bool = True
    tensor_cores: bool = True
    user_params: bool = True  # the user's MatmulParams (else the heuristic's)
    # Broadcasts of inputs moved ahead of their casts (broadcast_first.broadcasts_before_casts)
    broadcasts_first: bool = False


ATTEMPTS = (
    Attempt("default"),
    Attempt("broadcasts before casts", broadcasts_first=True),
    Attempt("no vectors", vectorize=False),
    Attempt("no aliases", alias_inputs=False),
    Attempt("no aliases or vectors", alias_inputs=False, vectorize=False),
    Attempt("heuristic matmul", user_params=False),
    Attempt("multiply+sum", alias_inputs=False, vectorize=False, tensor_cores=False),
)


def attempts_for(has_mma: bool, user_params: bool = False) -> list[Attempt]:
    """The plans that apply to a kernel with (or without) MMAs and (with ``user_params``)
    the user's MatmulParams, first plan first."""
    if has_mma:
        # A matmul kernel's schedule has no vector or alias switch: its fallbacks are the
        # heuristic's params (where the user gave some) and the reduction path.
        heuristic = [ATTEMPTS[-2]] if user_params else []
        return [ATTEMPTS[0], *heuristic, ATTEMPTS[-1]]
    return [a for a in ATTEMPTS if a.tensor_cores and a.user_params]


def mmas_to_multiply_sum(fusion: Fusion) -> int:
    """Rewrite every MmaOp of ``fusion`` in place as multiply + sum in fp32; returns how many
    were rewritten."""
    mmas = [expr for expr in fusion.exprs() if isinstance(expr, MmaOp)]
    for expr in mmas:
        mma_to_multiply_sum(fusion, expr)
    return len(mmas)


def failure_summary(error: BaseException) -> str:
    """The first line of an error, for the record of failed plans."""
    text = str(error).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(error).__name__}: {first}"
