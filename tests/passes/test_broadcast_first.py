"""broadcast_first.py: ``broadcast(op(input))`` becomes ``op(broadcast(input))``, values kept;
the reduction scheduler asks for it on wide persistent rows only (their weight casts were
hoisted into whole-row arrays and spilled), so narrower rows keep their plans."""

from __future__ import annotations

import numpy as np

import pyfuse as pf
from pyfuse.ir.exprs import BroadcastOp, CastOp
from pyfuse.ir.interpreter import evaluate
from pyfuse.ir.target import HOPPER
from pyfuse.passes import pipeline
from pyfuse.passes.broadcast_first import broadcast_first
from pyfuse.testing.simulator import random_inputs


def _weighted(x: pf.Tensor, w: pf.Tensor, b: pf.Tensor) -> pf.Tensor:
    return x.float() * w.float() + pf.exp(b)


def test_a_weight_is_broadcast_before_its_cast_and_the_values_stay() -> None:
    specs = [pf.spec((3, 40), pf.bfloat16), pf.spec((40,), pf.bfloat16), pf.spec((40,), pf.float32)]
    fusion = pf.fuse(_weighted).trace(*specs)
    arrays = random_inputs(specs, 0)
    before = evaluate(fusion, arrays)
    with fusion:
        assert broadcast_first(fusion) == 2  # the weight's cast and b's exp
    broadcasts = [e for e in fusion.exprs() if isinstance(e, BroadcastOp)]
    assert len(broadcasts) == 2 and all(fusion.is_input(e.tensor_inputs[0]) for e in broadcasts)
    (cast,) = [e for e in fusion.exprs() if isinstance(e, CastOp) and e.output.ndim == 2][-1:]
    assert isinstance(cast.tensor_inputs[0].definition, BroadcastOp)
    for got, want in zip(evaluate(fusion, arrays), before, strict=True):
        np.testing.assert_array_equal(got, want)
    with fusion:
        assert broadcast_first(fusion) == 0  # nothing left to move


def test_a_cast_with_other_uses_stays() -> None:
    # The cast is read unbroadcast too: moving the broadcast would compute it twice.
    def scaled_twice(x: pf.Tensor, w: pf.Tensor) -> tuple[pf.Tensor, pf.Tensor]:
        wide = w.float()
        return x * wide, wide * 2

    specs = [pf.spec((3, 40), pf.float32), pf.spec((40,), pf.bfloat16)]
    fusion = pf.fuse(scaled_twice).trace(*specs)
    with fusion:
        assert broadcast_first(fusion) == 0


def _norm_kernel(cols: int) -> pipeline.KernelStages:
    specs = [pf.spec((2, cols), pf.bfloat16)] + [pf.spec((cols,), pf.bfloat16)] * 2
    fusion = pf.fuse(lambda x, w, b: pf.layer_norm(x, w, b)).trace(*specs)
    (stages,) = pipeline.run(fusion, HOPPER).kernels
    return stages


def _weights_aliased(stages: pipeline.KernelStages) -> int:
    fusion = stages.plan.fusion
    return sum(
        1
        for tv in fusion.tensors()
        if tv.alias_of is not None and isinstance(tv.definition, BroadcastOp)
    )


def test_only_wide_rows_read_their_weights_at_the_rows_rank() -> None:
    # 25000 at 1024 threads: 32 a thread (ragged) -> w and b broadcast first, aliased.
    assert _weights_aliased(_norm_kernel(25000)) == 2
    # 4096: 512 threads of 8 -> the plan (and the golden PTX) as before.
    assert _weights_aliased(_norm_kernel(4096)) == 0
