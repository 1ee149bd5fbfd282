"""The fuzzer's layout op families (:mod:`pyfuse.testing.generate` draws from them): reshapes
and views (with -1 and flattening), indexing and slicing, joining (cat, stack), the layout
ops (permute, transpose, ``.T``, broadcast_to and expand, unsqueeze, squeeze), and one input
read along two axes (``x + x.T``, ``unsqueeze(v, 1) * v``). Each takes the program's
:class:`~pyfuse.testing.builder.Builder` and returns the new value's index, or None when it
could not draw a valid op (the caller rolls back and redraws).
"""

from __future__ import annotations

import math

from pyfuse.testing.builder import RAGGED, Builder


def _tuple(values: list[int]) -> str:
    """A tuple literal: ``(3,)`` or ``(3, -1)``."""
    return f"({values[0]},)" if len(values) == 1 else "(" + ", ".join(map(str, values)) + ")"


def reshape(b: Builder) -> int | None:
    x = b.choose()
    if x is None:
        return None
    shape = list(b.shape_of(x))
    numel = math.prod(shape)
    roll = b.rng.random()
    if roll < 0.25 or len(shape) < 2:
        target = [-1] if numel or b.chance(0.5) else [0]
        if shape and roll > 0.15 and numel:
            target = [numel]
    elif roll < 0.5:
        axis = int(b.rng.integers(0, len(shape) - 1))
        target = [*shape[:axis], shape[axis] * shape[axis + 1], *shape[axis + 2 :]]
    elif roll < 0.75:
        axis = int(b.rng.integers(0, len(shape)))
        factors = [f for f in range(2, shape[axis]) if shape[axis] % f == 0]
        if not factors:
            target = [*shape[:axis], 1, *shape[axis:]]
        else:
            factor = int(b.rng.choice(factors))
            target = [*shape[:axis], factor, shape[axis] // factor, *shape[axis + 1 :]]
    else:
        target = [shape[0], -1] if shape[0] else [0, *shape[1:]]
    if -1 not in target and numel and b.chance(0.3):
        target[int(b.rng.integers(len(target)))] = -1
    text = ", ".join(str(extent) for extent in target)
    roll = b.rng.random()
    if roll < 0.4:
        return b.op("reshape", f"pf.reshape({{0}}, {_tuple(target)})", [x])
    if roll < 0.7:
        return b.op("reshape", f"{{0}}.reshape({text})", [x])
    return b.op("reshape", f"{{0}}.view({text})", [x])


def _index_item(b: Builder, extent: int) -> str:
    """One item of a basic index for an axis of ``extent``: a slice (bounds past the ends,
    negative bounds, steps) or an int (negative from the end)."""
    roll = b.rng.random()
    if roll < 0.2 and extent:
        return str(int(b.rng.integers(-extent, extent)))
    if roll < 0.3:
        return ":"
    start = int(b.rng.integers(-extent - 1, extent + 2)) if b.chance(0.7) else None
    stop = int(b.rng.integers(-extent - 1, extent + 2)) if b.chance(0.6) else None
    step = int(b.rng.choice([2, 3, 5])) if b.chance(0.3) else None
    text = f"{'' if start is None else start}:{'' if stop is None else stop}"
    return text + (f":{step}" if step is not None else "")


def slicing(b: Builder) -> int | None:
    """``x[...]``: slices, ints, None and ``...`` of inputs (views read in place) and of
    computed values (a kernel boundary)."""
    x = b.choose()
    if x is None:
        return None
    shape = b.shape_of(x)
    if not shape:
        return b.op("getitem", "{0}[None]" if b.chance(0.5) else "{0}[...]", [x])
    count = int(b.rng.integers(1, len(shape) + 1))
    items = [_index_item(b, extent) for extent in shape[:count]]
    if b.chance(0.3):
        items.insert(int(b.rng.integers(len(items) + 1)), "None")
    if count < len(shape) and b.chance(0.3):
        items = ["...", *[_index_item(b, extent) for extent in shape[len(shape) - count :]]]
    return b.op("getitem", f"{{0}}[{', '.join(items)}]", [x])


def joining(b: Builder) -> int | None:
    """``pf.cat`` and ``pf.stack`` of two or three values (inputs, their views, computed ones;
    one value twice; mixed dtypes), or a piece made to fit: a slice of a partner, a fresh input
    of the right shape."""
    x = b.choose(lambda i: len(b.shape_of(i)) >= 1)
    if x is None:
        return None
    shape = b.shape_of(x)
    rank = len(shape)
    stacking = b.chance(0.3)
    dim = int(b.rng.integers(-rank, rank + (1 if stacking else 0)))
    axis = dim % (rank + (1 if stacking else 0))
    pieces = [x]
    for _ in range(int(b.rng.choice([1, 1, 2]))):
        fits = [
            i
            for i in range(len(b.values))
            if len(b.shape_of(i)) == rank
            and all(
                e == f or (d == axis and not stacking)
                for d, (e, f) in enumerate(zip(b.shape_of(i), shape, strict=True))
            )
        ]
        if fits and b.chance(0.7):
            pieces.append(int(b.rng.choice(fits)))
        else:
            piece_shape = list(shape)
            if not stacking:
                piece_shape[axis] = int(b.rng.choice([0, 1, 3, shape[axis] or 1]))
            pieces.append(b.new_input(tuple(piece_shape)))
    names = ", ".join(f"{{{i}}}" for i in range(len(pieces)))
    op = "stack" if stacking else "cat"
    brackets = ("(", ")") if b.chance(0.3) else ("[", "]")
    return b.op(op, f"pf.{op}({brackets[0]}{names}{brackets[1]}, {dim})", pieces)


def layout_op(b: Builder) -> int | None:
    """permute, transpose, .T, unsqueeze, squeeze, broadcast_to / expand."""
    x = b.choose()
    if x is None:
        return None
    shape = b.shape_of(x)
    rank = len(shape)
    roll = b.rng.random()
    if roll < 0.3 and rank >= 2:
        if b.chance(0.3):
            return b.op("transpose", "{0}.T", [x])
        if b.chance(0.5):
            a, c = (int(d) for d in b.rng.choice(rank, 2, replace=False))
            return b.op("transpose", f"pf.transpose({{0}}, {a}, {c - rank})", [x])
        order = ", ".join(str(int(d)) for d in b.rng.permutation(rank))
        return b.op("permute", f"pf.permute({{0}}, ({order}))", [x])
    if roll < 0.5:
        dim = int(b.rng.integers(-rank - 1, rank + 1))
        return b.op("unsqueeze", f"pf.unsqueeze({{0}}, {dim})", [x])
    if roll < 0.65:
        ones = [axis for axis, extent in enumerate(shape) if extent == 1]
        if ones and b.chance(0.6):
            return b.op("squeeze", f"pf.squeeze({{0}}, {int(b.rng.choice(ones))})", [x])
        return b.op("squeeze", "pf.squeeze({0})", [x])
    target = [int(b.rng.choice((*RAGGED[:6], 8, 16))) if e == 1 else e for e in shape]
    if b.chance(0.4):
        target.insert(0, int(b.rng.choice([2, 3, 5, 8])))
    if target == list(shape):
        target.insert(0, 3)
    if b.chance(0.4):
        kept = [
            -1 if e == s else e for e, s in zip(target[-rank:] if rank else [], shape, strict=True)
        ]
        text = ", ".join(str(e) for e in target[: len(target) - rank] + kept)
        return b.op("broadcast_to", f"{{0}}.expand({text})", [x])
    return b.op("broadcast_to", f"pf.broadcast_to({{0}}, {_tuple(target)})", [x])


def two_axes(b: Builder) -> int | None:
    """One tensor read along two axes: ``x + x.T``, ``unsqueeze(v, 1) * v``."""
    if b.chance(0.5):
        x = b.choose(lambda i: len(b.shape_of(i)) == 2 and b.shape_of(i)[0] == b.shape_of(i)[1])
        if x is None or b.chance(0.3):
            n = int(b.rng.choice([1, 3, 7, 8, 16, 33, 64, 100]))
            x = b.new_input((n, n))
        template = b.pick(("({0} + {0}.T)", "({0} * pf.transpose({0}, 0, 1))", "({0}.T - {0})"))
        return b.op("two_axes", template, [x])
    v = b.choose(lambda i: len(b.shape_of(i)) == 1)
    if v is None or b.chance(0.3):
        v = b.new_input((int(b.rng.choice([1, 5, 13, 64, 100])),))
    template = b.pick(
        (
            "(pf.unsqueeze({0}, 1) * {0})",
            "({0} - pf.unsqueeze({0}, -1))",
            "({0}.unsqueeze(0) + {0}.unsqueeze(1))",
        )
    )
    return b.op("two_axes", template, [v])
