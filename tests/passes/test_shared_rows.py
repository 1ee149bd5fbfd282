"""shared_rows.py: a persistent row too wide for a 1024-thread block's registers keeps its
kept tensors in shared memory, the last kept first, as many as fit; other rows are as
before. (test_correct_lowering's wide_* cases assemble them without spills and check their
values on the interpreter.)"""

from __future__ import annotations

from collections.abc import Callable

import pyfuse as pf
from pyfuse.ir.exprs import BinaryOp, LoadStoreOp
from pyfuse.ir.target import HOPPER
from pyfuse.ir.tensor import MemoryType, TensorView
from pyfuse.passes import pipeline
from pyfuse.passes.shared_rows import MAX_RECOMPUTED_EXPRS, RESERVED_BYTES, kept_tensors


def _rms_norm_plan(shape: tuple[int, int], dtype: pf.DType) -> pipeline.KernelStages:
    weight = pf.spec(shape[-1:], dtype)
    return _plan(lambda x, w: pf.rms_norm(x, w), pf.spec(shape, dtype), weight)


def _plan(fn: Callable[..., object], *specs: pf.Spec) -> pipeline.KernelStages:
    (stages,) = pipeline.run(pf.fuse(fn).trace(*specs), HOPPER).kernels
    return stages


def _shared(stages: pipeline.KernelStages) -> list[TensorView]:
    return [tv for tv in stages.plan.fusion.tensors() if tv.memory_type == MemoryType.SHARED]


def test_rows_that_fit_the_registers_stay_there() -> None:
    # 32768 in vectors of 8: 32 a thread at 1024 threads, which assemble without spills.
    stages = _plan(lambda x: pf.softmax(x, -1), pf.spec((4, 32768), pf.float16))
    assert stages.plan.params["threads"] == 1024 and "shared_rows" not in stages.plan.params
    assert _shared(stages) == []


def test_a_wider_row_keeps_its_16_bit_input_in_shared_memory() -> None:
    """rms_norm keeps x's f32 cast across its sum; the cast is recomputed after the sum from
    the f16 input instead, which the row keeps (half the bytes)."""
    stages = _rms_norm_plan((4, 49152), pf.float16)
    params = stages.plan.params
    assert params["shared_rows"] == 1
    ((kept),) = _shared(stages)
    assert kept.dtype == pf.float16 and _is_a_copy_of_a_load(stages, kept)
    per_thread = params["serial"] * params["vector_width"]
    assert stages.kernel_ir.smem_bytes >= 1024 * per_thread * 2


def test_a_ragged_row_moves_earlier() -> None:
    """25000 columns: 32 a thread in vectors of 8, but the last vectors are guarded (the
    guards take registers: 12 B spilled)."""
    assert _rms_norm_plan((4, 25000), pf.float16).plan.params["shared_rows"] == 1


def _is_a_copy_of_a_load(stages: pipeline.KernelStages, kept: TensorView) -> bool:
    """``kept`` copies a register cache of a global input (global vector loads fill
    registers; the copy puts the row in shared memory)."""
    definition = kept.definition
    if not isinstance(definition, LoadStoreOp):
        return False
    (source,) = definition.tensor_inputs
    loaded = source.definition
    return (
        source.memory_type == MemoryType.LOCAL
        and isinstance(loaded, LoadStoreOp)
        and stages.plan.fusion.is_input(loaded.tensor_inputs[0])
    )


def test_an_input_read_as_is_goes_to_shared_memory_through_a_copy() -> None:
    stages = _rms_norm_plan((4, 44444), pf.float32)
    ((kept),) = _shared(stages)
    assert _is_a_copy_of_a_load(stages, kept)
    assert kept_tensors(stages.plan.fusion) == [kept]


def test_layer_norm_keeps_its_input_and_recomputes_x_minus_mean() -> None:
    """layer_norm keeps x for the mean and x - mean for the variance: 2 x 192 KB at 49152
    f32 columns, more than a block's 227. Recomputed from x where they are read after their
    reductions (the cast and the subtraction, again), the row keeps x alone."""
    specs = [pf.spec((4, 49152), pf.float32)] + [pf.spec((49152,), pf.float32)] * 2
    stages = _plan(lambda x, w, b: pf.layer_norm(x, w, b), *specs)
    fusion = stages.plan.fusion
    ((kept),) = _shared(stages)
    assert _is_a_copy_of_a_load(stages, kept) and kept_tensors(fusion) == [kept]
    subtractions = [e for e in fusion.exprs() if isinstance(e, BinaryOp) and e.op.value == "sub"]
    assert len(subtractions) == 2  # x - mean for the variance, and again for the output
    assert stages.kernel_ir.smem_bytes <= HOPPER.max_smem_per_block - RESERVED_BYTES


def test_without_a_projection_the_last_kept_tensor_goes_first_and_only_what_fits() -> None:
    """A kept value more than MAX_RECOMPUTED_EXPRS pointwise exprs from the input is not
    recomputed: layer_norm of it keeps it and its y - mean, 192 KB each, and only the
    later (live beside the epilogue's weight and bias loads) moves."""

    def long_chain_then_norm(x: pf.Tensor, w: pf.Tensor) -> pf.Tensor:
        y = x
        for step in range(MAX_RECOMPUTED_EXPRS + 1):
            y = y * 1.01 + step
        return pf.layer_norm(y, w)

    specs = [pf.spec((4, 49152), pf.float32), pf.spec((49152,), pf.float32)]
    stages = _plan(long_chain_then_norm, *specs)
    kept = kept_tensors(stages.plan.fusion)
    assert len(kept) == 2 and stages.plan.params["shared_rows"] == 1
    assert kept[0].memory_type == MemoryType.LOCAL and kept[1].memory_type == MemoryType.SHARED


def test_a_block_of_fewer_threads_keeps_its_registers() -> None:
    # A row holding two tensors takes at most 512 threads, with 128 registers each.
    specs = [pf.spec((4, 16384), pf.bfloat16)] * 2 + [pf.spec((16384,), pf.bfloat16)]
    stages = _plan(lambda x, r, w: pf.layer_norm(x + r, w), *specs)
    assert stages.plan.params["threads"] < 1024 and _shared(stages) == []
