"""Control flow and synchronization: branches, CTA/named/cluster barriers, fences, exit.

Named barriers (``bar.sync id, count``) let a subset of warps synchronize, which is
how warp-specialized kernels hand tiles between producer and consumer warpgroups:
the id is 0..15 and the thread count a multiple of 32 (ptxas rejects others).
``bar.sync 0`` without a count is ``__syncthreads``.
"""

from __future__ import annotations

from pyfuse.backend_ptx.operands import (
    Instr,
    Label,
    Operand,
    Reg,
    check_choice,
    check_int,
    fmt_operand,
)
from pyfuse.ir.hopper import SM90

_SCOPES = ("cta", "cluster", "gpu", "sys")
_FENCE_SEMS = ("sc", "acq_rel")


def bra(target: Label, *, uni: bool = False) -> Instr:
    """Branch; ``uni=True`` promises the branch is warp-uniform (no divergence)."""
    if not isinstance(target, Label):
        raise ValueError(
            f"bra: target must be a Label from KernelBuilder.new_label, got {target!r}"
        )
    return Instr(f"bra{'.uni' if uni else ''} {target.name}")


def _barrier_operand(value: Operand, what: str, low: int, high: int) -> str:
    if isinstance(value, Reg):
        return fmt_operand(value, "u32", what)
    return str(check_int(value, what, low, high))


def _check_count(count: Operand, what: str) -> str:
    warp = SM90.warp_size
    if isinstance(count, int) and not isinstance(count, bool) and count % warp:
        raise ValueError(f"{what} must be a multiple of {warp} (whole warps), got {count}")
    return _barrier_operand(count, what, warp, SM90.max_threads_per_block)


def bar_sync(barrier_id: Operand = 0, count: Operand | None = None) -> Instr:
    """Wait at barrier ``barrier_id`` until ``count`` threads (default: the CTA) arrive."""
    last_id = SM90.named_barriers - 1
    text = f"bar.sync {_barrier_operand(barrier_id, 'bar.sync: id', 0, last_id)}"
    if count is not None:
        text += f", {_check_count(count, 'bar.sync: thread count')}"
    return Instr(text)


def bar_arrive(barrier_id: Operand, count: Operand) -> Instr:
    """Signal barrier ``barrier_id`` without waiting; producers pair this with bar_sync."""
    bid = _barrier_operand(barrier_id, "bar.arrive: id", 0, SM90.named_barriers - 1)
    return Instr(f"bar.arrive {bid}, {_check_count(count, 'bar.arrive: thread count')}")


def barrier_cluster_arrive(*, sem: str | None = "release", aligned: bool = True) -> Instr:
    """First half of a cluster barrier; ``release`` publishes this CTA's smem writes."""
    mods = ["barrier", "cluster", "arrive"]
    if sem is not None:
        mods.append(check_choice(sem, ("release", "relaxed"), "barrier.cluster.arrive: sem"))
    if aligned:
        mods.append("aligned")
    return Instr(".".join(mods))


def barrier_cluster_wait(*, acquire: bool = True, aligned: bool = True) -> Instr:
    mods = ["barrier", "cluster", "wait"]
    if acquire:
        mods.append("acquire")
    if aligned:
        mods.append("aligned")
    return Instr(".".join(mods))


def ret() -> Instr:
    return Instr("ret")


def exit_() -> Instr:
    """Terminate this thread (``exit``; underscore because ``exit`` is a builtin)."""
    return Instr("exit")


def trap() -> Instr:
    return Instr("trap")


def membar(level: str) -> Instr:
    """Legacy fence spelling; prefer :func:`fence` in new code."""
    check_choice(level, ("cta", "gl", "sys"), "membar: level")
    return Instr(f"membar.{level}")


def fence(scope: str, *, sem: str = "acq_rel") -> Instr:
    """Memory-ordering fence for generic-proxy accesses at ``scope``."""
    check_choice(sem, _FENCE_SEMS, "fence: sem")
    check_choice(scope, _SCOPES, "fence: scope")
    return Instr(f"fence.{sem}.{scope}")


def griddepcontrol_wait() -> Instr:
    """PDL: block until the prerequisite grid's memory is visible (sm_90)."""
    return Instr("griddepcontrol.wait", min_version=(7, 8))


def griddepcontrol_launch_dependents() -> Instr:
    """PDL: allow the dependent grid to start launching (sm_90)."""
    return Instr("griddepcontrol.launch_dependents", min_version=(7, 8))


def nanosleep(ns: Operand) -> Instr:
    return Instr(f"nanosleep.u32 {_barrier_operand(ns, 'nanosleep: ns', 0, 1_000_000)}")
