"""Host-side TMA: plan a tiled tensor map, check it, and encode it through the driver.

A :class:`TensorMapPlan` is everything ``cuTensorMapEncodeTiled`` needs except the
base address (which changes per call): dtype, global dims and byte strides
(innermost first), box dims, element strides, swizzle, L2 promotion, OOB fill.
Building one validates the rules the driver enforces with a bare
``CUDA_ERROR_INVALID_VALUE`` (pitfall 4 in the notes), so a schedule learns why:

- rank 1..5; each global dim in [1, 2**32];
- byte strides (dims 1..rank-1) multiples of 16 and below 2**40;
- box dims in [1, 256]; without interleave the inner box is a multiple of 16 B;
- with a swizzle, the inner box is at most the swizzle span (32/64/128 B);
- element strides in [1, 8];
- at encode time, the global address 16-B aligned (32 B for 32B interleave).

The plan is frozen and hashable. :meth:`TensorMapPlan.tiled_map` gives its encoder arguments as
a :class:`~pyfuse.backend_ptx.tensor_maps.TiledMap`, the launch data a compiled kernel keeps
(and the variant cache stores); :func:`encode` encodes through that same record.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from pyfuse.backend_ptx import tensor_maps
from pyfuse.backend_ptx.smem_desc import Swizzle
from pyfuse.backend_ptx.tensor_maps import TiledMap
from pyfuse.ir.hopper import SM90
from pyfuse.ir.records import record


@record(frozen=True)
class TmaDType:
    name: str
    code: int  # CUtensorMapDataType
    size: int  # bytes per element


# CUtensorMapDataType values from cuda.h, by pyfuse/PTX dtype name.
TMA_DTYPES: dict[str, TmaDType] = {
    d.name: d
    for d in (
        TmaDType("u8", 0, 1),
        TmaDType("u16", 1, 2),
        TmaDType("u32", 2, 4),
        TmaDType("s32", 3, 4),
        TmaDType("u64", 4, 8),
        TmaDType("s64", 5, 8),
        TmaDType("f16", 6, 2),
        TmaDType("f32", 7, 4),
        TmaDType("f64", 8, 8),
        TmaDType("bf16", 9, 2),
    )
}


class Interleave(enum.IntEnum):
    NONE = 0
    B16 = 1
    B32 = 2


class L2Promotion(enum.IntEnum):
    NONE = 0
    B64 = 1
    B128 = 2
    B256 = 3


class OobFill(enum.IntEnum):
    ZERO = 0  # out-of-bounds elements read as zero
    NAN_REQUEST_ZERO_FMA = 1


MAX_RANK = SM90.tma_max_rank
MAX_BOX = SM90.tma_max_box
MAX_ELEMENT_STRIDE = 8
_MAX_DIM = 1 << 32
_MAX_STRIDE = 1 << 40


def _check_ints(values: Sequence[int], what: str, low: int, high: int) -> tuple[int, ...]:
    out = tuple(values)
    for v in out:
        if not isinstance(v, int) or isinstance(v, bool) or not low <= v <= high:
            raise ValueError(f"{what} must be integers in [{low}, {high}], got {list(out)}")
    return out


@record(frozen=True)
class TensorMapPlan:
    """A tiled tensor map minus its base address; all lists are innermost-first."""

    dtype: str
    global_dims: tuple[int, ...]
    global_strides: tuple[int, ...]  # bytes, for dims 1..rank-1
    box_dims: tuple[int, ...]
    element_strides: tuple[int, ...] = ()
    swizzle: Swizzle = Swizzle.NONE
    interleave: Interleave = Interleave.NONE
    l2_promotion: L2Promotion = L2Promotion.B128
    oob_fill: OobFill = OobFill.ZERO

    def __post_init__(self) -> None:
        if self.dtype not in TMA_DTYPES:
            raise ValueError(f"TMA dtype must be one of {sorted(TMA_DTYPES)}, got {self.dtype!r}")
        rank = len(self.global_dims)
        if not 1 <= rank <= MAX_RANK:
            raise ValueError(f"a tensor map has rank 1..{MAX_RANK}, got {rank}")
        if self.interleave is not Interleave.NONE and rank < 3:
            raise ValueError(f"an interleaved tensor map needs rank >= 3, got {rank}")
        _check_ints(self.global_dims, "global dims", 1, _MAX_DIM)
        if len(self.global_strides) != rank - 1:
            raise ValueError(
                f"a rank-{rank} map takes {rank - 1} byte strides (dims 1..rank-1), "
                f"got {list(self.global_strides)}"
            )
        _check_ints(self.global_strides, "global strides (bytes)", 1, _MAX_STRIDE - 1)
        for stride in self.global_strides:
            if stride % SM90.tma_alignment:
                raise ValueError(
                    f"global strides must be multiples of {SM90.tma_alignment} bytes, got {stride} "
                    f"(for {self.dtype} rows the pitch must be a multiple of "
                    f"{SM90.tma_alignment // self.element_size} elements)"
                )
        if len(self.box_dims) != rank:
            raise ValueError(f"box dims must have {rank} entries, got {list(self.box_dims)}")
        _check_ints(self.box_dims, "box dims", 1, MAX_BOX)
        strides = self.element_strides or (1,) * rank
        if len(strides) != rank:
            raise ValueError(f"element strides must have {rank} entries, got {list(strides)}")
        _check_ints(strides, "element strides", 1, MAX_ELEMENT_STRIDE)
        object.__setattr__(self, "element_strides", tuple(strides))
        inner = self.inner_box_bytes
        if self.interleave is Interleave.NONE:
            if inner % SM90.tma_alignment:
                raise ValueError(
                    f"the inner box ({self.box_dims[0]} x {self.dtype} = {inner} B) must be "
                    f"a multiple of {SM90.tma_alignment} bytes"
                )
            if self.swizzle is not Swizzle.NONE and inner > self.swizzle.span_bytes:
                raise ValueError(
                    f"the inner box ({inner} B) exceeds the {self.swizzle.name} swizzle span of "
                    f"{self.swizzle.span_bytes} B; use at most "
                    f"{self.swizzle.span_bytes // self.element_size} elements per box row"
                )
        elif self.interleave is Interleave.B32 and self.swizzle is not Swizzle.B32:
            raise ValueError("32B interleave requires the 32B swizzle")

    @property
    def rank(self) -> int:
        return len(self.global_dims)

    @property
    def element_size(self) -> int:
        return TMA_DTYPES[self.dtype].size

    @property
    def inner_box_bytes(self) -> int:
        return self.box_dims[0] * self.element_size

    @property
    def box_bytes(self) -> int:
        """Bytes one load delivers (the mbarrier expect_tx count), OOB fill included."""
        total = self.element_size
        for extent, stride in zip(self.box_dims, self.element_strides, strict=True):
            total *= -(-extent // stride)
        return total

    @property
    def address_alignment(self) -> int:
        return 32 if self.interleave is Interleave.B32 else SM90.tma_alignment

    def tiled_map(self) -> TiledMap:
        """The encoder's arguments for this plan (its enums as the CUDA values)."""
        return TiledMap(
            dtype_code=TMA_DTYPES[self.dtype].code,
            global_dims=tuple(self.global_dims),
            global_strides=tuple(self.global_strides),
            box_dims=tuple(self.box_dims),
            element_strides=tuple(self.element_strides),
            interleave=int(self.interleave),
            swizzle=self.swizzle.tma_code,
            l2_promotion=int(self.l2_promotion),
            oob_fill=int(self.oob_fill),
        )


def plan_tiled(
    dtype: str,
    shape: Sequence[int],
    strides: Sequence[int],
    box: Sequence[int],
    *,
    swizzle: Swizzle = Swizzle.NONE,
    l2_promotion: L2Promotion = L2Promotion.B128,
    oob_fill: OobFill = OobFill.ZERO,
) -> TensorMapPlan:
    """Plan from numpy-style (outermost-first) shape, element strides and box.

    The innermost dimension must be contiguous (stride 1): TMA reads rows of
    consecutive elements. A permuted allocation is expressed by listing the
    dims in memory order before calling this.
    """
    if not len(shape) == len(strides) == len(box):
        raise ValueError(
            f"shape, strides and box need one entry per dim, got {list(shape)}, "
            f"{list(strides)}, {list(box)}"
        )
    if not shape:
        raise ValueError("a tensor map needs at least one dimension")
    if strides[-1] != 1:
        raise ValueError(
            f"the innermost dim must be contiguous (stride 1), got strides {list(strides)}"
        )
    if dtype not in TMA_DTYPES:
        raise ValueError(f"TMA dtype must be one of {sorted(TMA_DTYPES)}, got {dtype!r}")
    size = TMA_DTYPES[dtype].size
    return TensorMapPlan(
        dtype=dtype,
        global_dims=tuple(reversed(shape)),
        global_strides=tuple(s * size for s in reversed(strides[:-1])),
        box_dims=tuple(reversed(box)),
        swizzle=swizzle,
        l2_promotion=l2_promotion,
        oob_fill=oob_fill,
    )


def check_address(plan: TensorMapPlan, global_address: int) -> int:
    return tensor_maps.check_address(global_address, plan.address_alignment)


def encode(plan: TensorMapPlan, global_address: int) -> object:
    """Encode ``plan`` at ``global_address``: a CUtensorMap to pass by value to a launch.

    Raises :class:`pyfuse.errors.LaunchError` when there is no driver or the driver
    refuses the map (the message then carries the plan).
    """
    return tensor_maps.encode(plan.tiled_map(), global_address, description=repr(plan))
