"""Hardware facts as data: what schedulers and lowering may assume about the GPU.

Schedulers never write a literal 132 or 227 KB: they read a :class:`TargetInfo`. The
default describes an H100/H200 (sm_90a); the runtime replaces it with the values the
driver reports for the device at hand, so a cache key includes the target it used.
"""

from __future__ import annotations

from pyfuse.ir.records import record


@record(frozen=True)
class TargetInfo:
    arch: str = "sm_90a"
    sm_count: int = 132
    warp_size: int = 32
    max_threads_per_block: int = 1024
    max_registers_per_thread: int = 255
    registers_per_sm: int = 65536
    max_smem_per_block: int = 232448  # opt-in dynamic shared memory per block, bytes
    default_smem_per_block: int = 49152  # more needs a function attribute set by the driver
    vector_bytes: int = 16  # widest global load/store per thread
    max_grid_x: int = 2**31 - 1
    max_grid_yz: int = 65535


HOPPER = TargetInfo()
