"""int8, uint8 and int16 through the whole CPU path (passes, PTX, ptxas, the kernel-IR
interpreter) against NumPy, with torch's rules: every op's result wraps to the type's width,
promotion (``uint8 + int8`` is int16, sums are int64), float casts truncate and saturate,
Python ints that do not fit raise."""

from __future__ import annotations

import numpy as np
import pytest
from test_composites import _close, compiled

import pyfuse as pf
from pyfuse.ir import dtypes

RNG = np.random.default_rng(31)
U8 = RNG.integers(0, 256, (5, 48)).astype(np.uint8)
U8B = RNG.integers(0, 256, (5, 48)).astype(np.uint8)
I8 = RNG.integers(-128, 128, (5, 48)).astype(np.int8)
I16 = RNG.integers(-(2**15), 2**15, (5, 48)).astype(np.int16)


def test_arithmetic_wraps_after_every_op() -> None:
    got = compiled(
        lambda a, b: (a + b, a * b, a - b, (a - b) > 100, -a, a // 7, a % 7, ~a, a & b),
        U8,
        U8B,
    )
    with np.errstate(all="ignore"):
        wants = [
            U8 + U8B,
            U8 * U8B,
            U8 - U8B,
            (U8 - U8B) > 100,
            -U8,
            U8 // 7,
            U8 % 7,
            ~U8,
            U8 & U8B,
        ]
    for g, w in zip(got, wants, strict=True):
        _close(g, w, w.dtype)


def test_signed_narrow_types_wrap_and_reduce() -> None:
    got = compiled(
        lambda a, h: (a * 3, pf.abs(a), a.amax(-1), a.amin(0), a.sum(-1), h * h, h.amax(-1)),
        I8,
        I16,
    )
    with np.errstate(all="ignore"):
        wants = [
            I8 * np.int8(3),
            np.abs(I8),
            I8.max(-1),
            I8.min(0),
            I8.astype(np.int64).sum(-1),
            I16 * I16,
            I16.max(-1),
        ]
    for g, w in zip(got, wants, strict=True):
        _close(g, w, w.dtype)


def test_unsigned_extrema_start_from_the_unsigned_range() -> None:
    got = compiled(lambda a: (a.amin(-1), a.amax(-1), pf.argmin(a, -1)), U8)
    _close(got[0], U8.min(-1), np.uint8)
    _close(got[1], U8.max(-1), np.uint8)
    _close(got[2], U8.argmin(-1), np.int64)


def test_promotion_follows_torch() -> None:
    def result(fn: object, *specs: pf.Spec) -> pf.DType:
        return pf.fuse(fn).trace(*specs).outputs[0].dtype  # type: ignore[arg-type]

    u8, i8, i16 = (pf.spec((4,), d) for d in (pf.uint8, pf.int8, pf.int16))
    i32, b = pf.spec((4,), pf.int32), pf.spec((4,), pf.bool)
    assert result(lambda x, y: x + y, u8, i8) is dtypes.int16
    assert result(lambda x, y: x + y, u8, i16) is dtypes.int16
    assert result(lambda x, y: x + y, u8, i32) is dtypes.int32
    assert result(lambda x, y: x + y, u8, b) is dtypes.uint8
    assert result(lambda x: x * 2, i8) is dtypes.int8
    assert result(lambda x: x * 2.5, u8) is dtypes.float32
    assert result(lambda x: x / 2, i16) is dtypes.float32
    assert result(lambda x: x.sum(), u8) is dtypes.int64
    with pytest.raises(pf.FusionError, match="value 256 cannot be converted to type uint8"):
        pf.fuse(lambda x: x + 256).trace(u8)
    with pytest.raises(pf.FusionError, match="value -129 cannot be converted to type int8"):
        pf.fuse(lambda x: x + -129).trace(i8)


def test_casts_wrap_integers_and_saturate_floats() -> None:
    x = np.array([-300.7, -129.0, -1.5, -0.0, 0.9, 127.9, 255.5, 300.0, 7e4, np.nan], np.float32)
    got = compiled(
        lambda f, i: (f.to(pf.uint8), f.to(pf.int8), f.byte(), f.char(), f.short(), i.to(pf.int8)),
        x,
        np.array([-300, -129, 128, 255, 256, 70000, 7, 0, 1, -1], np.int32),
    )
    finite = np.nan_to_num(np.trunc(x.astype(np.float64)), nan=0.0)
    assert got[0].tolist() == np.clip(finite, 0, 255).astype(np.uint8).tolist()
    assert got[1].tolist() == np.clip(finite, -128, 127).astype(np.int8).tolist()
    assert got[2].tolist() == got[0].tolist() and got[3].tolist() == got[1].tolist()
    assert got[4].tolist() == np.clip(finite, -(2**15), 2**15 - 1).astype(np.int16).tolist()
    assert got[5].tolist() == [-44, 127, -128, -1, 0, 112, 7, 0, 1, -1]


def test_narrow_vectors_load_and_store_every_element() -> None:
    wide = RNG.integers(-128, 128, (8, 64)).astype(np.int8)
    (got,) = compiled(lambda a: a + 1, wide)
    with np.errstate(all="ignore"):
        _close(got, wide + np.int8(1), np.int8)
    kernel = pf.fuse(lambda a: a + 1).compile(pf.spec((8, 64), pf.int8)).kernels[0]
    assert kernel.params["vector_width"] == 16
    assert "bfe.s32" in kernel.ptx and "bfi.b32" in kernel.ptx
