"""Cache tensors: copies a scheduler inserts next to global memory.

``cache_after(tv)`` makes the consumers of ``tv`` read a copy (a load from global into
registers or shared memory); ``cache_before(tv)`` makes ``tv``'s definition write a copy
that is then stored to ``tv`` (so the store can be vectorized or go through TMA).
Both keep the fusion's values unchanged: only where data lives moves.
"""

from __future__ import annotations

from pyfuse.ir.exprs import Expr, LoadStoreKind, LoadStoreOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.iterdomain import IterDomain
from pyfuse.ir.tensor import MemoryType, TensorView, new_axes_like


def cache_after(
    fusion: Fusion,
    tv: TensorView,
    memory_type: MemoryType = MemoryType.LOCAL,
    kind: LoadStoreKind = LoadStoreKind.SET,
    uses: list[Expr] | None = None,
) -> TensorView:
    """Insert ``cache = set(tv)`` and make the given uses of ``tv`` (all by default) read
    ``cache``."""
    if uses is None:
        uses = fusion.uses_in_fusion(tv)
    with fusion:
        cache = TensorView(new_axes_like(tv.no_reductions), tv.dtype, memory_type=memory_type)
        LoadStoreOp(cache, tv, kind)
    for use in uses:
        use.replace_input(tv, cache)
    return cache


def cache_before(
    fusion: Fusion, tv: TensorView, memory_type: MemoryType = MemoryType.LOCAL
) -> TensorView:
    """Make ``tv``'s definition write a new tensor ``cache`` and define ``tv = set(cache)``.
    ``cache`` takes ``tv``'s logical domain (reductions included); ``tv`` gets fresh axes.
    Exprs that read ``tv`` read ``cache`` instead: an output the kernel also uses
    (a residual returned and normalized) is not read back from global memory."""
    definition = tv.definition
    if definition is None:
        raise ValueError(f"T{tv.name} is a fusion input and has no definition to cache")
    readers = list(fusion.uses_in_fusion(tv))
    with fusion:
        cache = TensorView(tv.logical, tv.dtype, root=tv.root, memory_type=memory_type)
        fresh: list[IterDomain] = new_axes_like(tv.no_reductions)
        tv.logical = fresh
        tv.loop = list(fresh)
        tv.root = None
        tv.history = []
        index = definition.outputs.index(tv)
        definition.outputs[index] = cache
        cache.definition = definition
        tv.definition = None
        LoadStoreOp(tv, cache)
    for reader in readers:
        reader.replace_input(tv, cache)
    return cache
