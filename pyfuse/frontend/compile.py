"""Compilation results: :class:`Compiled` and :class:`Kernel`, and the function that makes them.

``compile_fusion`` runs the pass pipeline and the PTX emitter; it needs no GPU. Each
stage's artifact is kept (math IR, scheduled IR, kernel IR, PTX) and drives both
``PYFUSE_DUMP`` and the introspection properties.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any

from pyfuse import knobs
from pyfuse.backend_ptx.emit import emit_ptx
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.kernel_ir import Kernel as KernelIR
from pyfuse.ir.kernel_ir import ParamRole
from pyfuse.ir.params import MatmulParams
from pyfuse.ir.target import TargetInfo
from pyfuse.passes import pipeline
from pyfuse.passes.plan import SegmentedFusion


@dataclass
class Kernel:
    """One compiled kernel: its PTX, its scheduled IR and its launch shape."""

    name: str
    scheduler: str
    ptx: str
    ir: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem_bytes: int
    params: dict[str, object]
    kernel_ir: KernelIR = field(repr=False)
    # Where each kernel argument comes from: ("input", i), ("output", i) or
    # ("intermediate", name), in the order of the kernel's parameters.
    arguments: list[tuple[str, int | str]] = field(default_factory=list, repr=False)

    def __repr__(self) -> str:
        return (
            f"<pyfuse.Kernel {self.name} scheduler={self.scheduler} grid={self.grid} "
            f"block={self.block} smem={self.smem_bytes}>"
        )


@dataclass
class Compiled:
    """All kernels of a fused function for one input signature."""

    name: str
    kernels: list[Kernel]
    global_intermediates: list[str]
    timings: dict[str, float]
    math_ir: str
    fusion: Fusion = field(repr=False)
    segmented: SegmentedFusion = field(repr=False)
    # Set by the runtime the first time the function is called on a GPU.
    runtime: Any = field(default=None, repr=False)

    @property
    def ptx(self) -> str:
        return "\n".join(kernel.ptx for kernel in self.kernels)

    def __call__(self, *arrays: object) -> Any:
        from pyfuse.frontend.runtime import run_compiled

        return run_compiled(self, arrays)

    def __repr__(self) -> str:
        names = ", ".join(k.name for k in self.kernels)
        return f"<pyfuse.Compiled {self.name}: {len(self.kernels)} kernel(s) [{names}]>"


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


def _dump(stage: str, text: str) -> None:
    print(f"==== pyfuse {stage} ====\n{text}", file=sys.stderr)


def compile_fusion(
    fusion: Fusion, target: TargetInfo, matmul: MatmulParams | None = None
) -> Compiled:
    """Passes and PTX emission for a traced fusion; no GPU needed."""
    # Stages are rendered as text only when PYFUSE_DUMP asks for them.
    dump = knobs.dump()
    if "ir" in dump:
        _dump("ir", str(fusion))
    result = pipeline.run(fusion, target, matmul)
    timings = dict(result.timings)
    kernels = []
    emit_seconds = 0.0
    for stages, sources, sinks in zip(
        result.kernels, result.segmented.sources, result.segmented.sinks, strict=True
    ):
        kernel_ir = stages.kernel_ir
        if "scheduled" in dump:
            _dump("scheduled", stages.scheduled_ir)
        if "kernel" in dump:
            from pyfuse.ir.kernel_printer import kernel_to_str  # loads only for this dump

            _dump("kernel", kernel_to_str(kernel_ir))
        start = time.perf_counter()
        ptx = emit_ptx(kernel_ir, target)
        emit_seconds += time.perf_counter() - start
        if "ptx" in dump:
            _dump("ptx", ptx)
        kernels.append(
            Kernel(
                name=kernel_ir.name,
                scheduler=stages.plan.scheduler,
                ptx=ptx,
                ir=stages.scheduled_ir,
                grid=kernel_ir.grid,
                block=kernel_ir.block,
                smem_bytes=kernel_ir.smem_bytes,
                params=dict(stages.plan.params),
                kernel_ir=kernel_ir,
                arguments=_arguments(kernel_ir, sources, sinks),
            )
        )
    timings["emit"] = emit_seconds
    return Compiled(
        name=fusion.name,
        kernels=kernels,
        global_intermediates=sorted(result.segmented.intermediates),
        timings=timings,
        math_ir=result.math_ir,
        fusion=fusion,
        segmented=result.segmented,
    )
