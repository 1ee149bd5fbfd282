"""Tracing: shapes, dtypes, broadcasting, strided inputs, outputs and the printed IR."""

from __future__ import annotations

import re

import pytest

import pyfuse as pf
from pyfuse.ir.exprs import BroadcastOp, CastOp, LinearOp, ReductionOp


def test_linear_gelu_prints_readable_ir() -> None:
    f = pf.fuse(lambda x, w, b: pf.gelu(pf.linear(x, w, b)))
    fusion = f.trace(
        pf.spec((8, 4), pf.bfloat16), pf.spec((6, 4), pf.bfloat16), pf.spec((6,), pf.bfloat16)
    )
    assert str(fusion) == "\n".join(
        [
            "Inputs:",
            "  T0_g_bf16[iS0{8}, iS1{4}]",
            "  T1_g_bf16[iS2{6}, iS3{4}]",
            "  T2_g_bf16[iS4{6}]",
            "Outputs:",
            "  T4_g_bf16[iS8{8}, iS9{6}]",
            "T3_l_bf16[iS5{8}, iS6{6}, rS7{4}] = linear(T0, T1, T2)",
            "T4_g_bf16[iS8{8}, iS9{6}] = gelu(T3)",
        ]
    )


def test_printout_is_stable_across_traces() -> None:
    f = pf.fuse(lambda x: pf.softmax(x, -1))
    first = str(f.trace(pf.spec((8, 4), pf.bfloat16)))
    pf.fuse(lambda y: y * 2).trace(pf.spec((3,), pf.float32))  # unrelated trace in between
    assert str(f.trace(pf.spec((8, 4), pf.bfloat16))) == first


def test_softmax_snapshot() -> None:
    f = pf.fuse(lambda x: pf.softmax(x, -1))
    assert str(f.trace(pf.spec((8, 4), pf.bfloat16))).splitlines()[4:] == [
        "T1_l_f32[iS2{8}, iS3{4}] = cast(T0, to=f32)",
        "T2_l_f32[iS4{8}, rS5{4}] = max(T1, dims=[1])",
        "T3_l_f32[iS6{8}, bS7{1}] = broadcast(T2, new=[1])",
        "T4_l_f32[iS8{8}, iS9{4}] = sub(T1, T3)",
        "T5_l_f32[iS10{8}, iS11{4}] = exp(T4)",
        "T6_l_f32[iS12{8}, rS13{4}] = sum(T5, dims=[1])",
        "T7_l_f32[iS14{8}, bS15{1}] = broadcast(T6, new=[1])",
        "T8_l_f32[iS16{8}, iS17{4}] = div(T5, T7)",
        "T9_g_bf16[iS18{8}, iS19{4}] = cast(T8, to=bf16)",
    ]


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ((8, 4), (4,), (8, 4)),
        ((8, 1), (1, 5), (8, 5)),
        ((2, 1, 3), (4, 1), (2, 4, 3)),
        ((1,), (7,), (7,)),
        ((), (3, 2), (3, 2)),
    ],
)
def test_numpy_broadcasting(
    a: tuple[int, ...], b: tuple[int, ...], expected: tuple[int, ...]
) -> None:
    fusion = pf.fuse(lambda x, y: x + y).trace(pf.spec(a, pf.float32), pf.spec(b, pf.float32))
    assert fusion.outputs[0].shape == expected


def test_broadcast_clash_names_op_shapes_and_line() -> None:
    def body(x, y):
        return x * y  # the line the error must name

    with pytest.raises(pf.FusionError) as info:
        pf.fuse(body).trace(pf.spec((8, 4), pf.float32), pf.spec((3,), pf.float32))
    message = str(info.value)
    assert message.startswith("mul: shapes [(8, 4), (3,)] do not broadcast")
    assert "test_trace.py:" in message and "return x * y" in message


def test_error_inside_composite_points_at_user_line() -> None:
    def body(x, w):
        return pf.layer_norm(x, w)

    with pytest.raises(pf.FusionError) as info:
        pf.fuse(body).trace(pf.spec((8, 4), pf.float32), pf.spec((5,), pf.float32))
    assert "layer_norm" in str(info.value)
    assert "return pf.layer_norm(x, w)" in str(info.value)


@pytest.mark.parametrize(
    ("fn", "specs", "fragment"),
    [
        (lambda a, b: a @ b, [((4, 3), "f32"), ((4, 5), "f32")], "matmul: inner sizes differ"),
        (lambda a, b: a @ b, [((4, 3), "f32"), ((3, 5), "bf16")], "same dtype"),
        (lambda x: pf.sum(x, 3), [((4, 3), "f32")], "sum: dim 3 is out of range"),
        (lambda x: x.reshape(5, 5), [((4, 3), "f32")], "reshape to (5, 5) has 25 elements"),
        (lambda x: pf.gelu(x, approximate="fast"), [((4,), "f32")], "approximate must be"),
        (lambda x, w: pf.linear(x, w), [((4, 3), "f32"), ((2, 5, 3), "f32")], "must be 2-D"),
        (lambda x: pf.permute(x, (0, 0)), [((4, 3), "f32")], "not a permutation"),
        (lambda x: pf.mean(x), [((4, 3), "i32")], "mean needs a floating tensor"),
        (lambda x: x + "a", [((4,), "f32")], "not a tensor or a number"),
    ],
)
def test_errors_name_the_op(fn, specs, fragment) -> None:  # type: ignore[no-untyped-def]
    names = {"f32": pf.float32, "bf16": pf.bfloat16, "i32": pf.int32}
    with pytest.raises(pf.FusionError, match=re.escape(fragment)) as info:
        pf.fuse(fn).trace(*(pf.spec(shape, names[dtype]) for shape, dtype in specs))
    assert "test_trace.py:" in str(info.value)


def test_truth_value_of_traced_tensor_is_an_error() -> None:
    def body(x):
        if x > 0:
            return x
        return -x

    with pytest.raises(pf.FusionError, match="no truth value"):
        pf.fuse(body).trace(pf.spec((4,), pf.float32))


def test_non_tensor_return_is_an_error() -> None:
    with pytest.raises(pf.FusionError, match="must return traced tensors"):
        pf.fuse(lambda x: 3).trace(pf.spec((4,), pf.float32))


def test_returned_input_is_copied_and_duplicates_are_distinct_outputs() -> None:
    fusion = pf.fuse(lambda x: (x, pf.exp(x), pf.exp(x))).trace(pf.spec((4,), pf.float32))
    outs = fusion.outputs
    assert len({id(o) for o in outs}) == 3
    assert not any(fusion.is_input(o) for o in outs)


def test_strided_input_gets_allocation_domain() -> None:
    # A [M, K] with strides (1, M): column-major, K is the outer memory axis.
    fusion = pf.fuse(lambda a: pf.exp(a)).trace(pf.spec((8, 4), pf.float32, strides=(1, 8)))
    a = fusion.inputs[0]
    assert a.allocation == [a.logical[1], a.logical[0]]
    assert a.maybe_contiguity == [True, True]
    plain = pf.fuse(lambda a: pf.exp(a)).trace(pf.spec((8, 4), pf.float32, strides=(4, 1)))
    assert plain.inputs[0].allocation is None  # row-major contiguous: default allocation
    padded = pf.fuse(lambda a: pf.exp(a)).trace(pf.spec((8, 4), pf.float32, strides=(16, 1)))
    assert padded.inputs[0].maybe_contiguity == [False, True]


def test_promotion_inserts_casts_on_operands() -> None:
    fusion = pf.fuse(lambda a, b: a + b).trace(
        pf.spec((4,), pf.bfloat16), pf.spec((4,), pf.float32)
    )
    exprs = fusion.exprs()
    assert isinstance(exprs[0], CastOp) and exprs[0].output.dtype == pf.float32
    assert fusion.outputs[0].dtype == pf.float32
    scalar = pf.fuse(lambda a: a * 2.5).trace(pf.spec((4,), pf.bfloat16))
    assert scalar.outputs[0].dtype == pf.bfloat16
    integer = pf.fuse(lambda a: a / 2).trace(pf.spec((4,), pf.int32))
    assert integer.outputs[0].dtype == pf.float32


def test_reduction_keepdim_and_accumulation_types() -> None:
    fusion = pf.fuse(lambda x: pf.sum(x, (0, 2), keepdim=True)).trace(
        pf.spec((2, 3, 4), pf.bfloat16)
    )
    out = fusion.outputs[0]
    assert out.shape == (1, 3, 1) and out.dtype == pf.bfloat16
    reduction = next(e for e in fusion.exprs() if isinstance(e, ReductionOp))
    assert reduction.output.dtype == pf.float32  # bf16 sums accumulate in f32
    assert reduction.axes == (0, 2)
    assert isinstance(out.definition, BroadcastOp)
    ints = pf.fuse(lambda x: x.sum()).trace(pf.spec((5,), pf.int32))
    assert ints.outputs[0].dtype == pf.int64 and ints.outputs[0].shape == ()


def test_linear_batched_and_matmul_shapes() -> None:
    f = pf.fuse(lambda x, w, b: pf.linear(x, w, b))
    fusion = f.trace(
        pf.spec((2, 8, 4), pf.bfloat16), pf.spec((6, 4), pf.bfloat16), pf.spec((6,), pf.bfloat16)
    )
    assert fusion.outputs[0].shape == (2, 8, 6)
    assert isinstance(fusion.outputs[0].definition, LinearOp)
    cases = [
        ((3,), (3,), ()),
        ((5, 3), (3,), (5,)),
        ((3,), (3, 7), (7,)),
        ((2, 1, 5, 3), (4, 3, 7), (2, 4, 5, 7)),
        ((5, 3), (2, 3, 7), (2, 5, 7)),
    ]
    for a, b, expected in cases:
        out = pf.fuse(lambda x, y: x @ y).trace(pf.spec(a, pf.float32), pf.spec(b, pf.float32))
        assert out.outputs[0].shape == expected, (a, b)


def test_metadata_ops_shapes() -> None:
    def body(x):
        y = x.unsqueeze(1)  # [4, 1, 6]
        z = y.broadcast_to((2, 4, 3, 6))
        w = z.permute(0, 3, 1, 2)  # [2, 6, 4, 3]
        return w.reshape(12, -1), x.T, pf.squeeze(y, 1), x.transpose(0, 1)

    outs = pf.fuse(body).trace(pf.spec((4, 6), pf.float32)).outputs
    assert [o.shape for o in outs] == [(12, 12), (6, 4), (4, 6), (6, 4)]


def test_fuse_options_are_checked() -> None:
    with pytest.raises(pf.FusionError, match="target"):
        pf.fuse(lambda x: x, target="sm_80")
    with pytest.raises(pf.FusionError, match="MatmulParams"):
        pf.fuse(lambda x: x, matmul={"tile_m": 128})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tile_m must be a positive int"):
        pf.MatmulParams(tile_m=0)
    decorated = pf.fuse(name="mlp", matmul=pf.MatmulParams(grid_swizzle=4))(lambda x: x)
    assert decorated.name == "mlp" and decorated.matmul.grid_swizzle == 4


def test_every_tensor_method_finds_its_registered_implementation() -> None:
    """The Tensor methods call functions that ops, composites and numpy_ufuncs register by
    name (tensor_methods stands under them): each name the methods look up is registered
    once ``import pyfuse`` has run, and an unregistered one is an InternalError."""
    import inspect

    from pyfuse.frontend import tensor_methods

    source = inspect.getsource(tensor_methods)
    looked_up = set(re.findall(r'_implementation\(\w+, "(\w+)"\)', source))
    assert len(looked_up) > 40
    assert looked_up <= set(tensor_methods._IMPLEMENTATIONS)
    x = pf.Tensor(pf.fuse(lambda x: x).trace(pf.spec((2,), pf.float32)).inputs[0])
    with pytest.raises(pf.InternalError, match="no implementation of the Tensor method 'nope'"):
        tensor_methods._implementation(x, "nope")
