"""Pointwise scheduler: one flat, vectorized, coalesced loop over the largest output.

Expects a kernel fusion of pointwise and metadata ops only (no reduction, no matmul).
Guarantees, on success:

- every global input read by a compute op is read through a local cache tensor, and
  every output is written from one, so global traffic is plain (vector) copies;
- the reference output's axes are merged into one and split as
  ``[BIDx, U (unrolled), TIDx, V (vectorized)]``; every other tensor replays that;
- ``params`` records ``vector_width`` (1 when the layout forbids vectors),
  ``threads``, ``unroll`` and ``alignment_bytes`` (the base-pointer alignment the
  vectorized variant assumes, checked at call time).

Vectorizing needs every global tensor that has the innermost axis to hold it
innermost and contiguous, and the innermost extent divisible by the width, so no
vector crosses a row. Broadcast operands are read once per element of the loop they
vary in.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyfuse.ir.exprs import LinearOp, MatmulOp, MmaOp, ReductionOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.iterdomain import ParallelType
from pyfuse.ir.target import TargetInfo
from pyfuse.ir.tensor import TensorView
from pyfuse.passes.scheduler_utils import (
    cache_inputs_and_outputs,
    replay_everywhere,
    uncovered_axis,
    vector_width,
)

NAME = "pointwise"


@dataclass(frozen=True)
class PointwiseParams:
    vector_width: int
    threads: int
    unroll: int

    def as_dict(self) -> dict[str, object]:
        return {"vector_width": self.vector_width, "threads": self.threads, "unroll": self.unroll}


def decline_reason(fusion: Fusion) -> str | None:
    """Why this scheduler cannot take ``fusion`` (None when it can)."""
    for expr in fusion.exprs():
        if isinstance(expr, ReductionOp):
            return f"T{expr.output.name} is a reduction"
        if isinstance(expr, MatmulOp | LinearOp | MmaOp):
            return f"T{expr.output.name} is a matmul"
    sizes = {tv.numel for tv in fusion.outputs}
    if len(sizes) > 1:
        # One loop nest covers one iteration space; outputs of other sizes go to other kernels.
        return f"outputs have different sizes {sorted(sizes)}"
    if fusion.outputs:
        return uncovered_axis(fusion, reference_output(fusion))
    return None


def reference_output(fusion: Fusion) -> TensorView:
    """The output with the most elements: its loop covers every other tensor's."""
    return max(fusion.outputs, key=lambda tv: tv.numel)


def choose_params(fusion: Fusion, reference: TensorView, target: TargetInfo) -> PointwiseParams:
    axes = reference.no_reductions
    vector = 1
    if axes:
        vector = vector_width(fusion, axes[-1], axes[-1].logical_extent, target)
    threads = 128
    vectors = max(1, reference.numel // vector)
    # Unroll when there is work for several waves of blocks: more loads in flight per thread.
    unroll = 4 if vectors >= threads * 4 * target.sm_count * 8 else 1
    return PointwiseParams(vector, threads, unroll)


def schedule(fusion: Fusion, target: TargetInfo) -> PointwiseParams:
    """Schedule ``fusion`` in place (see the module docstring)."""
    reason = decline_reason(fusion)
    if reason is not None:
        raise ValueError(f"pointwise scheduler cannot take this fusion: {reason}")
    reference = reference_output(fusion)
    params = choose_params(fusion, reference, target)
    cache_inputs_and_outputs(fusion)

    ndim = len(reference.loop)
    if ndim == 0:
        return params
    for _ in range(ndim - 1):
        reference.merge(0)
    if params.vector_width > 1:
        reference.split(0, params.vector_width)
    reference.split(0, params.threads)
    if params.unroll > 1:
        reference.split(0, params.unroll)
    reference.parallelize(0, ParallelType.BIDX)
    if params.unroll > 1:
        reference.parallelize(1, ParallelType.UNROLL)
    thread_axis = 2 if params.unroll > 1 else 1
    reference.parallelize(thread_axis, ParallelType.TIDX)
    if params.vector_width > 1:
        reference.parallelize(-1, ParallelType.VECTORIZE)

    replay_everywhere(fusion, reference)
    return params
