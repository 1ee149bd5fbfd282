"""Run the sample kernels on a real GPU and compare with numpy (skipped without a driver)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import ptx_sample_kernels as samples
import pytest

from pyfuse.backend_ptx import driver, smem_desc
from pyfuse.backend_ptx import tma as tma_host
from pyfuse.backend_ptx.abi import ParamKind
from pyfuse.backend_ptx.emitter import Directives, PtxModule
from pyfuse.backend_ptx.instructions import arith, control, memory, special
from pyfuse.backend_ptx.operands import Address, RegClass
from pyfuse.errors import LaunchError

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def _needs_gpu() -> None:
    if not driver.available():
        pytest.skip("no CUDA driver or GPU on this machine")


@pytest.fixture
def buffers() -> Iterator[list[driver.DeviceBuffer]]:
    owned: list[driver.DeviceBuffer] = []
    yield owned
    for buffer in owned:
        buffer.free()


def _upload(owned: list[driver.DeviceBuffer], array: np.ndarray) -> driver.DeviceBuffer:
    buffer = driver.DeviceBuffer.from_host(np.ascontiguousarray(array))
    owned.append(buffer)
    return buffer


def _poisoned(owned: list[driver.DeviceBuffer], count: int) -> driver.DeviceBuffer:
    buffer = driver.DeviceBuffer(4 * count)
    driver.memset_d32(buffer.ptr, 0x7FC00000, count)  # NaN: an unwritten output shows up
    owned.append(buffer)
    return buffer


def _download(buffer: driver.DeviceBuffer, count: int) -> np.ndarray:
    host = np.empty(count, dtype=np.float32)
    buffer.download(host)
    return host


def _bf16_bits(values: np.ndarray) -> np.ndarray:
    """Exact for small integers: bf16 is the top half of the f32 pattern."""
    return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def test_device_info_is_hopper() -> None:
    info = driver.device_info()
    assert info.compute_capability == (9, 0)
    assert info.arch == "sm_90a"
    assert info.sm_count > 0
    assert info.smem_per_block_optin > driver.DEFAULT_DYNAMIC_SMEM_LIMIT
    assert info.warp_size == 32
    assert driver.driver_version() >= 13000


@pytest.mark.parametrize("n", [1, 3, 1000, 4096, (1 << 20) + 3])
def test_vector_add_matches_numpy(n: int, buffers: list[driver.DeviceBuffer]) -> None:
    sample = samples.vector_add()
    launcher = driver.Launcher(driver.load_kernel(sample.ptx, sample.name), sample.params)
    rng = np.random.default_rng(n)
    per_block = sample.block[0] * 4
    grid = ((n + per_block - 1) // per_block, 1, 1)
    out = _poisoned(buffers, n)
    for _ in range(2):  # the same launcher, fresh data: slots are rewritten in place
        a = rng.standard_normal(n, dtype=np.float32)
        b = rng.standard_normal(n, dtype=np.float32)
        da, db = _upload(buffers, a), _upload(buffers, b)
        launcher.launch(grid, sample.block, 0, 0, [da, db, out, n])
        driver.synchronize()
        np.testing.assert_array_equal(_download(out, n), a + b)


@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (5, 33), (64, 1000), (257, 4096)])
def test_row_sum_matches_numpy(rows: int, cols: int, buffers: list[driver.DeviceBuffer]) -> None:
    sample = samples.row_sum()
    launcher = driver.Launcher(driver.load_kernel(sample.ptx, sample.name), sample.params)
    x = np.random.default_rng(rows).standard_normal((rows, cols), dtype=np.float32)
    out = _poisoned(buffers, rows)
    grid = ((rows + samples.ROWS_PER_CTA - 1) // samples.ROWS_PER_CTA, 1, 1)
    launcher.launch(grid, sample.block, 0, 0, [_upload(buffers, x), out, rows, cols])
    driver.synchronize()
    np.testing.assert_allclose(
        _download(out, rows), x.sum(axis=1, dtype=np.float64), rtol=1e-5, atol=1e-4
    )


def _tensor_map(buffer: driver.DeviceBuffer, shape: tuple[int, int], box: tuple[int, int]) -> Any:
    plan = tma_host.plan_tiled("bf16", shape, (shape[1], 1), box, swizzle=smem_desc.Swizzle.B128)
    return tma_host.encode(plan, buffer.ptr)


def _small_int_matrix(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    return rng.integers(-3, 4, size=shape).astype(np.float32)


def test_tma_wgmma_tile_matches_numpy(buffers: list[driver.DeviceBuffer]) -> None:
    sample = samples.tma_wgmma_tile()
    rng = np.random.default_rng(7)
    a, b = _small_int_matrix(rng, (64, 64)), _small_int_matrix(rng, (64, 64))
    da, db = _upload(buffers, _bf16_bits(a)), _upload(buffers, _bf16_bits(b))
    out = _poisoned(buffers, 64 * 64)
    launcher = driver.Launcher(driver.load_kernel(sample.ptx, sample.name), sample.params)
    maps = [_tensor_map(da, (64, 64), (64, 64)), _tensor_map(db, (64, 64), (64, 64))]
    launcher.launch((1, 1, 1), sample.block, sample.smem_bytes, 0, [*maps, out, 64])
    driver.synchronize()
    np.testing.assert_array_equal(_download(out, 64 * 64).reshape(64, 64), a @ b.T)


@pytest.mark.parametrize(("m", "n", "k"), [(128, 64, 64), (256, 128, 512)])
def test_warp_specialized_gemm_matches_numpy(
    m: int, n: int, k: int, buffers: list[driver.DeviceBuffer]
) -> None:
    sample = samples.warp_specialized_gemm()
    assert sample.smem_bytes > driver.DEFAULT_DYNAMIC_SMEM_LIMIT  # exercises the opt-in path
    rng = np.random.default_rng(m + n + k)
    a, b = _small_int_matrix(rng, (m, k)), _small_int_matrix(rng, (n, k))
    da, db = _upload(buffers, _bf16_bits(a)), _upload(buffers, _bf16_bits(b))
    out = _poisoned(buffers, m * n)
    maps = [
        _tensor_map(da, (m, k), (samples.BLOCK_M, samples.TILE_K)),
        _tensor_map(db, (n, k), (samples.N_TILE, samples.TILE_K)),
    ]
    launcher = driver.Launcher(driver.load_kernel(sample.ptx, sample.name), sample.params)
    grid = (m // samples.BLOCK_M, n // samples.N_TILE, 1)
    args = [*maps, out, n, k // samples.TILE_K]
    launcher.launch(grid, sample.block, sample.smem_bytes, 0, args)
    driver.synchronize()
    np.testing.assert_array_equal(_download(out, m * n).reshape(m, n), a @ b.T)


def test_cubin_from_ptx_loads_and_runs(buffers: list[driver.DeviceBuffer]) -> None:
    sample = samples.vector_add()
    cubin = driver.cubin_from_ptx(sample.ptx, sample.name)
    assert cubin.startswith(b"\x7fELF")
    launcher = driver.Launcher(driver.load_kernel(cubin, sample.name), sample.params)
    a = np.arange(1000, dtype=np.float32)
    out = _poisoned(buffers, 1000)
    da = _upload(buffers, a)
    launcher.launch((1, 1, 1), sample.block, 0, None, [da, da, out, 1000])
    driver.synchronize()
    np.testing.assert_array_equal(_download(out, 1000), 2 * a)


def test_bad_ptx_raises_launch_error_with_jit_log() -> None:
    ptx = samples.vector_add().ptx.replace("add.f32", "add.f33", 1)
    with pytest.raises(LaunchError) as info:
        driver.load_module(ptx, "broken_kernel")
    message = str(info.value)
    assert "broken_kernel" in message
    assert "CUDA_ERROR_INVALID_PTX" in message
    assert "line" in message


def test_jit_info_log_reports_resources() -> None:
    sample = samples.row_sum()
    # A unique comment defeats the driver's JIT cache, whose hits log nothing.
    ptx = f"{sample.ptx}// {time.time_ns()}\n"
    module = driver.load_module(ptx, sample.name)
    resources = module.resources()[sample.name]
    assert resources.registers > 0
    assert resources.spill_store_bytes == 0
    function = driver.get_function(module, sample.name)
    assert driver.function_attribute(function, "NUM_REGS") == resources.registers


def _cluster_rank_kernel() -> str:
    module = PtxModule()
    kb = module.kernel("cluster_ranks", Directives(maxntid=(32,)))
    out_p = kb.param("out", ParamKind.PTR)
    raw, out, address = kb.regs(RegClass.B64, 3)
    rank, size, ctaid, packed = kb.regs(RegClass.B32, 4)
    first = kb.reg(RegClass.PRED)
    tid = kb.reg(RegClass.B32)
    kb.emit(
        memory.ld_param(raw, out_p),
        memory.cvta("global", out, raw, to=True),
        special.read_sreg(rank, "cluster_ctarank"),
        special.read_sreg(size, "cluster_nctarank"),
        special.read_sreg(ctaid, "ctaid.x"),
        special.read_sreg(tid, "tid.x"),
        arith.mad("u32", packed, size, 16, rank),
        arith.setp("eq", "u32", first, tid, 0),
    )
    wide = kb.reg(RegClass.B64)
    kb.emit(
        arith.mul("u32", wide, ctaid, 4, mode="wide"),
        arith.add("s64", address, out, wide),
        memory.st("global", "u32", Address(address), packed).guarded(first),
        control.ret(),
    )
    return module.render()


def test_cluster_launch_sets_cluster_shape(buffers: list[driver.DeviceBuffer]) -> None:
    function = driver.load_kernel(_cluster_rank_kernel(), "cluster_ranks")
    launcher = driver.Launcher(function, [ParamKind.PTR], cluster=(2, 1, 1))
    out = driver.DeviceBuffer(4 * 8)
    buffers.append(out)
    launcher.launch((8, 1, 1), (32, 1, 1), 0, 0, [out])
    driver.synchronize()
    host = np.empty(8, dtype=np.uint32)
    out.download(host)
    assert list(host) == [2 * 16 + (i % 2) for i in range(8)]
    with pytest.raises(LaunchError, match="multiple of the cluster"):
        launcher.launch((3, 1, 1), (32, 1, 1), 0, 0, [out])


def test_launch_on_a_stream_handle(buffers: list[driver.DeviceBuffer]) -> None:
    sample = samples.vector_add()
    launcher = driver.Launcher(driver.load_kernel(sample.ptx, sample.name), sample.params)
    stream = driver.stream_create()
    a = np.ones(256, dtype=np.float32)
    da, out = _upload(buffers, a), _poisoned(buffers, 256)
    launcher.launch((1, 1, 1), sample.block, 0, stream, [da, da, out, 256])
    launcher.launch((1, 1, 1), sample.block, 0, int(stream), [da, da, out, 256])
    driver.stream_synchronize(stream)
    driver.stream_destroy(stream)
    np.testing.assert_array_equal(_download(out, 256), 2 * a)


def test_shares_torch_primary_context(buffers: list[driver.DeviceBuffer]) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    x = torch.arange(512, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    sample = samples.vector_add()
    launcher = driver.Launcher(driver.load_kernel(sample.ptx, sample.name), sample.params)
    stream = torch.cuda.current_stream().cuda_stream
    launcher.launch(
        (1, 1, 1), sample.block, 0, stream, [x.data_ptr(), x.data_ptr(), y.data_ptr(), 512]
    )
    torch.cuda.synchronize()
    assert torch.equal(y, 2 * x)


def test_launch_overhead_is_small(buffers: list[driver.DeviceBuffer]) -> None:
    sample = samples.vector_add()
    launcher = driver.Launcher(driver.load_kernel(sample.ptx, sample.name), sample.params)
    da, out = _upload(buffers, np.ones(1024, dtype=np.float32)), _poisoned(buffers, 1024)
    args = [da.ptr, da.ptr, out.ptr, 1024]
    for _ in range(100):
        launcher.launch((1, 1, 1), sample.block, 0, 0, args)
    driver.synchronize()
    samples_us = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(1000):
            launcher.launch((1, 1, 1), sample.block, 0, 0, args)
        samples_us.append((time.perf_counter() - start) * 1e3)
        driver.synchronize()
    per_call = min(samples_us)
    print(f"launch: {per_call:.2f} us per call (best of 5 x 1000)")
    assert per_call < 30.0
