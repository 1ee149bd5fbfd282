"""Side-by-side timings: pyfuse against torch eager and torch.compile, measured in one run.

Run on a GPU machine with torch and triton installed:

    PYTHONPATH=. python3 benchmarks/run.py [--only NAME ...] [--json results.json]

Every case uses fresh random data (never zeros), checks pyfuse's result against eager
torch first, and times with ``triton.testing.do_bench`` (median). Ratios are
``anchor_time / pyfuse_time``: above 1.0 pyfuse is faster. Memory-bound cases also print
achieved bandwidth (bytes read + written per second).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from common import commit, host_seconds_per_call

import pyfuse as pf


@dataclass
class Result:
    name: str
    pyfuse_ms: float
    anchors_ms: dict[str, float]
    bytes_moved: int = 0
    flops: int = 0
    notes: list[str] = field(default_factory=list)

    def ratios(self) -> dict[str, float]:
        return {name: ms / self.pyfuse_ms for name, ms in self.anchors_ms.items()}


def _bench(fn: Callable[[], Any]) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=200))


def _check(name: str, got: Any, want: Any, tolerance: float) -> None:
    error = (got.float() - want.float()).abs().max().item()
    scale = want.float().abs().max().item() + 1e-6
    if not error <= tolerance * max(1.0, scale):
        raise SystemExit(f"{name}: pyfuse disagrees with torch (max error {error})")


def _memory_case(
    name: str,
    fused: pf.FusedFunction,
    eager: Callable[..., Any],
    args: tuple[Any, ...],
    tolerance: float,
) -> Result:
    import torch

    compiled = torch.compile(eager)
    out = fused(*args)
    _check(name, out, eager(*args), tolerance)
    moved = sum(a.numel() * a.element_size() for a in args) + out.numel() * out.element_size()
    result = Result(
        name,
        _bench(lambda: fused(*args)),
        {"eager": _bench(lambda: eager(*args)), "compile": _bench(lambda: compiled(*args))},
        bytes_moved=moved,
    )
    return result


def case_gelu() -> Result:
    import torch

    n = 2**27
    x, y, z = (torch.randn(n, device="cuda") for _ in range(3))
    fused = pf.fuse(lambda x, y, z: pf.gelu(x * y + z).to(pf.bfloat16), name="gelu_fma")

    def eager(x: Any, y: Any, z: Any) -> Any:
        return torch.nn.functional.gelu(x * y + z).to(torch.bfloat16)

    return _memory_case("gelu(x*y+z) 2^27 f32->bf16", fused, eager, (x, y, z), 1e-2)


def case_bias_gelu() -> Result:
    """A broadcast input: gelu(x * scale[M, 1] + bias[N]) on 16384x4096 bf16 (the 2-D
    pointwise schedule reads scale and bias once per thread, not once per element)."""
    import torch

    m, n = 16384, 4096
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    scale = torch.randn(m, 1, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    fused = pf.fuse(lambda x, s, b: pf.gelu(x * s + b), name="scale_bias_gelu")

    def eager(x: Any, s: Any, b: Any) -> Any:
        return torch.nn.functional.gelu(x * s + b)

    return _memory_case("gelu(x*scale+bias) 16384x4096 bf16", fused, eager, (x, scale, bias), 2e-2)


def case_softmax() -> Result:
    import torch

    x = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16)
    fused = pf.fuse(lambda x: pf.softmax(x, -1), name="softmax")

    def eager(x: Any) -> Any:
        return torch.softmax(x.float(), -1).to(torch.bfloat16)

    return _memory_case("softmax 16384x4096 bf16", fused, eager, (x,), 1e-2)


def case_layer_norm() -> Result:
    import torch

    x = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    fused = pf.fuse(lambda x, w, b: pf.layer_norm(x, w, b, 1e-5), name="layer_norm")

    def eager(x: Any, w: Any, b: Any) -> Any:
        return torch.nn.functional.layer_norm(x, (4096,), w, b, 1e-5)

    return _memory_case("layer_norm 16384x4096 bf16", fused, eager, (x, w, b), 5e-2)


def case_rms_norm() -> Result:
    import torch

    x = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    fused = pf.fuse(lambda x, w: pf.rms_norm(x, w, 1e-6), name="rms_norm")

    def eager(x: Any, w: Any) -> Any:
        xf = x.float()
        scale = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
        return (xf * scale * w.float()).to(torch.bfloat16)

    return _memory_case("rms_norm 16384x4096 bf16", fused, eager, (x, w), 5e-2)


def case_wide_rows() -> list[Result]:
    """Rows of 25,000 to 49,152 at 1024 threads, whose kept tensors spill some registers:
    rms_norm and layer_norm of 49152 and 25000 columns and softmax of 44444, bf16 (keeping
    them in shared memory instead ran 1.2-1.55x slower: docs/performance.md)."""
    import torch

    rows = 2048
    results = []
    for cols in (49152, 25000):
        x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(cols, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(cols, device="cuda", dtype=torch.bfloat16)
        rms = pf.fuse(lambda x, w: pf.rms_norm(x, w, 1e-6), name="wide_rms_norm")

        def rms_eager(x: Any, w: Any) -> Any:
            xf = x.float()
            scale = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
            return (xf * scale * w.float()).to(torch.bfloat16)

        results.append(_memory_case(f"rms_norm {rows}x{cols} bf16", rms, rms_eager, (x, w), 5e-2))
        norm = pf.fuse(lambda x, w, b: pf.layer_norm(x, w, b, 1e-5), name="wide_layer_norm")

        def norm_eager(x: Any, w: Any, b: Any, cols: int = cols) -> Any:
            return torch.nn.functional.layer_norm(x, (cols,), w, b, 1e-5)

        name = f"layer_norm {rows}x{cols} bf16"
        results.append(_memory_case(name, norm, norm_eager, (x, w, b), 5e-2))
    y = torch.randn(rows, 44444, device="cuda", dtype=torch.bfloat16)
    softmax = pf.fuse(lambda y: pf.softmax(y, -1), name="wide_softmax")

    def softmax_eager(y: Any) -> Any:
        return torch.softmax(y.float(), -1).to(torch.bfloat16)

    results.append(_memory_case(f"softmax {rows}x44444 bf16", softmax, softmax_eager, (y,), 1e-2))
    return results


def case_vocab() -> list[Result]:
    """log_softmax over a vocabulary, bf16: rows past the persistent budget (1024 threads x
    48). 4096 and 8192 rows: one kernel, one block per row reading it again for the max, the
    sum and the output (passes/reread_rows.py); 16 rows: one kernel per reduction and one for
    the output (segment_recompute.py), the reductions spread over many blocks."""
    import torch

    results = []
    for rows, cols in ((4096, 128256), (8192, 50257), (16, 128256)):
        x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
        fused = pf.fuse(lambda x: pf.log_softmax(x, -1), name="vocab_log_softmax")

        def eager(x: Any) -> Any:
            return torch.log_softmax(x, -1)

        name = f"log_softmax {rows}x{cols} bf16"
        results.append(_memory_case(name, fused, eager, (x,), 5e-2))
    return results


def case_odd_rows() -> list[Result]:
    """Rows no vector divides: a softmax of 4096x32001 (aligned windows over each row) and
    logits / temperature over 8192x50257 (flat vectors across the rows of dense tensors),
    bf16."""
    import torch

    x = torch.randn(4096, 32001, device="cuda", dtype=torch.bfloat16)
    softmax = pf.fuse(lambda x: pf.softmax(x, -1), name="odd_softmax")

    def softmax_eager(x: Any) -> Any:
        return torch.softmax(x.float(), -1).to(torch.bfloat16)

    results = [_memory_case("softmax 4096x32001 bf16", softmax, softmax_eager, (x,), 1e-2)]
    logits = torch.randn(8192, 50257, device="cuda", dtype=torch.bfloat16)
    scaled = pf.fuse(lambda x: x / 0.7, name="odd_scale")

    def scale_eager(x: Any) -> Any:
        return x / 0.7

    results.append(
        _memory_case("logits / 0.7 8192x50257 bf16", scaled, scale_eager, (logits,), 2e-2)
    )
    return results


def case_rope() -> Result:
    """Rotary embedding through cat, as transformer code writes it: x * cos + rotate(x) * sin
    with rotate(x) = cat(-x2, x1) on 32x4096x128 bf16 (a cat is a kernel of its own today)."""
    import torch

    x = torch.randn(32, 4096, 128, device="cuda", dtype=torch.bfloat16)
    cos = torch.randn(4096, 128, device="cuda", dtype=torch.bfloat16)
    sin = torch.randn(4096, 128, device="cuda", dtype=torch.bfloat16)

    def rotary(x: Any, c: Any, s: Any, cat: Callable[..., Any]) -> Any:
        return x * c + cat([-x[..., 64:], x[..., :64]], -1) * s

    fused = pf.fuse(lambda x, c, s: rotary(x, c, s, pf.cat), name="rope")

    def eager(x: Any, c: Any, s: Any) -> Any:
        return rotary(x, c, s, torch.cat)

    return _memory_case("rope via cat 32x4096x128 bf16", fused, eager, (x, cos, sin), 5e-2)


def case_host_overhead() -> Result:
    """Wall time of a warm call on 16 elements, against one torch op (both asynchronous)."""
    import torch

    x, y = torch.randn(16, device="cuda"), torch.randn(16, device="cuda")
    fused = pf.fuse(lambda x, y: x + y, name="tiny_add")
    fused(x, y)
    torch.cuda.synchronize()

    def per_call(fn: Callable[[], Any]) -> float:
        return host_seconds_per_call(fn) * 1e3

    return Result(
        "host overhead, warm call, 16 elements (wall ms per call)",
        per_call(lambda: fused(x, y)),
        {"torch x+y": per_call(lambda: x + y)},
    )


_COLD_SCRIPT = """
import time, torch, pyfuse as pf
x = torch.randn(1000, 1000, device="cuda")
torch.cuda.synchronize()
for body in (lambda x: pf.tanh(x) * 3.0 + 1.0, lambda x: pf.exp(x) - 2.0):
    start = time.perf_counter()
    f = pf.fuse(body, name="cold_case")
    y = f(x)
    torch.cuda.synchronize()
    print(time.perf_counter() - start)
"""


def case_cold_call() -> Result:
    """First calls of new pointwise fusions (trace to finished kernel) in fresh processes, with
    an empty kernel cache and again with the cache an earlier process filled (cubins and
    variant records: no passes, no emission, no JIT). In each process the first fusion
    also pays one-time costs (driver bindings, context); the second is a new fusion in a warm
    process. The "ratios" compare times, not speed against an anchor."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, PYFUSE_CACHE_DIR=cache)
        runs = []
        for _ in range(2):
            output = subprocess.run(
                [sys.executable, "-c", _COLD_SCRIPT],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            runs.append([float(t) * 1e3 for t in output.stdout.split()])
    return Result(
        "cold call (ms): first fusion of a process, empty cache",
        runs[0][0],
        {
            "2nd new fusion, empty cache": runs[0][1],
            "first fusion, cache filled": runs[1][0],
            "2nd new fusion, cache filled": runs[1][1],
        },
    )


_ANCHORS: dict[tuple[Any, ...], dict[str, float]] = {}
# Set by --max-autotune: matmul cases against eager also time torch.compile(mode="max-autotune")
# (its tuning takes a minute or more per shape).
_MAX_AUTOTUNE = False


def _matmul_case(
    name: str,
    fused: pf.FusedFunction,
    eager: Callable[..., Any],
    args: tuple[Any, ...],
    flops: int,
    tolerance: float = 2e-2,
    anchor_name: str = "eager",
) -> Result:
    import torch

    out = fused(*args)
    want = eager(*args)
    outs = out if isinstance(out, tuple) else (out,)
    wants = want if isinstance(want, tuple) else (want,)
    for got, ref in zip(outs, wants, strict=True):
        _check(name, got, ref, tolerance)
    # Variants of one case share the anchors' timings (one torch.compile per case, not per
    # variant); every variant is still checked against eager above.
    key = (id(eager), anchor_name, *(id(a) for a in args))
    anchors = _ANCHORS.get(key)
    if anchors is None:
        anchors = {anchor_name: _bench(lambda: eager(*args))}
        if anchor_name == "eager":
            compiled = torch.compile(eager)
            compiled(*args)
            anchors["compile"] = _bench(lambda: compiled(*args))
            if _MAX_AUTOTUNE:
                tuned = torch.compile(eager, mode="max-autotune")
                tuned(*args)
                anchors["max-autotune"] = _bench(lambda: tuned(*args))
        _ANCHORS[key] = anchors
    return Result(name, _bench(lambda: fused(*args)), dict(anchors), flops=flops)


def case_gemm_layouts() -> list[Result]:
    """bf16 8192^3 and 4096^3 in the four layouts against torch.matmul (cuBLAS) on the same
    views."""
    import torch

    results = []
    for n in (8192, 4096):
        layouts = {
            "a @ b.T": lambda a, b: a @ b.T,
            "a @ b": lambda a, b: a @ b,
            "a.T @ b.T": lambda a, b: a.T @ b.T,
            "a.T @ b": lambda a, b: a.T @ b,
        }
        for label, fn in layouts.items():
            a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
            fused = pf.fuse(fn, name="gemm")
            title = f"gemm {n}^3 bf16 {label}"
            results.append(_matmul_case(title, fused, fn, (a, b), 2 * n**3, anchor_name="cublas"))
    return results


def case_gemm_cluster() -> list[Result]:
    """TMA multicast in 2-CTA clusters (``cluster_m=2``, the default at this size: the B tile
    is shared) and without, against the same cuBLAS call."""
    import torch

    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    variants = [
        ("1x1", pf.MatmulParams(cluster_m=1)),
        ("2x1", pf.MatmulParams(cluster_m=2)),
        ("1x2", pf.MatmulParams(cluster_n=2)),
    ]
    return _a_bt_variants("gemm 8192^3 bf16 a @ b.T, cluster", "gemm_cluster", a, b, variants)


def case_splitk() -> list[Result]:
    """Few output tiles, long K: 512x512x32768 (8 tiles of 128x256 for 132 SMs: the default
    splits K 16 ways) and 64x14336x4096 (56 tiles: not split), the default against
    ``splitk=1`` and cuBLAS."""
    import torch

    results = []
    for m, n, k in ((512, 512, 32768), (64, 14336, 4096)):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / 8
        variants = [("default", None), ("splitk=1", pf.MatmulParams(splitk=1))]
        title = f"gemm {m}x{n}x{k} bf16 a @ b.T,"
        results += _a_bt_variants(title, "gemm_long_k", a, b, variants)
    return results


def case_small_k() -> list[Result]:
    """Large outputs over a short K, where the output store dominates (issue 18's bar shapes:
    8192x8192x128 and 5328x8160x128 at >= 0.8x cuBLAS, and 2304x3632x64), the default
    against the same cuBLAS call."""
    import torch

    results = []
    for m, n, k in ((8192, 8192, 128), (5328, 8160, 128), (2304, 3632, 64)):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / 8
        title = f"gemm {m}x{n}x{k} bf16 a @ b.T,"
        results += _a_bt_variants(title, "gemm_small_k", a, b, [("default", None)])
    return results


def _a_bt_variants(
    title: str, name: str, a: Any, b: Any, variants: list[tuple[str, pf.MatmulParams | None]]
) -> list[Result]:
    """``a @ b.T`` under each (label, params) against the same cuBLAS call."""
    flops = 2 * a.shape[0] * b.shape[0] * a.shape[1]
    results = []

    def a_bt(a: Any, b: Any) -> Any:
        return a @ b.T

    for label, params in variants:
        fused = pf.fuse(a_bt, name=name, matmul=params)
        results.append(
            _matmul_case(f"{title} {label}", fused, a_bt, (a, b), flops, anchor_name="cublas")
        )
    return results


Variants = tuple[tuple[str, "pf.MatmulParams | None"], ...]

# The kernels a fused epilogue can run in, measured beside the default.
_EPILOGUE_VARIANTS: Variants = (
    (", no cluster", pf.MatmulParams(cluster_m=1)),
    (", ping-pong", pf.MatmulParams(pingpong=True)),
    (", epilogue warps", pf.MatmulParams(epilogue_warps=True)),
    (", epilogue warps, no cluster", pf.MatmulParams(epilogue_warps=True, cluster_m=1)),
)


def _linear_gelu(cases: tuple[tuple[tuple[int, int, int], Variants], ...]) -> list[Result]:
    """linear+bias+gelu(tanh) at each (M, N, K) under each (label, params) variant, against
    eager (cuBLAS with the bias, then a gelu kernel) and torch.compile."""
    import torch

    def eager(x: Any, w: Any, b: Any) -> Any:
        return torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b), approximate="tanh")

    results = []
    for (m, n, k), variants in cases:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / 64
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        for label, params in variants:
            fused = pf.fuse(
                lambda x, w, b: pf.gelu(pf.linear(x, w, b), approximate="tanh"),
                name="linear_gelu",
                matmul=params,
            )
            name = f"linear+bias+gelu {m}x{n}x{k}{label}"
            results.append(_matmul_case(name, fused, eager, (x, w, b), 2 * m * n * k))
    return results


def case_linear_gelu() -> list[Result]:
    """linear+bias+gelu(tanh) at 4096x14336x4096 and at 8192^3: the default, without a
    cluster, ping-pong, and the epilogue warps with and without a cluster."""
    variants = (("", None), *_EPILOGUE_VARIANTS)
    return _linear_gelu((((4096, 14336, 4096), variants), ((8192, 8192, 8192), variants)))


def case_linear_gelu_decode() -> list[Result]:
    """linear+bias+gelu(tanh) at decode sizes, 16x14336x4096 and 128x14336x4096 (the default,
    stream-K, and tiles that fill one wave): the weight read dominates; eager adds a separate
    gelu kernel."""
    # 112-column tiles: 128 of them, one wave over nearly every SM (the default's 128-column
    # tiles leave 20 of 132 SMs idle).
    variants: Variants = (
        ("", None),
        (", stream-K", pf.MatmulParams(stream_k=True)),
        (", 112-column tiles", pf.MatmulParams(tile_n=112)),
    )
    return _linear_gelu((((16, 14336, 4096), variants), ((128, 14336, 4096), variants)))


def case_gate_up() -> list[Result]:
    """The gate/up pair at 4096x14336x4096: the default and the epilogue variants."""
    import torch

    m, n, k = 4096, 14336, 4096
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w1 = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / 64
    w3 = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / 64

    def eager(x: Any, w1: Any, w3: Any) -> Any:
        return torch.nn.functional.silu(x @ w1.T) * (x @ w3.T)

    results = []
    for label, params in (("", None), *_EPILOGUE_VARIANTS):
        fused = pf.fuse(
            lambda x, w1, w3: pf.silu(x @ w1.T) * (x @ w3.T), name="gate_up", matmul=params
        )
        results.append(
            _matmul_case(
                f"gate/up silu(x@w1.T)*(x@w3.T) 4096x14336x4096{label}",
                fused,
                eager,
                (x, w1, w3),
                4 * m * n * k,
                tolerance=5e-2,
            )
        )
    return results


def case_linear_residual() -> list[Result]:
    """A projection with its bias and the residual stream, ``linear(x, w, b) + r``, at
    4096x4096x14336 (Llama-3-8B's down projection) and 8192x8192x8192: the residual loaded
    by TMA into the output's staging buffers (the default) and by a global load per pair of
    columns, against eager (cuBLAS with the bias, then an add) and torch.compile."""
    import torch

    def eager(x: Any, w: Any, b: Any, r: Any) -> Any:
        return torch.nn.functional.linear(x, w, b) + r

    results = []
    for m, n, k in ((4096, 4096, 14336), (8192, 8192, 8192)):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / 128
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        r = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        # (Stream-K kernels, the default where the last wave is partly idle, read the
        # residual by global loads: the variants without it compare the two reads.)
        variants: Variants = (
            ("", None),
            (", residual by global loads", pf.MatmulParams(tma_residuals=False)),
            (", no stream-K", pf.MatmulParams(stream_k=False)),
            (
                ", no stream-K, residual by global loads",
                pf.MatmulParams(stream_k=False, tma_residuals=False),
            ),
            (", ping-pong", pf.MatmulParams(pingpong=True)),
            (
                ", ping-pong, residual by global loads",
                pf.MatmulParams(pingpong=True, tma_residuals=False),
            ),
        )
        for label, params in variants:
            fused = pf.fuse(
                lambda x, w, b, r: pf.linear(x, w, b) + r, name="linear_residual", matmul=params
            )
            name = f"linear+bias+residual {m}x{n}x{k}{label}"
            results.append(_matmul_case(name, fused, eager, (x, w, b, r), 2 * m * n * k))
    return results


CASES: dict[str, Callable[[], Result | list[Result]]] = {
    "gelu": case_gelu,
    "bias_gelu": case_bias_gelu,
    "softmax": case_softmax,
    "layer_norm": case_layer_norm,
    "rms_norm": case_rms_norm,
    "rope": case_rope,
    "wide_rows": case_wide_rows,
    "vocab": case_vocab,
    "odd_rows": case_odd_rows,
    "host_overhead": case_host_overhead,
    "cold_call": case_cold_call,
    "gemm": case_gemm_layouts,
    "gemm_cluster": case_gemm_cluster,
    "splitk": case_splitk,
    "small_k": case_small_k,
    "linear_gelu": case_linear_gelu,
    "linear_gelu_decode": case_linear_gelu_decode,
    "gate_up": case_gate_up,
    "linear_residual": case_linear_residual,
}


def _line(result: Result) -> str:
    ratios = ", ".join(f"{k} {v:.2f}x" for k, v in result.ratios().items())
    line = f"{result.name}: pyfuse {result.pyfuse_ms:.4f} ms; {ratios}"
    if result.bytes_moved:
        line += f"; pyfuse {result.bytes_moved / result.pyfuse_ms / 1e9:.2f} TB/s"
        for anchor, ms in result.anchors_ms.items():
            line += f", {anchor} {result.bytes_moved / ms / 1e9:.2f} TB/s"
    if result.flops:
        line += f"; pyfuse {result.flops / result.pyfuse_ms / 1e9:.0f} TFLOP/s"
        for anchor, ms in result.anchors_ms.items():
            line += f", {anchor} {result.flops / ms / 1e9:.0f} TFLOP/s"
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=sorted(CASES), default=None)
    parser.add_argument("--json", default=None, help="also write the results to this file")
    parser.add_argument(
        "--max-autotune",
        action="store_true",
        help='matmul cases also against torch.compile(mode="max-autotune") (minutes)',
    )
    args = parser.parse_args()
    global _MAX_AUTOTUNE
    _MAX_AUTOTUNE = args.max_autotune

    import torch

    gpu = torch.cuda.get_device_name()
    header = f"pyfuse {pf.__version__} commit {commit()} on {gpu}, {datetime.date.today()}"
    print(header)
    results = []
    for name in args.only or list(CASES):
        try:
            outcome = CASES[name]()
        except Exception as error:  # report and go on: one failing case must not hide the rest
            print(f"{name}: FAILED: {type(error).__name__}: {error}", flush=True)
            continue
        for result in outcome if isinstance(outcome, list) else [outcome]:
            results.append(result)
            print(_line(result), flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"header": header, "results": [asdict(r) for r in results]}, handle, indent=2)


if __name__ == "__main__":
    main()
