"""The warm path's shortcut on the CPU: what :class:`Repeat` accepts and refuses, and that
no shortcut is made for arguments that are not torch tensors (the GPU tests run it on
real tensors: tests/gpu/test_gpu_repeat_call.py)."""

from __future__ import annotations

from typing import Any

from pyfuse.runtime.repeat_call import Repeat, repeat_of


class _Array:
    def __init__(self, address: int, shape: tuple[int, ...]) -> None:
        self.address, self.shape = address, shape

    def data_ptr(self) -> int:
        return self.address


def _repeat(aligned: bool = True) -> Repeat:
    def same_shapes(*arrays: Any) -> bool:
        return all(array.shape == (4,) for array in arrays)

    return Repeat(same_shapes, 2, aligned, bound=object(), table={})  # type: ignore[arg-type]


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
    assert repeat_of((1.0, 2), True, object(), {}) is None  # type: ignore[arg-type]
    assert repeat_of((), True, object(), {}) is None  # type: ignore[arg-type]
