"""The epilogue of a Hopper matmul kernel, lowered: the part of :mod:`lower_matmul` that
turns the pointwise exprs after the MMAs into the per-element statements of
:class:`~pyfuse.ir.kernel_ir.MatmulMainLoop` (``epilogue``, and with epilogue warps
``late_epilogue``).

Expects what :mod:`lower_matmul` does (a scheduled matmul kernel after ``remove_broadcasts``).
Guarantees:

- indices come from the accumulator fragment's coordinates: every epilogue tensor's logical
  index is derived from ``row``/``col``/``batch`` (through an epilogue reshape's splits and
  merges where its axes do not map to the accumulator's), clamped into the problem when the
  epilogue runs unguarded;
- one copy of the epilogue per accumulator element, or per pair of adjacent columns when N
  is even and every output keeps them side by side (then one vector store, or one
  ``StageStore`` for a TMA-stored output, per output);
- reads of a bias or row scale become reads of its per-tile shared copy
  (:mod:`matmul_vectors`) in the consumers' part;
- in a paired epilogue, a read of an input (or a view of one at an even offset) whose
  contiguous axis is the output's N axis (a residual) is one 2-element ``VectorLoad`` per
  pair (made by the pair's first copy, its second element read by the second copy), at a
  column clamped to ``N - 2`` when unguarded: half the loads and addresses, and no load
  straddles the ragged edge; where :mod:`matmul_residuals` hosts it in a store's staging
  buffers, one ``StagedLoad`` per pair instead (however often the epilogue names it);
- with a handoff tensor (:mod:`matmul_handoff`), the consumers' statements compute it and
  stage it (``StageStore`` 0), and the late statements compute the rest from
  ``handoff_value`` and stage the output the same way.
"""

from __future__ import annotations

from pyfuse.ir import dtypes
from pyfuse.ir import kernel_ir as k
from pyfuse.ir.dtypes import DType
from pyfuse.ir.exprs import Expr, LoadStoreKind, LoadStoreOp, MmaOp
from pyfuse.ir.id_model import IdMappingMode
from pyfuse.ir.iterdomain import IdTransform, IterDomain, Merge, Split
from pyfuse.ir.tensor import MemoryType, TensorView, Val
from pyfuse.passes.lower import _Lowering
from pyfuse.passes.matmul_handoff import split_epilogue
from pyfuse.passes.matmul_residuals import EpilogueResiduals
from pyfuse.passes.matmul_vectors import EpilogueVectors
from pyfuse.passes.plan import KernelPlan
from pyfuse.passes.skip_intermediates import alias_root, view_offset


class MatmulEpilogueLowering(_Lowering):
    """The epilogue's state and lowering; :class:`lower_matmul._MatmulLowering` adds the
    operands, the stores and the kernel."""

    def __init__(self, plan: KernelPlan, name: str) -> None:
        super().__init__(plan, name)
        self.mmas = [e for e in self.fusion.exprs() if isinstance(e, MmaOp)]
        self.accumulators: dict[int, k.Buffer] = {}
        first = self.mmas[0]
        self.roles = first.roles()
        self.row = k.Var("row", self.index_dtype)
        self.col = k.Var("col", self.index_dtype)
        self.batch_index = k.Var("batch", self.index_dtype)
        self.element = k.Var("element", dtypes.int32)
        self.pair_col = k.Var("col_b", self.index_dtype)
        self.pair_element = k.Var("element_b", dtypes.int32)
        self.col_current, self.element_current = self.col, self.element
        self.suffix_current = ""
        self.results_current: dict[int, k.Buffer] = {}
        self.locals_: dict[tuple[int, str], k.Buffer] = {}
        self.staged: dict[str, int] = {}
        self.unguarded = False  # set by lower(): see there
        self.vectors: EpilogueVectors | None = None  # set by lower(), before the epilogue
        self.residuals: EpilogueResiduals | None = None  # likewise, where they may apply
        self.staged_pairs: dict[int, k.Buffer] = {}  # the first copy's residual reads
        # With epilogue warps: the handoff tensors, and (while the late part is lowered)
        # the register pair each one's reads come from.
        self.handoff_values: dict[int, k.Buffer] = {}
        # The problem's extent per role (m, n, k, batch).
        self.sizes = {"m": 1, "n": 1, "k": 1, "batch": 1}
        for axis, role in zip(self.reference.logical, self.roles, strict=True):
            self.sizes[role] *= axis.logical_extent
        # Adjacent accumulator columns pair up when N is even and every output stores them
        # side by side (not transposed, not split between rows by a reshape): then a pair is
        # in bounds together and 4-byte aligned, and each output takes one 2-element store.
        self.paired = self.sizes["n"] % 2 == 0 and all(
            self._columns_adjacent(out) for out in self.fusion.outputs
        )
        # Whether every input base address is 16-byte aligned (set by the kernel's lowering
        # from the target's alignment class): what a pair load of an input needs.
        self.aligned_inputs = False
        # Pair loads (module docstring): the first copy's loads in read order, and how many
        # of them the second copy has taken; statements a read needs before its expr.
        self.pair_loads: list[k.Buffer] = []
        self.pair_loads_taken = 0
        self.pair_loads_made = 0  # in the whole kernel: unique register names
        self.pending: list[k.Stmt] = []

    def _columns_adjacent(self, out: TensorView) -> bool:
        """Whether accumulator columns ``col`` and ``col + 1`` (``col`` even) land in adjacent
        elements of ``out``: its contiguous memory axis is the innermost N axis, or the inner
        part of a reshape of it (a split's inner axis, a merge's output) with even extents."""
        strides = self._strides(out)
        if not strides or strides[-1][1] != 1:
            return False
        n_axes = [a for a, r in zip(self.reference.logical, self.roles, strict=True) if r == "n"]
        steps: list[tuple[IterDomain, IterDomain]] = []  # (view axis, the axis it keeps)
        for tv in self.fusion.tensors():
            for transform in _root_to_logical(tv):
                if isinstance(transform, Split):
                    steps.append((transform.inner, transform.input))
                elif isinstance(transform, Merge):
                    steps.append((transform.output, transform.inner))
        axis = strides[-1][0]
        for _ in range(len(steps) + 1):
            if axis.extent % 2:
                return False
            if self.id_model.mapped(axis, n_axes[-1], IdMappingMode.EXACT):
                return True
            exact = IdMappingMode.EXACT
            kept = [src for made, src in steps if self.id_model.mapped(axis, made, exact)]
            if not kept:
                return False
            axis = kept[0]
        return False

    # -- epilogue tensors reshaped from the accumulator ----------------------------------------
    def _logical_index(self, tv: TensorView, ref_index: dict[int, k.KExpr]) -> dict[int, k.KExpr]:
        """As for any kernel when ``tv``'s axes map to the accumulator's; else (an epilogue
        reshape of the result, split heads, and what is computed from it) derived from the
        producers computed in this kernel, through the op's axis pairs and the reshape's
        root-to-logical splits and merges."""
        definition = tv.definition
        if definition is None or self._covered(tv) or self.fusion.is_input(tv):
            return super()._logical_index(tv, ref_index)
        zero = k.const(0, self.index_dtype)
        result: dict[int, k.KExpr] = {}
        for producer in definition.tensor_inputs:
            if self.fusion.is_input(producer) or producer.alias_of is not None:
                continue  # read in place, indexed from this consumer
            produced = self._logical_index(producer, ref_index)
            for p_axis, c_axis in definition.logical_pairs(producer):
                if id(p_axis) in produced:
                    result.setdefault(id(c_axis), produced[id(p_axis)])
        for axis in tv.maybe_root:
            result.setdefault(id(axis), zero)  # a broadcast axis
        for transform in _root_to_logical(tv):
            if isinstance(transform, Split):
                value = result[id(transform.input)]
                extent = k.const(transform.inner.extent, self.index_dtype)
                result[id(transform.outer)] = k.floordiv(value, extent)
                result[id(transform.inner)] = k.mod(value, extent)
            elif isinstance(transform, Merge):
                extent = k.const(transform.inner.extent, self.index_dtype)
                outer, inner = result[id(transform.outer)], result[id(transform.inner)]
                result[id(transform.output)] = k.add(k.mul(outer, extent), inner)
        for axis in tv.logical:
            result.setdefault(id(axis), zero)
        return result

    def _covered(self, tv: TensorView) -> bool:
        """Every real logical axis of ``tv`` maps to an axis of the accumulator."""
        return all(
            axis.is_broadcast
            or any(
                self.id_model.mapped(axis, ref_axis, mode)
                for ref_axis in self.reference.logical
                for mode in (IdMappingMode.EXACT, IdMappingMode.BROADCAST)
            )
            for axis in tv.logical
        )

    # -- the accumulator's logical indices come from the fragment coordinates ------------------
    def _reference_indices(
        self, by_position: dict[int, k.KExpr], pair_load: bool = False
    ) -> dict[int, k.KExpr]:
        """``pair_load``: for a column pair's load, ``col`` clamped to ``N - 2`` (unguarded)."""
        del by_position
        index: dict[int, k.KExpr] = {}
        by_role: dict[str, k.KExpr] = {
            "m": self.row,
            "n": self.col_current,
            "batch": self.batch_index,
        }
        if self.unguarded:
            for role in ("m", "n"):
                last = self.sizes[role] - (2 if role == "n" and pair_load else 1)
                limit = k.const(last, self.index_dtype)
                by_role[role] = k.Binary("min", by_role[role], limit, self.index_dtype)
        for role, combined in by_role.items():
            axes = [a for a, r in zip(self.reference.logical, self.roles, strict=True) if r == role]
            remaining: k.KExpr = combined
            for axis in reversed(axes):  # the merged index, innermost axis fastest
                extent = k.const(axis.logical_extent, self.index_dtype)
                index[id(axis)] = k.mod(remaining, extent) if axis is not axes[0] else remaining
                remaining = k.floordiv(remaining, extent)
        zero = k.const(0, self.index_dtype)
        for axis, role in zip(self.reference.logical, self.roles, strict=True):
            if role == "k":
                index[id(axis)] = zero
        return index

    def _read(self, expr, val: Val, consumer_index, by_position, compute_dtype):  # type: ignore[no-untyped-def,override]
        if isinstance(val, TensorView) and id(val) in self.handoff_values:
            slot = k.const(1 if self.suffix_current else 0, self.index_dtype)
            return k.Load(self.handoff_values[id(val)], slot, val.dtype)
        if isinstance(val, TensorView) and id(val) in self.accumulators:
            return k.Load(self.accumulators[id(val)], self.element_current, val.dtype)
        if isinstance(val, TensorView) and id(val) in self.results_current:
            # An output read by a later epilogue op: use its register, its store comes last.
            return k.Load(self.results_current[id(val)], k.const(0, self.index_dtype), val.dtype)
        if isinstance(val, TensorView) and val.memory_type == MemoryType.LOCAL:
            buffer = self._local(val, self.suffix_current)
            return k.Load(buffer, k.const(0, self.index_dtype), val.dtype)
        value = super()._read(expr, val, consumer_index, by_position, compute_dtype)
        # A bias or a row scale: read from the tile's copy in shared memory.
        if self.vectors is not None:
            shared = self.vectors.read(value)
            if shared is not value:
                return shared
        if isinstance(val, TensorView) and self._pair_loadable(val):
            return self._pair_read(expr, val, by_position, compute_dtype)
        return value

    def _pair_loadable(self, tv: TensorView) -> bool:
        """A paired epilogue's read of input ``tv`` (or of a view of one) can load both
        columns at once: its contiguous axis is N, every other stride and the view's offset
        are even and the input's base is aligned, so the pair is one aligned 4- or 8-byte
        vector."""
        if not (self.paired and self.aligned_inputs):
            return False
        if not self.fusion.is_input(alias_root(tv)) or tv.dtype.itemsize not in (2, 4):
            return False
        strides = self._strides(tv)
        even = all(stride % 2 == 0 for _, stride in strides[:-1]) and view_offset(tv) % 2 == 0
        return even and self._columns_adjacent(tv)

    def _pair_read(
        self, expr: Expr, tv: TensorView, by_position: dict[int, k.KExpr], compute_dtype: DType
    ) -> k.KExpr:
        """The first copy loads the pair (at its even column, clamped to ``N - 2``) and
        reads element 0; the second copy reads element 1 of the same load."""
        if self.suffix_current:
            pair = self.pair_loads[self.pair_loads_taken]
            self.pair_loads_taken += 1
            return k.Load(pair, k.const(1, self.index_dtype), tv.dtype)
        zero = k.const(0, self.index_dtype)
        store = None
        if self.residuals is not None:
            store = self.residuals.host(tv, self._buffer(alias_root(tv)).name)
        if store is not None:
            # A residual in the store's staging buffer: one read per pair, however many
            # times the epilogue names it (the store's write there depends on that read).
            staged = self.staged_pairs.get(id(tv))
            if staged is None:
                name = f"T{tv.name}_pair{self.pair_loads_made}"
                staged = k.Buffer(name, tv.dtype, MemoryType.LOCAL, 2)
                self.pair_loads_made += 1
                self.staged_pairs[id(tv)] = staged
                self.pending += [k.Alloc(staged), k.StagedLoad(store, staged, 2)]
            self.pair_loads.append(staged)
            return k.Load(staged, zero, tv.dtype)
        ref_index = self._reference_indices({}, pair_load=True)
        consumer_index = self._logical_index(expr.output, ref_index)
        single = super()._read(expr, tv, consumer_index, by_position, compute_dtype)
        assert isinstance(single, k.Load)
        pair = k.Buffer(f"T{tv.name}_pair{self.pair_loads_made}", tv.dtype, MemoryType.LOCAL, 2)
        self.pair_loads_made += 1
        self.pair_loads.append(pair)
        self.pending += [k.Alloc(pair), k.VectorLoad(pair, zero, single.buffer, single.index, 2)]
        return k.Load(pair, zero, tv.dtype)

    def _buffer_index(self, tv: TensorView, by_position: dict[int, k.KExpr]) -> k.KExpr:
        # Epilogue values are one register per accumulator element: the element loop is the
        # MatmulMainLoop's, unrolled by the emitter.
        return k.const(0, self.index_dtype)

    # -- per-element statements ------------------------------------------------------------
    def _epilogue_exprs(self) -> list[Expr]:
        exprs = []
        for expr in self.fusion.exprs():
            if isinstance(expr, MmaOp) or expr.output.alias_of is not None:
                continue
            if isinstance(expr, LoadStoreOp) and expr.kind == LoadStoreKind.TMA_LOAD:
                continue
            exprs.append(expr)
        return exprs

    def _epilogue_copy(
        self,
        col: k.Var,
        element: k.Var,
        suffix: str,
        statements: list[k.Stmt],
        exprs: list[Expr] | None = None,
    ) -> tuple[list[k.Stmt], dict[int, k.Buffer]]:
        """The epilogue for one accumulator element (``exprs``: all of it by default): its
        statements, and for each output the register it leaves the value in (the stores
        come after, vectorized when paired)."""
        self.col_current, self.element_current = col, element
        self.suffix_current = suffix
        if not suffix:
            self.pair_loads, self.pair_loads_taken = [], 0
            self.staged_pairs = {}
        body: list[k.Stmt] = []
        results: dict[int, k.Buffer] = {}
        self.results_current = results
        for expr in self._epilogue_exprs() if exprs is None else exprs:
            out = expr.output
            consumer_index = self._logical_index(out, self._reference_indices({}))
            value = self._value(expr, consumer_index, {})
            body += self.pending
            self.pending = []
            if self.fusion.is_output(out):
                buffer = k.Buffer(f"T{out.name}_out{suffix}", out.dtype, MemoryType.LOCAL, 1)
                results[id(out)] = buffer
            else:
                buffer = self._local(out, suffix)
            statements.append(k.Alloc(buffer))
            body.append(k.Store(buffer, k.const(0, self.index_dtype), value))
        return body, results

    def _local(self, tv: TensorView, suffix: str) -> k.Buffer:
        key = (id(tv), suffix)
        buffer = self.locals_.get(key)
        if buffer is None:
            buffer = k.Buffer(f"T{tv.name}{suffix}", tv.dtype, MemoryType.LOCAL, 1)
            self.locals_[key] = buffer
        return buffer

    def _epilogue(self, sizes: dict[str, int], exprs: list[Expr] | None = None) -> list[k.Stmt]:
        """Per accumulator element, or per pair of adjacent columns when N is even (both
        columns are then in bounds together and the stores are one vector per output)."""
        statements: list[k.Stmt] = []
        guard = k.all_of(
            [
                k.less_than(self.row, k.const(sizes["m"], self.index_dtype)),
                k.less_than(self.col, k.const(sizes["n"], self.index_dtype)),
            ]
        )
        first, first_results = self._epilogue_copy(self.col, self.element, "", statements, exprs)
        body = list(first)
        outputs = [tv for tv in self.fusion.outputs]
        if self.paired:
            second, second_results = self._epilogue_copy(
                self.pair_col, self.pair_element, "_b", statements, exprs
            )
            body += second
            for out in outputs:
                pair = k.Buffer(f"T{out.name}_pair", out.dtype, MemoryType.LOCAL, 2)
                statements.append(k.Alloc(pair))
                zero, one = k.const(0, self.index_dtype), k.const(1, self.index_dtype)
                for slot, results in ((zero, first_results), (one, second_results)):
                    value = k.Load(results[id(out)], zero, out.dtype)
                    body.append(k.Store(pair, slot, value))
                staged = self.staged.get(self._buffer(out).name)
                if staged is not None:
                    body.append(k.StageStore(staged, pair, 2))
                    continue
                index = self._output_offset(out, self.col)
                body.append(k.VectorStore(self._buffer(out), index, pair, zero, 2))
        else:
            for out in outputs:
                zero = k.const(0, self.index_dtype)
                value = k.Load(first_results[id(out)], zero, out.dtype)
                body.append(k.Store(self._buffer(out), self._output_offset(out, self.col), value))
        if self.unguarded:
            statements.extend(body)
        else:
            statements.append(k.If(guard, body))
        return statements

    def _handoff_epilogues(
        self, sizes: dict[str, int], handoffs: list[TensorView]
    ) -> tuple[list[k.Stmt], list[k.Stmt], list[k.Buffer]]:
        """The consumers' part (up to ``handoffs``, handoff ``t`` staged as store ``t``), the
        epilogue warps' part (from the pairs they read back, its output staged as store 0),
        and the register pair of each handoff. Needs a paired, unguarded epilogue (every
        output TMA-stored)."""
        assert self.paired and self.unguarded
        exprs = self._epilogue_exprs()
        early = split_epilogue(exprs, self.mmas, handoffs)
        zero, one = k.const(0, self.index_dtype), k.const(1, self.index_dtype)
        consumer: list[k.Stmt] = []
        copies = ((self.col, self.element, ""), (self.pair_col, self.pair_element, "_b"))
        body: list[k.Stmt] = []
        for col, element, suffix in copies:
            part, _ = self._epilogue_copy(
                col, element, suffix, consumer, [e for e in exprs if id(e.output) in early]
            )
            body += part
        for store, handoff in enumerate(handoffs):
            staged = k.Buffer(f"T{handoff.name}_handoff", handoff.dtype, MemoryType.LOCAL, 2)
            consumer.append(k.Alloc(staged))
            for slot, (_, _, suffix) in zip((zero, one), copies, strict=True):
                value = k.Load(self._local(handoff, suffix), zero, handoff.dtype)
                body.append(k.Store(staged, slot, value))
            body.append(k.StageStore(store, staged, 2))
        consumer += body
        # The late part reads the handoffs from what the epilogue warps load, and its
        # vectors from global memory: the consumers' copies already hold their next tile's.
        vectors, self.vectors = self.vectors, None
        values = [
            k.Buffer(f"T{handoff.name}_in", handoff.dtype, MemoryType.LOCAL, 2)
            for handoff in handoffs
        ]
        self.handoff_values = {id(t): value for t, value in zip(handoffs, values, strict=True)}
        late = self._epilogue(sizes, [e for e in exprs if id(e.output) not in early])
        self.vectors = vectors
        return consumer, late, values

    def _output_offset(self, out: TensorView, col: k.Var) -> k.KExpr:
        self.col_current = col
        consumer_index = self._logical_index(out, self._reference_indices({}))
        return self._global_offset(out, consumer_index)


def _root_to_logical(tv: TensorView) -> list[IdTransform]:
    """The splits and merges from a reshape output's root to its logical domain, in an order
    that computes every input before its use (none for a tensor without a root)."""
    if tv.root is None:
        return []
    known = {id(axis) for axis in tv.root}
    pending: list[IdTransform] = []
    stack = list(tv.logical)
    while stack:
        axis = stack.pop()
        definition = axis.definition
        if id(axis) in known or definition is None or definition in pending:
            continue
        pending.append(definition)
        stack.extend(definition.inputs)
    ordered: list[IdTransform] = []
    while pending:
        ready = [t for t in pending if all(id(axis) in known for axis in t.inputs)]
        if not ready:
            break  # not reached from the root: nothing to derive
        for transform in ready:
            pending.remove(transform)
            ordered.append(transform)
            known.update(id(axis) for axis in transform.outputs)
    return ordered
