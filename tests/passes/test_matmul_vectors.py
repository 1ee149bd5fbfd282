"""Epilogue inputs read along one tile axis (passes/matmul_vectors): a bias along N or a row
scale along M becomes a per-tile shared-memory copy loaded by TMA, read by the epilogue with
``ld.shared``; any other epilogue input stays a global load (a residual's, one per pair of
columns). The kernels run on the Hopper
simulator in tests/testing/test_ptx_sim.py (sim_cases.py)."""

from __future__ import annotations

import re

import pytest
from check_utils import matmul_kernel, require_ptxas

import pyfuse as pf
from pyfuse.backend_ptx.emit import emit_ptx
from pyfuse.backend_ptx.matmul_host import mapped_buffers, matmul_launch
from pyfuse.backend_ptx.ptxas import assemble
from pyfuse.ir import kernel_ir as k
from pyfuse.ir.hopper import SM90
from pyfuse.ir.target import HOPPER
from pyfuse.ir.tensor import MemoryType

S = pf.spec
bf16, f32 = pf.bfloat16, pf.float32


def _main_loop(fn, specs, params=None):  # type: ignore[no-untyped-def]
    stage, loop = matmul_kernel(fn, specs, params)
    return stage.kernel_ir, loop


def _epilogue_loads(loop: k.MatmulMainLoop) -> list[k.Load]:
    loads: list[k.Load] = []

    def visit(expr: k.KExpr) -> None:
        if isinstance(expr, k.Load):
            loads.append(expr)
        for child in vars(expr).values():
            if isinstance(child, k.KExpr):
                visit(child)

    for stmt in k.walk(loop.epilogue):
        if isinstance(stmt, k.Store):
            visit(stmt.value)
    return loads


def _global_reads(loop: k.MatmulMainLoop) -> set[str]:
    """The global buffers the epilogue reads, by element or by pair (a residual)."""
    loads = {load.buffer for load in _epilogue_loads(loop)}
    loads |= {s.source for s in k.walk(loop.epilogue) if isinstance(s, k.VectorLoad)}
    return {buffer.name for buffer in loads if buffer.memory == MemoryType.GLOBAL}


def test_a_bias_is_loaded_once_per_tile_and_read_from_shared_memory() -> None:
    kernel, loop = _main_loop(
        lambda x, w, b: pf.gelu(pf.linear(x, w, b), approximate="tanh"),
        [S((512, 256), bf16), S((1024, 256), bf16), S((1024,), bf16)],
    )
    (bias,) = loop.vectors
    assert (bias.role, bias.extent, bias.span) == ("n", 1024, loop.tile_n)
    assert bias.smem_offset % SM90.tma_smem_alignment == 0
    assert _global_reads(loop) == set()
    shared = [load for load in _epilogue_loads(loop) if load.buffer.memory == MemoryType.SHARED]
    assert shared and all(load.buffer.smem_offset == bias.smem_offset for load in shared)
    # Its tensor map is the last parameter: one row (the driver refuses rank-1 maps) of a
    # legal pitch, the tile's columns, raw 16-bit words.
    assert mapped_buffers(loop)[-1] == bias.buffer_name
    launch = matmul_launch(kernel)
    vector_map = launch.maps[-1]
    assert (vector_map.global_dims, vector_map.box_dims) == ((1024, 1), (loop.tile_n, 1))
    assert vector_map.global_strides == (2048,)
    ptx = emit_ptx(kernel, HOPPER)
    assert len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.[^;]*\[%\w+, \{%r\d+, 0\}\]", ptx)) == 1
    assert "ld.global" not in ptx.split("$L__consumer")[1]  # no global read left in consumers
    # One read per column a thread holds (two of each 8-column block), shared by its two rows.
    assert ptx.count("ld.shared.b16") == loop.tile_n // 4
    require_ptxas()
    resources = assemble(ptx).kernels[kernel.name]
    assert resources.spill_store_bytes == 0 and resources.local_bytes == 0


def test_a_row_scale_takes_the_rows_of_each_warpgroup_and_a_residual_stays_global() -> None:
    _, loop = _main_loop(
        lambda a, b, r, s: (a @ b.T + r) * s,
        [S((300, 64), bf16), S((136, 64), bf16), S((300, 136), bf16), S((300, 1), bf16)],
        pf.MatmulParams(tile_m=128, tma_residuals=False),
    )
    (scale,) = loop.vectors
    assert (scale.role, scale.extent, scale.span) == ("m", 300, SM90.wgmma_m)
    (residual,) = _global_reads(loop)
    assert residual != scale.buffer_name


def test_a_ping_pong_warpgroup_copies_the_rows_of_its_whole_tile() -> None:
    _, loop = _main_loop(
        lambda a, b, b2, s: a @ b.T * s + b2,
        [S((512, 128), bf16), S((512, 128), bf16), S((512,), bf16), S((512, 1), bf16)],
        pf.MatmulParams(pingpong=True),
    )
    spans = {vector.role: vector.span for vector in loop.vectors}
    assert spans == {"n": loop.tile_n, "m": loop.tile_m}


def test_register_stores_read_vectors_too() -> None:
    _, loop = _main_loop(
        lambda x, w, b: pf.linear(x, w, b),
        [S((200, 64), bf16), S((136, 64), bf16), S((136,), bf16)],
        pf.MatmulParams(smem_epilogue=False),
    )
    assert not loop.stores and len(loop.vectors) == 1 and _global_reads(loop) == set()


@pytest.mark.parametrize(
    "fn, specs",
    [
        # every other element: the read is 2 col, not col
        (
            lambda a, b, c: a @ b.T + c[::2],
            [S((128, 64), bf16), S((64, 64), bf16), S((128,), bf16)],
        ),
        # offset by one: col + 1 of the input
        (lambda a, b, c: a @ b.T + c[1:], [S((128, 64), bf16), S((64, 64), bf16), S((65,), bf16)]),
    ],
)
def test_a_vector_read_at_anything_but_the_column_stays_global(fn, specs) -> None:  # type: ignore[no-untyped-def]
    _, loop = _main_loop(fn, specs)
    assert not loop.vectors and len(_global_reads(loop)) == 1


def test_a_vector_that_does_not_fit_beside_the_stages_stays_global() -> None:
    # 128x256 tiles, 4 stages and the staged output leave 2 KiB: an f32 bias takes 1 KiB
    # per warpgroup, all of it; the f32 row scale read after it stays a global load.
    kernel, loop = _main_loop(
        lambda a, b, bias, s: (a @ b.T + bias) * s,
        [S((512, 256), bf16), S((512, 256), bf16), S((512,), f32), S((512, 1), f32)],
        pf.MatmulParams(tile_m=128, tile_n=256, stages=4),
    )
    assert [vector.role for vector in loop.vectors] == ["n"]
    assert len(_global_reads(loop)) == 1
    assert kernel.smem_bytes <= HOPPER.max_smem_per_block


def test_a_residual_is_read_a_column_pair_at_a_time() -> None:
    # N = 136 is ragged in a 256-column tile: the unguarded epilogue clamps the pair's first
    # column to N - 2, so the 4-byte load stays aligned and inside the row. (Not by TMA into
    # the staging: matmul_residuals' tests.)
    _, loop = _main_loop(
        lambda a, b, r, s: (a @ b.T + r) * s,
        [S((300, 64), bf16), S((136, 64), bf16), S((300, 136), bf16), S((300, 1), bf16)],
        pf.MatmulParams(tma_residuals=False),
    )
    assert loop.pair_col is not None and loop.stores
    pairs = [s for s in k.walk(loop.epilogue) if isinstance(s, k.VectorLoad)]
    assert [(p.width, p.source.memory) for p in pairs] == [(2, MemoryType.GLOBAL)]
    assert str(pairs[0].source_index) == "((min(row, 299) * 136) + min(col, 134))"
    elements = [load for load in _epilogue_loads(loop) if load.buffer is pairs[0].source]
    assert elements == []  # the second column reads the pair's other register


@pytest.mark.parametrize("strides", [(0, 1), (1, 0)])
def test_a_vector_of_a_broadcast_input_maps_the_memory_it_spans(strides) -> None:  # type: ignore[no-untyped-def]
    # A (16, 8) input of strides (0, 1) holds 8 elements but 128 by its shape: a map of 128
    # read 120 elements past the allocation where the tile (64 wide) passed the 8 columns,
    # instead of zero-filling them (the Hopper simulator saw the TMA load leave every buffer).
    from pyfuse.testing.run import run_function

    specs = [S((16, 16), bf16), S((16, 8), bf16), S((16, 8), bf16, strides)]
    _, loop = _main_loop(lambda a, w, r: a @ w + r, specs)
    (vector,) = loop.vectors
    assert vector.extent == (8 if strides == (0, 1) else 16)
    outcome = run_function(lambda a, w, r: a @ w + r, specs)
    assert outcome.cls == "ok", outcome
