"""The repro script printer: a fusion as pf.* calls that trace back to the same fusion."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import pyfuse as pf
from pyfuse.ir import dtypes
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.script import fusion_to_script, structure

f32, f16, bf16, i32, i64, b = (
    pf.float32,
    pf.float16,
    pf.bfloat16,
    pf.int32,
    pf.int64,
    pf.bool,
)
spec = pf.spec


def _exec(script: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "pyfuse_repro"}  # not __main__: no compile
    exec(compile(script, "<repro>", "exec"), namespace)
    return namespace


def _retrace(fusion: Fusion, **options: Any) -> Fusion:
    namespace = _exec(fusion_to_script(fusion, **options))
    retraced = namespace["fusion"].trace(*namespace["inputs"])
    assert isinstance(retraced, Fusion)
    return retraced


def _layer_norm_2d(x: pf.Tensor, w: pf.Tensor, bias: pf.Tensor) -> pf.Tensor:
    return pf.layer_norm(x, w, bias)


def _many_ops(x: pf.Tensor, y: pf.Tensor) -> tuple[pf.Tensor, ...]:
    z = pf.where(x > y, x, y * 2.0)
    w = pf.maximum(pf.abs(z), 0.5) ** 2 - pf.minimum(x, -1)
    return pf.sigmoid(w), pf.gelu(w, approximate="tanh"), pf.logical_not(x < 0)


CASES: list[tuple[str, Callable[..., Any], tuple[Any, ...]]] = [
    ("pointwise", lambda x, y: pf.relu(x * y + 1.5), (spec((4, 8), f32), spec((8,), f32))),
    ("many_ops", _many_ops, (spec((4, 8), f32), spec((4, 8), f32))),
    ("unary_all", lambda x: pf.cos(pf.sin(pf.exp(pf.log(pf.sqrt(x))))), (spec((16,), f16),)),
    ("rsqrt_tanh", lambda x: pf.tanh(pf.rsqrt(x)) + pf.reciprocal(x), (spec((3,), f32),)),
    ("silu_neg", lambda x: -pf.silu(x), (spec((3, 5), bf16),)),
    (
        "int_promotion",
        lambda x, y: (x + 1, x / 2, x * 2.5, x - y),
        (spec((4,), i32), spec((4,), i64)),
    ),
    (
        "comparisons",
        lambda x: (x == 1, x != 2, x <= 3.5, x >= x, pf.logical_and(x > 0, True)),
        (spec((6,), i32),),
    ),
    ("logical", lambda x, y: pf.logical_or(x, pf.logical_not(y)), (spec((4,), b), spec((4,), b))),
    ("where_scalars", lambda c: pf.where(c, 1.0, 2), (spec((4, 4), b),)),
    ("where_scalar_condition", lambda x: pf.where(True, x, 0), (spec((4,), f32),)),
    (
        "constants",
        lambda x: (
            x * float("inf"),
            x + float("-inf"),
            pf.maximum(x, float("nan")),
            x - (-0.0),
            x * 1e-30,
        ),
        (spec((4,), f32),),
    ),
    ("sum", lambda x: pf.sum(x, 1), (spec((63, 64), f32),)),
    ("sum_all_keepdim", lambda x: pf.sum(x, None, keepdim=True), (spec((4, 8), f32),)),
    ("sum_bf16", lambda x: pf.sum(x, (0, 2)), (spec((4, 8, 2), bf16),)),
    ("sum_int", lambda x: pf.sum(x, 0), (spec((4, 8), i32),)),
    ("sum_bool", lambda x: x.sum(), (spec((4, 8), b),)),
    (
        "max_min_mean",
        lambda x: (x.amax(1), x.amin(0, keepdim=True), x.mean((0, 1), keepdim=True)),
        (spec((4, 8), f32),),
    ),
    (
        "trivial_reduction",
        lambda x: (pf.sum(x, 1), pf.sum(x, 1, keepdim=True)),
        (spec((4, 1), f32),),
    ),
    ("reduce_expanded", lambda x: pf.sum(pf.broadcast_to(x, (4, 8)), 0), (spec((1, 8), f32),)),
    ("softmax", lambda x: pf.softmax(x, -1), (spec((8, 32), bf16),)),
    ("softmax_dim0", lambda x: pf.softmax(x, 0), (spec((8, 32), f32),)),
    (
        "layer_norm",
        lambda x, w, bias: pf.layer_norm(x, w, bias),
        (spec((4, 32), f16), spec((32,), f16), spec((32,), f16)),
    ),
    (
        "layer_norm_2d_weight",
        _layer_norm_2d,
        (spec((4, 8, 16), bf16), spec((8, 16), bf16), spec((8, 16), bf16)),
    ),
    ("layer_norm_no_weight", lambda x: pf.layer_norm(x), (spec((4, 32), f32),)),
    ("rms_norm", lambda x, w: pf.rms_norm(x, w, 1e-5), (spec((4, 64), bf16), spec((64,), bf16))),
    ("matmul", lambda a, m: a @ m, (spec((64, 32), bf16), spec((32, 16), bf16))),
    ("matmul_batched", lambda a, m: pf.matmul(a, m), (spec((2, 64, 32), f16), spec((32, 16), f16))),
    (
        "matmul_vectors",
        lambda a, v: (pf.matmul(a, v), pf.matmul(v, v)),
        (spec((8, 4), f32), spec((4,), f32)),
    ),
    (
        "linear",
        lambda x, w, bias: pf.gelu(pf.linear(x, w, bias)),
        (spec((8, 4), bf16), spec((6, 4), bf16), spec((6,), bf16)),
    ),
    ("linear_no_bias", lambda x, w: pf.linear(x, w), (spec((2, 8, 4), f32), spec((6, 4), f32))),
    ("broadcast_to", lambda x: pf.broadcast_to(x, (3, 4, 8)), (spec((4, 1), f32),)),
    ("broadcast_expand", lambda x: pf.broadcast_to(x, (4, 8)) + 1, (spec((1, 8), f32),)),
    ("permute", lambda x: pf.permute(x, (2, 0, 1)) * 2, (spec((2, 3, 4), f32),)),
    ("transpose_T", lambda x: (x.T + 1, pf.transpose(x, 0, 1)), (spec((3, 5), f32),)),
    ("reshape", lambda x: x.reshape(4, -1, 2).view(8, 4) * 2, (spec((2, 16), f32),)),
    ("reshape_size_one", lambda x: x.reshape(1, 6, 1, 4), (spec((24,), f32),)),
    ("reshape_expanded", lambda x: pf.broadcast_to(x, (3, 4)).reshape(12), (spec((1, 4), f32),)),
    (
        "squeeze_unsqueeze",
        lambda x: (x.squeeze(1).unsqueeze(0), pf.squeeze(x)),
        (spec((4, 1, 8), f32),),
    ),
    (
        "casts",
        lambda x: (x.to(pf.float16), pf.cast(x, pf.int32), pf.cast(x, pf.bool)),
        (spec((4,), f32),),
    ),
    ("returned_input", lambda x, y: (x, y + 1, y + 1), (spec((4,), f32), spec((4,), f32))),
    ("returned_twice", lambda x: (lambda t: (t, t))(x * 2), (spec((4,), f32),)),
    ("unused_input", lambda x, y: y * 3, (spec((4,), f32), spec((2,), f32))),
    ("strided", lambda x: x * 2, (spec((8, 4), f32, strides=(1, 8)),)),
    ("slices", lambda x: (x[1:, ::2] * 2, x[2] + 1), (spec((5, 8), f32),)),
    ("padded", lambda x: x + 1, (spec((4, 8), f32, strides=(16, 1)),)),
    ("size_one_dims", lambda x, y: x + y, (spec((1, 8), f32), spec((4, 1), f32))),
    ("python_number_argument", lambda x, s: x * s, (spec((4,), f32), 3)),
]


@pytest.mark.parametrize(("name", "fn", "args"), CASES, ids=[case[0] for case in CASES])
def test_script_traces_the_same_fusion(
    name: str, fn: Callable[..., Any], args: tuple[Any, ...]
) -> None:
    fusion = pf.fuse(fn, name=name).trace(*args)
    retraced = _retrace(fusion)
    assert structure(retraced) == structure(fusion)
    assert retraced.name == name


def test_structure_tells_fusions_apart() -> None:
    x = spec((4, 8), f32)
    first = pf.fuse(lambda t: pf.sum(t, 1)).trace(x)
    assert structure(first) == structure(pf.fuse(lambda t: pf.sum(t, 1)).trace(x))
    assert structure(first) != structure(pf.fuse(lambda t: pf.sum(t, 0)).trace(x))
    assert structure(first) != structure(pf.fuse(lambda t: pf.max(t, 1)).trace(x))
    assert structure(first) != structure(pf.fuse(lambda t: pf.sum(t, 1)).trace(spec((4, 9), f32)))
    strided = spec((4, 8), f32, strides=(16, 1))
    assert structure(first) != structure(pf.fuse(lambda t: pf.sum(t, 1)).trace(strided))
    two = pf.fuse(lambda t: t * 2).trace(x)
    assert structure(two) != structure(pf.fuse(lambda t: t * 2.0).trace(x))


def test_script_reads_like_the_ir() -> None:
    def model(x: pf.Tensor) -> pf.Tensor:
        return pf.sum(pf.exp(x), 1)

    fusion = pf.fuse(model).trace(spec((63, 64), bf16))
    script = fusion_to_script(fusion)
    lines = script.splitlines()
    assert lines[0] == "import pyfuse as pf"
    assert "@pf.fuse(name='model')" in lines
    assert "def fusion(T0):" in lines
    body = [line.split("  #")[0].strip() for line in lines if line.startswith("    T")]
    assert body == [
        "T1 = pf.exp(T0)",
        "T2 = pf.cast(T1, pf.float32)",
        "T3 = pf.sum(T2, 1)",
        "T4 = pf.cast(T3, pf.bfloat16)",
    ]
    # Each op names the user's line it was traced at.
    assert f"# {__file__}:" in script
    assert "    pf.spec((63, 64), pf.bfloat16)," in lines
    assert lines[-2:] == ['if __name__ == "__main__":', "    print(fusion.compile(*inputs))"]


def test_script_run_as_main_compiles() -> None:
    fusion = pf.fuse(lambda x, y: x * y + 1).trace(spec((4, 8), f32), spec((8,), f32))
    namespace = {"__name__": "__main__"}
    exec(compile(fusion_to_script(fusion), "<repro>", "exec"), namespace)  # prints Compiled


def test_matmul_params_and_header_lines() -> None:
    fusion = pf.fuse(lambda a, m: a @ m).trace(spec((64, 32), bf16), spec((32, 16), bf16))
    script = fusion_to_script(
        fusion, matmul="pf.MatmulParams(tile_m=64)", header=["a repro", "of a matmul"]
    )
    assert script.startswith("# a repro\n# of a matmul\nimport pyfuse as pf\n")
    namespace = _exec(script)
    assert namespace["fusion"].matmul == pf.MatmulParams(tile_m=64)


def test_internal_dtypes_are_imported() -> None:
    fusion = pf.fuse(lambda x: x * 2).trace(spec((4,), f32))
    fusion.inputs[0].dtype = dtypes.float64  # not exported by pyfuse: spelled dtypes.float64
    script = fusion_to_script(fusion)
    assert "from pyfuse.ir import dtypes" in script
    assert "pf.spec((4,), dtypes.float64)" in script


def test_last_call_replaces_the_outputs() -> None:
    fusion = pf.fuse(lambda x: pf.exp(x)).trace(spec((4,), f32))
    script = fusion_to_script(fusion, last_call="pf.sum(T1, 0)")
    assert "    return pf.sum(T1, 0)" in script.splitlines()
    namespace = _exec(script)
    retraced = namespace["fusion"].trace(*namespace["inputs"])
    assert [expr.op_name for expr in retraced.exprs()] == ["exp", "sum"]


def test_a_pass_expr_has_no_script_call() -> None:
    from pyfuse.ir.exprs import MmaOp

    fusion = pf.fuse(lambda a, m: a @ m).trace(spec((64, 32), bf16), spec((32, 16), bf16))
    (matmul,) = fusion.exprs()
    MmaOp(matmul.output, matmul.inputs[0], matmul.inputs[1])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no pf call makes mma"):
        fusion_to_script(fusion)
