"""Name counters: a cloned fusion numbers on from the original's counters, on its own."""

from __future__ import annotations

import copy
import threading
import warnings

import pyfuse as pf
from pyfuse.ir.naming import Namer


def test_a_deep_copy_of_a_namer_goes_on_from_the_same_numbers_on_its_own() -> None:
    namer = Namer()
    assert [namer.next("tv") for _ in range(3)] == [0, 1, 2]
    with warnings.catch_warnings():
        # Python 3.12 warned that deep copies of an itertools.count go in 3.14.
        warnings.simplefilter("error")
        twin = copy.deepcopy(namer)
    assert twin.next("tv") == 3 and twin.next("id") == 0
    assert namer.next("tv") == 3  # the original did not see the copy's numbers
    assert sorted(twin.counters()) == [("id", 1), ("tv", 4)]


def test_a_cloned_fusion_keeps_its_names_and_counters() -> None:
    fusion = pf.fuse(lambda x: pf.exp(x) + 1).trace(pf.spec((4,), pf.float32))
    cloned, _ = fusion.clone()
    assert str(cloned) == str(fusion)
    assert cloned.namer.counters() == fusion.namer.counters()
    assert cloned.namer is not fusion.namer


def test_numbers_from_many_threads_are_all_different() -> None:
    namer = Namer()
    taken: list[int] = []

    def take() -> None:
        numbers = [namer.next("tv") for _ in range(1000)]
        taken.extend(numbers)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(taken) == list(range(4000))
