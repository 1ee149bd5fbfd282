"""Residuals loaded by TMA into the staging buffers (passes/matmul_residuals): which epilogue
reads become a ``StagedLoad`` of which store's buffer, which stay global loads, and the
kernel they make (its tensor map, its PTX through ptxas without spills). The kernels run on
the Hopper simulator in tests/testing/test_ptx_sim_residuals.py and test_ptx_sim.py."""

from __future__ import annotations

import pytest
from check_utils import matmul_kernel, require_ptxas

import pyfuse as pf
from pyfuse.backend_ptx.emit import emit_ptx
from pyfuse.backend_ptx.matmul_host import mapped_buffers, matmul_launch
from pyfuse.backend_ptx.ptxas import assemble
from pyfuse.ir import kernel_ir as k
from pyfuse.ir.kernel_printer import kernel_to_str
from pyfuse.ir.target import HOPPER
from pyfuse.ir.tensor import MemoryType

S = pf.spec
bf16, f16, f32 = pf.bfloat16, pf.float16, pf.float32


def _global_pair_loads(loop: k.MatmulMainLoop) -> list[k.VectorLoad]:
    return [
        s
        for s in k.walk(loop.epilogue)
        if isinstance(s, k.VectorLoad) and s.source.memory == MemoryType.GLOBAL
    ]


def _staged_loads(loop: k.MatmulMainLoop) -> list[k.StagedLoad]:
    return [s for s in k.walk(loop.epilogue) if isinstance(s, k.StagedLoad)]


def test_a_residual_lands_in_the_outputs_staging_and_is_read_there() -> None:
    stage, loop = matmul_kernel(
        lambda x, w, b, r: pf.linear(x, w, b) + r,
        [S((512, 256), bf16), S((1024, 256), bf16), S((1024,), bf16), S((512, 1024), bf16)],
        pf.MatmulParams(tile_m=128, tile_n=256),
    )
    kernel = stage.kernel_ir
    (residual,) = loop.residuals
    (store,) = loop.stores
    assert residual.store == 0 and residual.box == store.box and residual.shape == (512, 1024)
    assert [s.store for s in _staged_loads(loop)] == [0] and not _global_pair_loads(loop)
    assert "tma residual" in kernel_to_str(kernel)
    # Its map is the last: the store's box and swizzle over the input.
    assert mapped_buffers(loop)[-1] == residual.buffer_name
    (residual_map,) = matmul_launch(kernel).maps[-1:]
    assert residual_map.box_dims == (64, 64) and residual_map.global_dims == (1024, 512)
    # No shared memory beyond the staging it shares.
    without = matmul_kernel(
        lambda x, w, b, r: pf.linear(x, w, b) + r,
        [S((512, 256), bf16), S((1024, 256), bf16), S((1024,), bf16), S((512, 1024), bf16)],
        pf.MatmulParams(tile_m=128, tile_n=256, tma_residuals=False),
    )[0].kernel_ir
    assert kernel.smem_bytes == without.smem_bytes
    ptx = emit_ptx(kernel, HOPPER)
    assert "ld.global" not in ptx.split("$L__consumer")[1] and "$L__residual_wait" in ptx
    require_ptxas()
    resources = assemble(ptx).kernels[kernel.name]
    assert resources.spill_store_bytes == 0 and resources.local_bytes == 0


def test_a_residual_read_twice_is_loaded_once_a_pair() -> None:
    _, loop = matmul_kernel(
        lambda a, b, r: (a @ b.T + r) * r,
        [S((200, 64), bf16), S((136, 64), bf16), S((200, 136), bf16)],
    )
    assert len(loop.residuals) == 1 and len(_staged_loads(loop)) == 1


def test_the_residual_goes_to_the_store_whose_output_reads_it() -> None:
    # The first output does not depend on r: writing it over r's chunk could overtake a read.
    _, loop = matmul_kernel(
        lambda a, b, r: (a @ b.T, pf.relu(a @ b.T + r)),
        [S((150, 64), f16), S((136, 64), f16), S((150, 136), f16)],
    )
    assert len(loop.stores) == 2
    assert [r.store for r in loop.residuals] == [1]


@pytest.mark.parametrize(
    ("fn", "specs", "params"),
    [
        # An f32 residual beside a bf16 output: its chunk is twice the staging buffer.
        (
            lambda a, b, r: pf.cast(a @ b.T + r, bf16),
            [S((200, 64), bf16), S((136, 64), bf16), S((200, 136), f32)],
            None,
        ),
        # Broadcast over the batch: no batch dim to step.
        (
            lambda a, b, r: a @ b + r,
            [S((2, 72, 64), bf16), S((2, 64, 136), bf16), S((72, 136), bf16)],
            None,
        ),
        # A view at an offset: its base is no tensor map's.
        (
            lambda a, b, r: a @ b.T + r[:, 2:],
            [S((150, 64), bf16), S((136, 64), bf16), S((150, 138), bf16)],
            None,
        ),
        # Asked not to.
        (
            lambda a, b, r: a @ b.T + r,
            [S((150, 64), bf16), S((136, 64), bf16), S((150, 136), bf16)],
            pf.MatmulParams(tma_residuals=False),
        ),
        # Register stores: no staging to load into.
        (
            lambda a, b, r: a @ b.T + r,
            [S((150, 64), bf16), S((136, 64), bf16), S((150, 136), bf16)],
            pf.MatmulParams(smem_epilogue=False),
        ),
    ],
)
def test_other_residuals_stay_global_pair_loads(fn, specs, params) -> None:  # type: ignore[no-untyped-def]
    _, loop = matmul_kernel(fn, specs, params)
    assert not loop.residuals and not _staged_loads(loop)


def test_ping_pong_kernels_read_residuals_by_global_loads_unless_asked() -> None:
    specs = [S((512, 256), bf16), S((512, 256), bf16), S((512, 512), bf16)]
    _, loop = matmul_kernel(lambda a, b, r: a @ b.T + r, specs, pf.MatmulParams(pingpong=True))
    assert loop.pingpong and not loop.residuals
    _, loop = matmul_kernel(
        lambda a, b, r: a @ b.T + r, specs, pf.MatmulParams(pingpong=True, tma_residuals=True)
    )
    assert loop.pingpong and len(loop.residuals) == 1


def test_epilogue_warps_and_stream_k_keep_global_residuals() -> None:
    specs = [S((256, 256), bf16), S((256, 256), bf16), S((256, 256), bf16)]
    for params in (
        pf.MatmulParams(stream_k=True, tile_m=128, tile_n=64),
        pf.MatmulParams(epilogue_warps=True, persistent=True, tile_m=128, tile_n=128),
    ):
        _, loop = matmul_kernel(lambda a, b, r: pf.gelu(a @ b.T) + r, specs, params)
        assert not loop.residuals, params
