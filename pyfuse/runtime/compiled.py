"""What ``FusedFunction.compile`` returns: :class:`Compiled` and its :class:`Kernel` s.

These classes hold the compile's artifacts (PTX, scheduled IR as text, launch shapes) and
import nothing of the compiler, so a variant restored from the on-disk variant cache
(:mod:`pyfuse.runtime.variant_cache`) is usable without loading the passes or the PTX
emitter: a launch reads the PTX, the launch shapes, the argument mapping and, for a matmul
kernel, its tensor maps as data (:class:`~pyfuse.backend_ptx.tensor_maps.MatmulLaunch`).
The kernel IR and the segmented fusion, which only introspection and tests read, are then
rebuilt on first access by running the compile once more.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import TYPE_CHECKING, Any

from pyfuse.ir.fusion import Fusion
from pyfuse.ir.records import record

if TYPE_CHECKING:
    from pyfuse.backend_ptx.tensor_maps import MatmulLaunch
    from pyfuse.ir.kernel_ir import Kernel as KernelIR
    from pyfuse.passes.plan import SegmentedFusion


@record(eq=False)
class Kernel:
    """One compiled kernel: its PTX, its scheduled IR and its launch shape:
    ``fused.compile(x).kernels[0].ptx``."""

    name: str
    scheduler: str
    ptx: str
    ir: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem_bytes: int
    params: dict[str, object]
    # A TMA (matmul) kernel's tensor maps and grid facts, planned when it was built, so that
    # its launch needs no kernel IR; None for every other kernel.
    matmul_launch: MatmulLaunch | None = None
    # Where each kernel argument comes from: ("input", i), ("output", i) or
    # ("intermediate", name), in the order of the kernel's parameters.
    arguments: list[tuple[str, int | str]] = field(default_factory=list, repr=False)
    # None for a kernel restored from the variant cache until ``kernel_ir`` is read.
    built_ir: KernelIR | None = field(default=None, repr=False)
    owner: Compiled | None = field(default=None, repr=False)

    @property
    def kernel_ir(self) -> KernelIR:
        """The kernel IR the PTX was emitted from (rebuilt once for a cached variant)."""
        if self.built_ir is None:
            assert self.owner is not None, "a kernel without IR belongs to a cached variant"
            self.owner.rebuild()
        assert self.built_ir is not None
        return self.built_ir

    def __repr__(self) -> str:
        return (
            f"<pyfuse.Kernel {self.name} scheduler={self.scheduler} grid={self.grid} "
            f"block={self.block} smem={self.smem_bytes}>"
        )


@record(eq=False)
class Compiled:
    """All kernels of a fused function for one input signature:
    ``compiled = fused.compile(pf.spec((8, 64), pf.float32))``."""

    name: str
    kernels: list[Kernel]
    global_intermediates: list[str]
    timings: dict[str, float]
    math_ir: str
    fusion: Fusion = field(repr=False)
    # Bytes of each global intermediate, by name (the runtime's workspace plan).
    intermediate_bytes: dict[str, int] = field(default_factory=dict, repr=False)
    built_segmented: SegmentedFusion | None = field(default=None, repr=False)
    # For a variant restored from the variant cache: compiles ``fusion`` again and returns
    # the full result, from which the kernel IR and the segmented fusion are taken.
    recompile: Callable[[], Compiled] | None = field(default=None, repr=False)
    # The GPU side of this variant (``runtime.launch.CompiledRuntime``): set when the runtime
    # compiles it, or at its first call.
    runtime: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        for kernel in self.kernels:
            kernel.owner = self

    @property
    def ptx(self) -> str:
        return "\n".join(kernel.ptx for kernel in self.kernels)

    @property
    def segmented(self) -> SegmentedFusion:
        """The fusion cut into kernels (rebuilt once for a cached variant)."""
        if self.built_segmented is None:
            self.rebuild()
        assert self.built_segmented is not None
        return self.built_segmented

    def rebuild(self) -> None:
        """Fill in the kernel IR and segmentation of a variant restored from the cache, by
        compiling its fusion again; the PTX must come out as the cache had it."""
        if self.built_segmented is not None and all(k.built_ir is not None for k in self.kernels):
            return
        assert self.recompile is not None, "only a cached variant lacks its kernel IR"
        full = self.recompile()
        if [k.ptx for k in full.kernels] != [k.ptx for k in self.kernels]:
            from pyfuse.errors import PyfuseError

            raise PyfuseError(
                "the variant cache gave PTX that this pyfuse does not produce; "
                "clear PYFUSE_CACHE_DIR (or set PYFUSE_DISABLE_CACHE=1) and report this",
                op=self.name,
            )
        for kernel, fresh in zip(self.kernels, full.kernels, strict=True):
            kernel.built_ir = fresh.built_ir
        self.built_segmented = full.built_segmented

    def __call__(self, *arrays: object) -> Any:
        from pyfuse.runtime.launch import run_compiled

        try:
            return run_compiled(self, arrays)
        except Exception as error:
            from pyfuse.runtime import diagnose  # loads only for an error

            if not diagnose.is_pyfuse_bug(error):
                raise
            raise diagnose.internal_error(
                error, self.fusion, name=self.name, doing=f"preparing a call of {self.name}"
            ) from error

    def __repr__(self) -> str:
        names = ", ".join(k.name for k in self.kernels)
        return f"<pyfuse.Compiled {self.name}: {len(self.kernels)} kernel(s) [{names}]>"
