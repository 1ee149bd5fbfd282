"""The warp-specialized matmul main loop on the GPU, against torch in float32.

Each kernel is the template plus the test's bf16 store epilogue (``StoreEpilogue``), built
from the kernel IR the lowering produces for a plain GEMM (``gemm_kernel``). Every case
runs twice on the same inputs into a NaN-poisoned output: both runs must match the
reference and each other bit for bit (a moving result is a race).

``python3 tests/gpu/test_gpu_matmul_template.py`` times 8192^3 in every layout against
torch.matmul.
"""

from __future__ import annotations

import functools
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for backend_ptx.*

from backend_ptx.test_matmul_template import BuiltGemm, Gemm, build_gemm_ptx

from pyfuse.backend_ptx import driver, matmul_host

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

LAYOUTS = [("k", "k"), ("k", "mn"), ("mn", "k"), ("mn", "mn")]
SHAPES = [(1000, 1000, 1000), (504, 136, 1024), (4096, 4096, 4096), (64, 64, 64)]
HANG_SECONDS = 30  # no case here runs for more than a few milliseconds


def scheduled(m: int, n: int, k: int, a: str, b: str, **kwargs: Any) -> Gemm:
    """The tile the matmul scheduler picks for this shape (one MMA)."""
    tile = (128 if m > 64 else 64, 256 if n >= 256 else 128, 64)
    return Gemm(m, n, k, a, b, tile, **kwargs)


@functools.cache
def _compiled(gemm: Gemm) -> tuple[BuiltGemm, driver.Launcher]:
    built = build_gemm_ptx(gemm)
    function = driver.load_kernel(built.ptx, built.kernel.name)
    return built, driver.Launcher(function, built.params)


def _inputs(gemm: Gemm) -> tuple[Any, list[Any], Any]:
    """(A as stored, [B_i as stored], float32 references [mmas, batch, M, N])."""
    return _data(
        gemm.m, gemm.n, gemm.k, gemm.a_major, gemm.b_major, gemm.mmas, gemm.batch, gemm.a_batched
    )


@functools.cache
def _data(
    m: int, n: int, k: int, a_major: str, b_major: str, mmas: int, batch: int, a_batched: bool
) -> tuple[Any, list[Any], Any]:
    torch.manual_seed(m * 7919 + n * 31 + k)
    batch_dims = (batch,) if batch > 1 else ()
    a_batch = batch_dims if a_batched else ()
    shape_a = (*a_batch, m, k) if a_major == "k" else (*a_batch, k, m)
    shape_b = (*batch_dims, n, k) if b_major == "k" else (*batch_dims, k, n)
    a = torch.randn(shape_a, device="cuda", dtype=torch.bfloat16)
    bs = [torch.randn(shape_b, device="cuda", dtype=torch.bfloat16) for _ in range(mmas)]
    logical_a = a if a_major == "k" else a.transpose(-1, -2)
    refs = []
    for b in bs:
        logical_b = b.transpose(-1, -2) if b_major == "k" else b
        ref = torch.matmul(logical_a.float(), logical_b.float())
        refs.append(ref.expand(batch, m, n))
    return a, bs, torch.stack(refs)


def run(gemm: Gemm, a: Any, bs: list[Any], outs: list[Any]) -> None:
    built, launcher = _compiled(gemm)
    kernel = built.kernel
    pointers = {"A": a.data_ptr(), **{f"B{i}": b.data_ptr() for i, b in enumerate(bs)}}
    maps = matmul_host.encode_tensor_maps(kernel, pointers)
    args = [*maps, *(out.data_ptr() for out in outs)]
    launcher.launch(kernel.grid, kernel.block, kernel.smem_bytes, 0, args)


def check(gemm: Gemm) -> None:
    a, bs, refs = _inputs(gemm)
    results = []
    for _ in range(2):
        outs = [
            torch.full((gemm.batch, gemm.m, gemm.n), math.nan, device="cuda", dtype=torch.bfloat16)
            for _ in range(gemm.mmas)
        ]
        run(gemm, a, bs, outs)
        _synchronize(gemm)
        results.append(torch.stack(outs))
    tolerance = 2**-7 * math.sqrt(gemm.k)  # bf16 rounding of sums of K unit-variance products
    for result in results:
        close = torch.isclose(result.float(), refs, rtol=2**-7, atol=tolerance)
        assert bool(close.all()), _describe_mismatch(gemm, result, refs, close)
    assert torch.equal(results[0], results[1]), "the two runs differ: a race"


def _describe_mismatch(gemm: Gemm, result: Any, refs: Any, close: Any) -> str:
    """Where the wrong elements are, in tile coordinates, so one run says what broke."""
    bad = (~close).nonzero()
    rows, cols = bad[:, -2], bad[:, -1]
    tile_m, tile_n = gemm.tile[0], gemm.tile[1]
    tiles = sorted(set(zip((rows // tile_m).tolist(), (cols // tile_n).tolist(), strict=True)))
    samples = [(tuple(i.tolist()), float(result[tuple(i)]), float(refs[tuple(i)])) for i in bad[:4]]
    return (
        f"{gemm.name}: {len(bad)} of {close.numel()} wrong, {int(result.isnan().sum())} NaN "
        f"(unwritten); rows {int(rows.min())}..{int(rows.max())}, cols {int(cols.min())}.."
        f"{int(cols.max())}; rows in tile {sorted(set((rows % tile_m).tolist()))[:16]}, "
        f"cols in tile {sorted(set((cols % tile_n).tolist()))[:16]}; "
        f"(m, n) tiles with errors {tiles[:8]} ({len(tiles)}); "
        f"(index, got, want) {samples}"
    )


def _synchronize(gemm: Gemm) -> None:
    """Wait for the kernel; a deadlocked pipeline ends the process (the GPU stays busy)."""
    done = torch.cuda.Event()
    done.record()
    deadline = time.monotonic() + HANG_SECONDS
    while not done.query():
        if time.monotonic() > deadline:
            print(f"\nHANG: {gemm.name} did not finish in {HANG_SECONDS} s", flush=True)
            os._exit(3)
        time.sleep(0.001)


@pytest.mark.parametrize("swizzle", [1, 4])
@pytest.mark.parametrize("persistent", [False, True], ids=["grid", "persistent"])
@pytest.mark.parametrize(("a_major", "b_major"), LAYOUTS, ids=["kk", "kmn", "mnk", "mnmn"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gemm_matches_torch(
    shape: tuple[int, int, int], a_major: str, b_major: str, persistent: bool, swizzle: int
) -> None:
    check(scheduled(*shape, a_major, b_major, persistent=persistent, swizzle=swizzle))


@pytest.mark.parametrize(("a_major", "b_major"), [("k", "k"), ("mn", "mn")], ids=["kk", "mnmn"])
@pytest.mark.parametrize("persistent", [False, True], ids=["grid", "persistent"])
def test_gate_up_pair_shares_the_a_tile(a_major: str, b_major: str, persistent: bool) -> None:
    gemm = Gemm(1000, 1000, 1000, a_major, b_major, (128, 128, 64), None, persistent, 4, mmas=2)
    check(gemm)


@pytest.mark.parametrize("a_batched", [True, False], ids=["batched", "broadcast_a"])
@pytest.mark.parametrize("persistent", [False, True], ids=["grid", "persistent"])
def test_batched_gemm(a_batched: bool, persistent: bool) -> None:
    check(
        scheduled(
            1000,
            504,
            520,
            "mn",
            "k",
            persistent=persistent,
            swizzle=4,
            batch=3,
            a_batched=a_batched,
        )
    )


@pytest.mark.parametrize("cluster", [(2, 1), (1, 2), (2, 2)], ids=["2x1", "1x2", "2x2"])
@pytest.mark.parametrize("persistent", [False, True], ids=["grid", "persistent"])
@pytest.mark.parametrize(("a_major", "b_major"), LAYOUTS, ids=["kk", "kmn", "mnk", "mnmn"])
@pytest.mark.parametrize("shape", SHAPES[:3], ids=lambda s: "x".join(map(str, s)))
def test_cluster_multicast_gemm(
    shape: tuple[int, int, int],
    a_major: str,
    b_major: str,
    persistent: bool,
    cluster: tuple[int, int],
) -> None:
    check(scheduled(*shape, a_major, b_major, persistent=persistent, swizzle=4, cluster=cluster))


# ---- timing (not a test) ---------------------------------------------------------------------


def _time(fn: Any, iterations: int = 20) -> float:
    for _ in range(3):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iterations):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(stop)) / iterations


def main() -> None:
    size = 8192
    flops = 2 * size**3
    for a_major, b_major in LAYOUTS:
        for persistent, swizzle, cluster in (
            (True, 16, (1, 1)),
            (True, 16, (2, 1)),
            (True, 16, (1, 2)),
            (False, 16, (2, 1)),
        ):
            gemm = scheduled(
                size,
                size,
                size,
                a_major,
                b_major,
                persistent=persistent,
                swizzle=swizzle,
                cluster=cluster,
            )
            a, bs = _big_inputs(gemm)
            out = torch.empty((size, size), device="cuda", dtype=torch.bfloat16)
            ours = _time(lambda gemm=gemm, a=a, bs=bs, out=out: run(gemm, a, bs, [out]))
            logical_a = a if a_major == "k" else a.t()
            logical_b = bs[0].t() if b_major == "k" else bs[0]
            theirs = _time(lambda la=logical_a, lb=logical_b: torch.matmul(la, lb))
            if persistent and cluster == (1, 1):
                print(_compiled(gemm)[1].function.module.resources(), flush=True)
            reference = torch.matmul(logical_a, logical_b)
            error = (out.float() - reference.float()).abs().max().item()
            print(
                f"{size}^3 A {a_major}-major B {b_major}-major persistent={persistent} "
                f"swizzle={swizzle} cluster={cluster}: ours {flops / ours / 1e9:.0f} TFLOP/s, "
                f"torch {flops / theirs / 1e9:.0f} TFLOP/s, ratio {theirs / ours:.3f}, "
                f"max |diff| vs torch bf16 {error:.3g}",
                flush=True,
            )


def _big_inputs(gemm: Gemm) -> tuple[Any, list[Any]]:
    shape_a = (gemm.m, gemm.k) if gemm.a_major == "k" else (gemm.k, gemm.m)
    shape_b = (gemm.n, gemm.k) if gemm.b_major == "k" else (gemm.k, gemm.n)
    a = torch.randn(shape_a, device="cuda", dtype=torch.bfloat16)
    return a, [torch.randn(shape_b, device="cuda", dtype=torch.bfloat16)]


if __name__ == "__main__":
    main()


@pytest.mark.parametrize("rank", [1, 2])
def test_a_vector_map_encodes(rank: int) -> None:
    """An epilogue vector's map (one row of rank 2), and a rank-1 map, which the driver
    refused while cuda.bindings passed its empty stride list as NULL."""
    from pyfuse.backend_ptx.driver.modules import encode_tensor_map_tiled

    bias = torch.randn(1000, device="cuda", dtype=torch.bfloat16)
    dims, strides, box = ((1000,), (), (256,)) if rank == 1 else ((1000, 1), (2000,), (256, 1))
    encoded = encode_tensor_map_tiled(
        dtype_code=1,  # 16-bit words
        global_address=bias.data_ptr(),
        global_dims=dims,
        global_strides=strides,
        box_dims=box,
        element_strides=(1,) * rank,
        interleave=0,
        swizzle=0,
        l2_promotion=2,
        oob_fill=0,
    )
    assert encoded is not None
