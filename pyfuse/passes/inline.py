"""Inlining: choose each tensor's inline (compute-at) position from the IdModel.

Expects a scheduled kernel fusion: loop domains replayed so that positions line up.
Guarantees: every tensor that is neither a fusion input nor a fusion output gets the
largest inline position its consumers allow (maximal inlining), where

- position ``i`` is allowed when the tensor's loop axis ``i`` maps (PERMISSIVE) to
  axis ``i`` of every consumer, stopping at the tensor's own reduction axes (the loop
  must close before the value is complete) and at vectorized or bulk axes;
- a tensor read by several consumers stops at the first position where a consumer
  has a reduction axis: the value must outlive that reduction loop (a persistent
  buffer, e.g. the row that softmax reads before and after its max and sum);
- inputs and outputs stay at position 0: they live in global memory.

The LOOP relation of an IdModel built after this pass follows these positions.
"""

from __future__ import annotations

from pyfuse.ir.fusion import Fusion
from pyfuse.ir.id_model import IdModel
from pyfuse.ir.tensor import MemoryType, TensorView


def inline_position(tv: TensorView, consumers: list[TensorView], id_model: IdModel) -> int:
    position = id_model.max_inline_position(tv)
    if len(consumers) > 1:
        for consumer in consumers:
            for index, axis in enumerate(consumer.loop[:position]):
                if axis.is_reduction:
                    position = min(position, index)
                    break
    return position


def inline_most(fusion: Fusion) -> None:
    """Set the inline position of every intermediate tensor of ``fusion`` in place."""
    id_model = IdModel(fusion)
    for tv in fusion.tensors():
        if fusion.is_input(tv) or fusion.is_output(tv) or tv.memory_type == MemoryType.GLOBAL:
            tv.inline_position = 0
            continue
        consumers = id_model.consumers_of(tv)
        if not consumers:
            continue
        tv.inline_at(inline_position(tv, consumers, id_model))
