"""Type promotion follows torch's rules."""

from __future__ import annotations

import pytest

from pyfuse.ir import dtypes
from pyfuse.ir.dtypes import bfloat16, bool_, float16, float32, int32, int64

# (a, b, torch.result_type(a, b)), written from torch's documented rules.
TENSOR_PAIRS = [
    (bfloat16, float32, float32),
    (float16, float32, float32),
    (bfloat16, float16, float32),
    (bfloat16, bfloat16, bfloat16),
    (int32, float32, float32),
    (int64, bfloat16, bfloat16),
    (int32, int64, int64),
    (bool_, int32, int32),
    (bool_, float16, float16),
    (bool_, bool_, bool_),
]


@pytest.mark.parametrize(("a", "b", "expected"), TENSOR_PAIRS)
def test_tensor_tensor_promotion(a: dtypes.DType, b: dtypes.DType, expected: dtypes.DType) -> None:
    assert dtypes.promote_pair(a, b) == expected
    assert dtypes.promote_pair(b, a) == expected


SCALAR_CASES = [
    (bfloat16, 2.5, bfloat16),  # a Python float does not widen a float tensor
    (float16, 3, float16),
    (int32, 2, int32),  # a Python int does not widen an int tensor
    (int32, 2.5, float32),  # ... but a float scalar lifts an int tensor to the default float
    (bool_, 1, int64),
    (bool_, True, bool_),
    (int64, True, int64),
]


@pytest.mark.parametrize(("tensor", "scalar", "expected"), SCALAR_CASES)
def test_scalar_promotion(tensor: dtypes.DType, scalar: object, expected: dtypes.DType) -> None:
    assert dtypes.result_type([tensor], [scalar]) == expected


def test_numpy_round_trip() -> None:
    for dtype in dtypes.ALL_DTYPES:
        assert dtypes.from_numpy(dtype.numpy()) == dtype
    with pytest.raises(ValueError, match="unsupported"):
        dtypes.from_numpy("complex64")


def test_zero_dim_tensors_promote_only_to_a_higher_category() -> None:
    """torch's rule: dimensioned tensors decide; a 0-d tensor only where its category is
    higher (then the type that holds every 0-d tensor of it); a Python scalar never widens."""
    import pyfuse as pf

    def result(*specs: pf.Spec) -> str:
        fused = pf.fuse(
            lambda *xs: xs[0] + xs[1] if len(xs) == 2 else pf.where(xs[0], xs[1], xs[2])
        )
        return fused.trace(*specs).outputs[0].dtype.name

    S = pf.spec
    assert result(S((4,), pf.bfloat16), S((), pf.float32)) == "bfloat16"
    assert result(S((4,), pf.float32), S((), pf.float64)) == "float32"
    assert result(S((4,), pf.int32), S((), pf.float64)) == "float64"
    assert result(S((4,), pf.int8), S((), pf.int64)) == "int8"
    assert result(S((), pf.int32), S((), pf.float16)) == "float16"
    assert result(S((4,), pf.float16), S((4,), pf.float32)) == "float32"
    assert result(S((4,), pf.bool), S((4,), pf.float16), S((), pf.float32)) == "float16"
