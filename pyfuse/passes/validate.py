"""Validation of a scheduled kernel fusion: the invariants lowering relies on.

Expects a scheduled, inlined kernel fusion. Guarantees, when it returns: each rule below
holds; otherwise it raises :class:`pyfuse.errors.ScheduleError` naming the tensors (never an
``assert``):

1. **Parallel consistency.** A producer in registers (local memory) is read only by the
   thread that computed it: every producer loop axis bound to a thread or block index maps
   (PERMISSIVE) to a consumer loop axis bound to the same index. A value read across threads
   must live in shared or global memory (and lowering synchronizes on it).
2. **One binding per index.** A tensor binds each thread or block index to at most one loop
   axis.
3. **Inline positions.** A tensor's first ``inline_position`` loop axes map to its
   consumers' axes at the same positions, and it is not inlined past its own reduction axes.
4. **Vectorization.** A vectorized axis of a global-memory access is the innermost loop axis
   and moves at most 16 bytes.
5. **No grid reductions.** A reduction axis is not bound to a block index (the kernels have
   no cross-block reduction step) unless it is the split-K axis of a matmul accumulator.
6. **Reference trips.** Given the kernel's reference (pointwise and reduction kernels, whose
   lowering derives every index from the reference's loop indices), a tensor lacking an
   axis the reference merged into one it has (``x.squeeze(1)`` of an ``[M, 1]`` beside an
   ``[M, K]`` reference flattened to ``M*K``; ``replay_short``, set by replay) is inlined
   into a consumer: in a loop nest of its own, the split replayed on its shorter extent
   would be indexed by the reference's loops and only part of it computed; the same for a
   serial loop of its own past its inline position (``clamp(lse(v), v)`` of a ``[17, 1, 5]``
   broadcast against ``[17, 1, 1, 5]``: one value read for every trip of the reference's).
"""

from __future__ import annotations

from pyfuse.errors import ScheduleError
from pyfuse.ir.exprs import MmaOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.id_model import IdMappingMode, IdModel
from pyfuse.ir.iterdomain import ParallelType
from pyfuse.ir.tensor import MemoryType, TensorView

MAX_VECTOR_BYTES = 16


def _fail(message: str) -> None:
    raise ScheduleError(message, op="validate")


def _check_bindings(tv: TensorView) -> None:
    seen: dict[ParallelType, str] = {}
    for axis in tv.loop:
        ptype = axis.parallel_type
        if not ptype.is_hardware_index:
            continue
        if ptype in seen:
            _fail(
                f"T{tv.name} binds {ptype.name} to two loop axes ({seen[ptype]} and {axis}); "
                "each thread or block index can drive one axis"
            )
        seen[ptype] = str(axis)


def _moves_global_memory(tv: TensorView) -> bool:
    definition = tv.definition
    reads_global = definition is not None and any(
        t.memory_type == MemoryType.GLOBAL for t in definition.tensor_inputs
    )
    return tv.memory_type == MemoryType.GLOBAL or reads_global


def _check_vectorize(tv: TensorView) -> None:
    """A vectorized global access is one instruction; in registers the axis is just unrolled."""
    if not _moves_global_memory(tv):
        return
    for index, axis in enumerate(tv.loop):
        if axis.parallel_type != ParallelType.VECTORIZE:
            continue
        if index != len(tv.loop) - 1:
            _fail(f"T{tv.name}'s vectorized axis {axis} is not its innermost loop axis")
        if axis.extent * tv.dtype.itemsize > MAX_VECTOR_BYTES:
            _fail(
                f"T{tv.name}'s vectorized axis {axis} moves {axis.extent * tv.dtype.itemsize} "
                f"bytes; at most {MAX_VECTOR_BYTES}"
            )


def _check_reductions(tv: TensorView) -> None:
    if isinstance(tv.definition, MmaOp):
        return  # a split-K axis of an accumulator is reduced by the matmul epilogue
    for axis in tv.loop:
        if axis.is_reduction and axis.parallel_type.is_block_dim:
            _fail(
                f"T{tv.name} reduces over {axis} bound to {axis.parallel_type.name}; "
                "reductions across blocks are not supported"
            )


def _check_parallel_pair(producer: TensorView, consumer: TensorView, id_model: IdModel) -> None:
    if producer.memory_type != MemoryType.LOCAL:
        return  # shared and global memory are visible across threads
    for p_axis in producer.loop:
        ptype = p_axis.parallel_type
        if not ptype.is_hardware_index or (p_axis.is_broadcast and p_axis.extent == 1):
            continue
        if p_axis.is_reduction:
            continue  # a cross-thread reduction leaves its result in every thread
        mapped = [
            c_axis
            for c_axis in consumer.loop
            if id_model.mapped(p_axis, c_axis, IdMappingMode.PERMISSIVE)
        ]
        if not mapped:
            continue  # the consumer does not iterate this axis (e.g. a reduction result)
        if all(c_axis.parallel_type != ptype for c_axis in mapped):
            found = ", ".join(f"{c}:{c.parallel_type.name}" for c in mapped)
            _fail(
                f"T{producer.name} is in registers with {p_axis} bound to {ptype.name}, but "
                f"T{consumer.name} reads it through {found}: a value read across threads must "
                "be in shared or global memory"
            )


def _check_inline(tv: TensorView, consumers: list[TensorView], id_model: IdModel) -> None:
    for index in range(tv.inline_position):
        axis = tv.loop[index]
        if axis.is_reduction:
            _fail(f"T{tv.name} is inlined past its reduction axis {axis}")
        for consumer in consumers:
            if index >= len(consumer.loop) or not id_model.mapped(
                axis, consumer.loop[index], IdMappingMode.PERMISSIVE
            ):
                _fail(
                    f"T{tv.name} is inlined at position {tv.inline_position}, but its loop axis "
                    f"{axis} does not map to T{consumer.name}'s loop axis at position {index}"
                )


# Loops that run trips (a vectorized axis is one access of the innermost elements, which a
# short replay splits as the reference does).
_LOOPING = (ParallelType.SERIAL, ParallelType.UNROLL, ParallelType.UNSWITCH)


def _check_reference_trips(tv: TensorView, reference: TensorView) -> None:
    if not tv.replay_short:
        return
    own = [
        axis
        for axis in tv.loop[tv.inline_position :]
        if axis.parallel_type in _LOOPING and not axis.is_broadcast
    ]
    if tv.inline_position == 0 or own:
        _fail(
            f"T{tv.name} lacks an axis the reference T{reference.name} merges into its loops, "
            f"and runs {f'its loop {own[0]}' if own else 'a loop nest'} on its own: the "
            "reference's indices would cover part of it, or a consumer inside the reference's "
            "loop would read one value for all its trips"
        )


def validate(fusion: Fusion, reference: TensorView | None = None) -> IdModel:
    """Check ``fusion``'s schedule (see the module docstring); returns the IdModel it built,
    for a later pass that reads the same fusion unchanged. ``reference``: rule 6."""
    id_model = IdModel(fusion)
    for tv in fusion.tensors():
        if fusion.is_input(tv) or tv.alias_of is not None:
            continue
        if reference is not None and tv is not reference:
            _check_reference_trips(tv, reference)
        _check_bindings(tv)
        _check_vectorize(tv)
        _check_reductions(tv)
        consumers = id_model.consumers_of(tv)
        _check_inline(tv, consumers, id_model)
        for consumer in consumers:
            _check_parallel_pair(tv, consumer, id_model)
    return id_model
