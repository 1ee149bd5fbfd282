"""skip_intermediates: metadata ops right after fusion inputs become global aliases of the
inputs with allocation domains that describe the inputs' memory; outputs are never aliased.
Fusions are built from IR builders so each test shows exactly which op is in the chain."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import pyfuse as pf
from pyfuse.ir import dtypes, layout_ops, ops
from pyfuse.ir.exprs import MmaOp, UnaryOpType
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.interpreter import evaluate
from pyfuse.ir.tensor import MemoryType, TensorView, make_tensor
from pyfuse.passes.skip_intermediates import global_intermediates, skip_intermediates
from pyfuse.passes.translate_patterns import translate_patterns

Array = np.ndarray[Any, Any]
F32 = dtypes.float32
BF16 = dtypes.bfloat16

Chain = Callable[[TensorView], list[TensorView]]


def random_inputs(fusion: Fusion) -> list[Array]:
    generator = np.random.default_rng(7)
    return [
        generator.uniform(-2.0, 2.0, size=tv.shape).astype(tv.dtype.numpy()) for tv in fusion.inputs
    ]


def skip_checked(fusion: Fusion) -> list[TensorView]:
    """Run the pass and check it changes no value."""
    inputs = random_inputs(fusion)
    before = evaluate(fusion, inputs)
    aliased = skip_intermediates(fusion)
    after = evaluate(fusion, inputs)
    for old, new in zip(before, after, strict=True):
        np.testing.assert_array_equal(old, new)
    return aliased


def assert_aliases(chain: list[TensorView], root: TensorView) -> None:
    for tv in chain:
        assert tv.alias_of is root, f"T{tv.name} is not an alias of T{root.name}"
        assert tv.memory_type == MemoryType.GLOBAL


# Each chain returns its tensors, first op first; the input is [5, 7] or [5, 1, 7].
def set_chain(x: TensorView) -> list[TensorView]:
    return [ops.set_copy(x)]


def broadcast_chain(x: TensorView) -> list[TensorView]:
    return [ops.broadcast(x, [False, True, False])]


def squeeze_chain(x: TensorView) -> list[TensorView]:
    return [ops.squeeze(x, 1)]


def permute_chain(x: TensorView) -> list[TensorView]:
    return [layout_ops.permute(x, [1, 0])]


def broadcast_squeeze_chain(x: TensorView) -> list[TensorView]:
    first = ops.broadcast(x, [False, True, False])
    return [first, ops.squeeze(first, 1)]


CHAINS: list[tuple[Chain, tuple[int, ...]]] = [
    (set_chain, (5, 7)),
    (broadcast_chain, (5, 7)),
    (squeeze_chain, (5, 1, 7)),
    (permute_chain, (5, 7)),
    (broadcast_squeeze_chain, (5, 7)),
]
CHAIN_IDS = ["set", "broadcast", "squeeze", "permute", "broadcast_squeeze"]


@pytest.mark.parametrize("consumer", [UnaryOpType.NEG, UnaryOpType.EXP])
@pytest.mark.parametrize(("chain", "shape"), CHAINS, ids=CHAIN_IDS)
def test_chain_after_input_is_aliased(
    chain: Chain, shape: tuple[int, ...], consumer: UnaryOpType
) -> None:
    fusion = Fusion()
    with fusion:
        x = fusion.add_input(make_tensor(shape, F32))
        tensors = chain(x)
        fusion.add_output(ops.unary(consumer, tensors[-1]))
    aliased = skip_checked(fusion)
    assert aliased == tensors
    assert_aliases(tensors, x)
    assert global_intermediates(fusion) == []
    # The last alias allocates exactly the input's real axes, contiguous.
    last = tensors[-1]
    assert last.allocation is not None
    assert sorted(axis.extent for axis in last.allocation if not axis.is_broadcast) == [5, 7]
    assert all(
        flag
        for axis, flag in zip(last.allocation, last.maybe_contiguity, strict=True)
        if not axis.is_broadcast
    )


def test_new_broadcast_axes_are_not_allocated() -> None:
    fusion = Fusion()
    with fusion:
        x = fusion.add_input(make_tensor((5, 7), F32))
        y = ops.broadcast(x, [True, False, True, False])
        fusion.add_output(ops.unary(UnaryOpType.NEG, y))
    skip_checked(fusion)
    assert y.allocation == [y.logical[1], y.logical[3]]
    assert y.contiguity == [True, True]


def test_permute_keeps_the_inputs_physical_order() -> None:
    fusion = Fusion()
    with fusion:
        x = fusion.add_input(make_tensor((5, 7), F32))
        y = layout_ops.permute(x, [1, 0])
        fusion.add_output(ops.unary(UnaryOpType.NEG, y))
    skip_checked(fusion)
    # y is [7, 5]; in memory the 5-axis is outer, as in x.
    assert y.allocation == [y.logical[1], y.logical[0]]


def test_strided_input_allocation_and_contiguity_are_carried() -> None:
    # x [5, 7] stored transposed with a padded leading dimension (stride 8, not 5).
    fusion = pf.fuse(lambda x: -(x.unsqueeze(0).T)).trace(pf.spec((5, 7), pf.float32, (1, 8)))
    (x,) = fusion.inputs
    aliased = skip_checked(fusion)
    assert len(aliased) == 2
    broadcast, permute = aliased
    assert_aliases(aliased, x)
    # x allocation: [7-axis (stride 8), 5-axis (stride 1)], contiguity (f t).
    assert x.contiguity == [False, True]
    assert [axis.extent for axis in broadcast.allocation or []] == [7, 5]
    assert broadcast.contiguity == [False, True]
    # permute of [1, 5, 7] (.T reverses) is [7, 5, 1]: physical order stays 7-axis outer.
    assert permute.allocation == [permute.logical[0], permute.logical[1]]
    assert permute.contiguity == [False, True]


def test_longer_chain_and_expand_and_reshape_view() -> None:
    fusion = Fusion()
    with fusion:
        x = fusion.add_input(make_tensor((4, 6), F32))
        flat = layout_ops.reshape(x, [24])
        split = layout_ops.reshape(flat, [2, 12])
        wide = ops.broadcast_to(ops.broadcast(split, [False, True, False]), [2, 3, 12])
        fusion.add_output(ops.unary(UnaryOpType.EXP, wide))
    aliased = skip_checked(fusion)
    assert len(aliased) == 4  # two reshapes, a broadcast, an expand
    assert_aliases(aliased, x)
    assert global_intermediates(fusion) == []
    assert wide.allocation == [wide.logical[0], wide.logical[2]]


def test_reshape_of_a_transposed_input_is_not_a_view() -> None:
    fusion = pf.fuse(lambda x: -x.reshape(35)).trace(pf.spec((5, 7), pf.float32, (1, 5)))
    aliased = skip_checked(fusion)
    assert aliased == []


@pytest.mark.parametrize(("chain", "shape"), CHAINS, ids=CHAIN_IDS)
def test_op_is_kept_when_its_result_is_an_output(chain: Chain, shape: tuple[int, ...]) -> None:
    fusion = Fusion()
    with fusion:
        x = fusion.add_input(make_tensor(shape, F32))
        tensors = chain(x)
        fusion.add_output(tensors[0])
        fusion.add_output(ops.unary(UnaryOpType.NEG, tensors[-1]))
    aliased = skip_checked(fusion)
    # The output is written, as a copy of the view: the view reads the input in place, and
    # the rest of the chain continues from the view, not from the written output.
    output = fusion.outputs[0]
    assert output is tensors[0] and output.alias_of is None
    assert output.definition is not None
    view = output.definition.tensor_inputs[0]
    if view is x:  # a plain copy of the input is already the copy that writes the output
        assert aliased == []
        return
    assert view.alias_of is x and view in aliased
    assert all(tv.alias_of is x for tv in tensors[1:])


def test_tensor_with_several_uses_is_aliased_and_continues() -> None:
    fusion = Fusion()
    with fusion:
        x = fusion.add_input(make_tensor((5, 7), F32))
        t = layout_ops.permute(x, [1, 0])
        b = ops.broadcast(t, [False, False, True])
        fusion.add_output(ops.unary(UnaryOpType.NEG, t))
        fusion.add_output(ops.unary(UnaryOpType.EXP, b))
        fusion.add_output(ops.unary(UnaryOpType.EXP, ops.squeeze(b, 2)))
    aliased = skip_checked(fusion)
    assert len(aliased) == 3
    assert_aliases(aliased, x)
    assert global_intermediates(fusion) == []


def test_materializing_copy_and_cast_are_not_aliased() -> None:
    fusion = Fusion()
    with fusion:
        x = fusion.add_input(make_tensor((1, 7), F32))
        expanded = ops.expand(x, [5, 7])
        copy = ops.materialize(expanded)  # a set that makes the expanded axis real
        cast = ops.cast(x, BF16)
        fusion.add_output(ops.unary(UnaryOpType.NEG, copy))
        fusion.add_output(ops.unary(UnaryOpType.NEG, cast))
    aliased = skip_checked(fusion)
    assert aliased == [expanded]
    assert copy.alias_of is None and cast.alias_of is None


def test_op_with_its_own_allocation_is_a_real_transpose() -> None:
    fusion = Fusion()
    with fusion:
        x = fusion.add_input(make_tensor((5, 7), F32))
        y = layout_ops.permute(x, [1, 0])
        y.set_allocation(y.logical)  # a scheduler asked for the transposed layout
        fusion.add_output(ops.unary(UnaryOpType.NEG, y))
    assert skip_checked(fusion) == []
    y.memory_type = MemoryType.GLOBAL
    assert global_intermediates(fusion) == [f"T{y.name}"]


def test_running_twice_changes_nothing() -> None:
    fusion = Fusion()
    with fusion:
        x = fusion.add_input(make_tensor((5, 7), F32))
        chain = broadcast_squeeze_chain(x)
        fusion.add_output(ops.unary(UnaryOpType.NEG, chain[-1]))
    first = skip_checked(fusion)
    before = str(fusion), [list(tv.allocation or []) for tv in chain]
    assert skip_checked(fusion) == first
    assert (str(fusion), [list(tv.allocation or []) for tv in chain]) == before


# ---- as matmul operands -------------------------------------------------------------------------

M, N, K = 37, 29, 45


def _operand_chain(name: str, x: TensorView) -> TensorView:
    """``x`` [M or N, K] through the named metadata chain, back to [M or N, K]."""
    if name == "set":
        return ops.set_copy(x)
    if name == "broadcast":
        return ops.broadcast(x, [True, False, False])  # [1, M, K]: a batch of one
    if name == "squeeze":
        return ops.squeeze(ops.broadcast(x, [False, True, False]), 1)
    if name == "permute":
        return layout_ops.permute(layout_ops.permute(x, [1, 0]), [1, 0])
    return ops.squeeze(ops.broadcast(x, [True, False, False]), 0)


@pytest.mark.parametrize("name", ["set", "broadcast", "squeeze", "permute", "broadcast_squeeze"])
def test_operand_chains_feeding_a_matmul_are_aliased(name: str) -> None:
    fusion = Fusion()
    with fusion:
        a = fusion.add_input(make_tensor((M, K), BF16))
        w = fusion.add_input(make_tensor((N, K), BF16))
        a_op = _operand_chain(name, a)
        w_op = _operand_chain(name, w)
        fusion.add_output(ops.linear(a_op, w_op if w_op.ndim == 2 else ops.squeeze(w_op, 0)))
    inputs = random_inputs(fusion)
    before = evaluate(fusion, inputs)
    translate_patterns(fusion)
    aliased = skip_intermediates(fusion)
    np.testing.assert_array_equal(evaluate(fusion, inputs)[0], before[0])
    (mma,) = [expr for expr in fusion.exprs() if isinstance(expr, MmaOp)]
    # Everything between the inputs and the MMA is an alias: nothing is written but the output.
    assert mma.a in aliased and mma.b in aliased
    assert mma.a.alias_of is a and mma.b.alias_of is w
    assert global_intermediates(fusion) == []
    for operand in (mma.a, mma.b):
        tv = operand
        while tv.definition is not None:
            assert tv.alias_of is not None
            tv = tv.definition.tensor_inputs[0]
