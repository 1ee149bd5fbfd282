"""Segmentation: split a fusion into kernels that one scheduler each can take.

Expects the math IR after pattern translation. Guarantees: the returned
:class:`SegmentedFusion` lists kernels in a launch order that respects data flow; each
kernel is a sub-fusion whose inputs are fusion inputs or tensors an earlier kernel
wrote (global intermediates), whose outputs are fusion outputs or such intermediates,
and that its named scheduler accepts. Every scheduler that declined a kernel left its
reason in ``KernelPlan.declined``; when no grouping works, :class:`ScheduleError`
lists each scheduler's reason for the expr that could not be placed.

Strategy: try the whole fusion; if no scheduler takes it, walk the exprs in
topological order and grow the current group while some scheduler accepts it,
starting a new group at the first expr that no scheduler accepts together with the
group. A pointwise fusion whose outputs have different sizes is cut the same way. A chain
of reductions over pointwise math (a normalization too wide for one kernel) is grouped by
:mod:`segment_recompute` instead where that moves fewer bytes and recomputes at most
``MAX_RECOMPUTE_GROWTH`` times the fusion's exprs: its groups share the pointwise exprs
each kernel recomputes (``SegmentedFusion.recomputed``; the pipeline segments such a
fusion again without them when one of their kernels fails every plan).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

from pyfuse.errors import ScheduleError
from pyfuse.ir import ops as ir_ops
from pyfuse.ir.exprs import CatOp, Expr, MmaOp, ReductionOp, SliceOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.id_model import IdMappingMode, IdModel
from pyfuse.ir.iterdomain import IterDomain, IterType
from pyfuse.ir.target import TargetInfo
from pyfuse.ir.tensor import MemoryType, TensorView, new_axes_like
from pyfuse.passes.plan import KernelPlan, SegmentedFusion, has_mma
from pyfuse.passes.schedulers import SCHEDULERS
from pyfuse.passes.segment_recompute import cost_bytes, recompute_groups
from pyfuse.passes.skip_intermediates import (
    is_metadata_op,
    is_view_op,
    metadata_source,
    reads_in_place,
    view_source,
)


def pick_scheduler(fusion: Fusion, target: TargetInfo) -> tuple[str | None, dict[str, str]]:
    """The first scheduler that accepts ``fusion`` and the reasons of those that declined."""
    declined: dict[str, str] = {}
    # (The matmul scheduler finds each MMA operand's roles along that operand's own chain, so
    # ``x.T @ x`` needs no boundary.)
    tied = None
    if has_mma(fusion):
        tied = _self_mapped(fusion, _epilogue_tensors(fusion))
    elif _reads_a_tensor_twice(fusion):
        tied = _self_mapped(fusion)
    if tied is not None:
        # Twin inputs (sub_fusion) untie an input read along two paths; a computed tensor
        # read so needs a kernel boundary: the next kernel reads it as an input.
        tie = f"two axes of T{tied.name} map to each other (a tensor read along two paths)"
        return None, {scheduler.name: tie for scheduler in SCHEDULERS}
    sliced = _slice_of_computed(fusion)
    if sliced is not None:
        cut = (
            f"T{sliced.name} is sliced: a kernel boundary makes it an input, read in place at "
            "the slice's offset"
        )
        return None, {scheduler.name: cut for scheduler in SCHEDULERS}
    for scheduler in SCHEDULERS:
        reason = scheduler.decline(fusion, target)
        if reason is None:
            return scheduler.name, declined
        declined[scheduler.name] = reason
    return None, declined


def _slice_of_computed(fusion: Fusion) -> TensorView | None:
    """A computed tensor that a SliceOp reads (not a view of an input): slices are read in
    place from memory, which a computed tensor has only once an earlier kernel wrote it."""
    for expr in fusion.exprs():
        if isinstance(expr, SliceOp):
            source = view_source(expr.tensor_inputs[0])
            if not fusion.is_input(source):
                return expr.tensor_inputs[0]
    return None


def sub_fusion(
    fusion: Fusion, exprs: Sequence[Expr], outputs: Sequence[TensorView], name: str
) -> tuple[Fusion, list[TensorView], list[TensorView]]:
    """A copy of ``exprs`` as a fusion of its own. Returns the copy and, in the original
    fusion, the tensors its inputs and outputs stand for."""
    produced = {id(e.output) for e in exprs}
    boundary: list[TensorView] = []
    for expr in exprs:
        for tv in expr.tensor_inputs:
            if id(tv) not in produced and all(tv is not b for b in boundary):
                boundary.append(tv)
    memo: dict[int, object] = {}
    copied: Fusion = copy.deepcopy(fusion, memo)
    copied.name = name
    copied.inputs = []
    copied.outputs = []
    for tv in boundary:
        twin = memo[id(tv)]
        assert isinstance(twin, TensorView)
        if twin.definition is not None:
            # An intermediate written by an earlier kernel: read it as a contiguous input.
            twin.definition = None
            twin.alias_of = None
            _expanded_as_real(twin)
        copied.add_input(twin)
    for tv in outputs:
        twin = memo[id(tv)]
        assert isinstance(twin, TensorView)
        copied.add_output(materialize_expanded(copied, twin))
    for expr in exprs:
        twin = memo[id(expr.output)]
        assert isinstance(twin, TensorView)
        if twin.memory_type == MemoryType.GLOBAL and not copied.is_output(twin):
            # A fusion output this kernel recomputes but another writes (segment_recompute).
            twin.memory_type = MemoryType.LOCAL
    for position, original in separate_self_mapped_inputs(copied):
        boundary.insert(position, boundary[original])
    return copied, boundary, list(outputs)


def _expanded_as_real(tv: TensorView) -> None:
    """An intermediate read back from memory: the earlier kernel wrote every element of its
    expanded broadcast axes (:func:`materialize_expanded`), so they are real axes here, with
    strides, not one stored value each."""
    for axis in tv.logical:
        if axis.expanded_extent is not None:
            axis.extent, axis.expanded_extent = axis.expanded_extent, None
            axis.iter_type = IterType.ITERATION


def materialize_expanded(fusion: Fusion, tv: TensorView) -> TensorView:
    """``tv``, or a copy of it whose expanded broadcast axes are real axes: a kernel writes
    every element of its outputs, and a loop over an expanded broadcast has one trip."""
    if not any(axis.expanded_extent is not None for axis in tv.no_reductions):
        return tv
    tv.memory_type = MemoryType.LOCAL  # computed in registers; the copy is the output
    with fusion:
        return ir_ops.materialize(tv)


def _epilogue_tensors(fusion: Fusion) -> list[TensorView]:
    """The MMA results and every tensor computed from them (the matmul kernel's epilogue)."""
    found: dict[int, TensorView] = {}
    frontier = [e.output for e in fusion.exprs() if isinstance(e, MmaOp)]
    while frontier:
        tv = frontier.pop()
        if id(tv) in found:
            continue
        found[id(tv)] = tv
        frontier.extend(use.output for use in fusion.uses_in_fusion(tv))
    return list(found.values())


def _self_mapped(fusion: Fusion, tensors: Sequence[TensorView] | None = None) -> TensorView | None:
    """A tensor (of ``tensors``, all by default) two of whose axes the IdModel maps to each
    other (``x + x.T`` ties ``x``'s rows to its columns): no loop structure indexes it right,
    since every index is derived from one reference through that relation. In an MMA's
    epilogue (``y + y.T`` of ``y = a @ b``) the tile a warpgroup holds has no transpose."""
    id_model = IdModel(fusion)
    # A broadcast read along two paths also ties the axes it is broadcast against on each
    # path to each other: ``x[16, 13] > a[1, 1]`` then ``reshape(.., 208) != a`` puts 13 and
    # 208 in one group, and a replay from the 208-wide reference gives the 13-wide tensor
    # 208's loop. Two iterated extents in one group are such a tie; one extent is harmless
    # (``x + a, z + a`` over equal shapes may share a loop, whichever axes pair up).
    extent_of_group: dict[int, tuple[int, TensorView]] = {}
    for tv in fusion.tensors() if tensors is None else tensors:
        axes = [a for a in tv.logical if not a.is_broadcast or a.expanded_extent is not None]
        for i, first in enumerate(axes):
            for second in axes[i + 1 :]:
                if id_model.mapped(first, second, IdMappingMode.BROADCAST):
                    return tv
            group = id(id_model.group(first, IdMappingMode.BROADCAST)[0])
            seen = extent_of_group.setdefault(group, (first.logical_extent, tv))
            if seen[0] != first.logical_extent:
                return seen[1]
    return _reshape_tie(fusion, id_model, tensors)


def _reshape_tie(
    fusion: Fusion, id_model: IdModel, tensors: Sequence[TensorView] | None
) -> TensorView | None:
    """A tensor (of ``tensors``) with one axis mapped to what a reshape merged or split and
    another mapped to what it made of it: ``x[2, 5, 1] > 0`` reshaped to ``[10]`` and
    compared with ``x`` broadcast to ``[2, 5, 10]`` (CPU fuzzer, seed 605 case 5738) puts the
    output's rows in one group with the reshape's inputs and its columns with the reshape's
    output, so one loop would read ``x`` at (row, col) for both, where the reshape needs it
    at ``col``. A reshape whose made axes map back onto its own inputs is one too."""

    def groups(axes: Sequence[IterDomain]) -> set[int]:
        return {
            id(id_model.group(axis, IdMappingMode.BROADCAST)[0])
            for axis in axes
            if axis.logical_extent > 1
        }

    sides: list[tuple[set[int], set[int]]] = []
    for tv in fusion.tensors():
        if tv.root is None:
            continue
        # Per reshape, not per split or merge: [6, 4] -> [4, 6] merges to 24 and splits it,
        # and no tensor has the 24 (``(x * 2).reshape(4, 6) + x.T``).
        kept = {id(axis) for axis in tv.root} & {id(axis) for axis in tv.logical}
        before = groups([axis for axis in tv.root if id(axis) not in kept])
        after = groups([axis for axis in tv.logical if id(axis) not in kept])
        if before & after:
            return tv  # what the reshape made maps back onto what it was made of
        if before and after:
            sides.append((before, after))
    if not sides:
        return None
    for tv in fusion.tensors() if tensors is None else tensors:
        own = groups([a for a in tv.logical if not a.is_broadcast or a.expanded_extent is not None])
        if any(own & before and own & after for before, after in sides):
            return tv
    return None


def _reads_a_tensor_twice(fusion: Fusion) -> bool:
    """Some tensor is read by several exprs: the only way axes can be tied together (a
    cheap test before building an IdModel)."""
    readers: set[int] = set()
    for expr in fusion.exprs():
        for tv_id in {id(tv) for tv in expr.tensor_inputs}:
            if tv_id in readers:
                return True
            readers.add(tv_id)
    return False


def separate_self_mapped_inputs(fusion: Fusion) -> list[tuple[int, int]]:
    """Where one input read along two paths ties axes together (see :func:`_self_mapped`),
    every use of that input past the first reads a twin input of its own, which the launch
    binds to the same memory. Returns (position of the twin in ``fusion.inputs``, position
    of the input it duplicates), in order of insertion."""
    if has_mma(fusion):
        return []  # an MMA's operands take their roles per use (see pick_scheduler)
    if not _reads_a_tensor_twice(fusion) or _self_mapped(fusion) is None:
        return []
    added: list[tuple[int, int]] = []
    for index, tv in enumerate(list(fusion.inputs)):
        uses = fusion.uses_in_fusion(tv)
        for use in uses[1:]:
            with fusion:  # numbered in this fusion, after its own tensors
                twin = _twin_input(tv)
            use.replace_input(tv, twin)
            fusion.inputs.append(twin)
            twin.memory_type = tv.memory_type
            added.append((len(fusion.inputs) - 1, index))
    return added


def _twin_input(tv: TensorView) -> TensorView:
    """A fresh input tensor with ``tv``'s shape, dtype and memory layout."""
    twin = TensorView(new_axes_like(tv.logical), tv.dtype)
    twin.strides = tv.strides
    if tv.allocation is not None:
        axes = [twin.logical[tv.logical.index(axis)] for axis in tv.allocation]
        twin.set_allocation(axes, tv.contiguity)
    return twin


def _written(
    fusion: Fusion,
    group: Sequence[Expr],
    later: Sequence[Sequence[Expr]],
) -> list[TensorView]:
    """What the kernel of ``group`` writes, given the groups launched after it: the fusion
    outputs no later group computes (the last kernel to compute a shared output writes it:
    the outputs' kernel, not a reduction's, which a full-size output would overload), and
    the tensors a later group reads without computing them. Groups may share pointwise
    exprs, each kernel computing them again (:mod:`segment_recompute`); disjoint groups
    write what :func:`_group_outputs` says."""
    computed_after = {id(e) for g in later for e in g}
    read_later: set[int] = set()
    for other in later:
        computed = {id(e.output) for e in other}
        read_later.update(id(tv) for e in other for tv in e.tensor_inputs if id(tv) not in computed)
    outputs = []
    for expr in group:
        tv = expr.output
        if (fusion.is_output(tv) and id(expr) not in computed_after) or id(tv) in read_later:
            outputs.append(tv)
    return outputs


def _group_outputs(fusion: Fusion, group: Sequence[Expr], rest: Sequence[Expr]) -> list[TensorView]:
    """Tensors of ``group`` that are fusion outputs or read by exprs outside it."""
    later_inputs = {id(tv) for e in rest for tv in e.tensor_inputs}
    outputs = []
    for expr in group:
        tv = expr.output
        if fusion.is_output(tv) or id(tv) in later_inputs:
            outputs.append(tv)
    return outputs


def segment(fusion: Fusion, target: TargetInfo, recompute: bool = True) -> SegmentedFusion:
    """Split ``fusion`` into kernels (see the module docstring); ``recompute=False`` leaves
    out the recomputing groups (what the pipeline asks for when one of their kernels
    failed every plan)."""
    exprs = fusion.exprs()
    # The whole fusion as the kernel it would be (twin inputs, materialized outputs).
    whole, _, _ = sub_fusion(fusion, exprs, _group_outputs(fusion, exprs, []), "trial")
    if pick_scheduler(whole, target)[0] is not None:
        return _plans(fusion, [exprs], target)
    prologue = _matmul_prologue(exprs)
    if prologue:
        # Operands computed before an MMA run in kernels of their own; the MMA kernel then
        # loads them with TMA like any input.
        rest = [e for e in exprs if all(e is not p for p in prologue)]
        groups = _greedy(fusion, prologue, target) + _greedy(fusion, rest, target)
        return _plans(fusion, groups, target)
    # The whole fusion was just declined: no need to try it again as one group.
    groups = _greedy(fusion, exprs, target, try_whole=False)
    recomputed = None
    if recompute:
        recomputed = recompute_groups(fusion, lambda group: _accepted(fusion, group, target))
    # Recomputing pays in bytes; past a few copies of each expr it costs more in math and
    # compile time than it saves (a chain of n normalizations recomputes n^2 exprs).
    if (
        recomputed is not None
        and sum(len(group) for group in recomputed) <= MAX_RECOMPUTE_GROWTH * len(exprs)
        and _bytes(fusion, recomputed) < _bytes(fusion, groups)
    ):
        try:
            planned = _plans(fusion, recomputed, target, split_declined=False)
        except ScheduleError:
            pass  # a kernel of the recomputing groups was declined after all
        else:
            planned.recomputed = True
            return planned
    return _plans(fusion, groups, target)


# The most exprs the recomputing groups may hold, as a multiple of the fusion's.
MAX_RECOMPUTE_GROWTH = 3


def _accepted(
    fusion: Fusion,
    group: list[Expr],
    target: TargetInfo,
    all_exprs: Sequence[Expr] | None = None,
) -> bool:
    """Whether one scheduler takes ``group`` as a kernel (writing what any other expr of
    ``all_exprs``, the fusion's by default, reads; its last expr's output where none is)."""
    members = {id(e) for e in group}
    later = [e for e in (all_exprs or fusion.exprs()) if id(e) not in members]
    outputs = _group_outputs(fusion, group, later) or [group[-1].output]
    trial, _, _ = sub_fusion(fusion, group, outputs, "trial")
    return pick_scheduler(trial, target)[0] is not None


def _bytes(fusion: Fusion, groups: list[list[Expr]]) -> int:
    """What the kernels of ``groups`` read and write (segment_recompute.cost_bytes)."""
    return cost_bytes(groups, lambda i: _written(fusion, groups[i], groups[i + 1 :]))


def _matmul_prologue(exprs: list[Expr]) -> list[Expr]:
    """The exprs that compute MMA operands (beyond the metadata ops right before the MMA)."""
    cuts: list[TensorView] = []
    for expr in exprs:
        if not isinstance(expr, MmaOp):
            continue
        for operand in (expr.a, expr.b):
            tv = metadata_source(operand)
            if tv.definition is not None:
                cuts.append(tv)
    needed: set[int] = set()
    frontier = list(cuts)
    while frontier:
        tv = frontier.pop()
        if tv.definition is None or id(tv.definition) in needed:
            continue
        needed.add(id(tv.definition))
        frontier.extend(tv.definition.tensor_inputs)
    return [e for e in exprs if id(e) in needed]


def _greedy(
    fusion: Fusion, exprs: list[Expr], target: TargetInfo, try_whole: bool = True
) -> list[list[Expr]]:
    """Groups grown in order while some scheduler accepts them (the whole list, when one
    scheduler takes it: a lone metadata op must not become a copy kernel of its own)."""
    all_exprs = fusion.exprs()
    if exprs and try_whole and _accepted(fusion, exprs, target, all_exprs):
        return [list(exprs)]
    groups: list[list[Expr]] = []
    current: list[Expr] = []
    for unit in _units(fusion, exprs):
        expr = unit[-1]
        candidate = [*current, *unit]
        if _accepted(fusion, candidate, target, all_exprs):
            current = candidate
            continue
        if not current:
            alone, _, _ = sub_fusion(fusion, [expr], [expr.output], "trial")
            reasons = pick_scheduler(alone, target)[1]
            detail = "; ".join(f"{n}: {r}" for n, r in reasons.items())
            raise ScheduleError(
                f"no scheduler accepts T{expr.output.name} = {expr.op_name}(...) ({detail})",
                op=expr.op_name,
                where=expr.source,
            )
        groups.append(current)
        current = list(unit)
    if current:
        groups.append(current)
    return groups


def _units(fusion: Fusion, exprs: list[Expr]) -> list[list[Expr]]:
    """``exprs`` in steps for the greedy walk: each MMA together with the metadata ops that
    only feed it (its operand views: TMA reads them in place, so they belong to its kernel,
    and two operands' views apart would look like a pointwise kernel of two sizes), each cat
    with the views of inputs that only feed it (its kernel reads them in place), every other
    expr alone; in topological order."""
    members = {id(e) for e in exprs}
    chain_of: dict[int, list[Expr]] = {}
    attached: set[int] = set()
    for mma in exprs:
        if not isinstance(mma, MmaOp | CatOp):
            continue
        # A cat's kernel reads slices of inputs in place too.
        viewing = is_view_op if isinstance(mma, CatOp) else is_metadata_op
        chain: list[Expr] = []
        frontier = list(mma.tensor_inputs)
        while frontier:
            tv = frontier.pop()
            definition = tv.definition
            if (
                definition is None
                or id(definition) not in members
                or id(definition) in attached
                or not viewing(definition)
                or (isinstance(mma, CatOp) and not _read_in_place(fusion, definition))
                or not all(_feeds_only(use, mma, chain) for use in tv.uses)
            ):
                continue
            chain.append(definition)
            attached.add(id(definition))
            frontier.extend(definition.tensor_inputs)
        chain_of[id(mma)] = chain
    order = {id(e): i for i, e in enumerate(exprs)}
    units = []
    for expr in exprs:
        if id(expr) in attached:
            continue
        chain = sorted(chain_of.get(id(expr), []), key=lambda e: order[id(e)])
        units.append([*chain, expr])
    return units


def _pieces(fusion: Fusion, group: list[Expr]) -> list[list[Expr]]:
    """``group`` cut as finely as a failed plan needs: its units (an MMA keeps its operand
    views), or one expr each when a cat's unit is the whole group (a view it cannot read)."""
    pieces = _units(fusion, group)
    if len(pieces) < 2 and any(isinstance(expr, CatOp) for expr in group):
        pieces = [[expr] for expr in group]
    return pieces


def _read_in_place(fusion: Fusion, view: Expr) -> bool:
    """A view of an input that an alias can read in place and that is no output (a cat's
    kernel takes such views with it)."""
    return reads_in_place(fusion, view) and not fusion.is_output(view.output)


def _feeds_only(use: Expr, mma: Expr, chain: list[Expr]) -> bool:
    return use is mma or any(use is e for e in chain)


def replan(
    fusion: Fusion,
    segmented: SegmentedFusion,
    index: int,
    target: TargetInfo,
    rewrite: Callable[[Fusion], object] | None = None,
) -> KernelPlan:
    """A fresh plan for kernel ``index`` (its scheduler's work on the last one is undone),
    its fusion first rewritten by ``rewrite`` where given; the kernel keeps its arguments."""
    groups = segmented.groups
    outputs = _written(fusion, groups[index], groups[index + 1 :])
    name = segmented.kernels[index].fusion.name
    kernel_fusion, _, _ = sub_fusion(fusion, groups[index], outputs, name)
    if rewrite is not None:
        rewrite(kernel_fusion)
    chosen, reasons = pick_scheduler(kernel_fusion, target)
    if chosen is None:
        detail = "; ".join(f"{n}: {r}" for n, r in reasons.items())
        raise ScheduleError(f"no scheduler accepts kernel {name} ({detail})")
    plan = KernelPlan(kernel_fusion, chosen, declined=reasons)
    segmented.kernels[index] = plan
    return plan


def cut(
    fusion: Fusion, segmented: SegmentedFusion, index: int, target: TargetInfo
) -> SegmentedFusion | None:
    """``segmented`` with kernel ``index`` cut, when no plan for the whole kernel works: a
    kernel of several reductions (a normalization whose rows do not fit the registers)
    first after its first reduction, each side grouped again; else into one kernel per expr
    (an MMA keeps its operand views). None when the kernel is one such piece already."""
    groups = segmented.groups
    group = groups[index]
    reductions = [i for i, expr in enumerate(group) if isinstance(expr, ReductionOp)]
    pieces: list[list[Expr]] | None = None
    if len(reductions) >= 2:
        split = reductions[0] + 1
        try:
            pieces = _greedy(fusion, group[:split], target) + _greedy(fusion, group[split:], target)
        except ScheduleError:
            pieces = None  # some expr fits no kernel with its neighbours: one per expr
    if pieces is None:
        pieces = _pieces(fusion, group)
    if len(pieces) < 2:
        return None
    return _plans(fusion, [*groups[:index], *pieces, *groups[index + 1 :]], target)


def _plans(
    fusion: Fusion, groups: list[list[Expr]], target: TargetInfo, split_declined: bool = True
) -> SegmentedFusion:
    """The kernels of ``groups``; a group no scheduler takes is split into its units (one
    kernel per expr, an MMA with its operand views), or raises ScheduleError where it is one
    unit or ``split_declined`` is false."""
    kernels: list[KernelPlan] = []
    sources: list[list[tuple[str, int | str]]] = []
    sinks: list[list[tuple[str, int | str]]] = []
    # A kernel whose outputs are all empty has nothing to do: it is not launched (its
    # outputs and intermediates are still allocated, with no elements).
    intermediates: dict[str, TensorView] = {}
    launched: list[list[Expr]] = []  # last first: a kernel only feeding dropped ones drops too
    for index in reversed(range(len(groups))):
        group = groups[index]
        produced = _written(fusion, group, launched)
        if any(tv.numel > 0 for tv in produced):
            launched.insert(0, group)
            continue
        for tv in produced:
            if not fusion.is_output(tv):
                intermediates[f"T{tv.name}"] = tv
    groups = launched
    for number, group in enumerate(groups):
        outputs = _written(fusion, group, groups[number + 1 :])
        name = fusion.name if len(groups) == 1 else f"{fusion.name}_{number}"
        kernel_fusion, boundary, originals = sub_fusion(fusion, group, outputs, name)
        chosen, reasons = pick_scheduler(kernel_fusion, target)
        if chosen is None:
            pieces = _pieces(fusion, group) if split_declined else []
            if len(pieces) > 1:
                # Declined as planned (a kernel that fed only empty ones lost outputs the
                # greedy walk counted): one kernel per expr instead.
                return _plans(fusion, [*groups[:number], *pieces, *groups[number + 1 :]], target)
            detail = "; ".join(f"{n}: {r}" for n, r in reasons.items())
            raise ScheduleError(f"no scheduler accepts kernel {name} ({detail})")
        kernels.append(KernelPlan(kernel_fusion, chosen, declined=reasons))
        sources.append([_location(fusion, tv) for tv in boundary])
        kernel_sinks = []
        for tv in originals:
            kernel_sinks.append(_location(fusion, tv))
            if not fusion.is_output(tv):
                intermediates[f"T{tv.name}"] = tv
        sinks.append(kernel_sinks)
    return SegmentedFusion(kernels, sources, sinks, intermediates, [list(g) for g in groups])


def _location(fusion: Fusion, tv: TensorView) -> tuple[str, int | str]:
    """Where a kernel argument lives: a fusion input, a fusion output, or an intermediate."""
    if fusion.is_input(tv):
        return ("input", fusion.inputs.index(tv))
    if fusion.is_output(tv):
        return ("output", fusion.outputs.index(tv))
    return ("intermediate", f"T{tv.name}")
