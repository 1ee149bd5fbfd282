"""Pointwise and reduction fusions on the GPU against the NumPy float64 reference.

Every case runs ``@pf.fuse`` on torch CUDA tensors holding fresh random data (no fixed seed:
the seed is printed on failure), twice (a result that moves between runs is a race), and
compares with ``fused.reference`` on host copies. Cases cover every pointwise and reduction
op and the composites, the shapes 1, 7, 1000x1000, 7x32769 and 16384x4096, a tensor of more
than 2**31 elements (64-bit indexing), broadcast, transposed, expanded and offset inputs
(an offset of one element compiles the unvectorized variant), and int32/int64/bool dtypes.
Large row-wise cases compare a sample of rows (each row's result depends on that row only).

``test_every_case_compiles_and_assembles`` needs no GPU: it compiles every case for the
layout its tensors will have and assembles the PTX with ptxas, so emitter and lowering
failures show up on the CPU before device time is spent.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import check_utils
import numpy as np
import pytest
from check_utils import to_host

import pyfuse as pf
from pyfuse import knobs
from pyfuse.backend_ptx import ptxas
from pyfuse.ir.target import HOPPER
from pyfuse.runtime.compile import compile_fusion

# ---- cases ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Arg:
    """One tensor argument: logical shape, dtype, value domain and memory layout.

    ``view``: ``plain`` (row-major), ``T`` (``x.T`` of the reversed shape), ``offset``
    (``x[1:]`` of one more row; the offset keeps 16-byte alignment when rows do),
    ``offset1`` (``x.view(-1)[1:]``: a one-element offset, misaligned), ``expand`` (a size-1
    leading axis expanded: stride 0), ``slice`` (``x[:, :n]`` of a wider tensor).
    """

    shape: tuple[int, ...]
    dtype: str = "float32"
    domain: str = "any"  # any, positive, nonzero, round (small integers as floats)
    view: str = "plain"

    def strides(self) -> tuple[int, ...]:
        if self.view == "T":
            return tuple(reversed(_row_major(tuple(reversed(self.shape)))))
        if self.view == "expand":
            return (0, *_row_major(self.shape[1:]))
        if self.view == "slice":
            return (self.shape[1] + 24, 1)
        return _row_major(self.shape)

    def offset_bytes(self) -> int:
        itemsize = getattr(pf, _PF_NAMES[self.dtype]).itemsize
        if self.view == "offset":
            return math.prod(self.shape[1:]) * itemsize
        if self.view == "offset1":
            return itemsize
        return 0

    def spec(self) -> pf.Spec:
        return pf.spec(self.shape, getattr(pf, _PF_NAMES[self.dtype]), self.strides())

    def make(self, torch: Any, generator: Any) -> Any:
        base = _random(torch, generator, self._base_shape(), self.dtype, self.domain)
        if self.view == "T":
            return base.T
        if self.view == "offset":
            return base[1:]
        if self.view == "offset1":
            return base[1:].view(self.shape)
        if self.view == "expand":
            return base.expand(*self.shape)
        if self.view == "slice":
            return base[:, : self.shape[1]]
        return base

    def _base_shape(self) -> tuple[int, ...]:
        if self.view == "T":
            return tuple(reversed(self.shape))
        if self.view == "offset":
            return (self.shape[0] + 1, *self.shape[1:])
        if self.view == "offset1":
            return (math.prod(self.shape) + 1,)
        if self.view == "expand":
            return (1, *self.shape[1:])
        if self.view == "slice":
            return (self.shape[0], self.shape[1] + 24)
        return self.shape


_PF_NAMES = {
    "float32": "float32",
    "bfloat16": "bfloat16",
    "float16": "float16",
    "int32": "int32",
    "int64": "int64",
    "bool": "bool",
}


def _row_major(shape: Sequence[int]) -> tuple[int, ...]:
    strides, running = [], 1
    for extent in reversed(shape):
        strides.append(running)
        running *= max(extent, 1)
    return tuple(reversed(strides))


def _random(torch: Any, generator: Any, shape: tuple[int, ...], dtype: str, domain: str) -> Any:
    device = "cuda"
    if dtype == "bool":
        return torch.rand(shape, generator=generator, device=device) > 0.5
    if dtype in ("int32", "int64"):
        low, high = (-3, 4) if domain == "round" else (-1000, 1000)
        values = torch.randint(low, high, shape, generator=generator, device=device)
        return values.to(getattr(torch, dtype))
    values = torch.randn(shape, generator=generator, device=device, dtype=torch.float32)
    if domain == "positive":
        values = values.abs() + 0.1
    elif domain == "nonzero":
        values = torch.where(values < 0, values - 0.5, values + 0.5)
    elif domain == "round":
        values = torch.round(values * 2)
    return values.to(getattr(torch, dtype))


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    fn: Callable[..., Any]
    args: tuple[Arg | float | int, ...]
    rtol: float = 1e-5
    atol: float = 1e-5
    sample: str | None = None  # "rows" or "elements": compare a sample (row-independent)

    @property
    def id(self) -> str:
        return self.name


F32_TOL = {"rtol": 1e-5, "atol": 1e-5}
BF16_TOL = {"rtol": 1.6e-2, "atol": 1e-5}  # one bf16 rounding (plus one of an input op)

UNARY: dict[str, tuple[Callable[..., Any], str]] = {
    "neg": (pf.neg, "any"),
    "abs": (pf.abs, "any"),
    "exp": (pf.exp, "any"),
    "log": (pf.log, "positive"),
    "tanh": (pf.tanh, "any"),
    "sigmoid": (pf.sigmoid, "any"),
    "relu": (pf.relu, "any"),
    "gelu": (pf.gelu, "any"),
    "gelu_tanh": (lambda x: pf.gelu(x, approximate="tanh"), "any"),
    "silu": (pf.silu, "any"),
    "sqrt": (pf.sqrt, "positive"),
    "rsqrt": (pf.rsqrt, "positive"),
    "reciprocal": (pf.reciprocal, "nonzero"),
    "sin": (pf.sin, "any"),
    "cos": (pf.cos, "any"),
}

BINARY: dict[str, tuple[Callable[..., Any], str, str]] = {
    "add": (pf.add, "any", "any"),
    "sub": (pf.sub, "any", "any"),
    "mul": (pf.mul, "any", "any"),
    "div": (pf.div, "any", "nonzero"),
    "pow": (pf.pow, "positive", "any"),
    "maximum": (pf.maximum, "any", "any"),
    "minimum": (pf.minimum, "any", "any"),
    "eq": (pf.eq, "round", "round"),
    "ne": (pf.ne, "round", "round"),
    "lt": (pf.lt, "round", "round"),
    "le": (pf.le, "round", "round"),
    "gt": (pf.gt, "round", "round"),
    "ge": (pf.ge, "round", "round"),
}

REDUCTIONS: dict[str, Callable[..., Any]] = {
    "sum": pf.sum,
    "max": pf.max,
    "min": pf.min,
    "mean": pf.mean,
}


def _pointwise_cases() -> list[Case]:
    cases = []
    for shape in [(1,), (7,), (1000, 1000)]:
        tag = "x".join(map(str, shape))
        for name, (fn, domain) in UNARY.items():
            cases.append(Case(f"{name}-f32-{tag}", fn, (Arg(shape, domain=domain),)))
        if shape == (1,):
            continue
        for name, (fn, left, right) in BINARY.items():
            args = (Arg(shape, domain=left), Arg(shape, domain=right))
            cases.append(Case(f"{name}-f32-{tag}", fn, args))
    big = (1000, 1000)
    cases += [
        Case(
            "unary-bf16-1000x1000",
            lambda x: pf.silu(x) * pf.tanh(x),
            (Arg(big, "bfloat16"),),
            **BF16_TOL,
        ),
        Case("where-f32", lambda c, x, y: pf.where(c > 0, x, y), (Arg(big), Arg(big), Arg(big))),
        Case("where-scalar", lambda x: pf.where(x > 0, x, 0.5), (Arg(big),)),
        Case(
            "logical-bool",
            lambda a, b: pf.logical_or(pf.logical_and(a, b), pf.logical_not(b)),
            (Arg(big, "bool"), Arg(big, "bool")),
        ),
        Case("scalars", lambda x, s: x * s + 1.5, (Arg(big), 2.5)),
        Case(
            "int32-ops",
            lambda a, b: pf.maximum(a * b, -a) + pf.abs(b),
            (Arg(big, "int32"), Arg(big, "int32")),
        ),
        Case(
            "int64-ops",
            lambda a, b: (a - b) * 3 + pf.neg(a),
            (Arg(big, "int64"), Arg(big, "int64")),
        ),
        Case(
            "int-compare-where",
            lambda a, b: pf.where(a < b, a, b),
            (Arg((7,), "int32"), Arg((7,), "int32")),
        ),
        Case("cast-f32-int32", lambda x: (x * 100).to(pf.int32), (Arg(big),)),
        Case("cast-int32-f32", lambda a: a.to(pf.float32) * 0.5, (Arg(big, "int32"),)),
        Case("cast-bool-f32", lambda b, x: b.to(pf.float32) * x, (Arg(big, "bool"), Arg(big))),
        Case("cast-f32-bf16", lambda x: x.to(pf.bfloat16), (Arg(big),), **BF16_TOL),
        Case("cast-bf16-f32", lambda x: x.to(pf.float32) * 3.0, (Arg(big, "bfloat16"),)),
        Case("two-outputs", lambda x, y: (x + y, x * y), (Arg(big), Arg(big))),
        # broadcasts
        Case("bcast-row", lambda x, b: x + b, (Arg(big), Arg((1000,)))),
        Case("bcast-col", lambda x, b: x * b, (Arg((7, 32769)), Arg((7, 1)))),
        Case("bcast-outer", lambda a, b: a - b, (Arg((1000, 1)), Arg((1, 1000)))),
        Case("bcast-expand", lambda x, e: x + e, (Arg(big), Arg(big, view="expand"))),
        # views
        Case("transposed", lambda x, y: x * y + x, (Arg(big, view="T"), Arg(big))),
        Case(
            "transposed-both",
            lambda x, y: x - y,
            (Arg((7, 32769), view="T"), Arg((7, 32769), view="T")),
        ),
        Case("offset-rows", lambda x, y: x + y, (Arg(big, view="offset"), Arg(big))),
        Case("offset-one", lambda x: pf.exp(x) + 1.0, (Arg((1000, 1000), view="offset1"),)),
        Case(
            "offset-one-bf16",
            lambda x: x * 3.0,
            (Arg((4099,), "bfloat16", view="offset1"),),
            **BF16_TOL,
        ),
        Case("sliced", lambda x: x * 2.0 + 1.0, (Arg((1000, 1000), view="slice"),)),
        Case("ragged-7x32769", lambda x, y: pf.gelu(x) * y, (Arg((7, 32769)), Arg((7, 32769)))),
        Case(
            "gelu-xyz-16384x4096-bf16",
            lambda x, y, z: pf.gelu(x * y + z).to(pf.bfloat16),
            (Arg((16384, 4096)), Arg((16384, 4096)), Arg((16384, 4096))),
            sample="rows",
            **BF16_TOL,
        ),
    ]
    return cases


def sum_atol(count: int) -> float:
    """Absolute tolerance of a float32 sum of ``count`` standard normal values: accumulation
    error grows with the sum of magnitudes (about 0.8 * count), not with the result."""
    return max(1e-5, 4e-7 * count)


def _reduction_cases() -> list[Case]:
    cases = []
    layouts: list[tuple[tuple[int, ...], Any, str]] = [
        ((1,), 0, "1"),
        ((7,), 0, "7"),
        ((1000, 1000), 1, "1000x1000-d1"),
        ((1000, 1000), 0, "1000x1000-d0"),
        ((1000, 1000), (0, 1), "1000x1000-all"),
        ((7, 32769), 1, "7x32769-d1"),
        ((7, 32769), 0, "7x32769-d0"),
    ]
    for shape, dim, tag in layouts:
        dims = (dim,) if isinstance(dim, int) else dim
        reduced = math.prod(shape[d] for d in dims)
        for name, op in REDUCTIONS.items():
            atol = sum_atol(reduced) if name == "sum" else 1e-5
            cases.append(
                Case(
                    f"{name}-{tag}",
                    lambda x, op=op, dim=dim: op(x, dim),
                    (Arg(shape),),
                    atol=atol,
                )
            )
    big = (16384, 4096)
    cases += [
        Case(
            "sum-keepdim",
            lambda x: x - pf.sum(x, 1, keepdim=True),
            (Arg((1000, 1000)),),
            atol=sum_atol(1000),
        ),
        Case("mean-transposed", lambda x: pf.mean(x, 1), (Arg((1000, 1000), view="T"),)),
        Case("max-offset-one", lambda x: pf.max(x, 1), (Arg((1000, 1000), view="offset1"),)),
        Case("sum-int32", lambda x: pf.sum(x, 1), (Arg((1000, 1000), "int32"),)),
        Case("max-int64", lambda x: pf.max(x, 0), (Arg((7, 32769), "int64"),)),
        Case("sum-bool", lambda b: pf.sum(b, 1), (Arg((1000, 1000), "bool"),)),
        Case(
            "sum-bf16",
            lambda x: pf.sum(x.to(pf.float32), 1),
            (Arg((7, 32769), "bfloat16"),),
            atol=sum_atol(32769),
        ),
        Case("sum-rows-16384x4096", lambda x: pf.sum(x, 1), (Arg(big),), atol=sum_atol(4096)),
        # Rows too long for one block: split into a partial-sum kernel and a finishing one.
        Case(
            "sum-long-rows-64x100000",
            lambda x: pf.sum(x, 1),
            (Arg((64, 100000)),),
            atol=sum_atol(100000),
        ),
        Case("sum-cols-16384x4096", lambda x: pf.sum(x, 0), (Arg(big),), atol=sum_atol(16384)),
        Case(
            "max-rows-16384x4096-bf16", lambda x: pf.max(x, 1), (Arg(big, "bfloat16"),), **BF16_TOL
        ),
    ]
    return cases


def _composite_cases() -> list[Case]:
    big = (16384, 4096)
    return [
        Case("softmax-7", lambda x: pf.softmax(x, 0), (Arg((7,)),), atol=1e-6),
        Case("softmax-1000x1000", lambda x: pf.softmax(x, -1), (Arg((1000, 1000)),), atol=1e-6),
        Case("softmax-dim0", lambda x: pf.softmax(x, 0), (Arg((1000, 1000)),), atol=1e-6),
        Case("softmax-7x32769", lambda x: pf.softmax(x, -1), (Arg((7, 32769)),), atol=1e-7),
        Case("softmax-T", lambda x: pf.softmax(x, -1), (Arg((7, 32769), view="T"),), atol=1e-7),
        Case(
            "softmax-16384x4096-bf16",
            lambda x: pf.softmax(x, -1),
            (Arg(big, "bfloat16"),),
            sample="rows",
            **BF16_TOL,
        ),
        Case(
            "layer_norm-1000x1000",
            lambda x, w, b: pf.layer_norm(x, w, b, 1e-5),
            (Arg((1000, 1000)), Arg((1000,)), Arg((1000,))),
            rtol=2e-5,
            atol=2e-5,
        ),
        Case(
            "layer_norm-7x32769",
            lambda x: pf.layer_norm(x),
            (Arg((7, 32769)),),
            rtol=2e-5,
            atol=2e-5,
        ),
        Case(
            "layer_norm-16384x4096-bf16",
            lambda x, w, b: pf.layer_norm(x, w, b, 1e-5),
            (Arg(big, "bfloat16"), Arg((4096,), "bfloat16"), Arg((4096,), "bfloat16")),
            sample="rows",
            **BF16_TOL,
        ),
        Case(
            "rms_norm-1000x1000",
            lambda x, w: pf.rms_norm(x, w, 1e-6),
            (Arg((1000, 1000)), Arg((1000,))),
            rtol=2e-5,
            atol=2e-5,
        ),
        Case(
            "rms_norm-7x32769", lambda x: pf.rms_norm(x), (Arg((7, 32769)),), rtol=2e-5, atol=2e-5
        ),
        Case(
            "rms_norm-16384x4096-bf16",
            lambda x, w: pf.rms_norm(x, w, 1e-6),
            (Arg(big, "bfloat16"), Arg((4096,), "bfloat16")),
            sample="rows",
            **BF16_TOL,
        ),
    ]


HUGE = 2**31 + 8
LARGE_CASES = [
    Case(
        "huge-pointwise-bf16",
        lambda x: x * 2.0 + 1.0,
        (Arg((HUGE,), "bfloat16"),),
        sample="elements",
        **BF16_TOL,
    ),
    Case(
        "huge-row-sum-bf16",
        lambda x: pf.sum(x.to(pf.float32), 1),
        (Arg((2**16 + 1, 2**15), "bfloat16"),),
        sample="rows",
        rtol=1e-5,
        atol=1e-3,
    ),
]

CASES = _pointwise_cases() + _reduction_cases() + _composite_cases()


# ---- checking ---------------------------------------------------------------------------------


def _sample_elements(count: int, rng: np.random.Generator) -> np.ndarray:
    boundary = 2**31
    parts = [
        np.arange(0, 4096),
        np.arange(count - 4096, count),
        np.arange(boundary - 2048, min(boundary + 2048, count)),
        rng.integers(0, count, 1 << 16),
    ]
    return np.unique(np.concatenate(parts))


def run_case(torch: Any, case: Case) -> None:
    seed = int.from_bytes(os.urandom(4), "little")
    generator = torch.Generator(device="cuda").manual_seed(seed)
    inputs = [a.make(torch, generator) if isinstance(a, Arg) else a for a in case.args]
    for arg, value in zip(case.args, inputs, strict=True):
        if isinstance(arg, Arg):
            assert tuple(value.stride()) == arg.strides() or math.prod(arg.shape) == 1, arg
    fused = pf.fuse(name=case.name.replace("-", "_"))(case.fn)
    runs = check_utils.run_twice(torch, fused, inputs)
    rng = np.random.default_rng(seed)
    gather: Any = None
    host_args: list[Any] = []
    if case.sample is None:
        host_args = [
            to_host(torch, v) if isinstance(a, Arg) else v
            for a, v in zip(case.args, inputs, strict=True)
        ]
    else:
        first = next(v for v in inputs if not isinstance(v, int | float))
        sampler = check_utils.sample_rows if case.sample == "rows" else _sample_elements
        gather = torch.from_numpy(sampler(first.shape[0], rng)).to("cuda")
        for arg, value in zip(case.args, inputs, strict=True):
            if not isinstance(arg, Arg):
                host_args.append(value)
            elif value.shape[0] == first.shape[0] and value.dim() == first.dim():
                host_args.append(to_host(torch, value.index_select(0, gather)))
            else:
                host_args.append(to_host(torch, value))  # a weight shared by every row
    check_utils.assert_runs_close(
        torch,
        runs,
        fused.reference(*host_args),
        gather,
        atol=case.atol,
        rtol=case.rtol,
        what=case.name,
        seed=seed,
    )


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_case_matches_reference(torch: Any, case: Case) -> None:
    run_case(torch, case)


@pytest.mark.gpu
@pytest.mark.parametrize("case", LARGE_CASES, ids=lambda c: c.id)
def test_more_than_2_31_elements(torch: Any, case: Case) -> None:
    free, _ = torch.cuda.mem_get_info()
    if free < 12 * 2**30:
        pytest.skip(f"needs 12 GiB of free GPU memory, {free / 2**30:.1f} GiB free")
    try:
        run_case(torch, case)
    finally:
        torch.cuda.empty_cache()


# ---- interop, streams, graphs, overhead -------------------------------------------------------


@pytest.mark.gpu
def test_runs_on_the_current_torch_stream_and_under_graph_capture(torch: Any) -> None:
    f = pf.fuse(lambda x, y: pf.softmax(x * y, -1))
    x, y = torch.randn(64, 300, device="cuda"), torch.randn(64, 300, device="cuda")
    want = torch.softmax(x * y, -1)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        got = f(x, y)
    stream.synchronize()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = f(x, y)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(captured, torch.softmax(x * y, -1), rtol=1e-5, atol=1e-6)


class _InterfaceOnly:
    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor
        self.__cuda_array_interface__ = tensor.__cuda_array_interface__


class _DLPackOnly:
    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor

    def __dlpack__(self, stream: Any = None) -> Any:
        return self.tensor.__dlpack__(stream=stream)

    def __dlpack_device__(self) -> Any:
        return self.tensor.__dlpack_device__()


@pytest.mark.gpu
def test_interface_and_dlpack_inputs_give_device_arrays(torch: Any) -> None:
    from pyfuse.runtime.arrays import DeviceArray

    f = pf.fuse(lambda x, y: x * y + 1.0)
    base = torch.randn(33, 65, device="cuda")
    other = torch.randn(65, 33, device="cuda").T  # strided through both protocols
    want = (base * other + 1.0).cpu().numpy()
    for wrap in (_InterfaceOnly, _DLPackOnly):
        out = f(wrap(base), wrap(other))
        assert isinstance(out, DeviceArray)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-6, atol=1e-6)
        again = f(out, wrap(base))  # a DeviceArray goes back in as it is
        np.testing.assert_allclose(
            again.numpy(), want * base.cpu().numpy() + 1.0, rtol=1e-5, atol=1e-5
        )


@pytest.mark.gpu
def test_host_overhead_and_cold_call(
    torch: Any, tmp_path: Any, record_property: Callable[[str, object], None]
) -> None:
    x, y = torch.randn(16, device="cuda"), torch.randn(16, device="cuda")
    with knobs.overrides(cache_dir=tmp_path):
        cold = pf.fuse(lambda a, b: a * b + 0.25)
        start = time.perf_counter()
        cold(x, y)
        torch.cuda.synchronize()
        cold_seconds = time.perf_counter() - start
        disk = pf.fuse(lambda a, b: a * b + 0.25)  # a new function: passes again, cubin from disk
        start = time.perf_counter()
        disk(x, y)
        torch.cuda.synchronize()
        disk_seconds = time.perf_counter() - start

    def per_call(fn: Callable[[], Any]) -> float:
        for _ in range(200):
            fn()
        torch.cuda.synchronize()
        best = math.inf
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(1000):
                fn()
            best = min(best, (time.perf_counter() - start) / 1000)
            torch.cuda.synchronize()
        return best

    from pyfuse.runtime import calls
    from pyfuse.runtime.arrays import call_key

    (bound,) = cold.__dict__["_pyfuse_runtime"].bound.values()
    launch = bound._loaded.direct  # the bound closure: packed pointers, fixed grid
    out = torch.empty_like(x)
    pointers = [x.data_ptr(), y.data_ptr(), out.data_ptr()]
    stream = torch.cuda.current_stream().cuda_stream
    ours = per_call(lambda: cold(x, y))
    report = {
        "pyfuse_call_us": ours * 1e6,
        "runtime_call_us": per_call(lambda: calls.call(cold, (x, y))) * 1e6,
        "call_key_us": per_call(lambda: call_key((x, y))) * 1e6,
        "torch_empty_like_us": per_call(lambda: torch.empty_like(x)) * 1e6,
        "bare_launch_us": per_call(lambda: launch(pointers, stream)) * 1e6,
        "torch_add_us": per_call(lambda: torch.add(x, y)) * 1e6,
        "cold_call_ms": cold_seconds * 1e3,
        "cold_call_disk_cache_ms": disk_seconds * 1e3,
    }
    report = {key: round(value, 2) for key, value in report.items()}
    for key, value in report.items():
        record_property(key, value)
    print("\nHOST OVERHEAD", report)
    assert ours < 100e-6, report  # the bar is 15 us; this guards only against regressions


# ---- CPU: every case compiles and assembles ---------------------------------------------------


def _compile_for_layout(case: Case) -> Any:
    fused = pf.fuse(name=case.name.replace("-", "_"))(case.fn)
    specs = [a.spec() if isinstance(a, Arg) else a for a in case.args]
    aligned = all(a.offset_bytes() % 16 == 0 for a in case.args if isinstance(a, Arg))
    target = HOPPER if aligned else dataclasses.replace(HOPPER, vector_bytes=1)
    return compile_fusion(fused.trace(*specs), target)


@pytest.mark.parametrize("case", CASES + LARGE_CASES, ids=lambda c: c.id)
def test_every_case_compiles_and_assembles(case: Case) -> None:
    compiled = _compile_for_layout(case)
    if not ptxas.ptxas_available():
        if knobs.require_ptxas():
            pytest.fail("ptxas not found and PYFUSE_REQUIRE_PTXAS=1")
        return
    for kernel in compiled.kernels:
        ptxas.assemble(kernel.ptx)
