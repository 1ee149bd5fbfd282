"""Every case of tests/lowering_cases.py (GPU_ONLY_CASES too) on the GPU: two calls with fresh
random data each, against the float64 reference (outputs poisoned before each call)."""

from __future__ import annotations

import pytest
from lowering_cases import CASES, GPU_ONLY_CASES

from pyfuse.testing.run import run_function_gpu


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CASES | GPU_ONLY_CASES))
def test_case_runs_right_on_the_gpu(name: str) -> None:
    fn, specs = (CASES | GPU_ONLY_CASES)[name]
    for data_seed in (0, 1):
        outcome = run_function_gpu(fn, specs, data_seed=data_seed)
        assert outcome.cls == "ok", f"{name} (data {data_seed}): {outcome}"


@pytest.mark.gpu
def test_a_spilling_kernel_is_built_again_with_one_blocks_budget() -> None:
    """The driver's JIT spilled this 512-thread max over a 3-D view (CUDA 13's ptxas on the
    CPU host: 40 registers, 8 bytes of stack) while one block per SM's budget holds it:
    ``cubin_from_ptx`` keeps the build that spills less, so the loaded kernel has no local
    memory."""
    import pyfuse as pf
    from pyfuse.backend_ptx import driver

    def body(v: pf.Tensor) -> pf.Tensor:
        w = pf.reshape(v, (4, 25, 128))
        return w - pf.max(w, None, keepdim=True)

    (kernel,) = pf.fuse(body).compile(pf.spec((100, 128), pf.bfloat16)).kernels
    cubin = driver.cubin_from_ptx(kernel.ptx, kernel.name)
    function = driver.get_function(driver.load_module(cubin, kernel.name), kernel.name)
    assert driver.function_attribute(function, "LOCAL_SIZE_BYTES") == 0


@pytest.mark.gpu
def test_sin_and_cos_of_rotary_sized_arguments_are_accurate() -> None:
    """Rotary embeddings take sin and cos of positions times frequencies, far past the
    [-100 pi, 100 pi] where ``sin.approx`` has an error bound (the GPU fuzzer, seed 251, saw
    it wrong): the range-reduced expansion stays within about 1e-7 of float64 up to 2**22."""
    import torch

    import pyfuse as pf

    generator = torch.Generator(device="cuda").manual_seed(251)
    for top in (10.0, 1e3, 131072.0, 4e6):
        x = (torch.rand(1 << 20, device="cuda", generator=generator) * 2 - 1) * top
        sine, cosine = pf.fuse(lambda v: (pf.sin(v), pf.cos(v)))(x)
        wide = x.double()
        assert (sine.double() - wide.sin()).abs().max().item() < 2.5e-7, top
        assert (cosine.double() - wide.cos()).abs().max().item() < 2.5e-7, top


@pytest.mark.gpu
def test_division_ops_agree_with_torch_at_their_edges() -> None:
    """fmod, remainder and floor division against torch's on the signs, zeros, infinities and
    exact multiples where a rounded quotient goes wrong; integer divisors of 0 give 0."""
    import torch

    import pyfuse as pf

    edges = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        3.0,
        -3.0,
        0.1,
        -0.1,
        7.5,
        1e6,
        -1e-6,
        float("inf"),
        float("-inf"),
    ]
    values = torch.tensor(edges, device="cuda")
    x, y = (v.reshape(-1) for v in torch.meshgrid(values, values, indexing="ij"))
    noise = torch.randn(1 << 16, device="cuda") * 10
    x, y = torch.cat([x, noise]), torch.cat([y, torch.randn(1 << 16, device="cuda") * 3])
    fmod, remainder, floor = pf.fuse(lambda a, b: (pf.fmod(a, b), a % b, a // b))(x, y)
    for got, want in ((fmod, torch.fmod(x, y)), (remainder, x % y), (floor, x // y)):
        assert torch.equal(torch.isnan(got), torch.isnan(want))
        both = ~torch.isnan(want)
        assert torch.equal(got[both], want[both])
    i = torch.randint(-1000, 1000, (1 << 16,), device="cuda", dtype=torch.int32)
    j = torch.randint(-9, 9, (1 << 16,), device="cuda", dtype=torch.int32)
    j[0], i[1], j[1] = 0, -(2**31), -1
    quotient, modulo, c_mod = pf.fuse(lambda a, b: (a // b, a % b, pf.fmod(a, b)))(i, j)
    nonzero = j != 0
    ordinary = nonzero & ~((i == -(2**31)) & (j == -1))  # MIN // -1 overflows in C
    safe = torch.where(ordinary, j, 1)
    assert torch.equal(quotient[ordinary], (i // safe)[ordinary])
    assert torch.equal(modulo[ordinary], (i % safe)[ordinary])
    assert torch.equal(c_mod[ordinary], torch.fmod(i, safe)[ordinary])
    assert not quotient[~nonzero].any() and not modulo[~nonzero].any()
    assert quotient[1].item() == -(2**31) and modulo[1].item() == 0  # NumPy's wrap


@pytest.mark.gpu
def test_float32_fmod_is_exact_across_the_whole_range() -> None:
    """f32 fmod takes its quotients from ``rcp.approx.ftz.f64`` and Newton steps (no
    ``div.rn.f64``): on random bit patterns over every exponent, denormals included, the
    results equal NumPy's exact fmod bit for bit, so the SFU's reciprocal is close enough."""
    import numpy as np
    import torch

    import pyfuse as pf

    rng = np.random.default_rng(17)
    bits = rng.integers(0, 2**32, 2 << 20, dtype=np.uint64).astype(np.uint32)
    values = bits.view(np.float32)
    x, y = values[: 1 << 20], values[1 << 20 :]
    got = pf.fuse(lambda a, b: pf.fmod(a, b))(
        torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
    )
    with np.errstate(all="ignore"):
        want = np.fmod(x, y)
    got = got.cpu().numpy()
    assert np.array_equal(np.isnan(got), np.isnan(want))
    both = ~np.isnan(want)
    assert np.array_equal(got[both].view(np.uint32), want[both].view(np.uint32))


@pytest.mark.gpu
def test_a_persistent_matmul_with_a_remainder_epilogue_compiles_quickly() -> None:
    """The GPU fuzzer's seed 701 case 216 timed out: a persistent 2x1-cluster matmul whose
    epilogue took two remainders per element spent 115 s in ptxas on ``div.rn.f64`` slow
    paths. Now it compiles in seconds and matches the reference."""
    import time

    import pyfuse as pf
    from pyfuse.testing.run import run_function_gpu

    def fusion(v0, v2, v3):  # type: ignore[no-untyped-def]
        v1 = pf.softmax(pf.cast(v0, pf.float32), -1)
        return pf.remainder(pf.remainder(v1, v2 @ v3), False)

    specs = [
        pf.spec((1,), pf.int32),
        pf.spec((3, 7, 256), pf.bfloat16),
        pf.spec((256, 256), pf.bfloat16),
    ]
    start = time.perf_counter()
    params = pf.MatmulParams(persistent=True, cluster_m=2)
    outcome = run_function_gpu(fusion, specs, matmul=params)
    assert outcome.cls == "ok", outcome
    assert time.perf_counter() - start < 30.0
