"""Rows too wide for registers, normalized in one kernel that reads the row again.

A normalization (softmax, log_softmax, layer_norm) reads its row before a reduction and
after it. Where the row fits, the reduction scheduler keeps it in registers across the
reduction (a persistent row). Past that budget (a vocabulary of 50,257 or 128,256 columns)
it used to be cut into one kernel per reduction plus one for the outputs, each reading the
row from DRAM again (:mod:`segment_recompute`): a log_softmax read its input three times.
Where rows are many enough to fill the GPU one block per row (``schedule_reduction.
REREAD_MIN_ROWS_PER_SM``), the scheduler takes this plan instead.

Here the kernel stays one block per row and runs one streaming loop nest over the row per
*root*: each reduction, and each output. A nest reads the row from global memory again;
the block read the same row a moment before, so later reads mostly hit L2, and DRAM sees
the row about once.

Expects the math IR of a kernel the reduction scheduler takes as an inner normalization
(before any cache is inserted). Guarantees, from :func:`split_nests`:

- every tensor two nests read, other than global sources and reduction results (one value
  per row, which outlives its nest anyway), is computed by each nest from the sources:
  the first nest to need it (outputs first) keeps the original, the others clones of its
  exprs;
- every global source (an input, or an alias that views one) gets one local cache per nest
  that reads it, and each output one cache before it (as
  ``scheduler_utils.cache_inputs_and_outputs`` does for a single nest);

so no row-sized tensor is read by two loop nests, and the inline pass gives each nest its
own streaming loop. :func:`nest_cones` lists what each nest's arrays hold (for register
budgets); :func:`reason_not_split` says why a fusion cannot be split so, or None: an expr
this pass does not clone (a transpose of the input among them: its rows run across
memory), or a tensor computed along the row before its broadcast (an ``arange`` mask),
which a nest would compute whole into one thread's array. Where a view that was expected
to become an alias did not (a fallback plan without aliases), :func:`split_nests` raises
ValueError and the next plan runs.
"""

from __future__ import annotations

import copy

from pyfuse.ir.caching import cache_after, cache_before
from pyfuse.ir.exprs import (
    BinaryOp,
    BroadcastOp,
    CastOp,
    ExpandOp,
    Expr,
    FullOp,
    IotaOp,
    LoadStoreKind,
    LoadStoreOp,
    ReductionOp,
    ReshapeOp,
    SliceOp,
    SqueezeOp,
    TernaryOp,
    UnaryOp,
)
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.tensor import MemoryType, TensorView, Val, new_axes_like
from pyfuse.passes.scheduler_utils import global_sources
from pyfuse.passes.skip_intermediates import reads_in_place

# Exprs whose output is a function of its inputs' elements at the same (or a broadcast)
# index: a clone with fresh output axes computes the same tensor.
_CLONED = (UnaryOp, BinaryOp, TernaryOp, CastOp, BroadcastOp, ExpandOp, FullOp, IotaOp)


def _is_source(tv: TensorView, fusion: Fusion) -> bool:
    return tv.definition is None or fusion.is_input(tv) or tv.alias_of is not None


def _clonable(expr: Expr) -> bool:
    if isinstance(expr, LoadStoreOp):
        return expr.kind == LoadStoreKind.SET and expr.output.root is None
    return isinstance(expr, _CLONED) and expr.output.root is None


def _roots(fusion: Fusion) -> list[Expr]:
    """The exprs that close a loop nest of their own: every fusion output's definition in
    topological order (first, so that an output keeps the original tensors and its readers
    take clones; a producer before its consumers, so that no nest claims another output's
    expr), then every reduction."""
    exprs = fusion.exprs()
    order = {id(expr): index for index, expr in enumerate(exprs)}
    reductions = [e for e in exprs if isinstance(e, ReductionOp)]
    outputs: dict[int, Expr] = {}
    for tv in fusion.outputs:
        definition = tv.definition
        if _is_source(tv, fusion) or definition is None or isinstance(definition, ReductionOp):
            continue
        outputs[id(definition)] = definition
    return sorted(outputs.values(), key=lambda e: order[id(e)]) + reductions


def _cone(root: Expr, fusion: Fusion) -> list[TensorView]:
    """The tensors ``root``'s loop nest computes or reads: its inputs and what they are
    computed from, back to the global sources and reduction results."""
    found: dict[int, TensorView] = {}
    frontier = list(root.tensor_inputs)
    while frontier:
        tv = frontier.pop()
        if id(tv) in found:
            continue
        found[id(tv)] = tv
        definition = tv.definition
        if not _is_source(tv, fusion) and not isinstance(definition, ReductionOp):
            assert definition is not None  # not a source
            frontier.extend(definition.tensor_inputs)
    return list(found.values())


def _per_row(fusion: Fusion) -> set[int]:
    """Ids of the tensors holding one value per row: reduction results and what is computed
    from them alone (their broadcasts, ``rsqrt(var + eps)``). Sources and constants count as
    rows (an overcount where a source is per-row, as a ``[rows, 1]`` scale is)."""
    found: set[int] = set()
    for expr in fusion.exprs():
        inputs = expr.tensor_inputs
        if isinstance(expr, ReductionOp) or (inputs and all(id(tv) in found for tv in inputs)):
            found.update(id(out) for out in expr.outputs)
    return found


def nest_cones(fusion: Fusion) -> list[list[TensorView]]:
    """Per loop nest of the split kernel, the tensors it holds in arrays along the row
    (:func:`_cone` and a root output, less the values of one element per row)."""
    per_row = _per_row(fusion)
    cones = []
    for root in _roots(fusion):
        cone = _cone(root, fusion)
        if not isinstance(root, ReductionOp):
            cone.append(root.output)
        cones.append([tv for tv in cone if id(tv) not in per_row])
    return cones


def reason_not_split(fusion: Fusion) -> str | None:
    """Why :func:`split_nests` cannot take ``fusion``, or None: an expr it does not clone, or
    a tensor computed along the row before a broadcast that ``prepare`` (broadcast_first)
    cannot move ahead of it (a mask from ``arange``): replayed on the row's loops it would be
    computed for the whole row into one thread's array."""
    per_row = _per_row(fusion)
    for expr in fusion.exprs():
        if isinstance(expr, BroadcastOp) and not _broadcast_streams(expr, fusion, per_row):
            return f"T{expr.tensor_inputs[0].name} is computed along the row before its broadcast"
        if isinstance(expr, ReductionOp) or _clonable(expr):
            continue
        if expr.output.alias_of is not None or _views_an_input(expr, fusion):
            continue  # a view read in place: a global source of every nest
        return f"T{expr.output.name} ({expr.op_name}) cannot be computed again by another nest"
    return None


def _broadcast_streams(broadcast: BroadcastOp, fusion: Fusion, per_row: set[int]) -> bool:
    """The broadcast's input is a source, one value per row, or a chain of single-use unary
    ops and casts of an input (which broadcast_first moves after the broadcast)."""
    (tv,) = broadcast.tensor_inputs
    if id(tv) in per_row:
        return True
    while not _is_source(tv, fusion):
        definition = tv.definition
        chain = isinstance(definition, UnaryOp | CastOp) and not fusion.is_output(tv)
        if not chain or len(fusion.uses_in_fusion(tv)) != 1:
            return False
        assert definition is not None
        (tv,) = definition.tensor_inputs
    return fusion.is_input(tv) or tv.alias_of is not None


def _views_an_input(expr: Expr, fusion: Fusion) -> bool:
    """A view of an input, and no output, that skip_intermediates aliases before the kernel
    is scheduled (its ``reads_in_place``), keeping the input's memory order (a row contiguous
    in the input stays so): slices and squeezes, and a reshape right after a row-major input
    (``logits.view(-1, vocab)``). A transpose is not taken: its rows may run across memory,
    where one block per row would read them a strided element at a time (column reductions
    read them coalesced)."""
    if fusion.is_output(expr.output) or not isinstance(expr, SliceOp | SqueezeOp | ReshapeOp):
        return False
    if isinstance(expr, ReshapeOp) and not fusion.is_input(expr.tensor_inputs[0]):
        return False  # a reshape of a view: rows laid out as that view's, not row-major
    return reads_in_place(fusion, expr)


def _clone_expr(expr: Expr, inputs: list[Val]) -> TensorView:
    """A copy of ``expr`` (same op and attributes) reading ``inputs`` into a fresh tensor."""
    if not _clonable(expr):
        # A view skip_intermediates did not alias (a fallback plan without aliases): the
        # plan fails here and the next one runs.
        raise ValueError(f"T{expr.output.name} ({expr.op_name}) cannot be computed again")
    out = expr.output
    twin = TensorView(new_axes_like(out.logical), out.dtype)
    clone = copy.copy(expr)
    clone.outputs = [twin]
    clone.inputs = inputs
    twin.definition = clone
    for value in inputs:
        value.uses.append(clone)
    return twin


def split_nests(fusion: Fusion) -> None:
    """Rewrite ``fusion`` in place as the module docstring says."""
    reason = reason_not_split(fusion)
    if reason is not None:
        raise ValueError(f"cannot read the row again in each loop nest: {reason}")
    with fusion:  # clones take names of the fusion's
        _split(fusion)


def _split(fusion: Fusion) -> None:
    exprs = fusion.exprs()
    owner: dict[int, int] = {}  # id(expr) -> the nest computing it
    clones: dict[tuple[int, int], TensorView] = {}

    def version(tv: TensorView, nest: int) -> TensorView:
        """``tv`` as nest ``nest`` computes it: the original where no other nest claimed
        it first, else a clone (reading this nest's versions of its inputs)."""
        definition = tv.definition
        if _is_source(tv, fusion) or isinstance(definition, ReductionOp):
            return tv
        assert definition is not None  # not a source
        if owner.setdefault(id(definition), nest) == nest:
            take_inputs(definition, nest)
            return tv
        key = (id(tv), nest)
        if key not in clones:
            inputs = [
                version(value, nest) if isinstance(value, TensorView) else value
                for value in definition.inputs
            ]
            twin = _clone_expr(definition, inputs)
            assert twin.definition is not None
            owner[id(twin.definition)] = nest
            clones[key] = twin
        return clones[key]

    def take_inputs(expr: Expr, nest: int) -> None:
        """Make ``expr`` (of nest ``nest``) read that nest's version of each input."""
        for value in list(expr.inputs):
            if isinstance(value, TensorView):
                mine = version(value, nest)
                if mine is not value:
                    expr.replace_input(value, mine)

    for nest, root in enumerate(_roots(fusion)):
        # (_roots' order keeps every root unclaimed until its own turn.)
        claimed = owner.setdefault(id(root), nest)
        assert claimed == nest, f"T{root.output.name} claimed by two nests"
        take_inputs(root, nest)
    live = {id(expr) for expr in fusion.exprs()}
    for expr in exprs:
        if id(expr) not in live:
            expr.unlink()  # read only by nests that now compute it themselves
    for source in global_sources(fusion):
        by_nest: dict[int, list[Expr]] = {}
        for use in fusion.uses_in_fusion(source):
            if use.output.alias_of is None:
                by_nest.setdefault(owner[id(use)], []).append(use)
        for uses in by_nest.values():
            cache_after(fusion, source, MemoryType.LOCAL, uses=uses)
    for tv in list(fusion.outputs):
        cache_before(fusion, tv)
