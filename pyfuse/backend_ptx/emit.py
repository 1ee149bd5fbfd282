"""Kernel IR to PTX: :func:`emit_ptx` turns one :class:`~pyfuse.ir.kernel_ir.Kernel` into a module.

Layout of the emitted kernel:

- one ``.u64`` param per :class:`~pyfuse.ir.kernel_ir.TensorParam`, in order, converted with
  ``cvta.to.global`` once at entry; ``.maxntid`` is the kernel's block, so ptxas knows the
  register budget; ``smem_bytes > 0`` declares the dynamic ``.extern .shared`` array, whose
  32-bit window address is read once (shared buffers sit at their ``smem_offset`` in it).
- registers: a variable is one register; a LOCAL buffer is one register per element, so every
  index into it must fold to a constant; bool lives in predicates (one byte, 0/1, in memory).
- unrolled loops are expanded here with their variable bound to an immediate, and every
  expression whose operands are immediates is computed in Python (indices into register
  arrays fold); a guard that no thread can fail in a copy (``s * T + t < n`` below the last
  copies of a ragged row) is dropped there. A serial loop with a constant trip count of 1
  runs its body once, inline.
- addresses: an index is split into ``sum(coefficient * term) + constant``; each term becomes one
  64-bit ``mad.wide`` into the base pointer and the constant the ``[reg+offset]`` immediate, so
  the copies of an unrolled loop differ only in that immediate (ptxas then keeps one address
  register for all of them) and address math never wraps, even past 2**31 elements
  (:mod:`pyfuse.backend_ptx.emit_memory`, with the loads, stores and vector copies).

Scalar math (folding, dtype conversion, op expansions and their accuracy) is in
:mod:`pyfuse.backend_ptx.emit_math`. The output is deterministic: the same kernel IR gives the
same text. A construct the emitter cannot express raises :class:`~pyfuse.errors.ScheduleError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyfuse.backend_ptx.abi import ParamKind
from pyfuse.backend_ptx.emit_math import (
    Value,
    compute_type,
    round_to,
    storage_class,
    storage_type,
)
from pyfuse.backend_ptx.emit_memory import Location, MemoryAccess, StagingTarget, Tensor
from pyfuse.backend_ptx.emit_scalar import ScalarMath
from pyfuse.backend_ptx.emitter import Directives, KernelBuilder, PtxModule
from pyfuse.backend_ptx.instructions import arith, control, logic, memory, shuffle, special
from pyfuse.backend_ptx.operands import Address, Reg, RegClass
from pyfuse.errors import ScheduleError
from pyfuse.ir import dtypes
from pyfuse.ir import kernel_ir as kir
from pyfuse.ir.dtypes import DType
from pyfuse.ir.hopper import SM90
from pyfuse.ir.target import TargetInfo
from pyfuse.ir.tensor import MemoryType

_COMPARISONS = frozenset({"lt", "le", "gt", "ge", "eq", "ne"})
_LOGICAL = frozenset({"logical_and", "logical_or"})
_REDUCE_COMBINE = {"sum": "add", "prod": "mul", "max": "maximum", "min": "minimum"}
_WARP = SM90.warp_size


def emit_ptx(kernel: kir.Kernel, target: TargetInfo) -> str:
    """A PTX module with one ``.entry`` for ``kernel`` that assembles for ``target.arch``."""
    module = PtxModule(target=target.arch)
    main_loop = kernel.main_loop()
    if main_loop is not None:
        # The matmul template loads with the first matmul kernel. A matmul kernel caps
        # registers at entry so its warpgroups can trade them (setmaxnreg).
        from pyfuse.backend_ptx.matmul_template import matmul_directives

        directives = matmul_directives(kernel)
    else:
        directives = Directives(maxntid=kernel.block)
    builder = module.kernel(kernel.name, directives)
    _KernelEmitter(kernel, builder, main_loop).emit()
    return module.render()


def _assigned(kernel: kir.Kernel) -> frozenset[str]:
    """Variables updated after their Let: those always get a register."""
    names = set()
    for stmt in kernel.walk():
        if isinstance(stmt, kir.Assign | kir.ThreadReduce):
            names.add(stmt.var.name)
    return frozenset(names)


class _KernelEmitter(MemoryAccess):
    def __init__(
        self,
        kernel: kir.Kernel,
        kb: KernelBuilder,
        main_loop: kir.MatmulMainLoop | None,
    ) -> None:
        self.kernel = kernel
        self.main_loop = main_loop
        self.kb = kb
        self.math = ScalarMath(kb)
        self.env: dict[str, Value] = {}
        self.arrays: dict[int, tuple[Reg, ...]] = {}  # LOCAL buffers by id
        self.tensors: dict[str, Tensor] = {}
        self.smem: Reg | None = None
        self.assigned = _assigned(kernel)
        self.branches = 0  # how many non-constant Ifs enclose the statement being emitted
        # Values of the expressions of the current statement (nothing changes within one).
        self.memo: dict[kir.KExpr, Value] = {}
        # In a staged matmul epilogue: where each TMA-stored output's pair for this element goes
        # (a shared-memory address, or a word for the chunk's stmatrix).
        self.staging: Mapping[int, StagingTarget] = {}
        self.staged_reads: Mapping[int, Address] = {}
        # In an unguarded matmul epilogue, values read from the tile's epilogue vectors,
        # kept across its elements (rows 8 apart read the same column's bias): by expression
        # and the registers its variables are bound to. None elsewhere.
        self.tile_memo: dict[tuple[kir.KExpr, tuple[Value, ...]], Value] | None = None
        self.vector_offsets: frozenset[int] = frozenset()
        self.vector_read_cache: dict[kir.KExpr, tuple[bool | None, tuple[str, ...]]] = {}

    def fail(self, message: str) -> ScheduleError:
        return ScheduleError(f"kernel {self.kernel.name}: {message}")

    def emit(self) -> None:
        kernel, kb = self.kernel, self.kb
        kb.comment(
            f"{kernel.name}: grid {kernel.grid}, block {kernel.block}, "
            f"smem {kernel.smem_bytes} B, index {kernel.index_dtype.name}"
        )
        for tensor in kernel.params:
            param = kb.param(tensor.buffer_name, ParamKind.PTR)
            generic, address = kb.reg(RegClass.B64), kb.reg(RegClass.B64)
            kb.emit(
                memory.ld_param(generic, param), memory.cvta("global", address, generic, to=True)
            )
            read_only = tensor.role == kir.ParamRole.INPUT
            self.tensors[tensor.buffer_name] = Tensor(address, read_only)
        # TMA operands: by-value tensor maps after the pointers (the runtime's order too).
        self.tensor_maps = []
        if self.main_loop is not None:
            from pyfuse.backend_ptx.matmul_template import tensor_map_params_for

            self.tensor_maps = [kb.param(p.name, p.kind) for p in tensor_map_params_for(kernel)]
        if kernel.smem_bytes > 0:
            self.smem = kb.reg(RegClass.B32)
            kb.emit(memory.mov_address(self.smem, kb.dynamic_smem()))
        self.block(kernel.body)
        kb.emit(control.ret())

    # ---- statements ------------------------------------------------------------------------

    def block(self, stmts: list[kir.Stmt]) -> None:
        for stmt in stmts:
            self.memo = {}
            self.statement(stmt)

    def statement(self, stmt: kir.Stmt) -> None:
        if isinstance(stmt, kir.For):
            self.loop(stmt)
        elif isinstance(stmt, kir.If):
            self.branch(stmt)
        elif isinstance(stmt, kir.Let | kir.Assign):
            self.define(stmt)
        elif isinstance(stmt, kir.Alloc):
            self.allocate(stmt.buffer)
        elif isinstance(stmt, kir.Store):
            self.store(stmt)
        elif isinstance(stmt, kir.VectorLoad | kir.VectorStore):
            self.vector_copy(stmt)
        elif isinstance(stmt, kir.StageStore):
            self.stage_store(stmt)
        elif isinstance(stmt, kir.StagedLoad):
            self.staged_load(stmt)
        elif isinstance(stmt, kir.Sync):
            self.kb.emit(control.bar_sync(0))
        elif isinstance(stmt, kir.ThreadReduce):
            self.thread_reduce(stmt)
        elif isinstance(stmt, kir.Comment):
            self.kb.comment(" ".join(stmt.text.split()))
        elif isinstance(stmt, kir.MatmulMainLoop):
            self.matmul(stmt)
        else:
            raise self.fail(f"emit_ptx has no rule for a {type(stmt).__name__} statement")

    def matmul(self, stmt: kir.MatmulMainLoop) -> None:
        """The warp-specialized main loop (matmul_template); its epilogue is ordinary kernel IR
        emitted here once per accumulator element, with the fragment's coordinates bound."""
        from pyfuse.backend_ptx.matmul_template import allocate_accumulators, emit_matmul_main_loop

        accumulators = allocate_accumulators(self.kb, stmt)
        for buffer, registers in accumulators.items():
            self.arrays[id(buffer)] = registers

        # The vectors stay put while a tile's epilogue runs: an unguarded epilogue (straight
        # code, no branch around an element) reads each value once.
        reuse = bool(stmt.vectors) and not any(
            isinstance(s, kir.If) for s in kir.walk(stmt.epilogue)
        )
        self.vector_offsets = frozenset(vector.smem_offset for vector in stmt.vectors)

        def epilogue(
            bindings: dict[kir.Var, Reg],
            element: int,
            staging: Mapping[int, StagingTarget],
            reads: Mapping[int, Address],
        ) -> None:
            if element == 0:  # a tile's first: the vectors now hold this tile's values
                self.tile_memo = {} if reuse else None
            run(bindings, element, staging, stmt.epilogue, reads)

        def run(
            bindings: dict[kir.Var, Reg],
            element: int,
            staging: Mapping[int, StagingTarget],
            statements: list[kir.Stmt],
            reads: Mapping[int, Address],
        ) -> None:
            for var, register in bindings.items():
                self.env[var.name] = register
            self.env[stmt.element.name] = element
            if stmt.pair_element is not None:
                self.env[stmt.pair_element.name] = element + 1
            self.staging, self.staged_reads = staging, reads
            self.block(statements)
            self.staging, self.staged_reads = {}, {}

        def late_epilogue(
            bindings: dict[kir.Var, Reg], element: int, addresses: Sequence[Address]
        ) -> None:
            # The pairs the consumers handed over, read back; the output is staged over the
            # first.
            for handoff, address in zip(stmt.handoff_values, addresses, strict=True):
                self.allocate(handoff)
                where = Location("shared", address)
                self.vector_load(where, self.array(handoff), handoff.dtype)
            self.tile_memo = None  # the late part reads no vectors of this tile
            run(bindings, element, {0: addresses[0]}, stmt.late_epilogue, {})

        emit_matmul_main_loop(
            self.kb,
            stmt,
            self.kernel,
            self.tensor_maps,
            epilogue,
            accumulators=accumulators,
            emit_late_epilogue=late_epilogue if stmt.handoff is not None else None,
            stream_k_workspace=(
                self.tensors[stmt.stream_k.buffer_name].address if stmt.stream_k else None
            ),
        )
        self.tile_memo = None  # its values live in the main loop's code only

    def loop(self, loop: kir.For) -> None:
        name = loop.var.name
        extent = self.converted(loop.extent, loop.var.dtype)
        saved = self.env.get(name)
        if isinstance(extent, Reg):
            if loop.unroll:
                raise self.fail(f"unrolled loop {name} needs a constant extent, got {loop.extent}")
            self.serial_loop(loop, extent)
        elif loop.unroll:
            for iteration in range(int(extent)):
                self.env[name] = iteration
                self.block(loop.body)
        elif int(extent) > 1:
            self.serial_loop(loop, extent)
        elif int(extent) == 1:
            self.env[name] = 0
            self.block(loop.body)
        if saved is not None:
            self.env[name] = saved

    def serial_loop(self, loop: kir.For, extent: Value) -> None:
        kb, dtype = self.kb, loop.var.dtype
        ptype = storage_type(dtype)
        counter = kb.reg(storage_class(dtype))
        top, end = kb.new_label("loop"), kb.new_label("loop_end")
        kb.comment(f"for {loop.var.name} in range({loop.extent})")
        kb.emit(arith.mov(ptype, counter, 0))
        if isinstance(extent, Reg):
            empty = kb.reg(RegClass.PRED)
            kb.emit(arith.setp("ge", ptype, empty, counter, extent))
            kb.emit(control.bra(end).guarded(empty))
        kb.place(top)
        self.env[loop.var.name] = counter
        self.block(loop.body)
        again = kb.reg(RegClass.PRED)
        kb.emit(
            arith.add(ptype, counter, counter, 1),
            arith.setp("lt", ptype, again, counter, extent),
            control.bra(top).guarded(again),
        )
        kb.place(end)

    def branch(self, stmt: kir.If) -> None:
        if self.always_true(stmt.condition):
            # A ragged row's guard in an unrolled copy that cannot fail: no predicate, no
            # branch (see always_true).
            self.block(stmt.then)
            return
        condition = self.expr(stmt.condition)
        if not isinstance(condition, Reg):
            self.block(stmt.then if condition else stmt.orelse)
            return
        kb = self.kb
        end = kb.new_label("endif")
        orelse = kb.new_label("else") if stmt.orelse else end
        kb.emit(control.bra(orelse).guarded(condition, negate=True))
        self.branches += 1
        self.block(stmt.then)
        if stmt.orelse:
            kb.emit(control.bra(end))
            kb.place(orelse)
            self.block(stmt.orelse)
        self.branches -= 1
        kb.place(end)

    def always_true(self, condition: kir.KExpr) -> bool:
        """Whether ``condition`` holds for every thread, block and iteration: a conjunction of
        ``index < bound`` compares whose index, with the unrolled loops' variables at their
        immediates here and every other variable below its extent, stays under the bound.
        The guards of a row split ``[S, T, V]`` are ``s * T + t < vectors``: only the last
        copies of the unrolled ``s`` loop can fail, and a guard on every copy kept a
        predicate and a branch around each element of a persistent row (a bf16 softmax of
        41000 columns at 1024 threads, 48 elements a thread, spilled 4 B; a layer_norm of
        one 52 B), where the row that needs no guard (49152) assembled clean."""
        if isinstance(condition, kir.Binary) and condition.op == "logical_and":
            return self.always_true(condition.lhs) and self.always_true(condition.rhs)
        if not (isinstance(condition, kir.Binary) and condition.op == "lt"):
            return False
        bound = self.static_value(condition.rhs)
        upper = self.static_upper_bound(condition.lhs)
        return bound is not None and upper is not None and upper <= bound

    def static_value(self, expr: kir.KExpr) -> int | None:
        """The value of an integer constant or of a variable bound to an immediate here."""
        value: object
        if isinstance(expr, kir.Const):
            value = expr.value
        elif isinstance(expr, kir.Var):
            value = self.env.get(expr.name)
        else:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        return value

    def static_upper_bound(self, expr: kir.KExpr) -> int | None:
        """An exclusive upper bound of ``expr`` over every thread and iteration, for a sum
        and product of non-negative terms (immediates, variables below their extents, and
        remainders by a constant); None when one is not known."""
        value = self.static_value(expr)
        if value is not None:
            return value + 1 if value >= 0 else None
        if isinstance(expr, kir.Var | kir.Special):
            return expr.extent if expr.extent is not None and expr.extent > 0 else None
        if not isinstance(expr, kir.Binary) or not expr.dtype.is_integer:
            return None
        lhs, rhs = self.static_upper_bound(expr.lhs), self.static_upper_bound(expr.rhs)
        if lhs is None or rhs is None:
            return None
        if expr.op == "add":
            return lhs + rhs - 1
        if expr.op == "mul":
            return (lhs - 1) * (rhs - 1) + 1
        if expr.op == "mod":
            return min(lhs, rhs - 1) if rhs > 1 else None
        if expr.op == "floordiv" and (divisor := self.static_value(expr.rhs)):
            return -(-lhs // divisor) if divisor > 0 else None
        return None

    def define(self, stmt: kir.Let | kir.Assign) -> None:
        var = stmt.var
        if stmt.value.dtype != var.dtype:
            raise self.fail(f"{var.name} is {var.dtype.name}, its value {stmt.value.dtype.name}")
        value = self.expr(stmt.value)
        target = self.env.get(var.name)
        if isinstance(stmt, kir.Assign):
            if not isinstance(target, Reg):
                raise ValueError(f"emit_ptx: {var.name} is assigned before its Let")
        elif not isinstance(value, Reg) and var.name not in self.assigned and not self.branches:
            self.env[var.name] = value  # a constant: uses of it fold
            return
        elif not isinstance(target, Reg) or target.cls != storage_class(var.dtype):
            # A Let run again (an unrolled copy, the other side of an If) reuses the register,
            # so the definitions on both sides of a branch meet in one place.
            target = self.kb.reg(storage_class(var.dtype))
            self.env[var.name] = target
        self.math.move(target, value, var.dtype)

    def allocate(self, buffer: kir.Buffer) -> None:
        if buffer.memory == MemoryType.LOCAL:
            if id(buffer) not in self.arrays:  # an Alloc run again names the same registers
                self.arrays[id(buffer)] = self.kb.regs(storage_class(buffer.dtype), buffer.size)
        elif buffer.memory == MemoryType.SHARED:
            end = buffer.smem_offset + buffer.size * buffer.dtype.itemsize
            if buffer.smem_offset < 0 or end > self.kernel.smem_bytes:
                raise self.fail(
                    f"shared buffer {buffer.name} spans bytes [{buffer.smem_offset}, {end}), "
                    f"outside smem_bytes={self.kernel.smem_bytes}"
                )
        else:
            raise self.fail(f"Alloc of global buffer {buffer.name}: globals are kernel params")

    def store(self, stmt: kir.Store) -> None:
        buffer = stmt.buffer
        if stmt.value.dtype != buffer.dtype:
            raise self.fail(f"store of {stmt.value.dtype.name} into {buffer.dtype.name} {buffer}")
        value = self.expr(stmt.value)
        if buffer.memory == MemoryType.LOCAL:
            self.math.move(self.element(buffer, stmt.index), value, buffer.dtype)
        else:
            self.store_memory(self.address(buffer, stmt.index, store=True), value, buffer.dtype)

    # ---- memory ----------------------------------------------------------------------------

    # ---- cross-thread reduction ------------------------------------------------------------

    def warp_mask(self) -> int:
        threads = self.kernel.block[0] * self.kernel.block[1] * self.kernel.block[2]
        if threads % _WARP == 0:
            return shuffle.FULL_MASK
        if threads < _WARP:
            return (1 << threads) - 1
        raise self.fail(
            f"a block of {threads} threads ends in a partial warp; shuffles need whole warps"
        )

    def shuffle(self, value: Reg, lane_mask: int, mask: int) -> Reg:
        """``value`` of the lane ``lane ^ lane_mask`` (64-bit values move as two halves)."""
        kb = self.kb
        if value.bits == 32:
            other = kb.reg(value.cls)
            kb.emit(shuffle.shfl_sync("bfly", other, value, lane_mask, membermask=mask))
            return other
        halves, moved = kb.regs(RegClass.B32, 2), kb.regs(RegClass.B32, 2)
        kb.emit(arith.unpack(halves, value))
        for half, out in zip(halves, moved, strict=True):
            kb.emit(shuffle.shfl_sync("bfly", out, half, lane_mask, membermask=mask))
        other = kb.reg(value.cls)
        kb.emit(arith.pack(other, moved))
        return other

    def thread_reduce(self, stmt: kir.ThreadReduce) -> None:
        var, threads, dtype = stmt.var, stmt.threads, stmt.var.dtype
        if stmt.op not in _REDUCE_COMBINE or dtype.is_bool:
            raise self.fail(f"thread_reduce {stmt.op} over {dtype.name} is not supported")
        if threads < 1 or threads & (threads - 1) or self.kernel.block[0] % threads:
            raise self.fail(
                f"thread_reduce needs a power-of-two thread count dividing block x "
                f"({self.kernel.block[0]}), got {threads}"
            )
        target = self.env.get(var.name)
        if not isinstance(target, Reg):
            raise ValueError(f"emit_ptx: thread_reduce of {var.name} before its Let")
        self.kb.comment(f"{var.name} = thread_all_reduce_{stmt.op}({var.name}, threads={threads})")
        op, ctype, mask = _REDUCE_COMBINE[stmt.op], compute_type(dtype), self.warp_mask()
        value = self.math.reg_of(self.math.to_compute(target, dtype), ctype)
        lane_mask = min(threads, _WARP) // 2
        while lane_mask:
            other = self.shuffle(value, lane_mask, mask)
            value = self.math.reg_of(self.math.combine(op, value, other, ctype), ctype)
            lane_mask //= 2
        if threads > _WARP:
            value = self.cross_warp(stmt, value, op, ctype)
        self.math.move(target, self.math.from_compute(value, dtype), dtype)

    def cross_warp(self, stmt: kir.ThreadReduce, value: Reg, op: str, ctype: str) -> Reg:
        """Lane 0 of each warp publishes its partial; each group combines its warps in order."""
        kb, workspace, dtype = self.kb, stmt.workspace, stmt.var.dtype
        block = self.kernel.block
        if workspace is None or workspace.memory != MemoryType.SHARED or self.smem is None:
            raise self.fail(f"thread_reduce over {stmt.threads} threads needs a shared workspace")
        if block[1] * block[2] > 1 or workspace.size < block[0] // _WARP:
            raise self.fail(
                f"workspace {workspace.name} holds {workspace.size} partials; a block {block} "
                "needs one per warp of a one-dimensional block"
            )
        self.allocate(workspace)  # implicit: checks that it fits
        itemsize, warps = workspace.dtype.itemsize, stmt.threads // _WARP
        tid, warp, lane = kb.regs(RegClass.B32, 3)
        first_warp, slot, group = kb.regs(RegClass.B32, 3)
        leader = kb.reg(RegClass.PRED)
        kb.emit(
            special.read_sreg(tid, "tid.x"),
            logic.shr("u32", warp, tid, 5),
            logic.and_("b32", lane, tid, _WARP - 1),
            arith.setp("eq", "s32", leader, lane, 0),
            arith.mad("s32", slot, warp, itemsize, self.smem),
        )
        partial = self.math.from_compute(value, workspace.dtype)
        home = Location("shared", Address(slot, workspace.smem_offset))
        self.store_memory(home, partial, workspace.dtype, guard=leader)
        kb.emit(
            control.bar_sync(0),
            logic.and_("b32", first_warp, warp, 0xFFFFFFFF ^ (warps - 1)),
            arith.mad("s32", group, first_warp, itemsize, self.smem),
        )
        total: Reg | None = None
        for w in range(warps):
            where = Location("shared", Address(group, workspace.smem_offset + w * itemsize))
            loaded = self.math.to_compute(self.load_memory(where, dtype), dtype)
            combined = loaded if total is None else self.math.combine(op, total, loaded, ctype)
            total = self.math.reg_of(combined, ctype)
        kb.emit(control.bar_sync(0))  # the workspace may be reused right after
        assert total is not None
        return total

    # ---- expressions -----------------------------------------------------------------------

    def expr(self, expr: kir.KExpr) -> Value:
        """``expr`` in the storage form of its dtype: a register or a folded immediate."""
        value = self.memo.get(expr)  # never None: every expression has a value
        if value is None:
            tile_memo = self.tile_memo
            key = None
            if tile_memo is not None:
                names = self.vector_reads(expr)
                if names is not None:
                    key = expr, tuple(self.env[name] for name in names)
                    value = tile_memo.get(key)
            if value is None:
                value = self.compute(expr)
                if key is not None and tile_memo is not None:
                    tile_memo[key] = value
            self.memo[expr] = value
        return value

    def vector_reads(self, expr: kir.KExpr) -> tuple[str, ...] | None:
        """For an expression that reads only the tile's epilogue vectors (at least once), the
        names of its variables, whose registers key its value in ``tile_memo``; else None.
        Worked out once per expression node."""
        found = self.vector_read_cache.get(expr)
        if found is None:
            found = self._vector_read_facts(expr)
            self.vector_read_cache[expr] = found
        reads_vectors, names = found
        return names if reads_vectors is True else None

    def _vector_read_facts(self, expr: kir.KExpr) -> tuple[bool | None, tuple[str, ...]]:
        """(True where ``expr`` reads a vector and nothing else from memory, False where it
        reads no memory, None where it reads other memory; its variables' names)."""
        if isinstance(expr, kir.Var):
            return False, (expr.name,)
        state: bool | None = False
        if isinstance(expr, kir.Load):
            buffer = expr.buffer
            vector = (
                buffer.memory == MemoryType.SHARED and buffer.smem_offset in self.vector_offsets
            )
            state = True if vector else None
        names: set[str] = set()
        for child in vars(expr).values():
            if not isinstance(child, kir.KExpr):
                continue
            self.vector_reads(child)
            child_state, child_names = self.vector_read_cache[child]
            names.update(child_names)
            if child_state is None or state is None:
                state = None
            elif child_state:
                state = True
        return state, tuple(sorted(names))

    def compare_dtype(self, lhs: kir.KExpr, rhs: kir.KExpr) -> DType:
        """The type two sides compare in: an integer constant that fits the other side's
        integer type does not widen it (``i < 250`` stays 32-bit when 250 is an int64)."""
        if lhs.dtype == rhs.dtype:
            return lhs.dtype
        for constant, other in ((lhs, rhs), (rhs, lhs)):
            value = self.expr(constant)
            if (
                not isinstance(value, Reg)
                and constant.dtype.is_integer
                and other.dtype.is_integer
                and round_to(value, other.dtype) == value
            ):
                return other.dtype
        return dtypes.promote_pair(lhs.dtype, rhs.dtype)

    def converted(self, expr: kir.KExpr, dtype: DType) -> Value:
        return self.math.cast(self.expr(expr), expr.dtype, dtype)

    def compute(self, expr: kir.KExpr) -> Value:
        math = self.math
        if isinstance(expr, kir.Const):
            return round_to(expr.value, expr.dtype)
        if isinstance(expr, kir.Var):
            if expr.name not in self.env:
                raise ValueError(f"emit_ptx: variable {expr.name} is read before it is defined")
            return self.env[expr.name]
        if isinstance(expr, kir.Special):
            register = self.kb.reg(RegClass.B32)
            self.kb.emit(special.read_sreg(register, expr.kind.value))
            return math.cast(register, dtypes.int32, expr.dtype)
        if isinstance(expr, kir.Binary):
            if expr.op in _COMPARISONS:
                common = self.compare_dtype(expr.lhs, expr.rhs)
                lhs, rhs = self.converted(expr.lhs, common), self.converted(expr.rhs, common)
                return math.compare(expr.op, lhs, rhs, common)
            operand_dtype = dtypes.bool_ if expr.op in _LOGICAL else expr.dtype
            lhs = self.converted(expr.lhs, operand_dtype)
            rhs = self.converted(expr.rhs, operand_dtype)
            return math.cast(
                math.binary(expr.op, lhs, rhs, operand_dtype), operand_dtype, expr.dtype
            )
        if isinstance(expr, kir.Unary):
            operand_dtype = dtypes.bool_ if expr.op == "logical_not" else expr.dtype
            value = math.unary(expr.op, self.converted(expr.operand, operand_dtype), operand_dtype)
            return math.cast(value, operand_dtype, expr.dtype)
        if isinstance(expr, kir.Select):
            condition = self.converted(expr.condition, dtypes.bool_)
            if not isinstance(condition, Reg):  # only the chosen side is emitted
                return self.converted(expr.if_true if condition else expr.if_false, expr.dtype)
            if_true = self.converted(expr.if_true, expr.dtype)
            if_false = self.converted(expr.if_false, expr.dtype)
            return math.select(condition, if_true, if_false, expr.dtype)
        if isinstance(expr, kir.Cast):
            return self.converted(expr.operand, expr.dtype)
        if isinstance(expr, kir.Load):
            return self.load(expr)
        if isinstance(expr, kir.Param):
            raise self.fail(f"scalar param {expr.name}: kernels take only tensor pointers")
        raise ValueError(f"emit_ptx: unknown expression {type(expr).__name__}")

    def load(self, expr: kir.Load) -> Value:
        buffer = expr.buffer
        if expr.dtype != buffer.dtype:
            raise self.fail(f"load of {buffer.dtype.name} {buffer.name} as {expr.dtype.name}")
        if buffer.memory == MemoryType.LOCAL:
            return self.element(buffer, expr.index)
        return self.load_memory(self.address(buffer, expr.index), buffer.dtype)
