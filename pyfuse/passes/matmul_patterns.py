"""What the matmul scheduler learns about each MMA of a fusion: the pattern it came from, its
tensor roles and its dim roles.

:func:`describe_mma` answers for one :class:`MmaOp` from the graph alone, so a scheduler working
on a segment (a clone of part of the fusion) can ask again; :mod:`pyfuse.passes.translate_patterns`
returns the same records, with the kind of pattern each MMA was translated from.

Tensor roles (per MMA):

- ``a`` / ``b``: the MMA's operands, ``[..., M, 1, K]`` and ``[..., 1, N, K]`` for MatmulOp and
  LinearOp (for a multiply-sum, the user's broadcast operands in the user's axis order);
- ``a_inputs`` / ``b_inputs``: the fusion inputs each operand is computed from (what the
  scheduler loads, through any metadata ops that skip_intermediates turns into aliases);
- ``epilogue_inputs``: fusion inputs read by exprs downstream of the MMA other than through an
  MMA result (a bias, a residual); an input may also be an operand input (``x @ w + x``);
- ``outputs``: the fusion outputs that depend on the MMA result.

Dim roles are :meth:`MmaOp.roles` per axis of the MMA output (one source of truth). An output
axis where exactly one operand is broadcast is M (A has it) or N (B has it), so the batch axes of
a LinearOp's ``x`` are M axes, and a broadcast batch axis of a MatmulOp (``[2, 1, M, K] @
[5, K, N]``) is an N axis (A broadcast there) -- exact math: A's tile is reused across it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import field

from pyfuse.ir.exprs import Expr, MmaOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.records import record
from pyfuse.ir.tensor import TensorView


class PatternKind(enum.Enum):
    """The op a matmul pattern was found as."""

    MATMUL = "matmul"  # MatmulOp (torch.matmul)
    LINEAR = "linear"  # LinearOp (x @ w.T + bias)
    MUL_SUM = "mul_sum"  # ReductionOp(sum) over BinaryOp(mul) of two broadcast operands
    MMA = "mma"  # an MmaOp already in the fusion (built by hand or by an earlier pass)


class DimRole(enum.Enum):
    """The role of one MMA output axis; values are :meth:`MmaOp.roles`'s names."""

    BATCH = "batch"
    M = "m"
    N = "n"
    K = "k"


@record(frozen=True)
class MatmulPattern:
    """One MMA with its tensor and dim roles (see the module doc)."""

    kind: PatternKind
    mma: MmaOp
    a_inputs: tuple[TensorView, ...]
    b_inputs: tuple[TensorView, ...]
    epilogue_inputs: tuple[TensorView, ...]
    outputs: tuple[TensorView, ...]
    dim_roles: tuple[DimRole, ...]
    # The user's ``file:line`` of the op the pattern was traced from.
    source: str | None = None

    @property
    def a(self) -> TensorView:
        return self.mma.a

    @property
    def b(self) -> TensorView:
        return self.mma.b

    @property
    def accumulator(self) -> TensorView:
        """The fp32 MMA result ``[..., M, N, rK]``."""
        return self.mma.output


@record(frozen=True)
class UntranslatedPattern:
    """A matmul-shaped op left as it was, and why (for the segmenter's and the user's report)."""

    kind: PatternKind
    expr: Expr
    reason: str


@record
class TranslationResult:
    """What :func:`pyfuse.passes.translate_patterns.translate_patterns` did to a fusion."""

    patterns: list[MatmulPattern] = field(default_factory=list)
    untranslated: list[UntranslatedPattern] = field(default_factory=list)
    # Each replaced tensor -> the tensor that now carries its value: a MatmulOp/LinearOp/sum
    # result -> the fp32 accumulator (or bias add) or the one cast back to its dtype; an elided
    # round-trip cast's output -> the fp32 value.
    replacements: dict[TensorView, TensorView] = field(default_factory=dict)


# ---- graph walks --------------------------------------------------------------------------------


class _LiveGraph:
    """The exprs the fusion's outputs depend on, with live uses per value."""

    def __init__(self, fusion: Fusion) -> None:
        self.fusion = fusion
        self.exprs = fusion.exprs()
        self._live = {id(expr) for expr in self.exprs}

    def uses(self, tv: TensorView) -> list[Expr]:
        return [use for use in tv.uses if id(use) in self._live]

    def upstream_inputs(self, roots: Iterable[TensorView]) -> tuple[TensorView, ...]:
        """Fusion inputs that ``roots`` are computed from (a root that is an input counts)."""
        found: set[int] = set()
        stack = list(roots)
        seen: set[int] = set()
        while stack:
            tv = stack.pop()
            if id(tv) in seen:
                continue
            seen.add(id(tv))
            if self.fusion.is_input(tv):
                found.add(id(tv))
            if tv.definition is not None:
                stack.extend(tv.definition.tensor_inputs)
        return tuple(inp for inp in self.fusion.inputs if id(inp) in found)

    def downstream_tensors(self, root: TensorView) -> list[TensorView]:
        """``root`` and every tensor computed from it, in topological order."""
        reached = {id(root)}
        order = [root]
        for expr in self.exprs:
            if any(id(inp) in reached for inp in expr.tensor_inputs):
                out = expr.output
                if id(out) not in reached:
                    reached.add(id(out))
                    order.append(out)
        return order


def describe_mma(fusion: Fusion, mma: MmaOp, kind: PatternKind = PatternKind.MMA) -> MatmulPattern:
    """The tensor and dim roles of ``mma`` in ``fusion`` (see the module doc)."""
    graph = _LiveGraph(fusion)
    return _describe(graph, mma, kind, _mma_results(graph))


def describe_all(fusion: Fusion) -> list[MatmulPattern]:
    """A :class:`MatmulPattern` (kind MMA) for every live MmaOp, in topological order."""
    graph = _LiveGraph(fusion)
    results = _mma_results(graph)
    return [
        _describe(graph, expr, PatternKind.MMA, results)
        for expr in graph.exprs
        if isinstance(expr, MmaOp)
    ]


def _mma_results(graph: _LiveGraph) -> set[int]:
    """Ids of every tensor computed from some MMA result (the results included)."""
    reached: set[int] = set()
    for expr in graph.exprs:
        if isinstance(expr, MmaOp):
            reached.update(id(tv) for tv in graph.downstream_tensors(expr.output))
    return reached


def _describe(
    graph: _LiveGraph, mma: MmaOp, kind: PatternKind, mma_results: set[int]
) -> MatmulPattern:
    downstream = graph.downstream_tensors(mma.output)
    downstream_ids = {id(tv) for tv in downstream}
    epilogue_sources: list[TensorView] = []
    for tv in downstream:
        for use in graph.uses(tv):
            epilogue_sources.extend(
                inp
                for inp in use.tensor_inputs
                if id(inp) not in downstream_ids and id(inp) not in mma_results
            )
    outputs = tuple(out for out in graph.fusion.outputs if id(out) in downstream_ids)
    return MatmulPattern(
        kind=kind,
        mma=mma,
        a_inputs=graph.upstream_inputs([mma.a]),
        b_inputs=graph.upstream_inputs([mma.b]),
        epilogue_inputs=graph.upstream_inputs(epilogue_sources),
        outputs=outputs,
        dim_roles=tuple(DimRole(role) for role in mma.roles()),
        source=mma.source,
    )
