"""The frontend's modules as the style guide wants them: imports run one way (no circle, the
Tensor under the ops), each module says what it holds, and none grows past ~600 lines."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

FRONTEND = Path(__file__).resolve().parents[2] / "pyfuse" / "frontend"
MODULES = sorted(path.stem for path in FRONTEND.glob("*.py") if path.stem != "__init__")
MAX_LINES = 600  # docs/style.md: "Files past ~600 lines ... split by concern"


def _frontend_imports(module: str) -> set[str]:
    """The frontend modules ``module`` imports, function-local imports included."""
    tree = ast.parse((FRONTEND / f"{module}.py").read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "pyfuse.frontend":
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("pyfuse.frontend."):
                imported.add(node.module.removeprefix("pyfuse.frontend."))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("pyfuse.frontend."):
                    imported.add(alias.name.removeprefix("pyfuse.frontend."))
    return imported & set(MODULES)


def test_frontend_imports_run_one_way() -> None:
    graph = {module: _frontend_imports(module) for module in MODULES}
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as error:
        pytest.fail(f"an import circle in pyfuse/frontend: {error.args[1]}")
    # The Tensor stands under every op module: its operators reach the ops by name.
    below_the_ops = ("arguments", "location", "tensor_methods", "tensor", "shape_ops")
    for module in below_the_ops:
        assert order.index(module) < order.index("ops"), order
    assert "ops" not in graph["tensor"] and "shape_ops" not in graph["tensor"]


@pytest.mark.parametrize("module", MODULES)
def test_each_frontend_module_says_what_it_holds_and_stays_short(module: str) -> None:
    source = (FRONTEND / f"{module}.py").read_text()
    assert ast.get_docstring(ast.parse(source)), f"pyfuse/frontend/{module}.py has no docstring"
    lines = len(source.splitlines())
    assert lines <= MAX_LINES, f"pyfuse/frontend/{module}.py has {lines} lines"
