"""Arguments read the way torch reads them (``pyfuse.frontend.arguments``): a wrong-typed or
out-of-range dim, size, flag or dtype, and a NumPy function given a traced tensor, are a
FusionError naming the op and the user's line, never a raw Python error, an InternalError or
a silently different meaning; what torch accepts (NumPy integers, ``dim=()``) is accepted
with torch's meaning, checked against NumPy in float64."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pyfuse as pf

HERE = Path(__file__).resolve()
X = pf.spec((4, 6), pf.float32)
RNG = np.random.default_rng(7)
A = (RNG.uniform(0.5, 1.5, (4, 6)) * RNG.choice([-1.0, 1.0], (4, 6))).astype(np.float32)


def line_of(marker: str) -> str:
    """``file:line`` of this file's line holding ``# line: marker``."""
    for number, text in enumerate(HERE.read_text().splitlines(), start=1):
        if text.rstrip().endswith(f"# line: {marker}"):
            return f"{HERE}:{number}"
    raise AssertionError(marker)


# Each returns what the bad call gives; the marker comment names its line for line_of.
def _transpose_float(x: Any) -> Any:
    return x.transpose(0, 1.5)  # line: transpose float


def _transpose_bool(x: Any) -> Any:
    return pf.transpose(x, 0, True)  # line: transpose bool


def _permute_float(x: Any) -> Any:
    return x.permute(1, 0.0)  # line: permute float


def _reshape_float(x: Any) -> Any:
    return x.reshape(4.9, 6)  # line: reshape float


def _view_float(x: Any) -> Any:
    return x.view(24.5)  # line: view float


def _reshape_bool(x: Any) -> Any:
    return pf.reshape(x, (True, 24))  # line: reshape bool


def _expand_negative(x: Any) -> Any:
    return x.expand(-2, 4, 6)  # line: expand negative


def _broadcast_float(x: Any) -> Any:
    return pf.broadcast_to(x, (4, 6.0))  # line: broadcast float


def _unsqueeze_float(x: Any) -> Any:
    return x.unsqueeze(1.0)  # line: unsqueeze float


def _unsqueeze_bool(x: Any) -> Any:
    return pf.unsqueeze(x, True)  # line: unsqueeze bool


def _size_float(x: Any) -> Any:
    return x * x.size(1.0)  # line: size float


def _size_out_of_range(x: Any) -> Any:
    return x * x.size(5)  # line: size range


def _cat_float(x: Any) -> Any:
    return pf.cat([x, x], 1.0)  # line: cat float


def _stack_float(x: Any) -> Any:
    return pf.stack([x, x], 1.0)  # line: stack float


def _stack_out_of_range(x: Any) -> Any:
    return pf.stack([x, x], -4)  # line: stack range


def _sum_keepdim_str(x: Any) -> Any:
    return pf.sum(x, 1, keepdim="no")  # line: keepdim str


def _max_keepdim_int(x: Any) -> Any:
    return x.max(1, keepdim=2).values  # line: keepdim int


def _softmax_none(x: Any) -> Any:
    return pf.softmax(x, None)  # line: softmax None


def _log_softmax_tuple(x: Any) -> Any:
    return pf.log_softmax(x, (0, 1))  # line: log_softmax tuple


def _var_correction(x: Any) -> Any:
    return pf.var(x, 1, correction="a")  # line: correction


def _var_unbiased(x: Any) -> Any:
    return pf.var(x, 1, unbiased="yes")  # line: unbiased


def _iota_dtype(x: Any) -> Any:
    return x + pf.iota((4, 6), 1, "int32")  # line: iota dtype


def _iota_float_shape(x: Any) -> Any:
    return x[0] + pf.iota(6.5)  # line: iota shape


def _full_float_size(x: Any) -> Any:
    return x[0] + pf.full(6.0, 1.0)  # line: full size


def _zeros_like_dtype(x: Any) -> Any:
    return x + pf.zeros_like(x, dtype="float32")  # line: zeros_like dtype


def _arange_dtype(x: Any) -> Any:
    return x[0] + pf.arange(6, dtype="float32")  # line: arange dtype


def _slice_float(x: Any) -> Any:
    return x[1:3:1.5]  # line: slice float


def _layer_norm_bias_number(x: Any) -> Any:
    return pf.layer_norm(x, pf.ones_like(x[0]), 3)  # line: layer_norm bias number


def _layer_norm_bias_shape(x: Any) -> Any:
    return pf.layer_norm(x, None, pf.ones_like(x))  # line: layer_norm bias shape


def _type_as_number(x: Any) -> Any:
    return x.type_as(3)  # line: type_as


def _divmod(x: Any) -> Any:
    return divmod(x, 2)[0]  # line: divmod


def _np_sum(x: Any) -> Any:
    return np.sum(x)  # line: np.sum


def _np_mean_axis(x: Any) -> Any:
    return np.mean(x, axis=1)  # line: np.mean


def _np_max(x: Any) -> Any:
    return np.max(x, axis=0)  # line: np.max


def _np_any(x: Any) -> Any:
    return np.any(x > 0)  # line: np.any


def _np_concatenate(x: Any) -> Any:
    return np.concatenate([x, x])  # line: np.concatenate


def _np_cumsum(x: Any) -> Any:
    return np.cumsum(x)  # line: np.cumsum


# torch's NumPy names (axis for dim, keepdims for keepdim): one argument under both names.
def _sum_dim_and_axis(x: Any) -> Any:
    return pf.sum(x, 1, axis=0)  # line: dim and axis


def _method_dim_and_axis(x: Any) -> Any:
    return x.mean(dim=1, axis=1)  # line: method dim and axis


def _keepdim_and_keepdims(x: Any) -> Any:
    return x.amax(1, keepdim=True, keepdims=True)  # line: keepdim and keepdims


def _keepdims_str(x: Any) -> Any:
    return pf.any(x > 0, axis=1, keepdims="yes")  # line: keepdims str


def _logsumexp_without_dim(x: Any) -> Any:
    return pf.logsumexp(x)  # line: logsumexp no dim


# Tensor methods called with arguments that do not fit their signatures: Python raised its
# TypeError before any op ran (and an empty shape made a 0-d tensor of one element).
def _sum_five_dims(x: Any) -> Any:
    return x.sum(1, 2, 3, 4, 5)  # line: sum arity


def _transpose_one_dim(x: Any) -> Any:
    return x.transpose(0)  # line: transpose arity


def _sum_unknown_keyword(x: Any) -> Any:
    return x.sum(axes=1)  # line: sum keyword


def _float_with_argument(x: Any) -> Any:
    return x.float(1)  # line: float arity


def _clip_three_bounds(x: Any) -> Any:
    return x.clip(0.0, 1.0, 2.0)  # line: clip arity


def _size_two_dims(x: Any) -> Any:
    return x * x.size(0, 1)  # line: size arity


def _max_three(x: Any) -> Any:
    return x.max(1, True, 3).values  # line: max arity


def _reshape_nothing(x: Any) -> Any:
    return x[:1, :1].reshape()  # line: reshape nothing


def _view_nothing(x: Any) -> Any:
    return x[:1, :1].view()  # line: view nothing


def _permute_nothing(x: Any) -> Any:
    return x.permute()  # line: permute nothing


def _expand_nothing(x: Any) -> Any:
    return x.expand()  # line: expand nothing


# torch.where takes a bool condition only (uint8 with a deprecation warning; refused here).
def _where_float(x: Any) -> Any:
    return pf.where(x, x, 0.0)  # line: where float


def _where_uint8(x: Any) -> Any:
    return pf.where(x.byte(), x, 0.0)  # line: where uint8


def _where_int_scalar(x: Any) -> Any:
    return pf.where(1, x, 0.0)  # line: where int


BAD: list[tuple[Callable[..., Any], str, str, str]] = [
    (_transpose_float, "transpose float", "transpose", "dim must be an int, got float 1.5"),
    (_transpose_bool, "transpose bool", "transpose", "dim must be an int, got bool True"),
    (_permute_float, "permute float", "permute", "dims must be an int or a sequence of ints"),
    (_reshape_float, "reshape float", "reshape", "got tuple (4.9, 6)"),
    (_view_float, "view float", "reshape", "got float 24.5"),
    (_reshape_bool, "reshape bool", "reshape", "got tuple (True, 24)"),
    (_expand_negative, "expand negative", "broadcast_to", "sizes must be >= 0, or -1"),
    (_broadcast_float, "broadcast float", "broadcast_to", "got tuple (4, 6.0)"),
    (_unsqueeze_float, "unsqueeze float", "unsqueeze", "dim must be an int, got float 1.0"),
    (_unsqueeze_bool, "unsqueeze bool", "unsqueeze", "dim must be an int, got bool True"),
    (_size_float, "size float", "size", "dim must be an int, got float 1.0"),
    (_size_out_of_range, "size range", "size", "Dimension out of range"),
    (_cat_float, "cat float", "cat", "dim must be an int, got float 1.0"),
    (_stack_float, "stack float", "stack", "dim must be an int, got float 1.0"),
    (_stack_out_of_range, "stack range", "stack", "range of [-3, 2], but got -4"),
    (_sum_keepdim_str, "keepdim str", "sum", "keepdim must be a bool, got str 'no'"),
    (_max_keepdim_int, "keepdim int", "max", "keepdim must be a bool, got int 2"),
    (_softmax_none, "softmax None", "softmax", "dim must be an int, got NoneType None"),
    (_log_softmax_tuple, "log_softmax tuple", "log_softmax", "dim must be an int, got tuple"),
    (_var_correction, "correction", "var", "correction must be a number, got 'a'"),
    (_var_unbiased, "unbiased", "var", "unbiased must be a bool, got str 'yes'"),
    (_iota_dtype, "iota dtype", "iota", "dtype must be a pyfuse dtype such as pf.int64"),
    (_iota_float_shape, "iota shape", "iota", "got float 6.5"),
    (_full_float_size, "full size", "full", "got float 6.0"),
    (_zeros_like_dtype, "zeros_like dtype", "zeros_like", "dtype must be a pyfuse dtype"),
    (_arange_dtype, "arange dtype", "arange", "dtype must be a pyfuse dtype"),
    (_slice_float, "slice float", "getitem", "slice bounds must be ints or None, got float"),
    (
        _layer_norm_bias_number,
        "layer_norm bias number",
        "layer_norm",
        "bias must be a traced tensor, got int",
    ),
    (_layer_norm_bias_shape, "layer_norm bias shape", "layer_norm", "the normalized shape (6,)"),
    (_type_as_number, "type_as", "cast", "dtype must be a pyfuse dtype"),
    (_divmod, "divmod", "divmod", "use // and %"),
    (_np_sum, "np.sum", "np.sum", "use pf.sum(x, dim)"),
    (_np_mean_axis, "np.mean", "np.mean", "use pf.mean(x, dim)"),
    (_np_max, "np.max", "np.max", "use pf.amax(x, dim)"),
    (_np_any, "np.any", "np.any", "use pf.any(x, dim)"),
    (_np_concatenate, "np.concatenate", "np.concatenate", "use pf.cat(tensors, dim)"),
    (_np_cumsum, "np.cumsum", "np.cumsum", "compute it with pf ops"),
    (_sum_dim_and_axis, "dim and axis", "sum", "got dim=1 and axis=0"),
    (_method_dim_and_axis, "method dim and axis", "mean", "dim and axis name one argument"),
    (_keepdim_and_keepdims, "keepdim and keepdims", "amax", "keepdim and keepdims name one"),
    (_keepdims_str, "keepdims str", "any", "keepdims must be a bool, got str 'yes'"),
    (_logsumexp_without_dim, "logsumexp no dim", "logsumexp", "needs dim (or axis)"),
    (
        _sum_five_dims,
        "sum arity",
        "sum",
        "x.sum(dim=None, keepdim=False, *, axis=None, keepdims=None): too many positional "
        "arguments (5 given)",
    ),
    (
        _transpose_one_dim,
        "transpose arity",
        "transpose",
        "x.transpose(dim0, dim1): missing a required argument: 'dim1'",
    ),
    (_sum_unknown_keyword, "sum keyword", "sum", "got an unexpected keyword argument 'axes'"),
    (_float_with_argument, "float arity", "float", "x.float(): too many positional"),
    (_clip_three_bounds, "clip arity", "clip", "x.clip(min=None, max=None): too many"),
    (_size_two_dims, "size arity", "size", "x.size(dim=None): too many positional"),
    (_max_three, "max arity", "max", "too many positional arguments (3 given)"),
    (_reshape_nothing, "reshape nothing", "reshape", "x.reshape() takes the shape"),
    (_view_nothing, "view nothing", "view", "x.view() takes the shape"),
    (_permute_nothing, "permute nothing", "permute", "x.permute() takes the dims"),
    (_expand_nothing, "expand nothing", "expand", "x.expand() takes the size"),
    (
        _where_float,
        "where float",
        "where",
        "must be a bool tensor, as in torch, got a tensor of float32",
    ),
    (_where_uint8, "where uint8", "where", "got a tensor of uint8"),
    (_where_int_scalar, "where int", "where", "must be a bool tensor, as in torch, got int 1"),
]


@pytest.mark.parametrize(("fn", "marker", "op", "text"), BAD, ids=[case[1] for case in BAD])
def test_a_bad_argument_is_a_fusion_error_at_the_users_line(
    fn: Callable[..., Any], marker: str, op: str, text: str
) -> None:
    with pytest.raises(pf.FusionError) as excinfo:
        pf.fuse(fn).trace(X)
    error = excinfo.value
    assert not isinstance(error, pf.InternalError)
    assert (error.op, error.where) == (op, line_of(marker))
    assert text in error.bare_message
    assert f"# line: {marker}" in str(error)  # the user's source text


# What torch accepts, with torch's meaning: each pair is the fused function and NumPy's
# float64 answer on the same input.
ACCEPTED: dict[str, tuple[Callable[..., Any], Callable[[np.ndarray], Any]]] = {
    "numpy int dim": (lambda x: pf.sum(x, np.int64(1)), lambda a: a.sum(1)),
    "numpy int dims": (lambda x: x.mean((np.int32(0), 1)), lambda a: a.mean()),
    "numpy bool keepdim": (
        lambda x: pf.amax(x, 1, np.bool_(True)),
        lambda a: a.max(1, keepdims=True),
    ),
    "numpy int transpose": (lambda x: x.transpose(np.int64(0), 1), lambda a: a.T),
    "numpy int unsqueeze": (lambda x: pf.unsqueeze(x, np.int64(-1)), lambda a: a[..., None]),
    "numpy int reshape": (lambda x: x.reshape(np.int64(3), 8), lambda a: a.reshape(3, 8)),
    "numpy int view": (lambda x: x.view(np.int64(24)), lambda a: a.reshape(24)),
    "numpy int index": (lambda x: x[np.int64(1), np.int64(-2) :], lambda a: a[1, -2:]),
    "numpy int stack": (lambda x: pf.stack([x, x], np.int64(-3)), lambda a: np.stack([a, a], 0)),
    "numpy int argmax": (lambda x: pf.argmax(x, np.int64(1)), lambda a: a.argmax(1)),
    "numpy int tril": (lambda x: pf.tril(x, np.int64(1)), lambda a: np.tril(a, 1)),
    "numpy int arange": (lambda x: x[0] * pf.arange(np.int64(6)), lambda a: a[0] * np.arange(6)),
    "numpy int size": (lambda x: x * x.size(np.int64(1)), lambda a: a * 6),
    # torch.sum(x, ()) reduces every dim (pytorch#29137), and so does an empty list.
    "sum over ()": (lambda x: pf.sum(x, ()), lambda a: a.sum()),
    "mean over []": (lambda x: x.mean([]), lambda a: a.mean()),
    "var over ()": (lambda x: pf.var(x, ()), lambda a: a.var(ddof=1)),
    "any over ()": (lambda x: pf.any(x > 1.0, ()), lambda a: (a > 1.0).any()),
    "squeeze of ()": (lambda x: pf.squeeze(x[:1], ()), lambda a: a[:1]),
    "round()": (lambda x: round(x * 3), lambda a: np.round(a * 3)),
    "np.matmul": (lambda x: np.matmul(x, x.T), lambda a: a @ a.T),
    "np.shape": (lambda x: x.reshape(np.shape(x)[::-1]), lambda a: a.reshape(6, 4)),
    "np.ndim and np.size": (lambda x: x * (np.ndim(x) + np.size(x)), lambda a: a * 26),
    "nan_to_num nan=None": (
        lambda x: pf.nan_to_num(pf.log(x), nan=None),
        lambda a: np.nan_to_num(np.log(a)),
    ),
    # torch's NumPy names: axis for dim and keepdims for keepdim, in every reduction, as
    # functions and as methods.
    "sum axis": (lambda x: pf.sum(x, axis=1), lambda a: a.sum(1)),
    "x.sum axis keepdims": (
        lambda x: x.sum(axis=(0, 1), keepdims=True),
        lambda a: a.sum((0, 1), keepdims=True),
    ),
    "sum dim keepdims": (
        lambda x: pf.sum(x, -1, keepdims=True),
        lambda a: a.sum(-1, keepdims=True),
    ),
    "mean axis": (lambda x: x.mean(axis=0), lambda a: a.mean(0)),
    "prod axis": (
        lambda x: pf.prod(x, axis=-1, keepdims=True),
        lambda a: a.prod(-1, keepdims=True),
    ),
    "x.prod axis": (lambda x: x.prod(axis=0), lambda a: a.prod(0)),
    "amax axis": (lambda x: x.amax(axis=1), lambda a: a.max(1)),
    "amin axis keepdims": (
        lambda x: pf.amin(x, axis=0, keepdims=True),
        lambda a: a.min(0, keepdims=True),
    ),
    "max axis": (lambda x: pf.max(x, axis=0), lambda a: a.max(0)),
    "x.max axis pair": (
        lambda x: x.max(axis=1, keepdims=True).values * x.max(axis=1, keepdims=True).indices,
        lambda a: a.max(1, keepdims=True) * a.argmax(1)[:, None],
    ),
    "x.min axis pair": (lambda x: x.min(axis=0)[1], lambda a: a.argmin(0)),
    "any axis": (lambda x: pf.any(x > 1.0, axis=1), lambda a: (a > 1.0).any(1)),
    "x.all axis keepdims": (
        lambda x: (x > -1.0).all(axis=0, keepdims=True),
        lambda a: (a > -1.0).all(0, keepdims=True),
    ),
    "var axis": (lambda x: pf.var(x, axis=1), lambda a: a.var(1, ddof=1)),
    "x.std axis keepdims": (
        lambda x: x.std(axis=0, correction=0, keepdims=True),
        lambda a: a.std(0, keepdims=True),
    ),
    "logsumexp axis": (lambda x: pf.logsumexp(x, axis=1), lambda a: np.log(np.exp(a).sum(1))),
    "x.logsumexp axis": (lambda x: x.logsumexp(axis=-1), lambda a: np.log(np.exp(a).sum(-1))),
    "argmax axis": (lambda x: x.argmax(axis=1), lambda a: a.argmax(1)),
    "argmin axis keepdims": (
        lambda x: pf.argmin(x, axis=0, keepdims=True),
        lambda a: a.argmin(0)[None, :],
    ),
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_what_torch_accepts_means_what_it_means_in_torch(name: str) -> None:
    fused, reference = ACCEPTED[name]
    with np.errstate(invalid="ignore"):
        want = np.asarray(reference(A.astype(np.float64)))
    got = pf.fuse(fused).reference(A)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-6, atol=1e-6)


def _ops_taking_a_tensor_first() -> list[str]:
    """The public ops (``user_op``-wrapped functions) whose first parameter is a Tensor."""
    names = []
    for name in dir(pf):
        op = getattr(pf, name)
        wrapped = getattr(op, "__wrapped__", None)
        if name.startswith("_") or wrapped is None:
            continue
        first = next(iter(inspect.signature(wrapped).parameters.values()))
        if first.annotation == "Tensor":
            names.append(name)
    return names


# Valid values of the other parameters an op requires, by name (a Tensor's is ``x``).
_REQUIRED: dict[str, object] = {
    "dim": -1,
    "dim0": 0,
    "dim1": 1,
    "dims": (1, 0),
    "shape": (4, 6),
    "fill_value": 1.0,
    "dtype": pf.float16,
}


def _not_a_tensor(x: Any, name: str, value: object) -> Any:
    op = getattr(pf, name)
    parameters = list(inspect.signature(op.__wrapped__).parameters.values())[1:]
    rest = [
        x if parameter.annotation == "Tensor" else _REQUIRED[parameter.name]
        for parameter in parameters
        if parameter.default is inspect.Parameter.empty
    ]
    return op(value, *rest)  # line: not a tensor


@pytest.mark.parametrize("name", _ops_taking_a_tensor_first())
@pytest.mark.parametrize("value", [2.0, None, np.ones((4, 6), np.float32)], ids=type)
def test_an_op_given_no_tensor_names_the_argument(name: str, value: object) -> None:
    # The composites read x.dtype and x.ndim first: without the check, an AttributeError
    # inside pyfuse, reported as a pyfuse bug.
    with pytest.raises(pf.FusionError) as excinfo:
        pf.fuse(lambda x: _not_a_tensor(x, name, value)).trace(X)
    error = excinfo.value
    assert not isinstance(error, pf.InternalError)
    assert error.op == ("clamp" if name == "clip" else name)
    assert error.where == line_of("not a tensor")
    assert f"must be a traced tensor, got {type(value).__name__}" in error.bare_message
