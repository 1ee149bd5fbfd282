"""Hardware facts as data: what schedulers and lowering may assume about the GPU.

Schedulers never write a literal 132 or 227 KB: they read a :class:`TargetInfo`. The
default describes an H100/H200 (sm_90a); the runtime replaces it with the values the
driver reports for the device at hand, so a cache key includes the target it used.
What the architecture fixes for every sm_90a device (wgmma shapes, swizzles, mbarrier and
TMA limits) is :data:`pyfuse.ir.hopper.SM90`; the defaults below that the driver also
reports are taken from it.
"""

from __future__ import annotations

from pyfuse.ir.hopper import SM90
from pyfuse.ir.records import record


@record(frozen=True)
class TargetInfo:
    arch: str = "sm_90a"
    sm_count: int = 132
    warp_size: int = SM90.warp_size
    max_threads_per_block: int = SM90.max_threads_per_block
    max_registers_per_thread: int = 255
    registers_per_sm: int = 65536
    max_smem_per_block: int = SM90.max_dynamic_smem_bytes  # opt-in dynamic shared memory
    default_smem_per_block: int = SM90.default_dynamic_smem_bytes  # more needs an opt-in
    vector_bytes: int = 16  # widest global load/store per thread
    max_grid_x: int = 2**31 - 1
    max_grid_yz: int = 65535


HOPPER = TargetInfo()


# ---- the warp-specialized matmul's registers ----------------------------------------------

PRODUCER_REGISTERS = 40  # CUTLASS's load warpgroup: one thread issuing TMA needs few
# The producer warpgroup's where three of its warps run the epilogue (the handoff), one pair
# of columns at a time (88 spilled 16 B on a bias added after the linear).
EPILOGUE_REGISTERS = 104
MAX_CONSUMER_REGISTERS = 240


def register_split(
    consumer_warpgroups: int,
    epilogue_warps: bool,
    target: TargetInfo = HOPPER,
    maxnreg: int | None = None,
) -> tuple[int, int]:
    """(producer, consumer) ``setmaxnreg`` counts of a warp-specialized matmul CTA with one
    producer warpgroup, that fit its registers at entry.

    ptxas caps every thread at ``maxnreg`` or, with ``.maxntid`` + ``.minnctapersm 1``, at
    the register file over the thread count (rounded down to 8, at most 255); the producer
    warpgroup gives ``cap - 40`` per thread back (``cap - EPILOGUE_REGISTERS`` where three of
    its warps run the epilogue) and the consumers share it. The planner reads the consumers'
    count to refuse tiles whose accumulators would leave too few; the backend sets both.
    """
    warpgroup = SM90.warpgroup_threads
    threads = warpgroup * (consumer_warpgroups + 1)
    cap = maxnreg or min(
        target.max_registers_per_thread, target.registers_per_sm // threads // 8 * 8
    )
    producer = EPILOGUE_REGISTERS if epilogue_warps else PRODUCER_REGISTERS
    pool = cap * threads - producer * warpgroup
    consumer = min(MAX_CONSUMER_REGISTERS, pool // (warpgroup * consumer_warpgroups) // 8 * 8)
    return producer, consumer
