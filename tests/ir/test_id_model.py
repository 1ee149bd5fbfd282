"""IdModel: the EXACT / BROADCAST / PERMISSIVE / LOOP relations, replay through transforms, and
the seed case (grid swizzle and persistent schedules of an MmaOp with real broadcast operands).

Fusions are built from exprs directly so each test shows exactly which axes exist."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from pyfuse.ir import dtypes
from pyfuse.ir.exprs import (
    BinaryOp,
    BinaryOpType,
    BroadcastOp,
    MmaOp,
    ReductionOp,
    ReductionOpType,
    ReshapeOp,
    UnaryOp,
    UnaryOpType,
)
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.id_model import DisjointSets, IdMappingMode, IdModel
from pyfuse.ir.iterdomain import IterDomain, IterType, Merge, ParallelType
from pyfuse.ir.tensor import TensorView, make_tensor, new_axes_like

EXACT = IdMappingMode.EXACT
BROADCAST = IdMappingMode.BROADCAST
PERMISSIVE = IdMappingMode.PERMISSIVE
LOOP = IdMappingMode.LOOP

# H200 SM count, used as the persistent split factor (a test fixture, not a scheduler fact).
NUM_SMS = 132
TILE = 256
SWIZZLE = 4


# ---- builders ---------------------------------------------------------------------------------


def neg(x: TensorView) -> TensorView:
    out = TensorView(new_axes_like(x.no_reductions), x.dtype)
    UnaryOp(UnaryOpType.NEG, out, x)
    return out


def add(lhs: TensorView, rhs: TensorView) -> TensorView:
    # Same rank; a broadcast axis takes the other side's (numpy rules).
    axes = [
        r if l_axis.is_broadcast else l_axis
        for l_axis, r in zip(lhs.logical, rhs.logical, strict=True)
    ]
    out = TensorView(new_axes_like(axes), lhs.dtype)
    BinaryOp(BinaryOpType.ADD, out, lhs, rhs)
    return out


def broadcast(x: TensorView, is_new: Sequence[bool]) -> TensorView:
    kept = iter(new_axes_like(x.logical))
    axes = [IterDomain(1, IterType.BROADCAST) if new else next(kept) for new in is_new]
    out = TensorView(axes, x.dtype)
    BroadcastOp(out, x, is_new)
    return out


def sum_last(x: TensorView) -> TensorView:
    axes = [*new_axes_like(x.logical[:-1]), IterDomain(x.logical[-1].extent, IterType.REDUCTION)]
    out = TensorView(axes, dtypes.float32)
    ReductionOp(ReductionOpType.SUM, out, x)
    return out


def flatten(x: TensorView) -> TensorView:
    """reshape [a, b] -> [a * b]: root [a, b], logical the merge of the root."""
    root = new_axes_like(x.logical)
    out = TensorView([Merge(root[0], root[1]).output], x.dtype, root=root)
    ReshapeOp(out, x)
    return out


def finish(fusion: Fusion, *outputs: TensorView) -> IdModel:
    for out in outputs:
        fusion.add_output(out)
    return IdModel(fusion)


# ---- DisjointSets -----------------------------------------------------------------------------


def test_disjoint_sets_union_find_and_deterministic_groups() -> None:
    a, b, c, d = (IterDomain(4) for _ in range(4))
    sets = DisjointSets([a, b, c, d])
    assert sets.union(c, a)
    assert not sets.union(a, c)
    assert sets.same(a, c) and not sets.same(a, b)
    # The earliest-inserted member represents the group whatever the union order.
    assert sets.find(c) is a
    assert sets.groups() == [(a, c), (b,), (d,)]
    clone = sets.copy()
    clone.union(b, d)
    assert clone.same(b, d) and not sets.same(b, d)
    with pytest.raises(KeyError):
        sets.find(IterDomain(4))


# ---- EXACT / BROADCAST / PERMISSIVE ------------------------------------------------------------


def test_pointwise_chain_maps_exact() -> None:
    fusion = Fusion()
    with fusion:
        x = fusion.add_input(make_tensor([8, 16], dtypes.float32))
        y = fusion.add_input(make_tensor([8, 16], dtypes.float32))
        out = add(neg(x), y)
        model = finish(fusion, out)
    for axis in range(2):
        assert model.mapped(x.logical[axis], out.logical[axis], EXACT)
        assert model.mapped(y.logical[axis], out.logical[axis], EXACT)
    assert not model.mapped(x.logical[0], x.logical[1], PERMISSIVE)
    assert len(model.group(out.logical[0], EXACT)) == 4  # x, neg(x), y, out


def test_broadcast_axis_maps_in_broadcast_not_exact() -> None:
    fusion = Fusion()
    with fusion:
        x = fusion.add_input(make_tensor([8], dtypes.float32))
        y = fusion.add_input(make_tensor([8, 16], dtypes.float32))
        x_b = broadcast(x, [False, True])
        out = add(x_b, y)
        model = finish(fusion, out)
    new_axis = x_b.logical[1]
    assert new_axis.is_broadcast
    assert not model.mapped(new_axis, out.logical[1], EXACT)
    assert model.mapped(new_axis, out.logical[1], BROADCAST)
    assert model.mapped(new_axis, y.logical[1], PERMISSIVE)
    assert model.mapped(x.logical[0], out.logical[0], EXACT)


def test_merge_with_broadcast_maps_in_permissive_only() -> None:
    fusion = Fusion()
    with fusion:
        x = fusion.add_input(make_tensor([8, 1], dtypes.float32))
        out = neg(x)
        model_before = finish(fusion, out)
        x.merge(0)
        model = IdModel(fusion)
    merged = x.loop[0]
    assert merged.is_iteration and merged.extent == 8
    for mode in (EXACT, BROADCAST):
        assert not model.mapped(merged, x.logical[0], mode)
        assert not model.mapped(merged, out.logical[0], mode)
    assert model.mapped(merged, x.logical[0], PERMISSIVE)
    assert model.mapped(merged, out.logical[0], PERMISSIVE)
    # The model is a snapshot: the old one never saw the merge.
    with pytest.raises(KeyError, match="rebuild"):
        model_before.mapped(merged, x.logical[0])


def test_replay_maps_outputs_of_same_transforms_of_mapped_inputs() -> None:
    fusion = Fusion()
    with fusion:
        x = fusion.add_input(make_tensor([64, 32], dtypes.float32))
        y = neg(x)
        z = neg(x)
        for tv in (x, y):
            tv.split(0, 8).merge(1, 2)  # [8, 8 * 32]
        z.split(0, 16).merge(1, 2)  # a different factor: [4, 16 * 32]
        model = finish(fusion, y, z)
    for position in range(2):
        assert model.mapped(x.loop[position], y.loop[position], EXACT)
        assert not model.mapped(x.loop[position], z.loop[position], PERMISSIVE)
    # Both split the same logical axis, which the replay must not disturb.
    assert model.mapped(x.logical[0], z.logical[0], EXACT)


def test_backward_replay_maps_inputs_of_mapped_outputs() -> None:
    fusion = Fusion()
    with fusion:
        x = fusion.add_input(make_tensor([4, 6], dtypes.float32))
        y = fusion.add_input(make_tensor([4, 6], dtypes.float32))
        w = fusion.add_input(make_tensor([6, 4], dtypes.float32))
        flat_x, flat_y, flat_w = flatten(x), flatten(y), flatten(w)
        out = add(add(flat_x, flat_y), flat_w)
        model = finish(fusion, out)
    assert model.mapped(flat_x.logical[0], flat_w.logical[0], EXACT)
    # The flattened axes map, so the merges' inputs do, back to the fusion inputs...
    assert model.mapped(x.logical[0], y.logical[0], EXACT)
    assert model.mapped(x.logical[1], y.logical[1], EXACT)
    # ...but [6, 4] also flattens to 24 without its axes being [4, 6]'s.
    assert not model.mapped(x.logical[0], w.logical[0], PERMISSIVE)
    assert not model.mapped(x.logical[1], w.logical[1], PERMISSIVE)


def test_backward_replay_keeps_broadcast_out_of_exact() -> None:
    fusion = Fusion()
    with fusion:
        x = fusion.add_input(make_tensor([2, 1], dtypes.float32))  # [i2, b1]
        w = fusion.add_input(TensorView([IterDomain(2), IterDomain(1)], dtypes.float32))
        out = add(flatten(x), flatten(w))  # both flatten to i2
        model = finish(fusion, out)
    # Backward replay maps all of a transform's inputs or none.
    assert model.mapped(x.logical[0], w.logical[0], BROADCAST)
    assert model.mapped(x.logical[1], w.logical[1], BROADCAST)
    assert not model.mapped(x.logical[1], w.logical[1], EXACT)
    assert not model.mapped(x.logical[0], w.logical[0], EXACT)


def test_reshape_root_to_logical_replays() -> None:
    fusion = Fusion()
    with fusion:
        x = fusion.add_input(make_tensor([4, 6], dtypes.float32))
        flat_a = flatten(x)
        flat_b = flatten(neg(x))
        model = finish(fusion, flat_a, flat_b)
    assert flat_a.root is not None and flat_b.root is not None
    assert model.mapped(x.logical[0], flat_a.root[0], EXACT)
    assert model.mapped(flat_a.logical[0], flat_b.logical[0], EXACT)
    assert not model.mapped(flat_a.logical[0], flat_a.root[0], PERMISSIVE)


def test_reduction_maps_iteration_to_reduction_exactly() -> None:
    fusion = Fusion()
    with fusion:
        x = fusion.add_input(make_tensor([8, 16], dtypes.float32))
        total = sum_last(x)
        out = neg(total)
        model = finish(fusion, out)
    assert total.logical[1].is_reduction
    assert model.mapped(x.logical[1], total.logical[1], EXACT)
    assert model.mapped(total.logical[0], out.logical[0], EXACT)
    assert model.max_inline_position(x, total) == 2
    assert model.max_inline_position(total, out) == 1
    total.reorder({1: 0})  # [rS16, iS8]: the reduction loop is outermost
    model = IdModel(fusion)
    assert model.max_inline_position(total, out) == 0


# ---- the seed case: MmaOp with real broadcast operands -----------------------------------------

M, N, K = 1024, 2048, 512


def mma_fusion() -> tuple[Fusion, TensorView, TensorView, TensorView, TensorView, TensorView]:
    """A [M, K] -> A_b [M, 1, K]; B [N, K] -> B_b [1, N, K]; out [M, N, rK] = mma(A_b, B_b)."""
    fusion = Fusion("seed")
    with fusion:
        a = fusion.add_input(make_tensor([M, K], dtypes.bfloat16))
        b = fusion.add_input(make_tensor([N, K], dtypes.bfloat16))
        a_b = broadcast(a, [False, True, False])
        b_b = broadcast(b, [True, False, False])
        out = TensorView(
            [IterDomain(M), IterDomain(N), IterDomain(K, IterType.REDUCTION)], dtypes.float32
        )
        MmaOp(out, a_b, b_b)
        fusion.add_output(out)
    return fusion, a, b, a_b, b_b, out


def tile(tv: TensorView) -> None:
    """[M, N, K] -> [Mo, No, Mi, Ni, K]."""
    tv.split(0, TILE).split(2, TILE).reorder({2: 1})


def grid_swizzle(tv: TensorView) -> None:
    """[Mo, No, ...] -> [Mo/4, 4 * No, ...]."""
    tv.split(0, SWIZZLE).merge(1, 2)


def persistent(tv: TensorView) -> None:
    """[tile loop a, tile loop b, ...] -> [tiles / SMs, SMs, ...]."""
    tv.merge(0).split(0, NUM_SMS)


def split_mo_by_2(tv: TensorView) -> None:
    tv.split(0, 2)


def schedule(
    fusion: Fusion, tensors: Sequence[TensorView], *steps: Callable[[TensorView], None]
) -> None:
    # Inside the fusion so the new IterDomains get the fusion's names (stable printing).
    with fusion:
        for tv in tensors:
            for step in steps:
                step(tv)


def test_seed_grid_swizzle_maps_and_inlines() -> None:
    fusion, a, _, a_b, b_b, out = mma_fusion()
    schedule(fusion, (a_b, b_b, out), tile, grid_swizzle)
    model = IdModel(fusion)

    # A's swizzled axis merged an iteration M part with A's broadcast N tile axis.
    a_merged, b_merged, out_merged = a_b.axis(1), b_b.axis(1), out.axis(1)
    assert a_merged.is_iteration and a_merged.extent == SWIZZLE
    assert out_merged.extent == SWIZZLE * (N // TILE)
    assert model.mapped(a_merged, out_merged, PERMISSIVE)
    assert model.mapped(a_merged, b_merged, PERMISSIVE)
    assert model.mapped(b_merged, out_merged, PERMISSIVE)
    assert not model.mapped(a_merged, out_merged, EXACT)
    assert not model.mapped(b_merged, out_merged, EXACT)

    # Mo/4 maps across all three; exactly between A and out (B's is a broadcast).
    for tv in (a_b, b_b):
        assert model.mapped(tv.axis(0), out.axis(0), PERMISSIVE)
    assert model.mapped(a_b.axis(0), out.axis(0), EXACT)
    assert not model.mapped(b_b.axis(0), out.axis(0), EXACT)
    assert not model.mapped(a_b.axis(0), out_merged, PERMISSIVE)

    # Every loop axis of each operand lines up with out's, so the operands inline fully; by the
    # exact relation only Mo/4 would.
    assert model.max_inline_position(a_b, out) == 5
    assert model.max_inline_position(b_b, out) == 5
    assert model.max_inline_position(a_b, out, BROADCAST) == 5
    assert model.max_inline_position(a_b, out, EXACT) == 1
    assert model.max_inline_position(a_b) == 5  # all consumers: just out
    assert model.unmapped_axes(a_b, out) == []
    # The unscheduled fusion input shares no loop with the scheduled broadcast.
    assert model.max_inline_position(a, a_b) == 0


def test_seed_grid_swizzle_loop_relation_and_promotion() -> None:
    fusion, _, _, a_b, b_b, out = mma_fusion()
    schedule(fusion, (a_b, b_b, out), tile, grid_swizzle)
    a_b.inline_at(2)
    b_b.inline_at(2)
    model = IdModel(fusion)

    for position in range(2):
        assert model.mapped(a_b.axis(position), out.axis(position), LOOP)
        assert model.mapped(b_b.axis(position), out.axis(position), LOOP)
    # Past the inline position the operands keep their own loops.
    assert not model.mapped(a_b.axis(2), out.axis(2), LOOP)
    assert model.mapped(a_b.axis(2), out.axis(2), PERMISSIVE)

    # A's merged loop came from a broadcast, extent 4; inlined, it runs out's 4 * No = 32.
    promoted = model.loop_promotion(a_b.axis(1))
    assert promoted is out.axis(1)
    assert promoted.extent == 32 and a_b.axis(1).extent == 4
    assert model.loop_promotion(b_b.axis(1)) is out.axis(1)
    assert model.loop_promotion(a_b.axis(0)) is out.axis(0)
    # Not inlined: its own loop.
    assert model.loop_promotion(a_b.axis(3)) is a_b.axis(3)


def test_seed_persistent_maps() -> None:
    fusion, _, _, a_b, b_b, out = mma_fusion()
    schedule(fusion, (a_b, b_b, out), tile, persistent)
    model = IdModel(fusion)
    # out's tile loop is 4 * 8 = 32 tiles; A's merged Mo with its broadcast No (4 "tiles").
    assert out.axis(1).extent == NUM_SMS
    for tv in (a_b, b_b):
        assert model.mapped(tv.axis(0), out.axis(0), PERMISSIVE)
        assert model.mapped(tv.axis(1), out.axis(1), PERMISSIVE)
        assert not model.mapped(tv.axis(0), out.axis(0), EXACT)
        assert model.max_inline_position(tv, out) == 5


def test_seed_grid_swizzle_and_persistent_together() -> None:
    fusion, _, _, a_b, b_b, out = mma_fusion()
    schedule(fusion, (a_b, b_b, out), tile, grid_swizzle, persistent)
    a_b.inline_at(2)
    b_b.inline_at(2)
    model = IdModel(fusion)
    for tv in (a_b, b_b):
        assert model.mapped(tv.axis(0), out.axis(0), PERMISSIVE)
        assert model.mapped(tv.axis(1), out.axis(1), PERMISSIVE)
        assert not model.mapped(tv.axis(0), out.axis(0), EXACT)
        assert model.max_inline_position(tv, out) == 5
        assert model.mapped(tv.axis(1), out.axis(1), LOOP)
        assert model.loop_promotion(tv.axis(1)) is out.axis(1)


def test_seed_bulk_axis_stops_inlining() -> None:
    fusion, _, _, a_b, b_b, out = mma_fusion()
    schedule(fusion, (a_b, b_b, out), tile, grid_swizzle)
    a_b.axis(2).parallelize(ParallelType.BULK)  # a TMA box starts at Mi
    model = IdModel.from_tensors([a_b, b_b, out])
    assert model.max_inline_position(a_b, out) == 2
    assert model.max_inline_position(b_b, out) == 5


def test_unmapped_axes_and_printing_are_stable() -> None:
    fusion, _, _, a_b, b_b, out = mma_fusion()
    schedule(fusion, (a_b, b_b, out), tile)
    schedule(fusion, (a_b,), split_mo_by_2)  # A: [Mo/2, 2, No, Mi, Ni, K]; out: [Mo, No, ...]
    a_b.inline_at(0)
    model = IdModel(fusion)
    assert model.max_inline_position(a_b, out) == 0
    assert model.unmapped_axes(a_b, out) == [a_b.axis(0), a_b.axis(1)]
    text = str(model)
    assert text == str(IdModel(fusion))
    sections = [line.split(" ")[0] for line in text.splitlines() if not line.startswith(" ")]
    assert sections == ["IdModel:", "EXACT", "BROADCAST", "PERMISSIVE", "LOOP"]
    for mode in IdMappingMode:
        names = [group[0].name for group in model.groups(mode)]
        assert names == sorted(names)
