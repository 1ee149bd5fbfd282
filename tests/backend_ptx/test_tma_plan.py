"""Host-side tensor-map planning: the driver's INVALID_VALUE rules, checked with clear messages."""

from __future__ import annotations

from typing import Any

import pytest

from pyfuse.backend_ptx import tma as tma_host
from pyfuse.backend_ptx.smem_desc import Swizzle
from pyfuse.backend_ptx.tma import TensorMapPlan


def test_plan_from_row_major_shape_reverses_to_innermost_first() -> None:
    plan = tma_host.plan_tiled("bf16", (64, 128), (128, 1), (64, 64), swizzle=Swizzle.B128)
    assert plan.global_dims == (128, 64)
    assert plan.global_strides == (256,)
    assert plan.box_dims == (64, 64)
    assert plan.element_strides == (1, 1)
    assert plan.box_bytes == 64 * 64 * 2
    assert plan.inner_box_bytes == 128


def test_three_d_plan_for_wide_k_tiles() -> None:
    # A K-tile wider than one 128B swizzle row as {64, rows, K/64} with strides {pitch, 128 B}.
    plan = TensorMapPlan("bf16", (64, 256, 4), (1024, 128), (64, 128, 2), swizzle=Swizzle.B128)
    assert plan.rank == 3
    assert plan.box_bytes == 64 * 128 * 2 * 2


def test_plans_are_hashable_cache_keys() -> None:
    a = tma_host.plan_tiled("f32", (32, 32), (32, 1), (32, 32))
    b = tma_host.plan_tiled("f32", (32, 32), (32, 1), (32, 32))
    assert a == b and hash(a) == hash(b)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(dtype="f8", global_dims=(16,), global_strides=(), box_dims=(16,)), "TMA dtype"),
        (
            dict(dtype="f32", global_dims=(4,) * 6, global_strides=(16,) * 5, box_dims=(4,) * 6),
            "rank 1..5",
        ),
        (
            dict(dtype="f32", global_dims=(0,), global_strides=(), box_dims=(4,)),
            r"global dims must be",
        ),
        (
            dict(dtype="f32", global_dims=(8, 8), global_strides=(), box_dims=(8, 8)),
            "takes 1 byte strides",
        ),
        (
            dict(dtype="bf16", global_dims=(100, 8), global_strides=(200,), box_dims=(64, 8)),
            "multiples of 16 bytes, got 200 .*multiple of 8 elements",
        ),
        (
            dict(dtype="f32", global_dims=(8, 8), global_strides=(1 << 40,), box_dims=(8, 8)),
            "global strides",
        ),
        (
            dict(dtype="f32", global_dims=(1024,), global_strides=(), box_dims=(512,)),
            r"box dims must be .* \[1, 256\]",
        ),
        (
            dict(dtype="f32", global_dims=(8, 8), global_strides=(32,), box_dims=(8,)),
            "box dims must have 2",
        ),
        (
            dict(dtype="bf16", global_dims=(64,), global_strides=(), box_dims=(4,)),
            "multiple of 16 bytes",
        ),
        (
            dict(
                dtype="bf16",
                global_dims=(256, 8),
                global_strides=(512,),
                box_dims=(128, 8),
                swizzle=Swizzle.B128,
            ),
            "exceeds the B128 swizzle span of 128 B; use at most 64 elements",
        ),
        (
            dict(
                dtype="bf16",
                global_dims=(256, 8),
                global_strides=(512,),
                box_dims=(64, 8),
                swizzle=Swizzle.B64,
            ),
            "exceeds the B64 swizzle span of 64 B",
        ),
        (
            dict(
                dtype="f32",
                global_dims=(8, 8),
                global_strides=(32,),
                box_dims=(8, 8),
                element_strides=(1, 9),
            ),
            "element strides",
        ),
    ],
)
def test_plan_validation(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TensorMapPlan(**kwargs)


def test_plan_tiled_validation() -> None:
    with pytest.raises(ValueError, match="innermost dim must be contiguous"):
        tma_host.plan_tiled("f32", (8, 8), (1, 8), (8, 8))
    with pytest.raises(ValueError, match="one entry per dim"):
        tma_host.plan_tiled("f32", (8, 8), (8, 1), (8,))


def test_base_address_alignment() -> None:
    plan = tma_host.plan_tiled("f32", (8, 8), (8, 1), (8, 8))
    assert tma_host.check_address(plan, 0x1000) == 0x1000
    with pytest.raises(ValueError, match="16-byte aligned, got 0x1008"):
        tma_host.check_address(plan, 0x1008)
    with pytest.raises(ValueError, match="device address"):
        tma_host.check_address(plan, 0)
