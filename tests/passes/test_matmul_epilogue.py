"""Which matmul outputs leave through shared memory and a TMA store (passes/matmul_epilogue),
what the scheduler leaves them in shared memory, and the kernel IR and PTX that carry it."""

from __future__ import annotations

import re
import warnings

import pytest
from check_utils import matmul_kernel

import pyfuse as pf
from pyfuse.backend_ptx.emit import emit_ptx
from pyfuse.backend_ptx.matmul_host import matmul_launch, tensor_map_plans
from pyfuse.ir import kernel_ir as k
from pyfuse.ir.hopper import SM90
from pyfuse.ir.kernel_printer import kernel_to_str
from pyfuse.ir.target import HOPPER
from pyfuse.passes.matmul_epilogue import chunk_cols

bf16, f16, f32 = pf.bfloat16, pf.float16, pf.float32


def test_a_row_major_output_is_staged_in_64_row_chunks_of_one_swizzle_row() -> None:
    stage, loop = matmul_kernel(
        lambda x, w, b: pf.gelu(pf.linear(x, w, b), approximate="tanh"),
        [pf.spec((512, 256), bf16), pf.spec((1024, 256), bf16), pf.spec((1024,), bf16)],
    )
    (store,) = loop.stores
    assert store.roles == ("m", "n") and store.shape == (512, 1024)
    assert store.box == (SM90.wgmma_m, 64) and store.swizzle_bytes == 128
    assert stage.plan.params["smem_epilogue"] is True
    # The staging buffers follow the stages, the bias's per-tile copies follow them, and all
    # fit the block's shared memory.
    warpgroups = loop.tile_m // SM90.wgmma_m
    (bias,) = loop.vectors
    assert store.smem_offset + 2 * warpgroups * store.buffer_bytes <= bias.smem_offset
    assert bias.smem_offset + warpgroups * bias.buffer_bytes == stage.kernel_ir.smem_bytes
    assert stage.kernel_ir.smem_bytes <= HOPPER.max_smem_per_block
    # The epilogue writes the pair into staging; no global store of that output is left.
    stmts = list(stage.kernel_ir.walk())
    assert any(isinstance(s, k.StageStore) for s in stmts)
    assert not any(isinstance(s, k.VectorStore) for s in stmts)
    assert "tma store [0]" in kernel_to_str(stage.kernel_ir)


def test_a_3d_linear_output_collapses_its_row_axes_and_a_batched_one_keeps_its_batch() -> None:
    _, loop = matmul_kernel(
        lambda x, w: pf.linear(x, w),
        [pf.spec((4, 96, 256), bf16), pf.spec((512, 256), bf16)],
    )
    (store,) = loop.stores
    assert store.roles == ("m", "n") and store.shape == (4 * 96, 512)
    _, loop = matmul_kernel(
        lambda a, b: a @ b, [pf.spec((3, 200, 128), bf16), pf.spec((3, 128, 320), bf16)]
    )
    (store,) = loop.stores
    assert store.roles == ("batch", "m", "n") and store.shape == (3, 200, 320)
    assert store.box == (1, SM90.wgmma_m, 64)


@pytest.mark.parametrize(
    ("fn", "specs", "why"),
    [
        (lambda a, b: (a @ b).T, [((256, 128), bf16), ((128, 512), bf16)], "transposed"),
        (pf.linear, [((256, 128), bf16), ((100, 128), bf16)], "200-byte rows"),
        (pf.linear, [((256, 128), bf16), ((257, 128), bf16)], "odd N"),
    ],
)
def test_outputs_a_tma_store_cannot_write_exactly_keep_register_stores(fn, specs, why) -> None:  # type: ignore[no-untyped-def]
    stage, loop = matmul_kernel(fn, [pf.spec(shape, dtype) for shape, dtype in specs])
    assert loop.stores == [], why
    assert any(isinstance(s, k.VectorStore | k.Store) for s in stage.kernel_ir.walk())


def test_an_f32_output_is_staged_in_32_column_chunks() -> None:
    _, loop = matmul_kernel(
        lambda a, b: (a @ b).to(f32), [pf.spec((256, 128), bf16), pf.spec((128, 512), bf16)]
    )
    (store,) = loop.stores
    assert store.dtype == f32 and store.box == (SM90.wgmma_m, 32)
    assert chunk_cols([2, 4], 256) == 32 and chunk_cols([2], 96) == 32
    assert chunk_cols([2], 200) is None


def test_deep_staging_takes_four_buffers_of_narrower_rows_in_the_same_shared_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pyfuse.passes import matmul_epilogue

    specs = [pf.spec((256, 128), bf16), pf.spec((128, 512), bf16)]
    _, two = matmul_kernel(lambda a, b: a @ b, specs)
    monkeypatch.setattr(matmul_epilogue, "BUFFERS_PER_WARPGROUP", 4)
    monkeypatch.setattr(matmul_epilogue, "WIDEST_STAGED_ROW", 64)
    _, four = matmul_kernel(lambda a, b: a @ b, specs)
    (store2,), (store4,) = two.stores, four.stores
    assert (store2.buffers, store2.chunk_cols) == (2, 64)
    assert (store4.buffers, store4.chunk_cols) == (4, 32)
    assert store2.warpgroup_bytes == store4.warpgroup_bytes
    assert chunk_cols([2], 256, widest_row=64) == 32 and chunk_cols([4], 256, 32) == 8
    # Epilogue warps keep their two buffers whatever the default.
    assert matmul_epilogue.staging_shape(epilogue_warps=True) == (2, 128)


def test_smem_epilogue_false_stores_from_registers_and_true_warns_when_nothing_qualifies() -> None:
    specs = [pf.spec((256, 128), bf16), pf.spec((128, 512), bf16)]
    stage, loop = matmul_kernel(lambda a, b: a @ b, specs, pf.MatmulParams(smem_epilogue=False))
    assert loop.stores == [] and stage.plan.params["smem_epilogue"] is False
    # Without the staging buffers the pipeline gets the shared memory back.
    staged_stage, _ = matmul_kernel(lambda a, b: a @ b, specs)
    assert stage.plan.params["stages"] >= staged_stage.plan.params["stages"]
    with pytest.warns(UserWarning, match="smem_epilogue=True"):
        matmul_kernel(
            lambda a, b: (a @ b).T,
            [pf.spec((256, 128), bf16), pf.spec((128, 512), bf16)],
            pf.MatmulParams(smem_epilogue=True),
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        matmul_kernel(lambda a, b: a @ b, specs, pf.MatmulParams(smem_epilogue=True))


# The cooperative kernel (one 64-row block a warpgroup) and the ping-pong one (two: the last
# chunk of the first block waits for the next chunk's buffer like any other).
@pytest.mark.parametrize(
    "params", [None, pf.MatmulParams(pingpong=True, tile_m=128, tile_n=128)], ids=["one", "two"]
)
def test_the_stores_tensor_maps_follow_the_operands_and_the_ptx_assembles_its_protocol(
    params: pf.MatmulParams | None,
) -> None:
    stage, loop = matmul_kernel(
        lambda a, b: a @ b, [pf.spec((300, 128), f16), pf.spec((128, 384), f16)], params
    )
    kernel = stage.kernel_ir
    plans = tensor_map_plans(kernel)
    assert len(plans) == len(loop.operands) + 1
    store_plan = plans[-1]
    assert store_plan.global_dims == (384, 300) and store_plan.box_dims == (64, SM90.wgmma_m)
    launch = matmul_launch(kernel)
    output = next(i for i, p in enumerate(kernel.params) if p.role == k.ParamRole.OUTPUT)
    assert launch.pointer_arguments[-1] == output
    ptx = emit_ptx(kernel, HOPPER)
    # Per tile: the leader's read wait for the first chunk's buffer. Per chunk: the fence, the
    # warpgroup's barrier and the store; before every chunk but the last, the read wait that
    # frees the next chunk's buffer. 2-byte outputs go in by stmatrix, 4 column blocks each.
    assert loop.row_blocks == (2 if params else 1)
    chunks = loop.tile_n // loop.stores[0].chunk_cols * loop.row_blocks
    assert len(re.findall(r"cp\.async\.bulk\.wait_group\.read 1", ptx)) == 1
    assert len(re.findall(r"cp\.async\.bulk\.wait_group\.read 0", ptx)) == chunks - 1
    assert len(re.findall(r"fence\.proxy\.async\.shared::cta", ptx)) == chunks
    assert len(re.findall(r"bar\.sync %r\d+, 128", ptx)) == chunks + 1
    stmatrix = r"stmatrix\.sync\.aligned\.m8n8\.x4\.shared::cta\.b16"
    assert len(re.findall(stmatrix, ptx)) == loop.tile_n // 16 * loop.row_blocks
    assert not re.search(r"st\.shared", ptx)
    assert len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta", ptx)) == chunks
    assert re.search(r"cp\.async\.bulk\.wait_group 0", ptx)
    assert re.search(r"bar\.sync %r\d+, 128", ptx)
    assert not re.search(r"st\.global", ptx)
