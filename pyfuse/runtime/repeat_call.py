"""The warm path's shortcut for a call like the last one: torch tensors whose metadata match
the previous call's, checked in one C++ call instead of a call key built in Python.

Expects the arguments of a call the hot path (:func:`pyfuse.runtime.calls.call`) has
already bound, and that bound plan. Guarantees: :meth:`Repeat.run` runs the bound plan and
returns the call's result only when every argument is a torch tensor with the same shape,
strides, dtype, device and dispatch keys (grad mode and requires_grad included) as the ones
the shortcut was made from, and the addresses keep the same alignment class; the bound plan
is then the one the full call key would find. Anything else (another shape, a Python number,
a CuPy array, a misaligned view, a second device with kernels loaded) returns None and the
call takes the full path. A plan of one directly launched kernel and one output runs inline,
in the shortcut's own frame.

The check is torch's own guard for compiled graphs (``torch._C._dynamo.guards.TensorGuards``,
what ``torch.compile`` checks on every call); where this torch build lacks it, there is no
shortcut. The check and the two addresses of a call take about a third of the time the
call key took (docs/performance.md, "An unguarded staged epilogue, tiles by waves, GEMV
vectors, the warm call's shortcut").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from pyfuse.runtime.arrays import TORCH, Bound, DirectParts, kind_of
from pyfuse.runtime.launch import DEVICES

_ALIGNMENT_MASK = 15  # the alignment class of the call key: every address a multiple of 16


class FunctionState(Protocol):
    """What the shortcut reads of the function's state (``runtime.calls``): the guard of
    its captured Python values (None when nothing is guarded), the objects last seen there,
    and the bound table of their values."""

    @property
    def check(self) -> Callable[[tuple[object, ...]], bool] | None: ...

    @property
    def captured(self) -> tuple[object, ...]: ...

    @property
    def bound(self) -> Mapping[Any, Bound]: ...


class Repeat:
    """The last call's metadata check and its bound plan: ``run(arrays)`` is the call's
    result, or None where the full path must run: the arguments do not repeat the last
    call's metadata, or a captured Python value changed (then the full path switches the
    function's bound table)."""

    __slots__ = ("_aligned", "_check", "_count", "_state", "bound", "run", "table")

    def __init__(
        self,
        check: Callable[..., bool],
        count: int,
        aligned: bool,
        bound: Bound,
        table: Mapping[Any, Bound],
        state: FunctionState,
    ) -> None:
        self.bound = bound
        # The bound table (one per value of the function's captured Python values) ``bound``
        # was found in: the shortcut runs only while that table is the state's current one.
        self.table = table
        self._state = state
        self._check = check
        self._count = count
        self._aligned = aligned
        parts = getattr(bound, "direct_parts", None)
        direct = parts() if parts is not None else None
        self.run: Callable[[Sequence[Any]], Any] = (
            self._run_bound if direct is None else self._inline(direct)
        )

    def pointers(self, arrays: Sequence[Any]) -> list[int] | None:
        """The arguments' addresses where the call repeats the last one's metadata; None
        where it does not."""
        if len(arrays) != self._count or not self._check(*arrays):
            return None
        pointers = [array.data_ptr() for array in arrays]
        misaligned = 0
        for pointer in pointers:
            misaligned |= pointer
        if (misaligned & _ALIGNMENT_MASK == 0) is not self._aligned:
            return None
        return pointers

    def _current(self) -> bool:
        """Whether the captured values are those last seen and ``table`` is still current."""
        state = self._state
        guard = state.check
        if guard is not None and not guard(state.captured):
            return False
        return state.bound is self.table

    def _run_bound(self, arrays: Sequence[Any]) -> Any:
        if not self._current():
            return None
        pointers = self.pointers(arrays)
        if pointers is None:
            return None
        return self.bound.run(arrays, pointers, None)

    def _inline(self, direct: DirectParts) -> Callable[[Sequence[Any]], Any]:
        """:meth:`_current`, :meth:`pointers`, the output's allocation and the launch in one
        frame: the steps ``bound.run`` takes for a plan of one direct kernel and one output,
        with every object they read bound once (docs/performance.md, "Warm call")."""
        check, count, aligned = self._check, self._count, self._aligned
        allocate, (shape, strides, dtype), stream, device, launch = direct
        devices, state, table = DEVICES, self._state, self.table
        guard = state.check

        def run(arrays: Sequence[Any]) -> Any:
            # With several devices loaded, the full path makes the device's context current.
            if len(arrays) != count or devices.several:
                return None
            if guard is not None and not guard(state.captured):
                return None
            if state.bound is not table or not check(*arrays):
                return None
            pointers = [array.data_ptr() for array in arrays]
            misaligned = 0
            for pointer in pointers:
                misaligned |= pointer
            if (misaligned & _ALIGNMENT_MASK == 0) is not aligned:
                return None
            output = allocate(shape, strides, dtype)
            pointers.append(output.data_ptr())
            launch(pointers, stream(device))
            return output

        return run


def repeat_of(
    arrays: Sequence[Any],
    aligned: bool,
    bound: Bound,
    table: Mapping[Any, Bound],
    state: FunctionState,
) -> Repeat | None:
    """A shortcut for calls like this one, whose plan is ``bound`` (found in ``table``, the
    current table of ``state``) and whose addresses are ``aligned``; None unless every
    argument is a torch tensor and this torch has the check."""
    if not arrays or any(kind_of(array) is not TORCH for array in arrays):
        return None
    import torch  # the arguments are torch tensors: torch is loaded

    guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
    make = getattr(guards, "TensorGuards", None)
    if make is None:
        return None
    try:
        guard = make(
            *arrays,
            dynamic_dims_sizes=[list(array.shape) for array in arrays],
            dynamic_dims_strides=[list(array.stride()) for array in arrays],
        )
    except Exception:  # another torch's signature: no shortcut, the full path is right
        return None
    return Repeat(guard.check, len(arrays), aligned, bound, table, state)
