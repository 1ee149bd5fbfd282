"""Tensor-core matmul kernels for the Hopper simulator's tests: every layout, ragged edges,
K shorter than the pipeline, epilogues, batches, persistent and grid-swizzled tile orders,
clusters and split-K. Each: (function, input specs, MatmulParams or None)."""

from __future__ import annotations

from collections.abc import Callable

import pyfuse as pf

S = pf.spec
bf16, f16 = pf.bfloat16, pf.float16
P = pf.MatmulParams

CASES: dict[str, tuple[Callable[..., object], list[pf.Spec], pf.MatmulParams | None]] = {
    "nt_ragged": (lambda a, b: a @ b.T, [S((200, 128), bf16), S((136, 128), bf16)], None),
    "nn_mn_major_b": (lambda a, b: a @ b, [S((130, 72), bf16), S((72, 200), bf16)], None),
    "tn_mn_major_a": (lambda a, b: a.T @ b, [S((64, 144), bf16), S((64, 136), bf16)], None),
    "tt": (lambda a, b: a.T @ b.T, [S((80, 136), f16), S((72, 80), f16)], None),
    "k_shorter_than_one_tile": (lambda a, b: a @ b.T, [S((64, 24), bf16), S((72, 24), bf16)], None),
    "linear_bias_gelu": (
        lambda x, w, b: pf.gelu(pf.linear(x, w) + b, approximate="tanh"),
        [S((150, 256), bf16), S((136, 256), bf16), S((136,), bf16)],
        None,
    ),
    # Ragged in M and N with epilogue inputs read per element and per row: the staged
    # epilogue runs unguarded, its reads clamped into the problem.
    "residual_and_row_scale_ragged": (
        lambda a, b, r, s: (a @ b.T + r) * s,
        [S((150, 64), bf16), S((136, 64), bf16), S((150, 136), bf16), S((150, 1), bf16)],
        None,
    ),
    "gate_up": (
        lambda x, w1, w3: pf.silu(x @ w1.T) * (x @ w3.T),
        [S((96, 128), bf16), S((136, 128), bf16), S((136, 128), bf16)],
        None,
    ),
    "nn_narrow_n_64b_swizzle": (lambda a, b: a @ b, [S((128, 64), bf16), S((64, 32), bf16)], None),
    "batched": (lambda a, b: a @ b, [S((2, 72, 64), bf16), S((2, 64, 80), bf16)], None),
    "persistent_swizzled": (
        lambda a, b: a @ b.T,
        [S((300, 64), bf16), S((264, 64), bf16)],
        P(persistent=True, grid_swizzle=2, tile_m=128, tile_n=64),
    ),
    "cluster_2x1": (
        lambda a, b: a @ b.T,
        [S((256, 128), bf16), S((128, 128), bf16)],
        P(cluster_m=2),
    ),
    "tile_128x256_three_stages": (
        lambda a, b: a @ b.T,
        [S((200, 200), bf16), S((300, 200), bf16)],
        P(tile_m=128, tile_n=256, stages=3),
    ),
    # 160-wide tiles (the heuristic's where they fill the waves): two and a half 64-column
    # swizzle atoms of the staged epilogue's store, ragged in N, in 2x1 clusters, and the
    # epilogue warps' handoff.
    "tile_128x160_ragged_cluster": (
        lambda x, w, b: pf.gelu(pf.linear(x, w, b), approximate="tanh"),
        [S((200, 128), bf16), S((200, 128), bf16), S((200,), bf16)],
        P(tile_m=128, tile_n=160, cluster_m=2),
    ),
    "tile_128x160_epilogue_warps": (
        lambda x, w, b: pf.gelu(pf.linear(x, w, b), approximate="tanh"),
        [S((200, 128), bf16), S((328, 128), bf16), S((328,), bf16)],
        P(tile_m=128, tile_n=160, epilogue_warps=True, persistent=True),
    ),
    "split_k": (lambda a, b: a @ b.T, [S((128, 512), bf16), S((64, 512), bf16)], P(splitk=2)),
    # Stream-K: nine tiles of eight K tiles over 36 CTAs, each tile in four pieces summed
    # through the workspace (the grid-size tests run it on other CTA counts).
    "stream_k": (
        lambda a, b: a @ b.T,
        [S((300, 512), bf16), S((136, 512), bf16)],
        P(stream_k=True, tile_m=128, tile_n=64),
    ),
    # In 2x1 clusters, with a bias vector, and two MMAs (the partials of both are summed).
    "stream_k_cluster_bias": (
        lambda x, w, b: pf.linear(x, w, b),
        [S((256, 256), bf16), S((64, 256), bf16), S((64,), bf16)],
        P(stream_k=True, cluster_m=2, tile_m=128, tile_n=64),
    ),
    "stream_k_gate_up_batched": (
        lambda x, w1, w3: pf.silu(x @ w1) * (x @ w3),
        [S((2, 64, 256), bf16), S((2, 256, 64), bf16), S((2, 256, 64), bf16)],
        P(stream_k=True, tile_m=64, tile_n=64),
    ),
    "register_stores": (
        lambda a, b: a @ b.T,
        [S((130, 64), bf16), S((72, 64), bf16)],
        P(smem_epilogue=False),
    ),
    "pingpong": (
        lambda a, b: a @ b.T,
        [S((200, 128), bf16), S((136, 128), bf16)],
        P(pingpong=True, tile_m=128, tile_n=64, stages=3),
    ),
    # Epilogue vectors (a bias along N, a row scale along M) in each warpgroup's own copy,
    # reloaded per tile: ping-pong tiles, several tiles per CTA, ragged both ways.
    "pingpong_bias_and_row_scale": (
        lambda a, b, bias, s: (a @ b.T + bias) * s,
        [S((200, 64), bf16), S((136, 64), bf16), S((136,), bf16), S((200, 1), bf16)],
        P(pingpong=True, tile_m=128, tile_n=64, stages=3),
    ),
    # The epilogue warps: the consumers hand the rounded linear over, the producer
    # warpgroup's idle warps run the gelu and the TMA stores.
    "epilogue_warps_linear_bias_gelu": (
        lambda x, w, b: pf.gelu(pf.linear(x, w, b), approximate="tanh"),
        [S((200, 128), bf16), S((264, 128), bf16), S((264,), bf16)],
        P(epilogue_warps=True, persistent=True, tile_m=128, tile_n=128),
    ),
    "epilogue_warps_one_consumer_in_a_cluster": (
        lambda x, w: pf.silu(x @ w.T),
        [S((64, 64), bf16), S((136, 64), bf16)],
        P(epilogue_warps=True, cluster_n=2, tile_n=64),
    ),
    "epilogue_warps_gate_up": (
        lambda x, w1, w3: pf.silu(x @ w1.T) * (x @ w3.T),
        [S((200, 64), bf16), S((136, 64), bf16), S((136, 64), bf16)],
        P(epilogue_warps=True, persistent=True, tile_m=128, tile_n=64),
    ),
    # 256-row tiles: two cooperative warpgroups of two 64-row blocks each (A's rows 128
    # apart per warpgroup), ragged in M and N, with a residual and a row scale, persistent
    # in 2x1 clusters, and stream-K.
    "two_row_blocks_a_warpgroup_residual": (
        lambda a, b, r, s: (a @ b.T + r) * s,
        [S((300, 64), bf16), S((136, 64), bf16), S((300, 136), bf16), S((300, 1), bf16)],
        P(tile_m=256, tile_n=128),
    ),
    "two_row_blocks_a_warpgroup_persistent_cluster": (
        lambda a, b: a @ b,
        [S((520, 128), bf16), S((128, 136), bf16)],
        P(tile_m=256, tile_n=64, persistent=True, cluster_m=2),
    ),
    "two_row_blocks_a_warpgroup_stream_k": (
        lambda a, b: a @ b.T,
        [S((300, 512), bf16), S((136, 512), bf16)],
        P(tile_m=256, tile_n=128, stream_k=True),
    ),
    "register_stores_f32_bias_in_a_cluster": (
        lambda a, b, bias: (a @ b.T + bias).bfloat16(),
        [S((256, 64), bf16), S((136, 64), bf16), S((136,), pf.float32)],
        P(cluster_m=2, smem_epilogue=False),
    ),
    # Residuals read a column pair at a time (lower_matmul_epilogue): an f32 one (one .v2
    # load a pair) in ping-pong tiles, one broadcast over the batch and a view sliced at an
    # even offset (aliases of an input); at an odd offset, element loads.
    "f32_residual_pairs_pingpong": (
        # A bf16 result: the f32 sum of a bf16-rounded product may flip that rounding's tie.
        lambda a, b, r: pf.cast(a @ b.T + r, bf16),
        [S((200, 64), bf16), S((136, 64), bf16), S((200, 136), pf.float32)],
        P(pingpong=True),
    ),
    "batched_residual_broadcast": (
        lambda a, b, r: a @ b + r,
        [S((2, 72, 64), bf16), S((2, 64, 136), bf16), S((72, 136), bf16)],
        None,
    ),
    "sliced_residual": (
        lambda a, b, r: a @ b.T + r[:, 2:],
        [S((150, 64), bf16), S((136, 64), bf16), S((150, 138), bf16)],
        None,
    ),
    # Residuals loaded by TMA into the output's staging buffers (matmul_residuals): in
    # ping-pong tiles (two chunks a tile), three chunks a tile in a persistent kernel (a
    # chunk's buffer alternates from tile to tile), and a residual that only the second
    # output reads (it lands in that output's buffers).
    "pingpong_tma_residual": (
        lambda a, b, r: a @ b.T + r,
        [S((200, 64), bf16), S((136, 64), bf16), S((200, 136), bf16)],
        P(pingpong=True, tile_m=128, tile_n=64, stages=3, tma_residuals=True),
    ),
    "persistent_tma_residual_three_chunks": (
        lambda a, b, r: pf.gelu(a @ b.T + r, approximate="tanh"),
        [S((200, 64), bf16), S((400, 64), bf16), S((200, 400), bf16)],
        P(persistent=True, tile_m=128, tile_n=192, grid_swizzle=1),
    ),
    "tma_residual_of_the_second_output": (
        lambda a, b, r: (a @ b.T, pf.relu(a @ b.T + r)),
        [S((150, 64), f16), S((136, 64), f16), S((150, 136), f16)],
        None,
    ),
    "sliced_residual_odd_offset": (
        lambda a, b, r: a @ b.T + r[:, 1:137],
        [S((150, 64), bf16), S((136, 64), bf16), S((150, 138), bf16)],
        None,
    ),
}
