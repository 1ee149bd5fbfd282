"""The random-fusion fuzzer (pyfuse.testing): generator, shrinker, comparison, worker pool,
the simulator's strided layouts, and the fuzz corpus (``-m fuzz``)."""

from __future__ import annotations

import os
from collections import Counter

import numpy as np
import pytest

import pyfuse as pf
from pyfuse.ir.interpreter import evaluate, evaluate_all
from pyfuse.ir.kernel_interpreter import memory_span
from pyfuse.ir.target import HOPPER
from pyfuse.passes import pipeline
from pyfuse.testing import fuzz
from pyfuse.testing.generate import generate
from pyfuse.testing.noisy_reference import JITTER, Jitter, evaluate_noisy
from pyfuse.testing.program import (
    SCHEDULES,
    Input,
    Op,
    Program,
    build_function,
    from_json,
    repro_script,
    to_json,
)
from pyfuse.testing.run import Outcome, compare, output_precisions, run_program
from pyfuse.testing.shrink import shrink, size
from pyfuse.testing.simulator import laid_out, random_inputs, run_on_simulator

# ---- generator ---------------------------------------------------------------------------------


def test_generate_is_deterministic_per_seed_and_index() -> None:
    for index in range(30):
        assert generate(11, index) == generate(11, index)
    assert [generate(11, i) for i in range(10)] != [generate(12, i) for i in range(10)]


def test_generated_programs_trace() -> None:
    invalid = 0
    for index in range(150):
        program = generate(5, index)
        try:
            pf.fuse(build_function(program)).trace(*program.specs())
        except pf.FusionError:
            invalid += 1
        except Exception:
            pass  # a pyfuse bug at trace: the runner reports it as compile_error
    assert invalid <= 3


def test_generator_covers_the_op_set_and_input_kinds() -> None:
    names: Counter[str] = Counter()
    dtypes: set[str] = set()
    kinds: set[str] = set()
    multi_output = 0
    for index in range(600):
        program = generate(1, index)
        names.update(op.name for op in program.ops())
        multi_output += len(program.outputs) > 1
        for value in program.inputs:
            dtypes.add(value.dtype)
            shape, strides = value.shape, value.effective_strides
            kinds.add(f"rank{min(len(shape), 3)}")
            if 0 in shape:
                kinds.add("empty")
            if 1 in shape:
                kinds.add("size1")
            if value.strides is not None:
                kinds.add("strided")
                if 0 in strides:
                    kinds.add("stride0")
                if len(shape) >= 2 and strides[-1] != 1:
                    kinds.add("transposed")
                if len(shape) >= 2 and strides[-1] == 1 and strides[-2] > shape[-1]:
                    kinds.add("padded")
        for op in program.ops():
            if "keepdim=True" in op.template:
                kinds.add("keepdim")
            if "None" in op.template and op.name in ("sum", "max", "min", "mean"):
                kinds.add("reduce_all")
            if op.name == "reshape" and "-1" in op.template:
                kinds.add("reshape_minus_one")
    wanted = {
        "neg", "abs", "exp", "log", "tanh", "sigmoid", "relu", "gelu", "silu", "sqrt", "rsqrt",
        "reciprocal", "sin", "cos", "logical_not", "add", "sub", "mul", "div", "pow",
        "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
        "where", "cast", "sum", "max", "min", "mean", "reshape", "permute", "transpose",
        "unsqueeze", "squeeze", "broadcast_to", "two_axes", "softmax", "layer_norm",
        "rms_norm", "matmul", "linear", "argmax", "argmin", "bitwise_and", "bitwise_not", "getitem",
        "cat", "stack",
    }  # fmt: skip
    assert wanted <= set(names), wanted - set(names)
    assert {"f32", "bf16", "f16", "i32", "bool"} <= dtypes
    assert {
        "rank0", "rank1", "rank2", "rank3", "empty", "size1", "strided", "stride0",
        "transposed", "padded", "keepdim", "reduce_all", "reshape_minus_one",
    } <= kinds, kinds  # fmt: skip
    assert multi_output > 40


def test_program_round_trips_and_renders_a_runnable_repro() -> None:
    program = generate(2, 3)
    assert from_json(to_json(program)) == program
    script = repro_script(program, ["a header"])
    namespace: dict[str, object] = {"__name__": "repro"}
    exec(compile(script, "<repro>", "exec"), namespace)
    assert callable(namespace["fusion"])
    assert namespace["SPECS"] == program.specs()


def test_half_the_matmul_programs_ask_for_another_schedule_and_keep_it_in_their_repro() -> None:
    programs = [generate(11, i) for i in range(2000)]
    with_matmul = [p for p in programs if any(op.name in ("matmul", "linear") for op in p.ops())]
    assert all(p.schedule == "" for p in programs if p not in with_matmul)
    scheduled = [p for p in with_matmul if p.schedule]
    assert 0.3 < len(scheduled) / len(with_matmul) < 0.7
    assert {p.schedule for p in scheduled} == set(SCHEDULES)
    program = scheduled[0]
    assert from_json(to_json(program)) == program
    script = repro_script(program)
    assert f"matmul={SCHEDULES[program.schedule]!r}" in script
    namespace: dict[str, object] = {"__name__": "repro"}
    exec(compile(script, "<repro>", "exec"), namespace)
    assert namespace["SPECS"] == program.specs()


# ---- shrinker ----------------------------------------------------------------------------------


def test_shrink_keeps_the_planted_failure_and_drops_the_rest() -> None:
    # A fake runner that "fails" whenever a softmax is present.
    program = next(
        p
        for i in range(500)
        if (p := generate(9, i)).ops()
        and any(op.name == "softmax" for op in p.ops())
        and len(p.ops()) >= 4
    )

    def fails(candidate: Program) -> bool:
        return any(op.name == "softmax" for op in candidate.ops())

    shrunk = shrink(Program(program.values, program.outputs, "pingpong"), fails)
    assert [op.name for op in shrunk.ops()] == ["softmax"]
    assert shrunk.schedule == ""  # the heuristic's schedule is simpler, and still fails
    assert len(shrunk.inputs) == 1 and shrunk.inputs[0].strides is None
    assert all(extent <= 1 for extent in shrunk.inputs[0].shape)
    assert size(shrunk) < size(program)


def test_shrink_reduces_extents_everywhere_they_appear() -> None:
    program = Program(
        (
            Input((6, 10), "f32", (13, 1)),
            Op("reshape", "{0}.reshape(10, 6)", (0,)),
            Op("exp", "pf.exp({0})", (1,)),
        ),
        (2,),
    )

    def fails(candidate: Program) -> bool:
        outcome = run_program(candidate, assemble=False)
        return outcome.cls == "ok" and "exp" in [op.name for op in candidate.ops()]

    shrunk = shrink(program, fails)
    assert run_program(shrunk, assemble=False).cls == "ok"
    assert shrunk.inputs[0].shape[0] * shrunk.inputs[0].shape[1] < 60


# ---- comparison --------------------------------------------------------------------------------


def test_compare_tolerances_nan_and_poison() -> None:
    want = np.array([1.0, np.nan, np.inf, -2.0], np.float32)
    assert compare(want.copy(), want) is None
    assert compare(want * (1 + 5e-5), want) is None
    result = compare(np.array([1.0, 0.0, np.inf, -2.0], np.float32), want)
    assert result is not None and result[0] == "not_nan"
    result = compare(np.array([np.nan, np.nan, np.inf, -2.0], np.float32), want)
    assert result is not None and result[0] == "nan"
    ints = np.arange(1, 201, dtype=np.int32)
    broken = ints.copy()
    broken[3] = -7
    result = compare(broken, ints)
    assert result is not None and result[0] == "poison"
    assert compare(broken, ints, lenient=True) is None
    result = compare(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32))
    assert result is not None and result[0] == "shape"


def test_an_infinite_reference_matches_only_itself() -> None:
    """``rtol * inf`` once made every number match an infinite reference element, so a
    kernel's finite value, or the other infinity, passed where the reference overflowed."""
    want = np.array([1.0, -np.inf, np.inf], np.float32)
    for got in ([1.0, 5.0, np.inf], [1.0, -np.inf, -np.inf], [1.0, -np.inf, 3e38]):
        result = compare(np.array(got, np.float32), want)
        assert result is not None and result[0] == "values", got
    assert compare(want.copy(), want) is None


def test_a_division_by_zero_of_a_value_float32_rounds_to_zero_is_not_held() -> None:
    """log_softmax of a row's max is -log(1 + 7e-8): 0 or -1.2e-7 in float32 by the sum's
    order. Divided by False it is NaN or -inf; the jittered references give both infinities
    (CPU and GPU fuzzer, seed 1412, case 4901), so the element is not compared."""
    fusion = pf.fuse(lambda x, d: pf.div(pf.log_softmax(pf.cast(x, pf.float32), 0), d)).trace(
        pf.spec((4,), pf.int8), pf.spec((4,), pf.bool)
    )
    inputs = [np.array([50, 33, 32, 32], np.int8), np.zeros(4, bool)]
    want = evaluate_all(fusion, inputs)[fusion.outputs[0]]
    assert want[0] == -np.inf
    jittered = [_noisy(fusion, inputs, jitter)[0] for jitter in (1.0, -1.0)]
    got = want.copy()
    got[0] = np.nan
    assert compare(got, want, jittered=jittered) is None
    got[1] = 1.0  # a determined element stays held
    assert compare(got, want, jittered=jittered) is not None


def _noisy(fusion: pf.Fusion, inputs: list[np.ndarray], jitter: Jitter) -> list[np.ndarray]:
    return evaluate_noisy(fusion, inputs, jitter, evaluate_all(fusion, inputs))


def test_jitter_moves_a_16_bit_result_before_its_rounding() -> None:
    """An f16 linear whose exact value lies 9e-8 under an f16 rounding midpoint (4.19336 of
    4.19141 and 4.19531): a float32 accumulator may land on either side, so one of the
    jittered references must round it up and another down (GPU fuzzer, seed 269)."""
    fusion = pf.fuse(lambda x, w, b: pf.linear(x, w, b)).trace(
        pf.spec((1, 3), pf.float16), pf.spec((1, 3), pf.float16), pf.spec((1,), pf.float16)
    )
    x = np.array([[1.0, 1.0, 2.0**-14]], np.float16)
    w = np.array([[4.19140625, 2.0**-9, -0.00140380859375]], np.float16)
    b = np.zeros(1, np.float16)
    exact = 4.19140625 + 2.0**-9 - 2.0**-14 * 0.00140380859375
    assert 4.193359375 - 1e-7 < exact < 4.193359375
    seen = {float(_noisy(fusion, [x, w, b], jitter)[0][0, 0]) for jitter in (1.0, -1.0)}
    assert seen == {4.19140625, 4.1953125}


def test_elements_the_jitter_moves_are_not_held_to_the_reference() -> None:
    """GPU fuzzer, seed 383: a softmax over remainders of ~5e14 by small ints, which a few
    ulps of expm1 decide; the jittered references moved an element by a tenth of the
    tolerance or more, the kernel by more than the tolerance."""
    want = np.array([1.5e-8, 0.5], np.float32)
    got = np.array([0.05, 0.5], np.float32)
    assert compare(got, want) is not None
    assert compare(got, want, jittered=[np.array([1.2e-5, 0.5], np.float32)]) is None
    assert compare(got, want, jittered=[np.array([2e-6, 0.5], np.float32)]) is not None


def test_a_nan_at_a_singularity_the_noise_reaches_is_not_held_to_the_reference() -> None:
    """CPU fuzzer, seed 419: fmod(x, x' - logsumexp(x')) where the divisor cancelled to
    about 1e-7; the kernel's rounding made it 0 (NaN), the noise moved the result by over
    half its magnitude. A NaN where the noise leaves the reference put is still a failure."""
    want = np.array([6e-9, 0.3], np.float32)
    got = np.array([np.nan, np.nan], np.float32)
    unstable = np.array([2.8e-7, 0.3], np.float32)
    difference = compare(got, want, jittered=[unstable])
    assert difference is not None and "1 of 2" in difference[1]
    assert compare(got[:1], want[:1], jittered=[unstable[:1]]) is None


def test_a_subtraction_is_jittered_by_its_operands_magnitudes() -> None:
    """The noise of x - y scales with |x| + |y|: a float32 kernel's error in a cancellation
    comes from its operands' roundings, not from the small result."""
    fusion = pf.fuse(lambda x, y: x - y).trace(pf.spec((1,), pf.float32), pf.spec((1,), pf.float32))
    x, y = np.array([20.0], np.float32), np.array([20.0 - 2**-19], np.float32)
    (moved,) = _noisy(fusion, [x, y], 1.0)
    assert abs(float(moved[0]) - 2**-19) >= 0.5 * JITTER * 40


def test_a_product_whose_partial_products_overflow_is_undetermined() -> None:
    """GPU fuzzer, seed 383: exp2 of ints multiplied; the factors above 1 overflow float32
    together, those below 1 underflow, so a kernel's order may give inf * 0 = NaN."""
    fusion = pf.fuse(lambda x: pf.prod(x, -1)).trace(pf.spec((2, 4), pf.float32))
    x = np.array([[1e30, 1e30, 1e-30, 1e-30], [2.0, 3.0, 0.5, 0.25]], np.float32)
    (exact,) = evaluate(fusion, [x])
    assert np.allclose(exact, [1.0, 0.75])
    # Each run marks the undetermined element with another extreme (GPU fuzzer, seed 433: a
    # comparison of such a product to 0 must differ between the runs too).
    for jitter, mark in ((1.0, np.inf), (-1.0, 0.0), (np.random.default_rng(0), np.nan)):
        (moved,) = _noisy(fusion, [x], jitter)
        assert np.array_equal(moved[:1], [mark], equal_nan=True) and np.isclose(moved[1], 0.75)


def test_a_matmul_whose_partial_sums_may_overflow_is_undetermined() -> None:
    """CPU fuzzer, seed 605 case 3074: a matmul of exp(88)s is 1.6e38 exactly, but its
    terms add up past float32's largest value, so a kernel's order of partial sums may
    overflow to inf: each run marks it, and the element next to it stays held."""
    fusion = pf.fuse(lambda a, b: a @ b).trace(
        pf.spec((1, 3), pf.float32), pf.spec((3, 2), pf.float32)
    )
    a = np.array([[1.6e38, 1.6e38, -1.6e38]], np.float32)
    b = np.array([[1.0, 1e-38], [1.0, 1e-38], [1.0, 1e-38]], np.float32)
    (exact,) = evaluate(fusion, [a, b])
    assert np.isclose(exact[0, 0], 1.6e38, rtol=1e-6)
    for jitter, mark in ((1.0, np.inf), (-1.0, -np.inf), (np.random.default_rng(0), np.nan)):
        (moved,) = _noisy(fusion, [a, b], jitter)
        assert np.array_equal(moved[0, :1], [mark], equal_nan=True)
        assert np.isclose(moved[0, 1], 1.6, rtol=1e-3)
    # An infinite term beside a finite one that overflows float32 by itself: inf exactly,
    # NaN in float32 (inf - inf): undetermined too (seed 605 case 3074 again).
    b2 = np.array([[1.0, 1.0], [-2.08, 1.0], [0.0, 1.0]], np.float32)
    a2 = np.array([[np.inf, 1.65e38, 1.0]], np.float32)
    for jitter, mark in ((1.0, np.inf), (-1.0, -np.inf), (np.random.default_rng(1), np.nan)):
        (moved,) = _noisy(fusion, [a2, b2], jitter)
        assert np.array_equal(moved[0, :1], [mark], equal_nan=True)
    # An infinite term makes every order's sum infinite, as the exact one is: still held.
    fusion = pf.fuse(lambda x: pf.sum(x, -1)).trace(pf.spec((1, 4), pf.float32))
    x = np.array([[1.0, 2.0, np.inf, 3.0]], np.float32)
    for jitter in (1.0, -1.0, np.random.default_rng(0)):
        assert np.array_equal(_noisy(fusion, [x], jitter)[0], [np.inf])


def test_signatures_ignore_sizes_and_names() -> None:
    a = Outcome("compile_error", "pipeline", "ScheduleError", "kernel fusion_k3: T12 has 37 axes")
    b = Outcome("compile_error", "pipeline", "ScheduleError", "kernel fusion_k0: T4 has 5 axes")
    assert a.signature() == b.signature()


def test_runner_reports_ok_and_invalid() -> None:
    ok = Program((Input((5, 7), "f32", (1, 5)), Op("add", "({0} + {0}.exp())", (0,))), (1,))
    assert run_program(ok).cls == "ok"
    bad = Program((Input((5, 7), "f32"), Op("add", "({0} + pf.unsqueeze({0}, 9))", (0,))), (1,))
    assert run_program(bad).cls == "invalid"


# ---- worker pool -------------------------------------------------------------------------------


def test_worker_reports_crash_and_timeout_and_recovers() -> None:
    worker = fuzz.Worker(gpu=False)
    try:
        assert worker.run(("exit", 3), timeout=60).cls == "crash"
        assert worker.run(("sleep", 30), timeout=1).cls == "timeout"
        program = Program((Input((3,), "f32"), Op("neg", "-{0}", (0,))), (1,))
        assert worker.run(("program", to_json(program)), timeout=120).cls == "ok"
    finally:
        worker.close()


# ---- the simulator's layouts -------------------------------------------------------------------


def test_laid_out_padded_rows_view_a_poisoned_buffer() -> None:
    values = np.arange(4 * 128, dtype=np.float32).reshape(4, 128)
    view = laid_out(values, (131, 1))
    assert view.strides == (131 * 4, 4)
    np.testing.assert_array_equal(view, values)
    memory = memory_span(view)
    assert memory.size == 3 * 131 + 128
    assert np.isnan(memory[128:131]).all()


@pytest.mark.parametrize(
    ("shape", "strides"),
    [
        ((4, 128), (132, 1)),
        # Rows 131 apart: a vector of 4 would be misaligned in every odd row (the interpreter
        # sees the padding), so the kernel moves single elements.
        ((4, 128), (131, 1)),
        ((7, 5), (1, 7)),
        ((6, 9), (1, 8)),
        ((3, 4, 5), (1, 3, 12)),
        ((5, 6), (0, 1)),
    ],
)
def test_simulator_reads_strided_inputs_in_place(
    shape: tuple[int, ...], strides: tuple[int, ...]
) -> None:
    spec = pf.spec(shape, pf.float32, strides)
    fused = pf.fuse(lambda x: x * 2.0 + 1.0)
    fusion = fused.trace(spec)
    result = pipeline.run(fusion, HOPPER)
    (array,) = random_inputs([spec], seed=4)
    assert tuple(s // 4 for s in array.strides) == strides
    (got,) = run_on_simulator(result, [array], [(shape, pf.float32)])
    np.testing.assert_allclose(got, fused.reference(array), rtol=1e-6)


# ---- the corpus --------------------------------------------------------------------------------


@pytest.mark.fuzz
def test_fuzz_corpus() -> None:
    """PYFUSE_FUZZ_CASES cases (300) of seed PYFUSE_FUZZ_SEED (0) on the CPU: none may fail."""
    cases = int(os.environ.get("PYFUSE_FUZZ_CASES", "300"))
    seed = int(os.environ.get("PYFUSE_FUZZ_SEED", "0"))
    report = fuzz.run_cases(
        seed, iter(range(cases)), jobs=os.cpu_count() or 1, gpu=False, timeout=300
    )
    if report.failures:
        lines: list[str] = []
        fuzz.print_summary(report, gpu=False, out=lines.append)
        rerun = "python -m pyfuse.testing.fuzz --seed {} --start {} --count 1 --shrink"
        first = report.failures[0]
        lines.append("\nrerun the first: " + rerun.format(seed, first.index))
        pytest.fail("\n".join(lines), pytrace=False)


def test_a_remainder_of_a_huge_value_is_undetermined() -> None:
    """GPU fuzzer, seed 437: exp(46) % -0.75 is 0, -0.25 or -0.5 by the last bit of exp; three
    samples of the noise landed on the reference's value, so every run must mark it."""
    fusion = pf.fuse(lambda x: x.exp() % -0.75).trace(pf.spec((2,), pf.int16))
    x = np.array([46, 1], np.int16)
    (want,) = evaluate(fusion, [x])
    for jitter, mark in ((1.0, np.inf), (-1.0, -np.inf), (np.random.default_rng(0), np.nan)):
        (moved,) = _noisy(fusion, [x], jitter)
        assert np.array_equal(moved[:1], [mark], equal_nan=True)
        assert abs(float(moved[1]) - float(want[1])) < 1e-5


def test_rounded_values_stay_integral_and_a_tie_they_decide_is_undetermined() -> None:
    """GPU fuzzer, seed 437: floor(e) // round(e) with e = 4 exp(14) = 4810417.1 in float32
    (spacing 0.5); a kernel's exp one ulp high makes e 4810417.5, round 4810418 and the
    quotient 0. Rounding ops take no noise of their own, and one whose input's noise reaches a
    half is marked."""
    fusion = pf.fuse(lambda x: pf.floor(x.exp() * 4) // pf.round(x.exp() * 4)).trace(
        pf.spec((2,), pf.uint8)
    )
    x = np.array([14, 3], np.uint8)
    (want,) = evaluate(fusion, [x])
    assert np.array_equal(want, [1.0, 1.0])
    for jitter in (1.0, -1.0, np.random.default_rng(0)):
        (moved,) = _noisy(fusion, [x], jitter)
        assert not np.isclose(moved[0], 1.0, equal_nan=False)
        assert moved[1] == 1.0
    assert (
        compare(np.array([0.0, 1.0], np.float32), want, jittered=_noisy(fusion, [x], 1.0)) is None
    )


def test_noise_that_cancels_in_a_run_still_marks_a_quotient_next_to_an_integer() -> None:
    """GPU fuzzer, seed 451: 8 // rsqrt(9 + 0) is 23 with f32(1/3) and 24 with rsqrt.approx;
    in the all-up run the noise of the add and of the rsqrt cancelled, so the quotient did not
    move. An operand that carries noise moves its quotient by JITTER at least."""
    fusion = pf.fuse(lambda x: pf.relu(x) // pf.rsqrt(pf.abs(x) + 1.0)).trace(
        pf.spec((1,), pf.int32)
    )
    x = np.array([8], np.int32)
    for jitter, mark in ((1.0, np.inf), (-1.0, -np.inf)):
        assert _noisy(fusion, [x], jitter)[0][0] == mark
    exact_quotient = pf.fuse(lambda a: a // a).trace(pf.spec((3,), pf.float32))
    y = np.array([3.0, 5.0, 7.0], np.float32)
    assert np.array_equal(_noisy(exact_quotient, [y], 1.0)[0], [1.0, 1.0, 1.0])


def test_an_argmax_over_near_ties_of_computed_values_is_undetermined() -> None:
    """GPU fuzzer, seed 461: rms_norm over a dim of 1 makes every value about +-w, so which
    one a kernel finds largest is its rounding's choice; the runs must disagree there, and
    agree where the maximum stands clear (or the values are the inputs themselves)."""
    fusion = pf.fuse(lambda x: pf.argmax(x * 3.0, 0)).trace(pf.spec((3, 2), pf.float32))
    x = np.array([[1.0, 5.0], [1.0 + 2**-22, 2.0], [0.5, 1.0]], np.float32)
    (want,) = evaluate(fusion, [x])
    runs = [_noisy(fusion, [x], jitter)[0] for jitter in (1.0, -1.0, np.random.default_rng(0))]
    assert any(run[0] != want[0] for run in runs)
    assert all(run[1] == want[1] == 0 for run in runs)
    exact = pf.fuse(lambda x: pf.argmax(x, 0)).trace(pf.spec((3, 2), pf.float32))
    assert all(_noisy(exact, [x], j)[0][0] == 1 for j in (1.0, -1.0))


def test_an_argmin_over_subnormals_is_undetermined() -> None:
    """GPU fuzzer, seed 701: a softmax column's smallest values were float32 subnormals, of
    which a kernel's flush-to-zero math made two 0 and the argmin the first of those; any
    subnormal may be a row's extremum, so the runs must disagree there, and agree where the
    minimum stands clear of the subnormals."""
    fusion = pf.fuse(lambda x: pf.argmin(x * 0.5, 0)).trace(pf.spec((3, 2), pf.float32))
    x = np.array([[4e-39, 1.0], [2e-40, 3.0], [1.0, 2.0]], np.float32)
    (want,) = evaluate(fusion, [x])
    assert list(want) == [1, 0]
    runs = [_noisy(fusion, [x], jitter)[0] for jitter in (1.0, -1.0, np.random.default_rng(0))]
    # The runs without a flush of their own (+-1) disagree too, so that an op after the
    # index (a remainder by a small divisor) cannot map all three onto one value by chance.
    assert runs[0][0] != runs[1][0] and runs[0][0] != want[0]
    assert all(run[1] == 0 for run in runs)


def test_a_cast_to_bool_of_a_value_within_its_noise_of_zero_is_undetermined() -> None:
    """GPU fuzzer, seed 471: a layer_norm of equal values is exactly 0 on the GPU and a few
    ulps off it in the reference; noise moves a value across 0 but never onto it, so the runs
    must disagree there. A value no op rounded (a relu's 0) and one clear of 0 stay determined."""
    fusion = pf.fuse(lambda x: pf.cast(x - pf.mean(x, 0, keepdim=True), pf.bool)).trace(
        pf.spec((55,), pf.float32)
    )
    x = np.full(55, 0.3, np.float32)
    x[0] = 0.3 + 2**-25  # the mean's rounding leaves every difference a few ulps off 0
    runs = [_noisy(fusion, [x], j)[0] for j in (1.0, -1.0, np.random.default_rng(0))]
    assert not all(np.array_equal(runs[0], run) for run in runs[1:])
    relu = pf.fuse(lambda x: pf.cast(pf.relu(x), pf.bool)).trace(pf.spec((2,), pf.float32))
    clear = pf.fuse(lambda x: pf.cast(x * 3.0, pf.bool)).trace(pf.spec((2,), pf.float32))
    y = np.array([-1.0, 2.0], np.float32)
    for j in (1.0, -1.0):
        assert _noisy(relu, [y], j)[0].tolist() == [False, True]
        assert _noisy(clear, [y], j)[0].tolist() == [True, True]
    equal = pf.fuse(lambda x: (x * 3.0) == (x + x + x)).trace(pf.spec((2,), pf.float32))
    assert _noisy(equal, [y], 1.0)[0].tolist() != _noisy(equal, [y], -1.0)[0].tolist()


def test_an_ordered_comparison_within_the_noise_of_a_tie_is_undetermined() -> None:
    """GPU fuzzer, seed 1440 case 1409: the variance of 13 equal values of exp(35) is exactly
    0 on the GPU and some ulps squared in the reference; every run moved it further up, past
    a sum of standard deviations, so ``var >= sum(std)`` was True in all three runs and False
    on the GPU. Where the noise of ``x - y`` reaches 0 the runs must disagree; a column of
    spread values stays determined."""
    fusion = pf.fuse(
        lambda x: pf.var(pf.exp(x), 0, correction=0) >= pf.sum(pf.std(pf.exp(x), 0))
    ).trace(pf.spec((13, 2), pf.int32))
    x = np.stack([np.full(13, 35), np.arange(13) + 10], 1).astype(np.int32)
    (want,) = evaluate(fusion, [x])
    runs = [_noisy(fusion, [x], j)[0] for j in (1.0, -1.0, np.random.default_rng(0))]
    assert any(run[0] != want[0] for run in runs)
    assert all(run[1] == want[1] for run in runs)


def test_a_subnormal_compared_with_zero_is_undetermined() -> None:
    """CPU fuzzer, seed 801: ``max(int, softmax) != 0`` where the softmax's values were
    float32 subnormals, which ``ex2.approx.ftz`` makes 0: the runs must disagree there (in
    the +-1 runs too), and agree on a normal value."""
    fusion = pf.fuse(lambda x: (x * 0.5) != 0.0).trace(pf.spec((2,), pf.float32))
    x = np.array([4e-39, 1e-30], np.float32)
    runs = [_noisy(fusion, [x], j)[0] for j in (1.0, -1.0)]
    assert runs[0][0] != runs[1][0]
    assert runs[0][1] and runs[1][1]


def test_a_cosine_of_a_huge_noisy_value_is_undetermined() -> None:
    """GPU fuzzer, seed 471: relu(cos(exp(x))) with x up to 50, where one ulp of exp(50) is
    2**49 radians; the relu cut off every run's move where the cosine was negative, so the
    GPU's positive values were held to 0. A sin or cos of a value whose noise reaches
    2**-7 radians is marked; one of a small value, or of an input, is not."""
    cosine = pf.fuse(lambda x: pf.cos(pf.exp(x))).trace(pf.spec((2,), pf.int32))
    x = np.array([50, 1], np.int32)
    (want,) = evaluate(cosine, [x])
    for jitter, mark in ((1.0, np.inf), (-1.0, -np.inf), (np.random.default_rng(0), np.nan)):
        (moved,) = _noisy(cosine, [x], jitter)
        assert np.array_equal(moved[:1], [mark], equal_nan=True)
        assert abs(float(moved[1]) - float(want[1])) < 1e-5
    clipped = pf.fuse(lambda x: pf.relu(pf.cos(pf.exp(x)))).trace(pf.spec((2,), pf.int32))
    x = np.array([50, 1], np.int32)  # cos(f32(e**50)) < 0: the reference's relu is 0
    (want,) = evaluate(clipped, [x])
    assert want[0] == 0.0
    runs = [_noisy(clipped, [x], j)[0] for j in (1.0, -1.0, np.random.default_rng(0))]
    got = np.array([0.78, want[1]], np.float32)
    assert compare(got, want, jittered=runs) is None
    plain = pf.fuse(lambda x: pf.sin(x) * 2.0).trace(pf.spec((1,), pf.float32))
    big = np.array([3e8], np.float32)
    assert np.isfinite(_noisy(plain, [big], 1.0)[0][0])


def test_a_float64_output_of_float32_math_is_held_to_float32() -> None:
    """GPU fuzzer, seed 471: cat([rsqrt(|x| + 1), y]) into float64, one ulp of float32 from
    the reference in the rsqrt part, where the runs' noise of the add and the rsqrt
    cancelled; it is held to float32's tolerance, and float64 math to float64's."""
    mixed = pf.fuse(lambda x, y: pf.cat([pf.rsqrt(pf.abs(x) + 1.0), y], -1)).trace(
        pf.spec((3, 2), pf.float32), pf.spec((3, 1), pf.float64)
    )
    pure = pf.fuse(lambda y: y * 3.0).trace(pf.spec((3, 1), pf.float64))
    assert output_precisions(mixed) == ["float32"] and output_precisions(pure) == [None]
    x = np.array([[0.3, 1.7], [2.5, 0.1], [4.0, 9.0]], np.float32)
    y = np.array([[1.0], [2.0], [3.0]])
    (want,) = evaluate(mixed, [x, y])
    got = want.copy()
    got[:, :2] = np.nextafter(want[:, :2].astype(np.float32), np.float32(2))
    assert compare(got, want, precision="float32") is None
    assert compare(got, want) is not None


def test_a_cast_to_bool_of_a_flushed_subnormal_differs_from_the_reference() -> None:
    """CPU fuzzer, seed 525 (its kernels run as PTX): exp(-100) is a float32 subnormal, which
    the GPU's ex2.approx.ftz flushes to 0, so its cast to bool is False there and True in the
    reference. The random run flushes it too, and the mark must not flip it back."""
    fusion = pf.fuse(lambda x: pf.cast(pf.exp(x - 100.0), pf.bool)).trace(pf.spec((2,), pf.float32))
    x = np.array([0.0, 100.0], np.float32)
    (want,) = evaluate(fusion, [x])
    assert want.tolist() == [True, True]
    (moved,) = _noisy(fusion, [x], np.random.default_rng(0))
    assert moved[0] != want[0] and moved[1] == want[1]
    assert compare(np.array([False, True]), want, jittered=[moved]) is None


def test_a_floor_divide_by_a_tiny_divisor_is_the_infinite_quotient() -> None:
    """GPU fuzzer, seed 541: int32 // pow(f64, u8), the power underflowed to a denormal; the
    kernel's fmod of 5 by 1e-310 overflowed its reduction and gave NaN where NumPy's floor of
    the infinite x / y is inf. Run as PTX on the simulator."""
    from pyfuse.backend_ptx.emit import emit_ptx
    from pyfuse.testing.simulator import run_on_simulator

    specs = [pf.spec((5,), pf.float64), pf.spec((5,), pf.float64)]
    fusion = pf.fuse(lambda x, y: pf.floor_divide(x, y)).trace(*specs)
    result = pipeline.run(
        fusion, HOPPER, None, emit=lambda st: pipeline.Emitted(emit_ptx(st.kernel_ir, HOPPER))
    )
    # (GPU fuzzer, seed 543: and inf // 3 stays NaN.)
    x = np.array([5.0, -5.0, 3.0, 1e300, np.inf])
    y = np.array([1e-310, 1e-310, 0.0, 1e-20, 3.0])
    (got,) = run_on_simulator(result, [x, y], [((5,), pf.float64)], as_ptx=True)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        want = np.floor_divide(x, y)
    np.testing.assert_array_equal(got, want)


def test_an_argmax_over_undetermined_values_stays_undetermined_through_a_where() -> None:
    """GPU fuzzer, seed 559: ``where(argmax(cos(amax(exp(x)))) > 0.25, ..., 2)``. The cos
    operands' noise is far past a radian, so every value is marked; marks compare equal,
    so the argmax's hit test found index 0 in every noisy run, which the where mapped onto
    the exact answer 2, and the kernel's 1 was held wrong. A hit test on a mark is
    undetermined now: some run differs from the reference there."""
    fusion = pf.fuse(
        lambda x: pf.where(pf.argmax(pf.cos(pf.amax(pf.exp(x), 0)), 0) > 0.25, 0, 2)
    ).trace(pf.spec((24, 5, 4), pf.int8))
    rng = np.random.default_rng(0)
    x = rng.integers(30, 51, (24, 5, 4)).astype(np.int8)
    (want,) = evaluate(fusion, [x])
    runs = [_noisy(fusion, [x], jitter)[0] for jitter in (1.0, -1.0, np.random.default_rng(1))]
    assert np.logical_or.reduce([run != want for run in runs]).all()  # a run moves each
    assert compare(np.where(want == 2, 0, 2).astype(want.dtype), want, jittered=runs) is None


def test_an_argmax_over_a_number_and_an_overflowed_product_is_undetermined() -> None:
    """CPU fuzzer, seed 1202 case 4638: ``argmax(where(x > 0.25, x, prod(x)), -1)`` where the
    product's factors overflow float32 and one is 0. A kernel's product is then inf * 0 =
    NaN, and the argmax of a row ``[55, NaN]`` is 1; the runs' marks hit the 55 first in
    every run, so the kernel was held to the exact 0. In the run with NaN marks a number
    compared with a mark keeps float semantics now, and the runs differ there."""
    fusion = pf.fuse(lambda x: pf.argmax(pf.where(x > 0.25, x, pf.prod(x, (0, 1))), 1)).trace(
        pf.spec((30, 2), pf.float32)
    )
    x = np.full((30, 2), -100.0, np.float32)
    x[:, 0] = 55.0 + np.arange(30)  # every row: a number, then the product (-0 exactly)
    x[0, 1] = 0.0
    (want,) = evaluate(fusion, [x])
    assert (want == 0).all()
    runs = [_noisy(fusion, [x], jitter)[0] for jitter in (1.0, -1.0, np.random.default_rng(1))]
    assert np.logical_or.reduce([run != want for run in runs]).all()
    kernel = np.ones_like(want)  # what a float32 kernel gives: the NaN is the max
    assert compare(kernel, want, jittered=runs) is None


def test_a_subnormal_scaled_into_a_normal_float_is_undetermined_through_a_bool() -> None:
    """CPU fuzzer, seed 1415: ``softmax(x) * col != 0`` where an exp was a float32 subnormal
    (exp(-88)), which ``ex2.approx.ftz`` makes 0, and the product a normal float. Only the
    random run flushed, and its bool is a coin toss, so some such elements were held; the
    run that moves results down flushes too, so the two fixed runs disagree."""
    fusion = pf.fuse(lambda x, c: (pf.exp(x) * c).to(pf.bool)).trace(
        pf.spec((2,), pf.float32), pf.spec((2,), pf.float32)
    )
    inputs = [np.array([-88.0, -10.0], np.float32), np.array([21.0, 21.0], np.float32)]
    want = evaluate_all(fusion, inputs)[fusion.outputs[0]]
    assert want.all()
    up, down = (_noisy(fusion, inputs, jitter)[0] for jitter in (1.0, -1.0))
    assert up[0] != down[0] and up[1] == down[1]
    assert compare(np.array([False, True]), want, jittered=[up, down]) is None
    assert compare(np.array([True, False]), want, jittered=[up, down]) is not None


def test_a_quotient_of_a_subnormal_is_undetermined() -> None:
    """CPU fuzzer, seed 901: ``floor_divide(softmax, -0.75)`` where the softmax's values were
    float32 subnormals that ``ex2.approx.ftz`` makes 0: -1 in NumPy, -0 from a kernel. The
    runs must disagree there; a subnormal whose floored quotient is 0 either way, and a
    normal value, stay determined."""
    fusion = pf.fuse(lambda x: pf.floor_divide(x * 0.5, -0.75)).trace(pf.spec((3,), pf.float32))
    x = np.array([4e-39, -4e-39, 3.3], np.float32)
    runs = [_noisy(fusion, [x], j)[0] for j in (1.0, -1.0)]
    assert runs[0][0] != runs[1][0]
    assert runs[0][1] == runs[1][1] == 0.0
    assert runs[0][2] == runs[1][2] == -3.0
