"""The ptxas wrapper: log parsing, failures with context, and the sample kernels assembled clean."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ptx_sample_kernels as samples
import pytest

from pyfuse import knobs
from pyfuse.backend_ptx import ptxas

C7508 = (
    "ptxas info    : (C7508) Potential Performance Loss: 'setmaxnreg' ignored; "
    "unable to determine register count at entry."
)
C7515 = (
    "ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are "
    "serialized due to the presence of Extern calls in the function 'gemm'."
)
LOG = f"""\
{C7508}
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'gemm' for 'sm_90a'
ptxas info    : Function properties for gemm
    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
{C7515}
ptxas info    : Used 168 registers, used 1 barriers, 1024 bytes smem, 24 bytes lmem
ptxas info    : Compile time = 30.210 ms
ptxas info    : Compiling entry function 'add' for 'sm_90a'
ptxas info    : Function properties for add
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers
"""


def test_parse_log_per_kernel_and_advisories() -> None:
    kernels, loose = ptxas.parse_log(LOG)
    gemm, add = kernels["gemm"], kernels["add"]
    assert (gemm.registers, gemm.barriers, gemm.smem_bytes, gemm.local_bytes) == (168, 1, 1024, 24)
    assert (gemm.stack_frame_bytes, gemm.spill_store_bytes, gemm.spill_load_bytes) == (16, 8, 4)
    assert len(gemm.warnings) == 1 and "C7515" in gemm.warnings[0]
    assert add.registers == 8 and add.problems() == []
    assert len(loose) == 1 and "C7508" in loose[0]
    problems = gemm.problems()
    assert any("spills 8 B stores / 4 B loads" in p for p in problems)
    assert any("16 B stack frame" in p for p in problems)
    assert any("24 B local memory" in p for p in problems)


def test_parse_log_reads_the_driver_jit_format() -> None:
    jit = (
        "ptxas info    : Compiling entry function 'row_sum' for 'sm_90a'\n"
        "ptxas info    : Function properties for row_sum\n"
        "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 20 registers, used 0 barriers"
    )
    kernels, _ = ptxas.parse_log(jit)
    assert kernels["row_sum"].registers == 20


@pytest.fixture
def real_ptxas() -> None:
    if not ptxas.ptxas_available():
        if knobs.require_ptxas():
            pytest.fail("ptxas required (PYFUSE_REQUIRE_PTXAS=1) but not found")
        pytest.skip("ptxas not found")


def test_failure_shows_ptxas_message_and_offending_line(real_ptxas: None) -> None:
    ptx = samples.vector_add().ptx.replace("add.f32", "add.u32", 1)
    with pytest.raises(ptxas.PtxasError) as info:
        ptxas.assemble(ptx)
    message = str(info.value)
    assert "Arguments mismatch for instruction 'add'" in message
    assert "offending PTX:" in message and "add.u32" in message


def test_assemble_returns_a_cubin(real_ptxas: None) -> None:
    result = ptxas.assemble(samples.row_sum().ptx)
    assert result.cubin.startswith(b"\x7fELF")
    assert result.kernel("row_sum").registers > 0
    with pytest.raises(KeyError, match="no kernel 'other'"):
        result.kernel("other")


def test_missing_ptxas_is_reported() -> None:
    with knobs.overrides(ptxas="/nonexistent/ptxas"):
        assert ptxas.ptxas_available() is False
        with pytest.raises(ptxas.PtxasError, match="ptxas not found"):
            ptxas.assemble(".version 9.0")


@pytest.mark.parametrize("build", samples.ALL_SAMPLES, ids=lambda b: b.__name__)
def test_sample_kernels_assemble_without_spills_or_advisories(
    build: Callable[[], samples.SampleKernel], assemble_clean: Callable[..., Any]
) -> None:
    sample = build()
    result = assemble_clean(sample.ptx)
    resources = result.kernel(sample.name)
    assert resources.spill_store_bytes == resources.spill_load_bytes == 0
    assert resources.local_bytes == resources.stack_frame_bytes == 0
    assert sample.ptx.startswith(".version 9.0\n.target sm_90a\n.address_size 64\n")


def test_sample_kernels_use_what_they_claim() -> None:
    assert "ld.global.nc.v4.f32" in samples.vector_add().ptx
    assert "@%p" in samples.vector_add().ptx
    assert samples.row_sum().ptx.count("shfl.sync.bfly.b32") == 5
    tile = samples.tma_wgmma_tile().ptx
    for needle in (
        "mbarrier.try_wait.parity",
        "cp.async.bulk.tensor.2d",
        "wgmma.mma_async",
        "cvta.param",
    ):
        assert needle in tile
    ws = samples.warp_specialized_gemm().ptx
    assert "setmaxnreg.dec.sync.aligned.u32 40" in ws
    assert "setmaxnreg.inc.sync.aligned.u32 232" in ws
    assert ".maxntid 384, 1, 1\n.minnctapersm 1" in ws


def test_full_register_budget_adds_one_directive() -> None:
    ptx = ".visible .entry k(\n    .param .u64 T0\n)\n.maxntid 512, 1, 1\n{\n    ret;\n}\n"
    variant = ptxas.full_register_budget(ptx)
    assert variant == ptx.replace(".maxntid 512, 1, 1\n", ".maxntid 512, 1, 1\n.minnctapersm 1\n")
    assert ptxas.full_register_budget(variant) is None  # the module sets its budget already
    assert ptxas.full_register_budget(ptx.replace(".maxntid 512, 1, 1\n", "")) is None


def test_rebuilds_try_one_blocks_budget_then_a_lower_optimization_level() -> None:
    ptx = ".visible .entry k(\n    .param .u64 T0\n)\n.maxntid 512, 1, 1\n{\n    ret;\n}\n"
    assert ptxas.rebuilds(ptx) == [
        (ptxas.full_register_budget(ptx), None),
        (ptx, ptxas.REBUILD_OPTIMIZATION_LEVEL),
    ]
    budgeted = ptx.replace(".maxntid 512, 1, 1\n", ".maxnreg 64\n")
    assert ptxas.rebuilds(budgeted) == [(budgeted, ptxas.REBUILD_OPTIMIZATION_LEVEL)]


def test_a_spilling_kernel_keeps_the_build_that_spills_less(real_ptxas: None) -> None:
    """ptxas -O3 spilled this max over a 3-D view at 512 threads (40 registers, 8 bytes)
    aiming at several blocks per SM; with one block's budget it keeps 51 and spills none."""
    import pyfuse as pf

    def body(v: pf.Tensor) -> pf.Tensor:
        w = pf.reshape(v, (4, 25, 128))
        return w - pf.max(w, None, keepdim=True)

    compiled = pf.fuse(body).compile(pf.spec((100, 128), pf.bfloat16))
    (kernel,) = compiled.kernels
    if not ptxas.spilled_bytes(ptxas.assemble(kernel.ptx).kernels):
        pytest.skip("this ptxas does not spill the kernel (the case is ptxas's heuristic)")
    assert ptxas.assemble_least_spilling(kernel.ptx).problems() == []
