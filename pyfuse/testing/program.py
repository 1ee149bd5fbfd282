"""A fuzz case as data: input specs and op records, and the Python source they stand for.

A :class:`Program` is a list of values, each an :class:`Input` (a fusion argument: shape,
dtype, element strides) or an :class:`Op` (a Python expression over earlier values), plus the
values it returns. :func:`function_source` renders it as the body of a fused function and
:func:`build_function` executes exactly that source, so the function the fuzzer traces and the
repro script it prints (:func:`repro_script`) are one text: what fails in the fuzzer fails in
the script.
"""

from __future__ import annotations

import linecache
from collections.abc import Callable, Sequence
from typing import Any

import numpy

import pyfuse as pf
from pyfuse.ir.dtypes import DType
from pyfuse.ir.records import record
from pyfuse.runtime.spec import contiguous_strides

# Short names used in records (and JSON logs) -> the dtype and how a script spells it.
DTYPES: dict[str, DType] = {
    "f32": pf.float32,
    "bf16": pf.bfloat16,
    "f16": pf.float16,
    "i32": pf.int32,
    "bool": pf.bool,
    "i64": pf.int64,
    "i8": pf.int8,
    "u8": pf.uint8,
    "i16": pf.int16,
    "f64": pf.float64,
}
DTYPE_SOURCE: dict[str, str] = {
    "f32": "pf.float32",
    "bf16": "pf.bfloat16",
    "f16": "pf.float16",
    "i32": "pf.int32",
    "bool": "pf.bool",
    "i64": "pf.int64",
    "i8": "pf.int8",
    "u8": "pf.uint8",
    "i16": "pf.int16",
    "f64": "pf.float64",
}


def short_name(dtype: DType) -> str:
    """The record name of ``dtype`` (``"f32"`` for ``pf.float32``)."""
    for name, candidate in DTYPES.items():
        if candidate == dtype:
            return name
    raise ValueError(f"no record name for dtype {dtype.name}")


@record(frozen=True)
class Input:
    """A fusion argument; ``strides`` in elements, None for row-major."""

    shape: tuple[int, ...]
    dtype: str
    strides: tuple[int, ...] | None = None

    def spec(self) -> pf.Spec:
        return pf.spec(self.shape, DTYPES[self.dtype], self.strides)

    @property
    def effective_strides(self) -> tuple[int, ...]:
        return self.strides if self.strides is not None else contiguous_strides(self.shape)

    def source(self) -> str:
        strides = "" if self.strides is None else f", strides={self.strides}"
        return f"pf.spec({self.shape}, {DTYPE_SOURCE[self.dtype]}{strides})"


@record(frozen=True)
class Op:
    """``template`` is a Python expression; ``{0}``, ``{1}``... are the values ``args`` names.

    ``name`` is the op's family (``"add"``, ``"sum"``, ``"matmul"``...), for coverage counts and
    for tests that plant failures. ``flips``: the op is discontinuous in a computed float (a
    comparison, a cast to an integer): a last-bit difference upstream may flip its result, so
    outputs that depend on it are compared leniently."""

    name: str
    template: str
    args: tuple[int, ...]
    flips: bool = False

    def expression(self) -> str:
        return self.template.format(*(f"v{arg}" for arg in self.args))


Value = Input | Op

# The matmul schedules a program may ask for besides the heuristic's, by the name records,
# JSON logs and repro scripts use: each kernel path the heuristic does not take by default.
SCHEDULES: dict[str, pf.MatmulParams] = {
    "pingpong": pf.MatmulParams(pingpong=True),
    "epilogue_warps": pf.MatmulParams(epilogue_warps=True),
    "register_stores": pf.MatmulParams(smem_epilogue=False),
    "cluster_2x1": pf.MatmulParams(cluster_m=2, persistent=True),
    "tiles_64x64": pf.MatmulParams(tile_m=64, tile_n=64, persistent=True),
    "stream_k": pf.MatmulParams(tile_m=64, tile_n=64, stream_k=True),
}


@record(frozen=True)
class Program:
    """Values in order (an op reads only earlier ones), the indices of the returned ones, and
    the matmul schedule (a :data:`SCHEDULES` name; "" for the heuristic's)."""

    values: tuple[Value, ...]
    outputs: tuple[int, ...]
    schedule: str = ""

    @property
    def matmul(self) -> pf.MatmulParams | None:
        """The ``MatmulParams`` of the schedule; None for the heuristic's."""
        return SCHEDULES[self.schedule] if self.schedule else None

    @property
    def inputs(self) -> list[Input]:
        return [value for value in self.values if isinstance(value, Input)]

    def input_indices(self) -> list[int]:
        return [index for index, value in enumerate(self.values) if isinstance(value, Input)]

    def ops(self) -> list[Op]:
        return [value for value in self.values if isinstance(value, Op)]

    def specs(self) -> list[pf.Spec]:
        return [value.spec() for value in self.inputs]

    def ancestors(self, index: int) -> set[int]:
        """``index`` and every value it is computed from."""
        seen = {index}
        stack = [index]
        while stack:
            value = self.values[stack.pop()]
            if isinstance(value, Op):
                for arg in value.args:
                    if arg not in seen:
                        seen.add(arg)
                        stack.append(arg)
        return seen

    def lenient_outputs(self) -> list[bool]:
        """Per output: whether an op that may flip on a last-bit difference feeds it."""
        flags = []
        for output in self.outputs:
            flags.append(
                any(
                    isinstance(self.values[i], Op) and self.values[i].flips  # type: ignore[union-attr]
                    for i in self.ancestors(output)
                )
            )
        return flags


def function_source(program: Program, name: str = "fusion") -> str:
    """The fused function's Python source: one line per op, returning the outputs."""
    params = ", ".join(f"v{index}" for index in program.input_indices())
    lines = [f"def {name}({params}):"]
    for index, value in enumerate(program.values):
        if isinstance(value, Op):
            lines.append(f"    v{index} = {value.expression()}")
    returned = ", ".join(f"v{index}" for index in program.outputs)
    lines.append(f"    return {returned}")
    return "\n".join(lines) + "\n"


def specs_source(program: Program) -> str:
    """``SPECS = [...]``: the inputs as ``pf.spec`` calls."""
    lines = ["SPECS = ["]
    lines.extend(f"    {value.source()}," for value in program.inputs)
    lines.append("]")
    return "\n".join(lines) + "\n"


_builds = 0


def build_function(program: Program, name: str = "fusion") -> Callable[..., Any]:
    """Execute :func:`function_source`; its lines are registered with ``linecache`` so that
    tracebacks and pyfuse's error locations show them."""
    global _builds
    _builds += 1
    source = function_source(program, name)
    filename = f"<pyfuse-fuzz-{name}-{_builds}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    # Programs use pyfuse ops, and NumPy ufuncs on traced tensors (which trace pyfuse ops).
    namespace: dict[str, Any] = {"pf": pf, "np": numpy}
    exec(compile(source, filename, "exec"), namespace)
    function: Callable[..., Any] = namespace[name]
    return function


def repro_script(program: Program, header: Sequence[str] = (), gpu: bool = False) -> str:
    """A standalone script that rebuilds the fusion and runs it as the fuzzer did."""
    comment = "".join(f"# {line}\n" for line in header)
    runner = "run_function_gpu" if gpu else "run_function"
    matmul = f", matmul={program.matmul!r}" if program.matmul is not None else ""
    return (
        f"{comment}import numpy as np\n\nimport pyfuse as pf\n"
        f"from pyfuse import MatmulParams\n"
        f"from pyfuse.testing.run import {runner}\n\n\n"
        f"{function_source(program)}\n\n"
        f"{specs_source(program)}\n"
        'if __name__ == "__main__":\n'
        f"    print({runner}(fusion, SPECS, lenient={program.lenient_outputs()}{matmul}))\n"
    )


def to_json(program: Program) -> dict[str, Any]:
    """A JSON-able description (what the failure log stores)."""
    values: list[dict[str, Any]] = []
    for value in program.values:
        if isinstance(value, Input):
            values.append(
                {"input": list(value.shape), "dtype": value.dtype, "strides": value.strides}
            )
        else:
            values.append(
                {
                    "op": value.name,
                    "template": value.template,
                    "args": list(value.args),
                    "flips": value.flips,
                }
            )
    return {"values": values, "outputs": list(program.outputs), "schedule": program.schedule}


def from_json(data: dict[str, Any]) -> Program:
    values: list[Value] = []
    for item in data["values"]:
        if "input" in item:
            strides = item.get("strides")
            values.append(
                Input(
                    tuple(item["input"]),
                    item["dtype"],
                    None if strides is None else tuple(strides),
                )
            )
        else:
            values.append(
                Op(item["op"], item["template"], tuple(item["args"]), bool(item.get("flips")))
            )
    schedule = data.get("schedule", "")
    if schedule and schedule not in SCHEDULES:
        raise ValueError(f"unknown matmul schedule {schedule!r}: one of {sorted(SCHEDULES)}")
    return Program(tuple(values), tuple(data["outputs"]), schedule)
