"""The kernel-IR interpreter on hand-built kernels: results against NumPy, and every bug it is
meant to catch (out of bounds, divergent barriers, non-uniform register indices, ...)."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt
import pytest

from pyfuse.errors import InputError
from pyfuse.ir import dtypes
from pyfuse.ir import kernel_ir as kir
from pyfuse.ir.dtypes import DType
from pyfuse.ir.kernel_interpreter import KernelInterpreterError, launch, run_kernel
from pyfuse.ir.tensor import MemoryType

Array = npt.NDArray[Any]
i32 = dtypes.int32
f32 = dtypes.float32

TID_X = kir.Special(kir.SpecialKind.TID_X)
TID_Y = kir.Special(kir.SpecialKind.TID_Y)
CTAID_X = kir.Special(kir.SpecialKind.CTAID_X)


def c(value: int) -> kir.Const:
    return kir.Const(value, i32)


def gbuf(name: str, dtype: DType = f32) -> kir.Buffer:
    return kir.Buffer(name, dtype, MemoryType.GLOBAL)


def make_kernel(
    body: list[kir.Stmt],
    buffers: list[kir.Buffer],
    grid: int | tuple[int, int, int],
    block: int | tuple[int, int, int],
    smem_bytes: int = 0,
) -> kir.Kernel:
    grid3 = (grid, 1, 1) if isinstance(grid, int) else grid
    block3 = (block, 1, 1) if isinstance(block, int) else block
    by_name = {buffer.name: buffer for buffer in buffers}
    return kir.Kernel("k", [], by_name, body, grid3, block3, smem_bytes)


def global_index(block_x: int) -> kir.Let:
    """``i = ctaid.x * block_x + tid.x``."""
    value = kir.add(kir.mul(CTAID_X, c(block_x)), TID_X)
    return kir.Let(kir.Var("i", i32), value)


INDEX = kir.Var("i", i32)


def load(buffer: kir.Buffer, index: kir.KExpr) -> kir.Load:
    return kir.Load(buffer, index, buffer.dtype)


def elementwise_add(n: int, guarded: bool) -> tuple[kir.Kernel, dict[str, Array]]:
    a, b, out = gbuf("a"), gbuf("b"), gbuf("out")
    store: kir.Stmt = kir.Store(out, INDEX, kir.Binary("add", load(a, INDEX), load(b, INDEX), f32))
    if guarded:
        store = kir.If(kir.less_than(INDEX, c(n)), [store])
    kernel = make_kernel([global_index(128), store], [a, b, out], grid=8, block=128)
    rng = np.random.default_rng(0)
    arrays = {
        "a": rng.standard_normal(n).astype(np.float32),
        "b": rng.standard_normal(n).astype(np.float32),
        "out": np.zeros(n, np.float32),
    }
    return kernel, arrays


# ---- results against NumPy -----------------------------------------------------------------


def test_elementwise_add_with_ragged_guard() -> None:
    kernel, arrays = elementwise_add(1000, guarded=True)  # 1024 threads for 1000 elements
    run_kernel(kernel, arrays)
    np.testing.assert_array_equal(arrays["out"], arrays["a"] + arrays["b"])


def test_loop_nest_with_floordiv_and_mod_transposes() -> None:
    # 12 threads x 3 x 5 iterations cover the 180 elements of x[15, 12]; y = x.T.
    x, y = gbuf("x"), gbuf("y")
    outer, inner = kir.Var("o", i32, extent=3), kir.Var("k", i32, extent=5)
    linear = kir.Var("linear", i32)
    thread_start = kir.mul(INDEX, c(3))
    row, col = kir.floordiv(linear, c(12)), kir.mod(linear, c(12))
    body: list[kir.Stmt] = [
        global_index(4),
        kir.For(outer, c(3), [
            kir.For(inner, c(5), [
                kir.Let(linear, kir.add(kir.mul(kir.add(thread_start, outer), c(5)), inner)),
                kir.Store(y, kir.add(kir.mul(col, c(15)), row), load(x, linear)),
            ], unroll=True),
        ]),
    ]  # fmt: skip
    kernel = make_kernel(body, [x, y], grid=3, block=4)
    source = np.arange(180, dtype=np.float32).reshape(15, 12)
    target = np.zeros((12, 15), np.float32)
    run_kernel(kernel, {"x": source, "y": target})
    np.testing.assert_array_equal(target, source.T)


def test_nested_if_masks_and_together() -> None:
    out = gbuf("out", i32)
    below_six = kir.Binary("lt", TID_X, c(6), dtypes.bool_)
    from_two = kir.Binary("ge", TID_X, c(2), dtypes.bool_)
    body: list[kir.Stmt] = [
        kir.If(
            below_six,
            [kir.If(from_two, [kir.Store(out, TID_X, c(1))], [kir.Store(out, TID_X, c(2))])],
            [kir.Store(out, TID_X, c(3))],
        )
    ]
    target = np.zeros(8, np.int32)
    run_kernel(make_kernel(body, [out], grid=1, block=8), {"out": target})
    np.testing.assert_array_equal(target, [2, 2, 1, 1, 1, 1, 3, 3])


def vector_copy_kernel(offset: int) -> kir.Kernel:
    src, out = gbuf("src"), gbuf("out")
    registers = kir.Buffer("r", f32, MemoryType.LOCAL, size=4)
    start = kir.add(kir.mul(TID_X, c(4)), c(offset))
    body: list[kir.Stmt] = [
        kir.Alloc(registers),
        kir.VectorLoad(registers, c(0), src, start, 4),
        kir.VectorStore(out, kir.mul(TID_X, c(4)), registers, c(0), 4),
    ]
    return make_kernel(body, [src, out], grid=1, block=16)


def test_vector_copy() -> None:
    src, out = np.arange(66, dtype=np.float32), np.zeros(64, np.float32)
    run_kernel(vector_copy_kernel(0), {"src": src, "out": out})
    np.testing.assert_array_equal(out, src[:64])


def test_misaligned_vector_load_raises() -> None:
    src, out = np.arange(66, dtype=np.float32), np.zeros(64, np.float32)
    with pytest.raises(KernelInterpreterError, match=r"offset 2 into src is not a multiple of 4"):
        run_kernel(vector_copy_kernel(2), {"src": src, "out": out})


@pytest.mark.parametrize("op", ["sum", "max"])
@pytest.mark.parametrize(("threads", "block"), [(32, (32, 4, 1)), (128, (128, 2, 1))])
def test_row_reduction_with_thread_reduce(
    op: str, threads: int, block: tuple[int, int, int]
) -> None:
    rows, cols = 16, 4 * threads  # each thread accumulates 4 columns first
    x, out = gbuf("x"), gbuf("out")
    groups_per_row_of_threads = block[0] // threads
    row = kir.add(
        kir.mul(kir.add(kir.mul(CTAID_X, c(block[1])), TID_Y), c(groups_per_row_of_threads)),
        kir.floordiv(TID_X, c(threads)),
    )
    lane_col = kir.mod(TID_X, c(threads))
    r, acc, k = kir.Var("row", i32), kir.Var("acc", f32), kir.Var("k", i32, extent=4)
    combine = "add" if op == "sum" else "maximum"
    # Across warps the reduction goes through shared memory (one slot per warp, no Alloc).
    workspace = None
    if threads > 32:
        workspace = kir.Buffer("workspace", f32, MemoryType.SHARED, size=block[0] // 32)
    smem_bytes = 0 if workspace is None else workspace.size * 4
    element = load(x, kir.add(kir.mul(r, c(cols)), kir.add(kir.mul(k, c(threads)), lane_col)))
    body: list[kir.Stmt] = [
        kir.Let(r, row),
        kir.Let(acc, kir.Const(0.0 if op == "sum" else -np.inf, f32)),
        kir.For(k, c(4), [kir.Assign(acc, kir.Binary(combine, acc, element, f32))]),
        kir.ThreadReduce(acc, op, threads, workspace),
        # Every thread of a group stores the same value: not a race.
        kir.Store(out, r, acc),
    ]
    grid = rows // (block[1] * groups_per_row_of_threads)
    kernel = make_kernel(body, [x, out], grid=grid, block=block, smem_bytes=smem_bytes)
    data = np.random.default_rng(1).standard_normal((rows, cols)).astype(np.float32)
    result = np.zeros(rows, np.float32)
    run_kernel(kernel, {"x": data, "out": result})
    expected = data.sum(axis=1) if op == "sum" else data.max(axis=1)
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-5)


def test_shared_memory_round_trip_with_sync() -> None:
    # Each block reverses its 64 elements through shared memory.
    x, out = gbuf("x"), gbuf("out")
    tile = kir.Buffer("tile", f32, MemoryType.SHARED, size=64, smem_offset=256)
    body: list[kir.Stmt] = [
        global_index(64),
        kir.Alloc(tile),
        kir.Store(tile, TID_X, load(x, INDEX)),
        kir.Sync(),
        kir.Store(out, INDEX, load(tile, kir.Binary("sub", c(63), TID_X, i32))),
    ]
    kernel = make_kernel(body, [x, out], grid=2, block=64, smem_bytes=512)
    source, target = np.arange(128, dtype=np.float32), np.zeros(128, np.float32)
    run_kernel(kernel, {"x": source, "out": target})
    np.testing.assert_array_equal(target, source.reshape(2, 64)[:, ::-1].reshape(-1))


def test_cast_to_bf16_rounds_to_nearest_even() -> None:
    x, out = gbuf("x"), gbuf("out", dtypes.bfloat16)
    body: list[kir.Stmt] = [
        kir.Store(out, TID_X, kir.Cast(load(x, TID_X), dtypes.bfloat16)),
    ]
    kernel = make_kernel(body, [x, out], grid=1, block=4)
    # bf16 keeps 7 mantissa bits: 1 + 2**-8 is a tie (to even: 1), 1 + 3 * 2**-8 rounds up.
    source = np.array([1 + 2**-9, 1 + 2**-8, 1 + 3 * 2**-8, -3.0 - 2**-7], np.float32)
    target = np.zeros(4, ml_dtypes.bfloat16)
    run_kernel(kernel, {"x": source, "out": target})
    expected = np.array([1.0, 1.0, 1 + 2**-6, -3.0], np.float32)
    np.testing.assert_array_equal(target.astype(np.float32), expected)


def test_cast_float_to_int_truncates_and_saturates() -> None:
    x, out = gbuf("x"), gbuf("out", i32)
    kernel = make_kernel(
        [kir.Store(out, TID_X, kir.Cast(load(x, TID_X), i32))], [x, out], grid=1, block=4
    )
    source = np.array([2.7, -2.7, np.nan, 1e20], np.float32)
    target = np.zeros(4, np.int32)
    run_kernel(kernel, {"x": source, "out": target})
    np.testing.assert_array_equal(target, [2, -2, 0, 2**31 - 1])


def test_launch_binds_params_by_role_and_index() -> None:
    kernel, _ = elementwise_add(1000, guarded=True)
    kernel.params = [
        kir.TensorParam("b", f32, kir.ParamRole.INPUT, 1, (10, 100)),
        kir.TensorParam("a", f32, kir.ParamRole.INPUT, 0, (10, 100)),
        kir.TensorParam("out", f32, kir.ParamRole.OUTPUT, 0, (10, 100)),
    ]
    a = np.ones((10, 100), np.float32)
    b = np.full((10, 100), 2.0, np.float32)
    out = np.zeros((10, 100), np.float32)
    launch(kernel, [a, b], [out])
    np.testing.assert_array_equal(out, 3.0)
    with pytest.raises(InputError, match=r"expected float32\[10, 100\], got float32\[1000\]"):
        launch(kernel, [a, b], [np.zeros(1000, np.float32)])
    # Inputs are bound read-only: a kernel that writes one is caught.
    kernel.params[2] = kir.TensorParam("out", f32, kir.ParamRole.INPUT, 2, (10, 100))
    with pytest.raises(KernelInterpreterError, match="read-only buffer out"):
        launch(kernel, [a, b, out], [])


# ---- the bugs it catches -------------------------------------------------------------------


def test_out_of_bounds_store_is_reported() -> None:
    kernel, arrays = elementwise_add(1000, guarded=False)
    with pytest.raises(KernelInterpreterError) as error:
        run_kernel(kernel, arrays)
    message = str(error.value)
    # The loads come first: thread 1000 (block 7, thread 104) reads a[1000].
    assert "load from a[1000] is out of bounds: global buffer a has 1000 elements" in message
    assert "block (7, 0, 0), thread (104, 0, 0)" in message
    out = gbuf("out")
    store = kir.Store(out, kir.add(TID_X, c(1)), kir.Const(1.0, f32))
    with pytest.raises(KernelInterpreterError, match=r"store to out\[8\] is out of bounds"):
        run_kernel(make_kernel([store], [out], 1, 8), {"out": np.zeros(8, np.float32)})


def test_non_uniform_local_index_is_reported() -> None:
    registers = kir.Buffer("r", f32, MemoryType.LOCAL, size=4)
    body: list[kir.Stmt] = [
        kir.Alloc(registers),
        kir.Store(registers, kir.mod(TID_X, c(4)), kir.Const(1.0, f32)),
    ]
    with pytest.raises(KernelInterpreterError, match="index into local buffer r must be the same"):
        run_kernel(make_kernel(body, [registers], 1, 8), {})


def test_divergent_sync_is_reported() -> None:
    divergent = kir.If(kir.Binary("lt", TID_X, c(32), dtypes.bool_), [kir.Sync()])
    with pytest.raises(KernelInterpreterError, match="sync reached by 32 of 64 threads"):
        run_kernel(make_kernel([divergent], [], 2, 64), {})
    # A condition uniform over each block is fine: block 1 skips the barrier entirely.
    uniform = kir.If(kir.Binary("eq", CTAID_X, c(0), dtypes.bool_), [kir.Sync()])
    run_kernel(make_kernel([uniform], [], 2, 64), {})


def test_divergent_thread_reduce_is_reported() -> None:
    acc = kir.Var("acc", f32)
    body: list[kir.Stmt] = [
        kir.Let(acc, kir.Const(1.0, f32)),
        kir.If(kir.Binary("lt", TID_X, c(16), dtypes.bool_), [kir.ThreadReduce(acc, "sum", 32)]),
    ]
    with pytest.raises(KernelInterpreterError, match="thread_reduce reached by 16 of 32"):
        run_kernel(make_kernel(body, [], 1, 32), {})


def test_write_race_is_reported() -> None:
    out = gbuf("out", i32)
    store = kir.Store(out, c(0), TID_X)
    with pytest.raises(KernelInterpreterError, match="write race"):
        run_kernel(make_kernel([store], [out], 1, 4), {"out": np.zeros(1, np.int32)})


def test_undefined_variable_is_reported() -> None:
    value = kir.Var("v", i32)
    out = gbuf("out", i32)
    body: list[kir.Stmt] = [
        kir.If(kir.Binary("lt", TID_X, c(2), dtypes.bool_), [kir.Let(value, TID_X)]),
        kir.Store(out, TID_X, value),
    ]
    with pytest.raises(KernelInterpreterError, match=r"v is read before.*thread \(2, 0, 0\)"):
        run_kernel(make_kernel(body, [out], 1, 4), {"out": np.zeros(4, np.int32)})


def test_non_uniform_loop_extent_is_reported() -> None:
    loop = kir.For(kir.Var("j", i32), TID_X, [])
    with pytest.raises(KernelInterpreterError, match="loop extent must be the same"):
        run_kernel(make_kernel([loop], [], 1, 4), {})


def test_special_extent_smaller_than_launch_is_reported() -> None:
    out = gbuf("out", i32)
    store = kir.Store(out, c(0), kir.Special(kir.SpecialKind.TID_X, extent=2))
    with pytest.raises(KernelInterpreterError, match="declares extent 2 but the launch has 4"):
        run_kernel(make_kernel([store], [out], 1, 4), {"out": np.zeros(1, np.int32)})


def test_integer_math_wraps_and_divides_like_c() -> None:
    out = gbuf("out", i32)
    big = kir.Const(2**31 - 1, i32)
    minus_seven = kir.Const(-7, i32)
    values = [
        kir.Binary("add", big, c(1), i32),  # wraps to -2**31
        kir.Binary("floordiv", minus_seven, c(2), i32),  # C: -3, not -4
        kir.Binary("mod", minus_seven, c(2), i32),  # C: -1, not 1
    ]
    body: list[kir.Stmt] = [kir.Store(out, c(index), v) for index, v in enumerate(values)]
    target = np.zeros(3, np.int32)
    run_kernel(make_kernel(body, [out], 1, 1), {"out": target})
    np.testing.assert_array_equal(target, [-(2**31), -3, -1])


def _sigmoid(v: float) -> float:
    return 1 / (1 + math.exp(-v))


def _relu(v: float) -> float:
    return max(v, 0.0)


def _gelu(v: float) -> float:
    return 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0)))


def _gelu_tanh(v: float) -> float:
    return 0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3)))


def _silu(v: float) -> float:
    return v * _sigmoid(v)


def _rsqrt(v: float) -> float:
    return 1 / math.sqrt(v)


def _reciprocal(v: float) -> float:
    return 1 / v


# Scalar references in float64 from the math module, independent of the interpreter's NumPy.
UNARY_REFERENCES: dict[str, Callable[[float], float]] = {
    "neg": operator.neg, "abs": abs, "exp": math.exp, "log": math.log, "tanh": math.tanh,
    "sigmoid": _sigmoid, "relu": _relu, "gelu": _gelu, "gelu_tanh": _gelu_tanh, "silu": _silu,
    "sqrt": math.sqrt, "rsqrt": _rsqrt, "reciprocal": _reciprocal, "sin": math.sin,
    "cos": math.cos,
}  # fmt: skip


@pytest.mark.parametrize("dtype", [f32, dtypes.bfloat16])
@pytest.mark.parametrize("op", sorted(UNARY_REFERENCES))
def test_unary_math_rounds_to_the_node_dtype(op: str, dtype: DType) -> None:
    x, out = gbuf("x", dtype), gbuf("out", dtype)
    value = kir.Unary(op, load(x, TID_X), dtype)
    kernel = make_kernel([kir.Store(out, TID_X, value)], [x, out], grid=1, block=8)
    source = np.array([0.1, 0.5, 1.0, 1.7, 2.3, 3.9, 0.01, 7.5]).astype(dtype.numpy())
    target = np.zeros(8, dtype.numpy())
    run_kernel(kernel, {"x": source, "out": target})
    reference = [UNARY_REFERENCES[op](float(v)) for v in source.astype(np.float64)]
    expected = np.array(reference, np.float32).astype(dtype.numpy())
    np.testing.assert_allclose(target.astype(np.float64), expected.astype(np.float64), rtol=1e-6)


def test_binary_math_propagates_nan_and_compares() -> None:
    x, y = gbuf("x"), gbuf("y")
    minimum, less = gbuf("minimum"), gbuf("less", dtypes.bool_)
    lhs, rhs = load(x, TID_X), load(y, TID_X)
    body: list[kir.Stmt] = [
        kir.Store(minimum, TID_X, kir.Binary("minimum", lhs, rhs, f32)),
        kir.Store(less, TID_X, kir.Binary("lt", lhs, rhs, dtypes.bool_)),
    ]
    kernel = make_kernel(body, [x, y, minimum, less], grid=1, block=3)
    arrays = {
        "x": np.array([1.0, np.nan, -2.0], np.float32),
        "y": np.array([0.5, 3.0, np.nan], np.float32),
        "minimum": np.zeros(3, np.float32),
        "less": np.zeros(3, np.bool_),
    }
    run_kernel(kernel, arrays)
    np.testing.assert_array_equal(arrays["minimum"], [0.5, np.nan, np.nan])
    np.testing.assert_array_equal(arrays["less"], [False, False, False])
