"""The warm path's shortcut on the CPU: what :class:`Repeat` accepts and refuses, what it
runs inline for a plan of one direct kernel and one output, and that no shortcut is made for
arguments that are not torch tensors (the GPU tests run it on real tensors:
tests/gpu/test_gpu_repeat_call.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from pyfuse.runtime.arrays import DirectParts
from pyfuse.runtime.launch import DEVICES
from pyfuse.runtime.repeat_call import Repeat, repeat_of


def _state(table: dict[Any, Any], check: Any = None) -> SimpleNamespace:
    """A function state with nothing guarded (or ``check``) whose current table is ``table``."""
    return SimpleNamespace(check=check, captured=(), bound=table)


class _Array:
    def __init__(self, address: int, shape: tuple[int, ...]) -> None:
        self.address, self.shape = address, shape

    def data_ptr(self) -> int:
        return self.address


def _repeat(aligned: bool = True) -> Repeat:
    def same_shapes(*arrays: Any) -> bool:
        return all(array.shape == (4,) for array in arrays)

    return Repeat(same_shapes, 2, aligned, object(), {}, _state({}))  # type: ignore[arg-type]


def test_a_repeat_with_the_same_metadata_gets_its_addresses() -> None:
    assert _repeat().pointers((_Array(256, (4,)), _Array(512, (4,)))) == [256, 512]


def test_other_metadata_counts_or_alignment_take_the_full_path() -> None:
    repeat = _repeat()
    assert repeat.pointers((_Array(256, (4,)), _Array(512, (5,)))) is None
    assert repeat.pointers((_Array(256, (4,)),)) is None
    assert repeat.pointers((_Array(256, (4,)), _Array(516, (4,)))) is None  # misaligned
    assert _repeat(aligned=False).pointers((_Array(256, (4,)), _Array(516, (4,)))) == [256, 516]
    assert _repeat(aligned=False).pointers((_Array(256, (4,)), _Array(512, (4,)))) is None


def test_no_shortcut_without_torch_tensors() -> None:
    assert repeat_of((1.0, 2), True, object(), {}, _state({})) is None  # type: ignore[arg-type]
    assert repeat_of((), True, object(), {}, _state({})) is None  # type: ignore[arg-type]


class _DirectBound:
    """A bound plan of one direct kernel and one output, recording what the shortcut does."""

    def __init__(self) -> None:
        self.launches: list[tuple[list[int], int]] = []

    def direct_parts(self) -> DirectParts:
        def allocate(shape: tuple[int, ...], strides: tuple[int, ...], dtype: str) -> _Array:
            assert (shape, strides, dtype) == ((4,), (1,), "float32")
            return _Array(1024, shape)

        def launch(pointers: list[int], stream: int) -> None:
            self.launches.append((pointers, stream))

        return DirectParts(allocate, ((4,), (1,), "float32"), lambda device: 70 + device, 3, launch)

    def run(self, arrays: Any, pointers: list[int], stream: int | None) -> Any:
        raise AssertionError("a direct plan runs inline")


def _same_shapes(*arrays: Any) -> bool:
    return all(array.shape == (4,) for array in arrays)


def test_a_direct_plan_allocates_and_launches_in_the_shortcut() -> None:
    bound = _DirectBound()
    table: dict[Any, Any] = {}
    repeat = Repeat(_same_shapes, 2, True, bound, table, _state(table))  # type: ignore[arg-type]
    output = repeat.run((_Array(256, (4,)), _Array(512, (4,))))
    assert output.data_ptr() == 1024
    assert bound.launches == [([256, 512, 1024], 73)]  # the device's current stream
    assert repeat.run((_Array(256, (4,)), _Array(512, (5,)))) is None
    assert repeat.run((_Array(256, (4,)), _Array(516, (4,)))) is None  # misaligned
    assert len(bound.launches) == 1


def test_with_several_devices_loaded_the_shortcut_leaves_the_call_to_the_full_path(
    monkeypatch: Any,
) -> None:
    bound = _DirectBound()
    table: dict[Any, Any] = {}
    repeat = Repeat(_same_shapes, 2, True, bound, table, _state(table))  # type: ignore[arg-type]
    monkeypatch.setattr(DEVICES, "several", True)
    assert repeat.run((_Array(256, (4,)), _Array(512, (4,)))) is None
    assert bound.launches == []


def test_other_plans_run_through_the_bound_plan() -> None:
    class _Bound:
        def run(self, arrays: Any, pointers: list[int], stream: int | None) -> Any:
            return ("ran", pointers, stream)

    table: dict[Any, Any] = {}
    repeat = Repeat(_same_shapes, 2, True, _Bound(), table, _state(table))  # type: ignore[arg-type]
    assert repeat.run((_Array(256, (4,)), _Array(512, (4,)))) == ("ran", [256, 512], None)
    assert repeat.run((_Array(256, (4,)),)) is None


def test_a_changed_captured_value_or_table_leaves_the_call_to_the_full_path() -> None:
    bound = _DirectBound()
    table: dict[Any, Any] = {}
    seen = {"same": True}
    state = _state(table, check=lambda captured: seen["same"])
    repeat = Repeat(_same_shapes, 2, True, bound, table, state)  # type: ignore[arg-type]
    arrays = (_Array(256, (4,)), _Array(512, (4,)))
    assert repeat.run(arrays) is not None
    seen["same"] = False  # a closure cell now holds another object
    assert repeat.run(arrays) is None
    seen["same"] = True
    state.bound = {}  # the full path switched to another value's table
    assert repeat.run(arrays) is None
    assert len(bound.launches) == 1
