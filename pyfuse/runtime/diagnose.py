"""Errors in the user's terms: what the compiler was working on, as the user wrote it.

Two jobs, both done where an error leaves the compiler for the user (``compile_fusion``,
``FusedFunction``, ``Compiled``, and, through :mod:`pyfuse.frontend.trace_errors`, the
traced ops):

- :func:`explain_schedule_error` rewrites a :class:`ScheduleError` raised in the passes'
  terms (``validate: T3 reduces over rBx2{1} ...``) to start with the user's op, line, shapes
  and dtypes (``sum over dims 0, 1 of f32[1, 4096] at model.py:12: validate: T3 ...``).
- :func:`internal_error` wraps any other exception that escaped pyfuse (a bug) in an
  :class:`InternalError` naming the same and carrying a repro script
  (:mod:`pyfuse.ir.script`), also written to a temporary file.

The op comes from the message's T-numbers where they name a traced tensor; else from what
the exception's frames were working on: the innermost ``Expr`` (or tensor ``tv``) in their
locals, then the subject named with :func:`pyfuse.errors.working_on`, then the innermost
kernel plan, then fusion (its main op: a reduction or matmul, else its first). An expr a
pass made is traced back to the user's op it serves: the traced op of its line (an mma for
the matmul it replaced), else the nearest consumer (then producer) the traced fusion holds.
Everything here runs only when an error is being reported.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import tempfile
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from types import FrameType, TracebackType

from pyfuse.errors import InternalError, PyfuseError, ScheduleError
from pyfuse.ir.exprs import (
    BroadcastOp,
    CastOp,
    CatOp,
    ExpandOp,
    Expr,
    LinearOp,
    LoadStoreOp,
    MatmulOp,
    MmaOp,
    PermuteOp,
    ReductionOp,
    ReshapeOp,
    SliceOp,
    SqueezeOp,
)
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.params import MatmulParams
from pyfuse.ir.script import fusion_to_script, literal
from pyfuse.ir.tensor import Scalar, TensorView, Val
from pyfuse.passes.plan import KernelPlan
from pyfuse.runtime.location import PACKAGE_DIR, user_location

_TENSOR_NAME = re.compile(r"\bT(\d+)\b")
_MAIN_OPS = (ReductionOp, MatmulOp, LinearOp, MmaOp)
# Raised on purpose with a message for the user (a malformed PYFUSE_* variable), not bugs.
_USER_FACING_MODULES = (os.path.join(PACKAGE_DIR, "knobs.py"),)


# ---- is it a bug? ------------------------------------------------------------------------------


def _innermost_file(error: BaseException) -> str | None:
    tb = error.__traceback__
    if tb is None:
        return None
    while tb.tb_next is not None:
        tb = tb.tb_next
    return os.path.abspath(tb.tb_frame.f_code.co_filename)


def is_compiler_bug(error: BaseException) -> bool:
    """An exception escaping code that runs only pyfuse's own (the passes, the emitter) is a
    bug unless pyfuse raised it on purpose (a PyfuseError, a malformed setting, a warning
    that ``-W error`` turned into an exception) or memory ran out."""
    if not isinstance(error, Exception) or isinstance(error, PyfuseError | Warning | MemoryError):
        return False
    return _innermost_file(error) not in _USER_FACING_MODULES


def is_pyfuse_bug(error: BaseException) -> bool:
    """:func:`is_compiler_bug`, for code that also runs the user's (their traced function,
    their array library's allocator): only an exception raised in a pyfuse frame is ours."""
    if not is_compiler_bug(error):
        return False
    filename = _innermost_file(error)
    return filename is not None and filename.startswith(PACKAGE_DIR + os.sep)


# ---- what was being worked on ------------------------------------------------------------------


def _frames_innermost_first(tb: TracebackType | None) -> list[Mapping[str, object]]:
    """The locals of the frames the exception left. Frames still running (the one handling
    it) are skipped: reading a running frame's ``f_locals`` keeps a snapshot on the frame,
    holding the exception that holds the frame, a cycle that outlives the call's arrays."""
    running = set()
    caller: FrameType | None = sys._getframe(1)
    while caller is not None:
        running.add(id(caller))
        caller = caller.f_back
    frames: list[Mapping[str, object]] = []
    while tb is not None:
        if id(tb.tb_frame) not in running:
            frames.append(tb.tb_frame.f_locals)
        tb = tb.tb_next
    return frames[::-1]


def _worked_on(names: Mapping[str, object]) -> Iterator[object]:
    """A frame's expr (``expr`` first), then its tensor ``tv``: the passes' names for the one
    being worked on. Other tensors a frame holds (a scheduler's reference) may be any."""
    if isinstance(names.get("expr"), Expr):
        yield names["expr"]
    for value in names.values():
        if isinstance(value, Expr):
            yield value
    if isinstance(names.get("tv"), TensorView):
        yield names["tv"]


def _subjects(error: BaseException) -> Iterator[object]:
    frames = _frames_innermost_first(error.__traceback__)
    for names in frames:
        yield from _worked_on(names)
    named = getattr(error, "pyfuse_subject", None)
    if named is not None:
        yield named
    for names in frames:
        for value in names.values():
            # A kernel's plan, or the pipeline's record of one (KernelStages.plan).
            plan = value if isinstance(value, KernelPlan) else getattr(value, "plan", None)
            if isinstance(plan, KernelPlan):
                yield plan
        yield from (value for value in names.values() if isinstance(value, Fusion))


def _main_expr(fusion: Fusion) -> Expr | None:
    exprs = fusion.exprs()
    for expr in exprs:
        if isinstance(expr, _MAIN_OPS):
            return expr
    return exprs[0] if exprs else None


class _Traced:
    """The traced fusion's tensors by name: the passes keep names, so a tensor of a kernel
    fusion with a traced name stands for that traced tensor."""

    def __init__(self, fusion: Fusion) -> None:
        self.fusion = fusion
        self.by_name = {tv.name: tv for tv in fusion.tensors()}

    def tensor(self, tv: TensorView) -> TensorView | None:
        return self.by_name.get(tv.name)

    def user_op(self, subject: object) -> Expr | TensorView | None:
        """The traced expr (or input) ``subject`` stands for, or a pass's expr that carries
        the user's line; None when nothing maps."""
        if isinstance(subject, KernelPlan):
            subject = subject.fusion
        if isinstance(subject, Fusion):
            subject = _main_expr(subject)
        if isinstance(subject, Expr):
            outputs = [val for val in subject.outputs if isinstance(val, TensorView)]
            if not outputs:
                return None
            start = outputs[0]
        elif isinstance(subject, TensorView):
            start = subject
        else:
            return None
        traced = self.tensor(start)
        if traced is not None:
            return traced.definition or traced
        definition = start.definition
        if definition is not None and definition.source:
            same_line = self._traced_at(definition)
            if same_line is not None:
                return same_line
        for tv in self._nearest(start):
            mapped = self.tensor(tv)
            if mapped is not None and mapped.definition is not None:
                return mapped.definition
        return definition if definition is not None and definition.source else None

    def _traced_at(self, made: Expr) -> Expr | None:
        """The traced expr a pass's expr replaced, by the user's line both carry: one of the
        same op, else the line's reduction or matmul (an mma's, a split sum's), else none."""
        candidates = [expr for expr in self.fusion.exprs() if expr.source == made.source]
        for expr in candidates:
            if expr.op_name == made.op_name:
                return expr
        for expr in candidates:
            if isinstance(expr, _MAIN_OPS) and isinstance(made, _MAIN_OPS):
                return expr
        return None

    def _nearest(self, start: TensorView) -> Iterator[TensorView]:
        """Tensors around ``start``: consumers breadth first (a pass's tensor serves the
        user's op downstream of it), then producers."""
        for step in ("uses", "producers"):
            seen = {id(start)}
            queue = deque([start])
            while queue:
                tv = queue.popleft()
                if step == "uses":
                    neighbours = [out for use in tv.uses for out in use.outputs]
                else:
                    neighbours = list(tv.definition.inputs) if tv.definition else []
                for val in neighbours:
                    if isinstance(val, TensorView) and id(val) not in seen:
                        seen.add(id(val))
                        queue.append(val)
                        yield val


def _type(val: Val) -> str:
    if isinstance(val, TensorView):
        return f"{val.dtype.short}{list(val.shape)}"
    if isinstance(val, Scalar):
        return literal(val.value)
    return "?"


def describe(op: Expr | TensorView, fusion: Fusion | None = None) -> str:
    """``op`` in the user's terms: ``sum over dim 1 of f32[63, 1]``, ``add of f32[4] and 2.0``."""
    if isinstance(op, TensorView):
        fusion_inputs = fusion.inputs if fusion is not None else []
        index = next((i for i, tv in enumerate(fusion_inputs) if tv is op), None)
        which = "an input" if index is None else f"input {index}"
        return f"{which} ({_type(op)}, T{op.name})"
    inputs = [_type(val) for val in op.inputs]
    out = op.output
    if isinstance(op, ReductionOp):
        axes = op.axes
        dims = f"dim {axes[0]}" if len(axes) == 1 else f"dims {', '.join(map(str, axes))}"
        return f"{op.op_name} over {dims} of {inputs[0]}"
    if isinstance(op, CastOp):
        return f"cast of {inputs[0]} to {out.dtype.short}"
    if isinstance(op, BroadcastOp | ExpandOp | SqueezeOp | PermuteOp | ReshapeOp | SliceOp):
        return f"{op.op_name} of {inputs[0]} to {_type(out)}"
    if isinstance(op, LoadStoreOp):
        return f"copy of {inputs[0]}"
    if isinstance(op, CatOp):
        return f"cat along dim {op.dim} of {', '.join(inputs)}"
    return f"{op.op_name} of {' and '.join(inputs)}"


def _find_op(error: BaseException, traced: _Traced) -> Expr | TensorView | None:
    for subject in _subjects(error):
        found = traced.user_op(subject)
        if found is not None:
            return found
    return None


def _located(op: Expr | TensorView | None, fusion: Fusion) -> tuple[str | None, str | None, str]:
    """(op name, the user's line, the words) of ``op``."""
    if op is None:
        return None, None, ""
    if isinstance(op, TensorView):
        return None, None, describe(op, fusion)
    return op.op_name, op.source, describe(op, fusion)


# ---- ScheduleError -----------------------------------------------------------------------------


def explain_schedule_error(error: ScheduleError, fusion: Fusion) -> None:
    """Rewrite ``error`` in place to start with the user's op, line, shapes and dtypes
    (``fusion`` is the traced fusion); its own text follows."""
    if getattr(error, "pyfuse_explained", False):
        return
    error.pyfuse_explained = True  # type: ignore[attr-defined]
    traced = _Traced(fusion)
    op: Expr | TensorView | None = None
    for match in _TENSOR_NAME.finditer(error.bare_message):
        named = traced.by_name.get(int(match.group(1)))
        if named is not None and named.definition is not None:
            op = named.definition
            break
    if op is None:
        op = _find_op(error, traced)
    if op is None:
        return
    op_name, where, words = _located(op, fusion)
    where = where or error.where
    original = error.bare_message
    if error.op is not None and error.op != op_name:
        original = f"{error.op}: {original}"
    head = words if where is None else f"{words} at {where}"
    error.reword(f"{head}: {original}", op=None, where=where)
    error.op = op_name or error.op


# ---- InternalError -----------------------------------------------------------------------------


def write_repro(script: str, name: str) -> str | None:
    """Write a repro script to a temporary file; its path, or None where that fails."""
    stem = re.sub(r"[^A-Za-z0-9_]", "_", name) or "fusion"
    try:
        handle, path = tempfile.mkstemp(prefix=f"pyfuse_repro_{stem}_", suffix=".py")
        with os.fdopen(handle, "w") as file:
            file.write(script)
    except OSError:
        return None
    return path


def _matmul_source(matmul: MatmulParams | None) -> str | None:
    if matmul is None:
        return None
    values = [(field.name, getattr(matmul, field.name)) for field in dataclasses.fields(matmul)]
    chosen = ", ".join(f"{name}={value!r}" for name, value in values if value is not None)
    return f"pf.MatmulParams({chosen})"


def _internal(
    error: BaseException,
    *,
    doing: str,
    op: Expr | TensorView | None,
    fusion: Fusion | None,
    where: str | None,
    script: str | None,
    name: str,
) -> InternalError:
    op_name, op_where, words = _located(op, fusion) if fusion is not None else (None, None, "")
    where = op_where or where
    cause = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    message = f"{cause} raised inside pyfuse while {doing}"
    if words:
        message = f"{words} at {where}: {message}" if where else f"{words}: {message}"
    path = write_repro(script, name) if script is not None else None
    internal = InternalError(message, where=where, repro=script, repro_path=path)
    internal.op = op_name
    return internal


def internal_error(
    error: BaseException,
    fusion: Fusion | None,
    *,
    name: str,
    doing: str,
    matmul: MatmulParams | None = None,
    where: str | None = None,
    note: Sequence[str] = (),
) -> InternalError:
    """An InternalError for ``error`` (raise it ``from error``): the op being processed and
    its line where known (else ``where``, the user's call), and a script that rebuilds
    ``fusion`` (the traced fusion) and compiles it."""
    script = None
    op = None
    where = where or user_location()
    if fusion is not None:
        op = _find_op(error, _Traced(fusion))
        header = [
            f"pyfuse repro: {type(error).__name__} while {doing}",
            "run it with python to compile the fusion again",
            *note,
        ]
        try:
            script = fusion_to_script(fusion, matmul=_matmul_source(matmul), header=header)
        except Exception:  # a fusion the printer cannot write has no repro
            script = None
    return _internal(
        error, doing=doing, op=op, fusion=fusion, where=where, script=script, name=name
    )
