"""What a Hopper matmul kernel reads, as TMA sees it: the fusion's MMAs and their extents by
role, each operand's source input and the tensor whose memory axes describe it, the roles
of those axes, the swizzle of its tiles, and why TMA cannot load it where it cannot.

Expects a kernel fusion after ``translate_patterns`` (MmaOps whose operands are chains of
metadata ops from fusion inputs, or computed). Guarantees facts only: nothing here changes
the fusion. Used by the matmul scheduler's decline reason and parameters
(:mod:`schedule_matmul`, :mod:`matmul_params`), by lowering (:mod:`lower_matmul`), by
split-K and by the decomposition of MMAs TMA cannot load.
"""

from __future__ import annotations

from pyfuse.ir import dtypes
from pyfuse.ir.exprs import Expr, LoadStoreOp, MmaOp, ReshapeOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.hopper import SM90
from pyfuse.ir.tensor import TensorView, memory_strides
from pyfuse.passes.skip_intermediates import (
    is_metadata_op,
    is_row_major_contiguous,
    metadata_source,
)

OPERAND_DTYPES = (dtypes.bfloat16, dtypes.float16)
# One wgmma K for every operand dtype (both are 2 bytes): the K tile's inner split.
(WGMMA_K,) = {SM90.wgmma_k(dtype.itemsize) for dtype in OPERAND_DTYPES}
# The widest swizzle (bytes of one swizzled row): one row of the default K tile, and the line
# whose index the narrower swizzles XOR into their chunks. Every operand tile takes the
# widest of SM90.swizzle_spans whose rows tile its contiguous extent exactly.
WIDEST_SWIZZLE_BYTES = SM90.swizzle_spans[0]
# The front of shared memory holds the mbarriers, padded so the first operand tile starts on
# the widest swizzle's pattern boundary (which every narrower pattern divides).
BARRIER_REGION_BYTES = SM90.max_swizzle_pattern_bytes


def mma_ops(fusion: Fusion) -> list[MmaOp]:
    return [e for e in fusion.exprs() if isinstance(e, MmaOp)]


def operand_root(fusion: Fusion, operand: TensorView) -> TensorView | None:
    """The fusion input an MMA operand views through metadata ops, or None if computed."""
    source = metadata_source(operand)
    return source if fusion.is_input(source) else None


def operand_memory(fusion: Fusion, operand: TensorView) -> TensorView | None:
    """The tensor whose memory axes say how an MMA operand reads its input: the input, or
    the reshape of a row-major input nearest the MMA in the operand's metadata chain (a
    view, contiguous over its own logical axes: how ``split_k`` splits K into a batch).
    None when the chain computes, or reshapes a tensor that is not row-major memory."""
    tv = operand
    while not fusion.is_input(tv):
        definition = tv.definition
        if definition is None or not is_metadata_op(definition):
            return None
        if isinstance(definition, ReshapeOp):
            source = definition.tensor_inputs[0]
            if not fusion.is_input(source) or not is_row_major_contiguous(source):
                return None
            return tv
        tv = definition.tensor_inputs[0]
    return tv


def operand_swizzle_bytes(contiguous_tile: int, itemsize: int) -> int | None:
    """The swizzle of an operand tile whose contiguous dim spans ``contiguous_tile``
    elements: the widest mode whose rows tile it exactly (several boxes side by side when
    wider), None when no mode does (the tile is not a multiple of 32 bytes)."""
    for mode in SM90.swizzle_spans:
        if contiguous_tile * itemsize % mode == 0:
            return mode
    return None


def contiguous_role(fusion: Fusion, mma: MmaOp, operand: TensorView) -> str | None:
    """The role (m, n or k) of ``operand``'s contiguous memory dim, None when TMA cannot
    load it."""
    memory = operand_memory(fusion, operand)
    if memory is None:
        return None
    dims = operand_memory_roles(mma, operand, memory)
    return dims[-1][2] if dims else None


def tma_reason(root: TensorView) -> str | None:
    """Why TMA cannot load ``root`` (None when it can)."""
    strides = memory_strides(root)
    if not strides:
        return f"T{root.name} has no memory axes"
    if len(strides) > 5:
        return f"T{root.name} has {len(strides)} memory axes; a tensor map has at most 5"
    if strides[-1][1] != 1:
        return f"T{root.name}'s innermost stride is {strides[-1][1]}, TMA needs 1"
    for axis, stride in strides[:-1]:
        if stride * root.dtype.itemsize % SM90.tma_alignment:
            return (
                f"T{root.name}'s stride {stride} along {axis} is {stride * root.dtype.itemsize} "
                f"bytes, not a multiple of {SM90.tma_alignment} (a TMA copy needs that)"
            )
    return None


def operand_axis_roles(mma: MmaOp, operand: TensorView, memory: TensorView) -> dict[int, str]:
    """The role (m, n, k or batch) of every axis on the metadata chain from ``memory`` to
    ``operand`` (an input of ``mma``, or a cache of one), *for this use*: the operand's axes
    take the roles of the MMA output axes at their positions, and each op of the chain hands
    them back to its producer's axes. One tensor read as both operands (``a @ a``,
    ``x @ x.T``) thus has one set of roles per operand, which the IdModel cannot give: it
    maps such an input's axes to M, N and K at once."""
    return {key: role for key, (role, _) in _operand_axis_places(mma, operand, memory).items()}


def _operand_axis_places(
    mma: MmaOp, operand: TensorView, memory: TensorView
) -> dict[int, tuple[str, int]]:
    """:func:`operand_axis_roles` with each axis's position in ``operand``'s logical domain:
    the tile merges the axes of one role in that order."""
    places = {
        id(axis): (role, position)
        for position, (axis, role) in enumerate(zip(operand.logical, mma.roles(), strict=True))
    }
    tv = operand
    while tv is not memory:
        definition = tv.definition
        if definition is None or not (
            is_metadata_op(definition) or isinstance(definition, LoadStoreOp)
        ):
            break
        producer = definition.tensor_inputs[0]
        for producer_axis, consumer_axis in definition.logical_pairs(producer):
            place = places.get(id(consumer_axis))
            if place is not None:
                places.setdefault(id(producer_axis), place)
        tv = producer
    return places


def operand_memory_roles(
    mma: MmaOp, operand: TensorView, memory: TensorView
) -> list[tuple[int, int, str]] | None:
    """The memory dims of ``memory`` (an operand's input, or the split-K view of it) as
    (extent, element stride, role) for ``operand``'s use by ``mma``, outermost first, with
    adjacent dims of one role collapsed where their strides make one run; None when some
    memory axis has no M/N/K/batch role (a reshaped view)."""
    dims: list[tuple[int, int, str]] = []
    places = _operand_axis_places(mma, operand, memory)
    previous_position = -1
    for axis, stride in memory_strides(memory):
        place = places.get(id(axis))
        if place is None:
            return None
        role, position = place
        extent = axis.logical_extent
        # Two dims make one run only in the operand's own order: the tile merges the axes
        # of a role outer to inner as the operand lists them, so a batch-major view of
        # M-major memory (strides (256, 512, 1) for [batch, M, K]) is two runs, not one.
        if (
            dims
            and dims[-1][2] == role
            and dims[-1][1] == stride * extent
            and position > previous_position
        ):
            outer_extent, _, _ = dims[-1]
            dims[-1] = (outer_extent * extent, stride, role)
        else:
            dims.append((extent, stride, role))
        previous_position = position
    return dims


def layout_reason(mma: MmaOp, operand: TensorView, memory: TensorView) -> str | None:
    """Why one TMA box per tile cannot cover ``operand`` read from ``memory``: its M, N and
    K axes must each be one run of memory, and its batch axes one run of the MMA's batch
    (one batch coordinate indexes it) or broadcast."""
    dims = operand_memory_roles(mma, operand, memory)
    if dims is None:
        return f"T{memory.name}'s memory axes do not all map to MMA axes"
    own = "m" if operand is mma.a else "n"
    for role in (own, "k"):
        if sum(1 for _, _, r in dims if r == role) != 1:
            return (
                f"T{memory.name}'s {role.upper()} axes are not one run of memory "
                f"(dims {[(e, s, r) for e, s, r in dims]}); one TMA box cannot cover a tile"
            )
    batch = [extent for extent, _, role in dims if role == "batch" and extent > 1]
    if batch and (len(batch) > 1 or batch[0] != mma_extents(mma)["batch"]):
        return (
            f"T{memory.name}'s batch dims {batch} are not one run of the matmul's batch of "
            f"{mma_extents(mma)['batch']}; one batch coordinate cannot index them"
        )
    return None


def mma_extents(mma: MmaOp) -> dict[str, int]:
    sizes = {"m": 1, "n": 1, "k": 1, "batch": 1}
    for axis, role in zip(mma.output.logical, mma.roles(), strict=True):
        sizes[role] *= axis.logical_extent
    return sizes


def downstream_exprs(fusion: Fusion, roots: list[TensorView]) -> list[Expr]:
    reached = {id(tv) for tv in roots}
    found = []
    for expr in fusion.exprs():
        if any(id(tv) in reached for tv in expr.tensor_inputs):
            found.append(expr)
            reached.add(id(expr.output))
    return found


def operand_load_reason(fusion: Fusion, mma: MmaOp, name: str, root: TensorView) -> str | None:
    """Why TMA cannot load MMA operand ``name`` (``mma.a`` for "A", else ``mma.b``), which
    views input ``root``; None when it can."""
    operand = mma.a if name == "A" else mma.b
    memory = operand_memory(fusion, operand)
    if memory is None:
        return f"operand {name} reshapes T{root.name}, which is not row-major memory"
    return tma_reason(memory) or layout_reason(mma, operand, memory)
