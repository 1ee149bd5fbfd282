"""Stress the rows-read-again plan (passes/reread_rows.py) on the fuzzer's programs.

    python3 tools/stress_reread.py SEED COUNT [START]

Every persistent row's register budget is set to 0 and the target has one SM, so every
normalization over two or more rows is read again per loop nest (at full size that takes
rows past the registers over 264 rows, which no fuzzer shape reaches). Each program runs as
``pyfuse.testing.run.run_program`` runs a fuzz case (compile, ptxas, the kernel interpreter
and the PTX simulator against the reference), in this process. Prints every failure, then
the outcome counts and how many programs took the plan.
"""

from __future__ import annotations

import collections
import dataclasses
import sys
import time
import warnings
from typing import Any


def main(argv: list[str]) -> int:
    seed, count = int(argv[0]), int(argv[1])
    start = int(argv[2]) if len(argv) > 2 else 0
    warnings.simplefilter("ignore")  # user warnings of matmul params the programs ask for
    import pyfuse.ir.target as target_module

    target_module.HOPPER = dataclasses.replace(target_module.HOPPER, sm_count=1)
    from pyfuse.passes import pipeline, row_registers
    from pyfuse.testing.generate import generate
    from pyfuse.testing.run import run_program

    row_registers.persistent_budget = lambda *args, **kwargs: 0  # type: ignore[assignment]
    took = [0]
    run = pipeline.run

    def watched(*args: Any, **kwargs: Any) -> pipeline.PipelineResult:
        result = run(*args, **kwargs)
        took[0] += any(stages.plan.params.get("reread") for stages in result.kernels)
        return result

    pipeline.run = watched  # type: ignore[assignment]
    outcomes: collections.Counter[str] = collections.Counter()
    began = time.time()
    for index in range(start, start + count):
        before = took[0]
        outcome = run_program(generate(seed, index), index)
        outcomes[outcome.cls] += 1
        if outcome.cls not in ("ok", "invalid", "compiled"):
            plan = "read again" if took[0] > before else "other plans"
            print(index, plan, outcome.cls, outcome.stage, outcome.message[:300], flush=True)
    print(dict(outcomes), f"programs that took the plan: {took[0]}", f"{time.time() - began:.0f} s")
    return 0 if set(outcomes) <= {"ok", "invalid", "compiled"} else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
