"""Errors in the user's terms: InternalError for pyfuse's bugs (with a repro script), the
user's own exceptions unchanged, ScheduleErrors that start with the user's op and line."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pyfuse as pf
from pyfuse.errors import working_on
from pyfuse.ir import ops as ir_ops
from pyfuse.ir.script import structure
from pyfuse.passes import pipeline, schedule_reduction
from pyfuse.runtime import calls, launch
from pyfuse.runtime import compile as compile_module

HERE = os.path.abspath(__file__)
PYFUSE_DIR = os.path.dirname(os.path.abspath(pf.__file__))


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A variant the cache already holds would not run the pass a test plants a bug in.
    monkeypatch.setenv("PYFUSE_DISABLE_CACHE", "1")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where repro scripts go


def planted(source: str, **names: object) -> Callable[..., Any]:
    """The function ``planted`` defined by ``source``, its frames inside the pyfuse package
    (as a bug of pyfuse's would be); ``names`` are its globals."""
    namespace: dict[str, Any] = dict(names)
    exec(compile(source, os.path.join(PYFUSE_DIR, "planted_bug.py"), "exec"), namespace)
    return namespace["planted"]  # type: ignore[no-any-return]


def line_of(marker: str) -> str:
    """``file:line`` of this file's line holding ``marker`` (in a comment)."""
    for number, text in enumerate(Path(HERE).read_text().splitlines(), start=1):
        if f"# {marker}" in text and "line_of" not in text:
            return f"{HERE}:{number}"
    raise AssertionError(marker)


def _exec_repro(script: str, as_main: bool = False) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "__main__" if as_main else "pyfuse_repro"}
    exec(compile(script, "<repro>", "exec"), namespace)
    return namespace


def model(x: pf.Tensor) -> pf.Tensor:
    y = pf.exp(x)  # line: exp
    return pf.sum(y, 1)  # line: sum


X = pf.spec((63, 64), pf.float32)


# ---- InternalError from the compile ------------------------------------------------------------


def test_bug_in_a_pass_is_an_internal_error_naming_the_op(monkeypatch: pytest.MonkeyPatch) -> None:
    bad_schedule = planted(
        "def planted(fusion, target, vectorize=True):\n"
        "    for expr in fusion.exprs():\n"
        "        if expr.op_name == 'sum':\n"
        "            {}['planted']\n"
    )
    monkeypatch.setattr(schedule_reduction, "schedule", bad_schedule)
    fused = pf.fuse(model)
    with pytest.raises(pf.InternalError) as excinfo:
        fused.compile(X)
    error = excinfo.value
    assert isinstance(error, pf.PyfuseError)
    assert isinstance(error.__cause__, KeyError)
    assert error.op == "sum"
    assert error.where == line_of("line: sum")
    message = str(error)
    assert message.startswith(f"sum over dim 1 of f32[63, 64] at {line_of('line: sum')}: ")
    assert "KeyError: 'planted' raised inside pyfuse while compiling model" in message
    assert "return pf.sum(y, 1)" in message  # the user's source text
    # The repro: on the error, in a file the message names.
    assert error.repro is not None and error.repro_path is not None
    assert f"a script that reproduces it: {error.repro_path}" in message
    assert Path(error.repro_path).read_text() == error.repro
    assert Path(error.repro_path).parent == Path(tempfile.gettempdir())
    namespace = _exec_repro(error.repro)
    assert structure(namespace["fusion"].trace(*namespace["inputs"])) == structure(fused.trace(X))
    # Run as a program, it compiles the fusion: the planted bug strikes again.
    with pytest.raises(pf.InternalError, match="KeyError: 'planted'"):
        _exec_repro(error.repro, as_main=True)
    monkeypatch.undo()
    monkeypatch.setenv("PYFUSE_DISABLE_CACHE", "1")
    _exec_repro(error.repro, as_main=True)  # without the bug, it compiles


def test_bug_without_an_expr_names_the_kernels_main_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        pipeline.inline, "inline_most", planted("def planted(fusion):\n    raise IndexError(3)\n")
    )
    with pytest.raises(pf.InternalError) as excinfo:
        pf.fuse(model).compile(X)
    error = excinfo.value
    assert isinstance(error.__cause__, IndexError)
    assert (error.op, error.where) == ("sum", line_of("line: sum"))


def test_bug_in_the_emitter_names_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    def pointwise(x: pf.Tensor) -> pf.Tensor:
        return pf.exp(x) * 2  # line: pointwise

    monkeypatch.setattr(
        compile_module, "emit_ptx", planted("def planted(kernel, target):\n    raise TypeError\n")
    )
    with pytest.raises(pf.InternalError) as excinfo:
        pf.fuse(pointwise).compile(X)
    error = excinfo.value
    assert (error.op, error.where) == ("exp", line_of("line: pointwise"))
    assert str(error).startswith(f"exp of f32[63, 64] at {error.where}: TypeError raised")


def test_repro_keeps_the_matmul_params(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        pipeline.inline, "inline_most", planted("def planted(fusion):\n    raise KeyError(1)\n")
    )
    params = pf.MatmulParams(tile_m=64, persistent=False)
    fused = pf.fuse(lambda a, b: a @ b, matmul=params)
    with pytest.raises(pf.InternalError) as excinfo:
        fused.compile(pf.spec((128, 64), pf.bfloat16), pf.spec((64, 128), pf.bfloat16))
    assert excinfo.value.op == "matmul"
    assert excinfo.value.repro is not None
    assert "matmul=pf.MatmulParams(tile_m=64, persistent=False)" in excinfo.value.repro
    assert _exec_repro(excinfo.value.repro)["fusion"].matmul == params


def test_a_failed_repro_does_not_hide_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from pyfuse.runtime import diagnose

    monkeypatch.setattr(
        pipeline.inline, "inline_most", planted("def planted(fusion):\n    raise KeyError(1)\n")
    )
    monkeypatch.setattr(diagnose, "fusion_to_script", planted("def planted(*a, **k):\n    1/0\n"))
    with pytest.raises(pf.InternalError) as excinfo:
        pf.fuse(model).compile(X)
    assert excinfo.value.repro is None and excinfo.value.repro_path is None
    assert "error.repro" not in str(excinfo.value)
    assert str(excinfo.value).endswith("this is a bug in pyfuse; please report it")


# ---- the user's own exceptions -----------------------------------------------------------------


class UsersError(Exception):
    pass


def test_users_exception_in_the_traced_function_propagates_unchanged() -> None:
    raised = UsersError("mine")

    def fn(x: pf.Tensor) -> pf.Tensor:
        pf.exp(x)
        raise raised

    fused = pf.fuse(fn)
    for entry in (fused.trace, fused.compile, fused.reference):
        with pytest.raises(UsersError) as excinfo:
            entry(np.ones((2, 3), np.float32) if entry is fused.reference else X)
        assert excinfo.value is raised
        assert excinfo.value.__cause__ is None


def test_users_key_error_is_not_an_internal_error() -> None:
    table: dict[str, float] = {}

    def fn(x: pf.Tensor) -> pf.Tensor:
        return x * table["scale"]

    with pytest.raises(KeyError) as excinfo:
        pf.fuse(fn).compile(X)
    assert not isinstance(excinfo.value, pf.PyfuseError)


def test_users_callback_raising_inside_an_op_propagates_unchanged() -> None:
    class Dims:
        def __iter__(self) -> Any:
            raise UsersError("my dims")

    with pytest.raises(UsersError, match="my dims"):
        pf.fuse(lambda x: pf.sum(x, Dims())).trace(X)  # type: ignore[arg-type]


def test_an_op_called_with_wrong_arguments_is_a_fusion_error_at_the_users_line() -> None:
    def fn(x: pf.Tensor) -> pf.Tensor:
        return pf.add(x)  # type: ignore[call-arg]  # line: arity

    with pytest.raises(pf.FusionError) as excinfo:
        pf.fuse(fn).trace(X)
    assert excinfo.value.op == "add"
    assert excinfo.value.where == line_of("line: arity")
    assert "missing 1 required positional argument" in str(excinfo.value)


def test_a_tensors_truth_value_is_a_fusion_error_at_the_users_line() -> None:
    def fn(x: pf.Tensor) -> pf.Tensor:
        return x if x else -x  # line: bool

    with pytest.raises(pf.FusionError) as excinfo:
        pf.fuse(fn).trace(X)
    assert (excinfo.value.op, excinfo.value.where) == ("bool", line_of("line: bool"))


# ---- InternalError while tracing ---------------------------------------------------------------


def test_bug_in_a_traced_op_is_an_internal_error_with_a_partial_repro(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ir_ops, "reduce", planted("def planted(*args):\n    {}['reduce']\n"))
    fused = pf.fuse(model)
    with pytest.raises(pf.InternalError) as excinfo:
        fused.compile(X)
    error = excinfo.value
    assert isinstance(error.__cause__, KeyError)
    assert (error.op, error.where) == ("sum", line_of("line: sum"))
    assert "KeyError: 'reduce' raised inside pyfuse while tracing pf.sum(T1, 1)" in str(error)
    assert error.repro is not None
    assert f"    return pf.sum(T1, 1)  # {line_of('line: sum')}" in error.repro.splitlines()
    namespace = _exec_repro(error.repro)
    with pytest.raises(pf.InternalError, match="KeyError: 'reduce'"):
        namespace["fusion"].trace(*namespace["inputs"])  # the repro reproduces
    monkeypatch.undo()
    assert structure(namespace["fusion"].trace(*namespace["inputs"])) == structure(fused.trace(X))


def test_bug_in_a_composite_names_the_users_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ir_ops, "reduce", planted("def planted(*args):\n    raise ValueError\n"))

    def fn(x: pf.Tensor) -> pf.Tensor:
        return pf.softmax(x, 1)  # line: softmax

    with pytest.raises(pf.InternalError) as excinfo:
        pf.fuse(fn).trace(X)
    assert (excinfo.value.op, excinfo.value.where) == ("softmax", line_of("line: softmax"))
    assert excinfo.value.repro is not None
    assert "return pf.softmax(T0, 1)" in excinfo.value.repro


# ---- InternalError while preparing a call ------------------------------------------------------


def test_bug_preparing_a_call_is_an_internal_error(monkeypatch: pytest.MonkeyPatch) -> None:
    fused = pf.fuse(model)
    compiled = fused.compile(X)
    # Compiled.__call__ (runtime.launch) and FusedFunction.__call__ (runtime.calls) each key
    # their call.
    for module in (launch, calls):
        monkeypatch.setattr(module, "call_key", planted("def planted(arrays):\n    {}[0]\n"))
    array = np.ones((63, 64), np.float32)
    for call in (compiled, fused):
        with pytest.raises(pf.InternalError) as excinfo:
            call(array)
        error = excinfo.value
        assert isinstance(error.__cause__, KeyError)
        assert str(error).startswith(
            f"KeyError: 0 raised inside pyfuse while preparing a call of model\n  at {HERE}:"
        )
        assert error.repro is not None
        namespace = _exec_repro(error.repro)
        traced = namespace["fusion"].trace(*namespace["inputs"])
        assert structure(traced) == structure(fused.trace(X))


def test_errors_of_the_array_library_are_not_wrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    def allocator_out_of_memory(arrays: object) -> None:
        raise RuntimeError("CUDA out of memory")  # the user's library, not pyfuse

    monkeypatch.setattr(calls, "call_key", allocator_out_of_memory)
    with pytest.raises(RuntimeError, match="out of memory") as excinfo:
        pf.fuse(model)(np.ones((63, 64), np.float32))
    assert not isinstance(excinfo.value, pf.PyfuseError)


# ---- ScheduleError in the user's terms ---------------------------------------------------------


def test_schedule_error_naming_a_traced_tensor_starts_with_its_op(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        pipeline,
        "validate",
        planted(
            "def planted(fusion, reference=None):\n"
            "    raise ScheduleError('T1 is bound badly', op='validate')\n",
            ScheduleError=pf.ScheduleError,
        ),
    )
    with pytest.raises(pf.ScheduleError) as excinfo:
        pf.fuse(model).compile(X)
    error = excinfo.value
    assert str(error).splitlines() == [
        f"exp of f32[63, 64] at {line_of('line: exp')}: validate: T1 is bound badly",
        "    y = pf.exp(x)  # line: exp",
    ]
    assert (error.op, error.where) == ("exp", line_of("line: exp"))


def test_schedule_error_under_working_on_names_that_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        pipeline.inline,
        "inline_most",
        planted(
            "def planted(fusion):\n"
            "    with working_on(fusion.exprs()[-1]):\n"
            "        raise ScheduleError('a planted check failed')\n",
            ScheduleError=pf.ScheduleError,
            working_on=working_on,
        ),
    )
    with pytest.raises(pf.ScheduleError) as excinfo:
        pf.fuse(model).compile(X)
    assert str(excinfo.value).startswith(
        f"sum over dim 1 of f32[63, 64] at {line_of('line: sum')}: a planted check failed"
    )


def test_real_schedule_error_names_the_users_line_and_shapes_first() -> None:
    def total(x: pf.Tensor) -> pf.Tensor:
        return pf.sum(x)  # line: total

    try:
        pf.fuse(total).compile(pf.spec((1, 4096), pf.float32))
    except pf.ScheduleError as error:
        text = str(error)
        where = line_of("line: total")
        assert text.startswith(f"sum over dims 0, 1 of f32[1, 4096] at {where}: ")
        assert text.index(where) < text.index("T3")  # the passes' T-numbers come after
        assert (error.op, error.where) == ("sum", where)
    else:
        pytest.skip("a grid-wide reduction of one row compiles now")


def test_segmenter_error_is_reworded_once() -> None:
    def total(x: pf.Tensor) -> pf.Tensor:
        return pf.sum(x)  # line: empty

    try:
        pf.fuse(total).compile(pf.spec((0, 4), pf.float32))
    except pf.ScheduleError as error:
        where = line_of("line: empty")
        lines = str(error).splitlines()
        assert lines[0].startswith(f"sum over dims 0, 1 of f32[0, 4] at {where}: no scheduler")
        assert lines[1:] == ["    return pf.sum(x)  # line: empty"]
    else:
        pytest.skip("a sum over an empty tensor compiles now")


def test_working_on_tags_the_innermost_subject() -> None:
    with pytest.raises(KeyError) as excinfo, working_on("outer"), working_on("inner"):
        raise KeyError("x")
    assert excinfo.value.pyfuse_subject == "inner"  # type: ignore[attr-defined]


# ---- what a traced tensor cannot do: a FusionError naming the op and the user's line ----------

I32 = pf.spec((4, 6), pf.int32)


def _f_float(x: pf.Tensor) -> Any:
    return float(x)  # line: float


def _f_int(x: pf.Tensor) -> Any:
    return x * int(x)  # line: int


def _f_getitem(x: pf.Tensor) -> Any:
    return x[:, 7]  # line: getitem


def _f_squeeze(x: pf.Tensor) -> Any:
    return pf.squeeze(x, 3)  # line: squeeze


def _f_overflow(x: pf.Tensor) -> Any:
    return x + 2**40  # line: overflow


def _f_if(x: pf.Tensor) -> Any:
    if x.sum() > 0:  # line: if
        return x
    return -x


def _f_arctan(x: pf.Tensor) -> Any:
    return np.arctan(x)  # line: np.arctan


def _f_floordiv(x: pf.Tensor) -> Any:
    return (x > 0) // (x < 1)  # line: floordiv


def _f_round(x: pf.Tensor) -> Any:
    return pf.round(x, decimals=2)  # line: round


def _f_indices(x: pf.Tensor) -> Any:
    values, _indices = x.max((0, 1))  # line: indices
    return values


def _f_bitwise_float(x: pf.Tensor) -> Any:
    return x & 1  # line: bitwise


def _f_np_where(x: pf.Tensor) -> Any:
    return np.where(x > 0, x, 0)  # line: np.where


def _f_np_reduce(x: pf.Tensor) -> Any:
    return np.add.reduce(x)  # line: np.add.reduce


def _f_array_operand(x: pf.Tensor) -> Any:
    return x + np.ones(6, np.float32)  # line: array operand


def _f_iterate(x: pf.Tensor) -> Any:
    return [row for row in x]  # line: iterate


def _f_len_0d(x: pf.Tensor) -> Any:
    return x.sum() + len(x.sum())  # line: len


def _f_clamp(x: pf.Tensor) -> Any:
    return pf.clamp(x)  # line: clamp


X4 = pf.spec((4, 6), pf.float32)
USER_ERRORS: list[tuple[Callable[..., Any], pf.Spec, str, str, str]] = [
    (_f_float, X4, "float", "float", "has no value"),
    (_f_int, X4, "int", "int", "has no value"),
    (_f_getitem, X4, "getitem", "getitem", "index 7 is out of bounds for dimension 1"),
    (_f_squeeze, X4, "squeeze", "squeeze", "Dimension out of range"),
    (_f_overflow, I32, "overflow", "add", "cannot be converted to type int32 without overflow"),
    (_f_if, X4, "if", "bool", "no truth value"),
    (_f_arctan, X4, "np.arctan", "np.arctan", "np.arctan has no pyfuse op yet"),
    (_f_floordiv, X4, "floordiv", "floor_divide", "floor_divide of bool tensors"),
    (_f_round, X4, "round", "round", "round(decimals=2) is not supported"),
    (_f_indices, X4, "indices", "max", "takes one int dim for its indices"),
    (_f_bitwise_float, X4, "bitwise", "bitwise_and", "needs integer or bool operands"),
    (_f_np_where, X4, "np.where", "np.where", "use pf.where(condition, x, y)"),
    (_f_np_reduce, X4, "np.add.reduce", "np.add", "np.add.reduce is not supported"),
    (_f_array_operand, X4, "array operand", "add", "pass it to the fused function"),
    (_f_iterate, X4, "iterate", "iter", "not supported yet"),
    (_f_len_0d, X4, "len", "len", "len() of a 0-d tensor"),
    (_f_clamp, X4, "clamp", "clamp", "At least one of 'min' or 'max'"),
]


@pytest.mark.parametrize(
    ("fn", "spec", "marker", "op", "text"), USER_ERRORS, ids=[case[2] for case in USER_ERRORS]
)
def test_what_a_traced_tensor_cannot_do_is_a_fusion_error_at_the_users_line(
    fn: Callable[..., Any], spec: pf.Spec, marker: str, op: str, text: str
) -> None:
    with pytest.raises(pf.FusionError) as excinfo:
        pf.fuse(fn).trace(spec)
    error = excinfo.value
    assert (error.op, error.where) == (op, line_of(f"line: {marker}"))
    assert text in str(error)
    assert f"# line: {marker}" in str(error)  # the user's source text


def _returns_a_number(x: pf.Tensor) -> Any:  # line: returns a number
    return 3


def _returns_max_pair(x: pf.Tensor) -> Any:  # line: returns a pair
    return x.max(0)


@pytest.mark.parametrize(
    ("fn", "marker", "text"),
    [
        (_returns_a_number, "returns a number", "must return traced tensors"),
        (_returns_max_pair, "returns a pair", "return its .values"),
    ],
)
def test_returning_what_is_not_a_tensor_names_the_functions_line(
    fn: Callable[..., Any], marker: str, text: str
) -> None:
    with pytest.raises(pf.FusionError) as excinfo:
        pf.fuse(fn).trace(X4)
    assert (excinfo.value.op, excinfo.value.where) == ("fuse", line_of(f"line: {marker}"))
    assert text in str(excinfo.value)
