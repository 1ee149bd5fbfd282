"""TMA stores, the way a matmul epilogue leaves: ``cp.async.bulk.tensor`` from shared to global
memory, the bulk groups that order them, the proxy fence that publishes generic writes of the
staging buffer to them, and ``stmatrix``'s layout, for :mod:`.units` (which registers them).

Written from the PTX ISA (``cp.async.bulk.tensor``, ``cp.async.bulk.commit_group``,
``cp.async.bulk.wait_group``, ``fence.proxy.async``, ``stmatrix``) and the CUDA programming
guide's TMA rules. Expects the machine, the group, its active lanes and their operands, as every
unit. Guarantees:

- ``cp.async.bulk.tensor.Nd.global.shared::cta[.tile].bulk_group [map, {c0, ...}], [src]``
  (rank 1..5, coordinates s32 element indices innermost first) copies one box of the map from
  shared memory at ``src`` to global memory. The box's shared layout is the one a load of it
  writes (:func:`~.tensor_core.box_layout`); elements outside the tensor's dims are not written
  (a box wholly outside writes nothing). The copy is asynchronous: issuing it adds it to the
  thread's open bulk group; it reads its shared bytes and writes global memory at one later
  moment, its completion, which the scheduler picks (:mod:`.machine`). ``.L2::cache_hint`` is
  not modeled.
- ``cp.async.bulk.commit_group`` closes the thread's open group into a committed one (an empty
  group too); ``cp.async.bulk.wait_group[.read] N`` completes every committed group of the
  thread but the ``N`` most recent. A store reads and writes at one moment here, so the
  ``.read`` wait (its shared source read) and the full one (its global writes done) agree.
- ``fence.proxy.async`` (``.shared::cta``, ``.shared::cluster`` or every space) by a thread
  publishes that thread's earlier generic-proxy writes of shared memory to the async proxy.
- ``stmatrix.sync.aligned.m8n8.{x1,x2,x4}[.trans].shared[::cta].b16 [a], {r0, ...}``: the
  eight rows of matrix ``i`` start at the addresses of threads ``8i .. 8i+7`` of the warp (16
  bytes each, 16-byte aligned); register ``i`` of thread ``t`` holds elements ``(t/4, 2(t%4))``
  (its lower half) and ``(t/4, 2(t%4) + 1)`` of matrix ``i``; ``.trans`` stores element
  ``(r, c)`` at row ``c``, column ``r``.

A :class:`~.tensor_core.SimulationError` naming the line reports:

- a generic write (``st.shared``, ``stmatrix``) into bytes an issued store has not yet read
  (the staging buffer reused before ``cp.async.bulk.wait_group.read``), and a TMA load there;
- a store whose shared source is not 128-byte aligned, leaves the CTA's shared memory, holds
  bytes a TMA load has not yet written, bytes a thread wrote with a generic write and has not
  fenced since, or (inside the dims) bytes nothing ever wrote; a store with a negative
  coordinate (a store's box may pass the tensor's far edges, not start before it);
- a thread that exits with a store no ``wait_group`` retired (or never committed), so that its
  shared source may be unread as the CTA leaves;
- a store into a read-only buffer or outside every buffer (:class:`~.state.GlobalMemory`'s
  report, at its completion).
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

import numpy as np

from pyfuse.testing.ptx_sim.parse import Instr, Operand
from pyfuse.testing.ptx_sim.state import CTA, Group
from pyfuse.testing.ptx_sim.state import LaneView as LaneOps
from pyfuse.testing.ptx_sim.state import MachineView as Machine
from pyfuse.testing.ptx_sim.tensor_core import (
    NotModeledError,
    SimulationError,
    TensorMap,
    box_layout,
)
from pyfuse.testing.ptx_sim.values import Array

SOURCE_ALIGNMENT = 128  # the CUDA programming guide's TMA table: shared memory address
_RANK = re.compile(r"^[1-5]d$")


@dataclass(eq=False)
class PendingStore:
    """One TMA store issued and not yet completed: where it reads (absolute CTA shared
    addresses, batch offset included) and writes."""

    instr: Instr
    where: object
    cta: CTA
    thread: int
    tmap: TensorMap
    addresses: Array  # shared address of each box element, box order
    offsets: Array  # its global byte offset from the map's base
    inside: Array  # whether it lies inside the tensor's dims
    span: Array  # every shared byte of the box
    done: bool = False


def store_tile(machine: Machine, group: Group, instr: Instr, lanes: Array, ops: LaneOps) -> None:
    where = machine.where(group, instr)
    mods = instr.modifiers
    if any(m.startswith("L2::") for m in mods):
        raise NotModeledError(f"{where}: a TMA store's .L2::cache_hint is not modeled")
    rest = set(mods[6:])
    if (
        not _RANK.match(mods[3])
        or mods[4:6] != ("global", "shared::cta")
        or "bulk_group" not in rest
        or not rest <= {"bulk_group", "tile"}
        or len(instr.operands) != 2
    ):
        raise NotModeledError(f"{where}: only tiled TMA stores (shared::cta to global) are modeled")
    tensor, source = instr.operands
    maps = ops.address(Operand("address", base=tensor.base))
    coords = [ops.read(c, "s32") for c in tensor.items]
    sources = ops.address(source)
    ops.require_defined("a TMA operand")
    cta = group.cta
    for i, lane in enumerate(int(t) for t in lanes):
        tmap = machine.maps_by_address.get(int(maps[i]))
        if tmap is None:
            raise SimulationError(f"{where}: {int(maps[i]):#x} is not a tensor map's address")
        point = tuple(int(c[i]) for c in coords)
        if len(point) != len(tmap.dims) or len(point) != int(mods[3][0]):
            raise SimulationError(
                f"{where}: {len(point)} coordinates for a {mods[3]} store through a map of "
                f"rank {len(tmap.dims)}"
            )
        if min(point) < 0:
            raise SimulationError(
                f"{where}: a TMA store at {point}: a store's box may not start before the "
                "tensor (negative coordinate)"
            )
        src = int(sources[i])
        if src % SOURCE_ALIGNMENT:
            raise SimulationError(
                f"{where}: a TMA store's shared source {src:#x} is not "
                f"{SOURCE_ALIGNMENT}-byte aligned"
            )
        addresses, offsets, inside = box_layout(tmap, point, src)
        size = tmap.element_bytes
        local = (addresses[:, None] + np.arange(size)).reshape(-1)
        if (local < 0).any() or (local >= machine.smem_bytes).any():
            raise SimulationError(f"{where}: a TMA store's box outside the CTA's shared memory")
        base = int(cta.smem_offset[lane])
        span, addresses = local + base, addresses + base
        _check_source(cta, span, (addresses[inside][:, None] + np.arange(size)).reshape(-1), where)
        cta.store_reading[span] += 1
        store = PendingStore(instr, where, cta, lane, tmap, addresses, offsets, inside, span)
        cta.bulk_open.setdefault(lane, []).append(store)
        machine.stores.append(store)


def _check_source(cta: CTA, span: Array, read: Array, where: object) -> None:
    """A store may read ``span`` (``read``: the bytes of its elements inside the dims)."""
    if cta.tma_pending[span].any():
        raise SimulationError(
            f"{where}: a TMA store reads shared bytes a TMA load has not yet written"
        )
    writers = cta.unfenced_writer[span]
    if (writers >= 0).any():
        writer = int(writers[writers >= 0][0])
        raise SimulationError(
            f"{where}: a TMA store reads shared bytes that {cta.describe(np.array([writer]))} "
            "wrote with a generic-proxy store (st.shared, stmatrix) and did not follow with "
            "fence.proxy.async.shared::cta"
        )
    if not cta.smem_written[read].all():
        raise SimulationError(
            f"{where}: a TMA store reads shared bytes that nothing ever wrote (the staging "
            "buffer was not filled before the store)"
        )


def complete_store(machine: Machine, store: PendingStore) -> None:
    """Complete one store: read its shared bytes, write the elements inside the dims."""
    if store.done:
        return
    cta, size = store.cta, store.tmap.element_bytes
    inside = store.inside
    if inside.any():
        data = cta.smem[store.addresses[inside][:, None] + np.arange(size)]
        machine.memory.write(store.tmap.base + store.offsets[inside], data, store.where)
    cta.store_reading[store.span] -= 1
    store.done = True
    machine.stores.remove(store)


def commit_group(machine: Machine, group: Group, instr: Instr, lanes: Array, ops: LaneOps) -> None:
    cta = group.cta
    for lane in (int(t) for t in lanes):
        cta.bulk_committed.setdefault(lane, deque()).append(cta.bulk_open.pop(lane, []))


def wait_group(machine: Machine, group: Group, instr: Instr, lanes: Array, ops: LaneOps) -> None:
    (operand,) = instr.operands
    if operand.kind != "imm":
        raise SimulationError(f"{machine.where(group, instr)}: wait_group needs an immediate")
    keep = int(operand.value)
    cta = group.cta
    for lane in (int(t) for t in lanes):
        committed = cta.bulk_committed.get(lane)
        while committed and len(committed) > keep:
            for store in committed.popleft():
                complete_store(machine, store)


def check_exit(machine: Machine, cta: CTA, lanes: Array) -> None:
    """Threads ``lanes`` leave: none may have a store that no wait_group retired."""
    if not cta.bulk_open and not cta.bulk_committed:
        return
    for lane in (int(t) for t in lanes):
        groups = cta.bulk_committed.get(lane, deque())
        waiting = next((s for g in groups for s in g), None)
        unsent = next(iter(cta.bulk_open.get(lane, [])), None)
        store = waiting or unsent
        if store is None:
            continue
        how = "no cp.async.bulk.wait_group retired it" if waiting else "it was never committed"
        raise SimulationError(
            f"{cta.describe(np.array([lane]))} exits after the TMA store of line "
            f"{store.instr.line} ({store.instr.text}), but {how}: its shared source may not "
            "have been read yet (wait with cp.async.bulk.wait_group before leaving)"
        )


def generic_write(machine: Machine, cta: CTA, span: Array, writers: Array, where: object) -> None:
    """Threads ``writers`` write shared bytes ``span`` through the generic proxy."""
    if cta.store_reading[span].any():
        store = next(s for s in machine.stores if np.intersect1d(s.span, span).size)
        raise SimulationError(
            f"{where}: a generic-proxy store into shared bytes that the TMA store of line "
            f"{store.instr.line} ({store.instr.text}) has not yet read: the staging buffer was "
            "reused before cp.async.bulk.wait_group.read"
        )
    cta.unfenced_writer[span] = writers


def fence(machine: Machine, group: Group, instr: Instr, lanes: Array) -> None:
    """``fence.proxy.async[.space]``: the lanes' generic writes of shared memory published."""
    mods = instr.modifiers
    if mods[:2] != ("proxy", "async") or not (len(mods) == 2 or mods[2].startswith("shared")):
        return
    writers = group.cta.unfenced_writer
    low, high = int(lanes[0]), int(lanes[-1])
    hit = (writers >= low) & (writers <= high)
    if high - low + 1 != lanes.size:
        hit &= np.isin(writers, lanes)
    writers[hit] = -1


def stmatrix_writes(
    instr: Instr, lanes: Array, ops: LaneOps, where: object
) -> tuple[Array, Array, Array]:
    """The shared writes of one ``stmatrix`` by whole warps: (CTA-local start address, bytes,
    writing thread) per write."""
    mods = instr.modifiers
    counts = [int(m[1:]) for m in mods if m in ("x1", "x2", "x4")]
    if "m8n8" not in mods or "b16" not in mods or len(counts) != 1:
        raise NotModeledError(f"{where}: only stmatrix.m8n8.x{{1,2,4}}.b16 is modeled")
    (count,) = counts
    address_operand, values = instr.operands
    starts = ops.address(address_operand)
    regs = [ops.read(item, "b32").astype(np.uint32) for item in values.items]
    ops.require_defined("a stmatrix address or value")
    if len(regs) != count:
        raise SimulationError(f"{where}: stmatrix .x{count} with {len(regs)} registers")
    grid = lanes.reshape(-1, 32) if lanes.size % 32 == 0 else None
    if grid is None or (grid[:, 0] % 32).any() or (grid != grid[:, :1] + np.arange(32)).any():
        raise SimulationError(f"{where}: stmatrix needs all 32 threads of each warp")
    rows = starts.reshape(-1, 32)[:, : 8 * count]  # row r of matrix i: thread 8i + r
    if (rows % 16).any():
        bad = int(rows[rows % 16 != 0][0])
        raise SimulationError(f"{where}: a stmatrix row address {bad:#x} not 16-byte aligned")
    lane = np.arange(32)
    row, pair = lane // 4, lane % 4
    addresses, data = [], []
    for i, reg in enumerate(regs):
        bits = reg.reshape(-1, 32)
        if "trans" in mods:  # element (row, 2 pair + k) at row 2 pair + k, column row
            for k in (0, 1):
                addresses.append(rows[:, 8 * i + 2 * pair + k] + 2 * row)
                data.append(((bits >> np.uint32(16 * k)) & np.uint32(0xFFFF)).astype(np.uint16))
        else:
            addresses.append(rows[:, 8 * i + row] + 4 * pair)
            data.append(bits)
    width = data[0].itemsize
    raw = np.concatenate([np.ascontiguousarray(d.reshape(-1)) for d in data])
    writers = np.tile(lanes, len(data))
    return (
        np.concatenate([a.reshape(-1) for a in addresses]),
        raw.view(np.uint8).reshape(-1, width),
        writers,
    )
