"""The pointwise scheduler's 2-D (break point) schedule: when it is chosen, that a broadcast
input is loaded outside the row loop in the kernel IR, that the kernels match the NumPy
reference on the SIMT simulator at ragged shapes (vectorized and unvectorized variants), and
that their PTX assembles with ptxas."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from check_utils import require_ptxas
from sim_utils import check_fusion

import pyfuse as pf
from pyfuse.backend_ptx import ptxas
from pyfuse.backend_ptx.emit import emit_ptx
from pyfuse.ir import dtypes
from pyfuse.ir import kernel_ir as k
from pyfuse.ir.target import HOPPER, TargetInfo
from pyfuse.ir.tensor import MemoryType
from pyfuse.passes import pipeline, schedule_pointwise
from pyfuse.passes.pipeline import PipelineResult
from pyfuse.passes.schedule_pointwise import MIN_BLOCKS_PER_SM

f32, bf16 = pf.float32, pf.bfloat16
# A GPU of two SMs: small shapes already have enough blocks for several rows per thread.
SMALL_GPU = dataclasses.replace(HOPPER, sm_count=2)
UNVECTORIZED = dataclasses.replace(SMALL_GPU, vector_bytes=1)  # the misaligned-input variant


def add_bias(x: Any, b: Any) -> Any:
    return x + b


def scale_rows(x: Any, s: Any) -> Any:
    return x * s


def scale_and_bias(x: Any, s: Any, b: Any) -> Any:
    return pf.gelu(x.to(pf.float32) * s + b.to(pf.float32)).to(x.dtype)


def compile_result(
    fn: Callable[..., Any], specs: Sequence[pf.Spec], target: TargetInfo = HOPPER
) -> PipelineResult:
    return pipeline.run(pf.fuse(fn).trace(*specs), target)


def params_of(fn: Callable[..., Any], *specs: pf.Spec, target: TargetInfo = HOPPER) -> Any:
    (stages,) = compile_result(fn, specs, target).kernels
    assert stages.plan.scheduler == "pointwise"
    return stages.plan.params


# ---- when the 2-D schedule is chosen ----------------------------------------------------------


@pytest.mark.parametrize(
    ("fn", "specs", "break_point"),
    [
        (add_bias, [pf.spec((1000, 1000), f32), pf.spec((1000,), f32)], 1),
        (add_bias, [pf.spec((129, 4097), bf16), pf.spec((4097,), bf16)], 1),
        (add_bias, [pf.spec((4096, 4096), bf16), pf.spec((4096,), bf16)], 1),
        (add_bias, [pf.spec((7, 1000), f32), pf.spec((1, 1000), f32)], 1),
        (scale_rows, [pf.spec((1000, 1000), f32), pf.spec((1000, 1), f32)], 1),
        (scale_rows, [pf.spec((4096, 4096), bf16), pf.spec((4096, 1), bf16)], 1),
        (
            scale_and_bias,
            [pf.spec((129, 4097), bf16), pf.spec((129, 1), f32), pf.spec((4097,), bf16)],
            1,
        ),
        # 3-D: the break point sits where the broadcast input's axes end.
        (add_bias, [pf.spec((4, 30, 1024), f32), pf.spec((1024,), f32)], 2),
        (scale_rows, [pf.spec((4, 30, 1024), f32), pf.spec((4, 1, 1), f32)], 1),
        (scale_rows, [pf.spec((4, 30, 1024), f32), pf.spec((4, 30, 1), f32)], 2),
        # No broadcast input: flat.
        (lambda x, y: x * y, [pf.spec((1000, 1000), f32), pf.spec((1000, 1000), f32)], 0),
        (lambda x: pf.exp(x), [pf.spec((4096, 4096), bf16)], 0),
        # Broadcast along a middle axis only: neither side of any break point, flat.
        (add_bias, [pf.spec((4, 30, 1024), f32), pf.spec((4, 1, 1024), f32)], 0),
        # Rows too narrow for a block of 128 threads x 4 floats, or too ragged: flat.
        (add_bias, [pf.spec((1000, 64), f32), pf.spec((64,), f32)], 0),
        (add_bias, [pf.spec((1000, 600), f32), pf.spec((600,), f32)], 0),
        # One row: nothing to walk.
        (add_bias, [pf.spec((1, 4096), f32), pf.spec((4096,), f32)], 0),
    ],
)
def test_break_point_choice(fn: Callable[..., Any], specs: list[pf.Spec], break_point: int) -> None:
    assert params_of(fn, *specs)["break_point"] == break_point


def test_rows_per_thread_keep_the_gpu_filled() -> None:
    def rows(shape: tuple[int, int], dtype: pf.DType) -> int:
        params = params_of(add_bias, pf.spec(shape, dtype), pf.spec(shape[1:], dtype))
        assert params["break_point"] == 1
        return int(params["unroll"])

    assert rows((4096, 4096), bf16) == 4  # 1024 x 4 blocks
    assert rows((129, 4097), f32) == 4  # 33 x 33 blocks; one ragged row group
    assert rows((1000, 1000), f32) == 2  # 500 x 2 blocks; 8 rows would leave 250
    assert rows((7, 1000), f32) == 1  # 7 x 2 blocks: every row its own block
    for shape, dtype in [((4096, 4096), bf16), ((1000, 1000), f32), ((129, 4097), f32)]:
        params = params_of(add_bias, pf.spec(shape, dtype), pf.spec(shape[1:], dtype))
        vectors = shape[1] // params["vector_width"]
        col_blocks = -(-vectors // params["threads"])
        row_blocks = -(-shape[0] // params["unroll"])
        assert row_blocks * col_blocks >= MIN_BLOCKS_PER_SM * HOPPER.sm_count


def test_flat_schedule_params_unchanged() -> None:
    params = params_of(lambda x, y: x + y, pf.spec((16384, 4096), f32), pf.spec((16384, 4096), f32))
    assert params == {"vector_width": 4, "threads": 128, "unroll": 4, "break_point": 0}


# ---- the kernel IR: the broadcast input is loaded outside the row loop ------------------------


def _expr_loads(expr: k.KExpr) -> Iterator[k.Load]:
    if isinstance(expr, k.Load):
        yield expr
    for child in vars(expr).values():
        if isinstance(child, k.KExpr):
            yield from _expr_loads(child)


def global_reads(
    body: Sequence[k.Stmt], loops: tuple[k.For, ...] = ()
) -> Iterator[tuple[str, tuple[k.For, ...]]]:
    """(global buffer name, enclosing loops) of every global read in ``body``."""
    for stmt in body:
        if isinstance(stmt, k.VectorLoad) and stmt.source.memory == MemoryType.GLOBAL:
            yield stmt.source.name, loops
        for value in vars(stmt).values():
            if isinstance(value, k.KExpr):
                for load in _expr_loads(value):
                    if load.buffer.memory == MemoryType.GLOBAL:
                        yield load.buffer.name, loops
        inner = (*loops, stmt) if isinstance(stmt, k.For) else loops
        for block in stmt.children():
            yield from global_reads(block, inner)


def param_named_by_shape(kernel: k.Kernel, shape: tuple[int, ...]) -> str:
    (name,) = [
        p.buffer_name
        for p in kernel.params
        if p.role == k.ParamRole.INPUT and tuple(p.shape) == shape
    ]
    return name


def row_loops(loops: tuple[k.For, ...], rows: int) -> list[k.For]:
    return [
        loop
        for loop in loops
        if loop.unroll and isinstance(loop.extent, k.Const) and loop.extent.value == rows
    ]


@pytest.mark.parametrize(
    ("fn", "specs"),
    [
        (add_bias, [pf.spec((64, 1024), f32), pf.spec((1024,), f32)]),
        (add_bias, [pf.spec((64, 1024), bf16), pf.spec((1024,), bf16)]),
        # The bias is cast before it is broadcast: the load and the cast both move out.
        (
            lambda x, b: x.to(pf.float32) + b.to(pf.float32),
            [pf.spec((64, 1000), bf16), pf.spec((1000,), bf16)],
        ),
        (
            scale_and_bias,
            [pf.spec((64, 1024), bf16), pf.spec((64, 1), f32), pf.spec((1024,), bf16)],
        ),
    ],
)
def test_bias_is_loaded_once_per_thread_outside_the_row_loop(
    fn: Callable[..., Any], specs: list[pf.Spec]
) -> None:
    result = compile_result(fn, specs, SMALL_GPU)
    (stages,) = result.kernels
    rows = stages.plan.params["unroll"]
    assert stages.plan.params["break_point"] == 1 and rows > 1
    kernel = stages.kernel_ir
    x_name = param_named_by_shape(kernel, specs[0].shape)
    bias_name = param_named_by_shape(kernel, specs[-1].shape)
    reads = list(global_reads(kernel.body))
    bias_reads = [loops for name, loops in reads if name == bias_name]
    x_reads = [loops for name, loops in reads if name == x_name]
    assert len(bias_reads) == 1 and row_loops(bias_reads[0], rows) == []
    assert len(x_reads) == 1 and len(row_loops(x_reads[0], rows)) == 1
    # Inline positions: tensors broadcast along the row loop (position 3 of
    # [BIDx, BIDy, TIDx, R, V]) stop before it; the rest are inlined inside it.
    fusion = stages.plan.fusion
    hoisted = inside = 0
    for tv in fusion.tensors():
        if tv.memory_type == MemoryType.GLOBAL or len(tv.loop) < 5:
            continue
        if tv.loop[3].is_broadcast:
            assert tv.inline_position <= 3, tv
            hoisted += 1
        else:
            assert tv.inline_position == 4, tv
            inside += 1
    assert hoisted >= 1 and inside >= 1


def test_per_row_scale_is_loaded_once_per_row_not_per_element() -> None:
    # bf16: 8-wide vectors, so the row loop (4) and the vector (8) differ in extent.
    specs = [pf.spec((64, 2048), bf16), pf.spec((64, 1), bf16)]
    (stages,) = compile_result(scale_rows, specs, SMALL_GPU).kernels
    kernel = stages.kernel_ir
    vector = stages.plan.params["vector_width"]
    assert stages.plan.params["break_point"] == 1 and vector == 8
    assert stages.plan.params["unroll"] == 4
    scale_name = param_named_by_shape(kernel, (64, 1))
    scale_reads = [loops for name, loops in global_reads(kernel.body) if name == scale_name]
    assert len(scale_reads) == 1
    # Inside the row loop, but in no loop over the vector's elements.
    extents = [loop.extent.value for loop in scale_reads[0] if isinstance(loop.extent, k.Const)]
    assert stages.plan.params["unroll"] in extents and vector not in extents


def test_flat_schedule_hoists_an_all_broadcast_input_out_of_its_unrolled_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One value broadcast everywhere; the flat schedule unrolls by 4 on a one-SM GPU that asks
    # for only 8 unrolled blocks per SM (the default asks for more than a simulator runs).
    monkeypatch.setattr(schedule_pointwise, "FLAT_MIN_UNROLLED_BLOCKS_PER_SM", 8)
    specs = [pf.spec((64, 1024), f32), pf.spec((1, 1), f32)]
    result = check_on_simulator(add_bias, specs, dataclasses.replace(HOPPER, sm_count=1))
    (stages,) = result.kernels
    assert stages.plan.params["break_point"] == 0 and stages.plan.params["unroll"] == 4
    kernel = stages.kernel_ir
    scalar_name = param_named_by_shape(kernel, (1, 1))
    (loops,) = [loops for name, loops in global_reads(kernel.body) if name == scalar_name]
    assert row_loops(loops, 4) == []


# ---- results on the simulator -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "dtype", "unroll"),
    [
        # bf16 vectors hold 8 elements; 16 per thread means an unroll of 2, taken only when
        # every SM of the H200 (132) gets 128 such blocks of 128 threads.
        ((4096, 4096), dtypes.bfloat16, 1),
        ((8192, 4096), dtypes.bfloat16, 1),
        ((16384, 4096), dtypes.bfloat16, 2),
        # f32 vectors hold 4: unroll 4 at 2^27 elements, 2 where only that has enough blocks.
        ((1 << 27,), dtypes.float32, 4),
        ((1 << 25,), dtypes.float32, 2),
        ((1 << 22,), dtypes.float32, 1),
        ((1000,), dtypes.float32, 1),
    ],
)
def test_flat_unroll_follows_the_number_of_blocks(
    shape: tuple[int, ...], dtype: dtypes.DType, unroll: int
) -> None:
    specs = [pf.spec(shape, dtype)] * 2
    fusion = pf.fuse(lambda x, y: pf.gelu(x * y)).trace(*specs)
    (stages,) = pipeline.run(fusion, HOPPER).kernels
    assert stages.plan.params["break_point"] == 0
    assert stages.plan.params["unroll"] == unroll


def check_on_simulator(
    fn: Callable[..., Any],
    specs: Sequence[pf.Spec],
    target: TargetInfo,
    *,
    tolerance: float = 1e-5,
    seed: int = 0,
) -> PipelineResult:
    return check_fusion(fn, specs, seed=seed, rtol=tolerance, atol=tolerance, target=target)


SIM_CASES = [
    ("bias", add_bias, lambda m, n, dt: [pf.spec((m, n), dt), pf.spec((n,), dt)]),
    ("scale", scale_rows, lambda m, n, dt: [pf.spec((m, n), dt), pf.spec((m, 1), dt)]),
    (
        "scale-bias",
        scale_and_bias,
        lambda m, n, dt: [pf.spec((m, n), dt), pf.spec((m, 1), f32), pf.spec((n,), dt)],
    ),
]


@pytest.mark.parametrize("shape", [(7, 1000), (129, 4097), (61, 1024), (1000, 1000)])
@pytest.mark.parametrize("dtype", [f32, bf16], ids=["f32", "bf16"])
@pytest.mark.parametrize(("name", "fn", "make_specs"), SIM_CASES, ids=[c[0] for c in SIM_CASES])
@pytest.mark.parametrize("target", [SMALL_GPU, UNVECTORIZED, HOPPER], ids=["small", "v1", "h"])
def test_matches_reference_at_ragged_shapes(
    shape: tuple[int, int],
    dtype: pf.DType,
    name: str,
    fn: Callable[..., Any],
    make_specs: Callable[[int, int, pf.DType], list[pf.Spec]],
    target: TargetInfo,
) -> None:
    specs = make_specs(*shape, dtype)
    tolerance = 1.6e-2 if dtype == bf16 else 1e-5
    result = check_on_simulator(fn, specs, target, tolerance=tolerance)
    (stages,) = result.kernels
    params = stages.plan.params
    if target is UNVECTORIZED:
        assert params["vector_width"] == 1
    if shape == (129, 4097):
        assert params["break_point"] == 1  # ragged rows and columns, every variant
        if target is not HOPPER:
            assert params["unroll"] == 4


def test_three_dimensional_break_points_on_the_simulator() -> None:
    for fn, specs in [
        (add_bias, [pf.spec((3, 43, 1024), f32), pf.spec((1024,), f32)]),
        (scale_rows, [pf.spec((3, 43, 1024), f32), pf.spec((3, 1, 1), f32)]),
        (scale_rows, [pf.spec((5, 9, 1000), bf16), pf.spec((5, 9, 1), bf16)]),
    ]:
        result = check_on_simulator(fn, specs, SMALL_GPU, tolerance=1.6e-2)
        assert result.kernels[0].plan.params["break_point"] > 0


def test_two_outputs_share_the_2d_schedule() -> None:
    check_on_simulator(
        lambda x, b: (x + b, pf.relu(x) * b),
        [pf.spec((33, 1024), f32), pf.spec((1024,), f32)],
        SMALL_GPU,
    )


# ---- index width and ptxas --------------------------------------------------------------------


def test_64_bit_indexing_only_when_sizes_need_it() -> None:
    big = compile_result(add_bias, [pf.spec((2**16 + 1, 2**15), bf16), pf.spec((2**15,), bf16)])
    small = compile_result(add_bias, [pf.spec((4096, 4096), bf16), pf.spec((4096,), bf16)])
    assert big.kernels[0].plan.params["break_point"] == 1
    assert big.kernels[0].kernel_ir.index_dtype == dtypes.int64
    assert small.kernels[0].kernel_ir.index_dtype == dtypes.int32


@pytest.mark.parametrize(
    ("fn", "specs", "target"),
    [
        (add_bias, [pf.spec((4096, 4096), bf16), pf.spec((4096,), bf16)], HOPPER),
        (add_bias, [pf.spec((129, 4097), f32), pf.spec((4097,), f32)], HOPPER),
        (scale_rows, [pf.spec((1000, 1000), bf16), pf.spec((1000, 1), bf16)], HOPPER),
        (
            scale_and_bias,
            [pf.spec((4096, 4096), bf16), pf.spec((4096, 1), f32), pf.spec((4096,), bf16)],
            HOPPER,
        ),
        (add_bias, [pf.spec((1000, 1000), bf16), pf.spec((1000,), bf16)], UNVECTORIZED),
        (add_bias, [pf.spec((2**16 + 1, 2**15), bf16), pf.spec((2**15,), bf16)], HOPPER),
    ],
)
def test_2d_kernels_assemble_clean(
    fn: Callable[..., Any], specs: list[pf.Spec], target: TargetInfo
) -> None:
    require_ptxas()
    (stages,) = compile_result(fn, specs, target).kernels
    assert stages.plan.params["break_point"] == 1
    kernel = stages.kernel_ir
    result = ptxas.assemble(emit_ptx(kernel, target))
    assert result.problems() == [], "\n".join(result.problems())
    assert result.kernel(kernel.name).registers > 0
