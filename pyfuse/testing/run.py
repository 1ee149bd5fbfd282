"""Run one fuzz case and classify what happened.

:func:`run_program` (CPU) traces the program, runs ``pipeline.run(fusion, HOPPER)``, emits
every kernel's PTX, assembles each with ``ptxas -arch=sm_90a -v``, runs
every kernel on the kernel-IR interpreter (a tensor-core matmul kernel as its PTX on the Hopper
simulator, :mod:`pyfuse.testing.ptx_sim`, up to ``SIMULATED_MATMUL_CTAS`` CTAs; larger ones
stop after assembly), then, for cases of at most ``PTX_SIMULATED_CTAS`` CTAs, every kernel
as its PTX on that simulator (stage ``ptx``: the emitter's instructions), and compares each
output with
``FusedFunction.reference`` on fresh random inputs laid out as the specs say.
:func:`run_program_gpu` calls ``FusedFunction.__call__`` twice on torch CUDA tensors with
fresh data each time and compares with the reference of the same inputs copied to the host.

Outcome classes (:data:`FAILURES` are the ones a fuzz run reports):

- ``ok``: every output matches; ``compiled``: compiled and assembled, not simulated (a
  matmul kernel of more than ``SIMULATED_MATMUL_CTAS`` CTAs).
- ``invalid``: tracing raised :class:`pyfuse.FusionError` (not a failure: the program is one
  pyfuse refuses).
- ``compile_error``: any other exception from tracing, the passes, the emitter or ptxas.
- ``spill``: ptxas reported spills, a stack frame, local memory or an advisory for the PTX.
- ``interpreter_error``: the kernel-IR interpreter refused a kernel (out of bounds,
  misaligned, a race...), or the Hopper simulator met an instruction it does not model
  (``NotModeledError``) or failed.
- ``kernel_fault``: the Hopper simulator found a kernel's PTX racing, deadlocking, accessing
  out of bounds, storing garbage or breaking the TMA/mbarrier/wgmma protocol.
- ``reference_error``: the NumPy reference raised.
- ``wrong_result``: an output differs (values, NaN positions, unwritten poison, shape/dtype).
- ``gpu_error``: the GPU call raised; ``timeout`` and ``crash`` come from the worker pool.

Comparison: floats within ``rtol * |want| + atol * scale`` (``scale`` the output's RMS, at
least 1; f64 1e-9, f32 1e-4, f16 1e-2, bf16 3e-2) with NaN where the reference has NaN and
infinities equal; integers and bools exactly. Elements float32 cannot determine are left out:
where the reference computed again with a few float32 ulps of noise on every result
(:mod:`pyfuse.testing.noisy_reference`) moves past that tolerance (a sqrt of a cancellation, a
comparison of near values, an integer cast of a computed float). An output fed by an op
that can flip on a last-bit difference (a comparison or integer cast of a computed float)
may differ in up to 1% of its elements, at least one; any output may be off by up to 0.5% in
one element of a thousand, at least one (a 16-bit intermediate that rounded the other way,
amplified after).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

import pyfuse as pf
from pyfuse.ir.interpreter import evaluate_all
from pyfuse.ir.records import record
from pyfuse.testing.noisy_reference import evaluate_noisy, rounds
from pyfuse.testing.program import Program, build_function
from pyfuse.testing.ptx_sim import SimulationError
from pyfuse.testing.simulator import random_inputs, run_on_simulator

Array = npt.NDArray[Any]

FAILURES = (
    "wrong_result",
    "kernel_fault",
    "interpreter_error",
    "compile_error",
    "spill",
    "reference_error",
    "gpu_error",
    "timeout",
    "crash",
)
CLASSES = ("ok", "compiled", "invalid", *FAILURES)

# (rtol, atol relative to the output's scale) per floating dtype name.
_TOLERANCE = {
    "float64": (1e-9, 1e-9), "float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2),
    "bfloat16": (3e-2, 3e-2),
}  # fmt: skip
_LENIENT_SHARE = 0.01
# At most one element in this many may miss the tolerance, by up to this much (relative).
_NEAR_MISS_SHARE = 1000
_NEAR_MISS_TOLERANCE = 5e-3
# The share of the tolerance by which a jittered reference may move an element that is
# still compared (see compare()).
_JITTER_SENSITIVITY = 0.1
# The most CTAs of a tensor-core matmul kernel the CPU fuzzer simulates (about 0.3 s each).
SIMULATED_MATMUL_CTAS = 16
# The most CTAs (all kernels together) of a case the CPU fuzzer also runs as PTX.
PTX_SIMULATED_CTAS = 1024


@record(frozen=True)
class Outcome:
    """What one case did: its class, the stage that failed, the exception type and the first
    line of its message (or of the mismatch description)."""

    cls: str
    stage: str = ""
    error_type: str = ""
    message: str = ""
    kernels: int = 0

    @property
    def failed(self) -> bool:
        return self.cls in FAILURES

    def signature(self) -> str:
        """Class, exception type and message with numbers and names normalized: equal for
        two cases that fail the same way."""
        if self.cls == "wrong_result":
            return f"{self.cls}:{self.error_type}"  # the kind of difference, see compare()
        return f"{self.cls}:{self.error_type}:{normalize(self.message)}"


# Numbered IR names (T12, iS4, bS5, v3, fusion_k2), then every digit run: sizes, tile shapes
# like 128x16x64 and dtype widths alike, so one bug seen at other sizes reads the same.
_NAMES = re.compile(r"\b(T\d+|[ibr][SB]?\w?\d+|v\d+|fusion_\w+|fuzz_\w+)\b")
_NUMBER = re.compile(r"-?\d+(\.\d+)?(e[-+]?\d+)?")


def normalize(message: str) -> str:
    """The message with every number (and numbered IR name) replaced, so that a failure seen
    with other sizes reads the same."""
    text = _NAMES.sub("X", message)
    text = _NUMBER.sub("N", text)
    return text[:160]


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0][:300] if lines else ""


def _error(cls: str, stage: str, error: BaseException, kernels: int = 0) -> Outcome:
    return Outcome(cls, stage, type(error).__name__, _first_line(error), kernels)


# ---- comparison ------------------------------------------------------------------------------


def _mismatches(
    got: Array,
    want: Array,
    at_least: float = 0.0,
    fraction: float = 1.0,
    precision: str | None = None,
) -> Array:
    """Where ``got`` is not ``want`` within the tolerance of the module doc (same shapes),
    both tolerances at least ``at_least``, then scaled by ``fraction``; a float's tolerance
    is that of ``precision`` (a dtype name) where given."""
    name = np.dtype(want.dtype).name
    if precision is not None and name in _TOLERANCE:
        name = precision
    if name not in _TOLERANCE:
        return np.asarray(got != want)
    rtol, atol = (fraction * max(at_least, t) for t in _TOLERANCE[name])
    g, w = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(w)
    scale = max(1.0, float(np.sqrt(np.mean(w[finite] ** 2)))) if finite.any() else 1.0
    with np.errstate(invalid="ignore"):
        # Only a finite reference has a tolerance: ``rtol * inf`` would let any number (even
        # an infinity of the other sign) match an infinite one.
        close = finite & (np.abs(g - w) <= rtol * np.abs(w) + atol * scale)
    same_special = (np.isnan(g) & np.isnan(w)) | (np.isinf(w) & (g == w))
    return np.asarray(~(close | same_special))


def _singular(got: Array, want: Array, jittered: Sequence[Array]) -> Array:
    """Elements the kernel made NaN where float32-sized noise moves the reference by more
    than half its own magnitude: a value that cancelled to about 0 and was then divided by
    (``fmod(x, y - logsumexp(y))``: CPU fuzzer, seed 419), where a kernel's rounding may land
    on the singularity itself; within the tolerance otherwise, so noise alone hides nothing."""
    w = want.astype(np.float64)
    nan_only_here = np.isnan(got.astype(np.float64)) & np.isfinite(w)
    unstable = np.zeros(w.shape, dtype=bool)
    for other in jittered:
        if other.shape == want.shape:
            with np.errstate(invalid="ignore"):
                unstable |= ~(np.abs(other.astype(np.float64) - w) <= 0.5 * np.abs(w))
    return np.asarray(nan_only_here & unstable)


def compare(
    got: Array,
    want: Array,
    lenient: bool = False,
    jittered: Sequence[Array] = (),
    precision: str | None = None,
) -> tuple[str, str] | None:
    """None when ``got`` matches ``want`` (see the module doc), else the kind of difference
    (``shape``, ``dtype``, ``values``, ``nan``, ``not_nan``, ``poison``) and a description.
    ``jittered``, the reference with float32-sized noise on every result, marks the
    elements float32 cannot determine (where one differs from ``want``): those are not
    compared. ``precision`` names the dtype whose tolerance a float output is held to (see
    :func:`output_precisions`); its own dtype's by default."""
    if got.shape != want.shape or got.dtype != want.dtype:
        kind = "shape" if got.shape != want.shape else "dtype"
        return kind, f"got {got.dtype}{list(got.shape)}, want {want.dtype}{list(want.shape)}"
    if got.size == 0:
        return None
    name = np.dtype(want.dtype).name
    bad = _mismatches(got, want, precision=precision)
    for other in jittered:
        if other.shape == want.shape:
            # Float32-sized noise that moves an element by a tenth of the tolerance shows it
            # ill-conditioned (a remainder of a huge value, a near tie): three samples of that
            # noise do not bound how far a kernel's own rounding moves it.
            bad &= ~_mismatches(other, want, fraction=_JITTER_SENSITIVITY, precision=precision)
    if name in _TOLERANCE and jittered:
        bad &= ~_singular(got, want, jittered)
    count = int(bad.sum())
    if (
        0 < count <= max(1, got.size // _NEAR_MISS_SHARE)
        and not (bad & _mismatches(got, want, _NEAR_MISS_TOLERANCE)).any()
    ):
        # A few elements just past the tolerance: a 16-bit intermediate rounded the other
        # way (its sum taken in another order) and an op after it amplified that ulp.
        return None
    if count == 0 or (lenient and count <= max(1, int(_LENIENT_SHARE * got.size))):
        return None
    where = np.unravel_index(int(np.flatnonzero(bad)[0]), got.shape)
    first_got, first_want = got[where], want[where]
    kind, what = "values", "values differ"
    if name in _TOLERANCE:
        nan_got = np.isnan(got.astype(np.float64))
        nan_want = np.isnan(want.astype(np.float64))
        if (nan_got & ~nan_want & bad).any():
            kind, what = "nan", "NaN where the reference has a number (unwritten or misread)"
        elif (nan_want & ~nan_got & bad).any():
            kind, what = "not_nan", "a number where the reference has NaN"
    elif name != "bool" and (got[bad] == -7).all():
        kind, what = "poison", "unwritten elements (poison)"
    return kind, (
        f"{what}: {count} of {got.size} elements of {name}{list(got.shape)}, first at "
        f"{tuple(int(i) for i in where)}: got {first_got}, want {first_want}"
    )


def output_precisions(fusion: pf.Fusion) -> list[str | None]:
    """Per output, the dtype whose tolerance it is held to: for a float64 output, the
    narrowest float dtype any op it depends on rounds to (the rest: None, their own). A
    float64 output made of float32 math is as exact as float32 (GPU fuzzer, seed 471: an
    rsqrt.approx one ulp from the reference's, cat into a float64 output, where the runs
    with noise cancelled in ``rsqrt(|x| + 1)``)."""
    precisions: list[str | None] = []
    for output in fusion.outputs:
        if output.dtype != pf.float64:
            precisions.append(None)
            continue
        narrowest, seen, stack = output.dtype, set(), [output]
        while stack:
            tv = stack.pop()
            if tv in seen or tv.definition is None:
                continue
            seen.add(tv)
            expr = tv.definition
            if tv.dtype.is_floating and rounds(expr) and tv.dtype.itemsize < narrowest.itemsize:
                narrowest = tv.dtype
            stack.extend(expr.tensor_inputs)
        precisions.append(None if narrowest == output.dtype else narrowest.name)
    return precisions


def _references(
    fusion: pf.Fusion, arrays: Sequence[Array], data_seed: int
) -> tuple[list[Array], list[list[Array]]]:
    """The reference outputs, and per output the same under float32-sized noise (random,
    then every result a little up, then down; see :mod:`pyfuse.testing.noisy_reference`)."""
    exact = evaluate_all(fusion, arrays)
    jitters = (np.random.default_rng([data_seed, 0x717]), 1.0, -1.0)
    runs = [evaluate_noisy(fusion, arrays, jitter, exact) for jitter in jitters]
    expected = [np.array(exact[out], order="C", copy=True) for out in fusion.outputs]
    return expected, [list(outputs) for outputs in zip(*runs, strict=True)]


# ---- CPU ------------------------------------------------------------------------------------


def _trace(fused: pf.FusedFunction, specs: Sequence[pf.Spec]) -> pf.Fusion | Outcome:
    """The traced fusion, or the outcome of a trace that raised: a FusionError is an
    invalid case, anything else a compile error."""
    try:
        return fused.trace(*specs)
    except pf.FusionError as error:
        return _error("invalid", "trace", error)
    except Exception as error:
        return _error("compile_error", "trace", error)


def run_function(
    fn: Callable[..., Any],
    specs: Sequence[pf.Spec],
    *,
    lenient: Sequence[bool] | None = None,
    data_seed: int = 0,
    assemble: bool = True,
    matmul: pf.MatmulParams | None = None,
) -> Outcome:
    """Compile (with the ``matmul`` schedule, if given), assemble and simulate ``fn`` for
    ``specs`` on the CPU; never raises."""
    from pyfuse.backend_ptx.emit import emit_ptx
    from pyfuse.backend_ptx.ptxas import PtxasError
    from pyfuse.backend_ptx.ptxas import assemble_least_spilling as ptxas_assemble
    from pyfuse.ir.target import HOPPER
    from pyfuse.passes import pipeline
    from pyfuse.passes.schedulers import scheduler_named

    fused = pf.fuse(fn)
    fusion = _trace(fused, specs)
    if isinstance(fusion, Outcome):
        return fusion

    def emit(stages: pipeline.KernelStages) -> pipeline.Emitted:
        # As the runtime's compile does: a kernel the emitter cannot write falls back.
        return pipeline.Emitted(emit_ptx(stages.kernel_ir, HOPPER))

    try:
        result = pipeline.run(fusion, HOPPER, matmul, emit=emit)
    except Exception as error:
        return _error("compile_error", "pipeline", error)
    kernels = len(result.kernels)
    # The kernel interpreter runs SIMT kernels; a tensor-core matmul kernel runs as its PTX on
    # the Hopper simulator, up to SIMULATED_MATMUL_CTAS CTAs (a larger one is compiled and
    # assembled only: its simulation would take most of a case's time budget).
    too_big = any(
        not scheduler_named(stages.plan.scheduler).interpreted
        and math.prod(stages.kernel_ir.grid) > SIMULATED_MATMUL_CTAS
        for stages in result.kernels
    )
    for stages in result.kernels:
        assert stages.emitted is not None
        ptx = stages.emitted.ptx
        if not assemble:
            continue
        try:
            problems = ptxas_assemble(ptx).problems()
        except PtxasError as error:
            return _error("compile_error", "ptxas", error, kernels)
        if problems:
            return Outcome("spill", "ptxas", "", problems[0], kernels)
    if too_big:
        return Outcome("compiled", kernels=kernels)
    arrays = random_inputs(specs, data_seed)
    try:
        expected, jittered = _references(fusion, arrays, data_seed)
    except Exception as error:
        return _error("reference_error", "reference", error, kernels)
    output_specs = [(tv.shape, tv.dtype) for tv in fusion.outputs]
    try:
        actual = run_on_simulator(result, arrays, output_specs, schedule_seed=data_seed)
    except SimulationError as error:  # the kernel raced, deadlocked or broke a protocol
        return _error("kernel_fault", "simulate", error, kernels)
    except Exception as error:
        return _error("interpreter_error", "simulate", error, kernels)
    flags = list(lenient) if lenient is not None else [False] * len(expected)
    precisions = output_precisions(fusion)
    runs = [("compare", actual)]
    interpreted = any(scheduler_named(st.plan.scheduler).interpreted for st in result.kernels)
    # (Without a kernel-IR kernel the first run was all PTX already.)
    if (
        interpreted
        and sum(math.prod(stages.kernel_ir.grid) for stages in result.kernels) <= PTX_SIMULATED_CTAS
    ):
        # The emitter's instructions too: every kernel again, as its PTX.
        try:
            runs.append(("ptx", run_on_simulator(result, arrays, output_specs, as_ptx=True)))
        except SimulationError as error:
            return _error("kernel_fault", "ptx", error, kernels)
        except Exception as error:
            return _error("interpreter_error", "ptx", error, kernels)
    for stage, outputs in runs:
        for index, (got, want, flag) in enumerate(zip(outputs, expected, flags, strict=True)):
            difference = compare(got, want, flag, jittered[index], precisions[index])
            if difference is not None:
                kind, text = difference
                return Outcome("wrong_result", stage, kind, f"output {index}: {text}", kernels)
    return Outcome("ok", kernels=kernels)


def run_program(program: Program, data_seed: int = 0, assemble: bool = True) -> Outcome:
    """:func:`run_function` for a program; a failure to even build the function is a
    compile_error of stage ``build``."""
    try:
        fn = build_function(program)
    except Exception as error:
        return _error("compile_error", "build", error)
    return run_function(
        fn,
        program.specs(),
        lenient=program.lenient_outputs(),
        data_seed=data_seed,
        assemble=assemble,
        matmul=program.matmul,
    )


# ---- GPU ------------------------------------------------------------------------------------


def _to_torch(array: Array, torch: Any) -> Any:
    """A CUDA tensor with ``array``'s values and memory layout (a strided view of a copy of
    its whole backing buffer)."""
    from pyfuse.ir.kernel_interpreter import memory_span

    span = memory_span(array)
    if span.dtype.name == "bfloat16":
        flat = torch.from_numpy(span.view(np.int16).copy()).view(torch.bfloat16)
    else:
        flat = torch.from_numpy(np.ascontiguousarray(span).copy())
    flat = flat.cuda()
    strides = tuple(s // array.itemsize for s in array.strides)
    return flat.as_strided(array.shape, strides)


def _to_host(tensor: Any, torch: Any) -> Array:
    tensor = tensor.detach().cpu().contiguous()
    if tensor.dtype == torch.bfloat16:
        import ml_dtypes

        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)  # type: ignore[no-any-return]
    return tensor.numpy()  # type: ignore[no-any-return]


def _poison_allocator(torch: Any) -> None:
    """Fill the caching allocator's free blocks with 0xFF (NaN) so an output element the
    kernel forgets reads as NaN, not as the last call's value (best effort: the runtime
    allocates outputs itself)."""
    for size in (1 << 19, 1 << 20, 1 << 24):
        block = torch.empty(size, dtype=torch.uint8, device="cuda")
        block.fill_(0xFF)
        del block


def run_function_gpu(
    fn: Callable[..., Any],
    specs: Sequence[pf.Spec],
    *,
    lenient: Sequence[bool] | None = None,
    data_seed: int = 0,
    matmul: pf.MatmulParams | None = None,
) -> Outcome:
    """Call ``fn`` fused (with the ``matmul`` schedule, if given) on the GPU twice with fresh
    data; compare with the reference."""
    import torch

    fused = pf.fuse(fn, matmul=matmul)
    fusion = _trace(fused, specs)
    if isinstance(fusion, Outcome):
        return fusion
    flags = list(lenient) if lenient is not None else [False] * len(fusion.outputs)
    for call in range(2):
        arrays = random_inputs(specs, data_seed * 2 + call)
        try:
            expected, jittered = _references(fusion, arrays, data_seed * 2 + call)
        except Exception as error:
            return _error("reference_error", "reference", error)
        tensors = [_to_torch(array, torch) for array in arrays]
        _poison_allocator(torch)
        try:
            result = fused(*tensors)
            outputs = result if isinstance(result, tuple) else (result,)
            torch.cuda.synchronize()
        except (pf.FusionError, pf.ScheduleError) as error:
            return _error("compile_error", f"call {call}", error)
        except Exception as error:
            cls = "gpu_error" if _is_device_error(error) else "compile_error"
            return _error(cls, f"call {call}", error)
        precisions = output_precisions(fusion)
        for index, (got, want, flag) in enumerate(zip(outputs, expected, flags, strict=True)):
            got_host = _to_host(got, torch)
            difference = compare(got_host, want, flag, jittered[index], precisions[index])
            if difference is not None:
                kind, text = difference
                return Outcome("wrong_result", f"call {call}", kind, f"output {index}: {text}")
    return Outcome("ok")


def _is_device_error(error: BaseException) -> bool:
    text = f"{type(error).__name__} {error}"
    return isinstance(error, pf.LaunchError) or "CUDA" in text or "cuda" in text


def run_program_gpu(program: Program, data_seed: int = 0) -> Outcome:
    try:
        fn = build_function(program)
    except Exception as error:
        return _error("compile_error", "build", error)
    return run_function_gpu(
        fn,
        program.specs(),
        lenient=program.lenient_outputs(),
        data_seed=data_seed,
        matmul=program.matmul,
    )
