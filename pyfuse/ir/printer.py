"""Text form of the IR: one line per expr, each tensor with its domain.

Math IR (``Fusion.__str__``)::

    Inputs:
      T0_g_bf16[iS0{8}, iS1{4}]
    Outputs:
      T3_g_bf16[iS6{8}, iS7{6}]
    T2_l_f32[iS4{8}, iS5{6}, rS8{4}] = linear(T0, T1)
    T3_g_bf16[iS6{8}, iS7{6}] = cast(T2, to=bf16)

Scheduled IR (:func:`scheduled_to_str`) prints loop domains, inline positions and each
tensor's transforms from logical to loop. The output is stable: tests compare it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pyfuse.ir.exprs import Expr
from pyfuse.ir.tensor import Scalar, TensorView, Val, tensor_transforms


class Fusion(Protocol):
    """What the printer reads of a :class:`pyfuse.ir.fusion.Fusion` (whose ``__str__`` calls
    this module: naming the class here would tie the two modules in a circle)."""

    @property
    def inputs(self) -> Sequence[TensorView]: ...

    @property
    def outputs(self) -> Sequence[TensorView]: ...

    def exprs(self) -> list[Expr]: ...


def operand_str(val: Val) -> str:
    if isinstance(val, TensorView):
        return f"T{val.name}"
    if isinstance(val, Scalar):
        return str(val)
    return "?"


def expr_to_str(expr: Expr, *, loop: bool = False) -> str:
    out = expr.output
    domain = out.loop if loop else out.logical
    args = [operand_str(inp) for inp in expr.inputs]
    attributes = expr.attributes()
    if attributes:
        args.append(attributes)
    line = f"{out.domain_str(domain)} = {expr.op_name}({', '.join(args)})"
    if loop and out.inline_position:
        line += f" ca_pos({out.inline_position})"
    return line


def fusion_to_str(fusion: Fusion) -> str:
    lines = ["Inputs:"]
    for tv in fusion.inputs:
        line = f"  {tv}"
        if tv.allocation is not None:
            flags = ["-" if f is None else ("t" if f else "f") for f in tv.maybe_contiguity]
            allocation = ", ".join(str(axis) for axis in tv.allocation)
            line += f" allocation[{allocation}] contiguity({' '.join(flags)})"
        lines.append(line)
    lines.append("Outputs:")
    lines += [f"  {tv}" for tv in fusion.outputs]
    lines += [expr_to_str(expr) for expr in fusion.exprs()]
    return "\n".join(lines)


def transforms_to_str(tv: TensorView, indent: str = "    ") -> list[str]:
    """The steps from ``tv``'s logical domain to its loop domain, one per line."""
    lines = []
    if tv.root is not None:
        lines.append(f"{indent}root: [{', '.join(str(axis) for axis in tv.root)}]")
    if tv.loop != tv.logical or tv.history:
        lines.append(f"{indent}logical: [{', '.join(str(axis) for axis in tv.logical)}]")
    if tv.allocation is not None:
        flags = ["-" if flag is None else ("t" if flag else "f") for flag in tv.maybe_contiguity]
        lines.append(
            f"{indent}allocation: [{', '.join(str(axis) for axis in tv.allocation)}]"
            f" contiguity: {' '.join(flags)}"
        )
    if tv.alias_of is not None:
        lines.append(f"{indent}aliases: T{tv.alias_of.name}")
    lines += [f"{indent}{step.describe()}" for step in tv.history]
    if tv.allocation is not None:
        # Steps reaching the allocation domain only (a swizzled shared-memory layout).
        recorded = {id(step) for step in tv.history}
        lines += [
            f"{indent}allocation {step.describe()}"
            for step in tensor_transforms(tv)
            if id(step) not in recorded
            and (tv.root is None or not _between_root_and_logical(step, tv))
        ]
    return lines


def _between_root_and_logical(step: object, tv: TensorView) -> bool:
    """A reshape's own root-to-logical step (printed by the root line, not as allocation)."""
    logical = {id(axis) for axis in tv.logical}
    outputs = getattr(step, "outputs", ())
    return any(id(axis) in logical for axis in outputs)


def scheduled_to_str(fusion: Fusion) -> str:
    """Loop domains, inline positions and transforms of every tensor."""
    lines = ["Inputs:"]
    for tv in fusion.inputs:
        lines.append(f"  {tv.domain_str()}")
        lines += transforms_to_str(tv)
    lines.append("Outputs:")
    lines += [f"  T{tv.name}" for tv in fusion.outputs]
    for expr in fusion.exprs():
        lines.append(expr_to_str(expr, loop=True))
        lines += transforms_to_str(expr.output)
    return "\n".join(lines)
