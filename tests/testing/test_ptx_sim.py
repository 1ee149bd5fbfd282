"""The Hopper simulator (pyfuse.testing.ptx_sim): every tensor-core matmul kernel of
sim_cases.py matches the reference on the CPU under several interleavings, and each kind of
pipeline bug planted in a lowered kernel's PTX is reported."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest
from sim_cases import CASES

import pyfuse as pf
from pyfuse.backend_ptx.emit import emit_ptx
from pyfuse.ir.target import HOPPER
from pyfuse.passes import pipeline
from pyfuse.testing.ptx_sim import SimulationError, run_kernel
from pyfuse.testing.ptx_sim.parse import parse_module
from pyfuse.testing.simulator import poison, random_inputs, run_on_simulator


def _compile(
    fn: Callable[..., object], specs: list[pf.Spec], params: pf.MatmulParams | None
) -> tuple[pf.FusedFunction, pf.Fusion, pipeline.PipelineResult]:
    fused = pf.fuse(fn)
    fusion = fused.trace(*specs)
    result = pipeline.run(
        fusion, HOPPER, params, emit=lambda st: pipeline.Emitted(emit_ptx(st.kernel_ir, HOPPER))
    )
    return fused, fusion, result


def _close(got: np.ndarray, want: np.ndarray) -> None:
    g, w = got.astype(np.float64), want.astype(np.float64)
    # 16-bit outputs: a product summed in another order may round one ulp the other way.
    tolerance = 1e-2 if got.dtype.itemsize == 2 else 1e-5
    assert np.allclose(g, w, rtol=tolerance, atol=tolerance), float(np.nanmax(np.abs(g - w)))


@pytest.mark.parametrize("name", sorted(CASES))
def test_matmul_kernel_matches_the_reference_under_interleavings(name: str) -> None:
    fn, specs, params = CASES[name]
    fused, fusion, result = _compile(fn, specs, params)
    assert any(st.plan.scheduler == "matmul" for st in result.kernels), name
    output_specs = [(tv.shape, tv.dtype) for tv in fusion.outputs]
    for data_seed, schedule_seed in ((0, 0), (1, 7)):
        arrays = random_inputs(specs, data_seed)
        want = fused.reference(*arrays)
        wanted = want if isinstance(want, tuple) else (want,)
        got = run_on_simulator(result, arrays, output_specs, schedule_seed=schedule_seed)
        for g, w in zip(got, wanted, strict=True):
            _close(g, w)


def test_a_persistent_kernel_on_fewer_ctas_than_tiles_covers_every_tile() -> None:
    fn, specs, params = CASES["persistent_swizzled"]
    fused, fusion, result = _compile(fn, specs, params)
    (stages,) = result.kernels
    arrays = random_inputs(specs, 3)
    out = poison(fusion.outputs[0].shape, fusion.outputs[0].dtype)
    run_kernel(stages.kernel_ir, stages.emitted.ptx, arrays, [out], grid=(2, 1, 1), order="late")
    _close(out, fused.reference(*arrays))


@pytest.mark.parametrize("order", ["eager", "late"])
def test_each_warpgroup_reloads_its_vectors_for_every_tile(order: str) -> None:
    # One CTA: each ping-pong warpgroup computes three of the six tiles, its bias and row
    # scale copies reloaded (and their barrier's phase flipped) for each.
    fn, specs, params = CASES["pingpong_bias_and_row_scale"]
    fused, fusion, result = _compile(fn, specs, params)
    (stages,) = result.kernels
    loop = stages.kernel_ir.main_loop()
    assert loop is not None and {v.role for v in loop.vectors} == {"m", "n"}
    arrays = random_inputs(specs, 5)
    out = poison(fusion.outputs[0].shape, fusion.outputs[0].dtype)
    run_kernel(stages.kernel_ir, stages.emitted.ptx, arrays, [out], grid=(1, 1, 1), order=order)
    _close(out, fused.reference(*arrays))


@pytest.mark.parametrize("order", ["eager", "late"])
def test_the_epilogue_warps_take_every_tile_of_one_cta(order: str) -> None:
    # One CTA computes all six tiles: the handoff tile is written, read, stored and handed
    # back six times, its two barriers' phases flipping each time.
    fn, specs, params = CASES["epilogue_warps_linear_bias_gelu"]
    fused, fusion, result = _compile(fn, specs, params)
    (stages,) = result.kernels
    loop = stages.kernel_ir.main_loop()
    assert loop is not None and loop.handoff is not None and loop.consumer_warpgroups == 2
    arrays = random_inputs(specs, 6)
    out = poison(fusion.outputs[0].shape, fusion.outputs[0].dtype)
    run_kernel(stages.kernel_ir, stages.emitted.ptx, arrays, [out], grid=(1, 1, 1), order=order)
    _close(out, fused.reference(*arrays))


_HANDOFF_BUGS = {
    # the consumers overwrite the handoff before its TMA stores have read it
    "no_empty_wait": (
        r"(\$L__handoff_empty_\d+:\n\s+mbarrier.try_wait[^\n]*\n\s+@!%p\d+ bra [^\n]*\n)",
        "",
    ),
    # the TMA unit reads the output before the generic-proxy writes are fenced
    "no_fence": (r"fence.proxy.async.shared::cta;\n(\s+bar.sync 5)", r"\1"),
    # the tile is handed back while its stores still read it
    "no_read_wait": (
        r"@%p\d+ cp.async.bulk.wait_group.read 0;\n(\s+@%p\d+ mbarrier.arrive[^\n]*\n)",
        r"\1",
    ),
}


@pytest.mark.parametrize("bug", sorted(_HANDOFF_BUGS))
def test_a_planted_handoff_bug_is_reported_or_gives_a_wrong_result(bug: str) -> None:
    fn, specs, params = CASES["epilogue_warps_linear_bias_gelu"]
    fused, fusion, result = _compile(fn, specs, params)
    (stages,) = result.kernels
    assert stages.emitted is not None
    ptx = _mutate(stages.emitted.ptx, *_HANDOFF_BUGS[bug])
    arrays = random_inputs(specs, 0)
    out = poison(fusion.outputs[0].shape, fusion.outputs[0].dtype)
    try:
        run_kernel(stages.kernel_ir, ptx, arrays, [out], grid=(1, 1, 1), order="late")
    except SimulationError:
        return
    with pytest.raises(AssertionError):
        _close(out, fused.reference(*arrays))


# ---- planted bugs ------------------------------------------------------------------------------

# One CTA, 16 K tiles through 7 stages: the ring wraps twice, so a stage freed too early is
# overwritten while a wgmma still reads it.
_LONG_K = (
    lambda a, b: a @ b.T,
    [pf.spec((128, 1024), pf.bfloat16), pf.spec((64, 1024), pf.bfloat16)],
)


def _long_k_kernel(
    pingpong: bool = False,
) -> tuple[pf.FusedFunction, pf.Fusion, pipeline.KernelStages]:
    params = pf.MatmulParams(tile_n=64, stages=4, pingpong=pingpong)
    fused, fusion, result = _compile(*_LONG_K, params)
    (stages,) = result.kernels
    return fused, fusion, stages


def _run_mutated(
    stages: pipeline.KernelStages, fusion: pf.Fusion, ptx: str, order: str, seed: int = 0
) -> None:
    arrays = random_inputs(_LONG_K[1], 0)
    out = poison(fusion.outputs[0].shape, fusion.outputs[0].dtype)
    run_kernel(stages.kernel_ir, ptx, arrays, [out], order=order, seed=seed)


def _mutate(ptx: str, pattern: str, replacement: str, count: int = 0) -> str:
    mutated, n = re.subn(pattern, replacement, ptx, count=count, flags=re.MULTILINE)
    assert n, f"the planted bug's pattern {pattern!r} is not in the kernel"
    return mutated


def test_the_unmutated_long_k_kernel_is_clean_in_every_order() -> None:
    fused, fusion, stages = _long_k_kernel()
    for order, seed in (("eager", 0), ("eager", 5), ("late", 1)):
        arrays = random_inputs(_LONG_K[1], seed)
        out = poison(fusion.outputs[0].shape, fusion.outputs[0].dtype)
        run_kernel(stages.kernel_ir, stages.emitted.ptx, arrays, [out], order=order, seed=seed)
        _close(out, fused.reference(*arrays))


@pytest.mark.parametrize(
    ("bug", "pattern", "replacement", "message"),
    [
        (
            # The cooperative consumer releases a K tile's stage right after wait_group 0;
            # waiting only for the tile before frees the stage its wgmmas still read.
            "stage freed before its wgmmas retire",
            r"^(\s*wgmma\.wait_group\.sync\.aligned) 0;\n",
            r"\1 1;\n",
            "the wgmma of line [0-9]+ .* released too early|in flight",
        ),
        (
            "expect-tx too small",
            r"expect_tx\.release\.cta\.shared::cta\.b64 _, \[(%r\d+)\], (\d+);",
            lambda m: m.group(0).replace(m.group(2), str(int(m.group(2)) // 2)),
            "not yet written|unbalanced|-[0-9]+ transaction bytes to go",
        ),
        (
            "expect-tx too large",
            r"expect_tx\.release\.cta\.shared::cta\.b64 _, \[(%r\d+)\], (\d+);",
            lambda m: m.group(0).replace(m.group(2), str(int(m.group(2)) * 2)),
            "deadlock(.|\n)* [1-9][0-9]* transaction bytes to go",
        ),
        (
            "no fence after mbarrier.init",
            r"^.*fence\.mbarrier_init.*\n",
            "",
            "fence.mbarrier_init",
        ),
        (
            "consumer does not wait for a full stage",
            r"^\$L__full_wait_\d+:\n.*try_wait.*\n.*bra \$L__full_wait_\d+;\n",
            "",
            "not yet written|nothing ever wrote",
        ),
        (
            "consumer waits on the wrong phase",
            r"(\$L__full_wait_\d+:\n\s*mbarrier\.try_wait\.parity[^,]*, \[[^\]]*\]), %r\d+;",
            r"\1, 1;",
            "not yet written|nothing ever wrote|released too early",
        ),
        ("no wgmma.fence", r"^\s*wgmma\.fence\.sync\.aligned;\n", "", "wgmma.fence"),
        (
            # Ping-pong: its main loop waits wait_group 1, the epilogue's wait_group 0 is last.
            "accumulators read before the last wait",
            r"^\s*wgmma\.wait_group\.sync\.aligned 0;\n",
            "",
            "in flight",
        ),
    ],
)
def test_a_planted_pipeline_bug_is_reported(
    bug: str, pattern: str, replacement: object, message: str
) -> None:
    _, fusion, stages = _long_k_kernel(pingpong=bug == "accumulators read before the last wait")
    ptx = _mutate(stages.emitted.ptx, pattern, replacement)  # type: ignore[arg-type]
    found = []
    for order, seed in (("late", 0), ("eager", 1), ("eager", 2)):
        try:
            _run_mutated(stages, fusion, ptx, order, seed)
        except SimulationError as error:
            found.append(str(error))
    assert found, f"{bug}: no interleaving reported it"
    assert any(re.search(message, text) for text in found), f"{bug}: {found}"


def _deep_staging_kernel(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[pf.Fusion, pipeline.KernelStages, list[np.ndarray]]:
    """A persistent GEMM of four 128x128 tiles staged through four buffers of 64-byte rows
    (four 32-column chunks a tile), for one CTA: sixteen chunks through the four buffers."""
    from pyfuse.passes import matmul_epilogue

    monkeypatch.setattr(matmul_epilogue, "BUFFERS_PER_WARPGROUP", 4)
    monkeypatch.setattr(matmul_epilogue, "WIDEST_STAGED_ROW", 64)
    specs = [pf.spec((256, 64), pf.bfloat16), pf.spec((256, 64), pf.bfloat16)]
    params = pf.MatmulParams(persistent=True, tile_m=128, tile_n=128)
    _, fusion, result = _compile(lambda a, b: a @ b.T, specs, params)
    (stages,) = result.kernels
    return fusion, stages, random_inputs(specs, 0)


def _run_on_one_cta(
    fusion: pf.Fusion,
    stages: pipeline.KernelStages,
    arrays: list[np.ndarray],
    ptx: str,
    seed: int,
    order: str = "eager",
) -> np.ndarray:
    out = poison(fusion.outputs[0].shape, fusion.outputs[0].dtype)
    run_kernel(stages.kernel_ir, ptx, arrays, [out], seed=seed, order=order, grid=(1, 1, 1))
    return out


def test_four_staging_buffers_keep_three_stores_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    fusion, stages, arrays = _deep_staging_kernel(monkeypatch)
    ptx = stages.emitted.ptx
    waits = re.findall(r"cp\.async\.bulk\.wait_group\.read (\d);", ptx)
    assert waits and set(waits) == {"2", "3"}, waits
    want = arrays[0].astype(np.float64) @ arrays[1].astype(np.float64).T
    for seed in (0, 1):
        got = _run_on_one_cta(fusion, stages, arrays, ptx, seed).astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2 * np.abs(want).max())
    # One wait too few, at a tile's first chunk or inside a tile: a buffer still being read
    # by its TMA store is written again.
    for wait in ("2", "3"):
        bad = re.sub(rf"wait_group\.read {wait};", f"wait_group.read {int(wait) + 1};", ptx)
        found = []
        for order, seed in (("late", 0), ("eager", 1), ("eager", 2)):
            try:
                _run_on_one_cta(fusion, stages, arrays, bad, seed, order)
            except SimulationError as error:
                found.append(str(error))
        assert any("generic-proxy store into shared" in text for text in found), (wait, found)


def test_a_skipped_cluster_arrive_deadlocks() -> None:
    fn, specs, params = CASES["cluster_2x1"]
    _, fusion, result = _compile(fn, specs, params)
    (stages,) = result.kernels
    ptx = _mutate(stages.emitted.ptx, r"^\s*barrier\.cluster\.arrive[.\w]*;\n", "", count=1)
    arrays = random_inputs(specs, 0)
    out = poison(fusion.outputs[0].shape, fusion.outputs[0].dtype)
    with pytest.raises(SimulationError, match="deadlock"):
        run_kernel(stages.kernel_ir, ptx, arrays, [out])


def test_bra_uni_that_diverges_inside_a_warp_is_reported() -> None:
    _, fusion, result = _compile(*CASES["nt_ragged"])
    (stages,) = result.kernels
    # The consumer's role test on tid.y made a test on tid.x: warps split.
    ptx = _mutate(
        stages.emitted.ptx, r"setp\.ne\.u32 (%p\d+), %r3, 0;", r"setp.ne.u32 \1, %r2, 5;", 1
    )
    arrays = random_inputs(CASES["nt_ragged"][1], 0)
    out = poison(fusion.outputs[0].shape, fusion.outputs[0].dtype)
    with pytest.raises(SimulationError, match=r"bra\.uni diverged"):
        run_kernel(stages.kernel_ir, ptx, arrays, [out])


def test_the_parser_reads_every_instruction_of_the_corpus_kernels() -> None:
    _, _, result = _compile(*CASES["gate_up"])
    (entry,) = parse_module(result.kernels[0].emitted.ptx).values()
    opcodes = {instr.opcode for instr in entry.instrs}
    assert {"wgmma", "mbarrier", "cp", "bar", "elect", "setmaxnreg"} <= opcodes
    assert all(label in entry.labels for label in ("$L__matmul_end_0",))


def test_mbarrier_phases_follow_arrivals_and_transaction_bytes() -> None:
    from pyfuse.testing.ptx_sim.tensor_core import Mbarrier

    barrier = Mbarrier(expected=2, pending=2)
    assert barrier.phase_done(1) and not barrier.phase_done(0)  # the phase before the first
    barrier.expect(64)
    assert not barrier.arrive(2, "test")  # arrivals done, 64 bytes to go
    assert not barrier.complete_tx(32) and barrier.complete_tx(32)
    assert barrier.phase_done(0) and barrier.pending == 2 and barrier.phases == 1
    with pytest.raises(SimulationError, match="more arrivals"):
        barrier.arrive(3, "test")


def test_swizzles_permute_16_byte_chunks_inside_each_pattern() -> None:
    from pyfuse.testing.ptx_sim.tensor_core import swizzled

    addresses = np.arange(0, 2048, 16)
    for span, rows in ((32, 2), (64, 4), (128, 8)):
        moved = swizzled(addresses, span)
        assert sorted(moved.tolist()) == addresses.tolist()
        assert (moved // 1024 == addresses // 1024).all()
        # row r of a pattern (128 bytes each) moves chunk c to c ^ (r % rows)
        row, chunk = addresses // 128, addresses % 128 // 16
        assert (moved % 128 // 16 == chunk ^ (row % rows)).all()
    assert (swizzled(addresses, 0) == addresses).all()


# ---- SIMT kernels as PTX -----------------------------------------------------------------------


def _simt_kernel(
    fn: Callable[..., object], specs: list[pf.Spec]
) -> tuple[pf.FusedFunction, pf.Fusion, pipeline.KernelStages]:
    fused, fusion, result = _compile(fn, specs, None)
    (stages,) = result.kernels
    return fused, fusion, stages


def test_a_softmax_kernel_runs_as_ptx_with_its_shuffles_and_shared_memory() -> None:
    specs = [pf.spec((37, 1000), pf.float32)]
    fused, fusion, stages = _simt_kernel(lambda x: pf.softmax(x, -1), specs)
    assert "shfl.sync" in stages.emitted.ptx
    arrays = random_inputs(specs, 0)
    out = poison(fusion.outputs[0].shape, fusion.outputs[0].dtype)
    run_kernel(stages.kernel_ir, stages.emitted.ptx, arrays, [out])
    _close(out, fused.reference(*arrays))


def test_a_store_past_the_output_and_a_store_of_garbage_are_reported() -> None:
    specs = [pf.spec((300,), pf.float32)]
    _, fusion, stages = _simt_kernel(lambda x: x * 2.0, specs)
    arrays = random_inputs(specs, 0)
    out = poison(fusion.outputs[0].shape, fusion.outputs[0].dtype)
    # The bounds test of the ragged last block, dropped: its threads store past the output.
    unguarded = _mutate(stages.emitted.ptx, r"^\s*@!?%p\d+ bra \$L__\w+;\n", "")
    with pytest.raises(SimulationError, match="outside every buffer"):
        run_kernel(stages.kernel_ir, unguarded, arrays, [out])
    # The load dropped: the stored value comes from a register nothing wrote.
    unloaded = _mutate(stages.emitted.ptx, r"^\s*ld\.global[^\n]*\n", "")
    with pytest.raises(SimulationError, match="never written"):
        run_kernel(stages.kernel_ir, unloaded, arrays, [out])
