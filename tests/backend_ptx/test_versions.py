"""Each instruction's declared minimum PTX version is enough for ptxas.

``PtxModule.render`` refuses a header older than an instruction's ``min_version``;
this checks the other direction: at that version (never below 8.0, the first one
that knows sm_90a) ptxas accepts the instruction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ptx_probes
import pytest

from pyfuse.backend_ptx.emitter import PtxModule
from pyfuse.backend_ptx.instructions import control
from pyfuse.backend_ptx.operands import Instr

SM90A_FIRST_VERSION = (8, 0)


@pytest.mark.parametrize(
    ("probe", "directives"),
    ptx_probes.ALL_PROBES,
    ids=[probe.__name__ for probe, _ in ptx_probes.ALL_PROBES],
)
def test_instructions_assemble_at_their_minimum_version(
    probe: Callable[..., Any], directives: Any, assemble_clean: Callable[[str], Any]
) -> None:
    def build(version: tuple[int, int], keep: Callable[[Instr], bool]) -> str:
        module = PtxModule(version=version)
        kb = module.kernel("probe", directives)
        lines = probe(kb)
        kb.emit(line for line in lines if not isinstance(line, Instr) or keep(line))
        kb.emit(control.ret())
        return module.render()

    # Everything that claims 8.0 or less, together at 8.0 ...
    assemble_clean(build(SM90A_FIRST_VERSION, lambda i: i.min_version <= SM90A_FIRST_VERSION))
    # ... and each newer one alone at exactly its claimed version.
    newer = sorted({i.min_version for i in _instructions(probe, directives)} - {(0, 0)})
    for version in (v for v in newer if v > SM90A_FIRST_VERSION):
        assemble_clean(build(version, lambda i, v=version: i.min_version == v))  # type: ignore[misc]


def _instructions(probe: Callable[..., Any], directives: Any) -> list[Instr]:
    kb = PtxModule().kernel("scratch", directives)
    return [line for line in probe(kb) if isinstance(line, Instr)]
