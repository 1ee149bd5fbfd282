"""End-to-end matmuls on the GPU: ``@pf.fuse`` against a float32 torch reference on fresh random
data, every case run twice (a moving error is a race). Marked ``gpu``: skipped without one."""

from __future__ import annotations

from typing import Any

import pytest

import pyfuse as pf

pytestmark = pytest.mark.gpu

SCHEDULES = {
    "default": pf.MatmulParams(grid_swizzle=1, persistent=False),
    "swizzle4": pf.MatmulParams(grid_swizzle=4, persistent=False),
    "persistent": pf.MatmulParams(grid_swizzle=1, persistent=True),
    "both": pf.MatmulParams(grid_swizzle=4, persistent=True),
    "cluster2x1": pf.MatmulParams(grid_swizzle=4, persistent=True, cluster_m=2),
    "cluster1x2": pf.MatmulParams(grid_swizzle=4, persistent=False, cluster_n=2),
    "registers": pf.MatmulParams(smem_epilogue=False),
    "pingpong": pf.MatmulParams(pingpong=True),
    "pingpong_64x256_c2": pf.MatmulParams(pingpong=True, tile_m=64, tile_n=256, cluster_m=2),
}
CLUSTERS = {
    "2x1_persistent": pf.MatmulParams(persistent=True, cluster_m=2),
    "1x2_grid": pf.MatmulParams(persistent=False, cluster_n=2),
    "2x2_persistent": pf.MatmulParams(persistent=True, cluster_m=2, cluster_n=2),
}
SHAPES = [(64, 64, 64), (1000, 1000, 1000), (3000, 257, 520), (504, 136, 1024), (64, 14336, 4096)]


def _torch() -> Any:
    return pytest.importorskip("torch")


def _rand(torch: Any, *shape: int) -> Any:
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)


def _check(got: Any, want: Any, k: int) -> None:
    """bf16 output of an fp32-accumulated product: one rounding of the result plus the
    accumulation-order difference, which grows like sqrt(K)."""
    torch = _torch()
    got32, want32 = got.float(), want.float()
    scale = want32.abs().max().item() + 1.0
    error = (got32 - want32).abs().max().item()
    assert torch.isfinite(got32).all()
    assert error <= 1e-2 * scale + 1e-3 * k**0.5, f"max error {error} (scale {scale})"


def _layouts(torch: Any, m: int, n: int, k: int) -> dict[str, tuple[Any, Any, Any]]:
    a_km, a_mk = _rand(torch, k, m), _rand(torch, m, k)
    b_kn, b_nk = _rand(torch, k, n), _rand(torch, n, k)
    return {
        "a@b.T": (lambda a, b: a @ b.T, a_mk, b_nk),
        "a@b": (lambda a, b: a @ b, a_mk, b_kn),
        "a.T@b.T": (lambda a, b: a.T @ b.T, a_km, b_nk),
        "a.T@b": (lambda a, b: a.T @ b, a_km, b_kn),
    }


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_layouts_shapes_schedules(shape: tuple[int, int, int], schedule: str) -> None:
    torch = _torch()
    m, n, k = shape
    for label, (fn, a, b) in _layouts(torch, m, n, k).items():
        fused = pf.fuse(fn, matmul=SCHEDULES[schedule])
        want = fn(a.float(), b.float())
        first = fused(a, b)
        second = fused(a, b)
        _check(first, want, k)
        assert torch.equal(first, second), f"{label}: results moved between runs (a race)"


def test_4096_cubed_all_layouts() -> None:
    torch = _torch()
    for label, (fn, a, b) in _layouts(torch, 4096, 4096, 4096).items():
        fused = pf.fuse(fn)
        out = fused(a, b)
        _check(out, fn(a.float(), b.float()), 4096)
        assert torch.equal(out, fused(a, b)), label


def test_linear_bias_and_mul_sum() -> None:
    torch = _torch()
    x, w, bias = _rand(torch, 1000, 520), _rand(torch, 257, 520), _rand(torch, 257)
    linear = pf.fuse(lambda x, w, b: pf.linear(x, w, b))
    want = torch.nn.functional.linear(x.float(), w.float(), bias.float())
    _check(linear(x, w, bias), want, 520)
    mul_sum = pf.fuse(lambda a, b: pf.sum(a.unsqueeze(1) * b.unsqueeze(0), -1))
    _check(mul_sum(x, w), x.float() @ w.float().T, 520)


def test_batch_and_broadcast_batch() -> None:
    torch = _torch()
    a, b = _rand(torch, 3, 200, 64), _rand(torch, 3, 64, 136)
    fused = pf.fuse(lambda a, b: a @ b)
    _check(fused(a, b), a.float() @ b.float(), 64)
    a2, b2 = _rand(torch, 2, 1, 64, 32), _rand(torch, 5, 32, 48)
    _check(fused(a2, b2), a2.float() @ b2.float(), 32)


def test_epilogues() -> None:
    torch = _torch()
    x, w, bias, residual = (
        _rand(torch, 504, 1024),
        _rand(torch, 136, 1024),
        _rand(torch, 136),
        _rand(torch, 504, 136),
    )

    def fn(x, w, b, r):  # type: ignore[no-untyped-def]
        pre = pf.linear(x, w, b)
        return (pf.gelu(pre, approximate="tanh") + r).to(pf.float32), pre

    fused = pf.fuse(fn)
    out, pre = fused(x, w, bias, residual)
    pre_want = torch.nn.functional.linear(x.float(), w.float(), bias.float())
    _check(pre, pre_want, 1024)
    want = torch.nn.functional.gelu(pre.float(), approximate="tanh") + residual.float()
    assert out.dtype == torch.float32
    assert (out - want).abs().max().item() <= 2e-2 * (want.abs().max().item() + 1)


@pytest.mark.parametrize(
    "schedule", ["default", "persistent", "cluster2x1", "registers", "pingpong"]
)
def test_bias_and_row_scale_vectors(schedule: str) -> None:
    """A bias along N (f32) and a scale along M, loaded per tile into shared memory by TMA
    (passes/matmul_vectors.py), on ragged shapes with many tiles per CTA; twice."""
    torch = _torch()
    m, n, k = 3000, 1000, 520
    x, w = _rand(torch, m, k), _rand(torch, n, k)
    bias = torch.randn(n, device="cuda", dtype=torch.float32)
    scale = _rand(torch, m, 1)
    fused = pf.fuse(
        lambda x, w, b, s: ((x @ w.T + b) * s).to(pf.bfloat16), matmul=SCHEDULES[schedule]
    )
    product = (x.float() @ w.float().T).to(torch.bfloat16).float()
    want = (product + bias) * scale.float()
    for _ in range(2):
        _check(fused(x, w, bias, scale), want, k)


@pytest.mark.parametrize(
    "shape, params",
    [
        ((3000, 1000, 520), pf.MatmulParams(epilogue_warps=True, persistent=True)),
        ((4096, 4096, 1024), pf.MatmulParams(epilogue_warps=True)),
        ((200, 264, 4096), pf.MatmulParams(epilogue_warps=True, tile_m=64, tile_n=64, splitk=1)),
        ((1000, 1032, 256), pf.MatmulParams(epilogue_warps=True, cluster_m=2, persistent=True)),
    ],
    ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else "",
)
def test_epilogue_warps(shape: tuple[int, int, int], params: pf.MatmulParams) -> None:
    """linear + bias + gelu with the gelu in the producer warpgroup's idle warps, from the
    handoff tile the consumers write (passes/matmul_handoff.py); many tiles per CTA, twice."""
    torch = _torch()
    m, n, k = shape
    x, w, bias = _rand(torch, m, k), _rand(torch, n, k) / 8, _rand(torch, n)
    fused = pf.fuse(lambda x, w, b: pf.gelu(pf.linear(x, w, b), approximate="tanh"), matmul=params)
    pre = torch.nn.functional.linear(x.float(), w.float(), bias.float())
    want = torch.nn.functional.gelu(pre, approximate="tanh")
    kernel = fused.compile(x, w, bias).kernels[0]
    assert kernel.params["epilogue_warps"] is True
    for _ in range(2):
        _check(fused(x, w, bias), want, k)


def test_gate_up_pair_with_epilogue_warps() -> None:
    """silu(gate) * up with both products handed to the producer warpgroup's idle warps;
    ragged, many tiles per CTA, twice."""
    torch = _torch()
    x, w1, w3 = _rand(torch, 1000, 520), _rand(torch, 1032, 520) / 8, _rand(torch, 1032, 520) / 8
    fused = pf.fuse(
        lambda x, w1, w3: pf.silu(x @ w1.T) * (x @ w3.T),
        matmul=pf.MatmulParams(epilogue_warps=True, persistent=True),
    )
    assert fused.compile(x, w1, w3).kernels[0].params["epilogue_warps"] is True
    gate = (x.float() @ w1.float().T).to(torch.bfloat16).float()
    up = (x.float() @ w3.float().T).to(torch.bfloat16).float()
    want = torch.nn.functional.silu(gate) * up
    for _ in range(2):
        _check(fused(x, w1, w3), want, 520)


def test_gate_up_pair_with_intermediate_outputs() -> None:
    torch = _torch()
    x, w1, w3 = _rand(torch, 4096, 5120), _rand(torch, 14336, 5120), _rand(torch, 14336, 5120)
    w1, w3 = w1 / 64, w3 / 64

    def fn(x, w1, w3):  # type: ignore[no-untyped-def]
        gate, up = x @ w1.T, x @ w3.T
        return pf.silu(gate) * up, gate, up

    fused = pf.fuse(fn)
    out, gate, up = fused(x, w1, w3)
    gate_want, up_want = x.float() @ w1.float().T, x.float() @ w3.float().T
    _check(gate, gate_want, 5120)
    _check(up, up_want, 5120)
    want = torch.nn.functional.silu(gate.float()) * up.float()
    assert (out.float() - want).abs().max().item() <= 2e-2 * (want.abs().max().item() + 1)
    out2, _, _ = fused(x, w1, w3)
    assert torch.equal(out, out2)


def test_output_of_2_pow_31_elements() -> None:
    torch = _torch()
    a, b = _rand(torch, 65536, 256), _rand(torch, 256, 32768)
    out = pf.fuse(lambda a, b: a @ b)(a, b)
    assert out.numel() == 2**31
    rows = torch.tensor([0, 1, 30000, 65535], device="cuda")
    want = a[rows].float() @ b.float()
    _check(out[rows], want, 256)


def test_strided_and_offset_inputs_take_the_fallback() -> None:
    torch = _torch()
    base = _rand(torch, 300, 131)
    a = base[:, 1:]  # offset by one element and a 262-byte row pitch: TMA cannot load it
    b = _rand(torch, 130, 96)
    fused = pf.fuse(lambda a, b: a @ b)
    _check(fused(a, b), a.float() @ b.float(), 130)


@pytest.mark.parametrize("cluster", sorted(CLUSTERS))
def test_clusters_with_every_pattern(cluster: str) -> None:
    """TMA multicast in clusters: MatmulOp with a batch and a broadcast batch, LinearOp with
    bias and an epilogue, multiply-sum, and the gate/up pair (two B tiles, one shared A)."""
    torch = _torch()
    params = CLUSTERS[cluster]

    def twice(fused: Any, *args: Any) -> Any:
        first, second = fused(*args), fused(*args)
        assert torch.equal(first, second), f"{cluster}: results moved between runs (a race)"
        return first

    a, b = _rand(torch, 3, 1000, 520), _rand(torch, 3, 520, 504)
    _check(twice(pf.fuse(lambda a, b: a @ b, matmul=params), a, b), a.float() @ b.float(), 520)
    a2, b2 = _rand(torch, 2, 1, 200, 64), _rand(torch, 5, 64, 136)
    _check(twice(pf.fuse(lambda a, b: a @ b, matmul=params), a2, b2), a2.float() @ b2.float(), 64)
    x, w, bias = _rand(torch, 3000, 520), _rand(torch, 257 * 2, 520), _rand(torch, 257 * 2)
    linear = pf.fuse(lambda x, w, b: pf.gelu(pf.linear(x, w, b)), matmul=params)
    want = torch.nn.functional.gelu(torch.nn.functional.linear(x.float(), w.float(), bias.float()))
    got = twice(linear, x, w, bias)
    assert (got.float() - want).abs().max().item() <= 2e-2 * (want.abs().max().item() + 1)
    mul_sum = pf.fuse(lambda a, b: pf.sum(a.unsqueeze(1) * b.unsqueeze(0), -1), matmul=params)
    _check(twice(mul_sum, x, w), x.float() @ w.float().T, 520)
    w1, w3 = _rand(torch, 1000, 520) / 16, _rand(torch, 1000, 520) / 16
    gate_up = pf.fuse(lambda x, w1, w3: pf.silu(x @ w1.T) * (x @ w3.T), matmul=params)
    want = torch.nn.functional.silu(x.float() @ w1.float().T) * (x.float() @ w3.float().T)
    got = twice(gate_up, x, w1, w3)
    assert (got.float() - want).abs().max().item() <= 2e-2 * (want.abs().max().item() + 1)


SPLITK_CASES = {
    "a@b": (lambda a, b: a @ b, [(200, 4096), (4096, 136)]),
    "a@b.T": (lambda a, b: a @ b.T, [(200, 4096), (136, 4096)]),
    "a.T@b": (lambda a, b: a.T @ b, [(4096, 200), (4096, 136)]),
    "a.T@b.T": (lambda a, b: a.T @ b.T, [(4096, 200), (136, 4096)]),
    "batched": (lambda a, b: a @ b, [(3, 200, 2048), (2048, 136)]),
    "64x64x65536": (lambda a, b: a @ b.T, [(64, 65536), (64, 65536)]),
}


@pytest.mark.parametrize("splitk", [2, 8])
@pytest.mark.parametrize("case", sorted(SPLITK_CASES))
def test_split_k(case: str, splitk: int) -> None:
    """K split into parts on separate CTAs (a batched matmul, then the sum), every layout."""
    torch = _torch()
    fn, shapes = SPLITK_CASES[case]
    args = [_rand(torch, *shape) for shape in shapes]
    fused = pf.fuse(fn, matmul=pf.MatmulParams(splitk=splitk))
    first, second = fused(*args), fused(*args)
    k = shapes[1][-1] if case in ("a@b.T", "a.T@b.T", "64x64x65536") else shapes[1][-2]
    _check(first, fn(*(a.float() for a in args)), k)
    assert torch.equal(first, second), f"{case}: results moved between runs (a race)"
    assert len(fused.compile(*args).kernels) >= 2  # the split applied: matmul, then the sum


def test_split_k_linear_bias_gelu_and_a_k_it_cannot_split() -> None:
    torch = _torch()
    x, w, bias = _rand(torch, 256, 8192), _rand(torch, 520, 8192), _rand(torch, 520)
    linear = pf.fuse(
        lambda x, w, b: pf.gelu(pf.linear(x, w, b), approximate="tanh"),
        matmul=pf.MatmulParams(splitk=4),
    )
    want = torch.nn.functional.gelu(
        torch.nn.functional.linear(x.float(), w.float(), bias.float()), approximate="tanh"
    )
    got = linear(x, w, bias)
    assert (got.float() - want).abs().max().item() <= 2e-2 * (want.abs().max().item() + 1)
    assert torch.equal(got, linear(x, w, bias))
    a, b = _rand(torch, 200, 1000), _rand(torch, 1000, 136)  # K = 1000: 4 parts of 250
    unsplit = pf.fuse(lambda a, b: a @ b, matmul=pf.MatmulParams(splitk=4))
    with pytest.warns(UserWarning, match="not a multiple"):
        out = unsplit(a, b)
    _check(out, a.float() @ b.float(), 1000)


# ---- issue 14: matmuls of every shape (narrow and odd N/K, one input as both operands, size-1
# M/N/K, epilogue views of the result), against a float64 reference on fresh inputs, twice ----


def _heads(x: Any, w: Any) -> Any:
    return pf.transpose(pf.reshape(pf.linear(x, w), (2, 64, 4, 32)), 1, 2)


def _heads_reference(x: Any, w: Any) -> Any:
    return (x @ w.T).reshape(2, 64, 4, 32).transpose(1, 2)


def _linear_reference(x: Any, w: Any, b: Any = None) -> Any:
    out = x @ w.T
    return out if b is None else out + b


# name -> (function, reference on float64 tensors, input shapes; a shape with strides is
# (shape, strides), carved from a larger buffer)
SHAPE_CASES: dict[str, tuple[Any, Any, list[Any]]] = {
    "mm_4096x16": (lambda a, b: a @ b, lambda a, b: a @ b, [(4096, 4096), (4096, 16)]),
    "mm_128x64x40": (lambda a, b: a @ b, lambda a, b: a @ b, [(128, 64), (64, 40)]),
    "mm_N96": (lambda a, b: a @ b, lambda a, b: a @ b, [(256, 128), (128, 96)]),
    "tn_N96": (lambda a, b: a.T @ b, lambda a, b: a.T @ b, [(128, 256), (128, 96)]),
    "mm_N24": (lambda a, b: a @ b, lambda a, b: a @ b, [(200, 72), (72, 24)]),
    "mm_N8": (lambda a, b: a @ b, lambda a, b: a @ b, [(128, 256), (256, 8)]),
    "mm_K40": (lambda a, b: a @ b, lambda a, b: a @ b, [(128, 40), (40, 128)]),
    "linear_N40": (pf.linear, _linear_reference, [(128, 64), (40, 64)]),
    "mm_aa": (lambda a: a @ a, lambda a: a @ a, [(128, 128)]),
    "mm_aa96": (lambda a: a @ a, lambda a: a @ a, [(96, 96)]),
    "x@x.T": (lambda x: x @ x.T, lambda x: x @ x.T, [(256, 128)]),
    "x.T@x": (lambda x: x.T @ x, lambda x: x.T @ x, [(256, 128)]),
    "residual": (
        lambda x, w: pf.linear(x, w) + x,
        lambda x, w: x @ w.T + x,
        [(128, 128), (128, 128)],
    ),
    "mm_K1": (lambda a, b: a @ b, lambda a, b: a @ b, [(128, 1), (1, 128)]),
    "bmm_K1": (lambda a, b: a @ b, lambda a, b: a @ b, [(3, 32, 1), (1, 40)]),
    "decode_linear": (pf.linear, _linear_reference, [(1, 4096), (4096, 4096)]),
    "decode_linear_bias": (pf.linear, _linear_reference, [(1, 4096), (4096, 4096), (4096,)]),
    "matvec_rows": (lambda a, b: a @ b, lambda a, b: a @ b, [(1, 4096), (4096, 512)]),
    "N7": (lambda a, b: a @ b, lambda a, b: a @ b, [(16, 4096), (4096, 7)]),
    "linear_heads": (_heads, _heads_reference, [(2, 64, 128), (128, 128)]),
    "transposed_output": (lambda a, b: (a @ b).T, lambda a, b: (a @ b).T, [(128, 64), (64, 256)]),
    "batched_b_long_k": (lambda a, b: a @ b, lambda a, b: a @ b, [(3, 64, 4096), (3, 4096, 256)]),
    "bmm_odd_strides": (
        lambda a, b: a @ b,
        lambda a, b: a @ b,
        [((3, 64, 64), (64 * 65, 65, 1)), (3, 64, 64)],
    ),
}


def _input(torch: Any, shape: Any) -> Any:
    if isinstance(shape[0], tuple):
        size, strides = shape
        extent = 1 + sum((n - 1) * s for n, s in zip(size, strides, strict=True))
        return _rand(torch, extent).as_strided(size, strides)
    return _rand(torch, *shape)


@pytest.mark.parametrize("case", sorted(SHAPE_CASES))
def test_matmul_shapes_of_issue_14(case: str) -> None:
    torch = _torch()
    fn, reference, shapes = SHAPE_CASES[case]
    fused = pf.fuse(fn)
    k = max(_input_k(shapes), 1)
    for _ in range(2):  # fresh inputs each time: a stale or racing result shows
        args = [_input(torch, shape) for shape in shapes]
        got = fused(*args)
        want = reference(*(arg.double() for arg in args))
        assert got.shape == want.shape, f"{case}: shape {tuple(got.shape)}"
        _check(got, want, k)


def _input_k(shapes: list[Any]) -> int:
    """The contraction length of a case (the first input's last dim, or its first for a.T)."""
    first = shapes[0][0] if isinstance(shapes[0][0], tuple) else shapes[0]
    return int(max(first[-1], first[0]))
