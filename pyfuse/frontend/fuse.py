"""``@pf.fuse`` and :class:`FusedFunction`: tracing a Python function into a Fusion.

Tracing calls the user's function once on symbolic :class:`Tensor` s built from the
arguments' specs (shape, dtype, strides). Inputs become fusion inputs (a strided input
gets an allocation domain that says how it lies in memory); the returned tensors become
fusion outputs. Python numbers passed as arguments are constants of the trace.

Compiling and calling are the runtime's (:mod:`pyfuse.runtime.calls`), imported with the
first call or compile so that ``import pyfuse`` loads neither the driver nor the compiler.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, overload

from pyfuse.errors import FusionError, InternalError
from pyfuse.frontend.tensor import Tensor
from pyfuse.frontend.tensor_methods import ValuesAndIndices
from pyfuse.ir import ops as ir_ops
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.naming import source_location
from pyfuse.ir.params import MatmulParams
from pyfuse.ir.tensor import TensorView, make_tensor
from pyfuse.runtime.location import user_location
from pyfuse.runtime.spec import Spec, spec_of

SUPPORTED_TARGETS = ("sm_90a",)


def input_tensor(spec: Spec) -> TensorView:
    """A fusion input for ``spec``: size-1 axes are broadcasts; non-row-major strides give an
    allocation domain ordered by decreasing stride, with contiguity flags."""
    tv = make_tensor(spec.shape, spec.dtype)
    if spec.is_contiguous:
        return tv
    tv.strides = spec.strides
    axes = tv.no_reductions
    real = [i for i, axis in enumerate(axes) if not axis.is_broadcast]
    # Decreasing stride; ties keep logical order (a stable sort on the negated stride).
    order = sorted(real, key=lambda i: -spec.strides[i])
    broadcasts = [i for i, axis in enumerate(axes) if axis.is_broadcast]
    contiguity: list[bool | None] = [None] * len(broadcasts)
    for position, index in enumerate(order):
        if position + 1 < len(order):
            inner = order[position + 1]
            expected = spec.strides[inner] * spec.shape[inner]
        else:
            expected = 1
        contiguity.append(spec.strides[index] == expected)
    tv.set_allocation([axes[i] for i in broadcasts + order], contiguity)
    return tv


def _definition(fn: Callable[..., Any]) -> str | None:
    """``file:line`` where ``fn`` is defined (its first decorator's line), when known."""
    code = getattr(fn, "__code__", None)
    return None if code is None else f"{code.co_filename}:{code.co_firstlineno}"


def _outputs_of(result: object, fn: Callable[..., Any]) -> list[Tensor]:
    items = list(result) if isinstance(result, tuple | list) else [result]
    name = getattr(fn, "__name__", "fused function")
    if not items:
        raise FusionError(
            f"the fused function {name} returned no tensors", op="fuse", where=_definition(fn)
        )
    for item in items:
        if isinstance(item, ValuesAndIndices):
            raise FusionError(
                f"the fused function {name} returned x.{item.op}(dim), a (values, indices) pair "
                "as in torch: return its .values and .indices",
                op="fuse",
                where=_definition(fn),
            )
        if not isinstance(item, Tensor):
            raise FusionError(
                f"the fused function {name} must return traced tensors (or a tuple or list "
                f"of them), got {type(item).__name__}",
                op="fuse",
                where=_definition(fn),
            )
    return items  # type: ignore[return-value]


# The runtime (and the driver behind it) loads with the first call, not with ``import
# pyfuse``; after that a call finds it in this global instead of an import statement.
_runtime_call: Callable[[Any, tuple[object, ...]], Any] | None = None


def _load_runtime_call() -> Callable[[Any, tuple[object, ...]], Any]:
    global _runtime_call
    from pyfuse.runtime.calls import call

    _runtime_call = call
    return call


def _internal_error(
    error: Exception, fused: FusedFunction, args: tuple[object, ...], doing: str
) -> InternalError | None:
    """The InternalError a public entry point raises (``from error``) for ``error`` when it
    is a bug of pyfuse's; None for any other (re-raised as it is). Outside the compile
    proper (which reports its own), the repro traces ``fused`` again for ``args``."""
    from pyfuse.runtime import diagnose  # loads only for an error

    if not diagnose.is_pyfuse_bug(error):
        return None
    fusion = None
    try:
        fusion = fused.trace(*args)
    except Exception:  # the repro is a help: the error is reported anyway
        fusion = None
    return diagnose.internal_error(
        error,
        fusion,
        name=fused.name,
        doing=f"{doing} {fused.name}",
        matmul=fused.matmul,
        where=user_location(),
    )


class FusedFunction:
    """A Python function that pyfuse traces, compiles and runs as fused GPU kernels, as
    :func:`fuse` makes it: ``fused = pf.fuse(lambda x: pf.softmax(x, -1))``."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        matmul: MatmulParams | None = None,
        target: str = "sm_90a",
        autotune: bool = False,
    ) -> None:
        if target not in SUPPORTED_TARGETS:
            raise FusionError(
                f"target must be one of {SUPPORTED_TARGETS}, got {target!r}", op="fuse"
            )
        if matmul is not None and not isinstance(matmul, MatmulParams):
            raise FusionError(f"matmul must be a pf.MatmulParams, got {matmul!r}", op="fuse")
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "fusion").replace("<lambda>", "lambda")
        if not isinstance(autotune, bool):
            raise FusionError(f"autotune must be True or False, got {autotune!r}", op="fuse")
        self.matmul = matmul
        self.target = target
        # Time matmul configs on the first call of each shape and remember the winner on
        # disk (pyfuse.runtime.autotune); the fields ``matmul`` sets stay as given.
        self.autotune = autotune
        functools.update_wrapper(self, fn)
        # The runtime's shortcut for a call like the last one (pyfuse.runtime.repeat_call):
        # the call's result, or None where the full path must run. Set by the runtime.
        self.repeat_call: Callable[[tuple[object, ...]], Any] | None = None

    def __repr__(self) -> str:
        return f"<pyfuse.FusedFunction {self.name}>"

    def trace(self, *args: object) -> Fusion:
        """The math IR of the function for arguments (arrays or ``pf.spec``), before any pass."""
        fusion = Fusion(self.name)
        where = user_location()
        with fusion:
            symbolic: list[object] = []
            for index, argument in enumerate(args):
                if isinstance(argument, bool | int | float):
                    symbolic.append(argument)
                    continue
                try:
                    spec = spec_of(argument)
                except FusionError as error:
                    raise FusionError(
                        f"argument {index}: {error.bare_message}", op=self.name, where=where
                    ) from None
                symbolic.append(Tensor(fusion.add_input(input_tensor(spec))))
            outputs = _outputs_of(self.fn(*symbolic), self.fn)
            seen: set[int] = set()
            for out in outputs:
                tv = out.tv
                if fusion.is_input(tv) or id(tv) in seen:
                    # An output is its own tensor: a returned input (or a tensor returned
                    # twice) is written through a copy.
                    with source_location(where):
                        tv = ir_ops.set_copy(tv)
                seen.add(id(tv))
                fusion.add_output(tv)
        return fusion

    def compile(self, *args: object) -> Any:
        """All passes and PTX emission for these arguments (arrays or ``pf.spec``); no GPU."""
        from pyfuse.runtime.calls import compile_for

        try:
            return compile_for(self, args)
        except Exception as error:
            internal = _internal_error(error, self, args, "compiling")
            if internal is None:
                raise
            raise internal from error

    def ptx(self, *args: object) -> str:
        """The PTX of every kernel for these arguments."""
        return str(self.compile(*args).ptx)

    def __call__(self, *arrays: object) -> Any:
        """Run on the GPU: GPU arrays in, GPU arrays of the same kind out."""
        try:
            repeat = self.repeat_call
            if repeat is not None:
                result = repeat(arrays)
                if result is not None:  # no call returns None: None is the shortcut's miss
                    return result
            return (_runtime_call or _load_runtime_call())(self, arrays)
        except Exception as error:
            internal = _internal_error(error, self, arrays, "preparing a call of")
            if internal is None:
                raise
            raise internal from error

    def reference(self, *arrays: object) -> Any:
        """Evaluate on the CPU with NumPy (float64 math, results in the output dtypes)."""
        # NumPy (and the interpreter) load only when asked: ``import pyfuse`` stays light.
        import numpy as np

        from pyfuse.ir.interpreter import evaluate

        fusion = self.trace(*arrays)
        host = [np.asarray(a) for a in arrays if not isinstance(a, bool | int | float)]
        results = evaluate(fusion, host)
        return results[0] if len(results) == 1 else tuple(results)


@overload
def fuse(
    fn: Callable[..., Any],
    /,
    *,
    name: str | None = None,
    matmul: MatmulParams | None = None,
    target: str = "sm_90a",
    autotune: bool = False,
) -> FusedFunction: ...


@overload
def fuse(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    matmul: MatmulParams | None = None,
    target: str = "sm_90a",
    autotune: bool = False,
) -> Callable[[Callable[..., Any]], FusedFunction]: ...


def fuse(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    matmul: MatmulParams | None = None,
    target: str = "sm_90a",
    autotune: bool = False,
) -> FusedFunction | Callable[[Callable[..., Any]], FusedFunction]:
    """Decorate a function to fuse: ``@pf.fuse`` or ``@pf.fuse(name=..., matmul=...)``.

    ``autotune=True`` times a pruned set of matmul configs on the first call of each shape
    (a few seconds) and remembers the fastest on disk for later calls and processes."""
    if fn is not None:
        return FusedFunction(fn, name=name, matmul=matmul, target=target, autotune=autotune)

    def decorate(function: Callable[..., Any]) -> FusedFunction:
        return FusedFunction(function, name=name, matmul=matmul, target=target, autotune=autotune)

    return decorate
