"""Residuals loaded by TMA: an epilogue input the size of the output, read in place of it.

A residual (``x @ w.T + r`` with ``r`` shaped like the output) is read once per output
element, a pair of columns at a time: 64 global loads per thread and tile at 128x256, on the
epilogue's critical path. Where the output it feeds is staged for a TMA store
(:mod:`matmul_epilogue`), the residual's chunk can come the same way in reverse: the
warpgroup's leader loads it with one TMA copy into the very staging buffer the chunk's output
will be written to, ahead of time (the tile's first two chunks while its main loop runs, each
later one while the chunk two before it computes), and each thread reads its pairs there
(``StagedLoad``) before writing its outputs over them (``backend_ptx/matmul_residuals.py``).

Expects the matmul lowering's TMA stores (two staging buffers per consumer warpgroup), an
unguarded epilogue (every output staged) without epilogue warps or stream-K.

Guarantees: :meth:`EpilogueResiduals.host` gives a store only for a read of a view of a
fusion input (no offset) whose memory a tensor map describes with exactly that store's dims,
roles and element size, where that store's output depends on the read (so each thread's
write of a pair comes after, and from, its read of the same place); each store hosts at most
one residual; :attr:`EpilogueResiduals.residuals` lists the ones hosted, in the order the
reads met them.
"""

from __future__ import annotations

from pyfuse.ir import kernel_ir as k
from pyfuse.ir.exprs import MmaOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.id_model import IdModel
from pyfuse.ir.tensor import TensorView
from pyfuse.passes.matmul_epilogue import tile_layout
from pyfuse.passes.scheduler_utils import upstream
from pyfuse.passes.skip_intermediates import alias_root, view_offset


class EpilogueResiduals:
    """The residuals of one matmul kernel, planned as the lowering meets their reads."""

    def __init__(
        self,
        fusion: Fusion,
        mma: MmaOp,
        id_model: IdModel,
        batch: int,
        stores: list[k.TmaStore],
        staged: list[TensorView],
    ) -> None:
        """``staged[i]`` is the output ``stores[i]`` writes."""
        self.fusion, self.mma, self.id_model, self.batch = fusion, mma, id_model, batch
        self.stores = stores
        self.upstream = [upstream([out]) for out in staged]
        self.residuals: list[k.TmaResidual] = []
        self._hosts: dict[int, int | None] = {}

    def host(self, tv: TensorView, buffer_name: str) -> int | None:
        """The store whose staging buffers hold ``tv``'s chunks (``buffer_name``: the input's
        kernel buffer), or None: ``tv`` stays a global load."""
        if id(tv) not in self._hosts:
            self._hosts[id(tv)] = self._plan(tv, buffer_name)
        return self._hosts[id(tv)]

    def _plan(self, tv: TensorView, buffer_name: str) -> int | None:
        if not self.fusion.is_input(alias_root(tv)) or view_offset(tv):
            return None
        layout = tile_layout(tv, self.mma, self.id_model, self.batch)
        if layout is None:
            return None
        taken = {residual.store for residual in self.residuals}
        for index, store in enumerate(self.stores):
            fits = (
                index not in taken
                and id(tv) in self.upstream[index]
                and store.dtype.itemsize == tv.dtype.itemsize
                and store.shape == tuple(extent for extent, _, _ in layout)
                and store.roles == tuple(role for _, _, role in layout)
            )
            if fits:
                self.residuals.append(
                    k.TmaResidual(
                        buffer_name=buffer_name,
                        dtype=tv.dtype,
                        shape=store.shape,
                        strides=tuple(stride for _, stride, _ in layout),
                        box=store.box,
                        roles=store.roles,
                        swizzle_bytes=store.swizzle_bytes,
                        store=index,
                    )
                )
                return index
        return None
