"""Fusions that once compiled to wrong results, faults or errors (the correct-lowering issue's
list, then what the fuzzer found), shared by the CPU test (compile, assemble with ptxas, run
on the kernel interpreter) and the GPU test (run on the device); each against the reference
on fresh random data."""

from __future__ import annotations

from collections.abc import Callable

import pyfuse as pf

S = pf.spec
f32, f16, bf16, i32 = pf.float32, pf.float16, pf.bfloat16, pf.int32


def _residual_rms(x: pf.Tensor, r: pf.Tensor, w: pf.Tensor) -> tuple[pf.Tensor, pf.Tensor]:
    h = x + r
    return pf.rms_norm(h, w), h


def _residual_layer_norm(x: pf.Tensor, r: pf.Tensor, w: pf.Tensor) -> tuple[pf.Tensor, pf.Tensor]:
    h = x + r
    return pf.layer_norm(h, w), h


def _residual_sum(x: pf.Tensor, r: pf.Tensor) -> tuple[pf.Tensor, pf.Tensor]:
    h = x + r
    return pf.sum(h, -1), h


def _matmul_reused(a: pf.Tensor, b: pf.Tensor) -> tuple[pf.Tensor, pf.Tensor]:
    v = a @ b
    return v * 2.0 + b, v


def _centered(x: pf.Tensor, w: pf.Tensor) -> pf.Tensor:
    y = x * w
    return y - pf.mean(y, (0, 1), keepdim=True)


def _minus_row_max(a: pf.Tensor) -> tuple[pf.Tensor, pf.Tensor]:
    u = pf.unsqueeze(a, 0)
    return u - pf.max(u, 1), u


def _plus_global_max(a: pf.Tensor, w: pf.Tensor) -> pf.Tensor:
    v = pf.layer_norm(a, w)
    return v + pf.max(v, None, keepdim=True)


def _expanded_where(v: pf.Tensor, mask: pf.Tensor) -> pf.Tensor:
    w = pf.where(mask, v.expand(2), 0.5)  # its columns an expanded broadcast
    return w.T - w


def _squeeze_beside_full_min(x: pf.Tensor, y: pf.Tensor) -> tuple[pf.Tensor, pf.Tensor]:
    return y.sum((1,)), pf.gt(x, y) + x.amin((-2, -1))


def _view_beside_full_sum(x: pf.Tensor, w: pf.Tensor) -> tuple[pf.Tensor, ...]:
    return pf.sum(x, None, keepdim=True), w * x, w.view(-1)


def _max_of_permuted_layer_norm(x: pf.Tensor, w: pf.Tensor) -> pf.Tensor:
    return pf.max(pf.layer_norm(pf.permute(x, (1, 3, 0, 2)), w), (-1, 2, 1, -4))


def _linear_plus_transpose(x: pf.Tensor, w: pf.Tensor, b: pf.Tensor) -> pf.Tensor:
    y = pf.linear(x, w, b)
    return y + y.T


def _broadcast_on_two_paths(x: pf.Tensor, a: pf.Tensor) -> pf.Tensor:
    flat = pf.gt(a, x).view(-1)  # a [1, 1] broadcast against 13 here, against 208 below
    return pf.mean(pf.cast(pf.ne(flat, a), f32), (0, 1))


def _k1_matmul_over_itself(i: pf.Tensor, t: pf.Tensor, y: pf.Tensor) -> pf.Tensor:
    product = pf.cast(i >= t, f32) @ y  # K = 1: 0 * y is -0.0 for y < 0, the matmul +0.0
    return pf.sum(y / product, None)


def _padded_transposed_bool_product(
    x: pf.Tensor, y: pf.Tensor, mask: pf.Tensor
) -> tuple[pf.Tensor, ...]:
    positive = pf.transpose(y.reshape(8, -1) > 0, 1, -2)
    return pf.tanh(x), y * pf.transpose(y, 0, 1), pf.mul(mask, positive)


def _one_element_beside_softmax(x: pf.Tensor, y: pf.Tensor) -> tuple[pf.Tensor, ...]:
    probabilities = pf.softmax(pf.cast(x, f32), 1)
    d = y.T - y  # [1, 1]: its loads were bounded by the softmax row's loop, one thread's
    return probabilities, pf.min(d, (1,)), pf.maximum(probabilities, d)


def _row_broadcast_beside_softmax(x: pf.Tensor, y: pf.Tensor) -> tuple[pf.Tensor, pf.Tensor]:
    return pf.softmax(y * x, 1), pf.tanh(y).view(2, 1, 1)  # y [2, 1]: T[bx] by every thread


def _sum_onto_another_input(v: pf.Tensor, y: pf.Tensor) -> tuple[pf.Tensor, ...]:
    outer = v.unsqueeze(0) + v.unsqueeze(1)
    return outer.T, y + pf.sum(outer.T, (-2, 1), keepdim=True), outer


def _min_beside_difference(a: pf.Tensor, b: pf.Tensor, c: pf.Tensor) -> tuple[pf.Tensor, ...]:
    d = a - b
    difference = c - d
    return difference, pf.where(d <= pf.min(d, (2, 3, 0, 1)), difference, difference)


# name -> (function, input specs)
def _int64_rows_kept_across_nests(b: pf.Tensor) -> tuple[pf.Tensor, pf.Tensor]:
    shifted = b - -3  # int64
    clipped = pf.maximum(shifted, 0)
    return pf.unsqueeze(pf.maximum(shifted, clipped).any((0, 3, 2)), 0) + clipped, clipped


def _division_into_a_full_sum(v0: pf.Tensor, v1: pf.Tensor) -> tuple[pf.Tensor, ...]:
    quotient = pf.div(v0, v1)
    wider = v1 >= quotient
    top = v1.max(pf.sum(quotient, None)).bfloat16()
    return wider, top, pf.reshape(pf.bitwise_not(v0), (1, 1, 32, 42, 8)), pf.squeeze(wider)


def _variance_times_centered(x: pf.Tensor) -> pf.Tensor:
    v = pf.var(pf.cast(x, f32), None, correction=1)
    return v * (x - v)


CASES: dict[str, tuple[Callable[..., object], list[pf.Spec]]] = {
    # one input read along two paths
    "x_plus_xT": (lambda x: x + x.T, [S((3, 3), f32)]),
    "outer_product": (lambda v: pf.unsqueeze(v, 1) * v, [S((300,), f32)]),
    "xT_minus_x_f16": (lambda x: x.T - x, [S((2, 2), f16)]),
    "outer_sum_int": (lambda v: v.unsqueeze(0) + v.unsqueeze(1), [S((13,), i32)]),
    "reshaped_outer": (
        lambda v: pf.unsqueeze(pf.reshape(v, (120,)), 1) * pf.reshape(v, (120,)),
        [S((12, 10), f32)],
    ),
    # expanded broadcasts as outputs
    "broadcast_output": (lambda v: pf.broadcast_to(v, (2, 3)), [S((3,), f32)]),
    "broadcast_plus_zero": (lambda y: pf.broadcast_to(y, (2, 3, 4)) + 0.0, [S((2, 1, 1), f32)]),
    # multiply+sum matmuls whose operands the epilogue reads
    "matmul_operand_reused": (_matmul_reused, [S((48, 48), f32), S((48, 48), f32)]),
    "matmul_bT_times_b": (lambda a, b: (a @ b.T) * b, [S((48, 48), f32), S((48, 48), f32)]),
    "linear_returns_input": (
        lambda x, w, b: (x, pf.linear(x, w, b)),
        [S((2, 2), bf16), S((2, 2), bf16), S((2,), bf16)],
    ),
    # padded rows
    "padded_rows": (lambda x: x * 2.0, [S((4, 128), f32, strides=(131, 1))]),
    "padded_reshape": (lambda x: pf.reshape(x, (2560,)), [S((512, 5), f32, strides=(18, 1))]),
    # reductions: over everything, over size-1 axes, of 0-d and empty tensors
    "centered_all": (_centered, [S((7, 31), f32), S((31,), f32)]),
    "plus_sum_of_transpose": (
        lambda x: x + pf.sum(x.T, 1, keepdim=True),
        [S((63, 1), f32)],
    ),
    "minus_row_max": (_minus_row_max, [S((5,), f32)]),
    "plus_global_max": (_plus_global_max, [S((3, 64, 63), bf16), S((63,), bf16)]),
    "sum_of_one_row": (lambda x: pf.sum(x), [S((1, 4096), f32)]),
    "mean_size_one_axes": (lambda x: pf.mean(x, None), [S((2, 1, 1, 1), bf16)]),
    "max_size_one_axes": (lambda x: pf.max(x, (2, -3, 3, -4)), [S((1, 1, 1, 2), f32)]),
    "sum_0d": (lambda x: pf.sum(x), [S((), f32)]),
    "max_0d": (lambda x: (x, pf.max(x, None)), [S((), f16)]),
    "sum_empty_dim": (lambda x: pf.sum(x, 1), [S((4, 0), f32)]),
    "mean_empty_dim": (lambda x: pf.mean(x, (0,), keepdim=True), [S((0, 128, 7), f16)]),
    "copy_empty": (lambda x: x, [S((16, 0, 257, 1), f32)]),
    "bool_max": (lambda x: pf.max(x, 0, keepdim=True), [S((2,), pf.bool)]),
    "bool_min_rows": (lambda x: (x, pf.min(x, -2)), [S((253, 3), pf.bool)]),
    # residuals returned beside a norm (a kernel reads its own output)
    "residual_rms_norm": (_residual_rms, [S((8, 1024), bf16)] * 2 + [S((1024,), bf16)]),
    "residual_layer_norm": (_residual_layer_norm, [S((8, 1024), bf16)] * 2 + [S((1024,), bf16)]),
    "residual_sum": (_residual_sum, [S((8, 1024), bf16)] * 2),
    # views
    "reshape_flat": (lambda x: pf.reshape(x, (-1,)), [S((4, 8), f32)]),
    "flat_unsqueeze": (lambda x: pf.unsqueeze(pf.reshape(x, (-1,)), 1) * 2.0, [S((4, 8), f32)]),
    "split_heads": (
        lambda x: pf.transpose(pf.reshape(x, (2, 16, 4, 8)), 1, 2),
        [S((2, 16, 32), f32)],
    ),
    "reshape_empty": (lambda x: pf.reshape(x, (0,)) + 1, [S((64, 0), i32)]),
    # rows the register budget does not fit
    "layer_norm_of_transpose": (lambda x: pf.layer_norm(x.T), [S((127, 129), f32)]),
    "softmax_middle_axis": (lambda x: pf.softmax(x, 1), [S((1, 256, 3), f32)]),
    "softmax_257_rows": (lambda x: (x, pf.softmax(x, -2)), [S((257, 2), f32)]),
    # casts out of range saturate (torch on the GPU)
    "cast_saturates": (lambda x: pf.cast(x * 1e10, i32), [S((8,), f32)]),
    "cast_bf16_div_bool": (lambda x, y: pf.cast(x / y, i32), [S((2,), bf16), S((2,), pf.bool)]),
    # the GPU fuzzer, seed 53 (29,168 fusions at 9b22522)
    "expanded_intermediate_transposed": (_expanded_where, [S((1,), bf16), S((2, 1), pf.bool)]),
    "squeeze_beside_full_min": (_squeeze_beside_full_min, [S((12, 3), i32), S((12, 1), f32)]),
    "matmul_of_computed_odd_rows": (
        lambda a, b: pf.cast(a, bf16) @ b,
        [S((97, 97), f32), S((97, 24), bf16)],
    ),
    "matmul_k0": (
        lambda a, b: pf.matmul(pf.cast(a, bf16), b.T),
        [S((24, 0), f32), S((128, 0), bf16)],
    ),
    "linear_f16_then_f32_min": (
        lambda s, x, w: pf.minimum(pf.linear(x, w), s),
        [S((), bf16), S((64, 64), f16), S((8, 64), f16, strides=(65, 1))],
    ),
    "linear_plus_transpose": (_linear_plus_transpose, [S((2, 72), bf16)] * 2 + [S((2,), bf16)]),
    "view_beside_full_sum": (
        _view_beside_full_sum,
        [S((3, 6, 3, 1, 1), f32), S((3, 1, 1, 1, 1), bf16)],
    ),
    "max_of_permuted_layer_norm": (
        _max_of_permuted_layer_norm,
        [S((12, 1, 3, 1), f16), S((3,), f16)],
    ),
    # the GPU fuzzer, seed 131 (12,041 fusions at 06efe3d)
    "broadcast_matmul_output": (
        lambda a, b: pf.broadcast_to(a @ b, (2, 2, 7, 16)),
        [S((2, 7, 64), bf16), S((64, 16), bf16)],
    ),
    "rms_norm_50400": (lambda x: pf.rms_norm(x.reshape(50400)), [S((42, 48, 25), bf16)]),
    # the GPU fuzzer, seed 171 (26,702 fusions at 89e7aff)
    "batch_major_view_matmul": (
        lambda a, b: a @ b,
        [S((2, 2, 2), bf16, strides=(256, 512, 1)), S((2, 24), bf16)],
    ),
    "batch_major_view_matmul_tiles": (
        lambda a, b: a @ b,
        [S((4, 64, 64), bf16, strides=(64, 256, 1)), S((64, 32), bf16)],
    ),
    "broadcast_read_on_two_paths": (_broadcast_on_two_paths, [S((16, 13), f32), S((1, 1), f16)]),
    "k1_matmul_signed_zero": (
        _k1_matmul_over_itself,
        [S((1, 1), i32), S((1, 1), f32), S((1, 2), f32)],
    ),
    "log_of_gelu_tail": (
        lambda x: (pf.log(pf.gelu(x * 8.0)), pf.log(pf.gelu(x * 8.0, approximate="tanh"))),
        [S((4, 257), f32)],
    ),
    "padded_transposed_bool_product": (
        _padded_transposed_bool_product,
        [S((11, 257), f16), S((8, 8), bf16, strides=(1, 9)), S((8, 1), pf.bool, strides=(0, 1))],
    ),
    # the CPU fuzzer, seed 191 (8,763 fusions at 02eed62)
    "one_element_beside_softmax": (
        _one_element_beside_softmax,
        [S((1, 2), i32), S((1, 1), f16)],
    ),
    "row_broadcast_beside_softmax": (
        _row_broadcast_beside_softmax,
        [S((2, 2), bf16), S((2, 1), i32)],
    ),
    "sum_broadcast_onto_another_input": (
        _sum_onto_another_input,
        [S((128,), f16), S((1, 1), f32)],
    ),
    "max_over_3d_view_of_matmul": (
        lambda a, b: (lambda v: pf.where(v > 0.25, v, pf.max(v, None, keepdim=True)))(
            pf.reshape(pf.matmul(a, b.T), (4, 25, 128))
        ),
        [S((100, 1), bf16), S((128, 1), bf16)],
    ),
    # rows holding two tensors that spilled at 512 threads (the CPU fuzzer, seed 223)
    "layer_norm_of_a_max_of_two_inputs": (
        lambda a, b, w: (pf.layer_norm(b.max(a), w), b.max(a) > 0, w),
        [S((85, 127), bf16), S((85, 127), f32), S((85, 127), f32)],
    ),
    "min_over_everything_beside_a_difference": (
        _min_beside_difference,
        [S((11, 1, 64, 32), f16), S((11, 1, 1, 1), f32), S((11, 1, 64, 32), bf16)],
    ),
    # rows a block of 1024 threads held in registers and spilled (the CPU fuzzer, seed 151)
    "layer_norm_of_residual_32768": (
        _residual_layer_norm,
        [S((2, 32768), bf16)] * 2 + [S((32768,), bf16)],
    ),
    # a 1024-thread row streaming three 13-element register arrays spilled at -O3 with
    # either register budget (the CPU fuzzer, seed 229)
    "where_of_a_mask_beside_rms_norm": (
        lambda m, x: (lambda v: (m * v, pf.rms_norm(v, x)))(pf.where(m, m, x)),
        [S((97, 127), pf.bool), S((97, 127), f16)],
    ),
    # a logsumexp over a size-1 axis broadcast against its own input, then a variance: the
    # reduction schedule left the short tensor's loop outside the reference's (the GPU
    # fuzzer, seed 269)
    "variance_of_a_clamp_broadcast_against_its_input": (
        lambda v: pf.var(pf.clamp(pf.cast(v, f32).logsumexp((2,)), v), None),
        [S((17, 1, 1, 5), pf.bool)],
    ),
    # a reduction of an empty tensor beside a non-empty output: the empty reference ran no
    # thread and left the cast unwritten (the GPU fuzzer, seed 281)
    "cast_beside_an_empty_reduction": (
        lambda e, v: ((e - v).amax(-1, keepdim=True), v.int()),
        [S((0, 128, 127, 97), i32), S((1, 1, 127, 1), bf16)],
    ),
    # a cached input lacking the reference's leading axis, in a loop nest of its own (the CPU
    # fuzzer, seed 283: a regression of the rule above, caught before it landed on the GPU)
    "broadcast_output_beside_a_min": (
        lambda v: (lambda b: (pf.min(b, 0, keepdim=True), pf.broadcast_to(b, (3, 2, 3, 8))))(
            pf.broadcast_to(v, (2, 3, 8))
        ),
        [S((3, 8), f32)],
    ),
    # masks computed from indices (IotaOp), never loaded: causal softmax, tril/triu, arange
    "causal_softmax_from_tril": (
        lambda s: pf.softmax(pf.where(pf.tril(pf.ones_like(s)) > 0, s, float("-inf")), -1),
        [S((3, 256, 256), bf16)],
    ),
    "causal_softmax_from_arange": (
        lambda s: pf.softmax(
            pf.where(pf.arange(33)[:, None] >= pf.arange(33), s, float("-inf")), -1
        ),
        [S((2, 4, 33, 33), f32)],
    ),
    "tril_triu_and_arange": (
        lambda x: (pf.triu(x, 1), x.tril(-2), x * pf.arange(0.5, 13.5, 2.0) + pf.arange(3, 16, 2)),
        [S((5, 7), f16)],
    ),
    # argmax/argmin: a max, a compare and a min of indices (ties: the first index)
    "argmax_argmin_over_rows_columns_and_all": (
        lambda x: (pf.argmax(x, -1), x.argmin(0, keepdim=True), pf.argmax(x)),
        [S((33, 65), bf16)],
    ),
    # the index of a 0-d tensor is 0, NaN or not (GPU fuzzer, 383: a NaN cast to int64)
    "argmax_of_a_0d_log": (lambda v: (pf.argmax(pf.log(v)), v.argmin()), [S((), f32)]),
    "max_with_dim_gives_values_and_indices": (
        lambda i: tuple(i.max(1, keepdim=True)),
        [S((17, 300), i32)],
    ),
    "argmax_of_long_rows": (lambda x: pf.argmax(x * 2.0, -1), [S((4, 20000), f32)]),
    # integer bit logic (and, or, xor, not instructions), beside bool logic and a sum
    "bitwise_ops_of_ints_and_bools": (
        lambda i, j, x: ((i & j) ^ ~i, (i | 6) & (x > 0), ((i ^ j) & 0xFF).sum(-1)),
        [S((9, 130), i32), S((130,), i32), S((9, 130), f32)],
    ),
    # basic indexing: slices of inputs read in place at an offset (vectors only where the
    # offset and the strides keep them aligned), slices of computed values after a boundary
    "slices_of_inputs_at_aligned_and_odd_offsets": (
        lambda x, y: (x[:, :128] * 2.0, y[..., :64] * y[..., 64:], y[:, 1:] + 1.0, x[1::2, 3]),
        [S((4, 131), f32), S((6, 128), bf16)],
    ),
    "slices_of_computed_values_and_matmul_operands": (
        lambda a, b: ((a @ b)[:, 8:40] * 2.0, a[:, :32] @ b[:32], pf.exp(a[2:, ::3]).sum(-1)),
        [S((64, 64), bf16), S((64, 64), bf16)],
    ),
    "slices_through_views_and_ints": (
        lambda x: (x.T[1:4, ::2] + 1.0, x[2:5].reshape(-1)[::3], x[-1, None] * x[0], x[1, 2] * x),
        [S((9, 12), f32)],
    ),
    # an empty output beside a kernel: its buffer is no kernel's parameter (GPU fuzzer, 383)
    "an_empty_slice_returned_beside_the_input": (
        lambda x: (x, x[..., 0:0], x[1:, 3]),
        [S((1, 4, 1), f32)],
    ),
    # x ** 0.5 is sqrt, as in torch: NaN for -inf (CPU fuzzer, 379: a logsumexp over no rows)
    "power_one_half_is_sqrt": (
        lambda x: (pf.logsumexp(x, 0) ** 0.5, (x - 0.5) ** 0.5),
        [S((0, 61), f32)],
    ),
    "square_root_by_pow_of_signed_values": (lambda x: (x - 0.5) ** 0.5, [S((7, 33), f32)]),
    # cat and stack: a kernel of their own that reads views of inputs in place
    "cat_of_inputs_computed_values_and_views": (
        lambda a, b: (
            pf.cat([a, b * 2.0], -1),
            pf.cat([a.T, b.T[1:]], 0) + 1.0,
            pf.cat([-a[..., 2:], a[..., :2]], -1) * a,
        ),
        [S((3, 4), f32), S((3, 5), bf16)],
    ),
    "stack_promotes_and_feeds_a_reduction": (
        lambda x, i: (pf.stack([x, i, x], 1).sum(1), pf.stack([i, i], -1)),
        [S((5, 33), f32), S((5, 33), i32)],
    ),
    "cat_of_empty_strided_and_bool_pieces": (
        lambda a, m, e: (pf.cat([e, a, e], 1), pf.cat([m, m.T], 0), pf.cat([a], 0)),
        [S((6, 6), f32, strides=(1, 6)), S((6, 6), pf.bool), S((6, 0), f32)],
    ),
    # int8, uint8, int16: 32-bit registers, wrapped after every op, 16-byte vectors
    "narrow_integers_wrap_promote_and_reduce": (
        lambda a, b, h: (
            a + b,
            (a - a) * b > 3,
            b.amin(-1),
            (a * 7).amax(0),
            h * h + a,
            b.to(pf.int8).sum(-1),
            pf.cast(h, pf.float32) * 0.5,
        ),
        [S((9, 64), pf.uint8), S((9, 64), pf.int8), S((9, 64), pf.int16)],
    ),
    "floats_to_narrow_integers_saturate": (
        lambda x: ((x * 200).to(pf.uint8), (x * 200).to(pf.int8), (x * 5e4).to(pf.int16)),
        [S((5, 33), f32)],
    ),
    "narrow_integer_views_and_softmax": (
        lambda a: (pf.softmax(a.T.float(), -1), a[:, 1:] * 2, pf.cat([a, a], 0)),
        [S((16, 31), pf.uint8, strides=(1, 16))],
    ),
    # a keepdim result only returned is no normalization: the long reduction splits (a
    # 1024-thread row of remainders kept for the output stored 176 bytes on the stack: CPU
    # fuzzer, seed 401)
    "keepdim_minimum_of_a_remainder_beside_it": (
        lambda x: (lambda r: (r, pf.amin(r, None, keepdim=True)))(
            pf.remainder(x, x.transpose(1, -1))
        ),
        [S((33, 1, 32), f32)],
    ),
    # cat after a reduction (its pieces keep the reduced axis in their domains), of one
    # tensor twice, beside a view that is also an output (GPU fuzzer, seed 411)
    "cat_of_reductions_twice_and_of_returned_views": (
        lambda x, y: (pf.cat((x.amax(-2), x.amax(-2)), -1), y[::3], pf.cat([y, y[::3]], -1)),
        [S((2, 5), i32), S((7,), bf16)],
    ),
    # x ** 1 is x and x ** 2 is x * x exactly (GPU fuzzer, seed 411: a bool exponent)
    "tensor_exponents_one_and_two_are_exact": (
        lambda b, x: (x**b < x, (x ** (b + 1)) == x * x, x ** (b * 0 + 1.0)),
        [S((257,), pf.bool), S((257,), f32)],
    ),
    # an int64 row stored as an output and summed: staged across the serial loop, it spilled
    # at 1024 threads (CPU fuzzer, seed 419); the reduction now reads it from the pointwise
    # kernel that writes it
    "int64_output_beside_its_sum": (
        lambda b: (lambda v: v.sum((1, 2, 0)) ^ v)(pf.where(b, b, -1)),
        [S((31, 28, 34), pf.bool)],
    ),
    # rotary embeddings through cat: one kernel
    "rotary_embedding_through_cat": (
        lambda x, c, s: x * c + pf.cat([-x[..., 4:], x[..., :4]], -1) * s,
        [S((2, 33, 8), bf16), S((33, 8), bf16), S((33, 8), f32)],
    ),
    # int64 arrays kept across loop nests in vectors spilled at 1024 threads (CPU fuzzer, 379)
    "int64_rows_kept_across_nests_in_vectors": (
        _int64_rows_kept_across_nests,
        [S((32, 1, 21, 24), pf.bool)],
    ),
    # (-inf) ** 3.25 is +inf, as C's pow (GPU fuzzer, 389: a bf16 logsumexp over no elements)
    # sin of a product of int8 rows (about 1e10): sin.approx gave 0 (GPU fuzzer, seed 443)
    "sine_of_huge_arguments": (
        lambda i, x: (pf.sin(pf.prod(i, 0)), pf.cos(x * 1e30), pf.sin(x * 3e7)),
        [S((5, 5), pf.int8), S((7, 33), f32)],
    ),
    # an int64 cast to f32 rounds once (the interpreter rounded through f64: CPU fuzzer, 441)
    "int64_to_float_rounds_once": (
        lambda i: pf.sin(~pf.prod(i, 0, keepdim=True)),
        [S((30, 58), pf.int16)],
    ),
    # a bool array held across a streaming reduction's nests spilled (CPU fuzzer, seed 457)
    "bools_beside_a_streaming_logsumexp": (
        lambda x, y: (pf.logsumexp(pf.cast(pf.ge(x, y), f32), (0, 1, 2), keepdim=True), x >= y),
        [S((32, 64, 7), pf.uint8), S((32, 64, 7), i32)],
    ),
    # float64 end to end: its transcendentals, reductions, a matmul (multiply+sum), promotion
    "float64_math_reductions_and_matmul": (
        lambda x, w, y: (
            pf.softmax(x, -1),
            pf.layer_norm(pf.gelu(x) + pf.erf(x) * pf.tanh(x), w),
            x @ y.double().T,
            pf.logsumexp(pf.sin(x * 1e7) + pf.cos(y[:1]), -1) ** x[:, 0],
        ),
        [S((9, 130), pf.float64), S((130,), pf.float64), S((7, 130), f32)],
    ),
    # NaN to integers is 0 from f64 too (cvt.rzi.s32.f64 gave INT_MIN: GPU fuzzer, seed 461)
    "float64_nan_to_integers_is_zero": (
        lambda x, y: tuple(
            pf.cast(v, dtype)
            for v in (pf.sqrt(x), pf.pow(x, y))
            for dtype in (pf.int32, pf.uint8, pf.int64, pf.int8, pf.int16)
        ),
        [S((5, 33), pf.float64), S((5, 33), f32)],
    ),
    "power_of_an_empty_logsumexp": (
        lambda x: (pf.logsumexp(x, (1,)) ** 3.25, pf.logsumexp(x, (1,)) ** -3.0),
        [S((1, 0), bf16)],
    ),
    # products (identity 1; ints and bools in int64, 16-bit floats in f32)
    "products_of_rows_columns_and_everything": (
        lambda x, i: (pf.prod(x * 0.25 + 1.0, -1), x.prod(0), pf.prod(i % 3 + 1, -1), pf.prod(x)),
        [S((33, 65), bf16), S((33, 17), i32)],
    ),
    "product_over_an_empty_dim_is_one": (lambda x: pf.prod(x, 1), [S((4, 0), f32)]),
    # torch's rounding and division-like ops, floats and integers (integer division by 0: 0)
    "rounding_and_division_ops": (
        lambda x, y: (
            pf.floor(x * 3),
            pf.ceil(x * 3),
            pf.round(x * 3),
            pf.trunc(x * 3),
            pf.erf(x),
            pf.fmod(x * 5, y),
            (x * 5) % y,
            (x * 5) // y,
        ),
        [S((33, 65), bf16), S((33, 65), f32)],
    ),
    "integer_division_ops": (
        lambda i, j: (i // j, i % j, pf.fmod(i, j), i // 3, 7 % j, -7 // j),
        [S((33, 65), i32), S((1, 65), i32)],
    ),
    # integer negations into a max or min over rows of 128 int32 (4 per thread): ptxas
    # folds neg.s32 into VIMNMX3 and drops one of them (GPU fuzzer, seed 503)
    "max_and_min_of_negated_integers": (
        lambda x: (
            pf.max(-x.ceil(), (1,), keepdim=True),
            pf.min(0 - x, 1),
            pf.max(x * -1, 1),
            pf.maximum(pf.maximum(-x, -(x * 3)), -(x + 1)),
        ),
        [S((146, 128), i32)],
    ),
    # divisions on the way into a persistent row: div.rn's slow-path call keeps about 44
    # registers (CPU fuzzer, seed 473: 30 elements per thread at 512 threads spilled 8 B)
    "layer_norm_of_a_softplus_over_everything": (
        lambda x: pf.layer_norm(pf.softplus(x), x),
        [S((83, 174), f32)],
    ),
    "layer_norm_of_a_softplus_rows": (
        lambda x: pf.layer_norm(pf.softplus(x)),
        [S((2, 8192), f32)],
    ),
    # a division on the way into a sum over everything, whose vectorized plan failed: the
    # plan without vectors kept 21 elements a thread of five arrays at 512 threads, past the
    # dividing row's 20, and spilled 84 B (CPU fuzzer, seed 1405)
    "division_into_a_full_sum_without_vectors": (
        _division_into_a_full_sum,
        [S((1, 32, 42, 8), pf.int8), S((1, 32, 42, 8), f32)],
    ),
    # tanh keeps the sign of a zero: 1 / tanh(round(x * 4)) is -inf for a small negative x,
    # whose maximum with 0 is 0 (CPU fuzzer, seed 1414: the kernel's tanh(-0) was +0, so inf)
    "reciprocal_of_tanh_of_a_negative_zero": (
        lambda x: pf.maximum(pf.div(True, pf.tanh(pf.round(x * 4))), 0),
        [S((7, 31, 24), bf16)],
    ),
    # decode: a GEMV x[1, K] @ W.T is one reduction kernel (x's size-1 M, a broadcast, merged
    # with N's broadcast: it ran as nine kernels, the product written out)
    "decode_gemv_and_linear": (
        lambda x, w, b: (x @ w.T, pf.gelu(pf.linear(x, w, b)), pf.unsqueeze(x[0], 0) @ w.T),
        [S((1, 200), bf16), S((136, 200), bf16), S((136,), bf16)],
    ),
    # a streaming row storing one value and reducing another keeps two 33-element arrays at
    # 1024 threads: more than a thread's 64 registers (CPU fuzzer, seed 523: a spill)
    "row_stored_and_reduced_beside_a_full_any": (
        lambda v0: (
            pf.where(v0 > 0.25, v0, -1.5),
            pf.ge(pf.where(v0 > 0.25, v0, -1.5), pf.any(v0, (1, -2), keepdim=True)),
            pf.amax(pf.exp2(v0), 1),
        ),
        [S((341, 97), pf.int8, strides=(1, 344))],
    ),
    # a bf16 remainder beside an argmax of 39116 elements: a 1024-thread persistent row of 40
    # elements per thread, with the remainder's f64 divisions, spilled 32 B (CPU fuzzer, 549)
    "remainder_beside_a_long_argmax": (
        lambda a, b: (pf.remainder(a.reshape(-1), b), b.max(-1, keepdim=True).indices),
        [S((127, 28, 11), pf.int16), S((39116,), bf16)],
    ),
    # a decode GEMV with a long K: fewer threads to fit the streaming row's registers
    # (vectors of 8 at 1024 threads fell back to scalar loads; the GEMM set's 1x3584x18944)
    "long_gemv_decode": (
        lambda x, w: x @ w.T,
        [S((1, 18944), bf16), S((8, 18944), bf16)],
    ),
    # wide ragged rows at 1024 threads: a 16-bit weight's cast, replayed on the 1-D loops,
    # was computed for the whole row into a per-thread array (its broadcast's loops have the
    # block axis too), and spilled 132 to 300 B; broadcast first, it is read in the epilogue
    # loop (passes/broadcast_first.py)
    "wide_ragged_layer_norm_with_16_bit_weights": (
        lambda x, w, b: pf.layer_norm(x, w, b),
        [S((2, 25000), bf16), S((25000,), bf16), S((25000,), bf16)],
    ),
    "wide_ragged_rms_norm_with_a_16_bit_weight": (
        lambda x, w: pf.rms_norm(x, w),
        [S((3, 44444), f16), S((44444,), f16)],
    ),
    "odd_layer_norm_long_epilogue": (
        lambda x, r, w: (pf.layer_norm(pf.gelu(x + r) * x, w) * r, x + r),
        [S((2, 12285), f16)] * 2 + [S((12285,), f16)],
    ),
    # x reshaped along one path and broadcast against its own rows along another: the
    # output's columns are the reshape of what its rows index; one loop read x at (row, col)
    # for both (CPU fuzzer, seed 605 case 5738: 16 of 100 booleans wrong)
    "reshape_of_an_input_against_its_own_rows": (
        lambda x: pf.logical_or(pf.reshape(x > 0, (10,)), x <= pf.reshape(x > 0, (10,))),
        [S((2, 5, 1), f32)],
    ),
    # a reshape that merges and splits ([6, 4] -> 24 -> [4, 6]) beside the transpose of its
    # input: the reshape's output maps back onto its own input (22 of 24 wrong; review)
    "reshape_beside_the_transpose_of_its_input": (
        lambda x: (x * 2.0).reshape(4, 6) + x.T,
        [S((6, 4), f32)],
    ),
    "reshape_to_4x6_beside_its_own_input": (
        lambda x: pf.reshape(x * 2.0, (4, 6)) + x,
        [S((2, 3, 4, 1), f32)],
    ),
    # ragged wide rows at 1024 threads: every unrolled copy of the serial loop kept a guard
    # and a branch around each element, where only the last copy's can fail; the layer_norm
    # spilled 52 B (41000 columns, 48 a thread), the f32 one 44 B, the streaming rms_norm of
    # a residual 12 B (36000 columns, one element per access)
    "ragged_wide_layer_norm": (
        lambda x, w, b: pf.layer_norm(x, w, b),
        [S((2, 41000), bf16), S((41000,), bf16), S((41000,), bf16)],
    ),
    "ragged_wide_f32_layer_norm": (
        lambda x, w, b: pf.layer_norm(x, w, b),
        [S((1, 44444), f32), S((44444,), f32), S((44444,), f32)],
    ),
    "ragged_wide_residual_rms_norm": (
        lambda x, r, w: (pf.rms_norm(x + r, w), x + r),
        [S((2, 36000), bf16), S((2, 36000), bf16), S((36000,), bf16)],
    ),
    # An int row cast for a variance, then cast again after it for the output: the row held
    # the int cache beside the cast, unaccounted (CPU fuzzer, seed 1458: 72 B spilled; 604 B
    # at 1024 threads of 37 elements)
    "second_cast_after_a_variance": (
        _variance_times_centered,
        [S((10, 61, 61), i32, strides=(3782, 62, 0))],
    ),
    # torch's x.max(dim) takes bools, where argmax refuses them: its indices were refused
    "max_pair_of_bools": (
        lambda x: (*x.max(1), x.min(0, keepdim=True).indices),
        [S((5, 7), pf.bool)],
    ),
    # Odd-width rows read in aligned windows (iterdomain.Split's window): each row starts at
    # a different place in its first vector, the first and last vectors are copied element
    # by element; where tensors lay the rows out differently (a layer_norm's weight, a
    # slice beside a contiguous output) the rows are read element by element
    "window_log_softmax_odd_rows": (lambda x: pf.log_softmax(x, -1), [S((13, 1027), bf16)]),
    "odd_layer_norm_beside_its_weight": (
        lambda x, w, b: pf.layer_norm(x, w, b),
        [S((6, 1001), bf16), S((1001,), bf16), S((1001,), bf16)],
    ),
    "odd_softmax_of_a_slice": (lambda x: pf.softmax(x[:, 1:], -1), [S((9, 522), f16)]),
    "window_sum_over_merged_rows": (lambda x: pf.sum(x * x, -1), [S((3, 5, 333), f32)]),
    "window_f32_out_of_bf16_rows": (
        lambda x: pf.log_softmax(pf.cast(x, f32), -1),
        [S((7, 999), bf16)],
    ),
    "window_streaming_row": (lambda x: pf.log_softmax(x, -1), [S((1, 50257), bf16)]),
    "window_pointwise_rows_beside_their_statistics": (
        lambda x, s: (x - s) * 2.0,
        [S((9, 1001), bf16), S((9, 1), f32)],
    ),
    # f64 math expanded with div.rn.f64 beside a reduction: the division's subroutine spilled
    # 76 B at 1024 threads (CPU fuzzer, seed 1473, case 2876); such rows take 512
    "f64_erf_beside_a_variance": (
        lambda x: (pf.erf(x), pf.silu(pf.var(x, None, keepdim=True))),
        [S((5, 31, 128), pf.float64)],
    ),
    # Dense tensors of one shape: flat vectors cross the odd-width rows
    # Rows of a reshaped input (logits.view(-1, V)): its rows lie as the output's do, its
    # anchor is the view the kernel indexes, not the 3-D input
    "window_rows_of_a_reshaped_input": (
        lambda x: pf.log_softmax(pf.reshape(x, (6, 1027)), -1),
        [S((2, 3, 1027), bf16)],
    ),
    "dense_flat_vectors_across_odd_rows": (
        lambda x, y: pf.gelu(x * y + 1.0),
        [S((8, 1027), bf16), S((8, 1027), bf16)],
    ),
    "dense_flat_vectors_past_a_size_one_axis": (
        lambda x, y: x - y * 3.0,
        [S((6, 1, 333), f32), S((6, 1, 333), f32)],
    ),
}


def _reread_layer_norm_of_a_residual(
    x: pf.Tensor, r: pf.Tensor, w: pf.Tensor, b: pf.Tensor
) -> tuple[pf.Tensor, pf.Tensor]:
    h = x + r
    return pf.layer_norm(h, w, b), h


# Cases only the GPU runs: their shapes are what makes the plan (rows past the registers over
# two rows per SM of the device: reread_rows.py), too large for the CPU interpreter. Their
# CPU coverage runs the same plans on a target of one SM (tests/passes/test_reread_rows.py).
GPU_ONLY_CASES: dict[str, tuple[Callable[..., object], list[pf.Spec]]] = {
    "reread_log_softmax_vocab": (lambda x: pf.log_softmax(x, -1), [S((300, 50257), bf16)]),
    "reread_softmax_and_its_input_scaled": (
        lambda x: (pf.softmax(x, -1), x * 2.0),
        [S((270, 65536), f32)],
    ),
    "reread_layer_norm_of_a_residual": (
        _reread_layer_norm_of_a_residual,
        [S((264, 40000), bf16), S((264, 40000), bf16), S((40000,), bf16), S((40000,), bf16)],
    ),
    "reread_f64_softmax": (lambda x: pf.softmax(x, -1), [S((264, 30001), pf.float64)]),
}
