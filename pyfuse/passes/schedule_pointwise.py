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

from pyfuse.ir.caching import cache_after, cache_before
from pyfuse.ir.exprs import LinearOp, MatmulOp, MmaOp, ReductionOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.id_model import IdMappingMode, IdModel
from pyfuse.ir.iterdomain import ParallelType
from pyfuse.ir.target import TargetInfo
from pyfuse.ir.tensor import TensorView
from pyfuse.passes.transform_replay import replay_like

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
    return None


def reference_output(fusion: Fusion) -> TensorView:
    """The output with the most elements: its loop covers every other tensor's."""
    return max(fusion.outputs, key=lambda tv: tv.numel)


def _innermost_is_contiguous(tv: TensorView, inner_axis_ids: set[int], id_model: IdModel) -> bool:
    """``tv`` either lacks the reference's innermost axis or stores it innermost, stride 1."""
    has_it = [
        axis
        for axis in tv.no_reductions
        if not axis.is_broadcast
        and any(id_model.mapped(axis, other, IdMappingMode.PERMISSIVE) for other in
                _axes(inner_axis_ids, id_model))
    ]
    if not has_it:
        return True
    allocation = [axis for axis in tv.maybe_allocation if not axis.is_broadcast]
    if not allocation or allocation[-1] is not has_it[-1]:
        return False
    return tv.maybe_contiguity[-1] is True


def _axes(ids: set[int], id_model: IdModel) -> list:  # type: ignore[type-arg]
    return [axis for axis in id_model_axes(id_model) if id(axis) in ids]


def id_model_axes(id_model: IdModel) -> list:  # type: ignore[type-arg]
    return [axis for group in id_model.groups(IdMappingMode.EXACT) for axis in group]


def choose_params(fusion: Fusion, reference: TensorView, target: TargetInfo) -> PointwiseParams:
    id_model = IdModel(fusion)
    globals_ = [*fusion.inputs, *fusion.outputs]
    widest = max(tv.dtype.itemsize for tv in globals_)
    vector = max(1, target.vector_bytes // widest)
    real_axes = [axis for axis in reference.no_reductions if not axis.is_broadcast]
    if not real_axes:
        vector = 1
    else:
        innermost = reference.no_reductions[-1]
        inner_extent = innermost.logical_extent
        inner_ids = {id(innermost)}
        while vector > 1 and inner_extent % vector:
            vector //= 2
        if innermost.is_broadcast:
            vector = 1
        elif not all(_innermost_is_contiguous(tv, inner_ids, id_model) for tv in globals_):
            vector = 1
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
    for tv in list(fusion.inputs):
        if fusion.uses_in_fusion(tv):
            cache_after(fusion, tv)
    for tv in list(fusion.outputs):
        cache_before(fusion, tv)

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

    id_model = IdModel(fusion)
    for tv in fusion.tensors():
        if tv is reference or fusion.is_input(tv):
            continue
        replay_like(tv, reference, id_model)
    return params
