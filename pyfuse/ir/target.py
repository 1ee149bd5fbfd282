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
