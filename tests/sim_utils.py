"""Run a traced fusion through the pass pipeline and the kernel-IR interpreter on the CPU.

This is how CPU tests check lowering end to end: every kernel of the segmented fusion
runs on the SIMT interpreter, intermediates flow between kernels like they would on the
GPU, and the outputs are compared with the NumPy reference interpreter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

import pyfuse as pf
from pyfuse.ir.kernel_interpreter import launch
from pyfuse.ir.target import HOPPER, TargetInfo
from pyfuse.passes import pipeline
from pyfuse.passes.pipeline import PipelineResult


def random_inputs(specs: Sequence[pf.Spec], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = []
    for spec in specs:
        if spec.dtype.is_bool:
            values = rng.random(spec.shape) > 0.5
        elif spec.dtype.is_integer:
            values = rng.integers(-50, 50, spec.shape)
        else:
            values = rng.standard_normal(spec.shape)
        arrays.append(np.asarray(values).astype(spec.dtype.numpy()))
    return arrays


def _in_spec_layout(array: np.ndarray, spec: pf.Spec | None) -> np.ndarray:
    """The array laid out in memory as ``spec`` says (row-major or column-major)."""
    if spec is None or spec.is_contiguous:
        return np.require(array, requirements='C')  # keeps 0-d arrays 0-d
    fortran = np.asfortranarray(array)
    element_strides = tuple(s // fortran.itemsize for s in fortran.strides)
    if element_strides != spec.strides:
        raise NotImplementedError(f"the simulator harness cannot lay out strides {spec.strides}")
    return fortran


def run_on_simulator(
    result: PipelineResult,
    arrays: Sequence[np.ndarray],
    output_specs: Sequence[tuple[tuple[int, ...], pf.DType]],
    specs: Sequence[pf.Spec | None] | None = None,
) -> list[np.ndarray]:
    # Poison the outputs: a kernel that forgets an element leaves NaN or a sentinel behind.
    outputs = []
    for shape, dtype in output_specs:
        poison = (
            np.full(shape, -7, dtype=np.float64)
            if not dtype.is_floating
            else np.full(shape, np.nan)
        )
        outputs.append(poison.astype(dtype.numpy()))
    intermediates: dict[str, np.ndarray] = {}
    specs = list(specs) if specs is not None else [None] * len(arrays)
    segmented = result.segmented
    for stages, sources, sinks in zip(
        result.kernels, segmented.sources, segmented.sinks, strict=True
    ):
        inputs = []
        for kind, key in sources:
            if kind == "input":
                inputs.append(_in_spec_layout(arrays[int(key)], specs[int(key)]))
            elif kind == "output":
                inputs.append(outputs[int(key)])
            else:
                inputs.append(intermediates[str(key)])
        kernel_outputs = []
        for kind, key in sinks:
            if kind == "output":
                kernel_outputs.append(outputs[int(key)])
            else:
                tv = segmented.intermediates[str(key)]
                intermediates[str(key)] = np.zeros(tv.shape, tv.dtype.numpy())
                kernel_outputs.append(intermediates[str(key)])
        launch(stages.kernel_ir, inputs, kernel_outputs)
    return outputs


def check_fusion(
    fn: Callable[..., object],
    specs: Sequence[pf.Spec],
    *,
    seed: int = 0,
    rtol: float = 1e-5,
    atol: float = 1e-5,
    target: TargetInfo = HOPPER,
) -> PipelineResult:
    """Compile ``fn`` for ``specs`` and ``target``, run it on the simulator and compare with
    the reference."""
    fused = pf.fuse(fn)
    fusion = fused.trace(*specs)
    result = pipeline.run(fusion, target)
    arrays = random_inputs(specs, seed)
    expected = fused.reference(*arrays)
    expected = expected if isinstance(expected, tuple) else (expected,)
    output_specs = [(tv.shape, tv.dtype) for tv in fusion.outputs]
    actual = run_on_simulator(result, arrays, output_specs, specs)
    for got, want in zip(actual, expected, strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(
            got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol
        )
    return result
