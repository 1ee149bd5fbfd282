"""broadcast_first: an input's broadcast moved ahead of the unary op (a weight's cast) that
feeds it, so that the broadcast aliases the input.

Why: ``layer_norm(x, w, b)`` of 16-bit tensors traces ``broadcast(cast(w))``. The reduction
scheduler replays the 1-D cast on ``[S, T, V]`` and its consumer, the broadcast, on ``[BIDx,
S, T, V]``: the positions do not line up, so the cast is inlined nowhere and is computed for
the whole row into a per-thread array before the epilogue (48 registers a tensor at 49152
columns). Where the row's loops are unrolled without guards ptxas shortens those arrays'
lives; in a ragged row of 25,000 or 44,444 columns at 1024 threads (64 registers) it cannot,
and the layer_norm spilled 132 and 296 B. ``cast(broadcast(w))`` instead: the broadcast right
after the input becomes an alias (skip_intermediates), the input's cache has the row's rank,
and the cast is inlined into the epilogue's loop (no spill at either width).

Expects a kernel's fusion before skip_intermediates. Guarantees, in place: each BroadcastOp
whose input is the only use of a UnaryOp or CastOp of a fusion input (that op's output no
fusion output) is replaced by that op of a broadcast of the input; values are unchanged (an
elementwise op commutes with a broadcast). Returns how many were rewritten.
:func:`broadcasts_before_casts`, a fallback plan's rewrite, does the same through views
of the input (metadata ops: broadcasts, permutes, reshapes...), until no broadcast
follows such an op.
"""

from __future__ import annotations

from pyfuse.ir.exprs import BroadcastOp, CastOp, UnaryOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.tensor import TensorView, new_axes_like
from pyfuse.passes.skip_intermediates import is_metadata_op


def candidates(fusion: Fusion, through_broadcasts: bool = False) -> list[BroadcastOp]:
    """The BroadcastOps :func:`broadcast_first` would rewrite (see the module doc); with
    ``through_broadcasts`` also those whose elementwise op reads a view of an input (metadata
    ops of it, ``skip_intermediates.is_metadata_op``: ``broadcast(cast(broadcast(v)))``)."""
    found = []
    for expr in fusion.exprs():
        if not isinstance(expr, BroadcastOp):
            continue
        (applied,) = expr.tensor_inputs
        elementwise = applied.definition
        if (
            isinstance(elementwise, UnaryOp | CastOp)
            and _views_an_input(fusion, elementwise.tensor_inputs[0], through_broadcasts)
            and not fusion.is_output(applied)
            and len(fusion.uses_in_fusion(applied)) == 1
        ):
            found.append(expr)
    return found


def _views_an_input(fusion: Fusion, tv: TensorView, through_broadcasts: bool) -> bool:
    while through_broadcasts and tv.definition is not None and is_metadata_op(tv.definition):
        tv = tv.definition.tensor_inputs[0]
    return fusion.is_input(tv)


def broadcasts_before_casts(fusion: Fusion) -> int:
    """A fallback plan's rewrite (passes/fallback.py): every broadcast of an input's cast
    or unary op, through views of the input too, moved ahead of that op. A reduction
    whose rows merge several axes cannot loop over a computed tensor that has some of them
    and lacks others (``cast(v)`` broadcast to ``[1, K]`` beside ``x[B, M, K]``); moved, the
    op reads a broadcast of the input of the row's full rank. Returns how many."""
    count = 0
    while True:  # a chain of broadcasts moves one step a round
        moved = broadcast_first(fusion, candidates(fusion, through_broadcasts=True))
        if not moved:
            return count
        count += moved


def broadcast_first(fusion: Fusion, broadcasts: list[BroadcastOp] | None = None) -> int:
    """Rewrite ``broadcast(op(input))`` as ``op(broadcast(input))`` (see the module doc), for
    ``broadcasts`` (by default every one of :func:`candidates`); returns how many."""
    chosen = candidates(fusion) if broadcasts is None else broadcasts
    for expr in chosen:
        (applied,) = expr.tensor_inputs
        elementwise = applied.definition
        assert isinstance(elementwise, UnaryOp | CastOp)  # checked by candidates
        (source,) = elementwise.tensor_inputs
        out = expr.output
        with fusion:
            widened = TensorView(new_axes_like(out.no_reductions), source.dtype)
            BroadcastOp(widened, source, expr.is_new)
            result = TensorView(new_axes_like(out.no_reductions), out.dtype)
            if isinstance(elementwise, UnaryOp):
                UnaryOp(elementwise.op, result, widened)
            else:
                CastOp(result, widened)
        assert result.definition is not None
        result.definition.source = elementwise.source
        fusion.replace_uses(out, result)
    return len(chosen)
