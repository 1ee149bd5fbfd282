"""Fixtures for the PTX backend tests: ptxas assembly that skips or fails by policy."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from check_utils import require_ptxas

from pyfuse.backend_ptx import ptxas
from pyfuse.backend_ptx.emitter import Directives, KernelBuilder, PtxModule
from pyfuse.backend_ptx.instructions import control
from pyfuse.backend_ptx.operands import Line

Assemble = Callable[[str], ptxas.PtxasResult]


@pytest.fixture
def assemble_clean() -> Assemble:
    """Assemble with ptxas -arch=sm_90a and insist on 0 spills, 0 lmem, no advisories."""
    require_ptxas()

    def run(ptx: str) -> ptxas.PtxasResult:
        result = ptxas.assemble(ptx)
        assert result.problems() == [], "\n".join(result.problems())
        return result

    return run


AssembleLines = Callable[..., ptxas.PtxasResult]


@pytest.fixture
def assemble_lines(assemble_clean: Assemble) -> AssembleLines:
    """Wrap instructions into a kernel (after a setup callback) and assemble it cleanly."""

    def run(
        build: Callable[[KernelBuilder], list[Line]],
        *,
        directives: Directives | None = None,
    ) -> ptxas.PtxasResult:
        module = PtxModule()
        kb = module.kernel("probe", directives)
        kb.emit(build(kb))
        kb.emit(control.ret())
        return assemble_clean(module.render())

    return run
