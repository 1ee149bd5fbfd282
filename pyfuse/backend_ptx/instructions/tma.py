"""Bulk tensor copies (TMA): global <-> shared tiles described by a CUtensorMap.

Coordinates are signed 32-bit *element* indices, innermost dimension first (the
order of the tensor map's ``globalDim``); loads may start out of bounds (the
box is filled), stores must start in bounds. The tensor-map operand is the
generic address of the by-value param (``memory.tensor_map_address``).

Completion: loads signal an mbarrier (``complete_tx::bytes``); stores form bulk
groups that the issuing thread commits and waits on. ``wait_group(n, read=True)``
only waits until the shared source has been read, which is what reuse needs.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyfuse.backend_ptx.operands import (
    AddressLike,
    Instr,
    Operand,
    Reg,
    as_address,
    check_choice,
    check_int,
    check_reg,
    fmt_operand,
)
from pyfuse.ir.hopper import SM90

_LOAD_DESTS = ("shared::cluster", "shared::cta")
_REDUCE_OPS = ("add", "min", "max", "inc", "dec", "and", "or", "xor")


def _tensor_operand(tensor_map: Reg, coords: Sequence[Operand], op: str) -> tuple[int, str]:
    check_reg(tensor_map, "b64", f"{op}: tensor map (generic address)")
    rank = len(coords)
    if not 1 <= rank <= SM90.tma_max_rank:
        raise ValueError(f"{op}: needs 1 to {SM90.tma_max_rank} coordinates, got {rank}")
    rendered = [fmt_operand(c, "s32", f"{op}: coordinate {i}") for i, c in enumerate(coords)]
    return rank, f"[{tensor_map}, {{{', '.join(rendered)}}}]"


def _cache_policy(policy: Reg | None, op: str) -> tuple[str, str]:
    if policy is None:
        return "", ""
    check_reg(policy, "b64", f"{op}: cache policy")
    return ".L2::cache_hint", f", {policy}"


def load_tile(
    dst: AddressLike,
    tensor_map: Reg,
    coords: Sequence[Operand],
    mbar: AddressLike,
    *,
    dst_space: str = "shared::cluster",
    multicast_mask: Operand | None = None,
    cache_policy: Reg | None = None,
) -> Instr:
    """Copy one box into shared memory and complete its bytes on ``mbar``.

    ``dst_space='shared::cluster'`` works from PTX 8.0 (a CTA-local address is a
    valid cluster address); ``'shared::cta'`` needs 8.6 and cannot multicast.
    ``multicast_mask`` (bit i = cluster CTA rank i) writes the box at the same
    offset in every CTA named, each of which must expect the bytes itself.
    """
    check_choice(dst_space, _LOAD_DESTS, "cp.async.bulk.tensor load: destination space")
    rank, tensor = _tensor_operand(tensor_map, coords, "cp.async.bulk.tensor load")
    dst_addr = as_address(dst, "cp.async.bulk.tensor load: destination")
    bar = as_address(mbar, "cp.async.bulk.tensor load: mbarrier")
    multicast, mask = "", ""
    if multicast_mask is not None:
        if dst_space != "shared::cluster":
            raise ValueError("cp.async.bulk.tensor: multicast needs dst_space 'shared::cluster'")
        multicast = ".multicast::cluster"
        if isinstance(multicast_mask, Reg):
            mask = f", {fmt_operand(multicast_mask, 'b16', 'multicast mask')}"
        else:
            mask = f", {check_int(multicast_mask, 'multicast mask', 1, 0xFFFF)}"
    hint, policy = _cache_policy(cache_policy, "cp.async.bulk.tensor load")
    text = (
        f"cp.async.bulk.tensor.{rank}d.{dst_space}.global.mbarrier::complete_tx::bytes"
        f"{multicast}{hint} {dst_addr}, {tensor}, "
        f"{bar}{mask}{policy}"
    )
    version = (8, 6) if dst_space == "shared::cta" else (8, 0)
    return Instr(text, min_version=version)


def store_tile(
    tensor_map: Reg,
    coords: Sequence[Operand],
    src: AddressLike,
    *,
    cache_policy: Reg | None = None,
) -> Instr:
    """Copy a shared-memory box to global; part of the thread's current bulk group.

    Generic-proxy writes to ``src`` (st.shared, stmatrix) need
    ``fence.proxy.async.shared::cta`` in every writer and a barrier before this.
    """
    rank, tensor = _tensor_operand(tensor_map, coords, "cp.async.bulk.tensor store")
    src_addr = as_address(src, "cp.async.bulk.tensor store: source")
    hint, policy = _cache_policy(cache_policy, "cp.async.bulk.tensor store")
    text = (
        f"cp.async.bulk.tensor.{rank}d.global.shared::cta.bulk_group{hint} "
        f"{tensor}, {src_addr}{policy}"
    )
    return Instr(text, min_version=(8, 0))


def reduce_tile(
    op: str,
    tensor_map: Reg,
    coords: Sequence[Operand],
    src: AddressLike,
    *,
    cache_policy: Reg | None = None,
) -> Instr:
    """Reduce a shared-memory box into global memory (e.g. ``add`` for split-K)."""
    check_choice(op, _REDUCE_OPS, "cp.reduce.async.bulk.tensor: op")
    rank, tensor = _tensor_operand(tensor_map, coords, "cp.reduce.async.bulk.tensor")
    src_addr = as_address(src, "cp.reduce.async.bulk.tensor: source")
    hint, policy = _cache_policy(cache_policy, "cp.reduce.async.bulk.tensor")
    text = (
        f"cp.reduce.async.bulk.tensor.{rank}d.global.shared::cta.{op}.tile.bulk_group{hint} "
        f"{tensor}, {src_addr}{policy}"
    )
    return Instr(text, min_version=(8, 0))


def commit_group() -> Instr:
    """Close the issuing thread's pending bulk stores into one group."""
    return Instr("cp.async.bulk.commit_group", min_version=(8, 0))


MAX_PENDING_GROUPS = 63


def wait_group(pending: int, *, read: bool = False) -> Instr:
    """Wait until at most ``pending`` bulk groups of this thread are outstanding.

    ``read=True`` waits only until their shared sources have been read (enough
    to overwrite the staging buffer); without it the global writes are complete.
    """
    check_int(pending, "cp.async.bulk.wait_group: pending groups", 0, MAX_PENDING_GROUPS)
    suffix = ".read" if read else ""
    return Instr(f"cp.async.bulk.wait_group{suffix} {pending}", min_version=(8, 0))


def prefetch_tensormap(tensor_map: Reg) -> Instr:
    """Pull the 128-byte descriptor into the cache once per CTA, before the first copy."""
    check_reg(tensor_map, "b64", "prefetch.tensormap: tensor map")
    return Instr(f"prefetch.tensormap [{tensor_map}]", min_version=(8, 0))


def prefetch_tile_l2(tensor_map: Reg, coords: Sequence[Operand]) -> Instr:
    """Warm L2 with a box that a later load_tile will fetch."""
    rank, tensor = _tensor_operand(tensor_map, coords, "cp.async.bulk.prefetch.tensor")
    return Instr(f"cp.async.bulk.prefetch.tensor.{rank}d.L2.global {tensor}", min_version=(8, 0))
