"""Broadcast pointwise fusions (the pointwise scheduler's 2-D schedule) on the GPU against the
NumPy float64 reference.

Every case runs ``@pf.fuse`` on torch CUDA tensors holding fresh random data (no fixed seed:
the seed is printed on failure), twice (a result that moves between runs is a race), and
compares with ``fused.reference`` on host copies. Cases: ``bias[N]`` broadcast over the rows,
``scale[M, 1]`` broadcast over the columns, and both in one gelu chain; shapes 7x1000,
1000x1000, 129x4097 (ragged rows and columns) and 4096x4096; bf16 and f32; a one-element
offset input (the unvectorized variant); a 3-D bias; and more than 2**31 elements (64-bit
indexing, compared on a sample of rows). Each case also checks that the 2-D schedule ran.

``test_every_case_compiles_and_assembles`` needs no GPU: it compiles every case for the
layout its tensors will have and assembles the PTX with ptxas.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from typing import Any

import check_utils
import numpy as np
import pytest
from check_utils import to_host

import pyfuse as pf
from pyfuse.backend_ptx import ptxas
from pyfuse.ir.target import HOPPER
from pyfuse.runtime.compile import compile_fusion

# ---- cases ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Arg:
    """One tensor argument. ``offset1``: ``x.view(-1)[1:]`` reshaped, a one-element offset that
    breaks 16-byte alignment, so the call compiles the unvectorized variant."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    view: str = "plain"

    @property
    def pf_dtype(self) -> pf.DType:
        return pf.bfloat16 if self.dtype == "bfloat16" else pf.float32

    def spec(self) -> pf.Spec:
        return pf.spec(self.shape, self.pf_dtype)

    def make(self, torch: Any, generator: Any) -> Any:
        count = math.prod(self.shape) + (1 if self.view == "offset1" else 0)
        values = torch.randn((count,), generator=generator, device="cuda", dtype=torch.float32)
        values = values.to(getattr(torch, self.dtype))
        if self.view == "offset1":
            values = values[1:]
        return values.view(self.shape)


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    fn: Callable[..., Any]
    args: tuple[Arg, ...]
    rtol: float
    atol: float
    two_dimensional: bool = True  # the pointwise scheduler's 2-D schedule must be chosen
    sample_rows: bool = False  # compare a sample of rows (each output row depends on its own)


def add_bias(x: Any, b: Any) -> Any:
    return x + b


def scale_rows(x: Any, s: Any) -> Any:
    return x * s


def scale_bias_gelu(x: Any, s: Any, b: Any) -> Any:
    return pf.gelu(x.to(pf.float32) * s + b.to(pf.float32)).to(x.dtype)


F32_TOL = {"rtol": 1e-5, "atol": 1e-5}
BF16_TOL = {"rtol": 1.6e-2, "atol": 1e-5}  # one bf16 rounding (plus one of an input op)


def _cases() -> list[Case]:
    cases = []
    for m, n in [(7, 1000), (1000, 1000), (129, 4097), (4096, 4096)]:
        for dtype in ("float32", "bfloat16"):
            tol = BF16_TOL if dtype == "bfloat16" else F32_TOL
            tag = f"{'bf16' if dtype == 'bfloat16' else 'f32'}-{m}x{n}"
            x = Arg((m, n), dtype)
            cases += [
                Case(f"bias-{tag}", add_bias, (x, Arg((n,), dtype)), **tol),
                Case(f"scale-{tag}", scale_rows, (x, Arg((m, 1), dtype)), **tol),
                Case(
                    f"scale-bias-gelu-{tag}",
                    scale_bias_gelu,
                    (x, Arg((m, 1), "float32"), Arg((n,), dtype)),
                    **tol,
                ),
            ]
    cases += [
        Case(
            "bias-offset1-bf16-1000x1000",
            add_bias,
            (Arg((1000, 1000), "bfloat16", "offset1"), Arg((1000,), "bfloat16")),
            **BF16_TOL,
        ),
        Case(
            "scale-offset1-f32-129x4097",
            scale_rows,
            (Arg((129, 4097), "float32", "offset1"), Arg((129, 1), "float32")),
            **F32_TOL,
        ),
        Case(
            "bias-3d-f32-8x129x1024",
            add_bias,
            (Arg((8, 129, 1024)), Arg((1024,))),
            **F32_TOL,
        ),
        Case(
            "bias-two-outputs-f32-1000x1000",
            lambda x, b: (x + b, pf.relu(x) * b),
            (Arg((1000, 1000)), Arg((1000,))),
            **F32_TOL,
        ),
    ]
    return cases


CASES = _cases()
HUGE = Case(
    "bias-huge-bf16",
    add_bias,
    (Arg((2**16 + 1, 2**15), "bfloat16"), Arg((2**15,), "bfloat16")),
    sample_rows=True,
    **BF16_TOL,
)


# ---- checking ---------------------------------------------------------------------------------


def run_case(torch: Any, case: Case) -> None:
    seed = int.from_bytes(os.urandom(4), "little")
    generator = torch.Generator(device="cuda").manual_seed(seed)
    inputs = [arg.make(torch, generator) for arg in case.args]
    fused = pf.fuse(name=case.name.replace("-", "_"))(case.fn)
    if case.two_dimensional:
        compiled = fused.compile(*inputs)  # the variant the call below uses
        (kernel,) = compiled.kernels
        assert kernel.params["break_point"] > 0, (case.name, kernel.params)
    runs = check_utils.run_twice(torch, fused, inputs)
    index: Any = None
    if case.sample_rows:
        rows = case.args[0].shape[0]
        index = torch.from_numpy(check_utils.sample_rows(rows, np.random.default_rng(seed))).to(
            "cuda"
        )
        host_args = [
            to_host(torch, value.index_select(0, index) if arg.shape[0] == rows else value)
            for arg, value in zip(case.args, inputs, strict=True)
        ]
    else:
        host_args = [to_host(torch, value) for value in inputs]
    check_utils.assert_runs_close(
        torch,
        runs,
        fused.reference(*host_args),
        index,
        atol=case.atol,
        rtol=case.rtol,
        what=case.name,
        seed=seed,
    )


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_case_matches_reference(torch: Any, case: Case) -> None:
    run_case(torch, case)


@pytest.mark.gpu
def test_more_than_2_31_elements(torch: Any) -> None:
    free, _ = torch.cuda.mem_get_info()
    if free < 12 * 2**30:
        pytest.skip(f"needs 12 GiB of free GPU memory, {free / 2**30:.1f} GiB free")
    try:
        run_case(torch, HUGE)
    finally:
        torch.cuda.empty_cache()


# ---- CPU: every case compiles and assembles ---------------------------------------------------


@pytest.mark.parametrize("case", [*CASES, HUGE], ids=lambda c: c.name)
def test_every_case_compiles_and_assembles(case: Case) -> None:
    fused = pf.fuse(name=case.name.replace("-", "_"))(case.fn)
    aligned = all(arg.view != "offset1" for arg in case.args)
    target = HOPPER if aligned else dataclasses.replace(HOPPER, vector_bytes=1)
    compiled = compile_fusion(fused.trace(*[arg.spec() for arg in case.args]), target)
    if case.two_dimensional:
        assert all(kernel.params["break_point"] > 0 for kernel in compiled.kernels)
    check_utils.require_ptxas()
    for kernel in compiled.kernels:
        ptxas.assemble(kernel.ptx)
