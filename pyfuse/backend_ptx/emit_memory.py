"""How the PTX emitter reaches memory: element addresses (an index split into register terms,
each one 64-bit ``mad.wide``, and a constant for the ``[reg+offset]`` immediate), loads and
stores of one element, vector copies between register arrays and global or shared memory
(narrow elements packed into 32-bit words), and indices into register arrays, which must fold
to constants.

:class:`MemoryAccess` is a base of the kernel emitter (:mod:`.emit`): it reads the emitter's
builder, scalar math, register arrays, tensor parameters and shared-memory window, and calls
back its ``expr`` and ``fail``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from pyfuse.backend_ptx.emit_math import Value, storage_class, storage_type
from pyfuse.backend_ptx.emit_scalar import ScalarMath
from pyfuse.backend_ptx.emitter import KernelBuilder
from pyfuse.backend_ptx.instructions import arith, convert, logic, memory
from pyfuse.backend_ptx.operands import Address, Reg, RegClass
from pyfuse.errors import ScheduleError
from pyfuse.ir import dtypes
from pyfuse.ir import kernel_ir as kir
from pyfuse.ir.dtypes import DType
from pyfuse.ir.records import record
from pyfuse.ir.tensor import MemoryType

# The widest single access on sm_90 (v4.b32 / v2.b64).
MAX_VECTOR_BYTES = 16


class StagedWord(Protocol):
    """A staged pair of 2-byte elements that a later collective store writes (the matmul
    staging's ``stmatrix``): the emitter hands it the pair packed in one 32-bit word."""

    def put(self, word: Reg) -> None: ...


# Where a staged matmul epilogue's pair goes: a shared-memory address, or a word to hand on.
StagingTarget = Address | StagedWord


def memory_type(dtype: DType) -> str:
    """The ld/st type of one element in memory (bool is one byte, 0 or 1; an 8- or 16-bit
    integer loads sign- or zero-extended into its 32-bit register and stores its low bits)."""
    if dtype.is_bool:
        return "u8"
    return dtype.ptx if dtype.is_narrow_integer else storage_type(dtype)


# Internal records, never compared (told apart by identity).
@record(frozen=True, eq=False)
class Tensor:
    """A kernel's tensor parameter, as the emitted code reaches it."""

    address: Reg  # the global-space address of element 0
    read_only: bool


@record(frozen=True, eq=False)
class Location:
    """Where an element lives: its state space, its address, whether ld.global.nc may read it."""

    space: str
    address: Address
    read_only: bool = False


class MemoryAccess:
    """The emitter's memory accesses; the emitter sets these attributes."""

    kb: KernelBuilder
    math: ScalarMath
    arrays: dict[int, tuple[Reg, ...]]  # LOCAL buffers by id
    tensors: dict[str, Tensor]
    smem: Reg | None
    # In a staged matmul epilogue: where each TMA-stored output's pair for this element goes,
    # and where a residual's pair lies in the staging of the store hosting it.
    staging: Mapping[int, StagingTarget]
    staged_reads: Mapping[int, Address]

    def expr(self, expr: kir.KExpr) -> Value:
        raise NotImplementedError

    def fail(self, message: str) -> ScheduleError:
        raise NotImplementedError

    def array(self, buffer: kir.Buffer) -> tuple[Reg, ...]:
        registers = self.arrays.get(id(buffer))
        if registers is None:
            raise ValueError(f"emit_ptx: register array {buffer.name} is used before its Alloc")
        return registers

    def constant_index(self, buffer: kir.Buffer, index: kir.KExpr, width: int = 1) -> int:
        value = self.expr(index)
        if isinstance(value, Reg):
            raise self.fail(
                f"index {index} into register array {buffer.name} does not fold to a constant; "
                "the loops it depends on must be unrolled"
            )
        if not 0 <= int(value) <= buffer.size - width:
            raise self.fail(f"index {value} (+{width}) is outside register array {buffer}")
        return int(value)

    def element(self, buffer: kir.Buffer, index: kir.KExpr) -> Reg:
        return self.array(buffer)[self.constant_index(buffer, index)]

    def indexed(self, base: Reg, index: kir.KExpr, itemsize: int) -> tuple[Reg, int]:
        """``base`` plus the register terms of ``index`` (times ``itemsize``) in 64 bits, and
        the index's constant part, for the address's immediate."""
        terms, constant = self.affine(index)
        address = base
        for term, coefficient in terms.items():
            value = self.expr(term)
            if not isinstance(value, Reg):
                constant += coefficient * int(value)
                continue
            address = self.scaled_add(address, value, coefficient * itemsize)
        return address, constant

    def affine(self, expr: kir.KExpr) -> tuple[dict[kir.KExpr, int], int]:
        """``expr`` as ``sum(coefficient * term) + constant`` over non-affine terms."""
        if isinstance(expr, kir.Const | kir.Var):
            value = self.expr(expr)
            if not isinstance(value, Reg | bool):
                return {}, int(value)
        elif isinstance(expr, kir.Binary) and expr.op in ("add", "sub", "mul"):
            lhs, lhs_constant = self.affine(expr.lhs)
            rhs, rhs_constant = self.affine(expr.rhs)
            if expr.op == "mul" and lhs and rhs:
                return {expr: 1}, 0
            if expr.op == "mul":
                terms, scale = (lhs, rhs_constant) if lhs else (rhs, lhs_constant)
                scaled = {term: c * scale for term, c in terms.items() if c * scale}
                return scaled, lhs_constant * rhs_constant
            sign = -1 if expr.op == "sub" else 1
            merged = dict(lhs)
            for term, c in rhs.items():
                merged[term] = merged.get(term, 0) + sign * c
            return {t: c for t, c in merged.items() if c}, lhs_constant + sign * rhs_constant
        elif (
            isinstance(expr, kir.Cast)
            and expr.dtype == dtypes.int64
            and expr.operand.dtype == dtypes.int32
        ):
            return self.affine(expr.operand)  # sign extension commutes with the 64-bit sum
        return {expr: 1}, 0

    def address(self, buffer: kir.Buffer, index: kir.KExpr, *, store: bool = False) -> Location:
        """Where ``buffer[index]`` is in global or shared memory."""
        if not index.dtype.is_integer:
            raise self.fail(f"index {index} into {buffer.name} is {index.dtype.name}")
        itemsize = buffer.dtype.itemsize
        if buffer.memory == MemoryType.SHARED:
            if self.smem is None:
                raise self.fail(f"shared buffer {buffer.name} in a kernel with smem_bytes=0")
            terms, constant = self.affine(index)
            base = self.smem
            for term, coefficient in terms.items():
                value = self.expr(term)
                if not isinstance(value, Reg):
                    constant += coefficient * int(value)
                    continue
                if value.cls is RegClass.B64:
                    narrow = self.kb.reg(RegClass.B32)
                    self.kb.emit(convert.cvt("u32", "u64", narrow, value))
                    value = narrow
                summed = self.kb.reg(RegClass.B32)
                self.kb.emit(arith.mad("s32", summed, value, coefficient * itemsize, base))
                base = summed
            return Location("shared", Address(base, buffer.smem_offset + constant * itemsize))
        tensor = self.tensors.get(buffer.name)
        if tensor is None:
            raise self.fail(f"buffer {buffer.name} is neither a kernel param nor allocated")
        if store and tensor.read_only:
            raise self.fail(f"store into {buffer.name}, a read-only kernel input")
        address, constant = self.indexed(tensor.address, index, itemsize)
        offset = constant * itemsize
        if not -(2**31) <= offset < 2**31:
            address, offset = self.scaled_add(address, None, offset), 0
        return Location("global", Address(address, offset), tensor.read_only)

    def scaled_add(self, address: Reg, value: Reg | None, scale: int) -> Reg:
        """``address + value * scale`` in 64 bits (``address + scale`` when value is None)."""
        summed = self.kb.reg(RegClass.B64)
        if value is None:
            self.kb.emit(arith.add("s64", summed, address, scale))
        elif value.cls is RegClass.B32 and -(2**31) <= scale < 2**31:
            self.kb.emit(arith.mad("s32", summed, value, scale, address, mode="wide"))
        else:
            if value.cls is RegClass.B32:
                wide = self.kb.reg(RegClass.B64)
                self.kb.emit(convert.cvt("s64", "s32", wide, value))
                value = wide
            self.kb.emit(arith.mad("s64", summed, value, scale, address))
        return summed

    def load_memory(self, where: Location, dtype: DType) -> Reg:
        space, address, nc = where.space, where.address, where.read_only
        if dtype.is_bool:
            byte, flag = self.kb.reg(RegClass.B32), self.kb.reg(RegClass.PRED)
            self.kb.emit(
                memory.ld(space, "u8", byte, address, nc=nc),
                arith.setp("ne", "b32", flag, byte, 0),
            )
            return flag
        value = self.kb.reg(storage_class(dtype))
        self.kb.emit(memory.ld(space, memory_type(dtype), value, address, nc=nc))
        return value

    def store_memory(
        self, where: Location, value: Value, dtype: DType, guard: Reg | None = None
    ) -> None:
        operand = self.math.encoded(value, dtype)
        if dtype.is_bool and isinstance(value, Reg):
            operand = self.kb.reg(RegClass.B32)
            self.kb.emit(arith.selp("u32", operand, 1, 0, value))
        instr = memory.st(where.space, memory_type(dtype), where.address, operand)
        self.kb.emit(instr if guard is None else instr.guarded(guard))

    # ---- vector copies ---------------------------------------------------------------------

    def vector_copy(self, stmt: kir.VectorLoad | kir.VectorStore) -> None:
        load = isinstance(stmt, kir.VectorLoad)
        local, local_index = (
            (stmt.target, stmt.target_index) if load else (stmt.source, stmt.source_index)
        )
        other, other_index = (
            (stmt.source, stmt.source_index) if load else (stmt.target, stmt.target_index)
        )
        dtype, width = local.dtype, stmt.width
        nbytes = width * dtype.itemsize
        if local.memory != MemoryType.LOCAL or other.memory == MemoryType.LOCAL:
            raise self.fail(f"a vector copy moves between registers and memory, got {stmt}")
        if other.dtype != dtype:
            raise self.fail(f"vector copy between {dtype.name} and {other.dtype.name}")
        if width & (width - 1) or nbytes > MAX_VECTOR_BYTES:
            raise self.fail(
                f"a vector of {width} x {dtype.name} must be a power of two of at most "
                f"{MAX_VECTOR_BYTES} bytes, got {nbytes}"
            )
        start = self.constant_index(local, local_index, width)
        registers = self.array(local)[start : start + width]
        where = self.address(other, other_index, store=not load)
        if load:
            self.vector_load(where, registers, dtype)
        else:
            self.vector_store(where, registers, dtype)

    def stage_store(self, stmt: kir.StageStore) -> None:
        """A pair of output columns into its TMA store's staging buffer (matmul_staging)."""
        target = self.staging.get(stmt.store)
        if target is None:
            raise self.fail(f"StageStore of store {stmt.store} outside a staged matmul epilogue")
        registers = self.array(stmt.source)[: stmt.width]
        if isinstance(target, Address):
            self.vector_store(Location("shared", target), registers, stmt.source.dtype)
            return
        if stmt.source.dtype.itemsize != 2 or len(registers) != 2:
            raise self.fail(f"StageStore of store {stmt.store}: a word is two 2-byte elements")
        word = self.kb.reg(RegClass.B32)
        self.kb.emit(arith.pack(word, registers))
        target.put(word)

    def staged_load(self, stmt: kir.StagedLoad) -> None:
        """A pair of residual columns from its store's staging buffer (matmul_residuals)."""
        address = self.staged_reads.get(stmt.store)
        if address is None:
            raise self.fail(f"StagedLoad of store {stmt.store} outside a staged matmul epilogue")
        registers = self.array(stmt.target)[: stmt.width]
        self.vector_load(Location("shared", address), registers, stmt.target.dtype)

    def words(self, nbytes: int) -> tuple[tuple[Reg, ...], str]:
        """Registers that carry ``nbytes`` of narrow elements, and their ld/st type."""
        kind = {1: "u8", 2: "u16"}.get(nbytes, "b32")
        return self.kb.regs(RegClass.B32, max(nbytes // 4, 1)), kind

    def vector_load(self, where: Location, registers: tuple[Reg, ...], dtype: DType) -> None:
        kb, space, address, nc = self.kb, where.space, where.address, where.read_only
        if dtype.itemsize >= 4 or (len(registers) == 1 and not dtype.is_bool):
            kb.emit(memory.ld(space, memory_type(dtype), registers, address, nc=nc))
            return
        words, kind = self.words(len(registers) * dtype.itemsize)
        kb.emit(memory.ld(space, kind, words, address, nc=nc))
        if dtype.is_narrow_integer:
            # Each element's bits out of its word, sign- or zero-extended.
            extract = "u32" if dtype.is_unsigned else "s32"
            per_word = 4 // dtype.itemsize
            for i, element in enumerate(registers):
                word, position = words[i // per_word], dtype.bits * (i % per_word)
                kb.emit(logic.bfe(extract, element, word, position, dtype.bits))
            return
        if dtype.itemsize == 2:
            for i, word in enumerate(words):
                kb.emit(arith.unpack(registers[2 * i : 2 * i + 2], word))
            return
        for i, flag in enumerate(registers):
            byte = kb.reg(RegClass.B32)
            kb.emit(
                logic.and_("b32", byte, words[i // 4], 0xFF << (8 * (i % 4))),
                arith.setp("ne", "b32", flag, byte, 0),
            )

    def vector_store(self, where: Location, registers: tuple[Reg, ...], dtype: DType) -> None:
        kb, space, address = self.kb, where.space, where.address
        if dtype.itemsize >= 4 or (len(registers) == 1 and not dtype.is_bool):
            kb.emit(memory.st(space, memory_type(dtype), address, list(registers)))
            return
        nbytes = len(registers) * dtype.itemsize
        words, kind = self.words(nbytes)
        for w, word in enumerate(words):
            if dtype.is_narrow_integer:
                per_word = 4 // dtype.itemsize
                kb.emit(arith.mov("b32", word, 0))
                for k, element in enumerate(registers[per_word * w : per_word * (w + 1)]):
                    kb.emit(logic.bfi("b32", word, element, word, dtype.bits * k, dtype.bits))
                continue
            if dtype.itemsize == 2:
                kb.emit(arith.pack(word, registers[2 * w : 2 * w + 2]))
                continue
            # Bytes of 0/1: the word is the OR of (flag ? 1 << 8k : 0) over its bytes k.
            kb.emit(arith.mov("b32", word, 0))
            for k, flag in enumerate(registers[4 * w : 4 * w + 4]):
                byte = kb.reg(RegClass.B32)
                kb.emit(
                    arith.selp("b32", byte, 1 << (8 * k), 0, flag),
                    logic.or_("b32", word, word, byte),
                )
        kb.emit(memory.st(space, kind, address, list(words)))
