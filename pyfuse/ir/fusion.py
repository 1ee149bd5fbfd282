"""The :class:`Fusion`: a graph of exprs with inputs and outputs.

A fusion owns the name counters of the values made inside it (``with fusion:``), so
its printout is stable. Passes rewrite it in place or on a :meth:`Fusion.clone`.
"""

from __future__ import annotations

import contextlib
import copy
from types import TracebackType

from pyfuse.ir.exprs import Expr
from pyfuse.ir.naming import Namer, naming
from pyfuse.ir.tensor import MemoryType, TensorView, Val


class Fusion:
    """Inputs, outputs and every expr between them: ``fusion = fused.trace(x)``."""

    def __init__(self, name: str = "fusion") -> None:
        self.name = name
        self.inputs: list[TensorView] = []
        self.outputs: list[TensorView] = []
        self.namer = Namer()
        self._naming: list[contextlib.AbstractContextManager[None]] = []

    # -- building -----------------------------------------------------------------------------
    def __enter__(self) -> Fusion:
        manager = naming(self.namer)
        manager.__enter__()
        self._naming.append(manager)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._naming.pop().__exit__(exc_type, exc, traceback)

    def add_input(self, tv: TensorView) -> TensorView:
        if tv.definition is not None:
            raise ValueError(f"T{tv.name} has a definition and cannot be a fusion input")
        tv.memory_type = MemoryType.GLOBAL
        self.inputs.append(tv)
        return tv

    def add_output(self, tv: TensorView) -> TensorView:
        tv.memory_type = MemoryType.GLOBAL
        self.outputs.append(tv)
        return tv

    # -- queries ------------------------------------------------------------------------------
    def exprs(self) -> list[Expr]:
        """Every expr the outputs depend on, each after its producers (a topological order)."""
        order: list[Expr] = []
        visited: set[int] = set()
        for out in self.outputs:
            stack: list[tuple[Val, bool]] = [(out, False)]
            while stack:
                val, expanded = stack.pop()
                expr = val.definition
                if expr is None or id(expr) in visited:
                    continue
                if expanded:
                    visited.add(id(expr))
                    order.append(expr)
                    continue
                stack.append((val, True))
                for inp in reversed(expr.inputs):
                    if inp.definition is not None and id(inp.definition) not in visited:
                        stack.append((inp, False))
        return order

    def tensors(self) -> list[TensorView]:
        """Inputs, then every tensor an expr produces, in topological order."""
        seen: dict[int, TensorView] = {id(tv): tv for tv in self.inputs}
        for expr in self.exprs():
            for val in (*expr.inputs, *expr.outputs):
                if isinstance(val, TensorView):
                    seen.setdefault(id(val), val)
        return list(seen.values())

    def uses_in_fusion(self, val: Val) -> list[Expr]:
        """``val``'s uses that the outputs depend on (dead uses left by rewrites are skipped)."""
        live = {id(expr) for expr in self.exprs()}
        return [use for use in val.uses if id(use) in live]

    def is_output(self, tv: TensorView) -> bool:
        return any(out is tv for out in self.outputs)

    def is_input(self, tv: TensorView) -> bool:
        return any(inp is tv for inp in self.inputs)

    # -- rewriting ----------------------------------------------------------------------------
    def replace_uses(self, old: Val, new: Val) -> None:
        """Make every use of ``old`` (and every output slot holding it) use ``new``."""
        for use in list(old.uses):
            use.replace_input(old, new)
        for index, out in enumerate(self.outputs):
            if out is old:
                assert isinstance(new, TensorView)  # outputs are tensors
                self.outputs[index] = new
                new.memory_type = MemoryType.GLOBAL

    def clone(self) -> tuple[Fusion, dict[int, object]]:
        """A deep copy and the map ``id(original object) -> copy`` (names are kept)."""
        memo: dict[int, object] = {}
        cloned = copy.deepcopy(self, memo)
        return cloned, memo

    def __str__(self) -> str:
        from pyfuse.ir.printer import fusion_to_str

        return fusion_to_str(self)
