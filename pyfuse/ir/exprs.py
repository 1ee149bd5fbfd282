"""The exprs of the math IR.

Every expr links itself into the graph (it becomes its outputs' definition and a use
of each input) and answers :meth:`Expr.logical_pairs`: which logical axis of a
producer feeds which logical (or root) axis of the output. The IdModel, inlining and
skip_intermediates are built on that one question.

``source`` is the user's ``file:line`` that traced the op, carried so later errors
can point at it.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from pyfuse.ir.iterdomain import IterDomain
from pyfuse.ir.naming import current_source
from pyfuse.ir.tensor import Scalar, TensorView, Val

AxisPairs = list[tuple[IterDomain, IterDomain]]


class Expr:
    """An operation producing ``outputs`` from ``inputs``."""

    op_name = "expr"

    def __init__(self, outputs: Sequence[Val], inputs: Sequence[Val]) -> None:
        self.outputs: list[Val] = list(outputs)
        self.inputs: list[Val] = list(inputs)
        self.source: str | None = current_source()
        for out in self.outputs:
            out.definition = self
        for inp in self.inputs:
            inp.uses.append(self)

    @property
    def output(self) -> TensorView:
        out = self.outputs[0]
        assert isinstance(out, TensorView)  # every op here produces one tensor
        return out

    @property
    def tensor_inputs(self) -> list[TensorView]:
        return [inp for inp in self.inputs if isinstance(inp, TensorView)]

    def logical_pairs(self, producer: TensorView) -> AxisPairs:
        """(producer logical axis, consumer root axis) pairs for input ``producer``."""
        consumer_axes = self.output.maybe_root
        producer_axes = producer.no_reductions
        if len(producer_axes) != len(consumer_axes):
            raise ValueError(
                f"{self.op_name}: T{producer.name} has {len(producer_axes)} axes but the output "
                f"has {len(consumer_axes)}; positional mapping needs equal ranks"
            )
        return list(zip(producer_axes, consumer_axes, strict=True))

    def attributes(self) -> str:
        """Extra printed parameters (``dims=[1]``)."""
        return ""

    def replace_input(self, old: Val, new: Val) -> None:
        for index, inp in enumerate(self.inputs):
            if inp is old:
                self.inputs[index] = new
                old.uses.remove(self)
                new.uses.append(self)

    def unlink(self) -> None:
        """Remove this expr from its inputs' uses (its outputs keep it as definition)."""
        for inp in self.inputs:
            while self in inp.uses:
                inp.uses.remove(self)


class LoadStoreKind(enum.Enum):
    SET = "set"
    TMA_LOAD = "tma_load"
    TMA_STORE = "tma_store"
    LDMATRIX = "ldmatrix"
    STMATRIX = "stmatrix"
    CP_ASYNC = "cp_async"


class LoadStoreOp(Expr):
    """A copy between memories (a plain set, or a TMA/ldmatrix/... copy chosen by a scheduler)."""

    op_name = "set"

    def __init__(
        self, out: TensorView, inp: TensorView, kind: LoadStoreKind = LoadStoreKind.SET
    ) -> None:
        super().__init__([out], [inp])
        self.kind = kind

    @property
    def input(self) -> TensorView:
        inp = self.inputs[0]
        assert isinstance(inp, TensorView)
        return inp

    def attributes(self) -> str:
        return "" if self.kind == LoadStoreKind.SET else f"kind={self.kind.value}"


# gelu, gelu_tanh and silu return (signed) zero where their magnitude is below this: their
# negative tails fall past float32's range at slightly different x in every formula (an
# exp that overflows, a reciprocal that flushes), and casts to bool, log and sqrt make that
# difference a wrong answer. The reference and the kernels flush at this one threshold.
ACTIVATION_TAIL_FLUSH = 2.0**-100


class UnaryOpType(enum.Enum):
    NEG = "neg"
    ABS = "abs"
    EXP = "exp"
    LOG = "log"
    TANH = "tanh"
    SIGMOID = "sigmoid"
    RELU = "relu"
    GELU = "gelu"
    GELU_TANH = "gelu_tanh"
    SILU = "silu"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    RECIPROCAL = "reciprocal"
    SIN = "sin"
    COS = "cos"
    ERF = "erf"
    FLOOR = "floor"
    CEIL = "ceil"
    ROUND = "round"  # half to even, as torch.round
    TRUNC = "trunc"
    LOGICAL_NOT = "logical_not"
    BITWISE_NOT = "bitwise_not"  # integers only (bools take logical_not)


class UnaryOp(Expr):
    def __init__(self, op: UnaryOpType, out: TensorView, inp: TensorView) -> None:
        super().__init__([out], [inp])
        self.op = op
        self.op_name = op.value


class BinaryOpType(enum.Enum):
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    POW = "pow"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    EQ = "eq"
    NE = "ne"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    LOGICAL_AND = "logical_and"
    LOGICAL_OR = "logical_or"
    FMOD = "fmod"  # C's fmod: the sign of the dividend (torch.fmod)
    REMAINDER = "remainder"  # the sign of the divisor (torch.remainder, Python's %)
    FLOOR_DIVIDE = "floor_divide"  # floor(a / b) (torch.floor_divide, Python's //)
    # Two's-complement bit logic of integers (bools take the logical ops).
    BITWISE_AND = "bitwise_and"
    BITWISE_OR = "bitwise_or"
    BITWISE_XOR = "bitwise_xor"

    @property
    def is_comparison(self) -> bool:
        return self in _COMPARISONS


_COMPARISONS = frozenset(
    {
        BinaryOpType.EQ,
        BinaryOpType.NE,
        BinaryOpType.LT,
        BinaryOpType.LE,
        BinaryOpType.GT,
        BinaryOpType.GE,
    }
)


class BinaryOp(Expr):
    """``out = lhs op rhs``; either side may be a :class:`Scalar`. Tensor operands have the
    output's rank (the tracer broadcasts first)."""

    def __init__(self, op: BinaryOpType, out: TensorView, lhs: Val, rhs: Val) -> None:
        super().__init__([out], [lhs, rhs])
        self.op = op
        self.op_name = op.value


class TernaryOp(Expr):
    """``where(condition, if_true, if_false)``."""

    op_name = "where"

    def __init__(self, out: TensorView, condition: Val, if_true: Val, if_false: Val) -> None:
        super().__init__([out], [condition, if_true, if_false])


class FullOp(Expr):
    """A tensor of the output's shape holding one value everywhere; it reads no tensor (the
    value a reduction over no elements leaves: passes/empty_reductions.py)."""

    op_name = "full"

    def __init__(self, out: TensorView, value: Scalar) -> None:
        super().__init__([out], [value])

    @property
    def value(self) -> Scalar:
        scalar = self.inputs[0]
        assert isinstance(scalar, Scalar)
        return scalar


class IotaOp(Expr):
    """``out[i_0, ..., i_n] = i_dim`` in the output's dtype: the index along one axis, read from
    no tensor (``arange``, the masks of ``tril``/``triu``: a causal mask is computed in the
    kernel, never loaded)."""

    op_name = "iota"

    def __init__(self, out: TensorView, dim: int) -> None:
        super().__init__([out], [])
        self.dim = dim

    def attributes(self) -> str:
        return f"dim={self.dim}"


class CastOp(Expr):
    op_name = "cast"

    def __init__(self, out: TensorView, inp: TensorView) -> None:
        super().__init__([out], [inp])

    def attributes(self) -> str:
        return f"to={self.output.dtype.short}"


class BroadcastOp(Expr):
    """Insert broadcast axes: ``is_new[i]`` says output axis ``i`` is new."""

    op_name = "broadcast"

    def __init__(self, out: TensorView, inp: TensorView, is_new: Sequence[bool]) -> None:
        super().__init__([out], [inp])
        self.is_new = tuple(is_new)

    def logical_pairs(self, producer: TensorView) -> AxisPairs:
        kept = [axis for axis, new in zip(self.output.logical, self.is_new, strict=True) if not new]
        return list(zip(producer.no_reductions, kept, strict=True))

    def attributes(self) -> str:
        return f"new={[i for i, new in enumerate(self.is_new) if new]}"


class ExpandOp(Expr):
    """Give broadcast axes a size (``broadcast_to`` of a size-1 axis); no data moves."""

    op_name = "expand"

    def __init__(self, out: TensorView, inp: TensorView) -> None:
        super().__init__([out], [inp])


class SqueezeOp(Expr):
    """Remove the broadcast axes at ``dims``."""

    op_name = "squeeze"

    def __init__(self, out: TensorView, inp: TensorView, dims: Sequence[int]) -> None:
        super().__init__([out], [inp])
        self.dims = tuple(dims)

    def logical_pairs(self, producer: TensorView) -> AxisPairs:
        kept = [a for i, a in enumerate(producer.no_reductions) if i not in self.dims]
        return list(zip(kept, self.output.logical, strict=True))

    def attributes(self) -> str:
        return f"dims={list(self.dims)}"


class PermuteOp(Expr):
    """``out`` axis ``i`` is input axis ``perm[i]``."""

    op_name = "permute"

    def __init__(self, out: TensorView, inp: TensorView, perm: Sequence[int]) -> None:
        super().__init__([out], [inp])
        self.perm = tuple(perm)

    def logical_pairs(self, producer: TensorView) -> AxisPairs:
        axes = producer.no_reductions
        return [(axes[source], self.output.logical[i]) for i, source in enumerate(self.perm)]

    def attributes(self) -> str:
        return f"perm={list(self.perm)}"


class ReshapeOp(Expr):
    """A view reshape. The output's root axes match the input's logical axes one to one; its
    logical axes are derived from the root by the merges and splits recorded on it."""

    op_name = "reshape"

    def __init__(self, out: TensorView, inp: TensorView) -> None:
        super().__init__([out], [inp])

    def logical_pairs(self, producer: TensorView) -> AxisPairs:
        assert self.output.root is not None  # a reshape output always has a root domain
        return list(zip(producer.no_reductions, self.output.root, strict=True))

    def attributes(self) -> str:
        return f"shape={list(self.output.shape)}"


class SliceOp(Expr):
    """``out[i, ...] = inp[starts[0] + steps[0] * i, ...]``: a static window of every axis
    (torch's basic slicing; steps are positive). Only axes it keeps whole are paired: a
    windowed axis has other extents and indices than its producer's, which
    :meth:`windows` gives. A slice of an input is read in place at an offset
    (skip_intermediates); a slice of a computed tensor starts a new kernel (segment)."""

    op_name = "slice"

    def __init__(
        self, out: TensorView, inp: TensorView, starts: Sequence[int], steps: Sequence[int]
    ) -> None:
        super().__init__([out], [inp])
        self.starts = tuple(starts)
        self.steps = tuple(steps)

    def windows(self, producer: TensorView) -> list[tuple[IterDomain, IterDomain, int, int]]:
        """(producer axis, consumer axis, start, step) of every axis, in logical order."""
        return list(
            zip(producer.no_reductions, self.output.logical, self.starts, self.steps, strict=True)
        )

    def logical_pairs(self, producer: TensorView) -> AxisPairs:
        return [
            (p, c)
            for p, c, start, step in self.windows(producer)
            if start == 0 and step == 1 and p.logical_extent == c.logical_extent
        ]

    def attributes(self) -> str:
        return f"starts={list(self.starts)}, steps={list(self.steps)}"


class CatOp(Expr):
    """``torch.cat`` along ``dim``: input ``i`` fills ``out[..., offsets[i] : offsets[i] + n_i,
    ...]``. Only the other axes are paired: along ``dim`` each input has its own extent and
    indices. It runs as a kernel of its own (the cat scheduler), reading every input from
    memory, an input's view in place."""

    op_name = "cat"

    def __init__(self, out: TensorView, inputs: Sequence[TensorView], dim: int) -> None:
        super().__init__([out], list(inputs))
        self.dim = dim
        offsets, start = [], 0
        for tv in inputs:
            offsets.append(start)
            start += tv.shape[dim]
        self.offsets = tuple(offsets)

    def logical_pairs(self, producer: TensorView) -> AxisPairs:
        pairs = zip(producer.no_reductions, self.output.logical, strict=True)
        return [pair for d, pair in enumerate(pairs) if d != self.dim]

    def attributes(self) -> str:
        return f"dim={self.dim}"


class ReductionOpType(enum.Enum):
    SUM = "sum"
    PROD = "prod"
    MAX = "max"
    MIN = "min"


class ReductionOp(Expr):
    """Reduce the input over the output's reduction axes (kept in the output's logical domain)."""

    def __init__(self, op: ReductionOpType, out: TensorView, inp: TensorView) -> None:
        super().__init__([out], [inp])
        self.op = op
        self.op_name = op.value

    @property
    def input(self) -> TensorView:
        inp = self.inputs[0]
        assert isinstance(inp, TensorView)
        return inp

    @property
    def axes(self) -> tuple[int, ...]:
        return tuple(i for i, axis in enumerate(self.output.logical) if axis.is_reduction)

    def attributes(self) -> str:
        return f"dims={list(self.axes)}"


class MatmulOp(Expr):
    """torch.matmul: ``a [..., M, K] @ b [..., K, N] -> [..., M, N, rK]`` (1-D operands drop M or
    N; batch axes broadcast, right-aligned)."""

    op_name = "matmul"

    def __init__(self, out: TensorView, a: TensorView, b: TensorView) -> None:
        super().__init__([out], [a, b])

    @property
    def a(self) -> TensorView:
        return self.tensor_inputs[0]

    @property
    def b(self) -> TensorView:
        return self.tensor_inputs[1]

    def logical_pairs(self, producer: TensorView) -> AxisPairs:
        return matmul_pairs(self.a, self.b, self.output, producer)


class LinearOp(Expr):
    """``x [..., M, K]``, ``weight [N, K]``, optional ``bias [N]`` -> ``[..., M, N, rK]``."""

    op_name = "linear"

    def __init__(
        self, out: TensorView, x: TensorView, weight: TensorView, bias: TensorView | None
    ) -> None:
        inputs: list[Val] = [x, weight] if bias is None else [x, weight, bias]
        super().__init__([out], inputs)

    @property
    def x(self) -> TensorView:
        return self.tensor_inputs[0]

    @property
    def weight(self) -> TensorView:
        return self.tensor_inputs[1]

    @property
    def bias(self) -> TensorView | None:
        tensors = self.tensor_inputs
        return tensors[2] if len(tensors) > 2 else None

    def logical_pairs(self, producer: TensorView) -> AxisPairs:
        out = self.output.logical
        n_axis, k_axis = out[-2], out[-1]
        pairs: AxisPairs = []
        if producer is self.x:
            x_axes = producer.no_reductions
            pairs.append((x_axes[-1], k_axis))
            pairs.extend(zip(x_axes[:-1], out[:-2], strict=True))
        if producer is self.weight:
            w_axes = producer.no_reductions
            pairs.extend([(w_axes[0], n_axis), (w_axes[1], k_axis)])
        if producer is self.bias and producer.ndim == 1:
            pairs.append((producer.no_reductions[0], n_axis))
        return pairs


def matmul_pairs(a: TensorView, b: TensorView, out: TensorView, producer: TensorView) -> AxisPairs:
    """Axis pairs of torch.matmul; see :class:`MatmulOp`."""
    out_axes = out.logical
    k_axis = out_axes[-1]
    pairs: AxisPairs = []
    a_axes, b_axes = a.no_reductions, b.no_reductions
    # Output layout: batch..., [M], [N], rK.
    has_m, has_n = len(a_axes) >= 2, len(b_axes) >= 2
    n_batch = len(out_axes) - 1 - int(has_m) - int(has_n)
    batch = out_axes[:n_batch]
    position = n_batch
    m_axis = out_axes[position] if has_m else None
    position += int(has_m)
    n_axis = out_axes[position] if has_n else None
    if producer is a:
        pairs.append((a_axes[-1], k_axis))
        if m_axis is not None:
            pairs.append((a_axes[-2], m_axis))
        a_batch = a_axes[:-2]
        pairs.extend(zip(a_batch, batch[n_batch - len(a_batch) :], strict=True))
    if producer is b:
        if n_axis is not None:
            pairs.extend([(b_axes[-2], k_axis), (b_axes[-1], n_axis)])
        else:
            pairs.append((b_axes[-1], k_axis))
        b_batch = b_axes[:-2]
        pairs.extend(zip(b_batch, batch[n_batch - len(b_batch) :], strict=True))
    return pairs


class MmaOp(Expr):
    """``out[..., M, N, rK] = sum_K a[..., M, 1, K] * b[..., 1, N, K]`` accumulated in fp32.

    Operands have the output's rank; the broadcast axes are real IterDomains made by
    BroadcastOps kept in the fusion, so every output axis maps to an axis of each operand.
    ``roles`` names each output axis (``"batch"``, ``"m"``, ``"n"``, ``"k"``)."""

    op_name = "mma"

    def __init__(self, out: TensorView, a: TensorView, b: TensorView) -> None:
        super().__init__([out], [a, b])

    @property
    def a(self) -> TensorView:
        return self.tensor_inputs[0]

    @property
    def b(self) -> TensorView:
        return self.tensor_inputs[1]

    def roles(self) -> list[str]:
        roles = []
        for a_axis, b_axis, out_axis in zip(
            self.a.logical, self.b.logical, self.output.logical, strict=True
        ):
            if out_axis.is_reduction:
                roles.append("k")
            elif a_axis.is_broadcast and not b_axis.is_broadcast:
                roles.append("n")
            elif b_axis.is_broadcast and not a_axis.is_broadcast:
                roles.append("m")
            else:
                roles.append("batch")
        return roles
