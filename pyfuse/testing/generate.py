"""Random valid fusions, deterministic from ``(seed, index)``.

:func:`generate` draws a :class:`~pyfuse.testing.program.Program` from the whole public op set:
pointwise unary and binary ops (comparisons, ``where``, casts between the float types,
the integer ones (int8 to int32, uint8) and bool, ``pow``, ``maximum``...) with tensors or
Python scalars on either side, reductions over an int, a tuple of dims or None (keepdim
both ways), ``broadcast_to``/``expand``, ``unsqueeze``,
``squeeze``, ``permute``/``transpose``/``.T``, ``reshape``/``view`` (with -1 and flattening),
softmax, layer_norm, rms_norm, matmul/linear (f32, bf16, f16; epilogues reusing an operand),
the composites (clamp, elu, softplus, var, logsumexp, any...), torch's conversions (``.half()``),
NumPy ufuncs on tensors (``np.maximum(x, 0)``),
one input read along two axes (``x + x.T``, ``unsqueeze(v, 1) * v``) and multi-output
returns. Inputs are f32/bf16/f16/int32/int16/int8/uint8/bool with ragged, size-1, empty, 0-d and
multiple-of-8/16/64 extents, broadcast against each other, some strided (transposed,
column-major, row-padded, a broadcast stride 0).

Validity is by construction (shapes broadcast, dims in range) and checked as the program is
drawn (:class:`~pyfuse.testing.builder.Builder`): every candidate op is traced at once on
symbolic tensors, and one that raises
:class:`pyfuse.FusionError` or grows past the case's element budget is dropped and redrawn.
So a program traces unless a later pyfuse change makes it invalid (the runner counts those
as ``invalid``, not as failures). Most cases stay under ~20k elements per tensor, one in ten
under ~70k: the kernel-IR interpreter is vectorized but slow for large grids.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pyfuse.testing.builder import Builder, broadcasts
from pyfuse.testing.generate_layout import joining, layout_op, reshape, slicing, two_axes
from pyfuse.testing.program import DTYPE_SOURCE, SCHEDULES, Op, Program, short_name

_UNARY = (
    ("neg", "pf.neg({0})"),
    ("neg", "-{0}"),
    ("abs", "pf.abs({0})"),
    ("exp", "pf.exp({0})"),
    ("exp", "{0}.exp()"),
    ("log", "pf.log({0})"),
    ("log", "pf.log(pf.abs({0}) + 0.5)"),
    ("tanh", "pf.tanh({0})"),
    ("sigmoid", "pf.sigmoid({0})"),
    ("relu", "pf.relu({0})"),
    ("gelu", "pf.gelu({0})"),
    ("gelu", 'pf.gelu({0}, approximate="tanh")'),
    ("silu", "pf.silu({0})"),
    ("sqrt", "pf.sqrt({0})"),
    ("sqrt", "pf.sqrt(pf.abs({0}))"),
    ("rsqrt", "pf.rsqrt(pf.abs({0}) + 1.0)"),
    ("reciprocal", "pf.reciprocal({0})"),
    ("sin", "pf.sin({0})"),
    ("cos", "pf.cos({0})"),
    ("erf", "pf.erf({0})"),
    ("floor", "pf.floor({0} * 4)"),
    ("ceil", "{0}.ceil()"),
    ("round", "pf.round({0} * 4)"),
    ("trunc", "pf.trunc({0} * 4)"),
)
_BINARY_FUNCTIONS = (
    "add", "sub", "mul", "div", "maximum", "minimum", "pow", "fmod", "remainder", "floor_divide",
)  # fmt: skip
# Each operator and the function it calls.
_OPERATORS = {
    "+": "add",
    "-": "sub",
    "*": "mul",
    "/": "div",
    "%": "remainder",
    "//": "floor_divide",
}
_COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
_COMPARISON_OPERATORS = ("<", "<=", ">", ">=", "==", "!=")
_REDUCTIONS = ("sum", "max", "min", "mean", "prod")


# ---- op families -----------------------------------------------------------------------------


def _unary(b: Builder) -> int | None:
    x = b.choose()
    if x is None:
        return None
    if b.dtype_of(x).is_bool:
        return b.op("logical_not", "pf.logical_not({0})", [x])
    name, template = _UNARY[int(b.rng.integers(len(_UNARY)))]
    return b.op(name, template, [x])


def _binary_operands(b: Builder) -> tuple[int, int | None, str] | None:
    """Two broadcastable values (the second sometimes a new input) or a value and a scalar."""
    x = b.choose()
    if x is None:
        return None
    if b.chance(0.3):
        return x, None, b.scalar(short_name(b.dtype_of(x)))
    shape = b.shape_of(x)
    y = b.choose(lambda i: i != x and broadcasts(b.shape_of(i), shape))
    if y is None or b.chance(0.3):
        y = b.new_input(b.partner_shape(shape))
    return (x, y, "") if b.chance(0.5) else (y, x, "")


def _binary(b: Builder) -> int | None:
    picked = _binary_operands(b)
    if picked is None:
        return None
    x, y, scalar = picked
    comparison = b.chance(0.25)
    if comparison:
        name = b.pick(_COMPARISONS)
        use_operator = b.chance(0.5)
        symbol = _COMPARISON_OPERATORS[_COMPARISONS.index(name)] if use_operator else ""
    else:
        name = b.pick(_BINARY_FUNCTIONS + tuple(_OPERATORS))
        use_operator = name in _OPERATORS
        symbol = name if use_operator else ""
        if use_operator:
            name = _OPERATORS[name]
    if name == "pow":
        # Integer powers with negative exponents are errors in torch: keep pow to floats.
        if not b.is_float(x):
            return None
        symbol, use_operator = ("**", True) if b.chance(0.4) else ("", False)
        # A computed exponent is ill-conditioned as a test: base ** e moves by ln(base) times
        # the last bit of e, and a negative base is NaN unless e rounds to an integer. So
        # only an input, or a scalar, is an exponent.
        if y is not None and (b.computed(y) or b.chance(0.5)):
            scalar, y = b.pick(("2", "2.0", "0.5", "3")), None
    flips = comparison and b.flips_on(x, *(() if y is None else (y,)))
    if y is None:
        tensor_first = b.chance(0.5) or (name == "pow" and b.computed(x))
        lhs, rhs, args = ("{0}", scalar, [x]) if tensor_first else (scalar, "{0}", [x])
    else:
        lhs, rhs, args = "{0}", "{1}", [x, y]
    if use_operator and symbol:
        if lhs == scalar and symbol in ("==", "!="):
            lhs, rhs = rhs, lhs  # `2 == x` is Python's int.__eq__ first, then x's
        return b.op(name, f"({lhs} {symbol} {rhs})", args, flips)
    return b.op(name, f"pf.{name}({lhs}, {rhs})", args, flips)


def _logical(b: Builder) -> int | None:
    x = b.choose(lambda i: b.dtype_of(i).is_bool)
    if x is None:
        x = b.choose()
        if x is None:
            return None
        return b.op("gt", "({0} > 0)", [x], b.flips_on(x))
    y = b.choose(lambda i: b.dtype_of(i).is_bool and broadcasts(b.shape_of(i), b.shape_of(x)))
    name = b.pick(("logical_and", "logical_or"))
    if y is None:
        return b.op(name, f"pf.{name}({{0}}, True)", [x])
    return b.op(name, f"pf.{name}({{0}}, {{1}})", [x, y])


def _bitwise(b: Builder) -> int | None:
    """``& | ^ ~`` (and their functions) on integer values, with a tensor or an int."""
    x = b.choose(lambda i: b.dtype_of(i).is_integer)
    if x is None:
        return None
    if b.chance(0.25):
        return b.op("bitwise_not", b.pick(("(~{0})", "pf.bitwise_not({0})")), [x])
    symbol = b.pick(("&", "|", "^"))
    name = {"&": "bitwise_and", "|": "bitwise_or", "^": "bitwise_xor"}[symbol]
    y = b.choose(lambda i: i != x and not b.dtype_of(i).is_floating and broadcasts(
        b.shape_of(i), b.shape_of(x)))  # fmt: skip
    if y is None:
        constant = b.pick(("0xFF", "-2", "1", "0x5555"))
        return b.op(name, f"({{0}} {symbol} {constant})", [x])
    if b.chance(0.5):
        return b.op(name, f"pf.{name}({{0}}, {{1}})", [x, y])
    return b.op(name, f"({{0}} {symbol} {{1}})", [x, y])


def _where(b: Builder) -> int | None:
    x = b.choose()
    if x is None:
        return None
    shape = b.shape_of(x)
    condition = b.choose(lambda i: b.dtype_of(i).is_bool and broadcasts(b.shape_of(i), shape))
    other = b.choose(lambda i: i != x and broadcasts(b.shape_of(i), shape))
    false_side = "{2}" if other is not None and b.chance(0.6) else b.scalar("f32")
    args = [x] if condition is None else [condition, x]
    if condition is None:
        template = f"pf.where({{0}} > 0.25, {{0}}, {false_side.replace('{2}', '{1}')})"
        flips = b.flips_on(x)
    else:
        template = f"pf.where({{0}}, {{1}}, {false_side})"
        flips = False
    if other is not None and "{" in false_side:
        args.append(other)
    return b.op("where", template, args, flips)


def _cast(b: Builder) -> int | None:
    x = b.choose()
    if x is None:
        return None
    target = b.pick(("f32", "bf16", "f16", "i32", "bool", "f32", "i8", "u8", "i16", "f64"))
    flips = target in ("i32", "bool", "i8", "u8", "i16") and b.flips_on(x)
    if b.chance(0.3):
        return b.op("cast", f"{{0}}.to({DTYPE_SOURCE[target]})", [x], flips)
    return b.op("cast", f"pf.cast({{0}}, {DTYPE_SOURCE[target]})", [x], flips)


def _dims(b: Builder, rank: int) -> str:
    if rank == 0 or b.chance(0.15):
        return "None"
    if b.chance(0.55):
        return str(int(b.rng.integers(-rank, rank)))
    count = int(b.rng.integers(1, rank + 1))
    dims = [int(d) for d in b.rng.permutation(rank)[:count]]
    dims = [d - rank if b.chance(0.3) else d for d in dims]
    return "(" + ", ".join(str(d) for d in dims) + ("," if count == 1 else "") + ")"


def _reduction(b: Builder) -> int | None:
    x = b.choose()
    if x is None:
        return None
    shape = b.shape_of(x)
    name = b.pick(_REDUCTIONS)
    dims = _dims(b, len(shape))
    reduced = _reduced_axes(dims, len(shape))
    if name in ("max", "min") and any(shape[axis] == 0 for axis in reduced):
        return None  # torch refuses max/min over an empty axis
    source = "{0}"
    if name == "mean" and not b.is_float(x):
        source = "pf.cast({0}, pf.float32)"
    keepdim = ", keepdim=True" if b.chance(0.4) else ""
    if b.chance(0.3) and dims != "None":
        # x.max(dim) is torch's (values, indices): the method form of the reduction is amax.
        method = f"a{name}" if name in ("max", "min") else name
        return b.op(name, f"{source}.{method}({dims}{keepdim})", [x])
    return b.op(name, f"pf.{name}({source}, {dims}{keepdim})", [x])


def _arg_reduction(b: Builder) -> int | None:
    """argmax/argmin (over one dim or all), or the indices of ``x.max(dim)``: int64 indices
    that later ops may use as numbers."""
    x = b.choose()
    if x is None or b.dtype_of(x).is_bool:
        return None
    shape = b.shape_of(x)
    name = b.pick(("argmax", "argmin"))
    dim = None if not shape or b.chance(0.25) else int(b.rng.integers(len(shape)))
    if dim is not None and b.chance(0.3):
        dim -= len(shape)
    if (shape[dim] == 0) if dim is not None else (not shape or 0 in shape):
        return None if shape else b.op(name, f"pf.{name}({{0}})", [x])
    keepdim = ", keepdim=True" if b.chance(0.4) else ""
    if dim is not None and b.chance(0.3):
        return b.op(name, f"{{0}}.{name[3:]}({dim}{keepdim}).indices", [x])
    return b.op(name, f"pf.{name}({{0}}, {dim}{keepdim})", [x])


def _reduced_axes(dims: str, rank: int) -> list[int]:
    if dims == "None":
        return list(range(rank))
    parsed = eval(dims)  # a literal this module wrote
    listed = [parsed] if isinstance(parsed, int) else list(parsed)
    return [d % rank for d in listed]


def _float_source(b: Builder, x: int) -> str:
    return "{0}" if b.is_float(x) else "pf.cast({0}, pf.float32)"


def _normalization(b: Builder) -> int | None:
    """softmax over a random dim; layer_norm and rms_norm with and without weight / bias."""
    x = b.choose(lambda i: len(b.shape_of(i)) >= 1)
    if x is None:
        return None
    shape = b.shape_of(x)
    source = _float_source(b, x)
    kind = b.pick(("softmax", "softmax", "layer_norm", "rms_norm"))
    if kind == "softmax":
        dim = int(b.rng.integers(-len(shape), len(shape)))
        return b.op("softmax", f"pf.softmax({source}, {dim})", [x])
    if not b.chance(0.6):
        return b.op(kind, f"pf.{kind}({source})", [x])
    covered = int(b.rng.integers(1, min(2, len(shape)) + 1))
    dtype = short_name(b.dtype_of(x)) if b.is_float(x) else "f32"
    mark = len(b.values)
    weight = b.new_input(shape[-covered:], dtype)
    if kind == "layer_norm" and b.chance(0.5):
        bias = b.new_input(shape[-covered:], dtype)
        result = b.op(kind, f"pf.layer_norm({source}, {{1}}, {{2}})", [x, weight, bias])
    else:
        result = b.op(kind, f"pf.{kind}({source}, {{1}})", [x, weight])
    if result is None:
        b.rollback(mark)
    return result


_MATMUL_M = (1, 7, 16, 64, 100, 128, 200)
_MATMUL_N = (1, 8, 16, 24, 64, 100, 128, 256)
_MATMUL_K = (8, 16, 32, 64, 72, 128, 256, 17, 33)


def _matmul(b: Builder) -> int | None:
    """matmul / linear of new inputs (sometimes a computed operand) and an optional epilogue."""
    dtype = b.pick(("bf16", "bf16", "bf16", "f32", "f16"))
    m, n, k = (int(b.rng.choice(options)) for options in (_MATMUL_M, _MATMUL_N, _MATMUL_K))
    # fp32 matmuls decompose into multiply + sum over [M, N, K], which the interpreter runs.
    limit = 4 * b.budget if dtype == "f32" else 64 * b.budget
    while m * n * k > limit:
        m, n = max(1, m // 2), max(1, n // 2)
    mark = len(b.values)
    form = b.pick(("matmul", "matmul_t", "linear", "linear_bias", "batched", "vector"))
    computed_a = b.choose(lambda i: len(b.shape_of(i)) == 2 and b.computed(i))
    if computed_a is not None and b.chance(0.2):
        a = computed_a
        m, k = b.shape_of(a)
        cast = DTYPE_SOURCE[dtype]
        a_source = "{0}" if short_name(b.dtype_of(a)) == dtype else f"pf.cast({{0}}, {cast})"
    else:
        a_shape = (int(b.rng.choice([2, 3])), m, k) if form == "batched" else (m, k)
        a = b.new_input(a_shape, dtype)
        a_source = "{0}"
    if form in ("matmul", "batched"):
        w = b.new_input((k, n), dtype)
        result = b.op("matmul", f"({a_source} @ {{1}})", [a, w])
    elif form == "matmul_t":
        w = b.new_input((n, k), dtype)
        result = b.op("matmul", f"pf.matmul({a_source}, {{1}}.T)", [a, w])
    elif form == "linear":
        w = b.new_input((n, k), dtype)
        result = b.op("linear", f"pf.linear({a_source}, {{1}})", [a, w])
    elif form == "linear_bias":
        w = b.new_input((n, k), dtype)
        bias = b.new_input((n,), dtype)
        result = b.op("linear", f"pf.linear({a_source}, {{1}}, {{2}})", [a, w, bias])
    else:
        v = b.new_input((k,), dtype)
        result = b.op("matmul", f"({a_source} @ {{1}})", [a, v])
    if result is None:
        b.rollback(mark)
        return None
    return _epilogue(b, result, a) if b.chance(0.6) else result


def _epilogue(b: Builder, product: int, a: int) -> int | None:
    """gelu / relu / a bias or residual / the A operand again (``(a @ w) * a`` when the
    shapes allow)."""
    shape = b.shape_of(product)
    roll = b.rng.random()
    if roll < 0.3:
        name, template = (("gelu", "pf.gelu({0})"), ("relu", "pf.relu({0})"))[int(b.chance(0.5))]
        return b.op(name, template, [product]) or product
    if roll < 0.6 and broadcasts(b.shape_of(a), shape):
        return b.op("mul", "({0} * {1})", [product, a]) or product
    # A bias along N, or a residual of the product's whole shape (read a column pair at a
    # time by the matmul epilogue when N is even).
    addend_shape = shape if b.chance(0.4) else shape[-1:]
    addend = b.new_input(addend_shape, short_name(b.dtype_of(product)))
    return b.op("add", b.pick(("({0} + {1})", "pf.gelu({0} + {1})")), [product, addend]) or product


# The composites of pyfuse.frontend.composites, torch's conversions and NumPy ufuncs:
# (family name, template, float input only, flips on a last-bit difference of its input).
_COMPOSITE_UNARY = (
    ("clamp", "pf.clamp({0}, -0.5, 0.75)", False, False),
    ("clamp", "{0}.clamp(min=0)", False, False),
    ("clamp", "pf.clip({0}, max=1.5)", False, False),
    ("leaky_relu", "pf.leaky_relu({0}, 0.1)", True, False),
    ("elu", "pf.elu({0})", True, False),
    ("softplus", "pf.softplus({0})", True, False),
    ("softplus", "pf.softplus({0}, 2.0, 3.0)", True, False),
    ("hardswish", "pf.hardswish({0})", True, False),
    ("hardsigmoid", "pf.hardsigmoid({0})", True, False),
    ("sign", "pf.sign({0})", False, True),
    ("isfinite", "pf.isfinite({0})", False, False),
    ("isnan", "pf.isnan(pf.sqrt({0}))", True, True),
    ("isinf", "pf.isinf(pf.exp({0} * 100.0))", True, True),
    ("nan_to_num", "pf.nan_to_num(pf.log({0}), 0.0, 5.0, -5.0)", True, True),
    ("exp2", "pf.exp2({0})", False, False),
    ("expm1", "{0}.expm1()", False, False),
    ("log1p", "pf.log1p(pf.abs({0}))", True, False),
    ("log2", "pf.log2(pf.abs({0}) + 0.5)", True, False),
    ("log10", "pf.log10(pf.abs({0}) + 0.5)", True, False),
    ("cast", "{0}.float()", False, False),
    ("cast", "{0}.bfloat16()", False, False),
    ("cast", "{0}.half()", False, False),
    ("cast", "{0}.int()", False, True),
    ("cast", "{0}.bool()", False, True),
    ("ufunc", "np.maximum({0}, 0)", False, False),
    ("ufunc", "np.exp({0})", False, False),
    ("ufunc", "np.tanh(np.negative({0}))", False, False),
    ("full", "({0} + pf.ones_like({0}))", False, False),
    ("full", "pf.where({0} > 0, pf.zeros_like({0}), pf.full_like({0}, 2))", False, True),
)


def _composite(b: Builder) -> int | None:
    """An elementwise composite, conversion or ufunc of one value."""
    x = b.choose()
    if x is None:
        return None
    name, template, float_only, flips = _COMPOSITE_UNARY[int(b.rng.integers(len(_COMPOSITE_UNARY)))]
    if float_only or (name == "clamp" and b.dtype_of(x).is_bool):
        template = template.replace("{0}", _float_source(b, x))
    return b.op(name, template, [x], flips and b.flips_on(x))


_LOGIC = (
    ("and", "({0} & {1})"),
    ("or", "({1} | {0})"),
    ("xor", "({0} ^ {1})"),
    ("xor", "pf.logical_xor({0}, {1})"),
    ("not", "(~{0} & {1})"),
)
_BOUNDS = (
    ("maximum", "pf.max({0}, {1})"),
    ("minimum", "pf.min({0}, {1})"),
    ("maximum", "{0}.max({1})"),
    ("clamp", "pf.clamp({0}, {1})"),
    ("clamp", "pf.clamp({0}, max={1})"),
    ("clamp", "{0}.clamp({1}, {1} + 1)"),
)


def _composite_pair(b: Builder) -> int | None:
    """Two values: pf.max(x, y), clamp between tensors, logic of bools (``&``, ``^``...)."""
    picked = _binary_operands(b)
    if picked is None:
        return None
    x, y, _ = picked
    if y is None:
        return None
    if b.dtype_of(x).is_bool and b.dtype_of(y).is_bool:
        name, template = _LOGIC[int(b.rng.integers(len(_LOGIC)))]
        return b.op(f"logical_{name}", template, [x, y])
    if b.dtype_of(x).is_bool:
        return None  # clamp refuses bools; max(bool, number) is covered by maximum
    name, template = _BOUNDS[int(b.rng.integers(len(_BOUNDS)))]
    return b.op(name, template, [x, y])


def _composite_reduction(b: Builder) -> int | None:
    """amax, amin, any, all, var, std, logsumexp, log_softmax over random dims."""
    x = b.choose()
    if x is None:
        return None
    shape = b.shape_of(x)
    name = b.pick(("amax", "amin", "any", "all", "var", "std", "logsumexp", "log_softmax"))
    dims = _dims(b, len(shape))
    keepdim = ", keepdim=True" if b.chance(0.4) else ""
    source = "{0}"
    if name in ("amax", "amin") and any(shape[a] == 0 for a in _reduced_axes(dims, len(shape))):
        return None  # torch refuses amax over an empty axis
    if name in ("var", "std", "log_softmax", "logsumexp"):
        source = _float_source(b, x)
    if name == "log_softmax":
        dim = int(b.rng.integers(-len(shape), len(shape))) if shape else 0
        return b.op(name, f"pf.log_softmax({source}, {dim})", [x])
    if name in ("var", "std"):
        correction = b.pick(("", ", correction=0", ", correction=1"))
        return b.op(name, f"pf.{name}({source}, {dims}{correction}{keepdim})", [x])
    if name == "logsumexp" and dims == "None":
        dims = "()" if not shape else str(tuple(range(len(shape))))
    flips = name in ("any", "all") and b.flips_on(x)
    if b.chance(0.3) and dims not in ("None", "()"):
        return b.op(name, f"{source}.{name}({dims}{keepdim})", [x], flips)
    return b.op(name, f"pf.{name}({source}, {dims}{keepdim})", [x], flips)


def _from_indices(b: Builder) -> int | None:
    """A triangle of a value (tril/triu of its last two dims), an arange along its last dim,
    or an iota beside it: values the kernel computes from its loop indices."""
    x = b.choose(lambda i: len(b.shape_of(i)) >= 1)
    if x is None:
        return None
    shape = b.shape_of(x)
    if len(shape) >= 2 and b.chance(0.6):
        name = b.pick(("tril", "triu"))
        diagonal = int(b.rng.integers(-2, 3))
        template = f"pf.{name}({{0}}, {diagonal})" if b.chance(0.5) else f"{{0}}.{name}({diagonal})"
        return b.op(name, template, [x])
    if b.chance(0.5):
        return b.op("arange", f"({{0}} + pf.arange({shape[-1]}))", [x])
    dim = int(b.rng.integers(len(shape)))
    return b.op("iota", f"({{0}} * pf.iota({shape}, {dim}, pf.int32))", [x])


# Families and their weights: pointwise ops dominate, as in real fusions.
_FAMILIES: tuple[tuple[Callable[[Builder], int | None], float], ...] = (
    (_unary, 3.0),
    (_binary, 4.0),
    (_logical, 0.6),
    (_bitwise, 0.4),
    (_where, 0.8),
    (_cast, 1.0),
    (_reduction, 2.0),
    (_arg_reduction, 0.5),
    (reshape, 1.0),
    (layout_op, 1.6),
    (slicing, 1.0),
    (joining, 0.6),
    (two_axes, 0.6),
    (_normalization, 0.8),
    (_matmul, 0.7),
    (_composite, 1.6),
    (_composite_pair, 0.8),
    (_composite_reduction, 1.2),
    (_from_indices, 0.6),
)
FAMILY_NAMES = tuple(family.__name__.lstrip("_") for family, _ in _FAMILIES)


def generate(seed: int, index: int) -> Program:
    """The ``index``-th program of ``seed``: the same pair always gives the same program."""
    rng = np.random.default_rng([seed, index])
    budget = 70_000 if rng.random() < 0.1 else 20_000
    b = Builder(rng, budget)
    for _ in range(int(rng.choice([1, 1, 2, 2, 3]))):
        shape = b.shape() if not b.values else b.partner_shape(b.shape_of(0))
        b.new_input(shape)
    wanted = int(rng.choice([1, 2, 2, 3, 3, 4, 4, 5, 6, 8]))
    weights = np.array([weight for _, weight in _FAMILIES])
    attempts = 0
    while len(b.ops()) < wanted and attempts < 20 * wanted and not b.broken:
        attempts += 1
        family = _FAMILIES[int(rng.choice(len(_FAMILIES), p=weights / weights.sum()))][0]
        mark = len(b.values)
        if family(b) is None:
            b.rollback(mark)
    if not b.ops():
        b.op("add", "({0} + 1)", [0])
    return Program(tuple(b.values), _outputs(b), _schedule(seed, index, b))


def _schedule(seed: int, index: int, b: Builder) -> str:
    """Half the programs with a matmul ask for one of the other schedules; drawn from a
    stream of its own, so the program itself is what it was before schedules were drawn."""
    if not any(op.name in ("matmul", "linear") for op in b.ops()):
        return ""
    rng = np.random.default_rng([seed, index, 1])
    if rng.random() < 0.5:
        return ""
    names = sorted(SCHEDULES)
    return names[int(rng.integers(len(names)))]


def _outputs(b: Builder) -> tuple[int, ...]:
    """Every op nothing reads (the last four), so no op is dead code; sometimes also an
    intermediate (a multi-output fusion returning what it computed on the way) or an input."""
    last = len(b.values) - 1
    if b.broken:
        return (last,)
    read = {arg for value in b.values if isinstance(value, Op) for arg in value.args}
    sinks = [i for i, value in enumerate(b.values) if isinstance(value, Op) and i not in read]
    chosen = sinks[-4:] if sinks else [last]
    for index, value in enumerate(b.values):
        if isinstance(value, Op) and index in read and len(chosen) < 5 and b.chance(0.1):
            chosen.append(index)
    if b.chance(0.03):
        chosen.append(0)
    return tuple(sorted(set(chosen)))
