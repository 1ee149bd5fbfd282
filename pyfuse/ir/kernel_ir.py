"""Kernel IR: what ``passes.lower`` produces and ``backend_ptx.emit`` turns into PTX.

A :class:`Kernel` is a list of statements over scalar expressions. The expressions and
their simplifying builders are :mod:`pyfuse.ir.kernel_exprs`, re-exported here (``kir.add``,
``kir.Var``).

Statements: serial or unrolled :class:`For` loops, :class:`Let` (define a scalar once),
:class:`Assign` (update an accumulator), :class:`If`, :class:`Alloc` (registers or shared
memory), :class:`Store`, vector copies, :class:`Sync`, and :class:`ThreadReduce` (an
all-reduce of one value across the threads bound to reduction axes). A loop bound to a
thread or block index is not a loop here: lowering binds its variable with a ``Let``
of a :class:`Special` register and guards it with an ``If`` when the launch is larger.

Local buffers are register arrays: every index into one must fold to a constant once
unrolled loops are expanded, which the emitter checks.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from dataclasses import field

from pyfuse.ir import dtypes
from pyfuse.ir.dtypes import DType
from pyfuse.ir.hopper import SM90
from pyfuse.ir.kernel_exprs import (
    Binary,
    Buffer,
    Cast,
    Const,
    KExpr,
    Load,
    Param,
    Select,
    Special,
    SpecialKind,
    Unary,
    Var,
    add,
    all_of,
    const,
    floordiv,
    is_true,
    less_than,
    logical_and,
    mod,
    mul,
    upper_bound,
)
from pyfuse.ir.records import record

# Every public name, the expressions and builders of kernel_exprs included: passes and the
# emitter reach them all as ``kir.<name>``.
__all__ = [
    "KExpr",
    "Const",
    "Var",
    "SpecialKind",
    "Special",
    "Param",
    "Binary",
    "Unary",
    "Select",
    "Cast",
    "Buffer",
    "Load",
    "const",
    "upper_bound",
    "add",
    "mul",
    "floordiv",
    "mod",
    "less_than",
    "logical_and",
    "all_of",
    "is_true",
    "Stmt",
    "For",
    "Let",
    "Assign",
    "If",
    "Alloc",
    "Store",
    "VectorLoad",
    "VectorStore",
    "StageStore",
    "StagedLoad",
    "Sync",
    "ThreadReduce",
    "Comment",
    "ParamRole",
    "TensorParam",
    "Kernel",
    "walk",
    "TmaOperand",
    "TmaStore",
    "TmaVector",
    "TmaResidual",
    "EpilogueHandoff",
    "StreamK",
    "MatmulMainLoop",
]

# ---- statements ----------------------------------------------------------------------------


class Stmt:
    def children(self) -> Iterator[list[Stmt]]:
        return iter(())


@record(eq=False)
class For(Stmt):
    """``for var in range(extent)``; ``unroll`` loops are expanded by the emitter (their
    variable is a constant in each copy, so register-array indices fold)."""

    var: Var
    extent: KExpr
    body: list[Stmt] = field(default_factory=list)
    unroll: bool = False

    def children(self) -> Iterator[list[Stmt]]:
        yield self.body


@record(eq=False)
class Let(Stmt):
    """Define ``var`` as ``value`` (once per run of the enclosing block)."""

    var: Var
    value: KExpr


@record(eq=False)
class Assign(Stmt):
    """Update a variable defined by :class:`Let` (an accumulator)."""

    var: Var
    value: KExpr


@record(eq=False)
class If(Stmt):
    """``then`` where ``condition`` holds, else ``orelse``."""

    condition: KExpr
    then: list[Stmt] = field(default_factory=list)
    orelse: list[Stmt] = field(default_factory=list)

    def children(self) -> Iterator[list[Stmt]]:
        yield self.then
        yield self.orelse


@record(eq=False)
class Alloc(Stmt):
    """Allocate a local or shared ``buffer``."""

    buffer: Buffer


@record(eq=False)
class Store(Stmt):
    """``buffer[index] = value``."""

    buffer: Buffer
    index: KExpr
    value: KExpr


@record(eq=False)
class VectorLoad(Stmt):
    """Load ``width`` consecutive elements of ``source`` from ``source_index`` into the local
    ``target`` at ``target_index`` with one vector instruction (alignment is the caller's
    guarantee)."""

    target: Buffer
    target_index: KExpr
    source: Buffer
    source_index: KExpr
    width: int


@record(eq=False)
class VectorStore(Stmt):
    """Store ``width`` consecutive local elements of ``source`` to ``target`` with one vector
    instruction."""

    target: Buffer
    target_index: KExpr
    source: Buffer
    source_index: KExpr
    width: int


@record(eq=False)
class StageStore(Stmt):
    """Inside a :class:`MatmulMainLoop` epilogue: write the ``width`` adjacent columns of
    ``source`` (the output's values at the bound ``row``/``col``) into the shared-memory
    staging tile of ``stmt.stores[store]``, which the main loop then stores with TMA."""

    store: int
    source: Buffer
    width: int


@record(eq=False)
class StagedLoad(Stmt):
    """Inside a :class:`MatmulMainLoop` epilogue: read the ``width`` adjacent columns of a
    residual (an epilogue input the size of the output, ``stmt.residuals``) at the bound
    ``row``/``col`` into ``target`` from the staging buffer of ``stmt.stores[store]``, where
    the main loop has loaded the chunk's residual with TMA; the store's own pair at the
    same place is written after, from a value that depends on this read."""

    store: int
    target: Buffer
    width: int


@record(eq=False)
class Sync(Stmt):
    """``bar.sync 0``: every thread of the block."""


@record(eq=False)
class ThreadReduce(Stmt):
    """All-reduce ``var`` with ``op`` (sum, max, min) across the threads of the block that
    differ only in ``threads`` (the x-extent of the reduction's thread axis); every such
    thread ends with the result. ``workspace`` is the shared memory the cross-warp step uses
    (None when the reduction stays within a warp)."""

    var: Var
    op: str
    threads: int
    workspace: Buffer | None = None


@record(eq=False)
class Comment(Stmt):
    """A line of text copied into the PTX as a comment."""

    text: str


# ---- kernel --------------------------------------------------------------------------------


class ParamRole(enum.Enum):
    INPUT = "input"
    OUTPUT = "output"
    INTERMEDIATE = "intermediate"


@record(frozen=True)
class TensorParam:
    """A global tensor argument: its buffer, which fusion tensor it is and where it comes from
    (``index`` counts inputs, outputs or intermediates)."""

    buffer_name: str
    dtype: DType
    role: ParamRole
    index: int
    shape: tuple[int, ...]


@record(eq=False)
class Kernel:
    """One kernel: its tensor parameters, buffers, statements and launch shape."""

    name: str
    params: list[TensorParam]
    buffers: dict[str, Buffer]
    body: list[Stmt]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem_bytes: int = 0
    index_dtype: DType = dtypes.int32
    # CTAs per cluster along x (a 1-D cluster): launched with ``.reqnctapercluster``.
    cluster: tuple[int, int, int] = (1, 1, 1)

    def main_loop(self) -> MatmulMainLoop | None:
        """The Hopper matmul main loop (lowering puts it in the body, at the top level); None
        for every kernel without one."""
        return next((s for s in self.body if isinstance(s, MatmulMainLoop)), None)

    def walk(self) -> Iterator[Stmt]:
        """Every statement, depth first."""
        return walk(self.body)


def walk(body: Sequence[Stmt]) -> Iterator[Stmt]:
    """Every statement of ``body``, nested ones included, depth first in program order."""
    stack = list(reversed(body))
    while stack:
        stmt = stack.pop()
        yield stmt
        for block in reversed(list(stmt.children())):
            stack.extend(reversed(block))


# ---- Hopper matmul -------------------------------------------------------------------------


@record(frozen=True)
class TmaOperand:
    """One MMA operand loaded tile by tile with TMA from a global input. Dims are in memory
    order, outermost first; ``roles`` names each dim ("m", "n", "k" or "batch")."""

    buffer_name: str
    dtype: DType
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # elements; the innermost is 1
    box: tuple[int, ...]
    roles: tuple[str, ...]
    swizzle_bytes: int
    smem_offset: int  # bytes of stage 0 in dynamic shared memory
    stage_bytes: int  # bytes between stages
    stage_tile_bytes: int  # bytes of this operand's tile in one stage

    @property
    def k_major(self) -> bool:
        """The contiguous memory dim is K (else M or N: an MN-major, transposed operand)."""
        return self.roles[-1] == "k"

    @property
    def box_bytes(self) -> int:
        count = self.dtype.itemsize
        for extent in self.box:
            count *= extent
        return count

    @property
    def copies(self) -> int:
        """TMA copies per stage: the tile's bytes over one box's (a contiguous dim wider than
        the swizzle span is loaded as several boxes side by side)."""
        return max(1, self.stage_tile_bytes // self.box_bytes)


@record(frozen=True)
class TmaStore:
    """One epilogue output staged in shared memory and stored with TMA, a box of 64 rows (one
    consumer warpgroup's) by ``chunk_cols`` columns at a time. Dims are in memory order,
    outermost first, with roles "m", "n" (the last, contiguous) and at most one "batch".
    Each consumer warpgroup owns ``buffers`` staging buffers (2 or 4) of ``buffer_bytes``
    (64 rows of ``swizzle_bytes``): warpgroup ``w``'s buffer ``b`` starts ``(buffers w + b)
    * buffer_bytes`` after ``smem_offset``."""

    buffer_name: str
    dtype: DType
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # elements; the innermost is 1
    box: tuple[int, ...]
    roles: tuple[str, ...]
    swizzle_bytes: int  # one staged row: chunk_cols elements
    smem_offset: int
    buffers: int = 2  # per consumer warpgroup: up to buffers - 1 stores in flight

    @property
    def chunk_cols(self) -> int:
        return self.swizzle_bytes // self.dtype.itemsize

    @property
    def buffer_bytes(self) -> int:
        return 64 * self.swizzle_bytes

    @property
    def warpgroup_bytes(self) -> int:
        """One consumer warpgroup's buffers."""
        return self.buffers * self.buffer_bytes


@record(frozen=True)
class TmaVector:
    """An epilogue input read along one tile axis only: a bias along N (``role`` "n"), a
    per-row scale along M ("m"). Per tile, each consumer warpgroup's leader loads the
    ``span`` elements its rows or the tile's columns take (one TMA box of one row, zero past
    ``extent``) into the warpgroup's own buffer, warpgroup ``w``'s at ``smem_offset + w *
    buffer_bytes``; the epilogue reads it there (``MatmulMainLoop.vector_index``), not from
    global memory once per element."""

    buffer_name: str
    dtype: DType
    role: str  # "m" or "n"
    extent: int  # elements of the input: the tensor map's one dim
    span: int  # elements per warpgroup per tile: the box
    smem_offset: int

    @property
    def buffer_bytes(self) -> int:
        """One warpgroup's buffer: the box, rounded up to TMA's shared-memory alignment."""
        align = SM90.tma_smem_alignment
        return -(-self.span * self.dtype.itemsize // align) * align


@record(frozen=True)
class TmaResidual:
    """An epilogue input the size of the output (a residual), loaded by TMA a chunk at a
    time into the staging buffer of ``stores[store]`` before the epilogue reads it there
    (``StagedLoad``) and writes that store's output over it. Its map has the store's dims,
    roles, box and swizzle; only ``strides`` (and the base) are the input's own."""

    buffer_name: str
    dtype: DType
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # elements; the innermost is 1
    box: tuple[int, ...]
    roles: tuple[str, ...]
    swizzle_bytes: int
    store: int  # the TMA store whose staging buffers hold this residual's chunks

    @property
    def box_bytes(self) -> int:
        return 64 * self.swizzle_bytes


@record(frozen=True)
class EpilogueHandoff:
    """The tiles the consumers hand to the epilogue warps: per handoff tensor (one per MMA),
    the whole tile of it, in boxes of 64 rows (one consumer warpgroup's) by ``chunk_cols``
    columns laid out as the output's TMA-store staging (128-byte swizzled rows), box ``(w,
    c)`` of tensor ``t`` at ``smem_offset + t * tile_bytes + (w * chunks + c) * box_bytes``.
    The epilogue warps (the producer warpgroup's idle three) compute the rest of the epilogue
    from them and write the output over the first for the TMA stores."""

    smem_offset: int
    dtype: DType
    chunk_cols: int
    row_blocks: int  # 64-row boxes down the tile: the consumer warpgroups
    chunks: int  # boxes across it: tile_n / chunk_cols
    tensors: int = 1

    @property
    def box_bytes(self) -> int:
        return SM90.wgmma_m * self.chunk_cols * self.dtype.itemsize

    @property
    def tile_bytes(self) -> int:
        return self.row_blocks * self.chunks * self.box_bytes

    @property
    def nbytes(self) -> int:
        return self.tensors * self.tile_bytes


@record(frozen=True)
class StreamK:
    """Stream-K for a persistent main loop: the tiles of the workers' last, ragged wave (with
    the whole wave before it when the last is under half full; all tiles under one wave) are
    split along K over every worker (a CTA, or a cluster), each taking an equal run of K
    tiles through them (``backend_ptx/matmul_stream_k.py``); a worker that computes part of
    a tile without its last K tile stores its fp32 partial sums in ``buffer_name`` and
    raises its flag, and the one with the last K tile adds them before the epilogue. The
    buffer (a workspace parameter) holds ``slots * consumer warpgroups``
    u32 flags, which the launch zeroes (``flag_bytes``), then one partial tile per slot (a
    CTA of the launched grid) and warpgroup: ``accumulator registers x 128 threads`` fp32
    values per MMA, four registers of a thread side by side."""

    buffer_name: str
    slots: int  # CTAs of the launched grid
    warpgroups: int  # consumer warpgroups per CTA
    flag_bytes: int  # the zeroed flags, padded to keep the partial sums 16-byte aligned
    partial_bytes: int  # one warpgroup's partial sums of every MMA

    @property
    def nbytes(self) -> int:
        return self.flag_bytes + self.partial_bytes * self.slots * self.warpgroups


@record(eq=False)
class MatmulMainLoop(Stmt):
    """A warp-specialized Hopper matmul over output tiles: a producer warpgroup loads operand
    tiles with TMA into ``stages`` shared-memory buffers (full/empty mbarriers), consumer
    warpgroups run ``wgmma`` into fp32 register accumulators, then every consumer thread runs
    ``epilogue`` once per accumulator element it holds, with ``row``, ``col`` (global M and N
    indices), ``batch_index`` and ``element`` (the accumulator register index) bound.

    Tiles are visited in the schedule's order: ``grid_swizzle`` M tiles walked together with
    each N tile; ``persistent`` kernels loop over tiles with a stride of the grid size."""

    operands: list[TmaOperand]
    mmas: list[tuple[int, int, Buffer]]  # (A operand, B operand, accumulator registers)
    m: int
    n: int
    k: int
    batch: int
    tile_m: int
    tile_n: int
    tile_k: int
    stages: int
    consumer_warpgroups: int
    grid_swizzle: int
    persistent: bool
    row: Var
    col: Var
    batch_index: Var
    element: Var
    epilogue: list[Stmt] = field(default_factory=list)
    # Set when the epilogue handles two adjacent columns per call: ``pair_col`` is col + 1
    # and ``pair_element`` the accumulator register holding it (``element`` + 1).
    pair_col: Var | None = None
    pair_element: Var | None = None
    # CTA cluster of ``cluster_m`` x ``cluster_n`` tiles: the CTAs of a cluster compute
    # neighbouring tiles and multicast the operand tiles they share (TMA ``.multicast``).
    cluster_m: int = 1
    cluster_n: int = 1
    # Outputs the epilogue stages in shared memory (StageStore) for TMA stores; all share
    # one chunk width, and the epilogue's synchronization runs per chunk of columns.
    stores: list[TmaStore] = field(default_factory=list)
    # Ping-pong: two consumer warpgroups each compute whole tiles, taking the CTA's tiles in
    # turn, so that one's epilogue runs while the other's wgmmas run (else cooperative: the
    # consumer warpgroups split every tile's rows).
    pingpong: bool = False
    # Epilogue inputs loaded per tile into shared memory; the epilogue indexes a vector's
    # buffer with ``warpgroup`` (the consumer warpgroup), ``tile_row`` (the row inside the
    # warpgroup's rows of the tile) and ``tile_col`` (the column inside the tile), all three
    # bound with ``row`` and ``col``.
    vectors: list[TmaVector] = field(default_factory=list)
    warpgroup: Var | None = None
    tile_row: Var | None = None
    tile_col: Var | None = None
    # The epilogue warps: the consumers' ``epilogue`` ends by staging handoff tensor ``t``
    # (``StageStore`` t into ``handoff``'s tile t); the epilogue warps run ``late_epilogue``
    # per pair of columns, with ``handoff_values[t]`` (2 elements) holding the pair they
    # read of tile t, and its ``StageStore`` 0 writes the output over tile 0.
    handoff: EpilogueHandoff | None = None
    late_epilogue: list[Stmt] = field(default_factory=list)
    handoff_values: list[Buffer] = field(default_factory=list)
    # Stream-K (persistent, cooperative, no epilogue warps): see StreamK.
    stream_k: StreamK | None = None
    # Residuals loaded by TMA into the stores' staging buffers (see TmaResidual).
    residuals: list[TmaResidual] = field(default_factory=list)

    def children(self) -> Iterator[list[Stmt]]:
        yield self.epilogue
        yield self.late_epilogue

    @property
    def row_blocks(self) -> int:
        """64-row blocks of a tile one consumer warpgroup computes: all of them in a ping-pong
        kernel, else the tile's share of the cooperative warpgroups."""
        blocks = self.tile_m // 64
        return blocks if self.pingpong else blocks // self.consumer_warpgroups

    @property
    def cluster_size(self) -> int:
        return self.cluster_m * self.cluster_n

    @property
    def accumulator_registers(self) -> int:
        """fp32 accumulator registers per consumer thread per MMA (m64nNk16: N/2 per 64 rows)."""
        return self.tile_n // 2 * self.row_blocks
