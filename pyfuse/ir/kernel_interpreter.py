"""Run a kernel-IR :class:`~pyfuse.ir.kernel_ir.Kernel` on the CPU, as a vectorized SIMT machine.

Every thread of every block runs in lockstep: a scalar variable is a NumPy array with one lane
per thread, lanes ordered block by block (``ctaid.x`` fastest) and, within a block, ``tid.x``
fastest. ``If`` runs both branches, each on the lanes whose condition chose it; nested branches
narrow the active lanes further and only active lanes are read, written or checked.

Guarantees:

- Math follows each node's dtype: floats compute in float64 and round to the node's dtype
  (16-bit floats through float32, as a GPU computing in float32 rounds them); integers wrap in
  the node's dtype; ``floordiv``, ``mod`` and integer ``div`` truncate toward zero like C;
  ``maximum``/``minimum``/``max``/``min`` propagate NaN; float-to-integer casts truncate toward
  zero and saturate, NaN giving 0 (PTX ``cvt.rzi``). IEEE overflow gives inf/NaN silently.
- Every rule below raises :class:`KernelInterpreterError` naming the kernel, the statement and,
  where it is about one thread, its block and thread index: a load or store outside its buffer
  (name, index and size); two threads storing different values to one element in one statement
  (a race); a variable read or updated on a thread that never defined it; a ``For`` extent that
  differs between active threads; a local (register-array) index that differs between threads;
  a vector copy whose element offsets are not multiples of its width; a ``Sync`` or
  ``ThreadReduce`` reached by part of a block (a divergent barrier deadlocks on the GPU); a value
  outside ``[0, extent)`` bound to a ``Var`` or ``Special`` that declares an extent (the index
  simplifier relied on it); a dtype mismatch between a value and the variable or buffer it goes
  to (the lowering forgot a ``Cast``); a store into a read-only array (a kernel input in
  :func:`launch`); integer division by zero.
- Shared memory is one byte array of ``smem_bytes`` per block: shared buffers are views at their
  ``smem_offset`` (so aliasing buffers alias here too) and must fit. Shared and local memory
  start filled with 0xFF bytes (NaN for floats, -1 for integers) so reading memory nothing wrote
  shows up in the results; a ``ThreadReduce`` workspace is refilled so afterwards.
- ``Sync`` does nothing else: lockstep execution already orders every memory access.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from pyfuse.errors import InputError, PyfuseError
from pyfuse.ir import kernel_ir as kir
from pyfuse.ir.dtypes import DType
from pyfuse.ir.kernel_printer import stmt_to_lines
from pyfuse.ir.reference_math import (
    erf,
    gelu,
    gelu_tanh,
    power,
    relu,
    remainder,
    rsqrt,
    sigmoid,
    silu,
)
from pyfuse.ir.tensor import MemoryType

Array = npt.NDArray[Any]
Scalar = bool | int | float

# Bytes that poison fresh shared and local memory: NaN in every float type, -1 in integers.
_POISON = 0xFF


class KernelInterpreterError(PyfuseError):
    """The kernel did something that is a bug on the GPU (see the module doc for the rules)."""


def run_kernel(
    kernel: kir.Kernel, arrays: dict[str, Array], scalars: Mapping[str, Scalar] | None = None
) -> None:
    """Execute ``kernel`` once over its whole grid.

    ``arrays`` maps each global buffer name to a NumPy array of the buffer's dtype with
    non-negative strides; the kernel sees the memory from its first element to its last, flat
    (element offsets from the array's base, padding included: :func:`memory_span`), and stores
    write into it in place. ``scalars``
    gives the values of :class:`~pyfuse.ir.kernel_ir.Param` expressions by name."""
    with np.errstate(all="ignore"):
        _Machine(kernel, arrays, scalars or {}).run()


def launch(
    kernel: kir.Kernel,
    inputs: Sequence[Array],
    outputs: Sequence[Array],
    intermediates: Mapping[int, Array] | None = None,
    scalars: Mapping[str, Scalar] | None = None,
) -> None:
    """Bind arrays to ``kernel.params`` by role and index and run the kernel.

    Each array must have its parameter's shape and dtype; the kernel sees its memory, as
    :func:`memory_span` gives it, so an input must be laid out as the spec it was traced with
    says (row-major unless the spec gives strides; a strided view of a larger buffer for a
    padded one). Outputs are written in place; inputs are bound read-only. An
    intermediate not given in ``intermediates`` (keyed by index) gets poisoned scratch."""
    pools: dict[kir.ParamRole, Mapping[int, Array]] = {
        kir.ParamRole.INPUT: dict(enumerate(inputs)),
        kir.ParamRole.OUTPUT: dict(enumerate(outputs)),
        kir.ParamRole.INTERMEDIATE: intermediates or {},
    }
    arrays: dict[str, Array] = {}
    for param in kernel.params:
        array = pools[param.role].get(param.index)
        if array is None and param.role == kir.ParamRole.INTERMEDIATE:
            raw = np.full(int(np.prod(param.shape)) * param.dtype.itemsize, _POISON, np.uint8)
            array = raw.view(param.dtype.numpy()).reshape(param.shape)
        if array is None or array.dtype != param.dtype.numpy() or array.shape != param.shape:
            got = "nothing" if array is None else f"{array.dtype.name}{list(array.shape)}"
            raise InputError(
                f"{param.role.value} {param.index} ({param.buffer_name}): expected "
                f"{param.dtype.name}{list(param.shape)}, got {got}"
            )
        if param.role == kir.ParamRole.INPUT:
            array = array.view()
            array.flags.writeable = False
        arrays[param.buffer_name] = array
    run_kernel(kernel, arrays, scalars)


def memory_span(array: Array) -> Array:
    """The memory a kernel sees of ``array``: a flat view from its first element to its last,
    so a strided array's padding and a transposed one's memory order are what a kernel indexes
    (offsets are in elements from the base pointer, as the GPU's are)."""
    if array.flags.c_contiguous or array.flags.f_contiguous:
        flat = np.ravel(array, order="K")
        if np.shares_memory(flat, array) or array.size == 0:
            return flat
    itemsize = array.itemsize
    if any(stride < 0 or stride % itemsize for stride in array.strides):
        raise InputError(
            f"an array with byte strides {array.strides} cannot be bound: strides must be "
            f"non-negative multiples of the item size {itemsize}"
        )
    if array.size == 0:
        return np.empty(0, array.dtype)
    last = 0
    for extent, stride in zip(array.shape, array.strides, strict=True):
        last += (extent - 1) * stride
    span = last // itemsize + 1
    return np.lib.stride_tricks.as_strided(
        array, (span,), (itemsize,), writeable=array.flags.writeable
    )


# ---- math ----------------------------------------------------------------------------------


def _math_type(dtype: DType) -> type[np.generic]:
    """The NumPy type a node of ``dtype`` computes in."""
    if dtype.is_floating:
        return np.float64
    return np.int64 if dtype.is_integer else np.bool_


def _narrow(values: Array, dtype: DType) -> Array:
    """Math-type ``values`` rounded (floats) or wrapped (integers) to ``dtype``."""
    if dtype.is_bool:
        return values if values.dtype == np.bool_ else values != 0
    if dtype.is_floating and dtype.itemsize < 4:
        # A GPU computes 16-bit math in float32 and rounds the float32 result once more.
        values = values.astype(np.float32)
    return values.astype(dtype.numpy())


def _cast(values: Array, dtype: DType) -> Array:
    """A cast: float to integer truncates and saturates with NaN giving 0, like ``cvt.rzi``."""
    if dtype.is_integer and values.dtype.kind not in "iub":  # any float, bf16 ('V') too
        info = np.iinfo(dtype.numpy())
        wide = np.nan_to_num(np.trunc(values.astype(np.float64)), nan=0.0)
        saturated: Array = np.clip(wide, info.min, info.max)
        return saturated.astype(dtype.numpy())
    if dtype.is_floating and dtype.itemsize <= 4 and values.dtype.kind in "iu":
        # Rounded once, as cvt.rn.f32.s64 does: through float64 a 64-bit integer would round
        # twice (CPU fuzzer, seed 441: sin of such a value).
        return _narrow(values.astype(np.float32), dtype)
    return _narrow(values.astype(_math_type(dtype)), dtype)


def _c_div(lhs: Array, rhs: Array) -> Array:
    if lhs.dtype.kind == "f":
        return np.trunc(lhs / rhs)
    quotient = np.abs(lhs) // np.abs(rhs)
    return np.where((lhs < 0) != (rhs < 0), -quotient, quotient)


_UNARY: dict[str, Callable[[Array], Array]] = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "tanh": np.tanh,
    "sigmoid": sigmoid, "relu": relu, "gelu": gelu, "gelu_tanh": gelu_tanh, "silu": silu,
    "sqrt": np.sqrt, "rsqrt": rsqrt, "reciprocal": np.reciprocal, "sin": np.sin, "cos": np.cos,
    "erf": erf, "floor": np.floor, "ceil": np.ceil, "round": np.rint, "trunc": np.trunc,
    "bitwise_not": np.invert,
}  # fmt: skip
# Unary ops that stay integral on an integer node; every other op computes in float64.
_INTEGRAL_UNARY = frozenset({"neg", "abs", "relu", "bitwise_not"})


def _quietly(ufunc: Callable[[Array, Array], Array]) -> Callable[[Array, Array], Array]:
    """``ufunc`` without NumPy's warnings: an integer division by zero gives 0, as the
    kernels' does."""

    def apply(lhs: Array, rhs: Array) -> Array:
        with np.errstate(all="ignore"):
            return np.asarray(ufunc(lhs, rhs))

    return apply


_ARITHMETIC: dict[str, Callable[[Array, Array], Array]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "pow": _quietly(power),
    "maximum": np.maximum, "minimum": np.minimum, "max": np.maximum, "min": np.minimum,
    "fmod": _quietly(np.fmod), "remainder": _quietly(remainder),
    "floor_divide": _quietly(np.floor_divide), "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
}  # fmt: skip
_COMPARE: dict[str, Callable[[Array, Array], Array]] = {
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "eq": np.equal, "ne": np.not_equal,
}  # fmt: skip
_LOGICAL: dict[str, Callable[[Array, Array], Array]] = {
    "logical_and": np.logical_and, "logical_or": np.logical_or,
}  # fmt: skip
_REDUCE: dict[str, Callable[..., Array]] = {
    "sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min,
}  # fmt: skip


# ---- the machine ---------------------------------------------------------------------------


class _Machine:
    def __init__(
        self, kernel: kir.Kernel, arrays: dict[str, Array], scalars: Mapping[str, Scalar]
    ) -> None:
        self.kernel = kernel
        self.scalars = scalars
        self.current: kir.Stmt | None = None
        self.block_threads = int(np.prod(kernel.block))
        self.blocks = int(np.prod(kernel.grid))
        self.lanes = self.blocks * self.block_threads
        lane = np.arange(self.lanes, dtype=np.int64)
        thread, self.block_of_lane = lane % self.block_threads, lane // self.block_threads
        # x is the fastest-varying coordinate of both the thread and the block index.
        tid_z, tid_y, tid_x = np.unravel_index(thread, kernel.block[::-1])
        ctaid_z, ctaid_y, ctaid_x = np.unravel_index(self.block_of_lane, kernel.grid[::-1])
        coordinates = (tid_x, tid_y, tid_z, ctaid_x, ctaid_y, ctaid_z)
        self.specials: dict[kir.SpecialKind, Array] = dict(
            zip(_TIDS + _CTAIDS, coordinates, strict=True)
        )
        self.specials[kir.SpecialKind.NTID_X] = np.full(lane.size, kernel.block[0])
        self.specials[kir.SpecialKind.NCTAID_X] = np.full(lane.size, kernel.grid[0])
        # The launch size behind each index register, for the extent rule.
        self.launch_extent = dict(zip(_TIDS + _CTAIDS, kernel.block + kernel.grid, strict=True))
        self.globals = {name: self._bind_global(name, array) for name, array in arrays.items()}
        self.smem = np.full((self.blocks, kernel.smem_bytes), _POISON, dtype=np.uint8)
        self.shared: dict[str, Array] = {}
        self.local: dict[str, Array] = {}
        # Each variable: its per-lane values and which lanes have defined it.
        self.vars: dict[str, tuple[Array, Array]] = {}

    def _bind_global(self, name: str, array: Array) -> Array:
        flat = memory_span(array)
        buffer = self.kernel.buffers.get(name)
        if buffer and flat.dtype != buffer.dtype.numpy():
            raise InputError(f"array for buffer {name} must be of its dtype {buffer.dtype.name}")
        return flat

    def run(self) -> None:
        self.exec_block(self.kernel.body, np.arange(self.lanes, dtype=np.int64))

    def fail(self, message: str, lane: int | None = None) -> KernelInterpreterError:
        """The error to raise, naming the kernel, the statement and the thread of ``lane``."""
        where = "" if lane is None else f" ({self.describe(lane)})"
        text = f"kernel {self.kernel.name}: {message}{where}"
        if self.current is not None:
            text += f"\n  in: {stmt_to_lines(self.current)[0].strip()}"
        return KernelInterpreterError(text)

    def describe(self, lane: int) -> str:
        block = tuple(int(self.specials[kind][lane]) for kind in _CTAIDS)
        thread = tuple(int(self.specials[kind][lane]) for kind in _TIDS)
        return f"block {block}, thread {thread}"

    # ---- statements ------------------------------------------------------------------------

    def exec_block(self, stmts: list[kir.Stmt], lanes: Array) -> None:
        if lanes.size == 0:
            return  # no thread reaches this code
        for stmt in stmts:
            self.execute(stmt, lanes)

    def execute(self, stmt: kir.Stmt, lanes: Array) -> None:
        self.current = stmt
        if isinstance(stmt, kir.For):
            extent = self.uniform(self.evaluate(stmt.extent, lanes), lanes, "loop extent")
            for iteration in range(extent):
                self.current = stmt
                self.define(stmt.var, np.full(lanes.size, iteration), lanes)
                self.exec_block(stmt.body, lanes)
        elif isinstance(stmt, kir.If):
            if not stmt.condition.dtype.is_bool:
                raise self.fail(f"condition has dtype {stmt.condition.dtype.name}, not bool")
            condition = self.evaluate(stmt.condition, lanes)
            self.exec_block(stmt.then, lanes[condition])
            self.exec_block(stmt.orelse, lanes[~condition])
        elif isinstance(stmt, kir.Let | kir.Assign):
            if isinstance(stmt, kir.Assign):
                self.read_var(stmt.var, lanes)  # an update needs a defined accumulator
            self.check_dtype(stmt.value.dtype, stmt.var.dtype, f"variable {stmt.var.name}")
            self.define(stmt.var, self.evaluate(stmt.value, lanes), lanes)
        elif isinstance(stmt, kir.Alloc):
            self.allocate(stmt.buffer)
        elif isinstance(stmt, kir.Store):
            self.check_dtype(stmt.value.dtype, stmt.buffer.dtype, f"buffer {stmt.buffer.name}")
            index = self.index(stmt.buffer, stmt.index, lanes)
            self.write(stmt.buffer, index, lanes, self.evaluate(stmt.value, lanes))
        elif isinstance(stmt, kir.VectorLoad | kir.VectorStore):
            self.vector_copy(stmt, lanes)
        elif isinstance(stmt, kir.Sync):
            self.check_whole_blocks(lanes, "sync")
        elif isinstance(stmt, kir.ThreadReduce):
            self.thread_reduce(stmt, lanes)
        elif not isinstance(stmt, kir.Comment):
            raise self.fail(f"no rule for statement {type(stmt).__name__}")

    def define(self, var: kir.Var, values: Array, lanes: Array) -> None:
        self.check_extent(var.extent, values, lanes, f"variable {var.name}")
        if var.name not in self.vars:
            self.vars[var.name] = (
                np.zeros(self.lanes, var.dtype.numpy()),
                np.zeros(self.lanes, bool),
            )
        storage, defined = self.vars[var.name]
        if storage.dtype != var.dtype.numpy():
            raise self.fail(f"variable {var.name} was {storage.dtype.name}, now {var.dtype.name}")
        storage[lanes] = values.astype(storage.dtype)
        defined[lanes] = True

    def allocate(self, buffer: kir.Buffer) -> None:
        """Registers and shared memory are allocated once per kernel; an ``Alloc`` that runs
        again (in a loop) names the same storage, as on the GPU."""
        if buffer.memory == MemoryType.LOCAL and buffer.name not in self.local:
            size = self.lanes * buffer.size * buffer.dtype.itemsize
            poisoned = np.full(size, _POISON, dtype=np.uint8).view(buffer.dtype.numpy())
            self.local[buffer.name] = poisoned.reshape(-1, buffer.size)
        elif buffer.memory == MemoryType.SHARED and buffer.name not in self.shared:
            start, itemsize = buffer.smem_offset, buffer.dtype.itemsize
            end = start + buffer.size * itemsize
            if start < 0 or start % itemsize or end > self.kernel.smem_bytes:
                raise self.fail(
                    f"shared buffer {buffer.name} spans bytes [{start}, {end}), which must be "
                    f"{itemsize}-byte aligned and within smem_bytes={self.kernel.smem_bytes}"
                )
            self.shared[buffer.name] = self.smem[:, start:end].view(buffer.dtype.numpy())
        elif buffer.memory == MemoryType.GLOBAL:
            raise self.fail(f"Alloc of global buffer {buffer.name}: global memory is a parameter")

    def vector_copy(self, stmt: kir.VectorLoad | kir.VectorStore, lanes: Array) -> None:
        width = stmt.width
        if width < 1 or stmt.source.dtype != stmt.target.dtype:
            raise self.fail("vector copy needs width >= 1 and one dtype on both sides")
        source = self.index(stmt.source, stmt.source_index, lanes)
        target = self.index(stmt.target, stmt.target_index, lanes)
        for buffer, offsets in ((stmt.source, source), (stmt.target, target)):
            misaligned = np.flatnonzero(offsets % width)
            if misaligned.size:
                first = misaligned[0]
                raise self.fail(
                    f"vector of width {width}: offset {offsets[first]} into {buffer.name} is "
                    f"not a multiple of {width} (misaligned)",
                    int(lanes[first]),
                )
        # Lane-major copies of every element, so races across the whole vector are seen.
        element = np.repeat(np.arange(width), lanes.size)
        vector_lanes = np.tile(lanes, width)
        values = self.read(stmt.source, np.tile(source, width) + element, vector_lanes)
        self.write(stmt.target, np.tile(target, width) + element, vector_lanes, values)

    def check_whole_blocks(self, lanes: Array, what: str) -> None:
        counts = np.bincount(self.block_of_lane[lanes], minlength=self.blocks)
        partial = np.flatnonzero((counts != 0) & (counts != self.block_threads))
        if partial.size:
            block = int(partial[0])
            first = int(lanes[np.argmax(self.block_of_lane[lanes] == block)])
            raise self.fail(
                f"{what} reached by {counts[block]} of {self.block_threads} threads of a block: "
                "a barrier under a thread-dependent condition deadlocks on the GPU",
                first,
            )

    def thread_reduce(self, stmt: kir.ThreadReduce, lanes: Array) -> None:
        self.check_whole_blocks(lanes, "thread_reduce")
        block_x, threads = self.kernel.block[0], stmt.threads
        if threads < 1 or block_x % threads or stmt.op not in _REDUCE:
            raise self.fail(
                f"thread_reduce needs op sum, prod, max or min and threads dividing block x "
                f"({block_x}); got {stmt.op} over {threads}"
            )
        self.read_var(stmt.var, lanes)
        storage, _ = self.vars[stmt.var.name]
        # tid.x is fastest and block x is a multiple of ``threads``, so every run of ``threads``
        # consecutive lanes is one group (same block, tid.y and tid.z).
        groups = storage.astype(_math_type(stmt.var.dtype)).reshape(-1, threads)
        reduced = _REDUCE[stmt.op](groups, axis=1)
        result = _narrow(np.repeat(reduced, threads), stmt.var.dtype)
        storage[lanes] = result[lanes]
        workspace = stmt.workspace
        if workspace is not None:
            if workspace.memory != MemoryType.SHARED:
                raise self.fail(f"workspace {workspace.name} must be shared memory")
            # The reduction owns its workspace (lowering emits no Alloc for it); it must fit.
            self.allocate(workspace)
            # Its contents are undefined after the reduction; poison them so reuse shows.
            start = workspace.smem_offset
            end = start + workspace.size * workspace.dtype.itemsize
            self.smem[np.unique(self.block_of_lane[lanes]), start:end] = _POISON

    # ---- memory ----------------------------------------------------------------------------

    def index(self, buffer: kir.Buffer, expr: kir.KExpr, lanes: Array) -> Array:
        if not expr.dtype.is_integer:
            raise self.fail(f"index into {buffer.name} has dtype {expr.dtype.name}")
        index = self.evaluate(expr, lanes).astype(np.int64)
        if buffer.memory == MemoryType.LOCAL:
            # Register arrays need an index known at compile time, hence the same on every lane.
            self.uniform(index, lanes, f"index into local buffer {buffer.name}")
        return index

    def locate(
        self, buffer: kir.Buffer, index: Array, lanes: Array, action: str
    ) -> tuple[Array, tuple[Array, ...]]:
        """The storage of ``buffer`` and where ``index`` is in it, after the bounds check."""
        memory = {MemoryType.GLOBAL: self.globals, MemoryType.SHARED: self.shared}
        storage = memory.get(buffer.memory, self.local).get(buffer.name)
        if storage is None:
            missing = "an array" if buffer.memory == MemoryType.GLOBAL else "its Alloc"
            raise self.fail(f"{action} {buffer.name} without {missing}")
        size = storage.shape[-1]
        outside = np.flatnonzero((index < 0) | (index >= size))
        if outside.size:
            first = outside[0]
            raise self.fail(
                f"{action} {buffer.name}[{index[first]}] is out of bounds: "
                f"{buffer.memory.name.lower()} buffer {buffer.name} has {size} elements",
                int(lanes[first]),
            )
        if buffer.memory == MemoryType.GLOBAL:
            return storage, (index,)
        if buffer.memory == MemoryType.SHARED:
            return storage, (self.block_of_lane[lanes], index)
        return storage, (lanes, index)

    def read(self, buffer: kir.Buffer, index: Array, lanes: Array) -> Array:
        storage, where = self.locate(buffer, index, lanes, "load from")
        values: Array = storage[where]
        return values

    def write(self, buffer: kir.Buffer, index: Array, lanes: Array, values: Array) -> None:
        storage, where = self.locate(buffer, index, lanes, "store to")
        if not storage.flags.writeable:
            raise self.fail(f"store to read-only buffer {buffer.name} (a kernel input?)")
        if buffer.memory != MemoryType.LOCAL:
            self.check_race(buffer, np.ravel_multi_index(where, storage.shape), values, lanes)
        storage[where] = values

    def check_race(self, buffer: kir.Buffer, address: Array, values: Array, lanes: Array) -> None:
        order = np.argsort(address, kind="stable")
        sorted_address = address[order]
        # Compare bit patterns, so NaN stored twice is the same value.
        bits = values[order].view(np.dtype(f"u{values.dtype.itemsize}"))
        clash = np.flatnonzero(
            (sorted_address[1:] == sorted_address[:-1]) & (bits[1:] != bits[:-1])
        )
        if clash.size:
            first, second = order[clash[0]], order[clash[0] + 1]
            raise self.fail(
                f"write race: two threads store different values to {buffer.name} at the same "
                f"element in one statement, this one and {self.describe(int(lanes[second]))}",
                int(lanes[first]),
            )

    # ---- expressions -----------------------------------------------------------------------

    def evaluate(self, expr: kir.KExpr, lanes: Array) -> Array:
        """``expr`` on the active ``lanes``, in ``expr.dtype``."""
        if isinstance(expr, kir.Const):
            return _narrow(
                np.full(lanes.size, expr.value, dtype=_math_type(expr.dtype)), expr.dtype
            )
        if isinstance(expr, kir.Var):
            return self.read_var(expr, lanes)
        if isinstance(expr, kir.Special):
            values = self.specials[expr.kind][lanes]
            launched = self.launch_extent.get(expr.kind)
            if expr.extent is not None and launched is not None and launched > expr.extent:
                raise self.fail(
                    f"{expr} declares extent {expr.extent} but the launch has {launched}; "
                    "index simplification may have dropped a guard"
                )
            return _narrow(values, expr.dtype)
        if isinstance(expr, kir.Param):
            if expr.name not in self.scalars:
                raise self.fail(f"no value given for scalar parameter {expr.name}")
            return _narrow(np.full(lanes.size, self.scalars[expr.name]), expr.dtype)
        if isinstance(expr, kir.Binary):
            return self.binary(expr, lanes)
        if isinstance(expr, kir.Unary):
            return self.unary(expr, lanes)
        if isinstance(expr, kir.Select):
            condition = self.evaluate(expr.condition, lanes).astype(np.bool_)
            if_true = _cast(self.evaluate(expr.if_true, lanes), expr.dtype)
            if_false = _cast(self.evaluate(expr.if_false, lanes), expr.dtype)
            return np.where(condition, if_true, if_false)
        if isinstance(expr, kir.Cast):
            return _cast(self.evaluate(expr.operand, lanes), expr.dtype)
        if isinstance(expr, kir.Load):
            self.check_dtype(expr.buffer.dtype, expr.dtype, f"load of {expr.buffer.name}")
            return self.read(expr.buffer, self.index(expr.buffer, expr.index, lanes), lanes)
        raise self.fail(f"no rule for expression {type(expr).__name__}")

    def read_var(self, var: kir.Var, lanes: Array) -> Array:
        if var.name not in self.vars:
            raise self.fail(f"variable {var.name} is read before it is defined", int(lanes[0]))
        storage, defined = self.vars[var.name]
        if not defined[lanes].all():
            missing = int(lanes[np.argmin(defined[lanes])])
            raise self.fail(f"variable {var.name} is read before it is defined", missing)
        if storage.dtype != var.dtype.numpy():
            raise self.fail(
                f"variable {var.name} is {storage.dtype.name}, read as {var.dtype.name}"
            )
        values: Array = storage[lanes]
        return values

    def binary(self, expr: kir.Binary, lanes: Array) -> Array:
        lhs = self.evaluate(expr.lhs, lanes)
        rhs = self.evaluate(expr.rhs, lanes)
        if expr.op in _COMPARE:
            floating = expr.lhs.dtype.is_floating or expr.rhs.dtype.is_floating
            common = np.float64 if floating else np.int64
            return _COMPARE[expr.op](lhs.astype(common), rhs.astype(common))
        if expr.op in _LOGICAL:
            return _LOGICAL[expr.op](lhs.astype(np.bool_), rhs.astype(np.bool_))
        math_type = _math_type(expr.dtype)
        lhs, rhs = lhs.astype(math_type), rhs.astype(math_type)
        integral = not expr.dtype.is_floating
        if expr.op in ("floordiv", "mod") or (expr.op == "div" and integral):
            zero = np.flatnonzero(rhs == 0)
            if integral and zero.size:
                raise self.fail(f"integer {expr.op} by zero", int(lanes[zero[0]]))
            result = np.fmod(lhs, rhs) if expr.op == "mod" else _c_div(lhs, rhs)
        elif expr.op == "div":
            result = lhs / rhs
        elif expr.op in _ARITHMETIC:
            result = _ARITHMETIC[expr.op](lhs, rhs)
        else:
            raise self.fail(f"no rule for binary op {expr.op}")
        return _narrow(result, expr.dtype)

    def unary(self, expr: kir.Unary, lanes: Array) -> Array:
        operand = self.evaluate(expr.operand, lanes)
        if expr.op == "logical_not":
            return _narrow(np.logical_not(operand.astype(np.bool_)), expr.dtype)
        if expr.op not in _UNARY:
            raise self.fail(f"no rule for unary op {expr.op}")
        integral = expr.dtype.is_integer and expr.op in _INTEGRAL_UNARY
        result = _UNARY[expr.op](operand.astype(np.int64 if integral else np.float64))
        return _cast(result, expr.dtype)

    # ---- checks ----------------------------------------------------------------------------

    def uniform(self, values: Array, lanes: Array, what: str) -> int:
        """The one value every active lane has; raises when lanes disagree."""
        differs = np.flatnonzero(values != values[0])
        if differs.size:
            other = differs[0]
            raise self.fail(
                f"{what} must be the same on every thread, but is {values[0]} on lane "
                f"{int(lanes[0])} and {values[other]} here",
                int(lanes[other]),
            )
        return int(values[0])

    def check_extent(self, extent: int | None, values: Array, lanes: Array, what: str) -> None:
        if extent is None:
            return
        outside = np.flatnonzero((values < 0) | (values >= extent))
        if outside.size:
            first = outside[0]
            raise self.fail(
                f"{what} declares extent {extent} but takes the value {values[first]}; index "
                "simplification relied on the extent",
                int(lanes[first]),
            )

    def check_dtype(self, value: DType, target: DType, what: str) -> None:
        if value != target:
            raise self.fail(f"{what} is {target.name} but the value is {value.name}; add a Cast")


_TIDS = (kir.SpecialKind.TID_X, kir.SpecialKind.TID_Y, kir.SpecialKind.TID_Z)
_CTAIDS = (kir.SpecialKind.CTAID_X, kir.SpecialKind.CTAID_Y, kir.SpecialKind.CTAID_Z)
