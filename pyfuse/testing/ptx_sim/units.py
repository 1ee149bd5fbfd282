"""The instructions that reach past a thread's registers: memory, barriers, mbarriers, TMA,
wgmma and the warp- and cluster-level ones, for :class:`~.machine.Machine`.

Expects the machine's group, its active lanes and their :class:`~.machine.LaneOps`. Guarantees
the semantics and checks listed in :mod:`.machine`, :mod:`.tensor_core` and :mod:`.bulk_store`
(TMA stores, bulk groups, the async-proxy fence and stmatrix, registered here); an instruction
it does not model raises a :class:`~.tensor_core.SimulationError` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from pyfuse.testing.ptx_sim import bulk_store, named_barriers
from pyfuse.testing.ptx_sim.alu import types_of
from pyfuse.testing.ptx_sim.parse import Instr, Operand
from pyfuse.testing.ptx_sim.state import (
    CTA,
    RANK_SHIFT,
    WARPGROUP,
    Group,
    PendingMma,
)
from pyfuse.testing.ptx_sim.state import LaneView as LaneOps
from pyfuse.testing.ptx_sim.state import MachineView as Machine
from pyfuse.testing.ptx_sim.tensor_core import (
    Mbarrier,
    NotModeledError,
    SimulationError,
    TensorMap,
    operand_addresses,
    tma_box,
)
from pyfuse.testing.ptx_sim.values import NUMPY_TYPES, Array, from_bits, width


@dataclass
class AsyncCopy:
    """One TMA tile load in flight: its map, coordinates, and per destination CTA the shared
    addresses it writes and the mbarrier it completes."""

    instr: Instr
    where: object
    tmap: TensorMap
    coords: tuple[int, ...]
    dst: int
    targets: list[tuple[CTA, Array, int]]  # (CTA, byte addresses, mbarrier address)


def execute(machine: Machine, group: Group, instr: Instr, lanes: Array, ops: LaneOps) -> str:
    handler = _HANDLERS.get(instr.opcode)
    if handler is None:
        raise NotModeledError(f"{machine.where(group, instr)}: {instr.opcode} is not modeled")
    return handler(machine, group, instr, lanes, ops) or "ok"


# ---- memory ----------------------------------------------------------------------------------


def _space(instr: Instr) -> str:
    for space in ("param", "global", "shared", "local"):
        if space in instr.modifiers or any(m.startswith(space + "::") for m in instr.modifiers):
            return space
    return "generic"


def _vector(instr: Instr) -> int:
    for m in instr.modifiers:
        if m in ("v2", "v4", "v8"):
            return int(m[1:])
    return 1


def _ld_st(machine: Machine, group: Group, instr: Instr, lanes: Array, ops: LaneOps) -> None:
    (type_,) = types_of(instr)
    space, count, size = _space(instr), _vector(instr), width(type_)
    load = instr.opcode == "ld"
    address_operand = instr.operands[1] if load else instr.operands[0]
    value_operand = instr.operands[0] if load else instr.operands[1]
    items = value_operand.items if value_operand.kind == "vector" else (value_operand,)
    where = machine.where(group, instr)
    if space == "param":
        name = address_operand.base.name if address_operand.base else ""
        ops.write(items[0], np.full(lanes.size, machine.params[name], dtype=np.uint64), "u64")
        return
    addresses = ops.address(address_operand)
    ops.require_defined("an address")
    if (addresses % (size * count)).any():
        bad = int(addresses[(addresses % (size * count)) != 0][0])
        raise SimulationError(f"{where}: misaligned {size * count}-byte access at {bad:#x}")
    if space == "shared":
        cta = group.cta
        limit = machine.smem_bytes
        if (addresses < 0).any() or (addresses + size * count > limit).any():
            raise SimulationError(f"{where}: a shared access outside the {limit} B of the CTA")
        addresses = addresses + cta.smem_offset[lanes]  # a batch's CTAs each have their own
        _shared_access(cta, addresses, size * count, load, where)
        span = np.arange(size * count)
        if load:
            raw = cta.smem[addresses[:, None] + span]
        else:
            data = np.concatenate([_raw(ops.read(item, type_)) for item in items], axis=1)
            ops.require_defined("a stored value")
            written = addresses[:, None] + span
            bulk_store.generic_write(machine, cta, written, lanes[:, None], where)
            cta.smem[written] = data
            cta.smem_written[written] = True
            return
    elif space == "global":
        if load:
            raw = machine.memory.read(addresses, size * count, where)
        else:
            data = np.concatenate([_raw(ops.read(item, type_)) for item in items], axis=1)
            ops.require_defined("a stored value")
            machine.memory.write(addresses, data, where)
            return
    else:
        raise NotModeledError(f"{where}: {space} memory is not modeled")
    if "acquire" in instr.modifiers:
        _check_flag(machine, addresses, raw, where)
    for i, item in enumerate(items):
        piece = np.ascontiguousarray(raw[:, i * size : (i + 1) * size]).view(NUMPY_TYPES[type_])
        ops.write(item, piece.reshape(-1), type_)


# Acquire loads that may find a flag at 0 before one is a deadlock: the CTAs that raise
# flags (lower-numbered, run first) have all finished when a CTA waits for one.
UNRAISED_READS = 64


def _check_flag(machine: Machine, addresses: Array, raw: Array, where: object) -> None:
    for address, value in zip(addresses.tolist(), raw.tolist(), strict=True):
        if any(value):
            continue
        seen = machine.unraised.get(address, 0) + 1
        machine.unraised[address] = seen
        if seen > UNRAISED_READS:
            raise SimulationError(
                f"{where}: deadlock: spins on a flag at {address:#x} that no CTA raised"
            )


def _red(machine: Machine, group: Group, instr: Instr, lanes: Array, ops: LaneOps) -> None:
    """``red.global.add`` of integers (a flag raised; the simulator runs one thread at a time,
    so every lane's addition lands)."""
    (type_,) = types_of(instr)
    where = machine.where(group, instr)
    if _space(instr) != "global" or "add" not in instr.modifiers or type_ not in ("u32", "s32"):
        raise NotModeledError(f"{where}: only red.global.add.u32/s32 is modeled")
    addresses = ops.address(instr.operands[0])
    values = ops.read(instr.operands[1], type_)
    ops.require_defined("a reduction's address or value")
    if (addresses % 4).any():
        raise SimulationError(f"{where}: misaligned 4-byte reduction")
    for address, value in zip(addresses, values, strict=True):
        point = np.array([address])
        old = machine.memory.read(point, 4, where).view(NUMPY_TYPES[type_])
        new = (old + np.array([value]).astype(NUMPY_TYPES[type_])).astype(NUMPY_TYPES[type_])
        machine.memory.write(point, _raw(new), where)


def _raw(values: Array) -> Array:
    return np.ascontiguousarray(values).view(np.uint8).reshape(values.size, -1)


def _stmatrix(machine: Machine, group: Group, instr: Instr, lanes: Array, ops: LaneOps) -> str:
    if not _converged(group, instr, lanes, 0xFFFFFFFF):
        return "blocked"
    where, cta = machine.where(group, instr), group.cta
    addresses, data, writers = bulk_store.stmatrix_writes(instr, lanes, ops, where)
    size, limit = data.shape[1], machine.smem_bytes
    if (addresses < 0).any() or (addresses + size > limit).any():
        raise SimulationError(f"{where}: a shared access outside the {limit} B of the CTA")
    addresses = addresses + cta.smem_offset[writers]
    _shared_access(cta, addresses, size, False, where)
    written = addresses[:, None] + np.arange(size)
    bulk_store.generic_write(machine, cta, written, writers[:, None], where)
    cta.smem[written] = data
    cta.smem_written[written] = True
    return "ok"


def _shared_access(cta: CTA, addresses: Array, size: int, load: bool, where: object) -> None:
    span = (addresses[:, None] + np.arange(size)).reshape(-1)
    if cta.tma_pending[span].any():
        raise SimulationError(f"{where}: shared bytes a TMA load has not yet written")
    if not load and cta.mma_reading[span].any():
        raise SimulationError(f"{where}: a store into shared bytes an unretired wgmma reads")


# ---- barriers ---------------------------------------------------------------------------------


def _aligned(machine: Machine, group: Group, instr: Instr) -> bool:
    """Every live thread of each warpgroup the group touches is in it (else it waits)."""
    cta = group.cta
    for wg in np.unique(group.lanes // WARPGROUP):
        members = np.arange(wg * WARPGROUP, min((wg + 1) * WARPGROUP, cta.threads))
        live = members[~cta.exited[members]]
        if not np.isin(live, group.lanes).all():
            group.wait = ("aligned", instr.line)
            return False
    return True


def _barrier(machine: Machine, group: Group, instr: Instr, lanes: Array, ops: LaneOps) -> str:
    if "cluster" not in instr.modifiers:
        return named_barriers.bar(machine, group, instr, lanes, ops)
    cta = group.cta
    if "arrive" in instr.modifiers:
        cta.cluster_arrivals[lanes] += 1
        for other in machine.groups:
            if other.wait == ("cluster",):
                other.wait = None
        return "ok"
    phase = int(cta.cluster_waits[lanes].max()) + 1
    for each in machine.ctas:
        live = ~each.exited
        if (each.cluster_arrivals[live] < phase).any():
            group.wait = ("cluster",)
            return "blocked"
    cta.cluster_waits[lanes] = phase
    return "ok"


def _target(machine: Machine, cta: CTA, address: int) -> tuple[CTA, int]:
    """The CTA and local offset of a shared::cluster address (mapa's rank bits, else own)."""
    rank = address >> RANK_SHIFT
    if rank == 0:
        return cta, address
    return machine.ctas[rank - 1], address & ((1 << RANK_SHIFT) - 1)


def _mapa(machine: Machine, group: Group, instr: Instr, lanes: Array, ops: LaneOps) -> None:
    dest, address, rank = instr.operands
    local = ops.read(address, "u32").astype(np.uint64)
    ranks = ops.read(rank, "u32").astype(np.uint64)
    ops.write(dest, ((ranks + 1) << np.uint64(RANK_SHIFT)) | local, "u32")


def _mbarrier(machine: Machine, group: Group, instr: Instr, lanes: Array, ops: LaneOps) -> str:
    action = instr.modifiers[0]
    where = machine.where(group, instr)
    address_operand = next(o for o in instr.operands if o.kind == "address")
    addresses = ops.address(address_operand)
    ops.require_defined("an mbarrier address")
    if action == "init":
        count = int(ops.read(instr.operands[1], "u32")[0])
        for a in np.unique(addresses):
            group.cta.mbarriers[int(a)] = Mbarrier(expected=count, pending=count)
        return "ok"
    if action in ("try_wait", "test_wait"):
        parity = ops.read(instr.operands[2], "u32")
        done = np.array(
            [
                _barrier_at(machine, group.cta, int(a), where)[1].phase_done(int(p) & 1)
                for a, p in zip(addresses, parity, strict=True)
            ]
        )
        if not done.any() and action == "try_wait":
            target, _ = _barrier_at(machine, group.cta, int(addresses[0]), where)
            group.wait = ("mbarrier", id(target[0]), target[1])
            return "blocked"
        ops.write(instr.operands[0], done, "pred")
        return "ok"
    if action == "arrive":
        expect = None
        if "expect_tx" in instr.modifiers:
            expect = ops.read(instr.operands[2], "u32")
        for i, a in enumerate(addresses):
            (cta, offset), barrier = _barrier_at(machine, group.cta, int(a), where)
            if expect is not None:
                barrier.expect(int(expect[i]))
            if barrier.arrive(1, where):
                _wake(machine, cta, offset)
        return "ok"
    if action == "expect_tx":
        expect = ops.read(instr.operands[1], "u32")
        for i, a in enumerate(addresses):
            _barrier_at(machine, group.cta, int(a), where)[1].expect(int(expect[i]))
        return "ok"
    raise NotModeledError(f"{where}: mbarrier.{action} is not modeled")


def _barrier_at(
    machine: Machine, cta: CTA, address: int, where: object
) -> tuple[tuple[CTA, int], Mbarrier]:
    target, offset = _target(machine, cta, address)
    barrier = target.mbarriers.get(offset)
    if barrier is None:
        raise SimulationError(f"{where}: no mbarrier was initialized at shared offset {offset}")
    return (target, offset), barrier


def _wake(machine: Machine, cta: CTA, offset: int) -> None:
    for g in machine.groups:
        if g.wait == ("mbarrier", id(cta), offset):
            g.wait = None


def _fence(machine: Machine, group: Group, instr: Instr, lanes: Array, ops: LaneOps) -> None:
    if "mbarrier_init" in instr.modifiers and lanes.size:
        for barrier in group.cta.mbarriers.values():
            barrier.fenced = True
    if "proxy" in instr.modifiers and lanes.size:
        bulk_store.fence(machine, group, instr, lanes)


def _nothing(machine: Machine, group: Group, instr: Instr, lanes: Array, ops: LaneOps) -> None:
    return None


def _setmaxnreg(machine: Machine, group: Group, instr: Instr, lanes: Array, ops: LaneOps) -> str:
    return "ok" if _aligned(machine, group, instr) else "blocked"


def _elect(machine: Machine, group: Group, instr: Instr, lanes: Array, ops: LaneOps) -> None:
    warps = lanes // 32
    first = np.ones(lanes.size, dtype=bool)
    first[1:] = warps[1:] != warps[:-1]
    dest = instr.operands[0]
    leader, pred = dest.items if dest.kind == "pair" else (Operand("sink"), dest)
    ops.write(pred, first, "pred")
    counts = np.diff(np.flatnonzero(np.r_[first, True]))
    ops.write(leader, np.repeat(lanes[first] % 32, counts).astype(np.uint32), "u32")


def _converged(group: Group, instr: Instr, lanes: Array, mask: int) -> bool:
    """Every live thread of ``mask`` in each warp ``lanes`` touch runs this instruction
    (``.sync``); else the group waits for the rest to reach it."""
    cta = group.cta
    for warp in np.unique(lanes // 32):
        members = warp * 32 + np.flatnonzero([(mask >> i) & 1 for i in range(32)])
        members = members[members < cta.threads]
        live = members[~cta.exited[members]]
        if not np.isin(live, lanes).all():
            group.wait = ("aligned", instr.line)
            return False
    return True


def _shfl(machine: Machine, group: Group, instr: Instr, lanes: Array, ops: LaneOps) -> str:
    dest, a, b, c, mask_operand = instr.operands
    mask = int(ops.read(mask_operand, "u32")[0])
    if not _converged(group, instr, lanes, mask):
        return "blocked"
    mode = instr.modifiers[1]
    if a.kind != "reg":
        raise NotModeledError(f"{machine.where(group, instr)}: shfl of a non-register")
    lane = (lanes % 32).astype(np.int64)
    shift = ops.read(b, "u32").astype(np.int64)
    packed = ops.read(c, "u32").astype(np.int64)
    clamp, segment = packed & 0x1F, (packed >> 8) & 0x1F
    most, least = (lane & segment) | (clamp & ~segment), lane & segment
    if mode == "up":
        j = lane - shift
        ok = j >= most
    elif mode == "down":
        j = lane + shift
        ok = j <= most
    elif mode == "bfly":
        j = lane ^ shift
        ok = j <= most
    else:  # idx
        j = least | (shift & 0x1F & ~segment)
        ok = j <= most
    source = lanes - lane + np.where(ok, j, lane)
    cta = group.cta
    bits = machine.register(cta, a.name)[source]
    # A source lane outside this instruction's threads gives an undefined value.
    ops.tainted |= ~(cta.defined[a.name][source] & np.isin(source, lanes))
    value_dest, pred_dest = dest.items if dest.kind == "pair" else (dest, None)
    ops.write(value_dest, from_bits(bits, "b32"), "b32")
    if pred_dest is not None:
        ops.write(pred_dest, ok, "pred")
    return "ok"


# ---- TMA ---------------------------------------------------------------------------------------


def _cp(machine: Machine, group: Group, instr: Instr, lanes: Array, ops: LaneOps) -> None:
    where = machine.where(group, instr)
    mods = instr.modifiers
    if mods[:2] == ("async", "bulk") and len(mods) > 2:
        store = mods[2:3] + mods[4:5] == ("tensor", "global")
        form = _BULK_FORMS.get("store" if store else mods[2])
        if form is not None:
            return form(machine, group, instr, lanes, ops)
    if mods[:3] != ("async", "bulk", "tensor") or (mods[4].split("::")[0], mods[5]) != (
        "shared",
        "global",
    ):
        raise NotModeledError(f"{where}: only TMA tile loads and stores are modeled")
    dst_operand, source, barrier_operand, *rest = instr.operands
    dsts = ops.address(dst_operand)
    maps = ops.address(Operand("address", base=source.base))
    coords = [ops.read(c, "s32") for c in source.items]
    barriers = ops.address(barrier_operand)
    multicast = any(m.startswith("multicast") for m in instr.modifiers)
    masks = ops.read(rest[0], "u16") if multicast else None
    ops.require_defined("a TMA operand")
    for i in range(lanes.size):
        tmap = machine.maps_by_address.get(int(maps[i]))
        if tmap is None:
            raise SimulationError(f"{where}: {int(maps[i]):#x} is not a tensor map's address")
        point = tuple(int(c[i]) for c in coords)
        own, offset = _target(machine, group.cta, int(dsts[i]))
        ranks = (
            [own.rank]
            if masks is None
            else [r for r in range(len(machine.ctas)) if int(masks[i]) >> r & 1]
        )
        targets = []
        for rank in ranks:
            cta = machine.ctas[rank]
            addresses, _ = tma_box(
                tmap, point, offset, lambda a, s: np.zeros((a.size, s), np.uint8)
            )
            span = (addresses[:, None] + np.arange(tmap.element_bytes)).reshape(-1)
            if (span < 0).any() or (span >= cta.smem.size).any():
                raise SimulationError(f"{where}: a TMA box outside the CTA's shared memory")
            if cta.mma_reading[span].any():
                reader = _reader_of(cta, span)
                raise SimulationError(
                    f"{where}: a TMA load into shared bytes that the wgmma of line "
                    f"{reader.line} ({reader.text}) has not yet retired reading ({cta.name()}): "
                    "the stage was released too early"
                )
            if cta.store_reading[span].any():
                raise SimulationError(
                    f"{where}: a TMA load into shared bytes a TMA store has not yet read "
                    f"({cta.name()})"
                )
            _, local_barrier = _target(machine, group.cta, int(barriers[i]))
            if local_barrier not in cta.mbarriers:
                raise SimulationError(
                    f"{where}: no mbarrier at offset {local_barrier} of {cta.name()}"
                )
            cta.tma_pending[span] += 1
            targets.append((cta, span, local_barrier))
        machine.copies.append(AsyncCopy(instr, where, tmap, point, offset, targets))


def _reader_of(cta: CTA, span: Array) -> Instr:
    """The in-flight wgmma that reads some byte of ``span``."""
    for state in cta.warpgroups:
        for mma in [*state.open, *(m for group in state.committed for m in group)]:
            if np.intersect1d(mma.reads, span).size:
                return mma.instr
    raise AssertionError("a byte counted as read by no wgmma in flight")


def complete_copy(machine: Machine, copy: AsyncCopy) -> None:
    """Land one TMA load: write its bytes and complete its transaction bytes."""
    addresses, data = tma_box(
        copy.tmap, copy.coords, copy.dst, lambda a, s: machine.memory.read(a, s, copy.where)
    )
    size = copy.tmap.element_bytes
    for cta, span, barrier_offset in copy.targets:
        written = (addresses[:, None] + np.arange(size)).reshape(-1)
        cta.smem[written] = data.reshape(-1)
        cta.smem_written[written] = True
        cta.tma_pending[span] -= 1
        barrier = cta.mbarriers[barrier_offset]
        if not barrier.fenced:
            raise SimulationError(
                f"{copy.where}: a TMA load completes on an mbarrier of {cta.name()} that no "
                "fence.mbarrier_init published to the async proxy"
            )
        if barrier.complete_tx(copy.tmap.box_bytes):
            _wake(machine, cta, barrier_offset)


# ---- wgmma -------------------------------------------------------------------------------------


def _wgmma(machine: Machine, group: Group, instr: Instr, lanes: Array, ops: LaneOps) -> str:
    if not _aligned(machine, group, instr):
        return "blocked"
    where = machine.where(group, instr)
    cta = group.cta
    action = instr.modifiers[0]
    warpgroups = [int(w) for w in np.unique(lanes // WARPGROUP)]
    for wg in warpgroups:
        state = cta.warpgroups[wg]
        if action == "fence":
            state.touched_since_fence = False
        elif action == "commit_group":
            state.committed.append(state.open)
            state.open = []
        elif action == "wait_group":
            keep = int(instr.operands[0].value)
            while len(state.committed) > keep:
                for mma in state.committed.popleft():
                    _retire(machine, cta, wg, mma, where)
        elif action == "mma_async":
            if state.touched_since_fence:
                raise SimulationError(
                    f"{where}: wgmma.mma_async without a wgmma.fence after its accumulators "
                    "were last touched"
                )
            members = lanes[lanes // WARPGROUP == wg]
            sub = ops.narrowed(members)
            dest, a_desc, b_desc, scale_d, scale_a, scale_b, trans_a, trans_b = instr.operands
            a, b = (_uniform(sub.read(o, "u64"), where) for o in (a_desc, b_desc))
            accumulate = bool(_uniform(sub.read(scale_d, "pred"), where))
            sub.require_defined("a wgmma descriptor or scale")
            shape = next(m for m in instr.modifiers if m.startswith("m64"))
            n = int(shape.split("n")[1].split("k")[0])
            reads = np.concatenate(
                [
                    _operand_bytes(a, 64, not int(trans_a.value)),
                    _operand_bytes(b, n, not int(trans_b.value)),
                ]
            )
            if (reads < 0).any() or (reads >= cta.smem.size).any():
                raise SimulationError(f"{where}: a wgmma operand outside the CTA's shared memory")
            if cta.tma_pending[reads].any():
                raise SimulationError(
                    f"{where}: a wgmma reads shared bytes a TMA load has not yet written (the "
                    "stage's full barrier was not waited on)"
                )
            if not cta.smem_written[reads].all():
                raise SimulationError(
                    f"{where}: a wgmma reads shared bytes that nothing ever wrote (a stage "
                    "used before its first load: the full barrier's phase is wrong)"
                )
            cta.mma_reading[reads] += 1
            names = tuple(item.name for item in dest.items)
            state.accumulators.update(names)
            state.open.append(PendingMma(
                instr, names, a, b, accumulate, int(scale_a.value), int(scale_b.value),
                not int(trans_a.value), not int(trans_b.value), reads,
            ))  # fmt: skip
        else:
            raise NotModeledError(f"{where}: wgmma.{action} is not modeled")
    return "ok"


def _uniform(values: Array, where: object) -> int:
    if (values != values[0]).any():
        raise SimulationError(f"{where}: a wgmma operand differs between a warpgroup's threads")
    return int(values[0])


def _operand_bytes(descriptor: int, rows: int, k_major: bool) -> Array:
    first = operand_addresses(descriptor, rows, 16, 2, k_major)
    return (first.reshape(-1)[:, None] + np.arange(2)).reshape(-1)


def _retire(machine: Machine, cta: CTA, wg: int, mma: PendingMma, where: object) -> None:
    dtype = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}[mma.instr.modifiers[-1]]
    n = len(mma.dest) * 2
    a = _operand(cta, mma.a, 64, mma.a_k_major, dtype) * mma.scale_a
    b = _operand(cta, mma.b, n, mma.b_k_major, dtype) * mma.scale_b
    product = a @ b.T  # (64, n), accumulated in float64
    members = np.arange(wg * WARPGROUP, (wg + 1) * WARPGROUP)
    warp, lane = (members % WARPGROUP) // 32, members % 32
    for i, name in enumerate(mma.dest):
        row = 16 * warp + lane // 4 + 8 * ((i // 2) % 2)
        col = 8 * (i // 4) + 2 * (lane % 4) + (i % 2)
        value = product[row, col]
        if mma.accumulate:
            if name not in cta.regs or not cta.defined[name][members].all():
                raise SimulationError(f"{where}: wgmma accumulates into {name}, never written")
            value = value + cta.regs[name][members].view(np.float32).astype(np.float64)
        bits = value.astype(np.float32).view(np.uint32)
        machine.write_reg(cta, name, members, bits, None, None)
    cta.mma_reading[mma.reads] -= 1


def _operand(cta: CTA, descriptor: int, rows: int, k_major: bool, dtype: Any) -> Array:
    addresses = operand_addresses(descriptor, rows, 16, 2, k_major)
    raw = cta.smem[(addresses.reshape(-1)[:, None] + np.arange(2)).reshape(-1)]
    values: Array = raw.view(dtype).astype(np.float64).reshape(rows, 16)
    return values


_BULK_FORMS = {
    "store": bulk_store.store_tile,
    "commit_group": bulk_store.commit_group,
    "wait_group": bulk_store.wait_group,
}

_HANDLERS = {
    "ld": _ld_st,
    "st": _ld_st,
    "red": _red,
    "bar": named_barriers.bar,
    "barrier": _barrier,
    "mbarrier": _mbarrier,
    "fence": _fence,
    "membar": _nothing,
    "prefetch": _nothing,
    "setmaxnreg": _setmaxnreg,
    "elect": _elect,
    "cp": _cp,
    "stmatrix": _stmatrix,
    "wgmma": _wgmma,
    "mapa": _mapa,
    "shfl": _shfl,
}
