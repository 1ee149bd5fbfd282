"""The compile driver: the function that makes :class:`~pyfuse.runtime.compiled.Compiled`
results from a traced Fusion.

``compile_fusion`` runs the stages of :mod:`pyfuse.passes.pipeline` with the PTX emitter as
their emit stage; it needs no GPU. Importing this module imports both (the call path does so
only at its first compile the variant cache does not answer, :mod:`pyfuse.runtime.calls`)
and tells the variant cache which sources they were loaded from. The pipeline's record
(each stage's artifact by name) is the one source of ``Compiled`` and its ``Kernel`` s,
of ``PYFUSE_DUMP`` and, through ``Compiled``, of the variant record. A ``jit`` hook gets
each kernel's name and PTX the moment it is emitted (before the next kernel is planned), so
the runtime can start the driver's JIT beside the rest of the compile.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from pyfuse import knobs
from pyfuse.backend_ptx.emit import emit_ptx
from pyfuse.errors import ScheduleError
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.kernel_ir import Kernel as KernelIR
from pyfuse.ir.kernel_ir import ParamRole
from pyfuse.ir.params import MatmulParams
from pyfuse.ir.target import TargetInfo
from pyfuse.passes import pipeline
from pyfuse.runtime import variant_cache
from pyfuse.runtime.compiled import Compiled, Kernel
from pyfuse.runtime.location import user_location

if TYPE_CHECKING:
    from pyfuse.backend_ptx.tensor_maps import MatmulLaunch

# The sources the compiler was loaded from: the variant cache stores its results only while
# they are unchanged.
variant_cache.remember_compiler_sources()


def _arguments(
    kernel_ir: KernelIR, sources: list[tuple[str, int | str]], sinks: list[tuple[str, int | str]]
) -> list[tuple[str, int | str]]:
    """Map each kernel parameter (a kernel-local input/output index) to the fusion's storage."""
    result = []
    for param in kernel_ir.params:
        if param.role == ParamRole.INPUT:
            result.append(sources[param.index])
        elif param.role == ParamRole.INTERMEDIATE:  # the kernel's own workspace (stream-K)
            result.append(("intermediate", param.buffer_name))
        else:
            result.append(sinks[param.index])
    return result


# Where a compile hands each kernel's (name, PTX) as soon as it exists.
JitHook = Callable[[str, str], None]


def _emitter(target: TargetInfo, jit: JitHook | None) -> pipeline.Emitter:
    """The pipeline's emit stage: one kernel's PTX and, for a matmul kernel, its launch plan
    (planned while the kernel is built, so its launch needs no IR); the PTX goes to ``jit``
    at once, so the driver's JIT runs beside the next kernel's planning."""

    def emit(stages: pipeline.KernelStages) -> pipeline.Emitted:
        kernel_ir = stages.kernel_ir
        ptx = emit_ptx(kernel_ir, target)
        launch = None
        if kernel_ir.main_loop() is not None:
            from pyfuse.backend_ptx import matmul_host  # the emitter loaded it for this kernel

            launch = matmul_host.matmul_launch(kernel_ir)
        if jit is not None:
            jit(kernel_ir.name, ptx)
        return pipeline.Emitted(ptx, launch)

    return emit


def _dump_texts(stage: str, kernel: pipeline.KernelStages) -> str:
    """One kernel's artifact of a ``PYFUSE_DUMP`` stage, as text."""
    if stage == "scheduled":
        return kernel.scheduled_ir
    if stage == "kernel":
        from pyfuse.ir.kernel_printer import kernel_to_str  # loads only for this dump

        return kernel_to_str(kernel.kernel_ir)
    assert kernel.emitted is not None
    return kernel.emitted.ptx


def _dump(stage: str, text: str) -> None:
    print(f"==== pyfuse {stage} ====\n{text}", file=sys.stderr)


def _dump_record(record: pipeline.PipelineResult, stages: frozenset[str]) -> None:
    """``PYFUSE_DUMP``'s kernel stages from the record, kernel by kernel, in stage order."""
    for kernel in record.kernels:
        for stage in ("scheduled", "kernel", "ptx"):
            if stage in stages:
                _dump(stage, _dump_texts(stage, kernel))


def compile_fusion(
    fusion: Fusion,
    target: TargetInfo,
    matmul: MatmulParams | None = None,
    jit: JitHook | None = None,
) -> Compiled:
    """Passes and PTX emission for a traced fusion; no GPU needed. ``jit`` gets each kernel's
    name and PTX as soon as it is emitted.

    Errors leave in the user's terms: a ScheduleError starts with the user's op, line, shapes
    and dtypes; any exception that is not a PyfuseError (a bug) becomes an InternalError that
    names the op and carries a script reproducing the fusion."""
    try:
        return _compile(fusion, target, matmul, jit)
    except ScheduleError as error:
        from pyfuse.runtime import diagnose  # loads only for an error

        diagnose.explain_schedule_error(error, fusion)
        raise
    except Exception as error:
        from pyfuse.runtime import diagnose

        if not diagnose.is_compiler_bug(error):
            raise
        raise diagnose.internal_error(
            error,
            fusion,
            name=fusion.name,
            doing=f"compiling {fusion.name}",
            matmul=matmul,
            where=user_location(),
            note=[f"compiled for {target.arch} (vector_bytes={target.vector_bytes})"],
        ) from error


def _compile(
    fusion: Fusion, target: TargetInfo, matmul: MatmulParams | None, jit: JitHook | None
) -> Compiled:
    dump = knobs.dump()
    if "ir" in dump:
        _dump("ir", str(fusion))  # before the passes: a compile that fails still shows it
    record = pipeline.run(fusion, target, matmul, _emitter(target, jit))
    _dump_record(record, dump)
    return _compiled_from(record)


def _kernel_from(
    stages: pipeline.KernelStages,
    sources: list[tuple[str, int | str]],
    sinks: list[tuple[str, int | str]],
) -> Kernel:
    kernel_ir, emitted = stages.kernel_ir, stages.emitted
    assert emitted is not None
    return Kernel(
        name=kernel_ir.name,
        scheduler=stages.plan.scheduler,
        ptx=emitted.ptx,
        ir=stages.scheduled_ir,
        grid=kernel_ir.grid,
        block=kernel_ir.block,
        smem_bytes=kernel_ir.smem_bytes,
        params=dict(stages.plan.params),
        matmul_launch=cast("MatmulLaunch | None", emitted.launch),
        arguments=_arguments(kernel_ir, sources, sinks),
        built_ir=kernel_ir,
    )


def _kernel_workspaces(record: pipeline.PipelineResult) -> dict[str, int]:
    """Bytes of each kernel's own workspace (a stream-K matmul's), by its parameter's name."""
    return {
        param.buffer_name: param.dtype.itemsize * math.prod(param.shape)
        for stages in record.kernels
        for param in stages.kernel_ir.params
        if param.role == ParamRole.INTERMEDIATE
    }


def _compiled_from(record: pipeline.PipelineResult) -> Compiled:
    """``Compiled`` and its ``Kernel`` s, made from the pipeline's record."""
    segmented = record.segmented
    kernels = [
        _kernel_from(stages, sources, sinks)
        for stages, sources, sinks in zip(
            record.kernels, segmented.sources, segmented.sinks, strict=True
        )
    ]
    return Compiled(
        name=record.traced.name,
        kernels=kernels,
        global_intermediates=sorted(segmented.intermediates),
        timings=dict(record.timings),
        math_ir=record.math_ir,
        fusion=record.traced,
        intermediate_bytes={
            **{
                name: tv.numel * tv.dtype.itemsize
                for name, tv in sorted(segmented.intermediates.items())
            },
            **_kernel_workspaces(record),
        },
        built_segmented=segmented,
    )
