"""reread_rows: a normalization whose rows exceed the registers, over enough rows to fill the
GPU, runs as one kernel, one block per row, with a streaming loop nest per reduction and
output that reads the row again (no kernel boundary, no row-sized tensor across nests).

The CPU cases run on a target of one SM, where 2 rows are enough (REREAD_MIN_ROWS_PER_SM);
the GPU runs the same kernels at full size (tests/lowering_cases.py's GPU_ONLY_CASES)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from check_utils import require_ptxas
from sim_utils import check_fusion

import pyfuse as pf
from pyfuse.backend_ptx.emit import emit_ptx
from pyfuse.backend_ptx.ptxas import assemble_least_spilling
from pyfuse.errors import ScheduleError
from pyfuse.ir import kernel_ir as k
from pyfuse.ir.exprs import LoadStoreOp, ReductionOp
from pyfuse.ir.target import HOPPER
from pyfuse.ir.tensor import MemoryType
from pyfuse.passes import pipeline
from pyfuse.passes.register_budget import check_register_arrays
from pyfuse.passes.reread_rows import nest_cones, reason_not_split, split_nests
from pyfuse.passes.schedule_reduction import REREAD_MIN_ROWS_PER_SM

f32, bf16, f64 = pf.float32, pf.bfloat16, pf.float64
ONE_SM = dataclasses.replace(HOPPER, sm_count=1)
WIDE = 50257  # a GPT-2 vocabulary: past 1024 threads x 48 elements


def _layer_norm_residual(x: Any, r: Any, w: Any, b: Any) -> tuple[Any, Any]:
    h = x + r
    return pf.layer_norm(h, w, b), h


CASES: dict[str, tuple[Callable[..., Any], list[pf.Spec], float]] = {
    "log_softmax_bf16": (lambda x: pf.log_softmax(x, -1), [pf.spec((3, WIDE), bf16)], 2e-2),
    "softmax_f32": (lambda x: pf.softmax(x, -1), [pf.spec((2, 50001), f32)], 1e-5),
    "softmax_and_its_input_scaled": (
        lambda x: (pf.softmax(x, -1), x.float() * 2),
        [pf.spec((2, 50001), bf16)],
        2e-2,
    ),
    "softmax_and_log_softmax": (
        lambda x: (pf.softmax(x, -1), pf.log_softmax(x, -1)),
        [pf.spec((2, 50001), bf16)],
        2e-2,
    ),
    "layer_norm_of_a_residual_returned": (
        _layer_norm_residual,
        [pf.spec((2, 33000), bf16)] * 2 + [pf.spec((33000,), bf16)] * 2,
        3e-2,
    ),
    "rms_norm_of_a_residual": (
        lambda x, r: pf.rms_norm(x + r),
        [pf.spec((2, 30000), bf16)] * 2,
        2e-2,
    ),
    "variance_by_two_means": (
        lambda x: (x - x.mean(-1, keepdim=True)) / ((x * x).mean(-1, keepdim=True) + 1),
        [pf.spec((3, 60000), f32)],
        1e-4,
    ),
    "f64_softmax": (lambda x: pf.softmax(x, -1), [pf.spec((2, 30001), f64)], 1e-9),
    # A slice of the input is read in place by every nest (an alias of the input).
    "softmax_of_a_slice": (lambda x: pf.softmax(x[:, 1:], -1), [pf.spec((3, 50002), bf16)], 2e-2),
    "returns_its_row_statistics": (
        lambda x: (pf.log_softmax(x, -1), x.amax(-1), x.exp().sum(-1, keepdim=True)),
        [pf.spec((3, 50001), f32)],
        1e-4,
    ),
    "per_row_scale_input": (
        lambda x, s: pf.softmax(x * s, -1) + s,
        [pf.spec((3, 50001), bf16), pf.spec((3, 1), f32)],
        2e-2,
    ),
    "rows_of_a_3d_tensor": (lambda x: pf.log_softmax(x, -1), [pf.spec((2, 2, 50001), bf16)], 2e-2),
    "log_softmax_of_reshaped_logits": (
        lambda x: pf.log_softmax(pf.reshape(x, (4, 50001)), -1),
        [pf.spec((2, 2, 50001), bf16)],
        2e-2,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_wide_rows_run_as_one_kernel_reading_the_row_per_nest(name: str) -> None:
    fn, specs, tolerance = CASES[name]
    result = check_fusion(fn, specs, rtol=tolerance, atol=tolerance, target=ONE_SM)
    assert len(result.kernels) == 1, name
    params = result.kernels[0].plan.params
    assert params.get("reread") is True and not params["persistent"], params
    assert "fallback" not in params, params


@pytest.mark.parametrize("name", ["log_softmax_bf16", "layer_norm_of_a_residual_returned"])
def test_reread_kernels_assemble_without_spills(name: str) -> None:
    require_ptxas()
    fn, specs, _ = CASES[name]
    result = pipeline.run(pf.fuse(fn).trace(*specs), ONE_SM)
    for stages in result.kernels:
        problems = assemble_least_spilling(emit_ptx(stages.kernel_ir, ONE_SM)).problems()
        assert not problems, problems


def test_each_nest_reads_the_row_through_a_cache_of_its_own() -> None:
    """log_softmax: the max, the sum and the output each load the row once, in loops of
    their own; only the per-row max and sum pass between them."""
    fusion = pf.fuse(lambda x: pf.log_softmax(x, -1)).trace(pf.spec((3, WIDE), f32))
    (source,) = fusion.inputs
    split_nests(fusion)
    caches = [use.output for use in fusion.uses_in_fusion(source)]
    assert all(isinstance(use, LoadStoreOp) for use in fusion.uses_in_fusion(source))
    assert len(caches) == 3
    for cache in caches:
        assert len(fusion.uses_in_fusion(cache)) == 1
    # No computed row-sized tensor is read by exprs of two nests: each has one reader, or
    # is a reduction's result (one value per row).
    for tv in fusion.tensors():
        if tv.definition is None or isinstance(tv.definition, ReductionOp):
            continue
        if tv.shape[-1] == WIDE:
            assert len(fusion.uses_in_fusion(tv)) <= 1, f"T{tv.name}"


def test_nest_cones_count_each_nests_arrays_once() -> None:
    fusion = pf.fuse(lambda x: pf.log_softmax(x, -1)).trace(pf.spec((3, WIDE), f32))
    cones = nest_cones(fusion)
    assert len(cones) == 3  # the output, the max, the sum
    for cone in cones:
        assert all(tv.shape[-1] == WIDE for tv in cone)


def test_few_rows_keep_the_kernels_that_spread_over_the_gpu() -> None:
    """On 132 SMs, 3 rows would leave most of them idle: segment_recompute's kernels run
    instead, their reductions split across blocks."""
    assert REREAD_MIN_ROWS_PER_SM * HOPPER.sm_count > 3
    fusion = pf.fuse(lambda x: pf.log_softmax(x, -1)).trace(pf.spec((3, WIDE), f32))
    result = pipeline.run(fusion, HOPPER)
    assert len(result.kernels) == 3
    assert not any(stages.plan.params.get("reread") for stages in result.kernels)


def test_rows_that_fit_stay_persistent() -> None:
    fusion = pf.fuse(lambda x: pf.softmax(x, -1)).trace(pf.spec((4, 4096), f32))
    (stages,) = pipeline.run(fusion, ONE_SM).kernels
    assert stages.plan.params["persistent"] and not stages.plan.params.get("reread")


def test_a_transposed_row_is_not_read_a_strided_element_at_a_time() -> None:
    """Rows of x.T run across memory: a block per row would read one element per row of x.
    The transpose is no view every nest can read in place, so other plans take it."""
    fusion = pf.fuse(lambda x: pf.log_softmax(x.T, -1)).trace(pf.spec((50001, 3), f32))
    assert "permute" in (reason_not_split(fusion) or "")


def test_an_expr_that_cannot_be_cloned_is_named() -> None:
    fusion = pf.fuse(lambda x: pf.softmax(x, -1)).trace(pf.spec((4, 64), f32))
    assert reason_not_split(fusion) is None
    fusion = pf.fuse(lambda x: pf.softmax(pf.reshape(x * 2, (4, 64)), -1)).trace(
        pf.spec((256,), f32)
    )
    assert "reshape" in (reason_not_split(fusion) or "")
    with pytest.raises(ValueError, match="cannot read the row again"):
        split_nests(fusion)


def _buffer(name: str, size: int) -> k.Buffer:
    return k.Buffer(name, f32, MemoryType.LOCAL, size)


def test_each_loop_nests_arrays_are_budgeted_apart() -> None:
    """Two nests of 30 f32 words each fit a 1024-thread budget of 40 apart, not together."""
    buffers = {name: _buffer(name, 30) for name in ("a", "b")}
    body: list[k.Stmt] = [
        k.For(k.Var("i", pf.int32), k.Const(4, pf.int32), [k.Alloc(buffers["a"])]),
        k.For(k.Var("j", pf.int32), k.Const(4, pf.int32), [k.Alloc(buffers["b"])]),
    ]
    kernel = k.Kernel("nests", [], buffers, body, grid=(1, 1, 1), block=(1024, 1, 1))
    check_register_arrays(kernel, {"kind": "inner", "persistent": False, "reread": True})
    with pytest.raises(ScheduleError, match="60 registers"):
        check_register_arrays(kernel, {"kind": "inner", "persistent": False})


# Fuzzer programs (pyfuse.testing.generate, seed 3002) whose normalizations read the row
# again when every persistent row is past its budget on a target of one SM: the stress run
# that checked this plan on 4,000 programs (tools/stress_reread.py; 202 took it, all right)
# keeps these in CI.
STRESS_SEED = 3002
STRESS_CASES = [11, 25, 26, 33, 85, 115, 126, 170, 179, 187, 224, 229, 230, 238, 240, 281]


@pytest.mark.parametrize("index", STRESS_CASES)
def test_fuzzer_programs_read_again_run_right(index: int, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyfuse.ir.target as target_module
    from pyfuse.passes import row_registers
    from pyfuse.testing.generate import generate
    from pyfuse.testing.run import run_program

    monkeypatch.setattr(target_module, "HOPPER", ONE_SM)
    monkeypatch.setattr(row_registers, "persistent_budget", lambda *args, **kwargs: 0)
    took: list[bool] = []
    run = pipeline.run

    def watched(*args: Any, **kwargs: Any) -> pipeline.PipelineResult:
        result = run(*args, **kwargs)
        took.append(any(stages.plan.params.get("reread") for stages in result.kernels))
        return result

    monkeypatch.setattr(pipeline, "run", watched)
    outcome = run_program(generate(STRESS_SEED, index), index)
    assert outcome.cls == "ok", outcome
    assert any(took), "the program no longer takes the plan: pick others"


def test_an_output_read_by_a_later_output_is_computed_by_each() -> None:
    """``y`` is an output and ``y * 2`` another: each output's nest computes its own, the
    producer's nest keeping the original, whatever order the outputs are listed in."""

    def fn(x: Any) -> tuple[Any, Any, Any]:
        y = x.float().exp()
        return pf.softmax(x, -1), y * 2, y

    fusion = pf.fuse(fn).trace(pf.spec((3, WIDE), bf16))
    fusion.outputs.reverse()  # y before y * 2 no more
    split_nests(fusion)
    names = [tv.name for tv in fusion.tensors()]
    assert len(names) == len(set(names))  # clones are named by the fusion
    computed = [t for t in fusion.tensors() if t.definition is not None]
    for tv in computed:
        if not isinstance(tv.definition, ReductionOp) and tv.shape[-1] == WIDE:
            assert len(fusion.uses_in_fusion(tv)) <= 1, f"T{tv.name}"
    check_fusion(fn, [pf.spec((3, WIDE), bf16)], rtol=2e-2, atol=2e-2, target=ONE_SM)


def test_a_computed_row_before_its_broadcast_is_not_read_again() -> None:
    """A mask from arange, computed along the row before its broadcast, would be computed
    whole into one thread's array in every nest: another plan takes it, right."""

    def fn(x: Any) -> Any:
        return pf.softmax(pf.where(pf.arange(50001) < 40000, x.float(), -1e30), -1)

    fusion = pf.fuse(fn).trace(pf.spec((2, 50001), bf16))
    assert "before its broadcast" in (reason_not_split(fusion) or "")
    check_fusion(fn, [pf.spec((2, 50001), bf16)], rtol=2e-2, atol=2e-2, target=ONE_SM)


def test_rows_with_a_trailing_size_one_axis_count_their_arrays() -> None:
    fusion = pf.fuse(lambda x: pf.log_softmax(x, 1)).trace(pf.spec((4, 50001, 1), f32))
    assert all(cone for cone in nest_cones(fusion))


def test_loop_nests_inside_an_if_are_budgeted_apart() -> None:
    buffers = {name: _buffer(name, 30) for name in ("a", "b")}
    nests: list[k.Stmt] = [
        k.For(k.Var("i", pf.int32), k.Const(4, pf.int32), [k.Alloc(buffers["a"])]),
        k.For(k.Var("j", pf.int32), k.Const(4, pf.int32), [k.Alloc(buffers["b"])]),
    ]
    body: list[k.Stmt] = [k.If(k.Const(True, pf.bool), nests, [])]
    kernel = k.Kernel("guarded", [], buffers, body, grid=(1, 1, 1), block=(1024, 1, 1))
    check_register_arrays(kernel, {"kind": "inner", "persistent": False, "reread": True})
