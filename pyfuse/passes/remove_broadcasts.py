"""remove_broadcasts: at lowering, the BroadcastOps (and permutes) that feed an MmaOp are
aliased away so the MMA reads its shared-memory operands, loaded straight from the inputs.

Expects a matmul kernel fusion after scheduling: each MMA operand is a shared-memory cache
(TMA load) of a chain of metadata ops starting at a kernel input. ``skip_intermediates``
has usually aliased that chain already; this pass aliases any link still materialized (a
tensor in global memory that is not an alias) and checks the result.

Guarantees: for every MMA operand cache, the tensor it loads from is an alias (or the input
itself) whose allocation domain describes the input's memory, which is what ``lower_matmul``
builds TMA descriptors, indexing and synchronization from. A chain that cannot be aliased
(it moves data) raises :class:`ScheduleError` naming the tensors, never a silent copy.
"""

from __future__ import annotations

from pyfuse.errors import ScheduleError
from pyfuse.ir.exprs import LoadStoreKind, LoadStoreOp, MmaOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.tensor import MemoryType, TensorView
from pyfuse.passes.skip_intermediates import is_metadata_op, view_allocation


def _alias_chain(fusion: Fusion, view: TensorView) -> TensorView:
    """Alias every link from a kernel input to ``view``; returns the input."""
    if fusion.is_input(view):
        return view
    if view.alias_of is not None:
        return view.alias_of
    definition = view.definition
    if definition is None or not is_metadata_op(definition):
        op = definition.op_name if definition is not None else "nothing"
        raise ScheduleError(
            f"MMA operand view T{view.name} is made by {op}, not a metadata op of an input; "
            "the matmul scheduler should have declined this kernel",
            op="remove_broadcasts",
        )
    producer = definition.tensor_inputs[0]
    root = _alias_chain(fusion, producer)
    allocation = view_allocation(definition, producer)
    if allocation is None:
        raise ScheduleError(
            f"T{view.name} = {definition.op_name}(T{producer.name}) moves data and cannot be "
            "read in place by TMA",
            op="remove_broadcasts",
        )
    view.set_allocation(*allocation)
    view.memory_type = MemoryType.GLOBAL
    view.alias_of = root
    return root


def remove_broadcasts(fusion: Fusion) -> None:
    """Alias the operand chains of every MMA."""
    for expr in fusion.exprs():
        if not isinstance(expr, MmaOp):
            continue
        for cache in (expr.a, expr.b):
            definition = cache.definition
            if not (
                isinstance(definition, LoadStoreOp)
                and definition.kind == LoadStoreKind.TMA_LOAD
                and cache.memory_type == MemoryType.SHARED
            ):
                raise ScheduleError(
                    f"MMA operand T{cache.name} is not a shared-memory TMA cache",
                    op="remove_broadcasts",
                )
            _alias_chain(fusion, definition.tensor_inputs[0])
