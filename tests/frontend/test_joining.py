"""pf.cat and pf.stack through the whole CPU path (passes, PTX, ptxas, the kernel-IR
interpreter) against NumPy, with torch's rules: promoted dtypes, negative dims, empty pieces
(1-D empty tensors skipped), views of inputs read in place, and clear errors at the user's
line."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from test_composites import _close, compiled

import pyfuse as pf

RNG = np.random.default_rng(23)
A = RNG.standard_normal((4, 6)).astype(np.float32)
B = RNG.standard_normal((4, 3)).astype(np.float32)
INTS = RNG.integers(-5, 6, (4, 6)).astype(np.int32)
H = RNG.standard_normal((4, 6)).astype(ml_dtypes.bfloat16)


def test_cat_joins_along_any_dim_and_promotes() -> None:
    got = compiled(
        lambda a, b, i, h: (
            pf.cat([a, b], -1),
            pf.cat((a, i), 0),
            pf.cat([h, i], 1),
            pf.cat([a, b * 2.0, a], 1) - 1.0,
        ),
        A,
        B,
        INTS,
        H,
    )
    a64, b64 = A.astype(np.float64), B.astype(np.float64)
    _close(got[0], np.concatenate([a64, b64], -1), np.float32)
    _close(got[1], np.concatenate([a64, INTS], 0), np.float32)
    _close(got[2], np.concatenate([H.astype(np.float64), INTS], 1), ml_dtypes.bfloat16)
    _close(got[3], np.concatenate([a64, 2 * b64, a64], 1) - 1, np.float32)


def test_cat_reads_views_of_inputs_in_place_and_keeps_signed_zeros() -> None:
    x = np.array([[-0.0, 1.0, np.nan, -np.inf], [2.0, -0.0, 3.0, np.inf]], np.float32)
    got = compiled(lambda t: (pf.cat([t[:, 2:], t[:, :2]], 1), pf.cat([t.T, t.T], 0)), x)
    want = np.concatenate([x[:, 2:], x[:, :2]], 1)
    assert np.array_equal(got[0], want, equal_nan=True)
    assert np.array_equal(np.signbit(got[0]), np.signbit(want))
    assert np.array_equal(got[1], np.concatenate([x.T, x.T], 0), equal_nan=True)


def test_cat_skips_empty_1d_pieces_and_keeps_empty_ones_of_its_rank() -> None:
    empty1d = np.zeros((0,), np.float32)
    empty_cols = np.zeros((4, 0), np.float32)
    got = compiled(
        lambda a, e, c: (pf.cat([e, a, e], 0), pf.cat([c, a, c], 1)), A, empty1d, empty_cols
    )
    _close(got[0], A.astype(np.float64), np.float32)
    _close(got[1], A.astype(np.float64), np.float32)
    got = compiled(lambda c: pf.cat([c, c], 1), empty_cols)
    assert got[0].shape == (4, 0)


def test_stack_adds_an_axis_at_dim() -> None:
    got = compiled(
        lambda a, i: (pf.stack([a, i], 0), pf.stack((a, a, i), -1), pf.stack([a], 1)), A, INTS
    )
    a64 = A.astype(np.float64)
    _close(got[0], np.stack([a64, INTS], 0), np.float32)
    _close(got[1], np.stack([a64, a64, INTS], -1), np.float32)
    _close(got[2], np.stack([a64], 1), np.float32)


def test_cat_and_stack_refuse_what_torch_refuses() -> None:
    a, b = pf.spec((4, 6), pf.float32), pf.spec((3, 5), pf.float32)
    with pytest.raises(pf.FusionError, match="differ in dim 1") as error:
        pf.fuse(lambda x, y: pf.cat([x, y], 0)).trace(a, b)
    assert "test_joining.py" in str(error.value)  # the user's line
    with pytest.raises(pf.FusionError, match="ranks must be equal"):
        pf.fuse(lambda x: pf.cat([x, x[0]], 0)).trace(a)
    with pytest.raises(pf.FusionError, match="0-d"):
        pf.fuse(lambda x: pf.cat([x[0, 0], x[0, 1]], 0)).trace(a)
    with pytest.raises(pf.FusionError, match="list or tuple"):
        pf.fuse(lambda x: pf.cat(x, 0)).trace(a)
    with pytest.raises(pf.FusionError, match="out of range"):
        pf.fuse(lambda x: pf.cat([x, x], 2)).trace(a)
    with pytest.raises(pf.FusionError, match="one shape"):
        pf.fuse(lambda x, y: pf.stack([x, y])).trace(a, b)


def test_a_cat_takes_the_elementwise_ops_around_it_into_its_kernel() -> None:
    rotary = pf.fuse(lambda x, c, s: x * c + pf.cat([-x[..., 4:], x[..., :4]], -1) * s)
    x, table = pf.spec((2, 3, 8), pf.bfloat16), pf.spec((3, 8), pf.bfloat16)
    kernels = rotary.compile(x, table, table).kernels
    assert [kernel.scheduler for kernel in kernels] == ["cat"]
    assert sorted(kernels[0].arguments) == [("input", 0), ("input", 1), ("input", 2), ("output", 0)]
    got = compiled(
        lambda x, c, s: x * c + pf.cat([-x[..., 4:], x[..., :4]], -1) * s,
        *(RNG.standard_normal(shape).astype(np.float32) for shape in ((2, 3, 8), (3, 8), (3, 8))),
    )
    assert got[0].shape == (2, 3, 8)
    # A reduction after the cat, or a computed tensor sliced into it, ends the cat's kernel.
    fused = pf.fuse(lambda a: pf.cat([(a * 2)[1:], a], 0).sum(-1))
    schedulers = [kernel.scheduler for kernel in fused.compile(pf.spec((3, 4), pf.float32)).kernels]
    assert schedulers == ["pointwise", "cat", "reduction"]
