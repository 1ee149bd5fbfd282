"""shared_rows.py: a persistent row too wide for a 1024-thread block's registers keeps its
kept tensors in shared memory, the last kept first, as many as fit; other rows are as
before. (test_correct_lowering's wide_* cases assemble them without spills and check their
values on the interpreter.)"""

from __future__ import annotations

from collections.abc import Callable

import pyfuse as pf
from pyfuse.ir.exprs import LoadStoreOp
from pyfuse.ir.target import HOPPER
from pyfuse.ir.tensor import MemoryType, TensorView
from pyfuse.passes import pipeline
from pyfuse.passes.shared_rows import RESERVED_BYTES, kept_tensors


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


def test_a_wider_row_keeps_its_tensor_in_shared_memory() -> None:
    stages = _rms_norm_plan((4, 49152), pf.float16)
    params = stages.plan.params
    assert params["shared_rows"] == 1
    ((kept),) = _shared(stages)
    assert kept.dtype == pf.float32  # the f32 cast the row is normalized in
    per_thread = params["serial"] * params["vector_width"]
    assert stages.kernel_ir.smem_bytes >= 1024 * per_thread * 4


def test_a_ragged_row_moves_earlier() -> None:
    """25000 columns: 32 a thread in vectors of 8, but the last vectors are guarded (the
    guards take registers: 12 B spilled)."""
    stages = _rms_norm_plan((4, 25000), pf.float16)
    assert stages.plan.params["shared_rows"] == 1


def test_an_input_read_as_is_goes_to_shared_memory_through_a_copy() -> None:
    """An f32 row is kept as its own input cache, which global vector loads fill in
    registers: a copy of that cache in shared memory becomes the kept tensor."""
    stages = _rms_norm_plan((4, 44444), pf.float32)
    fusion = stages.plan.fusion
    ((kept),) = _shared(stages)
    definition = kept.definition
    assert isinstance(definition, LoadStoreOp)
    (source,) = definition.tensor_inputs
    assert source.memory_type == MemoryType.LOCAL and not fusion.is_input(source)
    assert kept_tensors(fusion) == [kept]


def test_the_last_kept_tensor_goes_first_and_only_what_fits() -> None:
    """layer_norm keeps x for the mean and x - mean for the variance: at 49152 f32 columns
    each takes 192 KB of a block's 227, so only x - mean (live beside the weight and bias
    loads of the epilogue) moves."""
    specs = [pf.spec((4, 49152), pf.float32)] + [pf.spec((49152,), pf.float32)] * 2
    stages = _plan(lambda x, w, b: pf.layer_norm(x, w, b), *specs)
    fusion = stages.plan.fusion
    kept = kept_tensors(fusion)
    assert len(kept) == 2 and stages.plan.params["shared_rows"] == 1
    assert kept[0].memory_type == MemoryType.LOCAL and kept[1].memory_type == MemoryType.SHARED
    assert stages.kernel_ir.smem_bytes <= HOPPER.max_smem_per_block
    assert stages.kernel_ir.smem_bytes + RESERVED_BYTES > 1024 * 48 * 4


def test_a_block_of_fewer_threads_keeps_its_registers() -> None:
    # A row holding two tensors takes at most 512 threads, with 128 registers each.
    specs = [pf.spec((4, 16384), pf.bfloat16)] * 2 + [pf.spec((16384,), pf.bfloat16)]
    stages = _plan(lambda x, r, w: pf.layer_norm(x + r, w), *specs)
    assert stages.plan.params["threads"] < 1024 and _shared(stages) == []
