"""Lowering end to end on the CPU: scheduled kernels run on the SIMT kernel-IR interpreter
and must match the NumPy reference, for pointwise, reduction and normalization kernels at
ragged shapes. Out-of-bounds accesses, races and divergent barriers raise in the
interpreter, so these tests also check predication and synchronization."""

from __future__ import annotations

import pytest
from sim_utils import check_fusion

import pyfuse as pf

f32, bf16, f16, i32 = pf.float32, pf.bfloat16, pf.float16, pf.int32


@pytest.mark.parametrize("shape", [(1,), (7,), (37, 100), (3, 129), (2, 3, 40)])
def test_pointwise_with_broadcast(shape: tuple[int, ...]) -> None:
    last = shape[-1:]
    result = check_fusion(
        lambda x, y, z: pf.gelu(x * y + z).to(pf.bfloat16),
        [pf.spec(shape, f32), pf.spec(last, f32), pf.spec(shape, f32)],
        atol=1e-2,
        rtol=1e-2,
    )
    assert [k.plan.scheduler for k in result.kernels] == ["pointwise"]


def test_pointwise_vectorizes_when_rows_allow() -> None:
    result = check_fusion(lambda x: pf.exp(x), [pf.spec((6, 64), f32)])
    assert result.kernels[0].plan.params["vector_width"] == 4
    # A dense tensor's vectors may cross its odd rows: 378 elements in pairs.
    dense = check_fusion(lambda x: pf.exp(x), [pf.spec((6, 63), f32)])
    assert dense.kernels[0].plan.params["vector_width"] == 2
    # Padded rows (63 of 64) are not consecutive: one element per access.
    padded = check_fusion(lambda x: pf.exp(x), [pf.spec((6, 63), f32, strides=(64, 1))])
    assert padded.kernels[0].plan.params["vector_width"] == 1


def test_transposed_and_strided_inputs() -> None:
    check_fusion(lambda x: x.T + 1.0, [pf.spec((9, 37), f32)])
    check_fusion(lambda x, y: x + y, [pf.spec((9, 37), f32), pf.spec((9, 37), f32)])


def test_int_and_bool_pointwise() -> None:
    check_fusion(
        lambda x, y: pf.where(x > y, x * 2, y - 1), [pf.spec((5, 33), i32), pf.spec((5, 33), i32)]
    )
    check_fusion(lambda x: (x > 0.5).to(pf.float32) + x, [pf.spec((7, 9), f32)])


@pytest.mark.parametrize("shape", [(5, 1000), (3, 7), (2, 4096), (4, 33)])
@pytest.mark.parametrize("dtype", [f32, bf16])
def test_softmax(shape: tuple[int, int], dtype: pf.DType) -> None:
    tolerance = 1e-2 if dtype == bf16 else 1e-5
    result = check_fusion(
        lambda x: pf.softmax(x, -1), [pf.spec(shape, dtype)], rtol=tolerance, atol=tolerance
    )
    assert [k.plan.scheduler for k in result.kernels] == ["reduction"]
    assert result.kernels[0].plan.params["persistent"] is True


def test_layer_norm_and_rms_norm() -> None:
    check_fusion(
        lambda x, w, b: pf.layer_norm(x, w, b),
        [pf.spec((6, 256), bf16), pf.spec((256,), bf16), pf.spec((256,), bf16)],
        rtol=2e-2,
        atol=2e-2,
    )
    check_fusion(
        lambda x, w: pf.rms_norm(x, w),
        [pf.spec((6, 4096), bf16), pf.spec((4096,), bf16)],
        rtol=2e-2,
        atol=2e-2,
    )
    check_fusion(
        lambda x: pf.layer_norm(x, eps=1e-3), [pf.spec((3, 37), f32)], rtol=1e-4, atol=1e-4
    )


@pytest.mark.parametrize(
    ("fn", "shape"),
    [
        (lambda x: x.sum(-1), (3, 5000)),
        (lambda x: x.sum(0), (100, 37)),
        (lambda x: x.amax(-1), (7, 300)),
        (lambda x: x.amin(0), (33, 5)),
        (lambda x: x.sum(), (1000,)),
        (lambda x: x.mean((0, 2)), (4, 3, 10)),
    ],
)
def test_reductions(fn, shape) -> None:  # type: ignore[no-untyped-def]
    check_fusion(fn, [pf.spec(shape, f32)], rtol=1e-4, atol=1e-4)


def test_reductions_over_different_axes_segment() -> None:
    result = check_fusion(lambda x: (x.sum(0), x.amax(1), pf.exp(x)), [pf.spec((9, 37), f32)])
    assert len(result.kernels) == 2
    assert all(k.plan.scheduler == "reduction" for k in result.kernels)


def test_outputs_of_different_sizes_segment() -> None:
    result = check_fusion(lambda x, b: (x + b, b * 2), [pf.spec((5, 8), f32), pf.spec((8,), f32)])
    assert len(result.kernels) == 2


def test_chain_through_intermediate() -> None:
    # The row sums of one reduction feed a second reduction over the other axis.
    result = check_fusion(
        lambda x: x.sum(1).amax(0), [pf.spec((17, 40), f32)], rtol=1e-4, atol=1e-4
    )
    assert len(result.kernels) == 2


def test_permuted_and_broadcast_inputs_are_read_in_place() -> None:
    result = check_fusion(
        lambda x, b: pf.exp(x.T) + b.unsqueeze(0), [pf.spec((9, 37), f32), pf.spec((9,), f32)]
    )
    fusion = result.kernels[0].plan.fusion
    aliases = [tv for tv in fusion.tensors() if tv.alias_of is not None]
    assert len(aliases) == 2  # the permute of x and the unsqueeze of b


def test_strided_input_honoured() -> None:
    # A [M, K] stored column-major: strides (1, M).
    check_fusion(lambda a: pf.exp(a) * 2.0, [pf.spec((9, 37), f32, strides=(1, 9))])


def test_fp32_matmul_and_linear_run_as_reductions() -> None:
    # fp32 operands stay fp32-accurate: decomposed into multiply + sum (no tf32).
    result = check_fusion(
        lambda a, b: a @ b, [pf.spec((7, 13), f32), pf.spec((13, 5), f32)], rtol=1e-5, atol=1e-5
    )
    assert [k.plan.scheduler for k in result.kernels] == ["reduction"]
    check_fusion(
        lambda x, w, b: pf.relu(pf.linear(x, w, b)),
        [pf.spec((3, 9), f32), pf.spec((4, 9), f32), pf.spec((4,), f32)],
    )
    check_fusion(lambda a, b: a @ b, [pf.spec((13,), f32), pf.spec((13, 5), f32)])
    check_fusion(lambda a, b: pf.matmul(a, pf.sin(b)), [pf.spec((6, 8), f32), pf.spec((8, 3), f32)])


def test_column_major_softmax() -> None:
    # Two kernels (the reduction runs over the strided axis); the second reads the row max
    # through a broadcast axis that every thread must load.
    check_fusion(lambda x: pf.softmax(x, -1), [pf.spec((3, 100), f32, strides=(1, 3))])


@pytest.mark.parametrize(
    ("fn", "shape", "kernels"),
    [
        (lambda x: x.sum(), (65536,), 2),
        (lambda x: x.sum(-1), (3, 40000), 2),
        (lambda x: x.amax(0), (50000, 3), 2),
        (lambda x: x.sum(-1), (300, 40000), 1),  # enough rows: one kernel
        (lambda x: pf.softmax(x, -1), (2, 16384), 1),  # a normalization stays persistent
        (lambda x: x.sum((0, 2, 3)), (16, 1, 32, 32), 2),  # a kept axis of 1 orders nothing
        (lambda x: x.amax(1), (3, 9000, 1), 2),  # ... nor does a trailing one
    ],
)
def test_long_reductions_over_few_rows_split_across_blocks(fn, shape, kernels) -> None:  # type: ignore[no-untyped-def]
    result = check_fusion(fn, [pf.spec(shape, f32)], rtol=1e-4, atol=1e-3)
    assert len(result.kernels) == kernels
    if kernels == 2:
        first = result.kernels[0].kernel_ir
        assert first.grid[0] * first.block[0] >= 1024  # the first pass spreads over the GPU


def test_view_of_a_strided_input_reads_in_place() -> None:
    # The permute is an alias of a column-major input: its memory axes pair with the input's
    # strides in memory order.
    result = check_fusion(lambda a: pf.exp(a.T) + 1.0, [pf.spec((9, 37), f32, strides=(1, 9))])
    fusion = result.kernels[0].plan.fusion
    assert any(tv.alias_of is not None for tv in fusion.tensors())


def test_lowering_reuses_the_model_validation_built_and_a_fresh_one_agrees(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pyfuse.backend_ptx.emit import emit_ptx
    from pyfuse.ir.target import HOPPER
    from pyfuse.passes import lower as lower_module
    from pyfuse.passes import pipeline, schedulers

    specs = [pf.spec((96, 130), pf.float32), pf.spec((130,), pf.float32)]

    def kernels_ptx() -> list[str]:
        fusion = pf.fuse(lambda x, b: pf.softmax(x + b, -1), name="shared").trace(*specs)
        return [emit_ptx(s.kernel_ir, HOPPER) for s in pipeline.run(fusion, HOPPER).kernels]

    def no_new_model(*_: object) -> None:
        raise AssertionError("lowering built an IdModel of its own")

    with monkeypatch.context() as patched:
        patched.setattr(lower_module, "IdModel", no_new_model)
        shared = kernels_ptx()  # lowering takes validate's model from the plan

    real_lower = lower_module.lower

    def lower_fresh(plan: object, name: str, id_model: object = None) -> object:
        return real_lower(plan, name)  # type: ignore[arg-type]

    monkeypatch.setattr(schedulers, "lower", lower_fresh)
    assert kernels_ptx() == shared  # a model of its own gives the same kernels


def test_a_side_output_of_a_row_is_computed_before_the_reduction() -> None:
    # tril(x) needs no reduction's result: lowered after amax, it held the row's 37
    # elements a thread across the reduction and spilled 76 B (CPU fuzzer, seed 1421).
    from check_utils import require_ptxas

    from pyfuse.backend_ptx.emit import emit_ptx
    from pyfuse.backend_ptx.ptxas import assemble
    from pyfuse.ir import kernel_ir as k
    from pyfuse.ir.target import HOPPER

    def fn(x):  # type: ignore[no-untyped-def]
        e = x.expm1()
        m = pf.amax(e, None)
        return e - m, pf.log(m), pf.tril(x, -1)

    result = check_fusion(fn, [pf.spec((37, 1024, 1), bf16)], atol=1e-2, rtol=1e-2)
    (stage,) = result.kernels
    outputs = [p for p in stage.kernel_ir.params if p.role == k.ParamRole.OUTPUT]
    tril = next(p.buffer_name for p in outputs if p.index == 2)
    body = list(k.walk(stage.kernel_ir.body))
    tril_store = next(
        i for i, s in enumerate(body) if isinstance(s, k.Store) and s.buffer.name == tril
    )
    reduce_at = next(i for i, s in enumerate(body) if isinstance(s, k.ThreadReduce))
    assert tril_store < reduce_at
    require_ptxas()
    resources = assemble(emit_ptx(stage.kernel_ir, HOPPER)).kernels[stage.kernel_ir.name]
    assert resources.spill_store_bytes == 0 and resources.local_bytes == 0


def test_side_branches_leave_what_the_reduction_s_consumers_read_in_place() -> None:
    from pyfuse.passes.lower_order import side_branches

    def fn(x, w):  # type: ignore[no-untyped-def]
        normed = x - pf.amax(x, -1, keepdim=True)
        return normed * w.float(), pf.tril(x, -1)

    fusion = pf.fuse(fn).trace(pf.spec((8, 32), f32), pf.spec((32,), bf16))
    exprs = fusion.exprs()
    side = side_branches(exprs)
    names = {expr.op_name for expr in exprs if id(expr) in side}
    # tril's exprs (an iota mask and a select) are side branches; the weight's cast feeds the
    # product after the reduction and keeps its place.
    assert names == {"iota", "sub", "le", "where"}
    assert side_branches(pf.fuse(lambda x: x + 1).trace(pf.spec((4,), f32)).exprs()) == set()


def test_an_input_read_only_after_the_reductions_is_loaded_after_them() -> None:
    # A float64 input read twice after a logsumexp of all 15810 elements was copied into
    # registers at the kernel's start: 31 float64 a thread held across both reductions
    # beside the row's own two arrays, 8 B spilled at 512 threads (CPU fuzzer, seed 1443).
    from check_utils import require_ptxas

    from pyfuse.backend_ptx.emit import emit_ptx
    from pyfuse.backend_ptx.ptxas import assemble_least_spilling
    from pyfuse.ir import kernel_ir as k
    from pyfuse.ir.target import HOPPER

    def fn(x, y):  # type: ignore[no-untyped-def]
        lse = pf.logsumexp(pf.cast(x, pf.float32), (0, 1, 2, 3), keepdim=True)
        return y + pf.maximum(lse, x), pf.unsqueeze(y == lse, 3)

    specs = [
        pf.spec((31, 6, 17, 5), pf.uint8, strides=(1836, 306, 18, 1)),
        pf.spec((31, 6, 17, 5), pf.float64),
    ]
    result = check_fusion(fn, specs)
    (stage,) = result.kernels
    y = [p.buffer_name for p in stage.kernel_ir.params if p.role == k.ParamRole.INPUT][1]
    body = list(k.walk(stage.kernel_ir.body))
    y_read = next(
        i
        for i, s in enumerate(body)
        if isinstance(s, k.Store) and isinstance(s.value, k.Load) and s.value.buffer.name == y
    )
    last_reduce = max(i for i, s in enumerate(body) if isinstance(s, k.ThreadReduce))
    assert y_read > last_reduce
    require_ptxas()
    # The build the runtime keeps: since the emitter drops the guards an unrolled copy cannot
    # fail, ptxas's default build hoists more of this row's 31 loads and spills 148 B; its
    # full-register-budget rebuild (108 registers) does not.
    ptx = emit_ptx(stage.kernel_ir, HOPPER)
    resources = assemble_least_spilling(ptx).kernels[stage.kernel_ir.name]
    assert resources.spill_store_bytes == 0 and resources.local_bytes == 0


def test_only_what_the_exprs_after_the_reductions_read_is_deferred() -> None:
    from pyfuse.ir.exprs import BroadcastOp, ReductionOp
    from pyfuse.passes.lower_order import only_after_reductions

    fusion = pf.fuse(lambda x, w: pf.rms_norm(x, w)).trace(
        pf.spec((4, 64), f32), pf.spec((64,), f32)
    )
    exprs = fusion.exprs()
    deferred = [e for e in exprs if id(e) in only_after_reductions(exprs)]
    # The weight's broadcast waits for the normalized row; what feeds the sum of squares
    # (the row's square) and the sum itself do not.
    assert any(isinstance(e, BroadcastOp) and fusion.is_input(e.tensor_inputs[0]) for e in deferred)
    for expr in deferred:
        assert not isinstance(expr, ReductionOp)
        assert not any(isinstance(use, ReductionOp) for use in fusion.uses_in_fusion(expr.output))


def test_axes_merged_into_a_row_are_indexed_as_one() -> None:
    # A contiguous [10, 61, 61] tensor reduced whole: its row is the merge of three axes,
    # and every global index folds back to the merged one (no division or remainder an
    # element; with them this row spilled 844 B at 1024 threads). Where strides do not nest
    # (a padded row) the division stays.
    from pyfuse.ir.kernel_printer import kernel_to_str

    def fn(x):  # type: ignore[no-untyped-def]
        v = pf.var(x, None, correction=1)
        return v * (x - v)

    def divisions(result) -> int:  # type: ignore[no-untyped-def]
        text = "".join(kernel_to_str(stage.kernel_ir) for stage in result.kernels)
        return text.count("//") + text.count(" % ")

    contiguous = check_fusion(fn, [pf.spec((10, 61, 61), pf.float32)], rtol=1e-4, atol=1e-4)
    assert divisions(contiguous) == 0
    padded = pf.spec((10, 61, 61), pf.float32, strides=(3782, 62, 1))
    assert divisions(check_fusion(fn, [padded], rtol=1e-4, atol=1e-4)) > 0
