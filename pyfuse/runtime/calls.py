"""Running fused functions: signatures, compiled variants per function, and the call path.

Expects a ``FusedFunction`` (duck-typed: ``fn``, ``name``, ``matmul`` and ``trace``; the
frontend's decorator, which calls :func:`call` and :func:`compile_for`); guarantees that a
call runs the variant compiled for its arguments and the captured values its function reads.

Cold path (a signature not seen before by this function): describe every argument and check
it (host arrays, negative strides, mixed devices raise ``InputError``), compile a variant
(trace + :func:`~pyfuse.runtime.compile.compile_fusion`, cached in memory by
:class:`Signature`), load its kernels on the device once per process (cubins through the
disk cache, :mod:`pyfuse.runtime.cache`) and bind a launch plan for the kind of arrays
given (torch, CuPy, or anything else, which gets :class:`~pyfuse.runtime.arrays.DeviceArray`
outputs): :mod:`pyfuse.runtime.launch`.

Hot path (``FusedFunction.__call__``): the function's guard checks that the Python values it
captured (closure cells, globals, defaults: :mod:`pyfuse.runtime.guards`) are the objects
last seen, or switches to the table of their new values; one pass over the arguments builds
the call key (per array: shape, strides, dtype, device; the alignment class; Python numbers
by value) and the pointer list; one dict lookup finds the bound plan, which allocates the
outputs from the caller's allocator (torch's caching allocator for torch inputs: no
synchronization and no driver allocation, so calls are safe under CUDA graph capture) and
launches on the caller's current stream. Everything the launch needs is precomputed on the plan.

A misaligned input (address not a multiple of 16 bytes) compiles an unvectorized variant
(``vector_bytes=1``); strided and offset views are read through their element strides.

``PYFUSE_DISABLE_CACHE`` (and ``PYFUSE_DUMP``) turn off the compile caches, read when a
signature is first seen; a function's table of bound signatures is kept regardless, so a
warm call never reads the environment. The compiler and the variant cache load with the
first compile, not with this module.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pyfuse import knobs
from pyfuse.errors import FusionError
from pyfuse.ir.target import TargetInfo
from pyfuse.runtime.arrays import ArgumentError, Bound, call_key, describe_arguments, gpu_info
from pyfuse.runtime.guards import guard_for
from pyfuse.runtime.launch import (
    CompiledRuntime,
    Number,
    Signature,
    input_error,
    normalized,
    runtime_of,
    signature_item,
    target_for,
)
from pyfuse.runtime.location import user_location
from pyfuse.runtime.repeat_call import Repeat, repeat_of
from pyfuse.runtime.spec import Spec, spec, spec_of

if TYPE_CHECKING:
    from pyfuse.ir.fusion import Fusion

    # (fusion, default variant, autotune key, compile with params) -> the variant to run
    Tuner = Callable[[Fusion, Any, str | None, Callable[[Any], Any]], Any]

_STATE = "_pyfuse_runtime"  # attribute of a FusedFunction holding its _FunctionState
_STATE_LOCK = threading.Lock()


class _FunctionState:
    """Per-FusedFunction state: compiled variants, and bound call keys per value of the
    captured Python values the function reads (:mod:`pyfuse.runtime.guards`).

    ``bound`` is the table for ``captured`` (the objects last seen in the guarded places);
    a warm call checks them by identity (``check``, None when nothing is guarded) and, when
    one changed, :meth:`recapture` switches to the table of the new values."""

    def __init__(self, fn: object) -> None:
        self.lock = threading.RLock()
        self.compiled: dict[Signature, Any] = {}
        self.untuned: set[Signature] = set()  # compiled by an autotuning function, not tuned
        self.guard = guard_for(fn)
        self.check = None if self.guard is None else self.guard.check
        self.captured: tuple[object, ...] = ()
        self.captured_key: tuple[object, ...] = ()
        self.bound: dict[tuple[Any, ...], Bound] = {}
        # The warm path's shortcut for calls like the last (pyfuse.runtime.repeat_call): made
        # on the second call in a row with one key, used only with the bound table it was
        # made from (a changed captured value switches tables).
        self.repeat: Repeat | None = None
        self.last_key: tuple[Any, ...] | None = None
        self._tables: dict[tuple[object, ...], dict[tuple[Any, ...], Bound]] = {}
        if self.guard is not None:
            self.captured = self.guard.read()
            self.captured_key = self.guard.key(self.captured)
        self._tables[self.captured_key] = self.bound

    def recapture(self) -> None:
        """A guarded place holds another object: use the bound table of its value (a new
        one, or the one it had before, so flipping a value back finds its variants)."""
        assert self.guard is not None
        with self.lock:
            captured = self.guard.read()
            key = self.guard.key(captured)
            table = self._tables.setdefault(key, {})
            # The table before the values: a call that sees the new values sees their table.
            self.bound = table
            self.captured_key = key
            self.captured = captured

    def current_captured_key(self) -> tuple[object, ...]:
        """The key of the guarded places' values now (a trace about to run reads them)."""
        if self.check is not None and not self.check(self.captured):
            self.recapture()
        return self.captured_key


def _state_of(fused: Any) -> _FunctionState:
    state = fused.__dict__.get(_STATE)
    if state is None:
        with _STATE_LOCK:  # one state (one guard analysis) per function
            state = fused.__dict__.get(_STATE)
            if state is None:
                state = fused.__dict__.setdefault(_STATE, _FunctionState(fused.fn))
    return state  # type: ignore[no-any-return]


# ---- compiling ---------------------------------------------------------------------------------


def _compile(
    fused: Any,
    arguments: Sequence[Spec | Number],
    target: TargetInfo,
    device: int | None = None,
    tuner: Tuner | None = None,
) -> Any:
    """A compiled variant for normalized specs and numbers: from the in-memory cache, else
    traced and then read from the variant cache on disk or compiled (and stored there).
    With a ``device`` (GPU arrays), each new kernel's JIT starts as soon as its PTX exists.

    A function that autotunes compiles with the matmul params remembered for this fusion on
    this device (:mod:`pyfuse.runtime.autotune`); when none are, ``tuner`` (the call path's,
    which has the arrays) times the candidates and returns the winner's variant."""
    state = _state_of(fused)
    use_cache = knobs.cache_enabled()
    with state.lock:
        signature = Signature(
            tuple(signature_item(a) for a in arguments),
            fused.matmul,
            target,
            state.current_captured_key(),
        )
        if use_cache:
            hit = state.compiled.get(signature)
            # A variant an autotuning function compiled without arrays (``compile``) is
            # tuned on the first call that has them.
            if hit is not None and (tuner is None or signature not in state.untuned):
                return hit
        start = time.perf_counter()
        fusion = fused.trace(*arguments)
        traced = time.perf_counter() - start
        matmul = fused.matmul
        tune_key: str | None = None
        tuned = False
        if _autotunes(fused):
            from pyfuse.runtime import autotune

            tune_key = autotune.tune_key(fusion, target, _device_name(device), matmul)
            remembered = autotune.remembered(tune_key)
            tuned = remembered is not None
            matmul = remembered or matmul

        def full_compile(jit: Any = None) -> Any:
            from pyfuse.runtime.compile import compile_fusion  # the passes load on first use

            return compile_fusion(fusion, target, matmul, jit)

        compiled = None
        key = None
        if use_cache:
            from pyfuse.runtime import variant_cache

            start = time.perf_counter()
            key = variant_cache.variant_key(fusion, target, matmul, tuned=tuned)
            if key is not None:
                # A restored variant compiles again only to rebuild its kernel IR: no JIT.
                compiled = variant_cache.load(key, fusion, full_compile)
            if compiled is not None:
                compiled.timings = {"trace": traced, "variant_cache": time.perf_counter() - start}
        if compiled is None:
            compiled = full_compile(None if device is None else _jit_ahead(device, target.arch))
            compiled.timings = {"trace": traced, **compiled.timings}
            if key is not None:
                variant_cache.store(key, compiled)
        compiled.runtime = CompiledRuntime(compiled, signature)
        if tuner is not None and tune_key is not None and not tuned:

            def compile_with(params: Any) -> Any:
                from pyfuse.runtime.compile import compile_fusion

                jit = None if device is None else _jit_ahead(device, target.arch)
                variant = compile_fusion(fusion, target, params, jit)
                variant.runtime = CompiledRuntime(variant, signature)
                return variant

            compiled = tuner(fusion, compiled, tune_key, compile_with)
            state.untuned.discard(signature)
        elif tune_key is not None and not tuned:
            state.untuned.add(signature)
        if use_cache:
            state.compiled[signature] = compiled
        return compiled


def _autotunes(fused: Any) -> bool:
    """``PYFUSE_AUTOTUNE`` when set, else the function's own ``autotune``."""
    forced = knobs.autotune()
    return bool(getattr(fused, "autotune", False)) if forced is None else forced


def _device_name(device: int | None) -> str:
    """The device's name in autotune keys ("no GPU" on a machine without one: never found)."""
    from pyfuse.backend_ptx import driver

    if not driver.available():
        return "no GPU"
    return driver.device_info(device or 0).name


def _jit_ahead(device: int, arch: str) -> Callable[[str, str], None]:
    """A compile's ``jit`` hook for a GPU call: each kernel's driver JIT starts on a
    background thread as soon as its PTX exists (:func:`~pyfuse.runtime.cache.jit_ahead`)."""

    def start(name: str, ptx: str) -> None:
        from pyfuse.runtime import cache

        cache.jit_ahead(ptx, name, device=device, arch=arch)

    return start


def compile_for(fused: Any, args: Sequence[object]) -> Any:
    """``FusedFunction.compile``: a variant for arrays (host or GPU) or ``pf.spec`` s.

    GPU arrays also decide the device (its TargetInfo) and the alignment class; specs and
    host arrays compile for device 0 (HOPPER without a driver), aligned.
    """
    arguments: list[Spec | Number] = []
    device: int | None = None
    aligned = True
    for index, argument in enumerate(args):
        if isinstance(argument, Number):
            arguments.append(argument)
            continue
        info = gpu_info(argument)
        if info is not None and info.device != -1:
            aligned = aligned and info.pointer % 16 == 0
            if device is None:
                device = info.device
        try:
            # A GPU array's description is the spec (as the call path makes it); anything
            # else (a spec, a host array) is described by spec_of.
            described = (
                spec_of(argument) if info is None else spec(info.shape, info.dtype, info.strides)
            )
            arguments.append(normalized(described))
        except FusionError as error:
            raise FusionError(
                f"argument {index}: {error.bare_message}", op=fused.name, where=user_location()
            ) from None
    return _compile(fused, arguments, target_for(device, aligned), device)


# ---- calling -----------------------------------------------------------------------------------


def call(fused: Any, arrays: Sequence[object]) -> Any:
    """``FusedFunction.__call__``: the hot path described in the module docstring."""
    state = fused.__dict__.get(_STATE) or _state_of(fused)
    check = state.check
    if check is not None and not check(state.captured):
        state.recapture()
    # (FusedFunction.__call__ tried the shortcut, ``fused.repeat_call``, before it came here.)
    try:
        key, pointers, stream = call_key(arrays)
    except ArgumentError as error:
        raise input_error(fused.name, error) from None
    bound = state.bound.get(key)
    if bound is None:
        bound = _bind_new(fused, state, arrays, key, pointers, stream)
    elif key == state.last_key:
        # The second call in a row with this key: later ones may take the shortcut.
        state.repeat = repeat = repeat_of(arrays, key[-1], bound, state.bound, state)
        fused.repeat_call = repeat.run if repeat is not None else None
    state.last_key = key
    return bound.run(arrays, pointers, stream)


def _bind_new(
    fused: Any,
    state: _FunctionState,
    arrays: Sequence[object],
    key: tuple[Any, ...],
    pointers: list[int],
    stream: int | None,
) -> Bound:
    with state.lock:
        state.current_captured_key()  # the values may have changed since the call's check
        bound = state.bound.get(key)
        if bound is not None:
            return bound
        try:
            described = describe_arguments(arrays)
            arguments: list[Spec | Number] = [
                item
                if isinstance(item, Number)
                else normalized(spec(item.shape, item.dtype, item.strides))
                for item in described.arguments
            ]
            target = target_for(described.device, described.aligned)
            # Arrays that name no device (__cuda_array_interface__) run on device 0.
            device = 0 if described.device is None else described.device
            kind = described.kind

            def tune(fusion: Fusion, default: Any, tune_key: str | None, compile_with: Any) -> Any:
                from pyfuse.runtime import autotune

                return autotune.tune(
                    name=fused.name,
                    key=tune_key,
                    default_compiled=default,
                    user=fused.matmul,
                    compile_with=compile_with,
                    bind=lambda variant: runtime_of(variant).bound_for(device, kind),
                    arrays=arrays,
                    pointers=pointers,
                    stream=kind.launch_stream(device, stream),
                    call_stream=stream,
                    device=device,
                )

            compiled = _compile(fused, arguments, target, device, tune)
            bound = runtime_of(compiled).bound_for(device, kind)
        except ArgumentError as error:
            raise input_error(fused.name, error) from None
        state.bound[key] = bound
        return bound
