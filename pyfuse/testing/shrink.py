"""Greedy shrinking of a failing program.

:func:`shrink` tries smaller variants of a program, in order: fewer outputs, an op replaced
by one of its operands (which drops it), inputs merged (one of the same shape and dtype
stands for another), inputs made row-major, and every extent shrunk (one extent value
replaced everywhere it appears: input shapes and the sizes ``reshape``/``broadcast_to`` name;
strides are kept, which is still a valid layout with more padding). A variant is kept when
``fails`` says it still fails the same way, and the passes repeat until none is kept or the
evaluation budget runs out. Dead ops and unused inputs are dropped after every step, so the
result is the smallest program found, not necessarily the smallest there is.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator

from pyfuse.testing.program import Input, Op, Program, Value

# Ops whose templates name sizes: their literals shrink with the extents.
_SIZED_OPS = ("reshape", "broadcast_to")


def compact(program: Program) -> Program:
    """``program`` without values the outputs do not need, renumbered."""
    needed: set[int] = set()
    for output in program.outputs:
        needed |= program.ancestors(output)
    kept = sorted(needed)
    renumber = {old: new for new, old in enumerate(kept)}
    values: list[Value] = []
    for old in kept:
        value = program.values[old]
        if isinstance(value, Op):
            value = Op(
                value.name, value.template, tuple(renumber[a] for a in value.args), value.flips
            )
        values.append(value)
    outputs = tuple(dict.fromkeys(renumber[o] for o in program.outputs))
    return Program(tuple(values), outputs, program.schedule)


def substitute(program: Program, old: int, new: int) -> Program:
    """Every read of value ``old`` reads ``new`` instead (``new`` comes before ``old``)."""
    values: list[Value] = []
    for value in program.values:
        if isinstance(value, Op) and old in value.args:
            args = tuple(new if a == old else a for a in value.args)
            value = Op(value.name, value.template, args, value.flips)
        values.append(value)
    outputs = tuple(dict.fromkeys(new if o == old else o for o in program.outputs))
    return compact(Program(tuple(values), outputs, program.schedule))


def _fewer_outputs(program: Program) -> Iterator[Program]:
    if len(program.outputs) > 1:
        for output in program.outputs:
            rest = tuple(o for o in program.outputs if o != output)
            yield compact(Program(program.values, rest, program.schedule))


def _drop_ops(program: Program) -> Iterator[Program]:
    # Latest ops first: dropping the op that produces an output shortens most.
    for index in reversed(range(len(program.values))):
        value = program.values[index]
        if isinstance(value, Op):
            for arg in dict.fromkeys(value.args):
                yield substitute(program, index, arg)


def _merge_inputs(program: Program) -> Iterator[Program]:
    inputs = [(i, v) for i, v in enumerate(program.values) if isinstance(v, Input)]
    for later, (j, b) in enumerate(inputs):
        for i, a in inputs[:later]:
            if a.shape == b.shape and a.dtype == b.dtype:
                yield substitute(program, j, i)


def _contiguous_inputs(program: Program) -> Iterator[Program]:
    for index, value in enumerate(program.values):
        if isinstance(value, Input) and value.strides is not None:
            values = list(program.values)
            values[index] = Input(value.shape, value.dtype, None)
            yield Program(tuple(values), program.outputs, program.schedule)


def _replace_extent(program: Program, old: int, new: int) -> Program:
    pattern = re.compile(rf"(?<![\w.]){old}(?![\w.])")
    values: list[Value] = []
    for value in program.values:
        if isinstance(value, Input):
            shape = tuple(new if e == old else e for e in value.shape)
            value = Input(shape, value.dtype, value.strides)
        elif value.name in _SIZED_OPS:
            value = Op(value.name, pattern.sub(str(new), value.template), value.args, value.flips)
        values.append(value)
    return Program(tuple(values), program.outputs, program.schedule)


def _smaller_extents(program: Program) -> Iterator[Program]:
    extents = sorted({e for v in program.inputs for e in v.shape if e > 1}, reverse=True)
    for extent in extents:
        for smaller in dict.fromkeys((1, 2, 3, extent // 2, extent - 1)):
            if 0 < smaller < extent:
                yield _replace_extent(program, extent, smaller)


def _default_schedule(program: Program) -> Iterator[Program]:
    if program.schedule:
        yield Program(program.values, program.outputs)


_PASSES: tuple[Callable[[Program], Iterator[Program]], ...] = (
    _fewer_outputs,
    _drop_ops,
    _merge_inputs,
    _contiguous_inputs,
    _default_schedule,
    _smaller_extents,
)
# Passes whose variants are no smaller by ``size`` but simpler.
_SIMPLER = (_contiguous_inputs, _default_schedule)


def size(program: Program) -> tuple[int, int, int]:
    """What shrinking minimizes: ops, inputs, then elements of the inputs."""
    elements = 0
    for value in program.inputs:
        count = 1
        for extent in value.shape:
            count *= extent
        elements += count
    return (len(program.ops()), len(program.inputs), elements)


def shrink(
    program: Program,
    fails: Callable[[Program], bool],
    *,
    max_evaluations: int = 300,
    max_seconds: float = 120.0,
) -> Program:
    """The smallest variant of ``program`` found for which ``fails`` holds (``program``
    itself must fail). Variants that are not smaller are skipped before evaluation."""
    best = compact(program)
    evaluations = 0
    deadline = time.monotonic() + max_seconds
    improved = True
    while improved:
        improved = False
        for make_variants in _PASSES:
            for candidate in make_variants(best):
                if evaluations >= max_evaluations or time.monotonic() > deadline:
                    return best
                if candidate == best or (
                    size(candidate) >= size(best) and make_variants not in _SIMPLER
                ):
                    continue
                evaluations += 1
                if fails(candidate):
                    best = candidate
                    improved = True
                    break
            if improved:
                break
    return best
