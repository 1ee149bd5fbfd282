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
shortcut. Measured on the H200 (docs/performance.md, "The warm call's shortcut"): the check
and the two addresses of an ``x + y`` call take 0.85 us where the call key took 2.33.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pyfuse.runtime.arrays import TORCH, Bound, DirectParts, kind_of
from pyfuse.runtime.launch import DEVICES

_ALIGNMENT_MASK = 15  # the alignment class of the call key: every address a multiple of 16


class Repeat:
    """The last call's metadata check and its bound plan: ``run(arrays)`` is the call's
    result, or None where the arguments do not repeat the last call's metadata."""

    __slots__ = ("_aligned", "_check", "_count", "bound", "run", "table")

    def __init__(
        self,
        check: Callable[..., bool],
        count: int,
        aligned: bool,
        bound: Bound,
        table: Mapping[Any, Bound],
    ) -> None:
        self.bound = bound
        # The bound table (one per value of the function's captured Python values) ``bound``
        # was found in: the caller uses the shortcut only while that table is current.
        self.table = table
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

    def _run_bound(self, arrays: Sequence[Any]) -> Any:
        pointers = self.pointers(arrays)
        if pointers is None:
            return None
        return self.bound.run(arrays, pointers, None)

    def _inline(self, direct: DirectParts) -> Callable[[Sequence[Any]], Any]:
        """:meth:`pointers`, the output's allocation and the launch in one frame: the same
        steps as ``bound.run`` takes for a plan of one direct kernel and one output, with
        every object they read bound once (measured in docs/performance.md, "Warm call")."""
        check, count, aligned = self._check, self._count, self._aligned
        allocate, (shape, strides, dtype), stream, device, launch = direct
        devices = DEVICES

        def run(arrays: Sequence[Any]) -> Any:
            # With several devices loaded, the full path makes the device's context current.
            if len(arrays) != count or devices.several or not check(*arrays):
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
    arrays: Sequence[Any], aligned: bool, bound: Bound, table: Mapping[Any, Bound]
) -> Repeat | None:
    """A shortcut for calls like this one, whose plan is ``bound`` (found in ``table``) and
    whose addresses are ``aligned``; None unless every argument is a torch tensor and
    this torch has the check."""
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
    return Repeat(guard.check, len(arrays), aligned, bound, table)
