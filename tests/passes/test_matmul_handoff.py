"""The epilogue warps (passes/matmul_handoff.py, backend_ptx/matmul_handoff.py): which epilogue
the consumers can hand over and where, what the heuristic leaves in shared memory for it, the
kernel IR of both parts, and PTX that assembles without spills. The kernels run on the Hopper
simulator in tests/testing/test_ptx_sim.py (sim_cases.py), planted protocol bugs included."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
from check_utils import matmul_kernel, require_ptxas

import pyfuse as pf
from pyfuse.backend_ptx.emit import emit_ptx
from pyfuse.backend_ptx.matmul_host import register_split
from pyfuse.backend_ptx.matmul_template import matmul_directives
from pyfuse.backend_ptx.ptxas import assemble
from pyfuse.ir import kernel_ir as k
from pyfuse.ir.exprs import MmaOp
from pyfuse.ir.target import EPILOGUE_REGISTERS, HOPPER
from pyfuse.passes import pipeline
from pyfuse.passes.matmul_handoff import handoff_tensors
from pyfuse.passes.translate_patterns import translate_patterns

S = pf.spec
bf16, f32 = pf.bfloat16, pf.float32
X, W, B = S((512, 256), bf16), S((1024, 256), bf16), S((1024,), bf16)
EPILOGUE_WARPS = pf.MatmulParams(epilogue_warps=True)


def _linear_gelu(x: Any, w: Any, b: Any) -> Any:
    return pf.gelu(pf.linear(x, w, b), approximate="tanh")


def _handoff_names(fn: Callable[..., Any], specs: list[pf.Spec]) -> list[str] | None:
    fusion = pf.fuse(fn).trace(*specs)
    with fusion:
        translate_patterns(fusion)
    mmas = [e for e in fusion.exprs() if isinstance(e, MmaOp)]
    handoffs = handoff_tensors(fusion, mmas, 1)
    return None if handoffs is None else [str(t.dtype.name) for t in handoffs]


def _two_outputs(x: Any, w: Any) -> Any:
    y = x @ w.T
    return y, pf.gelu(y)


def _upcast_twice(x: Any, w: Any) -> Any:
    # the product is rounded to bf16 before .float(): the late part starts from it
    y = (x @ w.T).float()
    return (pf.gelu(y * 2.0) + y).to(pf.bfloat16)


@pytest.mark.parametrize(
    "fn, specs, found",
    [
        (_linear_gelu, [X, W, B], ["bfloat16"]),  # the linear, rounded with its bias
        (lambda x, w: pf.silu(x @ w.T) * 2.0, [X, W], ["bfloat16"]),
        # the gate/up pair: each product, rounded
        (lambda x, w1, w3: pf.silu(x @ w1.T) * (x @ w3.T), [X, W, W], ["bfloat16"] * 2),
        (lambda x, w: x @ w.T, [X, W], None),  # nothing after the product to hand over
        (lambda x, w: pf.gelu(x @ w.T).float(), [X, W], None),  # an f32 output
        (_two_outputs, [X, W], None),
        (_upcast_twice, [X, W], ["bfloat16"]),
    ],
)
def test_the_handoffs_are_the_first_16_bit_tensors_the_rest_reads_alone(fn, specs, found) -> None:  # type: ignore[no-untyped-def]
    assert _handoff_names(fn, specs) == found


def test_the_consumers_stage_the_linear_and_the_epilogue_warps_the_gelu() -> None:
    stage, loop = matmul_kernel(_linear_gelu, [X, W, B], EPILOGUE_WARPS)
    handoff = loop.handoff
    assert handoff is not None and len(loop.handoff_values) == 1
    assert stage.plan.params["epilogue_warps"] is True
    assert stage.kernel_ir.block == (128, loop.consumer_warpgroups + 1, 1)  # no fourth one
    # The output is staged over the handoff tile, box for box, instead of its own buffers.
    (store,) = loop.stores
    assert store.smem_offset == handoff.smem_offset
    assert handoff.nbytes == loop.tile_m * loop.tile_n * 2
    consumer_ops = {type(s).__name__ for s in k.walk(loop.epilogue)}
    late_loads = [s.value for s in k.walk(loop.late_epilogue) if isinstance(s, k.Store)]
    assert "StageStore" in consumer_ops
    assert any(isinstance(v, k.Unary) and v.op == "gelu_tanh" for v in late_loads), (
        "the gelu runs in the late part"
    )
    assert not any(
        isinstance(v, k.Unary) and v.op == "gelu_tanh"
        for s in k.walk(loop.epilogue)
        if isinstance(s, k.Store)
        for v in [s.value]
    )


def test_the_heuristic_leaves_the_handoff_tile_and_three_stages_at_128x256() -> None:
    stage, loop = matmul_kernel(
        _linear_gelu,
        [S((4096, 4096), bf16), S((14336, 4096), bf16), S((14336,), bf16)],
        EPILOGUE_WARPS,
    )
    assert (loop.tile_m, loop.tile_n, loop.stages) == (128, 256, 3)
    assert stage.kernel_ir.smem_bytes <= HOPPER.max_smem_per_block
    directives = matmul_directives(stage.kernel_ir)
    producer, consumer = register_split(loop, directives)
    # The producer warpgroup keeps enough for its three epilogue warps; 384 threads at 168.
    assert producer == EPILOGUE_REGISTERS and producer * 128 + consumer * 256 <= 168 * 384


@pytest.mark.parametrize(
    "fn, specs, params, why",
    [
        (lambda x, w: x @ w.T, [X, W], EPILOGUE_WARPS, "no 16-bit tensor"),
        (_linear_gelu, [X, W, B], pf.MatmulParams(epilogue_warps=True, pingpong=True), "ping"),
        # a 40-column tile has no TMA-store chunk: it keeps its tensor-core kernel
        (
            _linear_gelu,
            [S((1000, 64), bf16), S((40, 64), bf16), S((40,), bf16)],
            EPILOGUE_WARPS,
            "40-column",
        ),
        # five consumer warpgroups would leave the epilogue warps too few registers
        (
            _linear_gelu,
            [X, W, B],
            pf.MatmulParams(epilogue_warps=True, tile_m=320, tile_n=64),
            "320-row",
        ),
    ],
)
def test_epilogue_warps_that_cannot_apply_warn_and_keep_the_consumers_epilogue(
    fn, specs, params, why
) -> None:  # type: ignore[no-untyped-def]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stage, loop = matmul_kernel(fn, specs, params)
    assert loop.handoff is None and stage.plan.params["epilogue_warps"] is False
    assert "fallback" not in stage.plan.params  # still the tensor-core kernel
    assert any("epilogue_warps=True) not applied" in str(w.message) for w in caught)
    assert any(why in str(w.message) for w in caught)


# The bias inside the linear, and added after it (a separate epilogue input whose handoff
# code spilled 16 B at 88 registers for the epilogue warps).
@pytest.mark.parametrize(
    "fn",
    [_linear_gelu, lambda x, w, b: pf.gelu(pf.linear(x, w) + b, approximate="tanh")],
    ids=["linear_bias", "linear_plus_bias"],
)
def test_the_ptx_assembles_without_spills_and_with_its_register_split(
    fn: Callable[..., Any],
) -> None:
    stage, _ = matmul_kernel(
        fn,
        [S((4096, 4096), bf16), S((14336, 4096), bf16), S((14336,), bf16)],
        EPILOGUE_WARPS,
    )
    ptx = emit_ptx(stage.kernel_ir, HOPPER)
    assert f"setmaxnreg.dec.sync.aligned.u32 {EPILOGUE_REGISTERS};" in ptx
    assert "$L__epilogue_warps" in ptx and "bar.sync 5, 96;" in ptx
    require_ptxas()
    result = assemble(ptx)
    resources = result.kernels[stage.kernel_ir.name]
    assert resources.spill_store_bytes == 0 and resources.local_bytes == 0
    assert not result.problems(), result.problems()


def test_a_gate_up_pair_hands_over_both_products_and_stores_over_the_first() -> None:
    stage, loop = matmul_kernel(
        lambda x, w1, w3: pf.silu(x @ w1.T) * (x @ w3.T),
        [S((4096, 4096), bf16), S((14336, 4096), bf16), S((14336, 4096), bf16)],
        EPILOGUE_WARPS,
    )
    handoff = loop.handoff
    assert handoff is not None and handoff.tensors == 2 and len(loop.handoff_values) == 2
    assert (loop.tile_m, loop.tile_n, loop.stages) == (128, 128, 3)
    assert handoff.nbytes == 2 * loop.tile_m * loop.tile_n * 2
    assert stage.kernel_ir.smem_bytes <= HOPPER.max_smem_per_block
    staged = sorted(s.store for s in k.walk(loop.epilogue) if isinstance(s, k.StageStore))
    assert staged == [0, 1]  # each product into its own tile
    assert [s.store for s in k.walk(loop.late_epilogue) if isinstance(s, k.StageStore)] == [0]
    require_ptxas()
    result = assemble(emit_ptx(stage.kernel_ir, HOPPER))
    resources = result.kernels[stage.kernel_ir.name]
    assert resources.spill_store_bytes == 0 and resources.local_bytes == 0


def test_no_kernel_is_left_with_one_stage_for_a_k_of_several_tiles() -> None:
    # A 128x256 handoff tile beside 96 KiB stages (tile_k 128) would leave one stage, which
    # deadlocks (a stage is freed only once the next K tile's MMAs are issued): the epilogue
    # warps are refused instead, and the staged epilogue keeps two stages.
    params = pf.MatmulParams(epilogue_warps=True, tile_m=128, tile_n=256, tile_k=128)
    with pytest.warns(UserWarning, match="fewer than two stages"):
        _, loop = matmul_kernel(
            lambda x, w: pf.gelu(x @ w.T),
            [S((4096, 4096), bf16), S((14336, 4096), bf16)],
            params,
        )
    assert loop.handoff is None and loop.stages >= 2
    # Two such tiles of a gate/up pair hold 256 accumulators a thread: refused for that
    # first, and the heuristic's tile keeps two stages or more.
    params = pf.MatmulParams(epilogue_warps=True, smem_epilogue=True, tile_m=128, tile_n=256)
    with pytest.warns(UserWarning, match="accumulator registers"):
        _, loop = matmul_kernel(
            lambda x, w1, w3: pf.silu(x @ w1.T) * (x @ w3.T),
            [S((4096, 4096), bf16), S((14336, 4096), bf16), S((14336, 4096), bf16)],
            params,
        )
    assert loop.stages >= 2
    # One stage asked for outright is refused (the kernel falls back to the heuristic's
    # params, saying why).
    fusion = pf.fuse(lambda x, w: x @ w.T).trace(S((128, 256), bf16), S((128, 256), bf16))
    with pytest.warns(UserWarning, match="at least 2 stages"):
        result = pipeline.run(fusion, HOPPER, pf.MatmulParams(stages=1))
    plan = result.kernels[0].plan
    assert plan.params["fallback"] == "heuristic matmul" and plan.params["stages"] >= 2


def _gate_up(x: Any, w1: Any, w3: Any) -> Any:
    return pf.silu(x @ w1.T) * (x @ w3.T)


@pytest.mark.parametrize(
    "fn, specs, chosen",
    [
        # a costly epilogue over many tiles a CTA and a long K: handed over
        (_linear_gelu, [S((4096, 4096), bf16), S((14336, 4096), bf16), S((14336,), bf16)], True),
        (_gate_up, [S((4096, 4096), bf16), S((14336, 4096), bf16), S((14336, 4096), bf16)], True),
        # a plain GEMM and a bias alone: nothing costly to hand over (a GEMM lost 1-2%)
        (lambda x, w: x @ w.T, [S((8192, 8192), bf16), S((8192, 8192), bf16)], False),
        (
            lambda x, w, b: pf.linear(x, w, b),
            [S((4096, 4096), bf16), S((14336, 4096), bf16), S((14336,), bf16)],
            False,
        ),
        # a short main loop would not hide the three warps' epilogue
        (_linear_gelu, [S((4096, 512), bf16), S((14336, 512), bf16), S((14336,), bf16)], False),
        # one tile a CTA: no next main loop to hide under
        (_linear_gelu, [S((128, 4096), bf16), S((14336, 4096), bf16), S((14336,), bf16)], False),
    ],
)
def test_the_heuristic_chooses_epilogue_warps_for_a_costly_epilogue_over_long_loops(
    fn, specs, chosen
) -> None:  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the default is chosen quietly
        stage, loop = matmul_kernel(fn, specs, None)
    assert stage.plan.params["epilogue_warps"] is chosen
    assert (loop.handoff is not None) is chosen


def test_a_user_can_turn_the_default_epilogue_warps_off() -> None:
    stage, loop = matmul_kernel(
        _linear_gelu,
        [S((4096, 4096), bf16), S((14336, 4096), bf16), S((14336,), bf16)],
        pf.MatmulParams(epilogue_warps=False),
    )
    assert loop.handoff is None and stage.plan.params["epilogue_warps"] is False
    assert loop.stages == 4
