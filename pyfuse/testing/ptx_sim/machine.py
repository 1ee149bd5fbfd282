"""The simulated Hopper machine: CTAs of one cluster at a time, their threads in groups that
share a program counter, a seeded scheduler that interleaves them, and the asynchronous
units (TMA loads and stores, mbarriers, wgmma groups) whose completions it orders.

Expects an :class:`~.parse.Entry`, launch dims, the kernel's parameter values (pointers into a
:class:`GlobalMemory`, :class:`~.tensor_core.TensorMap` for tensor-map params) and a seed.
Guarantees: every thread runs the entry to its end; threads of one CTA start as one group, a
branch the group's lanes disagree on splits it, and groups at one instruction merge again.
The scheduler runs a random runnable group for a random quantum; an mbarrier wait that is not
yet satisfied blocks its group until the barrier's phase changes; a TMA load completes at a
random later step (``eager``), or only when every group is blocked (``late``: the most
adversarial order for a consumer that waits too little); a TMA store (:mod:`.bulk_store`)
reads shared memory and writes global memory at one random later step (``eager``), or only
when every group is blocked, and at the latest at the ``cp.async.bulk.wait_group`` that
retires it (``late``: the most adversarial order for a staging buffer reused too early); a
wgmma group completes at the ``wait_group`` that retires it, computing from shared memory
then. Every violation below raises a :class:`~.tensor_core.SimulationError` naming the CTA,
the thread group, the PTX line and what it found:

- a global access outside every buffer, or a store into a read-only one;
- a value computed from a register no instruction wrote, reaching memory (a store), an
  address, a guard of a memory or barrier instruction, or a wgmma operand (computing and
  branching with garbage is allowed: a guarded-off load leaves it, and the GPU does too);
- ``bra.uni`` whose lanes disagree; an ``.aligned`` warpgroup instruction (wgmma, setmaxnreg)
  or a barrier that part of its threads never reach (a deadlock);
- no runnable group and no pending asynchronous work: a deadlock, listing each group's wait;
- a TMA load into bytes that an unretired wgmma reads (a stage released too early); a wgmma
  or a generic load reading bytes a TMA load has not yet written (a stage used before full),
  or a wgmma reading bytes nothing ever wrote;
- a TMA completion on an mbarrier that ``fence.mbarrier_init`` has not published; more
  arrivals than pending; a transaction count left unbalanced, or a TMA load still in flight,
  when the kernel ends;
- a wgmma without ``wgmma.fence`` after its accumulators were touched, an accumulator read or
  written while a wgmma on it is in flight, a kernel ending with a wgmma in flight;
- a generic write (``st.shared``, ``stmatrix``) or a TMA load into bytes a TMA store has not
  yet read; a TMA store of bytes written by a generic write its writer did not follow with
  ``fence.proxy.async``, of bytes a TMA load has not yet written or nothing ever wrote, from a
  misaligned or outside source; a thread exiting with a TMA store no ``wait_group`` retired.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pyfuse.testing.ptx_sim import alu, bulk_store, named_barriers, units
from pyfuse.testing.ptx_sim.parse import Entry, Instr, Operand
from pyfuse.testing.ptx_sim.state import (
    CTA,
    PARAM_BASE,
    WARPGROUP,
    GlobalMemory,
    Group,
    Where,
)
from pyfuse.testing.ptx_sim.tensor_core import NotModeledError, SimulationError, TensorMap
from pyfuse.testing.ptx_sim.values import (
    NUMPY_TYPES,
    Array,
    from_bits,
    immediate,
    storage_dtype,
    to_bits,
)

# Kernels using any of these run one cluster at a time (their CTAs' async units and barriers
# are per CTA); others run SIMT_BATCH CTAs as one.
_ASYNC_OPCODES = frozenset({"mbarrier", "cp", "wgmma", "barrier", "mapa", "elect", "setmaxnreg"})
SIMT_BATCH = 64


class Machine:
    def __init__(
        self,
        entry: Entry,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        smem_bytes: int,
        params: dict[str, int],
        tensor_maps: dict[str, TensorMap],
        memory: GlobalMemory,
        *,
        cluster: tuple[int, int, int] = (1, 1, 1),
        seed: int = 0,
        order: str = "eager",
        quantum: int = 16,
    ) -> None:
        self.entry, self.grid, self.block, self.smem_bytes = entry, grid, block, smem_bytes
        self.params, self.memory, self.cluster = params, memory, cluster
        self.rng = np.random.default_rng(seed)
        self.order, self.quantum = order, quantum
        self.map_slots = {name: PARAM_BASE + 128 * i for i, name in enumerate(tensor_maps)}
        self.maps_by_address = {self.map_slots[n]: m for n, m in tensor_maps.items()}
        self.steps = 0
        self.unraised: dict[int, int] = {}

    # ---- running ---------------------------------------------------------------------------

    def run(self) -> None:
        size = self.cluster[0] * self.cluster[1] * self.cluster[2]
        if self.cluster[1:] != (1, 1):
            raise NotModeledError("clusters along y or z are not modeled")
        total = self.grid[0] * self.grid[1] * self.grid[2]
        ids = [
            (x, y, z)
            for z in range(self.grid[2])
            for y in range(self.grid[1])
            for x in range(self.grid[0])
        ]
        simt = size == 1 and not any(i.opcode in _ASYNC_OPCODES for i in self.entry.instrs)
        if simt:  # CTAs in batches, each run as one
            batches = [ids[i : i + SIMT_BATCH] for i in range(0, total, SIMT_BATCH)]
            clusters = [[CTA(self.block, self.smem_bytes, batch, 0)] for batch in batches]
        else:
            clusters = [
                [CTA(self.block, self.smem_bytes, [ids[first + r]], r) for r in range(size)]
                for first in range(0, total, size)
            ]
        # Clusters run one at a time, in order of their numbers: a CTA that acquires a flag
        # (stream-K's fixup) waits only for CTAs of lower numbers, which have finished.
        for ctas in clusters:
            self.ctas = ctas
            self.copies: list[units.AsyncCopy] = []
            self.stores: list[bulk_store.PendingStore] = []
            self.groups = [Group(cta, np.flatnonzero(~cta.exited), 0) for cta in ctas]
            self._run_cluster()

    def _run_cluster(self) -> None:
        while self.groups:
            self._merge()
            runnable = [g for g in self.groups if g.wait is None]
            pending = len(self.copies) + len(self.stores)
            if pending and (not runnable or (self.order == "eager" and self.rng.random() < 0.3)):
                pick = int(self.rng.integers(pending))
                if pick < len(self.copies):
                    units.complete_copy(self, self.copies.pop(pick))
                else:
                    bulk_store.complete_store(self, self.stores[pick - len(self.copies)])
                continue
            if not runnable:
                raise SimulationError("deadlock: every thread waits\n" + self._waits())
            group = runnable[int(self.rng.integers(len(runnable)))]
            for _ in range(int(self.rng.integers(1, self.quantum + 1))):
                if not self._step(group) or group.wait is not None:
                    break
        if self.copies:
            raise SimulationError(f"{self.copies[0].where}: a TMA load is in flight at the end")
        if self.stores:
            raise SimulationError(
                f"{self.stores[0].where}: a TMA store has not reached global memory at the end"
            )
        for cta in self.ctas:
            for wg, state in enumerate(cta.warpgroups):
                if state.open or state.committed:
                    raise SimulationError(
                        f"{cta.name()}: warpgroup {wg} exits with a wgmma in flight"
                    )
            for offset, barrier in cta.mbarriers.items():
                if barrier.tx:
                    raise SimulationError(
                        f"{cta.name()}: the mbarrier at shared offset {offset} ends with "
                        f"{barrier.tx} transaction bytes unbalanced (an expect-tx miscount)"
                    )

    def _waits(self) -> str:
        lines = []
        for g in self.groups:
            instr = self.entry.instrs[g.pc] if g.pc < len(self.entry.instrs) else None
            where = f"line {instr.line}: {instr.text}" if instr else "the end"
            lines.append(f"  {g.cta.describe(g.lanes)} at {where}: {self._wait_text(g)}")
        return "\n".join(lines)

    def _wait_text(self, group: Group) -> str:
        wait = group.wait
        if wait is None:
            return "running"
        if wait[0] == "mbarrier":
            cta = next(c for c in self.ctas if id(c) == wait[1])
            b = cta.mbarriers[wait[2]]
            return (
                f"the mbarrier at {cta.name()} offset {wait[2]}: phase {b.phases} has "
                f"{b.pending} of {b.expected} arrivals and {b.tx} transaction bytes to go"
            )
        if wait[0] == "bar":
            return f"bar.sync {wait[1]}"
        if wait[0] == "aligned":
            return "the rest of its warpgroup (an .aligned instruction)"
        return "barrier.cluster.wait"

    def _merge(self) -> None:
        """Groups of one CTA at one instruction become one (running, or waiting for the rest
        of a warpgroup at an ``.aligned`` instruction, which re-checks once others join)."""
        first: dict[tuple[int, int], Group] = {}
        out = []
        for g in self.groups:
            if g.wait is not None and g.wait[0] != "aligned":
                out.append(g)
                continue
            key = (id(g.cta), g.pc)
            other = first.get(key)
            if other is None:
                first[key] = g
                out.append(g)
                continue
            other.lanes = np.union1d(other.lanes, g.lanes)
            other.wait = None
        self.groups = out

    def where(self, group: Group, instr: Instr) -> Where:
        """Where an instruction runs, for messages (formatted only when one is raised)."""
        return Where(group.cta, group.lanes, instr)

    def _step(self, group: Group) -> bool:
        """Run one instruction of ``group``; False when the group ended, split or blocked."""
        self.steps += 1
        instrs = self.entry.instrs
        if group.pc >= len(instrs):
            self._exit(group, group.lanes)
            return False
        instr = instrs[group.pc]
        lanes = group.lanes
        garbage = None  # lanes that chose by an undefined guard
        if instr.guard is not None:
            bits, defined = self.read_reg(group.cta, instr.guard, lanes, instr, group)
            pred = bits.astype(bool) != instr.negated
            lanes, garbage = lanes[pred], ~defined[pred]
        if instr.opcode == "bra":
            # Threads may branch on garbage (an out-of-bounds thread's rare path): what they
            # then store or address is caught as it happens.
            return self._branch(group, instr, lanes)
        if instr.opcode in ("ret", "exit"):
            self._exit(group, lanes)
            if lanes.size < group.lanes.size:
                group.lanes = np.setdiff1d(group.lanes, lanes)
                group.pc += 1
                return True
            return False
        ops = LaneOps(self, group, lanes, instr)
        if garbage is not None:
            ops.tainted |= garbage
        if lanes.size and not alu.execute(instr, ops):
            if garbage is not None and garbage.any():
                raise SimulationError(
                    f"{self.where(group, instr)}: guarded by {instr.guard}, which no "
                    "instruction wrote on some of its threads"
                )
            result = units.execute(self, group, instr, lanes, ops)
            if result == "blocked":
                return False
        group.pc += 1
        return True

    def _branch(self, group: Group, instr: Instr, taken: Array) -> bool:
        target = self.entry.labels[instr.operands[0].name]
        if taken.size == group.lanes.size:
            group.pc = target
            return True
        if taken.size == 0:
            group.pc += 1
            return True
        if "uni" in instr.modifiers:
            # .uni promises every thread of a warp takes the same way
            split = np.intersect1d(
                np.unique(taken // 32), np.unique(np.setdiff1d(group.lanes, taken) // 32)
            )
            if split.size:
                raise SimulationError(
                    f"{self.where(group, instr)}: bra.uni diverged inside warp {int(split[0])}"
                )
        rest = np.setdiff1d(group.lanes, taken)
        group.lanes, group.pc = rest, group.pc + 1
        self.groups.append(Group(group.cta, taken, target))
        return False

    def _exit(self, group: Group, lanes: Array) -> None:
        bulk_store.check_exit(self, group.cta, lanes)
        group.cta.exited[lanes] = True
        if lanes.size == group.lanes.size:
            self.groups.remove(group)
        named_barriers.recheck_barriers(self, group.cta)

    # ---- registers -------------------------------------------------------------------------

    def register(self, cta: CTA, name: str) -> Array:
        if name not in cta.regs:
            # Never-written registers hold poison bits (NaN as a float) and are undefined.
            dtype = storage_dtype(self.entry.reg_type(name))
            fill = False if dtype == np.bool_ else np.iinfo(dtype).max
            cta.regs[name] = np.full(cta.threads, fill, dtype=dtype)
            cta.defined[name] = np.zeros(cta.threads, dtype=bool)
        return cta.regs[name]

    def read_reg(
        self, cta: CTA, name: str, lanes: Array, instr: Instr, group: Group
    ) -> tuple[Array, Array]:
        """The register's bits on ``lanes`` and where they are defined."""
        bits = self.register(cta, name)
        self._check_accumulator(cta, name, lanes, instr, group)
        return bits[lanes], cta.defined[name][lanes]

    def write_reg(
        self,
        cta: CTA,
        name: str,
        lanes: Array,
        bits: Array,
        instr: Instr | None,
        group: Group | None,
        defined: Array | bool = True,
    ) -> None:
        self.register(cta, name)
        if instr is not None and group is not None:
            self._check_accumulator(cta, name, lanes, instr, group)
        cta.regs[name][lanes] = bits
        cta.defined[name][lanes] = defined

    def _check_accumulator(
        self, cta: CTA, name: str, lanes: Array, instr: Instr, group: Group
    ) -> None:
        if name not in cta.accumulator_names or instr.opcode == "wgmma":
            return
        for wg in np.unique(lanes // WARPGROUP):
            state = cta.warpgroups[wg]
            if name in state.accumulators:
                if name in state.in_flight:
                    raise SimulationError(
                        f"{self.where(group, instr)}: accumulator {name} used while a wgmma on it "
                        "is in flight (before wgmma.wait_group retires it)"
                    )
                state.touched_since_fence = True


class LaneOps:
    """:class:`~.alu.Operands` for the active lanes of one instruction."""

    def __init__(self, machine: Machine, group: Group, lanes: Array, instr: Instr) -> None:
        self.machine, self.group, self.lanes, self.instr = machine, group, lanes, instr
        self.cta = group.cta
        self.count = lanes.size
        # Lanes whose operands so far include an undefined register: what this instruction
        # writes there is undefined too (garbage a kernel may compute, never store or branch on).
        self.tainted = np.zeros(lanes.size, dtype=bool)

    def narrowed(self, lanes: Array) -> LaneOps:
        """The same instruction's view of a subset of its lanes."""
        return LaneOps(self.machine, self.group, lanes, self.instr)

    def require_defined(self, what: str) -> None:
        if self.tainted.any():
            raise SimulationError(
                f"{self.machine.where(self.group, self.instr)}: {what} computed from a "
                "register never written"
            )

    def read(self, operand: Operand, type_: str) -> Array:
        kind = operand.kind
        if kind == "reg":
            bits, defined = self.machine.read_reg(
                self.cta, operand.name, self.lanes, self.instr, self.group
            )
            self.tainted |= ~defined
            value = from_bits(bits, type_)
            return ~value if operand.negated else value
        if kind == "imm":
            return immediate(operand.value, operand.float_bits, type_, self.count)
        if kind == "special":
            return self._special(operand.name).astype(NUMPY_TYPES[type_])
        if kind == "symbol":
            return np.full(self.count, self.symbol(operand.name), dtype=np.uint64).astype(
                NUMPY_TYPES[type_]
            )
        raise SimulationError(
            f"{self.machine.where(self.group, self.instr)}: cannot read {operand}"
        )

    def write(self, operand: Operand, values: Array, type_: str) -> None:
        if operand.kind == "sink":
            return
        if operand.kind != "reg":
            raise SimulationError(
                f"{self.machine.where(self.group, self.instr)}: cannot write {operand}"
            )
        storage = storage_dtype(self.machine.entry.reg_type(operand.name))
        bits = to_bits(np.asarray(values), type_, storage)
        self.machine.write_reg(
            self.cta, operand.name, self.lanes, bits, self.instr, self.group, ~self.tainted
        )

    def symbol(self, name: str) -> int:
        machine = self.machine
        if name in machine.entry.shared_symbols:
            return 0
        if name in machine.map_slots:
            return machine.map_slots[name]
        if name in machine.params:
            return machine.params[name]
        raise SimulationError(f"{machine.where(self.group, self.instr)}: unknown symbol {name}")

    def address(self, operand: Operand) -> Array:
        """Per-lane addresses of an ``[base+offset]`` operand (a param: its value's slot)."""
        base = operand.base
        assert base is not None
        if base.kind == "symbol":
            return np.full(self.count, self.symbol(base.name) + operand.offset, dtype=np.int64)
        values = self.read(base, "u64").astype(np.int64)
        return values + operand.offset

    def _special(self, name: str) -> Array:
        cta, lanes, machine = self.cta, self.lanes, self.machine
        axis = "xyz".index(name[-1]) if name[-2] == "." else 0
        size = machine.cluster[0] * machine.cluster[1] * machine.cluster[2]
        values: dict[str, Any] = {
            "tid": lambda: cta.tid[axis][lanes],
            "ntid": lambda: np.full(lanes.size, machine.block[axis]),
            "ctaid": lambda: cta.ctaid_of[axis][lanes],
            "nctaid": lambda: np.full(lanes.size, machine.grid[axis]),
            "laneid": lambda: cta.local[lanes] % 32,
            "warpid": lambda: cta.local[lanes] // 32,
            "cluster_ctarank": lambda: np.full(lanes.size, cta.rank),
            "cluster_nctarank": lambda: np.full(lanes.size, size),
            "clusterid": lambda: np.full(lanes.size, cta.ctaid[axis] // machine.cluster[axis]),
            "nclusterid": lambda: np.full(lanes.size, machine.grid[axis] // machine.cluster[axis]),
            "cluster_ctaid": lambda: np.full(lanes.size, cta.ctaid[axis] % machine.cluster[axis]),
            "cluster_nctaid": lambda: np.full(lanes.size, machine.cluster[axis]),
        }
        key = name.split(".")[0]
        if key not in values:
            raise NotModeledError(f"special register %{name} is not modeled")
        return np.asarray(values[key]())


__all__ = ["LaneOps", "Machine"]
