"""What the segmenter hands to the schedulers and the schedulers hand to lowering.

A :class:`KernelPlan` is one kernel's sub-fusion (its inputs and outputs live in global
memory) with the scheduler that took it and that scheduler's choices. A
:class:`SegmentedFusion` lists the plans in launch order and names the global
intermediates that pass values between them.
"""

from __future__ import annotations

from dataclasses import field

from pyfuse.ir.exprs import Expr, MmaOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.records import record
from pyfuse.ir.tensor import TensorView

# The matmul scheduler's name (``schedule_matmul.NAME``), here so that the segmenter and the
# pipeline can test for it without loading that scheduler: it loads with the first MMA.
MATMUL_SCHEDULER = "matmul"


def has_mma(fusion: Fusion) -> bool:
    """``fusion`` holds an MMA (what the matmul scheduler, and its rules, need)."""
    return any(isinstance(expr, MmaOp) for expr in fusion.exprs())


# eq=False on both: they hold mutable IR and are told apart by identity.
@record(eq=False)
class KernelPlan:
    """One kernel: its fusion segment, the scheduler that takes it and that scheduler's choices."""

    fusion: Fusion
    scheduler: str
    # The full-rank tensor whose loop domain every other tensor replays; lowering derives
    # every index from its logical indices.
    reference: TensorView | None = None
    # The heuristic's choices (block size, vector width, tiles, ...), shown in Kernel.params.
    params: dict[str, object] = field(default_factory=dict)
    # Why other schedulers declined this segment (scheduler name -> reason).
    declined: dict[str, str] = field(default_factory=dict)
    # Set when the first plan failed: the simpler plan taken and why the others failed.
    fallback: str | None = None


@record(eq=False)
class SegmentedFusion:
    """Kernels in launch order. ``sources`` maps each kernel input to where its data comes from:
    ("input", i) for the fusion's i-th input, ("intermediate", name) for a tensor an earlier
    kernel wrote; ``sinks`` maps each kernel output to ("output", i) or ("intermediate", name)."""

    kernels: list[KernelPlan]
    sources: list[list[tuple[str, int | str]]]
    sinks: list[list[tuple[str, int | str]]]
    intermediates: dict[str, TensorView]
    # Each kernel's exprs, in the segmented fusion: a failed kernel is cut along them.
    groups: list[list[Expr]] = field(default_factory=list)
    # Whether groups share exprs that each kernel recomputes (segment_recompute): a failed
    # kernel of such a segmentation is not cut; the fusion is segmented again without it.
    recomputed: bool = False
