"""Named barriers as the simulator models them (``bar.sync`` / ``barrier.sync`` and
``bar.arrive``), from the PTX ISA's rules.

Guarantees: a barrier completes when its thread count has arrived (or, without a count,
every live thread of the CTA); ``bar.sync`` waits for that, ``bar.arrive`` only counts toward
it. Lanes of one scheduler group that name different barriers (each warpgroup its own) arrive
at each barrier as a group of their own. A thread's exit re-checks the barriers that count
every live thread.
"""

from __future__ import annotations

import numpy as np

from pyfuse.testing.ptx_sim.parse import Instr
from pyfuse.testing.ptx_sim.state import CTA, Group
from pyfuse.testing.ptx_sim.state import LaneView as LaneOps
from pyfuse.testing.ptx_sim.state import MachineView as Machine
from pyfuse.testing.ptx_sim.values import Array


def bar(machine: Machine, group: Group, instr: Instr, lanes: Array, ops: LaneOps) -> str:
    cta = group.cta
    ids = ops.read(instr.operands[0], "u32") if instr.operands else np.zeros(lanes.size)
    counts = ops.read(instr.operands[1], "u32") if len(instr.operands) > 1 else None
    waits = "arrive" not in instr.modifiers
    for barrier in np.unique(ids)[1:]:
        chosen = ids == barrier
        needed = None if counts is None else int(counts[chosen][0])
        if not waits:
            _arrive(machine, cta, int(barrier), needed, lanes[chosen], None)
            continue
        part = Group(cta, lanes[chosen], group.pc)
        group.lanes = np.setdiff1d(group.lanes, part.lanes)
        machine.groups.append(part)
        if _arrive(machine, cta, int(barrier), needed, part.lanes, part) == "ok":
            part.pc += 1
    chosen = ids == ids.min()
    needed = None if counts is None else int(counts[chosen][0])
    return _arrive(machine, cta, int(ids.min()), needed, lanes[chosen], group if waits else None)


def _arrive(
    machine: Machine,
    cta: CTA,
    barrier: int,
    needed: int | None,
    lanes: Array,
    waiter: Group | None,
) -> str:
    """Count ``lanes`` at ``barrier``; ``waiter`` (None for bar.arrive) blocks until done."""
    cta.bar_arrived.setdefault(barrier, set()).update(int(t) for t in lanes)
    cta.bar_needed[barrier] = needed
    if not _done(cta, barrier):
        if waiter is not None:
            waiter.wait = ("bar", barrier)
            return "blocked"
        return "ok"
    _release(machine, cta, barrier, waiter)
    return "ok"


def _done(cta: CTA, barrier: int) -> bool:
    """Its thread count arrived, or (no count) every live thread of the CTA."""
    arrived, needed = cta.bar_arrived.get(barrier, set()), cta.bar_needed.get(barrier)
    if needed is not None:
        return len(arrived) >= needed
    return set(np.flatnonzero(~cta.exited).tolist()) <= arrived


def _release(machine: Machine, cta: CTA, barrier: int, group: Group | None) -> None:
    cta.bar_arrived[barrier] = set()
    for other in machine.groups:
        if other is not group and other.cta is cta and other.wait == ("bar", barrier):
            other.wait = None
            other.pc += 1


def recheck_barriers(machine: Machine, cta: CTA) -> None:
    """After threads of ``cta`` exit: a barrier of every live thread may now be complete."""
    for barrier, arrived in list(cta.bar_arrived.items()):
        if arrived and _done(cta, barrier):
            _release(machine, cta, barrier, None)
