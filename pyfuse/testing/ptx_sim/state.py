"""The simulated machine's state: global memory, CTAs (registers, shared memory and its shadow
counts, mbarriers, warpgroups' wgmma groups, threads' bulk groups), thread groups, and the
views of the machine and of an instruction's lanes that the instruction units use
(:mod:`.units`).

Expects nothing; holds no behavior beyond bookkeeping. Guarantees: global buffers sit at fake
256-byte aligned addresses with gaps, so an access past one is outside every buffer; a CTA's
never-written shared bytes hold 0xFF (NaN as floats); :class:`Where` formats a location only
when a message is built.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from pyfuse.ir.hopper import SM90
from pyfuse.testing.ptx_sim.parse import Instr, Operand
from pyfuse.testing.ptx_sim.tensor_core import Mbarrier, SimulationError, TensorMap
from pyfuse.testing.ptx_sim.values import Array

PARAM_BASE = 0x10000  # tensor maps live in the param space at 128-byte slots from here
RANK_SHIFT = 24  # a shared::cluster address carries (rank + 1) above this bit
WARPGROUP = SM90.warpgroup_threads  # threads issuing one wgmma


class GlobalMemory:
    """Device buffers at fake addresses (256-byte aligned, with gaps between them)."""

    def __init__(self) -> None:
        self.bases: list[int] = []
        self.arrays: list[Array] = []
        self.writable: list[bool] = []
        self.names: list[str] = []
        self._next = 0x7F0000000000

    def add(self, array: Array, name: str, writable: bool) -> int:
        flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        base = self._next
        self._next += (flat.size + 511) // 256 * 256 + 256
        self.bases.append(base)
        self.arrays.append(flat)
        self.writable.append(writable)
        self.names.append(name)
        return base

    def _locate(
        self, addresses: Array, size: int, store: bool, where: object
    ) -> tuple[Array, Array]:
        addresses = addresses.astype(np.int64)
        index = np.searchsorted(np.array(self.bases, dtype=np.int64), addresses, side="right") - 1
        for i in np.unique(index):
            chosen = index == i
            ok = i >= 0
            if ok:
                offsets = addresses[chosen] - self.bases[i]
                ok = bool((offsets >= 0).all() and (offsets + size <= self.arrays[i].size).all())
            if not ok:
                bad = int(addresses[chosen][0])
                raise SimulationError(
                    f"{where}: a {size}-byte access at {bad:#x} is outside every buffer"
                )
            if store and not self.writable[i]:
                raise SimulationError(f"{where}: a store into the read-only buffer {self.names[i]}")
        return index, addresses - np.array(self.bases, dtype=np.int64)[index]

    def read(self, addresses: Array, size: int, where: object = "load") -> Array:
        index, offsets = self._locate(addresses, size, False, where)
        out = np.empty((addresses.size, size), dtype=np.uint8)
        span = np.arange(size)
        for i in np.unique(index):
            chosen = index == i
            out[chosen] = self.arrays[i][offsets[chosen][:, None] + span]
        return out

    def write(self, addresses: Array, data: Array, where: object) -> None:
        size = data.shape[1]
        index, offsets = self._locate(addresses, size, True, where)
        span = np.arange(size)
        for i in np.unique(index):
            chosen = index == i
            self.arrays[i][offsets[chosen][:, None] + span] = data[chosen]


@dataclass(eq=False)
class Group:
    cta: CTA
    lanes: Array  # thread indices in the CTA, sorted
    pc: int
    wait: tuple[Any, ...] | None = None  # why it is blocked: ("mbarrier", key), ("bar", ...)


@dataclass(eq=False)
class PendingMma:
    instr: Instr
    dest: tuple[str, ...]
    a: int
    b: int
    accumulate: bool
    scale_a: int
    scale_b: int
    a_k_major: bool
    b_k_major: bool
    reads: Array  # shared byte addresses both operands read


@dataclass
class WarpgroupState:
    fenced: bool = False
    touched_since_fence: bool = True
    accumulators: set[str] = field(default_factory=set)
    open: list[PendingMma] = field(default_factory=list)
    committed: deque[list[PendingMma]] = field(default_factory=deque)

    @property
    def in_flight(self) -> set[str]:
        regs = {r for mma in self.open for r in mma.dest}
        for group in self.committed:
            regs.update(r for mma in group for r in mma.dest)
        return regs


class CTA:
    """One CTA, or a batch of CTAs of a kernel that needs no cross-thread hardware beyond
    ``bar.sync`` and shuffles (each CTA's threads padded to whole warps, its shared memory a
    slice of its own): their threads then run as lanes of one, far faster."""

    def __init__(
        self,
        block: tuple[int, int, int],
        smem_bytes: int,
        ctaids: list[tuple[int, int, int]],
        rank: int,
    ) -> None:
        self.ctaids = ctaids
        self.ctaid = ctaids[0]
        self.rank = rank
        per_cta = block[0] * block[1] * block[2]
        self.stride = per_cta if len(ctaids) == 1 else -(-per_cta // 32) * 32
        self.threads = self.stride * len(ctaids)
        lane = np.arange(self.threads)
        self.local = lane % self.stride  # the thread's index in its CTA
        batch = lane // self.stride
        self.tid = (
            self.local % block[0],
            self.local // block[0] % block[1],
            self.local // (block[0] * block[1]),
        )
        ids = np.array(ctaids, dtype=np.int64)
        self.ctaid_of = (ids[batch, 0], ids[batch, 1], ids[batch, 2])
        self.smem_offset = batch * smem_bytes
        smem = smem_bytes * len(ctaids)
        self.regs: dict[str, Array] = {}
        self.defined: dict[str, Array] = {}
        self.smem = np.full(smem, 0xFF, dtype=np.uint8)
        self.tma_pending = np.zeros(smem, dtype=np.int32)
        self.smem_written = np.zeros(smem, dtype=bool)
        self.mma_reading = np.zeros(smem, dtype=np.int32)
        # TMA stores (:mod:`.bulk_store`): per byte, how many issued stores have yet to read
        # it, and the thread that last wrote it with a generic-proxy store and has not fenced
        # (fence.proxy.async) since, or -1; per thread, its bulk groups: the open one (stores
        # since the last commit) and the committed ones not yet waited on, oldest first.
        self.store_reading = np.zeros(smem, dtype=np.int32)
        self.unfenced_writer = np.full(smem, -1, dtype=np.int32)
        self.bulk_open: dict[int, list[Any]] = {}
        self.bulk_committed: dict[int, deque[list[Any]]] = {}
        self.mbarriers: dict[int, Mbarrier] = {}
        self.warpgroups = [WarpgroupState() for _ in range(-(-self.threads // WARPGROUP))]
        self.accumulator_names: set[str] = set()  # every warpgroup's, for a fast check
        self.exited = self.local >= per_cta  # padding lanes never run
        self.bar_arrived: dict[int, set[int]] = {}
        self.bar_needed: dict[int, int | None] = {}  # a bar.sync's thread count (None: all)
        # barrier.cluster: arrivals and completed waits per thread
        self.cluster_arrivals = np.zeros(self.threads, dtype=np.int64)
        self.cluster_waits = np.zeros(self.threads, dtype=np.int64)

    def describe(self, lanes: Array) -> str:
        """The CTA and its threads of ``lanes`` (those of the first lane's CTA in a batch)."""
        if lanes.size == 0:
            return f"CTA {self.ctaid} threads none"
        first = int(lanes[0]) // self.stride
        mine = lanes[lanes // self.stride == first]
        return f"CTA {self.ctaids[first]} threads {_ranges(self.local[mine])}"

    def name(self) -> str:
        return f"CTA {self.ctaid}"


class MachineView(Protocol):
    """What the instruction units read and change of the machine."""

    memory: GlobalMemory
    groups: list[Group]
    ctas: list[CTA]
    copies: list[Any]
    stores: list[Any]
    params: dict[str, int]
    smem_bytes: int
    maps_by_address: dict[int, TensorMap]
    # Acquire loads that found a flag still 0, by address (a flag nothing will raise).
    unraised: dict[int, int]

    def where(self, group: Group, instr: Instr) -> Where: ...
    def register(self, cta: CTA, name: str) -> Array: ...
    def write_reg(
        self,
        cta: CTA,
        name: str,
        lanes: Array,
        bits: Array,
        instr: Instr | None,
        group: Group | None,
        defined: Array | bool = True,
    ) -> None: ...


class LaneView(Protocol):
    """Operand access for the active lanes of one instruction (``machine.LaneOps``)."""

    count: int
    tainted: Array

    def read(self, operand: Operand, type_: str) -> Array: ...
    def write(self, operand: Operand, values: Array, type_: str) -> None: ...
    def address(self, operand: Operand) -> Array: ...
    def require_defined(self, what: str) -> None: ...
    def narrowed(self, lanes: Array) -> LaneView: ...


class Where:
    """A CTA, its threads and a PTX line, formatted when a message is."""

    def __init__(self, cta: CTA, lanes: Array, instr: Instr) -> None:
        self.cta, self.lanes, self.instr = cta, lanes, instr

    def __str__(self) -> str:
        instr = self.instr
        return f"{self.cta.describe(self.lanes)}, line {instr.line} ({instr.text})"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


def _ranges(lanes: Array) -> str:
    if lanes.size == 0:
        return "none"
    parts, start, prev = [], int(lanes[0]), int(lanes[0])
    for value in lanes[1:]:
        if int(value) != prev + 1:
            parts.append(f"{start}-{prev}" if start != prev else f"{start}")
            start = int(value)
        prev = int(value)
    parts.append(f"{start}-{prev}" if start != prev else f"{start}")
    return ",".join(parts[:4]) + ("..." if len(parts) > 4 else "")
