"""The Tensor methods and protocols beyond arithmetic: torch's conversions (``x.float()``),
bitwise operators on bools, the ops and composites as methods (``x.clamp(0, 1)``), NumPy's
ufuncs (``np.maximum(x, 0)``), and clear errors for what a traced tensor cannot do
(``float(x)``, ``x[0]``, ``x // y``), each naming the user's line.

:class:`TensorMethods` is the base of :class:`~pyfuse.frontend.tensor.Tensor`, so this module
stands under the Tensor, the ops, the composites and the NumPy ufuncs and imports none of
them. Its methods are declared here with their full signatures; each body calls the function
of that name which those modules register with :func:`tensor_method` as they are imported
(``pyfuse/__init__.py`` imports them all, so the table is full before any trace), as the
Tensor's own operators and methods do. A name nobody registered is an :class:`InternalError`.
A method called with arguments that do not fit its signature is a FusionError at the user's
line (:func:`~pyfuse.frontend.location.checked_calls`).
"""

from __future__ import annotations

import builtins
import math
import typing
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeGuard, TypeVar

from pyfuse.errors import InternalError
from pyfuse.frontend.arguments import Number, index_value
from pyfuse.frontend.location import checked_calls, refuse
from pyfuse.ir import dtypes
from pyfuse.ir.dtypes import DType

S = TypeVar("S", bound="TensorMethods")  # the Tensor, the one subclass
F = TypeVar("F", bound=Callable[..., "TensorMethods"])

# The functions the methods call, by name: filled by @tensor_method in ops, composites,
# numpy_ufuncs... (each above this module) as they are imported.
_IMPLEMENTATIONS: dict[str, Callable[..., TensorMethods]] = {}


def tensor_method(fn: F) -> F:
    """Register ``fn`` under its ``__name__`` as what the Tensor methods of that name call.
    Put it above ``@user_op`` so that the methods call the op with its error handling."""
    if fn.__name__ in _IMPLEMENTATIONS:
        raise InternalError(f"two implementations of the Tensor method {fn.__name__!r}")
    _IMPLEMENTATIONS[fn.__name__] = fn
    return fn


def _implementation(tensor: S, name: str) -> Callable[..., S]:
    """The function registered as ``name`` (see the module doc), typed as returning a tensor
    of ``tensor``'s class (the Tensor: every registered function returns one)."""
    try:
        return typing.cast("Callable[..., S]", _IMPLEMENTATIONS[name])
    except KeyError:
        raise InternalError(
            f"no implementation of the Tensor method {name!r} is registered: the module that "
            "defines it (pyfuse.frontend.ops, composites or numpy_ufuncs) was not imported"
        ) from None


def shape_arguments(
    values: tuple[int | Sequence[int], ...], method: str, what: str
) -> int | Sequence[int]:
    """The sizes of ``x.reshape(2, 3)`` or ``x.reshape((2, 3))``: one argument is the shape
    itself, as in torch. The op reads the sizes (:func:`~pyfuse.frontend.arguments.sizes`), so
    that a bad one is an error naming the op and the user's line; none at all is refused here,
    as torch does (an empty shape would make a 0-d tensor of a one-element one)."""
    if not values:
        refuse(method, f"x.{method}() takes the {what}, as in torch; none was given")
    return values[0] if len(values) == 1 else values  # type: ignore[return-value]


_NO_VALUE = "a traced tensor has no value while tracing; compute with pf ops (pf.where for choices)"


@checked_calls
class TensorMethods:
    """Methods of :class:`~pyfuse.frontend.tensor.Tensor` (see the module doc)."""

    __slots__ = ()

    if TYPE_CHECKING:  # Tensor's properties

        @property
        def ndim(self) -> builtins.int: ...

        @property
        def shape(self) -> tuple[builtins.int, ...]: ...

        @property
        def dtype(self) -> DType: ...

    # -- Python conversions a traced tensor cannot give ------------------------------------------
    def __float__(self) -> builtins.float:
        refuse("float", _NO_VALUE)

    def __int__(self) -> builtins.int:
        refuse("int", _NO_VALUE)

    def __index__(self) -> builtins.int:
        refuse("index", f"{_NO_VALUE}; a tensor cannot be a Python index or size")

    def __complex__(self) -> complex:
        refuse("complex", _NO_VALUE)

    def __array__(self, *args: object, **kwargs: object) -> NoReturn:
        refuse("numpy", f"{_NO_VALUE}; NumPy functions other than the ufuncs cannot take it")

    def __round__(self: S, ndigits: builtins.int | None = None) -> S:
        # Python's round(x) is torch's: a tensor of the nearest integral values.
        return _implementation(self, "round")(self, 0 if ndigits is None else ndigits)

    def __divmod__(self, other: object) -> NoReturn:
        refuse(
            "divmod", "divmod() of a traced tensor is not supported (nor in torch): use // and %"
        )

    def __rdivmod__(self, other: object) -> NoReturn:
        refuse(
            "divmod", "divmod() of a traced tensor is not supported (nor in torch): use // and %"
        )

    def __len__(self) -> builtins.int:
        if self.ndim == 0:
            refuse("len", "len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self: S) -> Iterator[S]:
        refuse("iter", "iterating over a traced tensor needs indexing, which is not supported yet")

    def __getitem__(self: S, index: object) -> S:
        return _index(self, index)

    # -- NumPy ufuncs: np.exp(x), np.maximum(x, 0); other NumPy functions: np.sum(x) -----------
    def __array_ufunc__(self: S, ufunc: Any, method: str, *inputs: object, **kwargs: object) -> S:
        return _implementation(self, "apply_ufunc")(ufunc, method, inputs, kwargs)

    def __array_function__(
        self, func: Any, types: object, args: tuple[object, ...], kwargs: dict[str, object]
    ) -> object:
        # Without it NumPy calls the tensor's own methods with NumPy's keywords (np.sum(x)
        # calls x.sum(axis=None, ...)): a TypeError from inside NumPy. Facts of the shape are
        # known while tracing; every other function is refused, naming the pf op to use.
        name = getattr(func, "__name__", "")
        if len(args) == 1 and args[0] is self and not kwargs:
            if name == "shape":
                return self.shape
            if name == "ndim":
                return self.ndim
            if name == "size":
                return math.prod(self.shape)
        return _implementation(self, "refuse_array_function")(func)

    # -- bitwise operators: logic on bool tensors ----------------------------------------------
    def __and__(self: S, other: S | Number) -> S:
        return _implementation(self, "bitwise")("and", self, other)

    def __rand__(self: S, other: S | Number) -> S:
        return _implementation(self, "bitwise")("and", other, self)

    def __or__(self: S, other: S | Number) -> S:
        return _implementation(self, "bitwise")("or", self, other)

    def __ror__(self: S, other: S | Number) -> S:
        return _implementation(self, "bitwise")("or", other, self)

    def __xor__(self: S, other: S | Number) -> S:
        return _implementation(self, "bitwise")("xor", self, other)

    def __rxor__(self: S, other: S | Number) -> S:
        return _implementation(self, "bitwise")("xor", other, self)

    def __invert__(self: S) -> S:
        return _implementation(self, "bitwise_not")(self)

    # -- floor division and remainder (pyfuse.frontend.rounding) --------------------------------
    def __floordiv__(self: S, other: S | Number) -> S:
        return _implementation(self, "floor_divide")(self, other)

    def __rfloordiv__(self: S, other: S | Number) -> S:
        return _implementation(self, "floor_divide")(other, self)

    def __mod__(self: S, other: S | Number) -> S:
        return _implementation(self, "remainder")(self, other)

    def __rmod__(self: S, other: S | Number) -> S:
        return _implementation(self, "remainder")(other, self)

    # -- dtype conversions -----------------------------------------------------------------------
    def float(self: S) -> S:
        return _implementation(self, "cast")(self, dtypes.float32)

    def half(self: S) -> S:
        return _implementation(self, "cast")(self, dtypes.float16)

    def bfloat16(self: S) -> S:
        return _implementation(self, "cast")(self, dtypes.bfloat16)

    def int(self: S) -> S:
        return _implementation(self, "cast")(self, dtypes.int32)

    def long(self: S) -> S:
        return _implementation(self, "cast")(self, dtypes.int64)

    def short(self: S) -> S:
        return _implementation(self, "cast")(self, dtypes.int16)

    def char(self: S) -> S:
        return _implementation(self, "cast")(self, dtypes.int8)

    def byte(self: S) -> S:
        return _implementation(self, "cast")(self, dtypes.uint8)

    def bool(self: S) -> S:
        return _implementation(self, "cast")(self, dtypes.bool_)

    def double(self: S) -> S:
        return _implementation(self, "cast")(self, dtypes.float64)

    def type_as(self: S, other: S) -> S:
        # Read softly: cast names what is wrong with an ``other`` that is no tensor.
        return _implementation(self, "cast")(self, getattr(other, "dtype", other))

    # -- the ops as methods ----------------------------------------------------------------------
    def abs(self: S) -> S:
        return _implementation(self, "abs")(self)

    def neg(self: S) -> S:
        return _implementation(self, "neg")(self)

    def relu(self: S) -> S:
        return _implementation(self, "relu")(self)

    def sigmoid(self: S) -> S:
        return _implementation(self, "sigmoid")(self)

    def tanh(self: S) -> S:
        return _implementation(self, "tanh")(self)

    def sin(self: S) -> S:
        return _implementation(self, "sin")(self)

    def tril(self: S, diagonal: builtins.int = 0) -> S:
        return _implementation(self, "tril")(self, diagonal)

    def triu(self: S, diagonal: builtins.int = 0) -> S:
        return _implementation(self, "triu")(self, diagonal)

    def erf(self: S) -> S:
        return _implementation(self, "erf")(self)

    def floor(self: S) -> S:
        return _implementation(self, "floor")(self)

    def ceil(self: S) -> S:
        return _implementation(self, "ceil")(self)

    def round(self: S, decimals: builtins.int = 0) -> S:
        return _implementation(self, "round")(self, decimals)

    def trunc(self: S) -> S:
        return _implementation(self, "trunc")(self)

    def fmod(self: S, other: S | Number) -> S:
        return _implementation(self, "fmod")(self, other)

    def remainder(self: S, other: S | Number) -> S:
        return _implementation(self, "remainder")(self, other)

    def floor_divide(self: S, other: S | Number) -> S:
        return _implementation(self, "floor_divide")(self, other)

    def cos(self: S) -> S:
        return _implementation(self, "cos")(self)

    def rsqrt(self: S) -> S:
        return _implementation(self, "rsqrt")(self)

    def reciprocal(self: S) -> S:
        return _implementation(self, "reciprocal")(self)

    def pow(self: S, exponent: S | Number) -> S:
        return _implementation(self, "pow")(self, exponent)

    def maximum(self: S, other: S | Number) -> S:
        return _implementation(self, "maximum")(self, other)

    def minimum(self: S, other: S | Number) -> S:
        return _implementation(self, "minimum")(self, other)

    def logical_not(self: S) -> S:
        return _implementation(self, "logical_not")(self)

    def logical_and(self: S, other: S | Number) -> S:
        return _implementation(self, "logical_and")(self, other)

    def logical_or(self: S, other: S | Number) -> S:
        return _implementation(self, "logical_or")(self, other)

    def logical_xor(self: S, other: S | Number) -> S:
        return _implementation(self, "logical_xor")(self, other)

    def clamp(
        self: S,
        min: S | Number | None = None,  # noqa: A002 - torch's names
        max: S | Number | None = None,  # noqa: A002
    ) -> S:
        return _implementation(self, "clamp")(self, min, max)

    clip = clamp

    def sign(self: S) -> S:
        return _implementation(self, "sign")(self)

    def isnan(self: S) -> S:
        return _implementation(self, "isnan")(self)

    def isinf(self: S) -> S:
        return _implementation(self, "isinf")(self)

    def isfinite(self: S) -> S:
        return _implementation(self, "isfinite")(self)

    def nan_to_num(
        self: S,
        nan: builtins.float = 0.0,
        posinf: builtins.float | None = None,
        neginf: builtins.float | None = None,
    ) -> S:
        return _implementation(self, "nan_to_num")(self, nan, posinf, neginf)

    def exp2(self: S) -> S:
        return _implementation(self, "exp2")(self)

    def expm1(self: S) -> S:
        return _implementation(self, "expm1")(self)

    def log2(self: S) -> S:
        return _implementation(self, "log2")(self)

    def log10(self: S) -> S:
        return _implementation(self, "log10")(self)

    def log1p(self: S) -> S:
        return _implementation(self, "log1p")(self)

    def softmax(self: S, dim: builtins.int) -> S:
        return _implementation(self, "softmax")(self, dim)

    def log_softmax(self: S, dim: builtins.int) -> S:
        return _implementation(self, "log_softmax")(self, dim)


def _index(x: S, index: object) -> S:
    """``x[...]`` with torch's basic indexing: ints (negative from the end), slices with
    positive steps, ``None`` (a new axis) and ``...``. A slice of an input is read in place
    at an offset (a view); of a computed tensor, from the memory an earlier kernel wrote.
    Tensor indices are refused at the user's line."""
    items = [_index_item(item) for item in (index if isinstance(index, tuple) else (index,))]
    for item in items:
        if not (item is None or item is Ellipsis or isinstance(item, slice) or _is_int(item)):
            refuse(
                "getitem",
                f"indexing a traced tensor with {type(item).__name__} {item!r} is not supported: "
                "only ints, slices, None and '...' (tensor indices need a gather)",
            )
    if sum(item is Ellipsis for item in items) > 1:
        refuse("getitem", "an index can only have a single ellipsis ('...')")
    consuming = [item for item in items if item is not None and item is not Ellipsis]
    if len(consuming) > x.ndim:
        refuse("getitem", f"too many indices for a tensor of rank {x.ndim}: {index!r}")
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at : at + 1] = [slice(None)] * (x.ndim - len(consuming))
    items += [slice(None)] * (x.ndim - sum(item is not None for item in items))
    starts: list[builtins.int] = []
    steps: list[builtins.int] = []
    counts: list[builtins.int] = []
    dropped: list[builtins.int] = []  # input axes an int index removes
    new_axes: list[builtins.int] = []  # positions of None in the result
    kept = 0  # result axes so far
    for item in items:
        if item is None:
            new_axes.append(kept)
            kept += 1
            continue
        axis = len(starts)
        extent = x.shape[axis]
        if isinstance(item, slice):
            if item.step is not None and _is_int(item.step) and item.step <= 0:
                refuse("getitem", f"step must be greater than zero, got {item.step}")
            start, stop, step = item.indices(extent)
            count = len(range(start, stop, step))
            starts.append(start if count else 0)
            steps.append(step)
            counts.append(count)
            kept += 1
        else:
            assert isinstance(item, int)  # checked above: ints, slices, None; '...' expanded
            position = item + extent if item < 0 else item
            if not 0 <= position < extent:
                refuse(
                    "getitem",
                    f"index {item} is out of bounds for dimension {axis} with size {extent}",
                )
            starts.append(position)
            steps.append(1)
            counts.append(1)
            dropped.append(axis)
    result = _implementation(x, "slice_axes")(x, starts, steps, counts)
    if dropped:
        result = _implementation(x, "squeeze")(result, dropped)
    for position in new_axes:
        result = _implementation(x, "unsqueeze")(result, position)
    return result


def _is_int(item: object) -> TypeGuard[int]:
    return isinstance(item, int) and not isinstance(item, bool)


def _index_item(item: object) -> object:
    """One item of an index with its ints as Python ints (a NumPy integer is one, as in torch);
    a slice bound that is no int is refused here: ``slice.indices`` would raise a TypeError."""
    if isinstance(item, slice):
        bounds = (item.start, item.stop, item.step)
        for bound in bounds:
            if bound is not None and index_value(bound) is None:
                refuse(
                    "getitem",
                    f"slice bounds must be ints or None, got {type(bound).__name__} {bound!r}",
                )
        read = [None if bound is None else index_value(bound) for bound in bounds]
        return slice(*read)
    number = index_value(item)
    return item if number is None else number


class ValuesAndIndices(Generic[S]):
    """torch's ``(values, indices)`` of ``x.max(dim)`` and ``x.min(dim)``: ``values`` is the
    reduction, ``indices`` the ``argmax`` (``argmin``) over the same dim, traced when read;
    ``[0]``, ``[1]`` and unpacking work as on torch's named tuple."""

    __slots__ = ("dim", "keepdim", "op", "source", "values")

    def __init__(self, values: S, op: str, source: S, dim: object, keepdim: builtins.bool) -> None:
        self.values = values
        self.op = op
        self.source = source
        self.dim = dim
        self.keepdim = keepdim

    @property
    def indices(self) -> S:
        if index_value(self.dim) is None:
            refuse(
                self.op,
                f"x.{self.op}(dim) takes one int dim for its indices, as in torch, got "
                f"{self.dim!r}; use pf.a{self.op}(x, dims) for the values over several dims",
            )
        source = self.source
        if source.dtype.is_bool:
            # torch's x.max(dim) takes bools (its indices: the first True, or the first False
            # for min), where torch.argmax does not: the indices of the same values as uint8.
            source = _implementation(source, "cast")(source, dtypes.uint8)
        return _implementation(source, f"arg{self.op}")(source, self.dim, self.keepdim)

    def __getitem__(self, index: int) -> S:
        if index in (0, -2):
            return self.values
        if index in (1, -1):
            return self.indices
        refuse(self.op, f"x.{self.op}(dim) is a pair: index {index} is out of range")

    def __iter__(self) -> Iterator[S]:
        yield self.values
        yield self.indices

    def __len__(self) -> builtins.int:
        return 2

    def __repr__(self) -> str:
        return f"{self.op}(values={self.values!r}, dim={self.dim!r})"
