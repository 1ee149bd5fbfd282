"""The sm_90a architecture's fixed facts, in one record: :data:`SM90`.

What the PTX ISA and the Hopper hardware fix for every sm_90a device: warp and warpgroup
sizes, the shapes one ``wgmma`` computes, the shared-memory swizzles that TMA and wgmma
agree on, the mbarrier object, TMA's alignment and box limits, the shared-memory budget a
kernel gets without opting in. Schedulers, the lowering and the PTX backend read them from
here rather than declaring their own copies; a value that the driver reports per device
(SM count, the shared-memory limits as queried) is a :class:`pyfuse.ir.target.TargetInfo`
field, whose defaults come from this record where the two overlap.

Guarantees: imports nothing from ``passes``, ``backend_ptx`` or ``frontend`` (``ir`` is below
them all). Byte counts are bytes, element counts elements; a derived fact is a property,
not a second field that could disagree.
"""

from __future__ import annotations

from pyfuse.ir.records import record


@record(frozen=True)
class HopperFacts:
    # ---- threads ----
    warp_size: int = 32
    warps_per_warpgroup: int = 4  # a wgmma is issued by 4 consecutive warps together
    max_threads_per_block: int = 1024
    named_barriers: int = 16  # bar.sync / bar.arrive ids 0..15

    # ---- wgmma (PTX ISA, "Warpgroup MMA": m64nNkK) ----
    wgmma_m: int = 64  # rows of A and of the accumulator, per warpgroup
    # K of one instruction spans 32 bytes of each operand row: 16 bf16/f16, 8 tf32, 32 fp8.
    wgmma_k_bytes: int = 32
    wgmma_n_step: int = 8  # N is a multiple of 8 ...
    wgmma_n_max: int = 256  # ... up to 256

    # ---- shared memory ----
    # The swizzles TMA and wgmma descriptors share, by the bytes of one swizzled row, widest
    # first (the unswizzled 16-byte layout is not used for operand tiles).
    swizzle_spans: tuple[int, ...] = (128, 64, 32)
    swizzle_atom_rows: int = 8  # a swizzle pattern repeats every 8 rows of one span
    mbarrier_bytes: int = 8  # one mbarrier object (a .b64 in shared memory)
    default_dynamic_smem_bytes: int = 48 * 1024  # more needs a per-function opt-in
    max_dynamic_smem_bytes: int = 227 * 1024  # the opt-in limit per block

    # ---- TMA (cuTensorMapEncodeTiled) ----
    # Global address, byte strides and a non-interleaved box's inner row: multiples of 16 B.
    tma_alignment: int = 16
    tma_max_rank: int = 5
    tma_max_box: int = 256  # elements along each box dim
    tma_smem_alignment: int = 128  # a tensor copy's shared-memory start
    max_portable_cluster_ctas: int = 8
    max_cluster_ctas: int = 16  # with the function's non-portable cluster size opt-in

    @property
    def warpgroup_threads(self) -> int:
        return self.warp_size * self.warps_per_warpgroup

    @property
    def max_swizzle_pattern_bytes(self) -> int:
        """The widest swizzle's pattern: a tile on this boundary starts every pattern fresh."""
        return self.swizzle_atom_rows * self.swizzle_spans[0]

    def wgmma_k(self, itemsize: int) -> int:
        """K of one wgmma for operands of ``itemsize`` bytes (16 for bf16 and f16)."""
        return self.wgmma_k_bytes // itemsize


SM90 = HopperFacts()
