"""The pipeline's stage list and its one runner: every stage is timed by its name, the record
keeps each stage's artifact, and ``Compiled`` and the dumps are made from that record."""

from __future__ import annotations

import pytest

import pyfuse as pf
from pyfuse import knobs
from pyfuse.ir.target import HOPPER
from pyfuse.passes import pipeline


def _stage_names() -> list[str]:
    return [name for name, _ in pipeline.STAGES]


def test_the_stage_list_names_every_math_pass_in_order_between_trace_and_segment() -> None:
    names = _stage_names()
    math = [name for name, _ in pipeline.MATH_PASSES]
    assert names[0] == "trace" and names[1 : 1 + len(math)] == math
    assert names[1 + len(math) :] == ["segment", "schedule", "lower", "emit", "cubin"]


def test_every_timing_is_a_stage_and_the_record_keeps_each_artifact() -> None:
    fused = pf.fuse(lambda x, w: pf.softmax(x * w, -1) + 1.0)
    fusion = fused.trace(pf.spec((8, 96), pf.float32), pf.spec((96,), pf.float32))
    calls: list[str] = []

    def emit(stages: pipeline.KernelStages) -> pipeline.Emitted:
        calls.append(stages.kernel_ir.name)
        return pipeline.Emitted(f"// {stages.kernel_ir.name}")

    record = pipeline.run(fusion, HOPPER, emit=emit)
    assert set(record.timings) <= set(_stage_names())
    assert {"split_k", "segment", "schedule", "lower", "emit"} <= set(record.timings)
    assert record.traced is fusion and record.math_ir.startswith(str(fusion).split("\n")[0])
    assert calls == [stages.kernel_ir.name for stages in record.kernels]
    for stages in record.kernels:
        assert stages.emitted is not None and stages.emitted.ptx == f"// {stages.kernel_ir.name}"
        assert stages.scheduled_ir and stages.plan.scheduler


def test_compiled_and_its_kernels_come_from_the_record(capsys: pytest.CaptureFixture[str]) -> None:
    fused = pf.fuse(lambda x: pf.exp(x) * 2.0, name="from_record")
    with knobs.overrides(dump=frozenset({"scheduled", "ptx"})):
        compiled = fused.compile(pf.spec((4, 33), pf.float32))
    (kernel,) = compiled.kernels
    assert ".entry" in kernel.ptx and kernel.ir and kernel.built_ir is not None
    assert kernel.arguments == [("input", 0), ("output", 0)]
    assert {"trace", "schedule", "lower", "emit"} <= set(compiled.timings)
    assert set(compiled.timings) <= {*_stage_names(), "variant_cache", "load"}
    err = capsys.readouterr().err
    assert err.index("==== pyfuse scheduled") < err.index("==== pyfuse ptx")
    assert kernel.ptx in err and kernel.ir in err
