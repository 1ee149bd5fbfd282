"""Vector copies over aligned windows: the lowering's half of a window split.

A window split (:class:`~pyfuse.ir.iterdomain.Split` with ``window``) walks a row whose start
is not a multiple of the vector (an odd-width row of a contiguous tensor: ``log_softmax`` over
a vocabulary of 50,257) in vectors aligned to memory, the row's first element at position
``shift`` of the first vector. :func:`windowed_copy` turns one vector copy of such a row into:

- the vector instruction where all its elements lie inside the row;
- else one guarded scalar copy per element inside the row; a load first zeroes the elements
  outside it, so the registers hold defined values (those elements reach no result: every
  reduction update and global write is guarded by the window's bounds, lower_indexing.py).

Expects a ``VectorLoad`` (global to local) or ``VectorStore`` (local to global) whose global
index is the element at window column ``column`` (which may be negative, or past the row),
aligned to the vector wherever the vector lies inside the row: the schedulers take windows
only where every tensor holding the row lays it out alike (``scheduler_utils.window_width``),
and the lowering reads any other tensor element by element
(``IndexDerivation._window_aligned``). Guarantees no global access outside the row's
elements ``[0, extent)``.
"""

from __future__ import annotations

from pyfuse.ir import dtypes
from pyfuse.ir import kernel_ir as k
from pyfuse.ir.tensor import MemoryType


def windowed_copy(copy: k.VectorLoad | k.VectorStore, column: k.KExpr, extent: int) -> k.If:
    """``copy`` as a whole vector inside the row, else element by element (module doc)."""
    index_dtype = column.dtype
    width = copy.width
    last = k.add(column, k.const(width - 1, index_dtype))
    whole = [_at_least_zero(column), k.less_than(last, k.const(extent, index_dtype))]
    elements: list[k.Stmt] = []
    for element in range(width):
        offset = k.const(element, index_dtype)
        at = k.add(column, offset)
        inside = k.all_of([_at_least_zero(at), k.less_than(at, k.const(extent, index_dtype))])
        if isinstance(copy, k.VectorLoad):
            local = k.add(copy.target_index, offset)
            value = k.Load(copy.source, k.add(copy.source_index, offset), copy.source.dtype)
            zero = k.Const(_zero(copy.target.dtype), copy.target.dtype)
            elements.append(k.Store(copy.target, local, zero))
            elements.append(k.If(inside, [k.Store(copy.target, local, value)]))
        else:
            assert copy.target.memory == MemoryType.GLOBAL
            value = k.Load(copy.source, k.add(copy.source_index, offset), copy.source.dtype)
            elements.append(
                k.If(inside, [k.Store(copy.target, k.add(copy.target_index, offset), value)])
            )
    return k.If(k.all_of(whole), [copy], elements)


def _at_least_zero(index: k.KExpr) -> k.KExpr:
    return k.less_than(k.const(-1, index.dtype), index)


def _zero(dtype: dtypes.DType) -> bool | int | float:
    if dtype.is_bool:
        return False
    return 0.0 if dtype.is_floating else 0
