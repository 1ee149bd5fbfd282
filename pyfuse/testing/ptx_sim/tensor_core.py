"""Hopper's asynchronous units as the simulator models them: mbarriers, TMA tile boxes and
wgmma's shared-memory operands, written from the PTX ISA and the CUDA driver's tensor-map
rules (not from pyfuse's emitter, whose kernels they check).

Guarantees:

- :class:`Mbarrier`: an arrival count and a transaction count per phase; a phase completes when
  both reach zero, flips the parity and rearms the count. ``try_wait.parity p`` is true once the
  phase of parity ``p`` has completed, i.e. while the current phase's parity differs from ``p``.
  More arrivals than pending is a :class:`SimulationError`; the transaction count may go
  below zero for a while (a peer's multicast can land before the local expect-tx).
- :func:`swizzled`: the shared-memory address a swizzle mode puts a byte at: bits 4.. of the
  address XOR its bits 7.. (three bits for 128B, two for 64B, one for 32B), on the absolute
  address, as both TMA and wgmma apply it.
- :func:`box_layout`: where each element of a tiled TMA box lies in shared memory (box order,
  innermost first, each row of the box ``box[0] * size`` bytes, swizzled on the absolute
  address) and in global memory, and whether it lies inside the tensor's dims: one layout for
  both directions. A swizzled map's inner box must be its swizzle span.
- :func:`tma_box`: the bytes one tiled TMA load writes and the values it reads: elements
  outside the tensor's dims are zero. (A TMA store of the same box, :mod:`.bulk_store`, reads
  the same bytes and writes only the elements inside the dims.)
- :func:`operand_addresses`: the shared-memory byte address of every element of a wgmma
  operand (rows = M or N, columns = K) from its descriptor: start, leading and stride byte
  offsets and swizzle (bits 0-13, 16-29, 32-45, 62-63, each offset in 16-byte units). K-major:
  8-row groups ``SBO`` apart, rows one swizzle span apart, K across the span (then ``LBO`` per
  span, unswizzled core matrices); MN-major: the span along M or N, spans ``LBO`` apart, K rows
  one span apart in groups of 8 ``SBO`` apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pyfuse.errors import PyfuseError
from pyfuse.testing.ptx_sim.values import Array

# CUtensorMapDataType -> (numpy dtype name, bytes), and CUtensorMapSwizzle -> span bytes.
TMA_ELEMENT = {
    0: ("uint8", 1), 1: ("uint16", 2), 2: ("uint32", 4), 3: ("int32", 4), 4: ("uint64", 8),
    5: ("int64", 8), 6: ("float16", 2), 7: ("float32", 4), 8: ("float64", 8), 9: ("bfloat16", 2),
}  # fmt: skip
TMA_SWIZZLE_SPAN = {0: 0, 1: 32, 2: 64, 3: 128}
DESCRIPTOR_SWIZZLE_SPAN = {0: 0, 1: 128, 2: 64, 3: 32}
_SWIZZLE_BITS = {0: 0, 32: 1, 64: 2, 128: 3}


class SimulationError(PyfuseError):
    """The simulated kernel did something the hardware does not allow or that races."""


class NotModeledError(PyfuseError):
    """The kernel uses an instruction or a form the simulator does not model (a gap of the
    simulator, not a fault of the kernel)."""


@dataclass
class Mbarrier:
    expected: int
    pending: int
    tx: int = 0
    parity: int = 0
    fenced: bool = False  # fence.mbarrier_init ran after the init
    phases: int = 0

    def arrive(self, count: int, where: object) -> bool:
        """``count`` arrivals; True when the phase completed."""
        if count > self.pending:
            raise SimulationError(
                f"{where}: {count} arrival(s) on an mbarrier with {self.pending} pending "
                f"(phase {self.phases}): more arrivals than its count ({self.expected})"
            )
        self.pending -= count
        return self._maybe_complete()

    def expect(self, nbytes: int) -> None:
        self.tx += nbytes

    def complete_tx(self, nbytes: int) -> bool:
        self.tx -= nbytes
        return self._maybe_complete()

    def _maybe_complete(self) -> bool:
        if self.pending == 0 and self.tx == 0:
            self.parity ^= 1
            self.pending = self.expected
            self.phases += 1
            return True
        return False

    def phase_done(self, parity: int) -> bool:
        return self.parity != parity


def swizzled(addresses: Array, span: int) -> Array:
    """Addresses after the swizzle of a ``span``-byte mode (0: none)."""
    bits = _SWIZZLE_BITS[span]
    if not bits:
        return addresses
    mask = (1 << bits) - 1
    result: Array = addresses ^ (((addresses >> 7) & mask) << 4)
    return result


@dataclass(frozen=True)
class TensorMap:
    """A tiled tensor map (``cuTensorMapEncodeTiled``'s arguments) and its global address."""

    base: int
    dtype_code: int
    dims: tuple[int, ...]  # innermost first
    strides: tuple[int, ...]  # byte strides of dims 1..rank-1
    box: tuple[int, ...]
    element_strides: tuple[int, ...]
    swizzle: int  # CUtensorMapSwizzle

    @property
    def element_bytes(self) -> int:
        return TMA_ELEMENT[self.dtype_code][1]

    @property
    def box_bytes(self) -> int:
        return int(np.prod(self.box)) * self.element_bytes


def box_layout(tmap: TensorMap, coords: tuple[int, ...], smem: int) -> tuple[Array, Array, Array]:
    """Where the elements of one tiled TMA box at ``coords`` sit, in box order (innermost
    first), both ways: (the shared address of each element's first byte, its global byte offset
    from the map's base, whether it lies inside the tensor's dims). The box's shared layout is
    the same for a load and for a store: rows of ``box[0] * size`` bytes from ``smem``, swizzled
    on the absolute address by the map's mode. An offset outside the dims is meaningless."""
    size = tmap.element_bytes
    span = TMA_SWIZZLE_SPAN[tmap.swizzle]
    if span and tmap.box[0] * size != span:
        raise NotModeledError(
            f"TMA: an inner box of {tmap.box[0] * size} B with a {span} B swizzle is not modeled"
        )
    if any(s != 1 for s in tmap.element_strides):
        raise NotModeledError("TMA: element strides other than 1 are not modeled")
    grids = np.meshgrid(*[np.arange(b) for b in reversed(tmap.box)], indexing="ij")
    index = [g.reshape(-1) for g in reversed(grids)]  # innermost first, box order
    inside = np.ones(index[0].shape, dtype=bool)
    offset = np.zeros(index[0].shape, dtype=np.int64)
    byte_strides = (size, *tmap.strides)
    for axis, (position, extent) in enumerate(zip(index, tmap.dims, strict=True)):
        element = coords[axis] + position
        inside &= (element >= 0) & (element < extent)
        offset += np.where(inside, element, 0) * byte_strides[axis]
    linear = np.arange(index[0].size, dtype=np.int64) * size
    return swizzled(smem + linear, span), offset, inside


def tma_box(
    tmap: TensorMap, coords: tuple[int, ...], dst: int, read_global: Callable[[Array, int], Array]
) -> tuple[Array, Array]:
    """(shared addresses, bytes) of one tiled load at ``coords`` into ``dst``.
    ``read_global(addresses, size)`` returns ``size`` bytes per address (a 2-D uint8 array)."""
    addresses, offset, inside = box_layout(tmap, coords, dst)
    data = np.zeros((addresses.size, tmap.element_bytes), dtype=np.uint8)
    if inside.any():
        data[inside] = read_global(tmap.base + offset[inside], tmap.element_bytes)
    return addresses, data


def operand_addresses(descriptor: int, rows: int, k: int, size: int, k_major: bool) -> Array:
    """Shared byte address of each element ``[row, kk]`` of a ``rows x k`` wgmma operand of
    ``size``-byte elements (a ``(rows, k)`` int array of the element's first byte)."""
    start = (descriptor & 0x3FFF) << 4
    lbo = ((descriptor >> 16) & 0x3FFF) << 4
    sbo = ((descriptor >> 32) & 0x3FFF) << 4
    span = DESCRIPTOR_SWIZZLE_SPAN[(descriptor >> 62) & 3]
    row = np.arange(rows, dtype=np.int64)[:, None]
    col = np.arange(k, dtype=np.int64)[None, :]
    if k_major:
        width = span or 16  # an unswizzled core matrix row is 16 bytes
        kb = col * size
        address = start + (row // 8) * sbo + (row % 8) * width + (kb // width) * lbo + kb % width
    else:
        if not span:
            raise NotModeledError("wgmma: an unswizzled MN-major operand is not modeled")
        mb = row * size
        address = start + (mb // span) * lbo + (col // 8) * sbo + (col % 8) * span + mb % span
    return swizzled(address, span)
