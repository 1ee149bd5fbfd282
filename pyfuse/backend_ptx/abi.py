"""The kernel ABI that the emitter and the launcher share: parameter kinds and sizes.

Kept apart from the emitter so that launching a cached kernel (a cubin from the disk cache)
does not import the code that writes PTX.
"""

from __future__ import annotations

import enum


class ParamKind(enum.Enum):
    """How a kernel parameter is declared and how the launcher packs it."""

    PTR = "ptr"  # a global-memory address, declared .u64
    U32 = "u32"
    S32 = "s32"
    U64 = "u64"
    S64 = "s64"
    F32 = "f32"
    TENSOR_MAP = "tensormap"  # a 128-byte CUtensorMap passed by value


# The driver only needs a CUtensorMap 64-B aligned (cuda.h); both .align 64 and
# .align 128 ran on the H200.
TENSOR_MAP_BYTES = 128
TENSOR_MAP_ALIGN = 64
