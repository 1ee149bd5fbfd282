"""Every public op, traced through ``pf.fuse`` and evaluated by ``reference``, against NumPy
written here (float64 math on the same inputs, then the op's output dtype); the newer forms
(a vector weight of ``linear``, the reductions by NumPy's names) also through every pass and
the kernel-IR interpreter."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import pyfuse as pf
from pyfuse.ir.target import HOPPER
from pyfuse.passes import pipeline
from pyfuse.testing.simulator import run_on_simulator

RNG = np.random.default_rng(1234)
A = RNG.standard_normal((5, 7)).astype(np.float32)
B = RNG.standard_normal((5, 7)).astype(np.float32)
POS = (np.abs(A) + 0.5).astype(np.float32)
ROW = RNG.standard_normal(7).astype(np.float32)
_erf = np.vectorize(math.erf)


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


UNARY: dict[str, tuple[Callable[..., object], Callable[[np.ndarray], np.ndarray], np.ndarray]] = {
    "neg": (pf.neg, np.negative, A),
    "abs": (pf.abs, np.abs, A),
    "exp": (pf.exp, np.exp, A),
    "log": (pf.log, np.log, POS),
    "tanh": (pf.tanh, np.tanh, A),
    "sigmoid": (pf.sigmoid, lambda x: 1.0 / (1.0 + np.exp(-x)), A),
    "relu": (pf.relu, lambda x: np.maximum(x, 0.0), A),
    "gelu": (pf.gelu, _gelu, A),
    "gelu_tanh": (lambda x: pf.gelu(x, approximate="tanh"), _gelu_tanh, A),
    "silu": (pf.silu, lambda x: x / (1.0 + np.exp(-x)), A),
    "sqrt": (pf.sqrt, np.sqrt, POS),
    "rsqrt": (pf.rsqrt, lambda x: 1.0 / np.sqrt(x), POS),
    "reciprocal": (pf.reciprocal, lambda x: 1.0 / x, POS),
    "sin": (pf.sin, np.sin, A),
    "cos": (pf.cos, np.cos, A),
}

BINARY: dict[str, tuple[Callable[..., object], Callable[[np.ndarray, np.ndarray], np.ndarray]]] = {
    "add": (pf.add, np.add),
    "sub": (pf.sub, np.subtract),
    "mul": (pf.mul, np.multiply),
    "div": (pf.div, np.divide),
    "maximum": (pf.maximum, np.maximum),
    "minimum": (pf.minimum, np.minimum),
    "pow": (lambda a, b: pf.pow(pf.abs(a) + 0.5, b), lambda a, b: (np.abs(a) + 0.5) ** b),
    "eq": (pf.eq, np.equal),
    "ne": (pf.ne, np.not_equal),
    "lt": (pf.lt, np.less),
    "le": (pf.le, np.less_equal),
    "gt": (pf.gt, np.greater),
    "ge": (pf.ge, np.greater_equal),
}


def _close(got: np.ndarray, want: np.ndarray, dtype: np.dtype) -> None:  # type: ignore[type-arg]
    assert got.dtype == dtype
    assert got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name: str) -> None:
    op, reference, data = UNARY[name]
    got = pf.fuse(lambda x: op(x)).reference(data)
    _close(got, reference(data.astype(np.float64)), np.dtype(np.float32))


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_with_broadcast_row(name: str) -> None:
    op, reference = BINARY[name]
    got = pf.fuse(lambda x, y: op(x, y)).reference(A, ROW)
    want = reference(A.astype(np.float64), ROW.astype(np.float64))
    expected = np.dtype(np.bool_) if want.dtype == np.bool_ else np.dtype(np.float32)
    _close(got, want, expected)


def test_operators_and_scalars() -> None:
    got = pf.fuse(lambda x, y: (-x + 2.0) * y / 3.0 - x**2).reference(A, B)
    a, b = A.astype(np.float64), B.astype(np.float64)
    _close(got, (-a + 2.0) * b / 3.0 - a**2, np.dtype(np.float32))
    got = pf.fuse(lambda x: 1.0 - x).reference(A)
    _close(got, 1.0 - A.astype(np.float64), np.dtype(np.float32))


def test_where_and_logical() -> None:
    got = pf.fuse(lambda x, y: pf.where(x > y, x, y * 2.0)).reference(A, B)
    _close(got, np.where(A > B, A, B * 2.0).astype(np.float64), np.dtype(np.float32))
    got = pf.fuse(lambda x, y: pf.logical_and(x > 0, pf.logical_not(y > 0))).reference(A, B)
    assert got.dtype == np.bool_ and np.array_equal(got, (A > 0) & ~(B > 0))
    got = pf.fuse(lambda x, y: pf.logical_or(x > 0, y > 0)).reference(A, B)
    assert np.array_equal(got, (A > 0) | (B > 0))


@pytest.mark.parametrize(("dim", "keepdim"), [(0, False), (1, True), ((0, 1), False), (-1, False)])
def test_reductions(dim: int | tuple[int, int], keepdim: bool) -> None:
    a = A.astype(np.float64)
    for op, reference in ((pf.sum, np.sum), (pf.max, np.max), (pf.min, np.min), (pf.mean, np.mean)):
        got = pf.fuse(lambda x, op=op: op(x, dim, keepdim=keepdim)).reference(A)
        _close(got, reference(a, axis=dim, keepdims=keepdim), np.dtype(np.float32))


def test_metadata_ops() -> None:
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    cases = [
        (lambda t: pf.permute(t, (2, 0, 1)), np.transpose(x, (2, 0, 1))),
        (lambda t: pf.transpose(t, 0, 2), np.swapaxes(x, 0, 2)),
        (lambda t: pf.reshape(t, (6, 4)), x.reshape(6, 4)),
        (lambda t: pf.unsqueeze(t, 1), x[:, None]),
        (lambda t: pf.squeeze(pf.unsqueeze(t, 0), 0), x),
        (lambda t: pf.broadcast_to(t, (5, 2, 3, 4)), np.broadcast_to(x, (5, 2, 3, 4))),
        (lambda t: t.T, np.transpose(x)),
        # -1 keeps an axis's size, as in torch.
        (lambda t: pf.broadcast_to(t, (5, -1, 3, -1)), np.broadcast_to(x, (5, 2, 3, 4))),
        (
            lambda t: pf.unsqueeze(t, 1).expand(-1, 6, -1, -1),
            np.broadcast_to(x[:, None], (2, 6, 3, 4)),
        ),
    ]
    for op, want in cases:
        got = pf.fuse(op).reference(x)
        assert np.array_equal(got, want)
    with pytest.raises(pf.FusionError, match="new leading axes"):
        pf.fuse(lambda t: t.expand(-1, 2, 3, 4)).trace(pf.spec((2, 3, 4), pf.float32))


def test_cast_and_int_ops() -> None:
    ints = RNG.integers(-50, 50, (5, 7)).astype(np.int32)
    got = pf.fuse(lambda x: (x * 3 - 1).to(pf.int64)).reference(ints)
    assert got.dtype == np.int64 and np.array_equal(got, (ints.astype(np.int64) * 3 - 1))
    got = pf.fuse(lambda x: pf.cast(x, pf.bfloat16)).reference(A)
    assert got.dtype == pf.bfloat16.numpy()
    assert np.array_equal(got, A.astype(pf.bfloat16.numpy()))
    got = pf.fuse(lambda x: x / 2).reference(ints)  # true division, like torch
    _close(got, ints / 2.0, np.dtype(np.float32))


def test_matmul_and_linear() -> None:
    a = RNG.standard_normal((2, 5, 3)).astype(np.float32)
    b = RNG.standard_normal((3, 4)).astype(np.float32)
    got = pf.fuse(lambda x, y: x @ y).reference(a, b)
    _close(got, a.astype(np.float64) @ b.astype(np.float64), np.dtype(np.float32))
    w = RNG.standard_normal((6, 3)).astype(np.float32)
    bias = RNG.standard_normal(6).astype(np.float32)
    got = pf.fuse(lambda x, w, b: pf.linear(x, w, b)).reference(a, w, bias)
    want = a.astype(np.float64) @ w.astype(np.float64).T + bias
    _close(got, want, np.dtype(np.float32))


def test_composites() -> None:
    x = RNG.standard_normal((4, 33)).astype(np.float32)
    w = RNG.standard_normal(33).astype(np.float32)
    b = RNG.standard_normal(33).astype(np.float32)
    xd = x.astype(np.float64)
    e = np.exp(xd - xd.max(-1, keepdims=True))
    _close(
        pf.fuse(lambda t: pf.softmax(t, -1)).reference(x),
        e / e.sum(-1, keepdims=True),
        np.dtype(np.float32),
    )
    mean = xd.mean(-1, keepdims=True)
    var = ((xd - mean) ** 2).mean(-1, keepdims=True)
    want = (xd - mean) / np.sqrt(var + 1e-5) * w + b
    got = pf.fuse(lambda t, w, b: pf.layer_norm(t, w, b, 1e-5)).reference(x, w, b)
    _close(got, want, np.dtype(np.float32))
    want = xd / np.sqrt((xd**2).mean(-1, keepdims=True) + 1e-6) * w
    _close(
        pf.fuse(lambda t, w: pf.rms_norm(t, w, 1e-6)).reference(x, w), want, np.dtype(np.float32)
    )


# (x shape, weight shape [N, K], bias shape): torch's F.linear takes a bias of shape (N,),
# (1,) or (), broadcast to the output's last dim. Ragged sizes, a 1-D input, N = 1 and K = 1.
LINEAR_BIASES = [
    ((37, 19), (13, 19), ()),
    ((37, 19), (13, 19), (1,)),
    ((37, 19), (13, 19), (13,)),
    ((2, 5, 7), (3, 7), ()),
    ((2, 5, 7), (3, 7), (1,)),
    ((7,), (5, 7), ()),
    ((9, 4), (1, 4), ()),
    ((9, 4), (1, 4), (1,)),
    ((6, 1), (11, 1), (1,)),
]


@pytest.mark.parametrize(("x_shape", "w_shape", "bias_shape"), LINEAR_BIASES)
def test_linear_bias_broadcasts_like_torch(
    x_shape: tuple[int, ...], w_shape: tuple[int, int], bias_shape: tuple[int, ...]
) -> None:
    def nonzero(shape: tuple[int, ...]) -> np.ndarray:
        magnitude = RNG.uniform(0.5, 1.5, shape)
        return (magnitude * RNG.choice([-1.0, 1.0], shape)).astype(np.float32)

    x, w, bias = nonzero(x_shape), nonzero(w_shape), nonzero(bias_shape)
    fused = pf.fuse(lambda x, w, b: pf.linear(x, w, b))
    want = x.astype(np.float64) @ w.astype(np.float64).T + bias.astype(np.float64)
    _close(fused.reference(x, w, bias), want, np.dtype(np.float32))
    assert fused.trace(x, w, bias).outputs[0].shape == want.shape


def test_linear_scalar_bias_stays_in_the_matmul_kernel() -> None:
    # The bias of one value is broadcast to N before the LinearOp, which the matmul
    # scheduler's epilogue adds: no kernel of its own, no tensor written in between.
    fused = pf.fuse(lambda x, w, b: pf.linear(x, w, b))
    specs = (pf.spec((200, 64), pf.bfloat16), pf.spec((96, 64), pf.bfloat16))
    for bias_shape in ((), (1,)):
        compiled = fused.compile(*specs, pf.spec(bias_shape, pf.bfloat16))
        assert [kernel.scheduler for kernel in compiled.kernels] == ["matmul"]
        assert compiled.global_intermediates == []


@pytest.mark.parametrize(
    ("bias_shape", "text"),
    [
        ((2,), "bias must have shape (6,), (1,) or () for a weight of shape (6, 3), got (2,)"),
        ((1, 6), "bias must have shape (6,), (1,) or () for a weight of shape (6, 3), got (1, 6)"),
    ],
)
def test_linear_refuses_a_bias_torch_refuses(bias_shape: tuple[int, ...], text: str) -> None:
    fused = pf.fuse(lambda x, w, b: pf.linear(x, w, b))
    with pytest.raises(pf.FusionError) as excinfo:
        fused.trace(
            pf.spec((4, 3), pf.float32),
            pf.spec((6, 3), pf.float32),
            pf.spec(bias_shape, pf.float32),
        )
    assert excinfo.value.op == "linear" and text in str(excinfo.value)
    with pytest.raises(pf.FusionError, match="bias dtype float16 differs"):
        fused.trace(
            pf.spec((4, 3), pf.float32), pf.spec((6, 3), pf.float32), pf.spec((), pf.float16)
        )


def _kernel_outputs(fn: Callable[..., Any], *arrays: np.ndarray) -> list[np.ndarray]:
    """``fn``'s outputs as its kernels compute them: every pass, then the kernel-IR
    interpreter (a matmul kernel's PTX on the simulator)."""
    fusion = pf.fuse(fn).trace(*arrays)
    result = pipeline.run(fusion, HOPPER)
    return run_on_simulator(result, list(arrays), [(tv.shape, tv.dtype) for tv in fusion.outputs])


def _within(got: np.ndarray, want: np.ndarray, scale: np.ndarray, rtol: float) -> None:
    """``got`` (of the wanted shape) within ``rtol`` of the magnitudes a sum adds up, ``scale``:
    a sum near 0 of large terms is no more exact than its terms."""
    assert got.shape == want.shape
    error = np.abs(got.astype(np.float64) - want)
    assert np.all(error <= rtol * scale + 1e-30), (got, want)


# (x shape, bias shape or None): torch.nn.functional.linear with a weight [K] is x @ weight,
# without x's last dim; its bias then has shape () (torch's documentation).
LINEAR_VECTOR_CASES = [
    ((7,), None),
    ((7,), ()),
    ((5, 7), None),
    ((5, 7), ()),
    ((2, 3, 7), ()),
    ((1, 7), ()),
    ((37, 1), ()),
]


@pytest.mark.parametrize(("x_shape", "bias_shape"), LINEAR_VECTOR_CASES)
@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16], ids=["f32", "bf16"])
def test_linear_of_a_vector_weight_is_a_matmul_with_that_vector(
    x_shape: tuple[int, ...], bias_shape: tuple[int, ...] | None, dtype: Any
) -> None:
    rng = np.random.default_rng(sum(x_shape) * 7 + (bias_shape is None))
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(x_shape[-1]).astype(dtype)
    arrays = [x, w]
    want = x.astype(np.float64) @ w.astype(np.float64)
    scale = np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64))
    if bias_shape is None:
        fn: Callable[..., Any] = lambda x, w: pf.linear(x, w)  # noqa: E731
    else:
        bias = rng.standard_normal(bias_shape).astype(dtype)
        arrays.append(bias)
        want = want + bias.astype(np.float64)
        scale = scale + np.abs(bias.astype(np.float64))
        fn = lambda x, w, b: pf.linear(x, w, b)  # noqa: E731
    rtol = 2e-2 if dtype == ml_dtypes.bfloat16 else 2e-6
    reference = pf.fuse(fn).reference(*arrays)
    (kernels,) = _kernel_outputs(fn, *arrays)
    for got in (reference, kernels):
        assert got.dtype == np.dtype(dtype)
        _within(got, np.asarray(want), np.asarray(scale), rtol)


@pytest.mark.parametrize(
    ("shapes", "text"),
    [
        (((4, 7), (7,), (1,)), "bias must have shape () for a weight of shape (7,), got (1,)"),
        (((4, 7), (7,), (4,)), "bias must have shape () for a weight of shape (7,), got (4,)"),
        (((4, 6), (7,), ()), "input's last size 6 differs from the weight's K = 7"),
        (((), (7,), ()), "input must have rank >= 1, got shape ()"),
    ],
)
def test_linear_of_a_vector_weight_refuses_what_torch_refuses(
    shapes: tuple[tuple[int, ...], ...], text: str
) -> None:
    fused = pf.fuse(lambda x, w, b: pf.linear(x, w, b))
    with pytest.raises(pf.FusionError) as excinfo:
        fused.trace(*(pf.spec(shape, pf.float32) for shape in shapes))
    assert excinfo.value.op == "linear" and text in excinfo.value.bare_message
    with pytest.raises(pf.FusionError, match="bias dtype float16 differs"):
        fused.trace(pf.spec((4, 7), pf.float32), pf.spec((7,), pf.float32), pf.spec((), pf.float16))


def test_reductions_by_numpy_names_run_in_kernels() -> None:
    rng = np.random.default_rng(71)
    x = rng.standard_normal((6, 33)).astype(np.float32)

    def fn(t: pf.Tensor) -> tuple[pf.Tensor, ...]:
        return (
            t.sum(axis=1),
            pf.amax(t, axis=0, keepdims=True),
            t.mean(axis=(0, 1), keepdims=True),
            pf.var(t, axis=1),
            t.argmax(axis=1),
            pf.any(t > 1.5, axis=0),
            t.min(axis=0).indices,
        )

    x64 = x.astype(np.float64)
    wants = [
        (x64.sum(1), np.abs(x64).sum(1)),
        (x64.max(0, keepdims=True), np.abs(x64).max(0, keepdims=True)),
        (x64.mean(keepdims=True), np.abs(x64).mean(keepdims=True)),
        (x64.var(1, ddof=1), x64.var(1, ddof=1)),
    ]
    outputs = _kernel_outputs(fn, x)
    for got, (want, scale) in zip(outputs[:4], wants, strict=True):
        assert got.dtype == np.float32
        _within(got, want, scale, 1e-5)
    assert np.array_equal(outputs[4], x.argmax(1))
    assert np.array_equal(outputs[5], (x > 1.5).any(0))
    assert np.array_equal(outputs[6], x.argmin(0))


NOT_BOOL = [pf.float64, pf.float32, pf.float16, pf.bfloat16, pf.int8, pf.uint8, pf.int16]
NOT_BOOL += [pf.int32, pf.int64]


def _where_with(condition: Any, x: pf.Tensor) -> pf.Tensor:
    return pf.where(condition, x, -x)  # line: where condition


@pytest.mark.parametrize("dtype", NOT_BOOL, ids=lambda dtype: dtype.name)
def test_where_refuses_a_condition_that_is_no_bool(dtype: pf.DType) -> None:
    # torch: "where expected condition to be a boolean tensor, but got a tensor with dtype
    # Float"; a float or int condition read as != 0 would silently differ from torch.
    with pytest.raises(pf.FusionError) as excinfo:
        pf.fuse(_where_with).trace(pf.spec((4, 5), dtype), pf.spec((4, 5), pf.float32))
    error = excinfo.value
    assert error.op == "where"
    assert error.where is not None and error.where.endswith(f":{_line_of('where condition')}")
    assert f"must be a bool tensor, as in torch, got a tensor of {dtype.name}" in str(error)
    with pytest.raises(pf.FusionError, match=r"got float 0\.5"):
        pf.fuse(lambda x: _where_with(0.5, x)).trace(pf.spec((4,), pf.float32))


def test_where_takes_a_bool_tensor_or_a_python_bool() -> None:
    rng = np.random.default_rng(29)
    mask = rng.random((4, 5)) > 0.5
    x = rng.standard_normal((4, 5)).astype(np.float32)
    got = pf.fuse(_where_with).reference(mask, x)
    assert np.array_equal(got, np.where(mask, x, -x))
    (kernel,) = _kernel_outputs(_where_with, mask, x)
    assert np.array_equal(kernel, np.where(mask, x, -x))
    got = pf.fuse(lambda x: _where_with(np.bool_(False), x)).reference(x)
    assert np.array_equal(got, -x)


def _line_of(marker: str) -> int:
    text = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(text, start=1) if line.endswith(f"# line: {marker}"))
