"""The matmul path on the CPU: translation, intermediate skipping, the Hopper schedule (grid
swizzle, persistent, both), inlining, validation, broadcast removal and lowering, for
MatmulOp, LinearOp (with and without bias) and multiply-sum, in every operand layout."""

from __future__ import annotations

import pytest

import pyfuse as pf
from pyfuse.errors import ScheduleError
from pyfuse.ir import kernel_ir as k
from pyfuse.ir.exprs import MmaOp
from pyfuse.ir.id_model import IdMappingMode, IdModel
from pyfuse.ir.iterdomain import Merge, ParallelType
from pyfuse.ir.target import HOPPER
from pyfuse.passes import pipeline
from pyfuse.passes.schedule_matmul import k_tile_position
from pyfuse.passes.skip_intermediates import global_intermediates

bf16 = pf.bfloat16
M, N, K = 1024, 2048, 512


def _matmul(a, b):  # type: ignore[no-untyped-def]
    return pf.matmul(a, b)


def _linear(x, w):  # type: ignore[no-untyped-def]
    return pf.linear(x, w)


def _linear_bias(x, w, b):  # type: ignore[no-untyped-def]
    return pf.gelu(pf.linear(x, w, b), approximate="tanh")


def _mul_sum(a, b):  # type: ignore[no-untyped-def]
    return pf.sum(a.unsqueeze(1) * b.unsqueeze(0), -1)


PATTERNS = {
    "matmul": (_matmul, [((M, K), bf16), ((K, N), bf16)]),
    "linear": (_linear, [((M, K), bf16), ((N, K), bf16)]),
    "linear_bias": (_linear_bias, [((M, K), bf16), ((N, K), bf16), ((N,), bf16)]),
    "mul_sum": (_mul_sum, [((M, K), bf16), ((N, K), bf16)]),
    "batch_matmul": (_matmul, [((3, M, K), bf16), ((3, K, N), bf16)]),
}
SCHEDULES = {
    "default": pf.MatmulParams(grid_swizzle=1, persistent=False),
    "swizzle": pf.MatmulParams(grid_swizzle=4, persistent=False),
    "persistent": pf.MatmulParams(grid_swizzle=1, persistent=True),
    "both": pf.MatmulParams(grid_swizzle=4, persistent=True),
    "cluster_2x1": pf.MatmulParams(grid_swizzle=4, persistent=True, cluster_m=2),
    "cluster_1x2": pf.MatmulParams(grid_swizzle=4, persistent=False, cluster_n=2),
}


def _run(fn, specs, params=None):  # type: ignore[no-untyped-def]
    fused = pf.fuse(fn, matmul=params)
    fusion = fused.trace(*(pf.spec(shape, dtype) for shape, dtype in specs))
    return fusion, pipeline.run(fusion, HOPPER, params)


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_matmul_patterns_under_every_schedule(pattern: str, schedule: str) -> None:
    fn, specs = PATTERNS[pattern]
    params = SCHEDULES[schedule]
    _, result = _run(fn, specs, params)

    # One kernel, taken by the matmul scheduler, with one MMA and no global intermediate.
    assert len(result.kernels) == 1
    stages = result.kernels[0]
    assert stages.plan.scheduler == "matmul"
    fusion = stages.plan.fusion
    mmas = [e for e in fusion.exprs() if isinstance(e, MmaOp)]
    assert len(mmas) == 1
    assert result.segmented.intermediates == {}
    assert global_intermediates(fusion) == []

    # The inline positions the scheduler intends: operand tiles inside the K-tile loop, the
    # accumulator at the tile loops, the epilogue fully inlined into the accumulator's nest.
    mma = mmas[0]
    accumulator = mma.output
    k_position = k_tile_position(accumulator)
    a_smem, b_smem = mma.a, mma.b
    for operand in (a_smem, b_smem):
        assert operand.memory_type.value == "s"
        assert operand.inline_position == k_position
        assert operand.circular_buffer_stages >= 2
        assert all(a.parallel_type == ParallelType.BULK for a in operand.loop[k_position:])
    assert accumulator.inline_position == k_position - 1
    epilogue = [
        tv
        for tv in fusion.tensors()
        if tv.definition is not None
        and not isinstance(tv.definition, MmaOp)
        and tv.memory_type.value == "l"
        and tv is not accumulator
    ]
    for tv in epilogue:
        assert tv.inline_position == len(tv.loop)

    # The IdModel maps A's swizzled/persistent outer tile ID to B's and the output's.
    id_model = IdModel(fusion)
    merges = [step for step in accumulator.history if isinstance(step, Merge)]
    tile_merges = [m for m in merges if not m.output.is_reduction]
    if (params.grid_swizzle or 1) > 1 or params.persistent:
        assert tile_merges, "the schedule must merge tile loops"
        outer = accumulator.loop[0]
        assert id_model.mapped(a_smem.loop[0], outer, IdMappingMode.PERMISSIVE)
        assert id_model.mapped(b_smem.loop[0], outer, IdMappingMode.PERMISSIVE)
        assert id_model.mapped(a_smem.loop[0], b_smem.loop[0], IdMappingMode.PERMISSIVE)
        # A's N tile is a broadcast: its merged tile ID is not EXACT-mapped to the output's.
        if params.grid_swizzle and params.grid_swizzle > 1 and not params.persistent:
            lead = 1 if pattern == "batch_matmul" else 0  # [batch?, Mo/s, s*No, ...]
            swizzled, a_swizzled = accumulator.loop[lead + 1], a_smem.loop[lead + 1]
            assert id_model.mapped(a_swizzled, swizzled, IdMappingMode.PERMISSIVE)
            assert not id_model.mapped(a_swizzled, swizzled, IdMappingMode.EXACT)

    # Lowering succeeds: one MatmulMainLoop that reads the inputs in place with TMA.
    kernel = stages.kernel_ir
    (loop,) = kernel.body
    assert isinstance(loop, k.MatmulMainLoop)
    assert loop.persistent == bool(params.persistent)
    assert loop.grid_swizzle == (params.grid_swizzle or 1)
    assert (loop.m, loop.n, loop.k) == (M, N, K)
    input_names = {p.buffer_name for p in kernel.params if p.role == k.ParamRole.INPUT}
    assert {o.buffer_name for o in loop.operands} <= input_names
    assert loop.batch == (3 if pattern == "batch_matmul" else 1)
    if params.persistent:
        # Whole waves: the fewest clusters that take the cluster tiles in as many waves as
        # one cluster per SM pair (or CTA per SM) would.
        size = loop.cluster_size
        m_tiles, n_tiles = -(-M // loop.tile_m), -(-N // loop.tile_n)
        tiles = -(-m_tiles // loop.cluster_m) * -(-n_tiles // loop.cluster_n) * loop.batch
        slots = min(HOPPER.sm_count // size, tiles)
        clusters, rest = divmod(kernel.grid[0], size)
        assert rest == 0 and kernel.grid[1:] == (1, 1) and clusters <= slots
        assert -(-tiles // clusters) == -(-tiles // slots)  # as many waves
        assert clusters == slots or -(-tiles // (clusters - 1)) > -(-tiles // slots)


def _layout_case(a_major: str, b_major: str, as_transpose: bool):  # type: ignore[no-untyped-def]
    """A [M, K] and B [K, N] in the given majors, as user transposes or strided inputs."""
    a_shape = (M, K) if a_major == "k" else (K, M)
    b_shape = (N, K) if b_major == "k" else (K, N)
    if as_transpose:

        def fn(a, b):  # type: ignore[no-untyped-def]
            a2 = a if a_major == "k" else a.T
            b2 = b.T if b_major == "k" else b
            return a2 @ b2

        return fn, [pf.spec(a_shape, bf16), pf.spec(b_shape, bf16)]
    a_spec = pf.spec((M, K), bf16, strides=(K, 1) if a_major == "k" else (1, M))
    b_spec = pf.spec((K, N), bf16, strides=(1, K) if b_major == "k" else (N, 1))
    return (lambda a, b: a @ b), [a_spec, b_spec]


@pytest.mark.parametrize("as_transpose", [True, False])
@pytest.mark.parametrize("b_major", ["k", "n"])
@pytest.mark.parametrize("a_major", ["k", "m"])
def test_all_operand_layouts(a_major: str, b_major: str, as_transpose: bool) -> None:
    fn, specs = _layout_case(a_major, b_major, as_transpose)
    fusion = pf.fuse(fn).trace(*specs)
    result = pipeline.run(fusion, HOPPER)
    assert [s.plan.scheduler for s in result.kernels] == ["matmul"]
    assert result.segmented.intermediates == {}
    (loop,) = result.kernels[0].kernel_ir.body
    assert isinstance(loop, k.MatmulMainLoop)
    a_operand, b_operand = (loop.operands[i] for i in loop.mmas[0][:2])
    assert a_operand.k_major == (a_major == "k")
    assert b_operand.k_major == (b_major == "k")
    assert set(a_operand.roles) == {"m", "k"} and set(b_operand.roles) == {"n", "k"}
    # The contiguous box dim never exceeds the 128-byte swizzle span.
    for operand in (a_operand, b_operand):
        assert operand.box[-1] * operand.dtype.itemsize <= operand.swizzle_bytes


def test_batch_matmul_keeps_batch_role() -> None:
    fusion = pf.fuse(lambda a, b: a @ b).trace(
        pf.spec((3, 256, 64), bf16), pf.spec((3, 64, 128), bf16)
    )
    result = pipeline.run(fusion, HOPPER)
    (loop,) = result.kernels[0].kernel_ir.body
    assert isinstance(loop, k.MatmulMainLoop) and loop.batch == 3


def test_broadcast_batch_matmul_still_runs() -> None:
    # B's N axes ([5, K, N]: the broadcast batch becomes an N axis) are not one run of memory,
    # so TMA cannot load an N tile: the MMA runs as multiply + sum instead, never an error.
    fusion = pf.fuse(lambda a, b: a @ b).trace(
        pf.spec((2, 1, 64, 32), bf16), pf.spec((5, 32, 48), bf16)
    )
    result = pipeline.run(fusion, HOPPER)
    assert [s.plan.scheduler for s in result.kernels] == ["reduction"]


def test_epilogue_with_bias_activation_residual_cast_and_extra_output() -> None:
    def fn(x, w, b, r):  # type: ignore[no-untyped-def]
        pre = pf.linear(x, w, b)
        out = (pf.gelu(pre, approximate="tanh") + r).to(pf.float32)
        return out, pre

    specs = [((M, K), bf16), ((N, K), bf16), ((N,), bf16), ((M, N), bf16)]
    _, result = _run(fn, specs)
    assert [s.plan.scheduler for s in result.kernels] == ["matmul"]
    kernel = result.kernels[0].kernel_ir
    outputs = [p for p in kernel.params if p.role == k.ParamRole.OUTPUT]
    assert sorted(p.dtype.name for p in outputs) == ["bfloat16", "float32"]
    assert result.segmented.intermediates == {}


def test_gate_up_pair_shares_one_operand_load() -> None:
    def fn(x, w1, w3):  # type: ignore[no-untyped-def]
        return pf.silu(x @ w1.T) * (x @ w3.T)

    _, result = _run(fn, [((M, K), bf16), ((N, K), bf16), ((N, K), bf16)])
    assert [s.plan.scheduler for s in result.kernels] == ["matmul"]
    (loop,) = result.kernels[0].kernel_ir.body
    assert isinstance(loop, k.MatmulMainLoop)
    assert len(loop.mmas) == 2 and len(loop.operands) == 3  # x loaded once for both MMAs
    assert loop.mmas[0][0] == loop.mmas[1][0]


def test_prologue_is_routed_to_its_own_kernel() -> None:
    fusion = pf.fuse(lambda a, b: pf.matmul(a, pf.sin(b))).trace(
        pf.spec((256, 128), bf16), pf.spec((128, 512), bf16)
    )
    result = pipeline.run(fusion, HOPPER)
    assert [s.plan.scheduler for s in result.kernels] == ["pointwise", "matmul"]
    assert "matmul" in result.kernels[0].plan.declined
    assert list(result.segmented.intermediates) == [f"T{fusion.exprs()[0].output.name}"]


def test_matmul_scheduler_declines_with_reasons() -> None:
    from pyfuse.passes.schedule_matmul import decline_reason
    from pyfuse.passes.translate_patterns import translate_patterns

    fusion = pf.fuse(lambda a, b: pf.matmul(a, pf.sin(b))).trace(
        pf.spec((256, 128), bf16), pf.spec((128, 512), bf16)
    )
    with fusion:
        translate_patterns(fusion)
    reason = decline_reason(fusion, HOPPER)
    assert reason is not None and "sin" in reason and "prologue" in reason

    padded = pf.fuse(lambda a, b: a @ b).trace(
        pf.spec((64, 30), bf16, strides=(31, 1)), pf.spec((30, 48), bf16)
    )
    with padded:
        translate_patterns(padded)
    reason = decline_reason(padded, HOPPER)
    assert reason is not None and "multiple of 16" in reason
    # ... and the fusion still compiles, on the reduction path.
    result = pipeline.run(padded, HOPPER)
    assert [s.plan.scheduler for s in result.kernels] == ["reduction"]


def test_a_float64_remainder_leaves_the_matmul_kernel() -> None:
    """A float64 fmod/remainder/floor_divide runs in a pointwise kernel after the matmul: its
    exact reduction's ``div.rn.f64`` slow paths in a persistent tile loop took ptxas 62 s.
    A float32 one stays in the epilogue (it divides by a reciprocal, no ``div``)."""

    def f64_remainder(a, b):  # type: ignore[no-untyped-def]
        return pf.cast(pf.remainder(pf.cast(a @ b, pf.float64), 3.0), pf.float32)

    def f32_remainder(a, b):  # type: ignore[no-untyped-def]
        return pf.remainder(a @ b, 3.0)

    specs = (pf.spec((256, 128), bf16), pf.spec((128, 512), bf16))
    params = pf.MatmulParams(persistent=True)
    wide = pipeline.run(pf.fuse(f64_remainder).trace(*specs), HOPPER, params)
    assert [s.plan.scheduler for s in wide.kernels] == ["matmul", "pointwise"]
    narrow = pipeline.run(pf.fuse(f32_remainder).trace(*specs), HOPPER, params)
    assert [s.plan.scheduler for s in narrow.kernels] == ["matmul"]


def test_validation_names_both_tensors() -> None:
    from pyfuse.ir.tensor import MemoryType
    from pyfuse.passes.validate import validate

    fusion = pf.fuse(lambda x: pf.exp(x) * 2.0).trace(pf.spec((64, 32), pf.float32))
    exprs = fusion.exprs()
    producer, consumer = exprs[0].output, exprs[1].output
    with fusion:
        producer.memory_type = MemoryType.LOCAL
        producer.split(1, 32).parallelize(2, ParallelType.TIDX)
        consumer.split(1, 32).parallelize(2, ParallelType.TIDY)
    with pytest.raises(ScheduleError) as info:
        validate(fusion)
    message = str(info.value)
    assert f"T{producer.name}" in message and f"T{consumer.name}" in message
    assert "shared or global memory" in message


def test_scheduled_ir_of_the_seed_case_reads_clearly() -> None:
    fn, specs = PATTERNS["linear_bias"]
    _, result = _run(fn, specs, SCHEDULES["both"])
    text = result.kernels[0].scheduled_ir
    assert "kind=tma_load" in text and "Swizzle(xor)" in text and "iBx" in text
    assert "mma(" in text and "iTy" in text and "iMMA" in text


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_compiled_matmul_ptx_assembles_cleanly(pattern: str, schedule: str) -> None:
    from pyfuse import knobs
    from pyfuse.backend_ptx.ptxas import assemble, ptxas_available

    if not ptxas_available():
        if knobs.require_ptxas():
            pytest.fail("ptxas is required (PYFUSE_REQUIRE_PTXAS=1) but was not found")
        pytest.skip("ptxas not found")
    fn, specs = PATTERNS[pattern]
    compiled = pf.fuse(fn, matmul=SCHEDULES[schedule]).compile(
        *(pf.spec(shape, dtype) for shape, dtype in specs)
    )
    (kernel,) = compiled.kernels
    for instruction in ("wgmma.mma_async", "cp.async.bulk.tensor", "mbarrier", "setmaxnreg"):
        assert instruction in kernel.ptx
    result = assemble(kernel.ptx)
    resources = result.kernels[kernel.name]
    assert resources.spill_store_bytes == 0 and resources.spill_load_bytes == 0
    assert resources.stack_frame_bytes == 0 and resources.local_bytes == 0
    assert not result.problems(), result.problems()


def test_no_setting_selects_nothing() -> None:
    # Every MatmulParams field selects a code path; warp_specialized (the Hopper kernel is
    # always warp-specialized) is gone rather than accepted and ignored.
    with pytest.raises(TypeError, match="warp_specialized"):
        pf.MatmulParams(warp_specialized=False)  # type: ignore[call-arg]


def test_cluster_params_reach_the_kernel_launch() -> None:
    import warnings

    fn, specs = PATTERNS["linear_bias"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a cluster is carried out: nothing to warn about
        _, result = _run(fn, specs, pf.MatmulParams(cluster_m=2, persistent=True))
    kernel = result.kernels[0].kernel_ir
    loop = next(s for s in kernel.body if isinstance(s, k.MatmulMainLoop))
    assert (loop.cluster_m, loop.cluster_n) == (2, 1)
    assert kernel.cluster == (2, 1, 1)
    assert kernel.grid[0] % 2 == 0 and kernel.grid[1:] == (1, 1)
    assert kernel.grid[0] <= HOPPER.sm_count
    from pyfuse.ir.kernel_printer import kernel_to_str

    text = kernel_to_str(kernel)
    assert "cluster=(2, 1, 1)" in text and "cluster=(2, 1)" in text


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (pf.MatmulParams(cluster_m=4, cluster_n=4), "at most 8"),
        (pf.MatmulParams(cluster_m=2, tile_n=8), "multiples of 16"),
    ],
)
def test_clusters_the_kernel_cannot_split_are_refused(
    params: pf.MatmulParams, message: str
) -> None:
    fn, specs = PATTERNS["linear"]
    # The kernel still runs on the tensor cores (with the heuristic's params, the fallback
    # plan), and the user is told why their params were not used.
    with pytest.warns(UserWarning, match=message):
        _, result = _run(fn, specs, params)
    (stages,) = result.kernels
    assert stages.plan.params["fallback"] == "heuristic matmul"


def _linear_params(shape: tuple[int, int, int], user: pf.MatmulParams | None) -> pf.MatmulParams:
    """The matmul scheduler's params for ``linear`` of an M x K input and an N x K weight."""
    from pyfuse.passes.matmul_params import choose_params
    from pyfuse.passes.translate_patterns import translate_patterns

    m, n, k = shape
    fusion = pf.fuse(_linear).trace(pf.spec((m, k), bf16), pf.spec((n, k), bf16))
    with fusion:
        translate_patterns(fusion)
    return choose_params(fusion, user, HOPPER)


@pytest.mark.parametrize(
    ("shape", "user", "cluster"),
    [
        ((8192, 8192, 8192), None, (2, 1)),  # 2048 tiles: pairs share their B tile
        ((4096, 14336, 4096), None, (2, 1)),
        ((1000, 1000, 1000), None, (1, 1)),  # 32 tiles: not two waves
        # a K of at most four tiles: the output store bounds it, the cluster only costs
        ((8192, 8192, 128), None, (1, 1)),
        ((16384, 1024, 256), None, (1, 1)),
        ((16384, 1024, 320), None, (2, 1)),
        ((4096, 4096, 16), None, (2, 1)),  # one K tile: the cluster measured faster
        ((8192, 8192, 128), pf.MatmulParams(cluster_m=2), (2, 1)),  # asked for
        ((8192, 8192, 8192), pf.MatmulParams(cluster_n=2), (1, 2)),  # the user's cluster
        ((8192, 8192, 8192), pf.MatmulParams(cluster_m=1), (1, 1)),
    ],
)
def test_default_cluster_for_large_matmuls(
    shape: tuple[int, int, int], user: pf.MatmulParams | None, cluster: tuple[int, int]
) -> None:
    params = _linear_params(shape, user)
    assert (params.cluster_m, params.cluster_n) == cluster


@pytest.mark.parametrize(
    ("shape", "user", "tiles"),
    [
        ((256, 8192, 3072), None, (128, 128)),  # 64 default tiles: 128 fill the SMs
        ((32, 4608, 3584), None, (64, 128)),  # M <= 64 keeps 64 rows
        ((3000, 4608, 3584), None, (128, 256)),  # 128x128 only 3% better: the default
        # 148 tiles of 128x256: 2 waves, the second near empty; 238 of 128x160 fill both
        # (H100: 1.06x torch; 128x192's 198 tiles 0.98x); 128x128 took 3 waves
        ((256, 18944, 3584), None, (128, 160)),
        ((256, 10240, 8192), None, (128, 160)),  # 80 tiles of 128x256 in one wave; 128
        ((8192, 8192, 8192), None, (128, 256)),  # whole waves: the default
        ((4096, 64, 2048), None, (128, 64)),  # a narrow N keeps its width
        ((256, 8192, 3072), pf.MatmulParams(tile_n=256), (128, 256)),  # the user's tile
    ],
)
def test_tiles_fill_the_last_wave(
    shape: tuple[int, int, int], user: pf.MatmulParams | None, tiles: tuple[int, int]
) -> None:
    params = _linear_params(shape, user)
    assert (params.tile_m, params.tile_n) == tiles


@pytest.mark.parametrize(
    ("shape", "user", "stream_k"),
    [
        ((3000, 3584, 18944), None, True),  # 168 cluster tiles: 2.5 waves of 66, long K
        ((9560, 1792, 8432), None, True),  # 4.03 waves: the last nearly empty
        ((3000, 4608, 3584), None, False),  # a short K: the fixup costs more than it saves
        ((8192, 8192, 8192), None, False),  # 15.5 waves: little idle to win back
        ((256, 28672, 8192), None, False),  # under two waves (1.7 of 132)
        ((5632, 3072, 8192), None, False),  # whole waves: 264 cluster tiles over 66
        ((3000, 3584, 7104), None, False),  # 111 K tiles: one short of a long K
        ((3000, 3584, 7168), None, True),  # 112
        ((64, 36864, 8192), None, False),  # decode's 64-row tiles: not measured
        ((3000, 3584, 18944), pf.MatmulParams(stream_k=False), False),  # the user's choice
        ((3000, 3584, 18944), pf.MatmulParams(pingpong=True), False),
    ],
)
def test_default_stream_k_for_long_k_and_a_ragged_last_wave(
    shape: tuple[int, int, int], user: pf.MatmulParams | None, stream_k: bool
) -> None:
    params = _linear_params(shape, user)
    assert params.stream_k is stream_k
    assert not stream_k or params.persistent


def _epilogue_params(fn, specs, user=None) -> pf.MatmulParams:  # type: ignore[no-untyped-def]
    from pyfuse.passes.matmul_params import choose_params
    from pyfuse.passes.translate_patterns import translate_patterns

    fusion = pf.fuse(fn).trace(*specs)
    with fusion:
        translate_patterns(fusion)
    return choose_params(fusion, user, HOPPER)


def test_costly_epilogues_take_no_cluster_and_residuals_no_stream_k() -> None:
    S = pf.spec
    x, w = S((4096, 4096), bf16), S((14336, 4096), bf16)
    gelu = _epilogue_params(
        lambda x, w, b: pf.gelu(pf.linear(x, w, b), approximate="tanh"), [x, w, S((14336,), bf16)]
    )
    gate_up = _epilogue_params(lambda x, w1, w3: pf.silu(x @ w1.T) * (x @ w3.T), [x, w, w])
    assert gelu.cluster_m == gate_up.cluster_m == 1
    assert _linear_params((4096, 14336, 4096), None).cluster_m == 2  # a plain GEMM keeps it
    assert (
        _epilogue_params(
            lambda x, w1, w3: pf.silu(x @ w1.T) * (x @ w3.T),
            [x, w, w],
            pf.MatmulParams(cluster_m=2),
        ).cluster_m
        == 2
    )  # the user's
    # The down projection with its residual: stream-K's long K and ragged last wave, but
    # its fixup would read the residual by global loads.
    down = [S((4096, 14336), bf16), S((4096, 14336), bf16), S((4096,), bf16), S((4096, 4096), bf16)]
    residual = _epilogue_params(lambda x, w, b, r: pf.linear(x, w, b) + r, down)
    assert residual.stream_k is False
    assert _linear_params((4096, 4096, 14336), None).stream_k is True


def test_a_requested_cluster_the_heuristics_tile_cannot_split_is_dropped_with_a_warning() -> None:
    # N = 40: the heuristic's 40-column B tile does not split into two 16-row slices; the
    # kernel keeps its tensor cores without the cluster (it fell back to multiply+sum).
    fusion = pf.fuse(lambda x, w: x @ w.T).trace(
        pf.spec((1000, 64), pf.bfloat16), pf.spec((40, 64), pf.bfloat16)
    )
    with pytest.warns(UserWarning, match=r"cluster_m=2\) not applied"):
        result = pipeline.run(fusion, HOPPER, pf.MatmulParams(cluster_m=2, persistent=True))
    (stages,) = result.kernels
    assert stages.plan.scheduler == "matmul" and "fallback" not in stages.plan.params
    assert stages.plan.params["cluster_m"] == 1


def test_a_grid_swizzle_past_the_m_tiles_launches_no_idle_ctas() -> None:
    """``grid_swizzle=100`` on a problem of one M tile: the non-persistent grid is N tiles x
    swizzle wide, so an unclamped swizzle would launch 100 CTAs per N tile, 99 with no work."""
    params = pf.MatmulParams(grid_swizzle=100, persistent=False)
    _, result = _run(_linear, [((100, 64), bf16), ((200, 64), bf16)], params)
    (stages,) = result.kernels
    (loop,) = stages.kernel_ir.body
    m_tiles, n_tiles = -(-100 // loop.tile_m), -(-200 // loop.tile_n)
    assert isinstance(loop, k.MatmulMainLoop) and loop.grid_swizzle == m_tiles < 100
    assert stages.kernel_ir.grid == (n_tiles * m_tiles, 1, 1)
