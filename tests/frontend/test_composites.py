"""The composite ops, operators, conversions and NumPy ufuncs, through the whole CPU path:
traced, compiled by every pass, emitted as PTX, assembled by ptxas and run on the kernel-IR
interpreter. Each kernel result must match the float64 reference (``FusedFunction.reference``)
and NumPy written here, with torch's semantics: NaN, +-inf, -0, empty and 0-d inputs,
broadcasting and mixed dtypes."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from check_utils import require_ptxas

import pyfuse as pf
from pyfuse.backend_ptx.emit import emit_ptx
from pyfuse.backend_ptx.ptxas import assemble
from pyfuse.ir.target import HOPPER
from pyfuse.passes import pipeline
from pyfuse.testing.simulator import run_on_simulator

BF16 = np.dtype(ml_dtypes.bfloat16)
RNG = np.random.default_rng(15)
# The values where torch's rules differ from the plain formula: NaN, +-inf, -0, tiny and large.
SPECIALS = np.array(
    [-np.inf, -40.0, -3.5, -1.0, -0.4, -1e-6, -0.0, 0.0, 1e-7, 0.3, 2.0, 25.0, np.inf, np.nan],
    np.float32,
)
NORMAL = RNG.standard_normal((6, 33)).astype(np.float32)
ROW = RNG.standard_normal(33).astype(np.float32)
INTS = RNG.integers(-9, 10, (6, 33)).astype(np.int32)


def compiled(fn: Callable[..., Any], *arrays: np.ndarray) -> list[np.ndarray]:
    """``fn``'s outputs from the kernels, after checking they match the reference."""
    require_ptxas()
    fused = pf.fuse(fn)
    fusion = fused.trace(*arrays)
    result = pipeline.run(
        fusion, HOPPER, emit=lambda s: pipeline.Emitted(emit_ptx(s.kernel_ir, HOPPER))
    )
    for stages in result.kernels:
        assert stages.emitted is not None and not assemble(stages.emitted.ptx).problems()
    shapes = [(tv.shape, tv.dtype) for tv in fusion.outputs]
    outputs = run_on_simulator(result, list(arrays), shapes)
    reference = fused.reference(*arrays)
    references = reference if isinstance(reference, tuple) else (reference,)
    for got, want in zip(outputs, references, strict=True):
        _close(got, want.astype(np.float64) if want.dtype != np.bool_ else want, want.dtype)
    return outputs


def _close(got: np.ndarray, want: np.ndarray, dtype: Any, rtol: float = 0.0) -> None:
    """Same dtype and shape; bools exactly, floats within ``rtol`` (a dtype's default: a few
    ulps) with NaN where NaN and infinities equal."""
    assert got.dtype == np.dtype(dtype), (got.dtype, dtype)
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    if got.dtype == np.bool_ or got.dtype.kind in "iu":
        assert np.array_equal(got, want), (got, want)
        return
    rtol = rtol or (2e-2 if got.dtype.itemsize == 2 else 4e-6)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=1e-30)


def _numpy(fn: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(fn(x.astype(np.float64)))


def _softplus(x: np.ndarray, beta: float = 1.0, threshold: float = 20.0) -> np.ndarray:
    return np.where(x * beta > threshold, x, np.log1p(np.exp(x * beta)) / beta)


def _relu6(x: np.ndarray) -> np.ndarray:
    return np.minimum(np.maximum(x + 3.0, 0.0), 6.0)


def _nan_to_num(x: np.ndarray) -> np.ndarray:
    return np.nan_to_num(x, posinf=float(np.finfo(np.float32).max), neginf=-3.4028234663852886e38)


ELEMENTWISE: dict[str, tuple[Callable[..., Any], Callable[[np.ndarray], np.ndarray]]] = {
    "clamp": (lambda x: pf.clamp(x, -1.0, 1.5), lambda x: np.minimum(np.maximum(x, -1), 1.5)),
    "clamp_min": (lambda x: x.clamp(min=0.25), lambda x: np.maximum(x, 0.25)),
    "clip_max": (lambda x: pf.clip(x, max=0.0), lambda x: np.minimum(x, 0.0)),
    "leaky_relu": (lambda x: pf.leaky_relu(x, 0.2), lambda x: np.where(x > 0, x, 0.2 * x)),
    "elu": (pf.elu, lambda x: np.where(x > 0, x, np.expm1(x))),
    "elu_alpha": (lambda x: pf.elu(x, 0.5), lambda x: np.where(x > 0, x, 0.5 * np.expm1(x))),
    "softplus": (pf.softplus, _softplus),
    "softplus_beta": (lambda x: pf.softplus(x, 2.0, 5.0), lambda x: _softplus(x, 2.0, 5.0)),
    "hardsigmoid": (pf.hardsigmoid, lambda x: _relu6(x) / 6.0),
    "hardswish": (pf.hardswish, lambda x: x * _relu6(x) / 6.0),
    # torch.sign(nan) is 0; NumPy's is NaN.
    "sign": (pf.sign, lambda x: np.where(np.isnan(x), 0.0, np.sign(x))),
    "isnan": (pf.isnan, np.isnan),
    "isinf": (lambda x: x.isinf(), np.isinf),
    "isfinite": (pf.isfinite, np.isfinite),
    "nan_to_num": (pf.nan_to_num, _nan_to_num),
    "nan_to_num_values": (
        lambda x: pf.nan_to_num(x, 1.0, 2.0, -2.0),
        lambda x: np.nan_to_num(x, nan=1.0, posinf=2.0, neginf=-2.0),
    ),
    "exp2": (pf.exp2, np.exp2),
    "expm1": (pf.expm1, np.expm1),
    "log2": (pf.log2, np.log2),
    "log10": (lambda x: x.log10(), np.log10),
    "log1p": (pf.log1p, np.log1p),
}


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_elementwise_composites_on_special_values(name: str) -> None:
    op, reference = ELEMENTWISE[name]
    want = _numpy(reference, SPECIALS)
    (got,) = compiled(op, SPECIALS)
    _close(got, want, np.bool_ if want.dtype == np.bool_ else np.float32)
    (got,) = compiled(op, NORMAL)
    _close(got, _numpy(reference, NORMAL), got.dtype)


@pytest.mark.parametrize("name", ["elu", "softplus", "hardswish", "expm1", "log1p", "sign"])
def test_16_bit_inputs_compute_in_fp32_and_keep_their_dtype(name: str) -> None:
    op, reference = ELEMENTWISE[name]
    for dtype in (BF16, np.dtype(np.float16)):
        x = NORMAL.astype(dtype)
        (got,) = compiled(op, x)
        _close(got, _numpy(reference, x).astype(dtype).astype(np.float64), dtype)


def test_tails_are_accurate_where_the_plain_formula_cancels() -> None:
    tiny = np.array([-1e-7, 3e-8, 1e-5, -2e-4, 0.49, -0.49, 0.51, -60.0, -90.0], np.float32)
    for op, reference in ((pf.expm1, np.expm1), (pf.log1p, np.log1p), (pf.softplus, _softplus)):
        (got,) = compiled(op, tiny if op is not pf.log1p else np.abs(tiny))
        want = _numpy(reference, tiny if op is not pf.log1p else np.abs(tiny))
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-6)


def test_integer_inputs_of_float_functions_give_float32() -> None:
    for op, reference in ((pf.exp2, np.exp2), (pf.log1p, np.log1p), (pf.expm1, np.expm1)):
        ints = np.abs(INTS)
        (got,) = compiled(op, ints)
        _close(got, _numpy(reference, ints), np.float32)
    (got,) = compiled(pf.sign, INTS)
    _close(got, np.sign(INTS), np.int32)
    (got,) = compiled(lambda x: (pf.isnan(x), pf.isinf(x), pf.isfinite(x)), INTS)[0:1]
    assert not got.any()


def test_clamp_with_tensor_bounds_broadcasts_promotes_and_propagates_nan() -> None:
    low = np.array([[-0.5], [np.nan], [0.0], [1.0], [-1.0], [2.0]], np.float32)
    high = (ROW + 1.0).astype(BF16)
    (got,) = compiled(lambda x, lo, hi: pf.clamp(x, lo, hi), NORMAL, low, high)
    want = np.minimum(np.maximum(NORMAL.astype(np.float64), low), high.astype(np.float64))
    _close(got, want, np.float32)  # f32 with bf16 is f32
    assert np.isnan(got[1]).all()
    # min > max gives max everywhere, as torch's does.
    (got,) = compiled(lambda x: pf.clamp(x, 2.0, -2.0), NORMAL)
    assert (got == -2.0).all()
    # An integer tensor clamped by a float is float32; by an int it stays int32.
    (got,) = compiled(lambda x: (pf.clamp(x, min=0.5), pf.clamp(x, -3, 3)), INTS)[0:1]
    _close(got, np.maximum(INTS, 0.5), np.float32)
    (got,) = compiled(lambda x: pf.clamp(x, -3, 3), INTS)
    _close(got, np.clip(INTS, -3, 3), np.int32)


def test_max_and_min_of_two_tensors_are_elementwise() -> None:
    other = np.where(RNG.random(33) < 0.2, np.nan, ROW).astype(np.float32)
    got = compiled(lambda x, y: (pf.max(x, y), pf.min(x, y), x.max(y), x.minimum(y)), NORMAL, other)
    _close(got[0], np.maximum(NORMAL.astype(np.float64), other), np.float32)
    _close(got[1], np.minimum(NORMAL.astype(np.float64), other), np.float32)
    _close(got[2], np.maximum(NORMAL.astype(np.float64), other), np.float32)
    # x.max(dim) is torch's (values, indices): its values are the reduction.
    (got,) = compiled(lambda x: x.max(1, keepdim=True).values + x.min(0, keepdim=True)[0], NORMAL)
    want = NORMAL.max(1, keepdims=True) + NORMAL.min(0, keepdims=True)
    _close(got, want.astype(np.float64), np.float32)


# ---- reductions ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dim", "keepdim", "correction"),
    [(None, False, 1), (1, False, 1), (0, True, 0), ((0, 1), False, 2), (-1, True, 1)],
)
def test_var_and_std(dim: Any, keepdim: bool, correction: int) -> None:
    x = np.concatenate([NORMAL * 3.0 + 100.0], axis=0)  # an offset: the centered form matters
    got = compiled(
        lambda t: (
            pf.var(t, dim, correction=correction, keepdim=keepdim),
            t.std(dim, correction=correction, keepdim=keepdim),
        ),
        x,
    )
    want = np.var(x.astype(np.float64), axis=dim, ddof=correction, keepdims=keepdim)
    _close(got[0], want, np.float32, rtol=2e-5)
    _close(got[1], np.sqrt(want), np.float32, rtol=2e-5)


def test_var_edge_cases_follow_torch() -> None:
    one_row = NORMAL[:1]
    got = compiled(
        lambda t, e, z: (
            pf.var(t, 0),  # N = 1 with correction 1: 0 / 0
            pf.var(t, 0, unbiased=False),  # the old spelling: correction 0
            pf.var(t, 0, correction=2),  # N - correction < 0: dof 0, positive / 0... of 0
            pf.var(e, 0),  # no elements: NaN
            pf.var(z),  # a 0-d tensor: N = 1
            pf.std(t, False),  # torch.std(x, False): unbiased=False over everything
        ),
        one_row,
        np.zeros((0, 4), np.float32),
        np.array(1.5, np.float32),
    )
    assert np.isnan(got[0]).all() and (got[1] == 0).all() and np.isnan(got[2]).all()
    assert got[3].shape == (4,) and np.isnan(got[3]).all()
    assert got[4].shape == () and np.isnan(got[4])
    _close(got[5], np.std(one_row.astype(np.float64)), np.float32)


def _logsumexp(x: np.ndarray, axis: int) -> np.ndarray:
    return np.log(np.sum(np.exp(x.astype(np.float64)), axis=axis))


def test_logsumexp_is_stable_and_handles_infinities_like_torch() -> None:
    rows = np.array(
        [
            [1000.0, 999.0, -5.0, 998.0],  # a plain exp overflows
            [-np.inf, -np.inf, -np.inf, -np.inf],  # torch: -inf
            [np.inf, 1.0, 2.0, 3.0],  # +inf
            [np.nan, 1.0, 2.0, 3.0],  # NaN
            [-1000.0, -1001.0, -np.inf, -1000.5],
        ],
        np.float32,
    )
    got = compiled(lambda x: (pf.logsumexp(x, 1), x.logsumexp(-1, keepdim=True)), rows)
    shift = np.array([1000.0, 0.0, 0.0, 0.0, -1000.0])[:, None]
    with np.errstate(all="ignore"):
        want = _logsumexp(rows - shift, 1) + shift[:, 0]
    want[1], want[2] = -np.inf, np.inf
    _close(got[0], want, np.float32)
    _close(got[1], want[:, None], np.float32)
    (got,) = compiled(lambda x: pf.logsumexp(x, (0, 1)), NORMAL)
    _close(got, _logsumexp(NORMAL.reshape(-1), 0), np.float32)
    # No elements give -inf (log of an empty sum); an int input gives float32.
    got = compiled(
        lambda e, i: (pf.logsumexp(e, 0), pf.logsumexp(i, 1)), np.zeros((0, 3), np.float32), INTS
    )
    assert got[0].shape == (3,) and (got[0] == -np.inf).all()
    _close(got[1], _logsumexp(INTS, 1), np.float32)


def test_log_softmax_and_softmax() -> None:
    x = NORMAL.astype(np.float64)
    got = compiled(lambda t: (pf.log_softmax(t, -1), t.log_softmax(0), t.softmax(1)), NORMAL)
    _close(got[0], x - np.log(np.exp(x).sum(-1, keepdims=True)), np.float32)
    _close(got[1], x - np.log(np.exp(x).sum(0, keepdims=True)), np.float32)
    _close(got[2], np.exp(x) / np.exp(x).sum(1, keepdims=True), np.float32)
    # A row of -inf is NaN in torch's log_softmax; 16-bit inputs keep their dtype.
    rows = np.array([[-np.inf, -np.inf], [0.0, 1.0]], np.float32)
    (got,) = compiled(lambda t: pf.log_softmax(t, 1), rows)
    assert np.isnan(got[0]).all() and np.isfinite(got[1]).all()
    (got,) = compiled(lambda t: pf.log_softmax(t, -1), NORMAL.astype(BF16))
    _close(got, x - np.log(np.exp(x).sum(-1, keepdims=True)), BF16, rtol=5e-2)


def test_amax_amin_any_all() -> None:
    x = NORMAL.copy()
    x[2, 5] = np.nan
    got = compiled(
        lambda t: (pf.amax(t, 1), t.amin((0, 1), keepdim=True), pf.amax(t), t.amax(())), x
    )
    _close(got[0], x.max(1).astype(np.float64), np.float32)
    _close(got[1], x.min((0, 1), keepdims=True).astype(np.float64), np.float32)
    assert np.isnan(got[2]) and np.isnan(got[3])
    mixed = np.array([[0.0, np.nan, 0.0], [0.0, 0.0, 0.0], [1.0, -2.0, 3.0]], np.float32)
    got = compiled(
        lambda t, i: (pf.any(t, 1), pf.all(t, 1), t.any(), pf.all(i, 0, keepdim=True)),
        mixed,
        INTS,
    )
    assert np.array_equal(got[0], [True, False, True])  # NaN is nonzero, as in torch
    assert np.array_equal(got[1], [False, False, True])
    assert got[2].shape == () and got[2]
    assert np.array_equal(got[3], np.all(INTS, 0, keepdims=True))
    empty = np.zeros((0, 3), np.float32)
    got = compiled(lambda e: (pf.any(e, 0), pf.all(e, 0), pf.any(e), pf.all(e)), empty)
    assert [g.tolist() for g in got] == [[False] * 3, [True] * 3, False, True]


# ---- tensor creation, operators, conversions -----------------------------------------------


def test_full_and_likes() -> None:
    got = compiled(
        lambda x, i: (
            pf.zeros_like(x),
            pf.ones_like(i),
            pf.full_like(x, -2.5),
            pf.full_like(i, 7, dtype=pf.bfloat16),
            pf.full((2, 3), 1.5),
            pf.full(4, 3),
            pf.full((2,), True),
            pf.zeros_like(x, dtype=pf.bool),
        ),
        NORMAL,
        INTS,
    )
    assert got[0].dtype == np.float32 and (got[0] == 0).all() and got[0].shape == NORMAL.shape
    assert got[1].dtype == np.int32 and (got[1] == 1).all()
    assert (got[2] == -2.5).all() and got[3].dtype == BF16 and (got[3] == 7).all()
    assert got[4].dtype == np.float32 and (got[4] == 1.5).all()
    assert got[5].dtype == np.int64 and got[5].tolist() == [3] * 4
    assert got[6].dtype == np.bool_ and got[6].all() and not got[7].any()


def test_bool_operators_comparisons_and_conversions() -> None:
    a, b = NORMAL > 0, NORMAL < 0.5
    got = compiled(
        lambda x, y: (x & y, x | y, x ^ y, ~x, True & x, False | y, True ^ x, pf.logical_xor(x, y)),
        a,
        b,
    )
    wants = [a & b, a | b, a ^ b, ~a, a, b, ~a, a ^ b]
    for g, w in zip(got, wants, strict=True):
        _close(g, w, np.bool_)
    got = compiled(lambda x: (x > 0.5, x <= 0, x == 1, x.float(), x.half(), x.int()), NORMAL)
    _close(got[0], NORMAL > 0.5, np.bool_)
    _close(got[1], NORMAL <= 0, np.bool_)
    _close(got[2], NORMAL == 1, np.bool_)
    _close(got[4], NORMAL.astype(np.float16).astype(np.float64), np.float16)
    _close(got[5], NORMAL.astype(np.int32), np.int32)  # truncation, as torch's cast
    got = compiled(
        lambda x, y: (x.long(), x.bool(), x.bfloat16(), y.to(x), x.type_as(y)), INTS, NORMAL
    )
    _close(got[0], INTS.astype(np.int64), np.int64)
    _close(got[1], INTS != 0, np.bool_)
    _close(got[2], INTS.astype(np.float64), BF16)
    _close(got[3], NORMAL.astype(np.int32), np.int32)
    _close(got[4], INTS.astype(np.float64), np.float32)


def test_indexing_that_moves_no_data() -> None:
    x = NORMAL[:, :1]
    got = compiled(lambda t: (t[:, None], t[..., None, :], t[None], t[:, 0], t[:, -1:]), x)
    wants = [x[:, None], x[..., None, :], x[None], x[:, 0], x[:, -1:]]
    assert [g.shape for g in got] == [w.shape for w in wants]
    for g, w in zip(got, wants, strict=True):
        _close(g, w.astype(np.float64), np.float32)
    assert len(pf.fuse(lambda t: t + len(t)).trace(x).outputs) == 1


BASIC_INDICES: list[Any] = [
    (slice(1, 4),),
    (slice(None), slice(None, 16)),
    (Ellipsis, slice(17, None)),
    (slice(None, None, 2), slice(1, None, 3)),
    (2,),
    (-1, slice(-5, None)),
    (slice(-100, 100), 30),
    (None, slice(2, 3), None, slice(None, None, 4)),
    (slice(4, 2),),
    (1, 2),
]


@pytest.mark.parametrize("index", BASIC_INDICES, ids=repr)
def test_basic_indexing_of_an_input_is_a_view_read_in_place(index: Any) -> None:
    (got,) = compiled(lambda t: t[index] * 2.0, NORMAL)
    want = NORMAL[index] * 2.0
    assert got.shape == want.shape
    _close(got, want.astype(np.float64), np.float32)
    fusion = pf.fuse(lambda t: t[index] * 2.0).trace(NORMAL)
    kernels = pipeline.run(fusion, HOPPER).kernels
    assert len(kernels) <= 1  # no copy of the input: the slice is read in place


def test_slices_of_computed_values_views_and_matmul_operands() -> None:
    got = compiled(
        lambda t, r: (
            pf.exp(t)[:, 3:7].sum(-1),
            t.T[1:3, ::2] + r[:2, None],
            t[..., :16] * t[..., 16:32],
            t[1:].reshape(-1)[::7],
            pf.softmax(t[:, 1:], -1),
        ),
        NORMAL,
        ROW,
    )
    x = NORMAL.astype(np.float64)
    wants = [
        np.exp(x)[:, 3:7].sum(-1), x.T[1:3, ::2] + ROW[:2, None], x[..., :16] * x[..., 16:32],
        x[1:].reshape(-1)[::7],
        np.exp(x[:, 1:] - x[:, 1:].max(-1, keepdims=True))
        / np.exp(x[:, 1:] - x[:, 1:].max(-1, keepdims=True)).sum(-1, keepdims=True),
    ]  # fmt: skip
    for g, w in zip(got, wants, strict=True):
        assert g.shape == w.shape
        _close(g, w, np.float32, rtol=1e-5)


def test_indexing_refuses_what_torch_refuses() -> None:
    f32 = pf.spec((4, 6), pf.float32)
    with pytest.raises(pf.FusionError, match="getitem: step must be greater than zero"):
        pf.fuse(lambda x: x[::-1]).trace(f32)
    with pytest.raises(pf.FusionError, match="index -5 is out of bounds for dimension 0"):
        pf.fuse(lambda x: x[-5]).trace(f32)
    with pytest.raises(pf.FusionError, match="too many indices"):
        pf.fuse(lambda x: x[1, 2, 3]).trace(f32)
    with pytest.raises(pf.FusionError, match="tensor indices need a gather"):
        pf.fuse(lambda x: x[x > 0]).trace(f32)


def test_python_ints_that_fit_the_dtype_are_kept() -> None:
    (got,) = compiled(lambda i: (i + (2**31 - 10)) - (2**31 - 1), INTS)
    _close(got, INTS - 9, np.int32)


# ---- NumPy ufuncs ----------------------------------------------------------------------------


def test_numpy_ufuncs_trace_the_pf_ops() -> None:
    x = NORMAL
    got = compiled(
        lambda t, r: (
            np.maximum(t, 0),
            np.exp(t) + np.float32(2.0) * t,
            np.add(1.0, np.multiply(t, r)),
            np.true_divide(np.square(t), np.abs(r) + 1),
            np.greater(t, r) | np.logical_not(np.less(t, 0.0)),
            np.tanh(np.sqrt(np.absolute(t))) - np.negative(np.log1p(np.abs(r))),
            np.minimum(np.power(np.abs(t), 2.0), np.exp2(r)),
        ),
        x,
        ROW,
    )
    x64, r64 = x.astype(np.float64), ROW.astype(np.float64)
    _close(got[0], np.maximum(x64, 0), np.float32)
    _close(got[1], np.exp(x64) + 2.0 * x64, np.float32)
    _close(got[2], 1.0 + x64 * r64, np.float32)
    _close(got[3], x64**2 / (np.abs(r64) + 1), np.float32)
    _close(got[4], (x > ROW) | ~(x < 0), np.bool_)
    _close(got[5], np.tanh(np.sqrt(np.abs(x64))) + np.log1p(np.abs(r64)), np.float32)
    _close(got[6], np.minimum(np.abs(x64) ** 2, np.exp2(r64)), np.float32)


def test_mean_over_an_empty_dim_is_nan_and_0d_reductions_take_dim_0_and_minus_1() -> None:
    got = compiled(lambda e: (pf.mean(e, 0), e.mean(1)), np.zeros((0, 3), np.float32))
    assert got[0].shape == (3,) and np.isnan(got[0]).all() and got[1].shape == (0,)
    scalar = np.array(-2.0, np.float32)
    got = compiled(
        lambda z: (
            pf.softmax(z, 0),
            pf.log_softmax(z, -1),
            pf.sum(z, 0),
            pf.amax(z, -1, keepdim=True),
            pf.squeeze(z, 0),
            pf.logsumexp(z, 0),
        ),
        scalar,
    )
    assert [g.shape for g in got] == [()] * 6
    assert [float(g) for g in got] == [1.0, 0.0, -2.0, -2.0, -2.0, -2.0]
    assert math.isnan(float(compiled(lambda z: pf.softmax(z, 0), np.array(np.nan, np.float32))[0]))


def test_index_ops_check_their_arguments() -> None:
    f32 = pf.spec((4,), pf.float32)
    with pytest.raises(pf.FusionError, match="step must be nonzero"):
        pf.fuse(lambda x: x + pf.arange(0, 4, 0)).trace(f32)
    with pytest.raises(pf.FusionError, match="tril: needs a tensor of 2 or more dims"):
        pf.fuse(lambda x: pf.tril(x)).trace(f32)
    with pytest.raises(pf.FusionError, match="inconsistent with step sign"):
        pf.fuse(lambda x: x + pf.arange(4, 0)).trace(f32)


def test_arange_follows_torchs_dtypes_and_lengths() -> None:
    fusion = pf.fuse(lambda x: (pf.arange(5), pf.arange(1, 2.5, 0.5), pf.arange(10, 0, -3))).trace(
        pf.spec((1,), pf.float32)
    )
    shapes = [(tv.shape, tv.dtype) for tv in fusion.outputs]
    assert shapes == [((5,), pf.int64), ((3,), pf.float32), ((4,), pf.int64)]
    values = pf.fuse(
        lambda x: (pf.arange(5), pf.arange(1, 2.5, 0.5), pf.arange(10, 0, -3))
    ).reference(np.zeros(1, np.float32))
    assert [v.tolist() for v in values] == [[0, 1, 2, 3, 4], [1.0, 1.5, 2.0], [10, 7, 4, 1]]


def _ties_and_nans() -> np.ndarray:
    """Rows with ties (the first index wins), a NaN (its index wins), all equal, -inf."""
    x = RNG.integers(-3, 4, (6, 33)).astype(np.float32)  # many ties
    x[1, 5] = np.nan
    x[1, 20] = np.nan
    x[2] = 1.5
    x[3, :4] = -np.inf
    x[4] = -np.inf
    return x


@pytest.mark.parametrize("dim", [0, 1, -1, None])
@pytest.mark.parametrize("keepdim", [False, True])
def test_argmax_and_argmin_pick_the_first_index_and_nan_like_torch(
    dim: int | None, keepdim: bool
) -> None:
    x = _ties_and_nans()
    got_max, got_min = compiled(
        lambda z: (pf.argmax(z, dim, keepdim), z.argmin(dim, keepdim=keepdim)), x
    )
    # NumPy's argmax agrees with torch: the first index on ties, the first NaN if any.
    want_max, want_min = np.argmax(x, dim, keepdims=keepdim), np.argmin(x, dim, keepdims=keepdim)
    assert got_max.dtype == np.int64 and got_max.shape == want_max.shape
    np.testing.assert_array_equal(got_max, want_max)
    np.testing.assert_array_equal(got_min, want_min)


@pytest.mark.parametrize(
    "array",
    [
        INTS,
        RNG.standard_normal((3, 1)).astype(np.float32),
        RNG.standard_normal((5, 70)).astype(BF16),
        np.array(2.5, np.float32),
    ],
    ids=["int32", "size-1", "bf16", "0-d"],
)
def test_max_with_dim_gives_torchs_values_and_indices(array: np.ndarray) -> None:
    dim = 0 if array.ndim == 0 else -1
    values, indices = compiled(lambda z: tuple(z.max(dim)), array)
    pair = pf.fuse(lambda z: z.min(dim, keepdim=True)[1]).reference(array)
    wide = array.astype(np.float64)
    np.testing.assert_array_equal(values.astype(np.float64), np.max(wide, dim))
    np.testing.assert_array_equal(indices, np.argmax(wide, dim))
    np.testing.assert_array_equal(pair, np.argmin(wide, dim, keepdims=True))


def test_argmax_refuses_what_torch_refuses() -> None:
    f32 = pf.spec((4, 0), pf.float32)
    with pytest.raises(pf.FusionError, match="argmax: expected reduction dim 1 to have non-zero"):
        pf.fuse(lambda x: pf.argmax(x, 1)).trace(f32)
    with pytest.raises(pf.FusionError, match="argmin: needs a numeric tensor, got bool"):
        pf.fuse(lambda x: pf.argmin(x > 0)).trace(pf.spec((4,), pf.float32))
    with pytest.raises(pf.FusionError, match="takes one int dim for its indices"):
        pf.fuse(lambda x: x.max((0, 1)).indices).trace(pf.spec((2, 3), pf.float32))
    # Over an empty dim other than the reduced one, the result is empty, as in torch.
    assert pf.fuse(lambda x: pf.argmax(x, 0)).reference(np.ones((4, 0), np.float32)).shape == (0,)


def test_bitwise_ops_of_integers_are_twos_complement_bit_logic() -> None:
    a = RNG.integers(-(2**31), 2**31, (6, 33)).astype(np.int32)
    b = RNG.integers(-(2**31), 2**31, 33).astype(np.int32)
    wide = RNG.integers(-(2**62), 2**62, 33).astype(np.int64)
    mask = RNG.random((6, 33)) > 0.5
    got = compiled(
        lambda x, y, w, m: (
            x & y,
            0x0F0F | x,
            x ^ y,
            ~x,
            w.long() & ~w,
            pf.bitwise_xor(w, x),
            m & (x > 0),
            x | m,
            np.bitwise_and(x, 255),
            np.invert(y),
        ),
        a,
        b,
        wide,
        mask,
    )
    want = [
        a & b, 0x0F0F | a, a ^ b, ~a, wide & ~wide, np.bitwise_xor(wide, a.astype(np.int64)),
        mask & (a > 0), a | mask.astype(np.int32), a & 255, ~b,
    ]  # fmt: skip
    for got_one, want_one in zip(got, want, strict=True):
        assert got_one.dtype == want_one.dtype
        np.testing.assert_array_equal(got_one, want_one)
    with pytest.raises(pf.FusionError, match="bitwise_or: needs integer or bool operands"):
        pf.fuse(lambda x: x | 1.0).trace(pf.spec((4,), pf.int32))
    with pytest.raises(pf.FusionError, match="cannot be converted to type int32"):
        pf.fuse(lambda x: x & 2**40).trace(pf.spec((4,), pf.int32))


def test_a_normalized_shape_for_a_weight_is_a_clear_error() -> None:
    # torch.nn.functional.layer_norm takes normalized_shape second; pyfuse takes the weight.
    for norm in (pf.layer_norm, pf.rms_norm):
        fused = pf.fuse(lambda x, norm=norm: norm(x, (4,)))
        with pytest.raises(pf.FusionError, match="the weight must be a tensor, got tuple"):
            fused.trace(pf.spec((2, 4), pf.float32))
