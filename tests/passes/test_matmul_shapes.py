"""Valid matmul fusions of every shape compile (issue 14): narrow or odd N and K on the tensor
cores (a smaller swizzle per operand), one input read as both operands, epilogue views of the
result (split heads, a transposed output), and the shapes that are no tensor-core matmul (M,
N or K of 1, loads TMA cannot make) decomposed into multiply + sum and checked on the
simulator. Tensor-core kernels cannot run on the CPU: they are assembled with ptxas, and
their operand layouts and epilogue store offsets are checked against what they must be."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import pyfuse as pf
from pyfuse.backend_ptx import matmul_host, ptxas
from pyfuse.ir import kernel_ir as k
from pyfuse.ir.target import HOPPER
from pyfuse.passes import pipeline
from pyfuse.passes.split_k import split_k
from tests.check_utils import require_ptxas
from tests.sim_utils import check_fusion, random_inputs, run_on_simulator

S = pf.spec
bf16 = pf.bfloat16


def _heads(x: Any, w: Any) -> Any:
    return pf.transpose(pf.reshape(pf.linear(x, w), (2, 64, 4, 32)), 1, 2)


# name -> (function, specs, the B operand's swizzle bytes, tile_n)
TENSOR_CORE: dict[str, tuple[Callable[..., Any], list[pf.Spec], int, int]] = {
    "mm_4096x16": (lambda a, b: a @ b, [S((4096, 4096), bf16), S((4096, 16), bf16)], 32, 16),
    "mm_128x64x40": (lambda a, b: a @ b, [S((128, 64), bf16), S((64, 40), bf16)], 32, 48),
    "mm_N96": (lambda a, b: a @ b, [S((256, 128), bf16), S((128, 96), bf16)], 64, 96),
    "tn_N96": (lambda a, b: a.T @ b, [S((128, 256), bf16), S((128, 96), bf16)], 64, 96),
    "mm_N96_f16": (
        lambda a, b: a @ b,
        [S((256, 128), pf.float16), S((128, 96), pf.float16)],
        64,
        96,
    ),
    "mm_N24": (lambda a, b: a @ b, [S((200, 72), bf16), S((72, 24), bf16)], 64, 32),
    "mm_N8": (lambda a, b: a @ b, [S((128, 256), bf16), S((256, 8), bf16)], 32, 16),
    "linear_N40": (lambda x, w: pf.linear(x, w), [S((128, 64), bf16), S((40, 64), bf16)], 128, 40),
    "K40": (lambda a, b: a @ b, [S((128, 40), bf16), S((40, 128), bf16)], 128, 128),
    "residual": (
        lambda x, w: pf.linear(x, w) + x,
        [S((128, 128), bf16), S((128, 128), bf16)],
        128,
        128,
    ),
    "linear_heads": (_heads, [S((2, 64, 128), bf16), S((128, 128), bf16)], 128, 128),
    # Less than a wave of tiles: 64x128 tiles instead of one (or three) of 128x256.
    "transposed_output": (
        lambda a, b: (a @ b).T,
        [S((128, 64), bf16), S((64, 256), bf16)],
        128,
        128,
    ),
    "batched_b_long_k": (
        lambda a, b: a @ b,
        [S((3, 64, 4096), bf16), S((3, 4096, 256), bf16)],
        128,
        128,
    ),
}


def _compile(fn: Callable[..., Any], specs: list[pf.Spec], params: Any = None) -> pf.Compiled:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pf.fuse(fn, matmul=params).compile(*specs)


def _matmul_kernel(compiled: pf.Compiled) -> k.Kernel:
    return next(kernel for kernel in compiled.kernels if kernel.scheduler == "matmul").kernel_ir


def _main_loop(compiled: pf.Compiled) -> k.MatmulMainLoop:
    return matmul_host.find_main_loop(_matmul_kernel(compiled))


@pytest.mark.parametrize("name", sorted(TENSOR_CORE))
def test_narrow_and_odd_shapes_take_the_tensor_cores(name: str) -> None:
    fn, specs, b_swizzle, tile_n = TENSOR_CORE[name]
    compiled = _compile(fn, specs)
    loop = _main_loop(compiled)
    assert loop.tile_n == tile_n
    layouts = [matmul_host.operand_layout(loop, operand) for operand in loop.operands]
    (b_layout,) = [layout for layout in layouts if layout.role == "n"]
    assert b_layout.swizzle.span_bytes == b_swizzle
    # The tensor map takes the descriptor's swizzle.
    plans = matmul_host.tensor_map_plans(_matmul_kernel(compiled))
    operand_plans = plans[: len(loop.operands)]
    assert [plan.swizzle for plan in operand_plans] == [layout.swizzle for layout in layouts]
    require_ptxas()
    for kernel in compiled.kernels:
        result = ptxas.assemble(kernel.ptx)
        assert result.problems() == [], result.problems()


def test_narrow_mn_major_b_layouts_follow_the_ptx_canonical_layouts() -> None:
    """An N-major B of 96 columns: three 64-byte-swizzled boxes of 32 columns; LBO steps a
    box, SBO 8 K rows of 64 bytes, a k16 step 16 rows. N = 16: one 32-byte box."""
    b96 = _layout("mm_N96")
    assert (b96.copies, b96.box_bytes, b96.lbo, b96.sbo) == (3, 64 * 64, 64 * 64, 512)
    assert b96.k_steps == (0, 1024, 2048, 3072) and not b96.k_major
    b16 = _layout("mm_4096x16")
    assert (b16.copies, b16.box_bytes, b16.lbo, b16.sbo) == (1, 32 * 64, 32 * 64, 256)
    assert b16.k_steps == (0, 512, 1024, 1536)


def _layout(name: str) -> matmul_host.OperandLayout:
    fn, specs, _, _ = TENSOR_CORE[name]
    loop = _main_loop(_compile(fn, specs))
    (layout,) = [
        layout
        for layout in (matmul_host.operand_layout(loop, operand) for operand in loop.operands)
        if layout.role == "n"
    ]
    return layout


# One input as both operands: the tensor-core kernel faulted with a misaligned address on
# the H200 (2026-12-01), so decompose_unschedulable_mmas runs these as multiply+sum for now.
SAME_INPUT = {
    "mm_aa": (lambda a: a @ a, [S((128, 128), bf16)]),
    "mm_aa96": (lambda a: a @ a, [S((96, 96), bf16)]),
    "x@x.T": (lambda x: x @ x.T, [S((256, 128), bf16)]),
    "x.T@x": (lambda x: x.T @ x, [S((256, 128), bf16)]),
}


@pytest.mark.parametrize("name", sorted(SAME_INPUT))
def test_one_input_as_both_operands_runs_as_multiply_sum(name: str) -> None:
    fn, specs = SAME_INPUT[name]
    compiled = _compile(fn, specs)
    assert "matmul" not in [kernel.scheduler for kernel in compiled.kernels]


# ---- epilogue store offsets ------------------------------------------------------------------

_INDEX_OPS = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "floordiv": np.floor_divide,
    "mod": np.mod,
}


def _evaluate(expr: k.KExpr, env: dict[k.Var, np.ndarray]) -> np.ndarray:
    if isinstance(expr, k.Const):
        return np.asarray(expr.value, np.int64)
    if isinstance(expr, k.Var):
        return env[expr]
    if isinstance(expr, k.Cast):
        return _evaluate(expr.operand, env)
    assert isinstance(expr, k.Binary), expr
    return np.asarray(_INDEX_OPS[expr.op](_evaluate(expr.lhs, env), _evaluate(expr.rhs, env)))


def _output_stores(stmts: list[k.Stmt], name: str) -> list[k.Store | k.VectorStore]:
    found: list[k.Store | k.VectorStore] = []
    for stmt in stmts:
        target = stmt.buffer if isinstance(stmt, k.Store) else None
        if isinstance(stmt, k.VectorStore):
            target = stmt.target
        if target is not None and target.name == name:
            found.append(stmt)  # type: ignore[arg-type]
        elif isinstance(stmt, k.If):
            found += _output_stores(stmt.then, name) + _output_stores(stmt.orelse, name)
    return found


@pytest.mark.parametrize(
    ("name", "view", "paired"),
    [
        ("linear_heads", lambda ids: ids.reshape(2, 64, 4, 32).transpose(0, 2, 1, 3), True),
        ("transposed_output", lambda ids: ids.T, False),
        ("mm_N96", lambda ids: ids, True),
    ],
)
def test_epilogue_stores_every_element_where_the_view_puts_it(
    name: str, view: Callable[[np.ndarray], np.ndarray], paired: bool
) -> None:
    """Every accumulator element (row, col), and with a paired store col + 1 too, lands at the
    offset of the output that the user's reshape/transpose gives it (stores from registers;
    the TMA-stored epilogue is checked on the simulator)."""
    fn, specs, _, _ = TENSOR_CORE[name]
    compiled = _compile(fn, specs, pf.MatmulParams(smem_epilogue=False))
    kernel = _matmul_kernel(compiled)
    loop = matmul_host.find_main_loop(kernel)
    assert (loop.pair_col is not None) == paired
    output = next(p.buffer_name for p in kernel.params if p.role == k.ParamRole.OUTPUT)
    (store,) = _output_stores(loop.epilogue, output)
    rows = np.arange(loop.m)[:, None]
    cols = np.arange(0, loop.n, 2 if paired else 1)[None, :]
    env = {loop.row: rows, loop.col: cols, loop.batch_index: np.zeros((1, 1), np.int64)}
    index = store.target_index if isinstance(store, k.VectorStore) else store.index
    offsets = np.broadcast_to(_evaluate(index, env), (rows.size, cols.size))
    expected = np.ascontiguousarray(view(np.arange(loop.m * loop.n).reshape(loop.m, loop.n)))
    np.testing.assert_array_equal(expected.reshape(-1)[offsets], rows * loop.n + cols)
    if paired:
        np.testing.assert_array_equal(expected.reshape(-1)[offsets + 1], rows * loop.n + cols + 1)


# ---- shapes that are no tensor-core matmul: multiply + sum on the simulator -----------------

DECOMPOSED: dict[str, tuple[Callable[..., Any], list[pf.Spec]]] = {
    "mm_K1": (lambda a, b: a @ b, [S((128, 1), bf16), S((1, 128), bf16)]),
    "mm_K1_cols": (lambda a, b: a @ b, [S((128, 1), bf16), S((1, 96), bf16)]),
    "tn_K1": (lambda a, b: a.T @ b, [S((1, 64), bf16), S((1, 48), bf16)]),
    "linear_K1": (lambda x, w: pf.linear(x, w), [S((64, 1), bf16), S((48, 1), bf16)]),
    "bmm_K1": (lambda a, b: a @ b, [S((3, 32, 1), bf16), S((1, 40), bf16)]),
    "decode_linear": (lambda x, w: pf.linear(x, w), [S((1, 512), bf16), S((256, 512), bf16)]),
    "decode_linear_bias": (
        lambda x, w, b: pf.linear(x, w, b),
        [S((1, 512), bf16), S((256, 512), bf16), S((256,), bf16)],
    ),
    "decode_batched": (lambda x, w: pf.linear(x, w), [S((1, 1, 256), bf16), S((64, 256), bf16)]),
    "matvec_rows": (lambda a, b: a @ b, [S((1, 256), bf16), S((256, 64), bf16)]),
    "N7": (lambda a, b: a @ b, [S((16, 256), bf16), S((256, 7), bf16)]),
    # Column-major A (the simulator lays out only row- and column-major inputs): no TMA.
    "bmm_column_major": (
        lambda a, b: a @ b,
        [S((3, 32, 32), bf16, strides=(1, 3, 96)), S((3, 32, 32), bf16)],
    ),
}


@pytest.mark.parametrize("name", sorted(DECOMPOSED))
def test_decomposed_shapes_match_the_reference(name: str) -> None:
    fn, specs = DECOMPOSED[name]
    result = check_fusion(fn, specs, rtol=1e-2, atol=1e-2)
    assert all(stages.plan.scheduler != "matmul" for stages in result.kernels)


@pytest.mark.parametrize(
    ("fn", "specs", "reason"),
    [
        (lambda x, w: pf.linear(x, w), [S((1, 4096), bf16), S((4096, 4096), bf16)], "M = 1"),
        (lambda a, b: a @ b, [S((16, 4096), bf16), S((4096, 7), bf16)], "TMA cannot load"),
        (
            lambda a, b: a @ b,
            [S((3, 64, 4096), bf16), S((3, 4096, 256), bf16)],
            "B is batched",
        ),
    ],
    ids=["decode", "N7", "batched_b"],
)
def test_split_k_leaves_matmuls_it_would_break_whole(
    fn: Callable[..., Any], specs: list[pf.Spec], reason: str
) -> None:
    """The heuristic splits none of them (they have few tiles and a long K); asked for, the
    split is refused with the reason."""
    fusion = pf.fuse(fn).trace(*specs)
    assert split_k(fusion.clone()[0], None) == []
    (skipped,) = split_k(fusion.clone()[0], 4)
    assert reason in skipped


def test_decode_of_a_long_k_runs_on_the_reduction_path() -> None:
    """The issue's decode step: x [1, 4096] @ w.T, once split-K's reshapes of a broadcast
    axis; now one multiply + sum, assembled, and its math checked at a smaller K."""
    fn: Callable[..., Any] = lambda x, w: pf.linear(x, w)  # noqa: E731
    compiled = _compile(fn, [S((1, 4096), bf16), S((4096, 4096), bf16)])
    assert "matmul" not in [kernel.scheduler for kernel in compiled.kernels]
    specs = [S((1, 2048), bf16), S((64, 2048), bf16)]
    fused = pf.fuse(fn)
    fusion = fused.trace(*specs)
    with pytest.warns(UserWarning, match="M = 1"):
        result = pipeline.run(fusion, HOPPER, pf.MatmulParams(splitk=4))
    arrays = random_inputs(specs, seed=3)
    (got,) = run_on_simulator(result, arrays, [((1, 64), bf16)], specs)
    want = fused.reference(*arrays)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-2)
    require_ptxas()
    for kernel in compiled.kernels:
        assert ptxas.assemble(kernel.ptx).problems() == []


def test_a_requested_tile_n_is_rounded_to_whole_swizzle_rows_for_an_n_major_b() -> None:
    specs = [S((1024, 512), bf16), S((512, 96), bf16)]
    with pytest.warns(UserWarning, match="tile_n=40.* rounded up to 48"):
        compiled = pf.fuse(lambda a, b: a @ b, matmul=pf.MatmulParams(tile_n=40)).compile(*specs)
    assert _main_loop(compiled).tile_n == 48


@pytest.mark.parametrize(
    "params",
    [
        pf.MatmulParams(cluster_m=2, persistent=True),
        pf.MatmulParams(cluster_n=2),
        pf.MatmulParams(tile_k=32),
        pf.MatmulParams(tile_k=48),
    ],
    ids=["cluster2x1", "cluster1x2", "tile_k32", "tile_k48"],
)
def test_narrow_swizzles_under_clusters_and_short_k_tiles_assemble(params: pf.MatmulParams) -> None:
    """Multicast slices of 64- and 32-byte-swizzled boxes, K-major tiles of 64- and 32-byte
    rows (tile_k 32, 48)."""
    require_ptxas()
    for fn, specs in (
        (lambda a, b: a @ b, [S((1024, 512), bf16), S((512, 96), bf16)]),
        (lambda a, b: a @ b, [S((512, 512), bf16), S((512, 512), bf16)]),
    ):
        compiled = _compile(fn, specs, params)
        loop = _main_loop(compiled)
        for operand in loop.operands:
            matmul_host.operand_layout(loop, operand)  # the layout checks pass
        for kernel in compiled.kernels:
            assert ptxas.assemble(kernel.ptx).problems() == []


@pytest.mark.parametrize(
    ("fn", "specs", "params"),
    [
        # The heuristic's own stream-K choice: 128x256 tiles in 2x1 clusters, a long K.
        (lambda a, b: a @ b.T, [S((3000, 18944), bf16), S((3584, 18944), bf16)], None),
        # A bias and one CTA per worker (no cluster).
        (
            lambda a, b, c: pf.linear(a, b, c),
            [S((1000, 8192), bf16), S((1000, 8192), bf16), S((1000,), bf16)],
            pf.MatmulParams(stream_k=True, cluster_m=1),
        ),
        # An n-major B and 64-row tiles.
        (
            lambda a, b: a @ b,
            [S((700, 4096), bf16), S((4096, 1200), bf16)],
            pf.MatmulParams(stream_k=True, tile_m=64),
        ),
    ],
    ids=["default", "bias-no-cluster", "n-major-64-rows"],
)
def test_stream_k_kernels_assemble_without_spills(
    fn: Callable[..., Any], specs: list[pf.Spec], params: pf.MatmulParams | None
) -> None:
    """The fixup keeps a consumer's accumulators live across its flag waits and partial-sum
    loads: ptxas must fit them in registers (no spills, no local memory)."""
    require_ptxas()
    compiled = _compile(fn, specs, params)
    loop = _main_loop(compiled)
    assert loop.stream_k is not None
    for kernel in compiled.kernels:
        assert ptxas.assemble(kernel.ptx).problems() == []
