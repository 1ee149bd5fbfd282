"""benchmarks/reread_rows.py without a GPU: each plan's patch makes the compiler pick the plan
it names (checked on compiled kernels, one process per plan, as the benchmark runs them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"

PROBE = """
import json, sys
import reread_rows
reread_rows._apply(sys.argv[1])
import pyfuse as pf
vocab = pf.fuse(lambda x: pf.log_softmax(x, -1)).compile(pf.spec((8192, 50257), pf.bfloat16))
weight = pf.spec((4096,), pf.bfloat16)
norm = pf.fuse(lambda x, w, b: pf.layer_norm(x, w, b)).compile(
    pf.spec((16384, 4096), pf.bfloat16), weight, weight
)
print(json.dumps({
    "vocab": [k.params for k in vocab.kernels],
    "norm": [k.params for k in norm.kernels],
    "two_blocks": ".minnctapersm 2" in vocab.kernels[0].ptx,
}))
"""


def _probe(plan: str) -> dict[str, object]:
    env = dict(os.environ, PYFUSE_DISABLE_CACHE="1")
    done = subprocess.run(
        [sys.executable, "-c", PROBE, plan],
        cwd=BENCHMARKS,
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("plan", "vocab_kernels", "norm_reread", "two_blocks"),
    [
        ("default", 1, False, False),
        ("recompute", 3, False, False),
        ("reread", 1, True, False),
        ("reread, 2 blocks", 1, True, True),
    ],
)
def test_each_plan_is_the_one_compiled(
    plan: str, vocab_kernels: int, norm_reread: bool, two_blocks: bool
) -> None:
    seen = _probe(plan)
    vocab = seen["vocab"]
    norm = seen["norm"]
    assert isinstance(vocab, list) and isinstance(norm, list)
    assert len(vocab) == vocab_kernels, vocab
    assert bool(norm[0].get("reread")) == norm_reread, norm
    assert seen["two_blocks"] == two_blocks
