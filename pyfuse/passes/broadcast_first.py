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
"""

from __future__ import annotations

from pyfuse.ir.exprs import BroadcastOp, CastOp, UnaryOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.tensor import TensorView, new_axes_like


def candidates(fusion: Fusion) -> list[BroadcastOp]:
    """The BroadcastOps :func:`broadcast_first` would rewrite (see the module doc)."""
    found = []
    for expr in fusion.exprs():
        if not isinstance(expr, BroadcastOp):
            continue
        (applied,) = expr.tensor_inputs
        elementwise = applied.definition
        if (
            isinstance(elementwise, UnaryOp | CastOp)
            and fusion.is_input(elementwise.tensor_inputs[0])
            and not fusion.is_output(applied)
            and len(fusion.uses_in_fusion(applied)) == 1
        ):
            found.append(expr)
    return found


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
