"""Run a :class:`~pyfuse.passes.pipeline.PipelineResult`'s kernels on the CPU.

Every kernel of the segmented fusion runs on the kernel-IR interpreter
(:mod:`pyfuse.ir.kernel_interpreter`), a tensor-core matmul kernel as its PTX on the Hopper
simulator (:mod:`pyfuse.testing.ptx_sim`); intermediates flow between kernels as they would on the
GPU, and the outputs can be compared with the NumPy reference (``FusedFunction.reference``).

Guarantees:

- Inputs are laid out in memory exactly as their spec says (:func:`laid_out`): any
  non-negative element strides, so a row-padded view (``(4, 128)`` with strides ``(131, 1)``),
  a transposed one, or a broadcast (stride 0) one is a view of a larger backing buffer, and the
  interpreter indexes that buffer's memory from the view's first element, as a GPU kernel
  indexes memory from its base pointer. Padding holds poison (NaN, a large negative integer,
  True), so a kernel that reads it shows wrong values.
- Outputs and global intermediates start poisoned (NaN for floats, -7 for integers, True for
  bools), so an element no kernel writes shows up.
- Random inputs are never zero and never all alike: floats are standard normal, integers in
  ``[-50, 50]`` without 0, bools random; the same ``seed`` gives the same values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

import pyfuse as pf
from pyfuse.ir.dtypes import DType
from pyfuse.ir.kernel_interpreter import launch
from pyfuse.ir.target import HOPPER, TargetInfo
from pyfuse.passes import pipeline
from pyfuse.passes.pipeline import PipelineResult
from pyfuse.passes.schedulers import scheduler_named
from pyfuse.testing.ptx_sim import run_kernel

Array = npt.NDArray[Any]

# What a padded input's unused elements hold: loud in every result they reach.
_INT_PADDING = -1_000_000


def poison(shape: Sequence[int], dtype: DType) -> Array:
    """A fresh array of ``shape`` whose every element says "nothing wrote me"."""
    if dtype.is_floating:
        return np.full(tuple(shape), np.nan).astype(dtype.numpy())
    return np.full(tuple(shape), -7, dtype=np.int64).astype(dtype.numpy())


def random_values(shape: Sequence[int], dtype: DType, rng: np.random.Generator) -> Array:
    """Row-major random values of ``shape``, never zero (a zero hides an unread operand)."""
    shape = tuple(shape)
    if dtype.is_bool:
        values: Array = rng.random(shape) > 0.5
    elif dtype.is_integer:
        magnitude = rng.integers(1, 51, shape)
        values = np.where(rng.random(shape) > 0.5, magnitude, -magnitude)
    else:
        values = rng.standard_normal(shape)
        # Standard normal rounds to 0 in no dtype, but a tiny value would in bf16 products.
        values = np.where(np.abs(values) < 1e-3, 1e-3, values)
    return np.asarray(values).astype(dtype.numpy())


def span_of(shape: Sequence[int], strides: Sequence[int]) -> int:
    """Elements from the first to the last one of a strided layout (0 when it is empty)."""
    if any(extent == 0 for extent in shape):
        return 0
    last = 0
    for extent, stride in zip(shape, strides, strict=True):
        last += (extent - 1) * stride
    return last + 1


def laid_out(values: Array, strides: Sequence[int]) -> Array:
    """``values`` as a view with element ``strides`` of a fresh, poisoned backing buffer.

    Along a stride-0 axis every element is one memory location: the values there are taken
    from index 0 of that axis (a broadcast input holds one value per location)."""
    strides = tuple(int(stride) for stride in strides)
    if len(strides) != values.ndim or any(stride < 0 for stride in strides):
        raise ValueError(f"strides {strides} do not lay out an array of shape {values.shape}")
    span = span_of(values.shape, strides)
    if values.dtype == np.bool_:
        backing = np.ones(max(span, 1), dtype=np.bool_)
    elif values.dtype.kind in "iu":
        # Wrapped into narrow types (-1000000 is 64 in int8, 192 in uint8, 6080 in int16).
        backing = np.full(max(span, 1), _INT_PADDING, dtype=np.int64).astype(values.dtype)
    else:
        backing = np.full(max(span, 1), np.nan).astype(values.dtype)
    itemsize = values.dtype.itemsize
    view = np.lib.stride_tricks.as_strided(
        backing, values.shape, tuple(stride * itemsize for stride in strides)
    )
    if values.size:
        broadcast_axes = tuple(
            axis for axis, stride in enumerate(strides) if stride == 0 and values.shape[axis] > 1
        )
        source = values
        if broadcast_axes:
            first = [slice(None)] * values.ndim
            for axis in broadcast_axes:
                first[axis] = slice(0, 1)
            index = tuple(first)
            source = np.broadcast_to(values[index], values.shape)
        # A stride-0 axis writes each location several times, always with the same value.
        view[...] = source
    return view


def random_inputs(specs: Sequence[pf.Spec], seed: int) -> list[Array]:
    """Random arrays for ``specs``, each laid out in memory as its spec says."""
    rng = np.random.default_rng(seed)
    arrays = []
    for spec in specs:
        values = random_values(spec.shape, spec.dtype, rng)
        arrays.append(in_spec_layout(values, spec))
    return arrays


def in_spec_layout(array: Array, spec: pf.Spec | None) -> Array:
    """``array`` laid out in memory as ``spec`` says (as it is when it already is)."""
    if spec is None:
        return np.require(array, requirements="C")  # keeps a 0-d array 0-d
    if array.itemsize and tuple(s // array.itemsize for s in array.strides) == spec.strides:
        return array
    if spec.is_contiguous:
        return np.require(array, requirements="C")  # keeps a 0-d array 0-d
    return laid_out(array, spec.strides)


def run_on_simulator(
    result: PipelineResult,
    arrays: Sequence[Array],
    output_specs: Sequence[tuple[tuple[int, ...], DType]],
    specs: Sequence[pf.Spec | None] | None = None,
    schedule_seed: int = 0,
    as_ptx: bool = False,
) -> list[Array]:
    """Run every kernel of ``result`` on the kernel-IR interpreter (a matmul kernel's PTX on
    the Hopper simulator, :mod:`pyfuse.testing.ptx_sim`, its warps interleaved by
    ``schedule_seed``; every kernel's PTX there with ``as_ptx``, which checks the emitter's
    instructions too) and return the outputs.

    ``arrays`` are the fusion's inputs; each is used as laid out, unless ``specs`` gives a
    layout it lacks (then a copy in that layout is)."""
    outputs = [poison(shape, dtype) for shape, dtype in output_specs]
    # Every intermediate is allocated up front, as the runtime's workspace is: one no kernel
    # writes (its kernel had no elements to write) is still read.
    intermediates: dict[str, Array] = {
        name: poison(tv.shape, tv.dtype) for name, tv in result.segmented.intermediates.items()
    }
    layouts = list(specs) if specs is not None else [None] * len(arrays)
    inputs_laid_out = [
        array if spec is None else in_spec_layout(array, spec)
        for array, spec in zip(arrays, layouts, strict=True)
    ]
    segmented = result.segmented
    for stages, sources, sinks in zip(
        result.kernels, segmented.sources, segmented.sinks, strict=True
    ):
        inputs = []
        for kind, key in sources:
            if kind == "input":
                inputs.append(inputs_laid_out[int(key)])
            elif kind == "output":
                inputs.append(outputs[int(key)])
            else:
                inputs.append(intermediates[str(key)])
        kernel_outputs = []
        for kind, key in sinks:
            if kind == "output":
                kernel_outputs.append(outputs[int(key)])
            else:
                kernel_outputs.append(intermediates[str(key)])
        if scheduler_named(stages.plan.scheduler).interpreted and not as_ptx:
            launch(stages.kernel_ir, inputs, kernel_outputs)
        else:
            # A tensor-core kernel runs as its PTX, on the Hopper simulator.
            ptx = stages.emitted.ptx if stages.emitted is not None else None
            if ptx is None:
                from pyfuse.backend_ptx.emit import emit_ptx

                ptx = emit_ptx(stages.kernel_ir, HOPPER)
            run_kernel(stages.kernel_ir, ptx, inputs, kernel_outputs, seed=schedule_seed)
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
    """Compile ``fn`` for ``specs`` and ``target``, run it on the simulator and assert that it
    matches the reference within ``rtol``/``atol``."""
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
