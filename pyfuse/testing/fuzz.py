"""The random-fusion fuzzer: ``python -m pyfuse.testing.fuzz``.

    python -m pyfuse.testing.fuzz --seed S (--count N | --minutes M) [--gpu] [--jobs J]
                                  [--shrink] [--out DIR] [--start I] [--timeout T]

Case ``i`` of seed ``S`` is ``generate(S, i)`` (:mod:`.generate`): a run is reproducible from
``(seed, index)`` alone, and ``--start I --count 1`` reruns one case. Cases run in ``J``
worker processes (spawned, so a CUDA fault or a segfault kills only its worker: the case is
reported as ``crash`` and the worker restarted; a case past ``--timeout`` seconds is
``timeout``). Without ``--gpu`` a worker runs :func:`~.run.run_program` (passes, PTX, ptxas,
kernel-IR interpreter); with it, :func:`~.run.run_program_gpu` (``FusedFunction.__call__`` on
torch CUDA tensors, twice). The run prints a one-line progress, a table of outcome classes and
every distinct failure signature (class, exception type, normalized message) with its first
case; ``--shrink`` shrinks each signature's first case (:mod:`.shrink`) and prints it as a
repro script; ``--out DIR`` writes ``failures.json`` (every failure, with its program) and
the repro scripts.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import multiprocessing
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from pyfuse.testing.generate import generate
from pyfuse.testing.program import Program, from_json, repro_script, to_json
from pyfuse.testing.run import CLASSES, Outcome

# A job for a worker: ("case", seed, index) or ("program", program as JSON); ("exit", code)
# and ("sleep", seconds) stand for a crashing and a hanging case in the pool's own tests.
Job = tuple[Any, ...]


def _execute(job: Job, gpu: bool) -> Outcome:
    from pyfuse.testing.run import run_program, run_program_gpu

    if job[0] == "exit":
        os._exit(int(job[1]))
    if job[0] == "sleep":
        time.sleep(float(job[1]))
        return Outcome("ok")
    if job[0] == "case":
        program = generate(int(job[1]), int(job[2]))
        data_seed = int(job[2])
    else:
        program = from_json(job[1])
        data_seed = 0
    return run_program_gpu(program, data_seed) if gpu else run_program(program, data_seed)


def _worker_main(connection: Connection, gpu: bool) -> None:
    """A worker's loop: one job in, one outcome out, until told to stop (None)."""
    import warnings

    warnings.simplefilter("ignore")  # split-K and layout advisories are not outcomes
    while True:
        job = connection.recv()
        if job is None:
            return
        outcome = _execute(job, gpu)
        connection.send(dataclasses.asdict(outcome))
        if gpu and outcome.cls == "gpu_error":
            return  # the CUDA context may be dead: the next job gets a fresh process


class Worker:
    """One spawned process that runs jobs one at a time and is restarted after a crash or a
    timeout (only this worker's own process is ever killed)."""

    def __init__(self, gpu: bool) -> None:
        self.gpu = gpu
        self.context = multiprocessing.get_context("spawn")
        self.process: Any = None
        self.connection: Connection | None = None

    def _start(self) -> None:
        parent, child = self.context.Pipe()
        self.process = self.context.Process(target=_worker_main, args=(child, self.gpu))
        self.process.start()
        child.close()
        self.connection = parent

    def _stop(self, kill: bool) -> None:
        if self.process is not None:
            if kill:
                self.process.kill()
            self.process.join(timeout=10)
        if self.connection is not None:
            self.connection.close()
        self.process = self.connection = None

    def run(self, job: Job, timeout: float) -> Outcome:
        if self.process is None or not self.process.is_alive():
            self._stop(kill=False)
            self._start()
        assert self.connection is not None
        self.connection.send(job)
        if not self.connection.poll(timeout):
            self._stop(kill=True)
            return Outcome("timeout", "worker", "", f"no result after {timeout:.0f} s")
        try:
            result = self.connection.recv()
        except (EOFError, OSError):
            code = self.process.exitcode if self.process is not None else None
            self._stop(kill=True)
            return Outcome("crash", "worker", "", f"the worker process died (exit code {code})")
        outcome = Outcome(**result)
        if self.gpu and outcome.cls == "gpu_error":
            # The worker exits after a GPU error (its CUDA context may be dead): wait for it,
            # so that the next job starts a fresh process instead of meeting a dying one.
            self._stop(kill=False)
        return outcome

    def close(self) -> None:
        if self.connection is not None and self.process is not None and self.process.is_alive():
            # It may die between the check and the send: then there is nothing to stop.
            with contextlib.suppress(OSError):
                self.connection.send(None)
        self._stop(kill=False)


@dataclasses.dataclass
class Failure:
    seed: int
    index: int
    outcome: Outcome
    shrunk: Program | None = None


@dataclasses.dataclass
class Report:
    counts: Counter[str] = dataclasses.field(default_factory=Counter)
    failures: list[Failure] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    def signatures(self) -> dict[str, list[Failure]]:
        grouped: dict[str, list[Failure]] = {}
        for failure in self.failures:
            grouped.setdefault(failure.outcome.signature(), []).append(failure)
        return dict(sorted(grouped.items(), key=lambda item: -len(item[1])))


def run_cases(
    seed: int,
    indices: Iterator[int],
    *,
    jobs: int,
    gpu: bool,
    timeout: float,
    deadline: float | None = None,
    progress: Callable[[Report, int], None] | None = None,
) -> Report:
    """Run cases ``(seed, i)`` for ``i`` in ``indices`` on ``jobs`` workers."""
    report = Report()
    lock = threading.Lock()
    start = time.monotonic()

    def next_index() -> int | None:
        with lock:
            if deadline is not None and time.monotonic() > deadline:
                return None
            return next(indices, None)

    def drive(worker: Worker) -> None:
        try:
            while (index := next_index()) is not None:
                outcome = worker.run(("case", seed, index), timeout)
                with lock:
                    report.counts[outcome.cls] += 1
                    if outcome.failed:
                        report.failures.append(Failure(seed, index, outcome))
                    if progress is not None:
                        progress(report, index)
        finally:
            worker.close()

    threads = [threading.Thread(target=drive, args=(Worker(gpu),)) for _ in range(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    report.seconds = time.monotonic() - start
    report.failures.sort(key=lambda failure: failure.index)
    return report


def shrink_failures(report: Report, *, gpu: bool, timeout: float, seconds_each: float) -> None:
    """Shrink the first case of every signature, on workers of the run's kind."""
    from pyfuse.testing.shrink import shrink

    firsts = [group[0] for group in report.signatures().values()]

    def shrink_one(failure: Failure, worker: Worker) -> None:
        program = generate(failure.seed, failure.index)
        wanted = failure.outcome

        def fails(candidate: Program) -> bool:
            outcome = worker.run(("program", to_json(candidate)), timeout)
            return outcome.cls == wanted.cls and outcome.error_type == wanted.error_type

        failure.shrunk = shrink(program, fails, max_seconds=seconds_each)

    def drive(queue: list[Failure], worker: Worker) -> None:
        try:
            while queue:
                shrink_one(queue.pop(), worker)
        finally:
            worker.close()

    jobs = max(1, min(len(firsts), os.cpu_count() or 1))
    queues: list[list[Failure]] = [firsts[i::jobs] for i in range(jobs)]
    threads = [threading.Thread(target=drive, args=(q, Worker(gpu))) for q in queues]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _repro(failure: Failure, gpu: bool) -> str:
    program = failure.shrunk or generate(failure.seed, failure.index)
    state = "shrunk from " if failure.shrunk is not None else ""
    header = [
        f"pyfuse fuzz {state}seed {failure.seed} index {failure.index}: {failure.outcome.cls}",
        f"first seen as: {failure.outcome.error_type} {failure.outcome.message}"[:200],
    ]
    return repro_script(program, header, gpu=gpu)


def print_summary(report: Report, gpu: bool, out: Callable[[str], None] = print) -> None:
    total = sum(report.counts.values())
    rate = total / report.seconds if report.seconds else 0.0
    out(f"\n{total} cases in {report.seconds:.0f} s ({rate:.1f}/s)")
    out(f"{'class':<20}{'count':>8}")
    for cls in CLASSES:
        if report.counts.get(cls):
            out(f"{cls:<20}{report.counts[cls]:>8}")
    groups = report.signatures()
    if not groups:
        return
    out(f"\n{len(groups)} distinct failure signatures:")
    for signature, group in groups.items():
        first = group[0]
        cases = ", ".join(f"{f.seed}:{f.index}" for f in group[:6])
        more = f" (+{len(group) - 6})" if len(group) > 6 else ""
        out(f"\n[{len(group)}x] {signature}")
        out(f"  cases {cases}{more}; first: {first.outcome.stage}: {first.outcome.message}")
        if first.shrunk is not None:
            out("  " + _repro(first, gpu).replace("\n", "\n  "))


def write_log(report: Report, directory: Path, gpu: bool) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    records = []
    for failure in report.failures:
        records.append(
            {
                "seed": failure.seed,
                "index": failure.index,
                "signature": failure.outcome.signature(),
                **dataclasses.asdict(failure.outcome),
                "program": to_json(generate(failure.seed, failure.index)),
                "shrunk": None if failure.shrunk is None else to_json(failure.shrunk),
            }
        )
    summary = {"counts": dict(report.counts), "seconds": report.seconds, "failures": records}
    (directory / "failures.json").write_text(json.dumps(summary, indent=1))
    for number, group in enumerate(report.signatures().values()):
        first = group[0]
        name = f"repro_{number:02d}_{first.outcome.cls}_{first.seed}_{first.index}.py"
        (directory / name).write_text(_repro(first, gpu))


def _progress_printer(total: int | None) -> Callable[[Report, int], None]:
    start = time.monotonic()
    shown = [0.0]
    interactive = sys.stderr.isatty()

    def show(report: Report, index: int) -> None:
        done = sum(report.counts.values())
        now = time.monotonic()
        # A terminal gets the line rewritten in place; a log gets one line every 30 s.
        if now - shown[0] < (0.2 if interactive else 30.0) and done != total:
            return
        shown[0] = now
        failed = sum(count for cls, count in report.counts.items() if cls not in CLASSES[:3])
        elapsed = time.monotonic() - start
        of = f"/{total}" if total is not None else ""
        line = (
            f"{done}{of} cases, {failed} failing, {len(report.signatures())} signatures, "
            f"{elapsed:.0f} s ({done / max(elapsed, 1e-9):.1f}/s)"
        )
        sys.stderr.write(f"\r{line}   " if interactive else f"{line}\n")
        sys.stderr.flush()

    return show


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyfuse.testing.fuzz", description=__doc__)
    parser.add_argument("--seed", type=int, default=0)
    amount = parser.add_mutually_exclusive_group(required=True)
    amount.add_argument("--count", type=int, help="number of cases")
    amount.add_argument("--minutes", type=float, help="run cases until this much time passed")
    parser.add_argument("--start", type=int, default=0, help="first case index")
    parser.add_argument("--gpu", action="store_true", help="run on the GPU through torch")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=None, help="seconds per case")
    parser.add_argument("--shrink", action="store_true", help="shrink each failure signature")
    parser.add_argument("--shrink-seconds", type=float, default=120.0)
    parser.add_argument("--out", type=Path, default=None, help="directory for the JSON log")
    args = parser.parse_args(argv)
    timeout = args.timeout or (60.0 if args.gpu else 180.0)
    if args.count is not None:
        indices: Iterator[int] = iter(range(args.start, args.start + args.count))
        deadline = None
    else:
        indices = itertools.count(args.start)
        deadline = time.monotonic() + 60.0 * args.minutes
    report = run_cases(
        args.seed,
        indices,
        jobs=max(1, args.jobs),
        gpu=args.gpu,
        timeout=timeout,
        deadline=deadline,
        progress=_progress_printer(args.count),
    )
    sys.stderr.write("\n")
    if args.shrink and report.failures:
        shrink_failures(report, gpu=args.gpu, timeout=timeout, seconds_each=args.shrink_seconds)
    print_summary(report, args.gpu)
    if args.out is not None:
        write_log(report, args.out, args.gpu)
        print(f"\nlog: {args.out / 'failures.json'}")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
