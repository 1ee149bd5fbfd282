"""Kernel IR: what ``passes.lower`` produces and ``backend_ptx.emit`` turns into PTX.

A :class:`Kernel` is a list of statements over scalar expressions. Expressions are
immutable trees with a dtype (an index is an int32 or int64 expression; tensor math
uses the tensor dtypes). Builders (:func:`add`, :func:`mul`, :func:`floordiv`,
:func:`mod`) fold constants and use the known ranges of loop variables, so indices
derived from splits and merges come out as simple as a person would write them.

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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import field
from typing import TypeVar

from pyfuse.ir import dtypes
from pyfuse.ir.dtypes import DType
from pyfuse.ir.hopper import SM90
from pyfuse.ir.records import record
from pyfuse.ir.tensor import MemoryType

# ---- expressions --------------------------------------------------------------------------


class KExpr:
    """A scalar expression; immutable and hashable."""

    dtype: DType

    def __str__(self) -> str:
        raise NotImplementedError

    def __getstate__(self) -> dict[str, object]:
        # Copies and unpickled nodes compute their own hash (see _hash_once): Load's hashes its
        # buffer's id, and string hashes differ from one process to the next.
        return {name: value for name, value in self.__dict__.items() if name != "_hash"}


_Expression = TypeVar("_Expression", bound=KExpr)


def _hash_once(cls: type[_Expression]) -> type[_Expression]:
    """Cache the dataclass-generated hash of an expression class on each node.

    The generated ``__hash__`` hashes every field, so hashing an expression walks its whole
    tree; the emitter hashes every node it visits (its per-statement memo), which made those
    walks a large part of emission. The cached value is the generated one, so dicts and sets
    of expressions behave exactly as before.
    """
    field_hash: Callable[[_Expression], int] = cls.__hash__

    def cached_hash(self: _Expression) -> int:
        value: int | None = self.__dict__.get("_hash")
        if value is None:
            value = field_hash(self)
            object.__setattr__(self, "_hash", value)  # not a field: eq and repr ignore it
        return value

    cls.__hash__ = cached_hash  # type: ignore[method-assign, assignment]
    return cls


@_hash_once
@record(frozen=True)
class Const(KExpr):
    """A literal of ``dtype``."""

    value: bool | int | float
    dtype: DType = dtypes.int64

    def __str__(self) -> str:
        return str(self.value)


@_hash_once
@record(frozen=True)
class Var(KExpr):
    """A scalar variable: a loop index (with its trip count as ``extent``) or a let-bound value.
    ``extent`` bounds a loop index to ``[0, extent)``; it drives index simplification."""

    name: str
    dtype: DType = dtypes.int64
    extent: int | None = None

    def __str__(self) -> str:
        return self.name


class SpecialKind(enum.Enum):
    TID_X = "tid.x"
    TID_Y = "tid.y"
    TID_Z = "tid.z"
    CTAID_X = "ctaid.x"
    CTAID_Y = "ctaid.y"
    CTAID_Z = "ctaid.z"
    NTID_X = "ntid.x"
    NCTAID_X = "nctaid.x"


@_hash_once
@record(frozen=True)
class Special(KExpr):
    """A special register (thread or block index); ``extent`` is its launch size."""

    kind: SpecialKind
    extent: int | None = None
    dtype: DType = dtypes.int32

    def __str__(self) -> str:
        return f"%{self.kind.value}"


@_hash_once
@record(frozen=True)
class Param(KExpr):
    """A scalar kernel parameter."""

    name: str
    dtype: DType = dtypes.int64

    def __str__(self) -> str:
        return f"${self.name}"


@_hash_once
@record(frozen=True)
class Binary(KExpr):
    """``lhs op rhs``. Index ops: add sub mul floordiv mod min max; compares give bool; tensor
    math uses the pointwise op names of :class:`pyfuse.ir.exprs.BinaryOpType`."""

    op: str
    lhs: KExpr
    rhs: KExpr
    dtype: DType

    def __str__(self) -> str:
        symbol = _INFIX.get(self.op)
        if symbol is not None:
            return f"({self.lhs} {symbol} {self.rhs})"
        return f"{self.op}({self.lhs}, {self.rhs})"


_INFIX = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "div": "/",
    "floordiv": "//",
    "mod": "%",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "eq": "==",
    "ne": "!=",
    "logical_and": "&&",
    "logical_or": "||",
}


@_hash_once
@record(frozen=True)
class Unary(KExpr):
    """``op(operand)`` with the op names of :class:`pyfuse.ir.exprs.UnaryOpType`."""

    op: str
    operand: KExpr
    dtype: DType

    def __str__(self) -> str:
        return f"{self.op}({self.operand})"


@_hash_once
@record(frozen=True)
class Select(KExpr):
    """``condition ? if_true : if_false``."""

    condition: KExpr
    if_true: KExpr
    if_false: KExpr
    dtype: DType

    def __str__(self) -> str:
        return f"({self.condition} ? {self.if_true} : {self.if_false})"


@_hash_once
@record(frozen=True)
class Cast(KExpr):
    """``operand`` converted to ``dtype``."""

    operand: KExpr
    dtype: DType

    def __str__(self) -> str:
        return f"{self.dtype.short}({self.operand})"


@record(eq=False)
class Buffer:
    """Storage of one tensor in a kernel: a global tensor (a pointer parameter), a shared
    memory region, or a local register array of ``size`` elements."""

    name: str
    dtype: DType
    memory: MemoryType
    size: int = 1
    # Byte offset of a shared buffer inside the kernel's dynamic shared memory.
    smem_offset: int = 0

    def __str__(self) -> str:
        return self.name


@_hash_once
@record(frozen=True)
class Load(KExpr):
    """``buffer[index]`` (element index)."""

    buffer: Buffer
    index: KExpr
    dtype: DType

    def __str__(self) -> str:
        return f"{self.buffer.name}[{self.index}]"

    def __hash__(self) -> int:
        return hash((id(self.buffer), self.index))


# ---- simplifying builders ------------------------------------------------------------------


def const(value: int, dtype: DType = dtypes.int64) -> Const:
    return Const(value, dtype)


def _value(expr: KExpr) -> int | None:
    if isinstance(expr, Const) and isinstance(expr.value, int) and not isinstance(expr.value, bool):
        return expr.value
    return None


def upper_bound(expr: KExpr) -> int | None:
    """An exclusive upper bound of a non-negative index expression, when one is known."""
    if isinstance(expr, Const):
        return int(expr.value) + 1
    if isinstance(expr, Var | Special):
        return expr.extent
    if isinstance(expr, Binary):
        lhs, rhs = upper_bound(expr.lhs), upper_bound(expr.rhs)
        if expr.op == "add" and lhs is not None and rhs is not None:
            return lhs + rhs - 1
        if expr.op == "mul" and lhs is not None and rhs is not None:
            return (lhs - 1) * (rhs - 1) + 1
        if expr.op == "mod" and _value(expr.rhs) is not None:
            bound = _value(expr.rhs)
            assert bound is not None
            return bound if lhs is None else min(lhs, bound)
        if expr.op == "floordiv" and lhs is not None and _value(expr.rhs):
            divisor = _value(expr.rhs)
            assert divisor is not None
            return -(-lhs // divisor)
    return None


def _index_dtype(a: KExpr, b: KExpr) -> DType:
    return dtypes.int64 if dtypes.int64 in (a.dtype, b.dtype) else a.dtype


def _recombined(a: KExpr, b: KExpr) -> KExpr | None:
    """``x`` when ``a + b`` is ``(x // c) * c + x % c`` (a merge undone by its split)."""
    if not (isinstance(a, Binary) and a.op == "mul" and isinstance(a.lhs, Binary)):
        return None
    quotient = a.lhs
    if not (isinstance(b, Binary) and b.op == "mod" and quotient.op == "floordiv"):
        return None
    if quotient.lhs == b.lhs and quotient.rhs == b.rhs == a.rhs:
        return b.lhs
    return None


def add(a: KExpr, b: KExpr) -> KExpr:
    va, vb = _value(a), _value(b)
    if va is not None and vb is not None:
        return Const(va + vb, _index_dtype(a, b))
    if va == 0:
        return b
    if vb == 0:
        return a
    recombined = _recombined(a, b)
    if recombined is not None:
        return recombined
    return Binary("add", a, b, _index_dtype(a, b))


def mul(a: KExpr, b: KExpr) -> KExpr:
    va, vb = _value(a), _value(b)
    if va is not None and vb is not None:
        return Const(va * vb, _index_dtype(a, b))
    if va == 0 or vb == 0:
        return Const(0, _index_dtype(a, b))
    if va == 1:
        return b
    if vb == 1:
        return a
    return Binary("mul", a, b, _index_dtype(a, b))


def _split_index(a: KExpr, divisor: int | None) -> tuple[KExpr, KExpr] | None:
    """``(x, y)`` when ``a`` is ``x * divisor + y`` with ``0 <= y < divisor``: the index of a
    split's outer and inner loops, which ``// divisor`` and ``% divisor`` take apart again."""
    if divisor is None or not (isinstance(a, Binary) and a.op == "add"):
        return None
    outer, inner = a.lhs, a.rhs
    inner_bound = upper_bound(inner)
    if (
        isinstance(outer, Binary)
        and outer.op == "mul"
        and _value(outer.rhs) == divisor
        and inner_bound is not None
        and inner_bound <= divisor
    ):
        return outer.lhs, inner
    return None


def floordiv(a: KExpr, b: KExpr) -> KExpr:
    va, vb = _value(a), _value(b)
    if vb == 1:
        return a
    if va is not None and vb is not None:
        return Const(va // vb, _index_dtype(a, b))
    bound = upper_bound(a)
    if vb is not None and bound is not None and bound <= vb:
        return Const(0, _index_dtype(a, b))
    parts = _split_index(a, vb)
    if parts is not None:
        return parts[0]  # (x * c + y) // c == x
    return Binary("floordiv", a, b, _index_dtype(a, b))


def mod(a: KExpr, b: KExpr) -> KExpr:
    va, vb = _value(a), _value(b)
    if vb == 1:
        return Const(0, _index_dtype(a, b))
    if va is not None and vb is not None:
        return Const(va % vb, _index_dtype(a, b))
    bound = upper_bound(a)
    if vb is not None and bound is not None and bound <= vb:
        return a
    parts = _split_index(a, vb)
    if parts is not None:
        return parts[1]  # (x * c + y) % c == y
    return Binary("mod", a, b, _index_dtype(a, b))


def less_than(a: KExpr, b: KExpr) -> KExpr:
    va, vb = _value(a), _value(b)
    if va is not None and vb is not None:
        return Const(va < vb, dtypes.bool_)
    bound = upper_bound(a)
    if vb is not None and bound is not None and bound <= vb:
        return Const(True, dtypes.bool_)
    return Binary("lt", a, b, dtypes.bool_)


def logical_and(a: KExpr, b: KExpr) -> KExpr:
    if isinstance(a, Const):
        return b if a.value else a
    if isinstance(b, Const):
        return a if b.value else b
    return Binary("logical_and", a, b, dtypes.bool_)


def all_of(conditions: Sequence[KExpr]) -> KExpr:
    result: KExpr = Const(True, dtypes.bool_)
    for condition in conditions:
        result = logical_and(result, condition)
    return result


def is_true(expr: KExpr) -> bool:
    return isinstance(expr, Const) and expr.value is True


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
    Each consumer warpgroup owns two staging buffers of ``buffer_bytes`` (64 rows of
    ``swizzle_bytes``): warpgroup ``w``'s buffer ``b`` starts ``(2 w + b) * buffer_bytes``
    after ``smem_offset``."""

    buffer_name: str
    dtype: DType
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # elements; the innermost is 1
    box: tuple[int, ...]
    roles: tuple[str, ...]
    swizzle_bytes: int  # one staged row: chunk_cols elements
    smem_offset: int

    @property
    def chunk_cols(self) -> int:
        return self.swizzle_bytes // self.dtype.itemsize

    @property
    def buffer_bytes(self) -> int:
        return 64 * self.swizzle_bytes


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
    """Stream-K for a persistent main loop: the tiles past the workers' last whole wave but
    one (all tiles when there are fewer than two waves) are split along K over every worker
    (a CTA, or a cluster), each taking an equal run of K tiles through them; a worker that
    computes part of a tile without its first K tile stores its fp32 partial sums in
    ``buffer_name`` and raises its flag, and the one with the first K tile adds them before
    the epilogue. The buffer (a workspace parameter) holds ``slots * consumer warpgroups``
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

    def children(self) -> Iterator[list[Stmt]]:
        yield self.epilogue
        yield self.late_epilogue

    @property
    def row_blocks(self) -> int:
        """64-row blocks of a tile one consumer warpgroup computes."""
        return self.tile_m // 64 if self.pingpong else 1

    @property
    def cluster_size(self) -> int:
        return self.cluster_m * self.cluster_n

    @property
    def accumulator_registers(self) -> int:
        """fp32 accumulator registers per consumer thread per MMA (m64nNk16: N/2 per 64 rows)."""
        return self.tile_n // 2 * self.row_blocks
