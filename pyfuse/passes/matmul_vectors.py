"""Epilogue inputs read along one tile axis: a bias along N, a per-row scale along M.

An epilogue read the matmul lowering (:mod:`lower_matmul`) made of a fusion input is a
``Load`` of the input's global buffer at an index of the element's coordinates. When that
index is the output column alone (``col``, or ``col + 1`` for the second column of a pair,
clamped to ``N - 1`` in an unguarded epilogue) or the output row alone, every element of a
tile row (or column) reads the same few values, once per element: 64 global loads per
thread and tile for a bias at 128x256. :class:`EpilogueVectors` replaces such a read by a
read of a shared-memory copy of the tile's span, which the template loads once per tile and
consumer warpgroup with one TMA copy of a one-row box (``MatmulMainLoop.vectors``,
``backend_ptx/matmul_vectors.py``).

Expects the epilogue's index variables (``row``, ``col``, the pair's ``col_b``) as the
lowering binds them, and the shared memory the kernel already uses. Guarantees: a replaced
read returns the same value for every element the epilogue stores (columns past ``N`` or
rows past ``M`` read TMA's zero fill; the epilogue's guard or the TMA store's clipping
drops them); a vector is used only where its box is a whole number of 16-byte rows of at
most ``tma_max_box`` elements and its buffers fit the block's shared memory; otherwise the
read stays a global load.
"""

from __future__ import annotations

from pyfuse.ir import kernel_ir as k
from pyfuse.ir.dtypes import DType
from pyfuse.ir.hopper import SM90
from pyfuse.ir.tensor import MemoryType


class EpilogueVectors:
    """The vectors of one matmul kernel, planned as the lowering meets their reads."""

    def __init__(
        self,
        *,
        row: k.Var,
        cols: dict[k.Var, int],
        sizes: dict[str, int],
        spans: dict[str, int],
        warpgroups: int,
        smem_start: int,
        smem_limit: int,
        index_dtype: DType,
        inputs: frozenset[str],
    ) -> None:
        """``cols`` maps each column variable to its offset from ``col`` (0, and 1 for the
        pair's); ``spans`` gives the elements a warpgroup's tile takes per role; vectors
        are placed from ``smem_start`` (after every other buffer) up to ``smem_limit``;
        ``inputs`` names the kernel's input buffers (the only ones read this way)."""
        self.row, self.cols, self.sizes, self.spans = row, cols, sizes, spans
        self.warpgroups = warpgroups
        self.smem_end, self.smem_limit = smem_start, smem_limit
        self.inputs = inputs
        self.warpgroup = k.Var("warpgroup", index_dtype)
        self.tile_row = k.Var("tile_row", index_dtype)
        self.tile_col = k.Var("tile_col", index_dtype)
        self.vectors: list[k.TmaVector] = []
        self._buffers: dict[tuple[str, str], k.Buffer | None] = {}

    def read(self, value: k.KExpr) -> k.KExpr:
        """``value``, or the shared-memory read that replaces it (see the module)."""
        if not isinstance(value, k.Load) or value.buffer.memory != MemoryType.GLOBAL:
            return value
        if value.buffer.name not in self.inputs:
            return value
        along = self._along(value.index)
        if along is None:
            return value
        role, offset = along
        shared = self._buffer(value.buffer, role)
        if shared is None:
            return value
        inside = self.tile_col if role == "n" else self.tile_row
        per_warpgroup = self._stride(shared)
        index = k.add(
            k.mul(self.warpgroup, k.const(per_warpgroup, self.warpgroup.dtype)),
            k.add(inside, k.const(offset, inside.dtype)),
        )
        return k.Load(shared, index, value.dtype)

    def _along(self, index: k.KExpr) -> tuple[str, int] | None:
        """("n", offset) when ``index`` is a column variable (``offset`` from ``col``),
        ("m", 0) when it is the row, either possibly clamped to the last; else None."""
        clamp: k.KExpr | None = None
        if isinstance(index, k.Binary) and index.op == "min":
            clamp = index.rhs
            index = index.lhs
        if not isinstance(index, k.Var):
            return None
        if index in self.cols:
            role, offset = "n", self.cols[index]
        elif index == self.row:
            role, offset = "m", 0
        else:
            return None
        if clamp is not None and not (
            isinstance(clamp, k.Const) and clamp.value == self.sizes[role] - 1
        ):
            return None
        return role, offset

    def _stride(self, shared: k.Buffer) -> int:
        return shared.size // self.warpgroups

    def _buffer(self, source: k.Buffer, role: str) -> k.Buffer | None:
        key = (source.name, role)
        if key in self._buffers:
            return self._buffers[key]
        span, itemsize = self.spans[role], source.dtype.itemsize
        vector = k.TmaVector(
            buffer_name=source.name,
            dtype=source.dtype,
            role=role,
            # The read is of elements 0 .. size - 1 along the role; the buffer may hold more
            # elements (a residual broadcast along M, stride 0, is as many as the output) than
            # its memory spans, and TMA must zero-fill past the span, not read past it.
            extent=self.sizes[role],
            span=span,
            smem_offset=_align(self.smem_end, SM90.tma_smem_alignment),
        )
        end = vector.smem_offset + self.warpgroups * vector.buffer_bytes
        whole_rows = span * itemsize % SM90.tma_alignment == 0 and span <= SM90.tma_max_box
        shared = None
        if whole_rows and end <= self.smem_limit:
            self.vectors.append(vector)
            self.smem_end = end
            shared = k.Buffer(
                f"{source.name}_{role}_tile",
                source.dtype,
                MemoryType.SHARED,
                self.warpgroups * vector.buffer_bytes // itemsize,
                vector.smem_offset,
            )
        self._buffers[key] = shared
        return shared


def _align(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment
