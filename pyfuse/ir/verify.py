"""A cheap structural verifier for a Fusion, run at the pipeline's boundaries.

It checks what every pass relies on and no pass should break: each expr's tensor
inputs are fusion inputs or produced earlier, each output's definition is the expr
that lists it, fusion inputs have no definition, inputs and outputs live in global
memory, every loop axis is reached from the logical (or root) domain through the
tensor's transforms and appears once, and inline positions lie within the loop
domain. A failure is a bug in a pass: it raises :class:`ScheduleError` naming the
pass, the tensor and the broken rule.
"""

from __future__ import annotations

from pyfuse.errors import ScheduleError
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.iterdomain import IterDomain
from pyfuse.ir.tensor import MemoryType, TensorView


def _fail(after: str, message: str) -> None:
    raise ScheduleError(f"IR verifier after {after}: {message}")


def _reachable(tv: TensorView) -> set[int]:
    """Ids of every IterDomain derived from ``tv``'s root or logical domain."""
    seen: set[int] = set()
    frontier: list[IterDomain] = [*tv.maybe_root, *tv.logical]
    while frontier:
        axis = frontier.pop()
        if id(axis) in seen:
            continue
        seen.add(id(axis))
        for use in axis.uses:
            frontier.extend(use.outputs)
    return seen


def verify_fusion(fusion: Fusion, *, after: str) -> None:
    produced = {id(tv) for tv in fusion.inputs}
    for tv in fusion.inputs:
        if tv.definition is not None:
            _fail(after, f"input T{tv.name} has a definition")
        if tv.memory_type != MemoryType.GLOBAL:
            _fail(after, f"input T{tv.name} is not in global memory")
    for expr in fusion.exprs():
        for tv in expr.tensor_inputs:
            if id(tv) not in produced:
                _fail(after, f"T{tv.name} is read by {expr.op_name} before it is produced")
        for out in expr.outputs:
            if out.definition is not expr:
                _fail(after, f"the definition of an output of {expr.op_name} is another expr")
            produced.add(id(out))
    for tv in fusion.outputs:
        if tv.memory_type != MemoryType.GLOBAL:
            _fail(after, f"output T{tv.name} is not in global memory")
    for tv in fusion.tensors():
        reachable = _reachable(tv)
        loop_ids = [id(axis) for axis in tv.loop]
        if len(set(loop_ids)) != len(loop_ids):
            _fail(after, f"T{tv.name} repeats a loop axis: {tv.domain_str()}")
        for axis in tv.loop:
            if id(axis) not in reachable:
                _fail(
                    after, f"T{tv.name}'s loop axis {axis} is not derived from its logical domain"
                )
        if not 0 <= tv.inline_position <= len(tv.loop):
            _fail(after, f"T{tv.name} has inline position {tv.inline_position} outside its loop")
