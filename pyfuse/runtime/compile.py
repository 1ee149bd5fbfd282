"""The compile driver: the function that makes :class:`~pyfuse.runtime.compiled.Compiled`
results from a traced Fusion.

``compile_fusion`` runs the pass pipeline and the PTX emitter; it needs no GPU. Importing
this module imports both (the call path does so only at its first compile the variant cache
does not answer, :mod:`pyfuse.runtime.calls`) and tells the variant cache which sources
they were loaded from. Each
stage's artifact is kept (math IR, scheduled IR, kernel IR, PTX) and drives both
``PYFUSE_DUMP`` and the introspection properties. A ``jit`` hook gets each kernel's name and
PTX the moment it is emitted (before the next kernel is planned), so the runtime can start
the driver's JIT beside the rest of the compile.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

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
        else:
            result.append(sinks[param.index])
    return result


# Where a compile hands each kernel's (name, PTX) as soon as it exists.
JitHook = Callable[[str, str], None]


def _dump(stage: str, text: str) -> None:
    print(f"==== pyfuse {stage} ====\n{text}", file=sys.stderr)


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
    # Stages are rendered as text only when PYFUSE_DUMP asks for them.
    dump = knobs.dump()
    if "ir" in dump:
        _dump("ir", str(fusion))
    built: dict[int, Kernel] = {}
    emit_seconds = 0.0

    def emit(index: int, stages: pipeline.KernelStages) -> None:
        """One kernel's PTX; inside the pipeline, so a kernel the emitter cannot write takes a
        simpler plan."""
        nonlocal emit_seconds
        kernel_ir = stages.kernel_ir
        start = time.perf_counter()
        ptx = emit_ptx(kernel_ir, target)
        emit_seconds += time.perf_counter() - start
        matmul_launch = None
        if kernel_ir.main_loop() is not None:
            from pyfuse.backend_ptx import matmul_host  # the emitter loaded it for this kernel

            # Planned here, as part of building the kernel: its launch then needs no IR.
            matmul_launch = matmul_host.matmul_launch(kernel_ir)
        if jit is not None:
            jit(kernel_ir.name, ptx)
        built[index] = Kernel(
            name=kernel_ir.name,
            scheduler=stages.plan.scheduler,
            ptx=ptx,
            ir=stages.scheduled_ir,
            grid=kernel_ir.grid,
            block=kernel_ir.block,
            smem_bytes=kernel_ir.smem_bytes,
            params=dict(stages.plan.params),
            matmul_launch=matmul_launch,
            arguments=[],  # set below, once segmentation is final
            built_ir=kernel_ir,
        )

    result = pipeline.run(fusion, target, matmul, emit)
    timings = dict(result.timings)
    kernels = []
    for index, (stages, sources, sinks) in enumerate(
        zip(result.kernels, result.segmented.sources, result.segmented.sinks, strict=True)
    ):
        kernel_ir = stages.kernel_ir
        if "scheduled" in dump:
            _dump("scheduled", stages.scheduled_ir)
        if "kernel" in dump:
            from pyfuse.ir.kernel_printer import kernel_to_str  # loads only for this dump

            _dump("kernel", kernel_to_str(kernel_ir))
        kernel = built[index]
        if "ptx" in dump:
            _dump("ptx", kernel.ptx)
        kernel.params = dict(stages.plan.params)  # a fallback's note comes after emission
        kernel.arguments = _arguments(kernel_ir, sources, sinks)
        kernels.append(kernel)
    timings["emit"] = emit_seconds
    return Compiled(
        name=fusion.name,
        kernels=kernels,
        global_intermediates=sorted(result.segmented.intermediates),
        timings=timings,
        math_ir=result.math_ir,
        fusion=fusion,
        intermediate_bytes={
            name: tv.numel * tv.dtype.itemsize
            for name, tv in sorted(result.segmented.intermediates.items())
        },
        built_segmented=result.segmented,
    )
