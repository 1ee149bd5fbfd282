"""split_k: K split into a batch of partial products, summed after (MatmulParams.splitk).

The rewrite is checked on the math (the NumPy interpreter on the rewritten fusion against the
reference of the original), on the kernels it leads to (a batched TMA matmul that reads the
inputs in place, then the sum), on the PTX (assembled with ptxas), and on the matmuls it
must leave alone, each with its reason.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from check_utils import require_ptxas
from sim_utils import random_inputs

import pyfuse as pf
from pyfuse.backend_ptx import ptxas
from pyfuse.ir import kernel_ir as k
from pyfuse.ir.exprs import MmaOp
from pyfuse.ir.interpreter import evaluate
from pyfuse.ir.target import HOPPER
from pyfuse.passes import pipeline
from pyfuse.passes.split_k import auto_parts, split_k
from pyfuse.passes.translate_patterns import translate_patterns

bf16 = pf.bfloat16
M, N, K = 200, 136, 4096  # ragged M and N: partial tiles in every part

CASES: dict[str, tuple[Callable[..., Any], list[tuple[int, ...]]]] = {
    "a@b": (lambda a, b: a @ b, [(M, K), (K, N)]),
    "a@b.T": (lambda a, b: a @ b.T, [(M, K), (N, K)]),
    "a.T@b": (lambda a, b: a.T @ b, [(K, M), (K, N)]),
    "a.T@b.T": (lambda a, b: a.T @ b.T, [(K, M), (N, K)]),
    "linear+bias+gelu": (
        lambda x, w, b: pf.gelu(pf.linear(x, w, b), approximate="tanh"),
        [(M, K), (N, K), (N,)],
    ),
    "batched": (lambda a, b: a @ b, [(3, M, K), (K, N)]),
}


def _specs(shapes: list[tuple[int, ...]]) -> list[pf.Spec]:
    return [pf.spec(shape, bf16) for shape in shapes]


@pytest.mark.parametrize("name", sorted(CASES))
def test_rewritten_math_equals_the_original(name: str) -> None:
    fn, shapes = CASES[name]
    fused = pf.fuse(fn)
    specs = _specs(shapes)
    fusion, _ = fused.trace(*specs).clone()
    assert split_k(fusion, 4) == []
    with fusion:
        translate_patterns(fusion)  # the parts become fp32 MMA results (no bf16 round trip)
    (mma,) = [e for e in fusion.exprs() if isinstance(e, MmaOp)]
    assert mma.output.dtype == pf.float32
    arrays = random_inputs(specs, seed=len(name))
    (got,) = evaluate(fusion, arrays)
    want = fused.reference(*arrays)
    # Float64 math on both sides: the rewrite only reassociates the K sum, so the results
    # agree to the final bf16 rounding (one ulp).
    np.testing.assert_allclose(
        got.astype(np.float64), want.astype(np.float64), rtol=2**-7, atol=1e-6
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_split_matmul_is_a_batch_of_parts_read_in_place(name: str) -> None:
    fn, shapes = CASES[name]
    fusion = pf.fuse(fn).trace(*_specs(shapes))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # applied, and the kernel scheduler sees no splitk
        result = pipeline.run(fusion, HOPPER, pf.MatmulParams(splitk=4))
    schedulers = [stages.plan.scheduler for stages in result.kernels]
    assert schedulers[0] == "matmul" and schedulers[1] == "reduction"
    kernel = result.kernels[0].kernel_ir
    (loop,) = kernel.body
    assert isinstance(loop, k.MatmulMainLoop)
    assert loop.k == K // 4 and loop.batch % 4 == 0
    inputs = {p.buffer_name for p in kernel.params if p.role == k.ParamRole.INPUT}
    assert {operand.buffer_name for operand in loop.operands} <= inputs  # no copy kernels
    # The parts travel in fp32 between the two kernels.
    (partials,) = [tv for tv in result.segmented.intermediates.values() if tv.ndim >= 3]
    assert partials.dtype == pf.float32 and 4 in partials.shape


def test_split_kernels_assemble_cleanly() -> None:
    require_ptxas()
    fn, shapes = CASES["linear+bias+gelu"]
    compiled = pf.fuse(fn, matmul=pf.MatmulParams(splitk=4)).compile(*_specs(shapes))
    for kernel in compiled.kernels:
        result = ptxas.assemble(kernel.ptx)
        assert result.problems() == [], result.problems()
        resources = result.kernels[kernel.name]
        assert resources.spill_store_bytes == 0 and resources.local_bytes == 0


@pytest.mark.parametrize(
    ("fn", "specs", "reason"),
    [
        (lambda a, b: a @ b, _specs([(M, 1000), (1000, N)]), "not a multiple of 4 parts"),
        (
            lambda a, b: a @ b,
            [pf.spec((M, K), bf16, strides=(1, M)), pf.spec((K, N), bf16)],
            "not stored row-major",
        ),
        (lambda a, b: a @ b, [pf.spec((M, K), pf.float32), pf.spec((K, N), pf.float32)], "float32"),
    ],
)
def test_matmuls_it_cannot_split_are_left_alone_with_a_reason(
    fn: Callable[..., Any], specs: list[pf.Spec], reason: str
) -> None:
    fused = pf.fuse(fn, matmul=pf.MatmulParams(splitk=4))
    with pytest.warns(UserWarning, match=reason) as caught:
        compiled = fused.compile(*specs)
    assert "test_split_k.py" in str(caught[0].message)  # names the user's line
    assert len(compiled.kernels) >= 1  # it still compiles, unsplit


def test_splitk_one_changes_nothing() -> None:
    fn, shapes = CASES["a@b"]
    fusion, _ = pf.fuse(fn).trace(*_specs(shapes)).clone()
    before = str(fusion)
    assert split_k(fusion, 1) == []
    assert str(fusion) == before


@pytest.mark.parametrize(
    ("a", "b", "parts"),
    [
        ((512, 32768), (512, 32768), 16),  # 8 tiles: 16 parts fill 128 of 132 SMs
        ((64, 4096), (14336, 4096), 1),  # 56 tiles of 64x256: more than a quarter of the SMs
        ((64, 8192), (4096, 8192), 8),  # 16 tiles: 8 parts of 1024 make 128 CTAs
        ((200, 4096), (136, 4096), 4),  # 4 tiles; parts stop at 1024 elements of K
        ((4096, 4096), (4096, 4096), 1),  # 512 tiles: the SMs are full
        ((1000, 1000), (1000, 1000), 1),  # 32 tiles, but K is short
        ((64, 4008), (64, 4008), 1),  # K = 4008: two parts of 2004 are not 8-aligned
    ],
)
def test_the_heuristic_splits_k_only_where_tiles_leave_sms_idle(
    a: tuple[int, int], b: tuple[int, int], parts: int
) -> None:
    fusion = pf.fuse(lambda x, w: pf.linear(x, w)).trace(pf.spec(a, bf16), pf.spec(b, bf16))
    (linear,) = [e for e in fusion.exprs() if e.op_name == "linear"]
    assert auto_parts(linear, HOPPER) == parts
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a heuristic choice is never a warning
        result = pipeline.run(fusion, HOPPER)
    (loop,) = result.kernels[0].kernel_ir.body
    assert isinstance(loop, k.MatmulMainLoop) and loop.batch == parts
    assert len(result.kernels) == (1 if parts == 1 else 2)
    # splitk=1 turns the heuristic off.
    unsplit = pipeline.run(fusion, HOPPER, pf.MatmulParams(splitk=1))
    assert len(unsplit.kernels) == 1
