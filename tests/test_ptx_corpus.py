"""The golden-output corpus compiles, and compiling it twice gives byte-identical PTX (the
cache keys and the corpus diff rely on deterministic emission)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

import ptx_corpus


def test_corpus_is_deterministic(tmp_path: Path) -> None:
    first = ptx_corpus.compile_corpus()
    second = ptx_corpus.compile_corpus()
    assert first == second
    assert len(first) >= len(ptx_corpus.CORPUS)
    before, after = tmp_path / "a", tmp_path / "b"
    ptx_corpus.write(before)
    ptx_corpus.write(after)
    assert ptx_corpus.diff(before, after) == 0
