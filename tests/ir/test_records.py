"""``record`` behaves as ``dataclass`` with the same options, for everything pyfuse uses.

Each case declares the same class twice, once with ``@dataclass`` and once with ``@record``,
and compares what the two do: construction with defaults and factories, repr, equality,
hashing, frozen assignment, ``__post_init__``, and the ``dataclasses`` helpers.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyfuse.ir import records
from pyfuse.ir.records import record, record_options

OPTIONS = [
    {},
    {"frozen": True},
    {"eq": False},
    {"frozen": True, "eq": False},
    {"repr": False},
    {"frozen": True, "repr": False},
    {"eq": False, "repr": False},
]


def _pair(options: dict[str, bool]) -> tuple[type, type]:
    """The same class declared with dataclass and with record."""

    def body() -> dict[str, Any]:
        return {
            "__annotations__": {
                "name": "str",
                "count": "int",
                "items": "list[int]",
                "hidden": "int",
                "note": "ClassVar[str]",
            },
            "count": 1,
            "items": field(default_factory=list),
            "hidden": field(default=7, repr=False),
            "note": "shared",
            "__module__": __name__,
        }

    standard = dataclass(**options)(type("Sample", (), body()))
    ours = record(**options)(type("Sample", (), body()))
    return standard, ours


def _fields(cls: type) -> list[tuple[Any, ...]]:
    return [
        (f.name, f.default, f.default_factory, f.repr, f.compare) for f in dataclasses.fields(cls)
    ]


@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_construction_fields_and_helpers_match_dataclass(options: dict[str, bool]) -> None:
    standard, ours = _pair(options)
    assert _fields(ours) == _fields(standard)
    assert dataclasses.is_dataclass(ours)
    assert record_options(ours) == {"frozen": False, "eq": True, "repr": True} | options
    for args, kwargs in [(("a",), {}), (("b", 3, [1, 2]), {}), (("c",), {"hidden": 9})]:
        mine, theirs = ours(*args, **kwargs), standard(*args, **kwargs)
        assert dataclasses.astuple(mine) == dataclasses.astuple(theirs)
        assert dataclasses.asdict(mine) == dataclasses.asdict(theirs)
        if options.get("repr", True):
            assert repr(mine) == repr(theirs)
        else:
            assert repr(mine).startswith("<") and "Sample object" in repr(mine)
        changed = dataclasses.replace(mine, count=5)
        assert type(changed) is ours and changed.count == 5 and changed.name == mine.name
    # Each instance gets its own default list.
    first, second = ours("x"), ours("y")
    assert first.items == [] and first.items is not second.items
    assert ours.note == "shared" and "note" not in {f.name for f in dataclasses.fields(ours)}
    with pytest.raises(TypeError):
        ours()  # the field without a default is required
    with pytest.raises(TypeError):
        ours("a", unknown=1)


@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_equality_and_hashing_match_dataclass(options: dict[str, bool]) -> None:
    standard, ours = _pair(options)
    assert (ours.__hash__ is None) == (standard.__hash__ is None)
    a, b, c = ours("a", 2, [1]), ours("a", 2, [1]), ours("a", 3, [1])
    sa, sb, sc = standard("a", 2, [1]), standard("a", 2, [1]), standard("a", 3, [1])
    assert (a == b, a == c, a != b) == (sa == sb, sa == sc, sa != sb)
    assert a.__eq__(object()) is NotImplemented or not options.get("eq", True)
    if options.get("frozen") and options.get("eq", True):
        hashable_a, hashable_b = ours("a", 2, ()), ours("a", 2, ())
        assert hash(hashable_a) == hash(hashable_b)
        assert len({hashable_a, hashable_b, ours("z", 2, ())}) == 2


@pytest.mark.parametrize("options", [o for o in OPTIONS if o.get("frozen")], ids=str)
def test_frozen_records_refuse_assignment_and_deletion(options: dict[str, bool]) -> None:
    _, ours = _pair(options)
    sample = ours("a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        sample.count = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        del sample.name
    with pytest.raises(dataclasses.FrozenInstanceError):
        sample.not_a_field = 1  # as dataclass: nothing may be set on the class itself
    assert sample.count == 1


def test_post_init_runs_after_the_fields_are_set() -> None:
    @record(frozen=True)
    class Checked:
        low: int
        high: int = 10

        def __post_init__(self) -> None:
            if self.low > self.high:
                raise ValueError("low above high")
            object.__setattr__(self, "span", self.high - self.low)

    assert Checked(3).span == 7  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="low above high"):
        Checked(11)


def test_methods_the_class_defines_are_kept() -> None:
    @record(frozen=True)
    class Custom:
        value: int

        def __repr__(self) -> str:
            return "custom"

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Custom) and other.value % 10 == self.value % 10

        def __hash__(self) -> int:
            return self.value % 10

    assert repr(Custom(1)) == "custom"
    assert Custom(1) == Custom(11) and hash(Custom(1)) == hash(Custom(11))


def test_recursive_repr_does_not_loop() -> None:
    @record(eq=False)
    class Node:
        children: list[Any] = field(default_factory=list)

    node = Node()
    node.children.append(node)
    assert repr(node).endswith("Node(children=[...])")


def test_copies_and_pickles_round_trip() -> None:
    for value in [FrozenPoint(1, (2, 3)), MutablePoint(4, [5])]:
        assert copy.deepcopy(value) == value
        assert pickle.loads(pickle.dumps(value)) == value


@record(frozen=True)
class FrozenPoint:
    x: int
    rest: tuple[int, ...] = ()


@record
class MutablePoint:
    x: int
    rest: list[int] = field(default_factory=list)


def test_unsupported_options_are_refused() -> None:
    with pytest.raises(TypeError, match="InitVar"):

        @record
        class WithInitVar:
            seed: dataclasses.InitVar[int]

    with pytest.raises(TypeError, match="kw_only"):

        @record
        class WithKeywordOnly:
            flag: bool = field(default=False, kw_only=True)

    with pytest.raises(TypeError, match="frozen"):

        @record
        class Thawed(FrozenPoint):
            extra: int = 0

    with pytest.raises(TypeError, match="follows default"):

        @record
        class BadOrder:
            first: int = 0
            second: int  # type: ignore[misc]


def test_init_false_fields_take_their_default() -> None:
    @record
    class Counter:
        start: int
        seen: list[int] = field(default_factory=list, init=False)
        total: int = field(default=0, init=False)

    counter = Counter(5)
    assert (counter.start, counter.seen, counter.total) == (5, [], 0)
    with pytest.raises(TypeError):
        Counter(5, [])  # type: ignore[call-arg]


def test_docstring_is_kept_or_written_from_the_fields() -> None:
    @record
    class Documented:
        """Says what it is."""

        a: int

    @record
    class Bare:
        a: int
        b: int = 2

    assert Documented.__doc__ == "Says what it is."
    assert Bare.__doc__ == "Bare(a, b)"


def test_class_variables_are_not_fields() -> None:
    @record(frozen=True)
    class WithClassVar:
        limit: ClassVar[int] = 4
        value: int = 0

    assert [f.name for f in dataclasses.fields(WithClassVar)] == ["value"]
    assert WithClassVar(3).limit == 4


@given(st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=3))
def test_equality_agrees_with_dataclass_on_random_values(
    count: int, name: str, items: list[int]
) -> None:
    standard, ours = _pair({"frozen": True})
    mine, theirs = ours(name, count, tuple(items)), standard(name, count, tuple(items))
    other_mine, other_theirs = ours(name, count + 1, tuple(items)), standard(name, count + 1, ())
    assert (mine == ours(name, count, tuple(items))) is True
    assert (mine == other_mine) == (theirs == standard(name, count + 1, tuple(items)))
    assert (theirs == other_theirs) is False and repr(mine) == repr(theirs)
    assert hash(mine) == hash(ours(name, count, tuple(items)))


def test_edge_cases_dataclass_handles_too() -> None:
    @record(frozen=True)
    class Odd:
        self: int  # a field may be called self
        other: int = 2

    assert (Odd(1).self, Odd(1, 3).other) == (1, 3)
    assert Odd.__init__.__module__ == __name__

    class Doubling:
        """A data descriptor: stores twice the value it is given."""

        def __set_name__(self, owner: type, name: str) -> None:
            self.slot = "_" + name

        def __get__(self, obj: Any, owner: type) -> Any:
            return self if obj is None else obj.__dict__[self.slot]

        def __set__(self, obj: Any, value: int) -> None:
            obj.__dict__[self.slot] = 2 * value

    def with_descriptor(decorate: Any) -> Any:
        @decorate
        class Holder:
            value: int = Doubling()  # type: ignore[assignment]

        return Holder

    assert with_descriptor(record(frozen=True))(5).value == 10
    assert with_descriptor(dataclass(frozen=True))(5).value == 10

    with pytest.raises(TypeError, match="__setattr__"):

        @record(frozen=True)
        class OwnSetattr:
            a: int

            def __setattr__(self, name: str, value: Any) -> None:
                object.__setattr__(self, name, value)


def test_init_is_compiled_at_the_first_construction() -> None:
    @record(frozen=True)
    class Lazy:
        a: int
        b: int = 2

    class Plain(Lazy):  # a subclass that is not a record constructs through Lazy's __init__
        pass

    stand_in = Lazy.__dict__["__init__"]
    assert stand_in.__qualname__.endswith("Lazy.__init__") and stand_in.__module__ == __name__
    assert (Plain(1).a, Plain(1).b) == (1, 2)
    compiled = Lazy.__dict__["__init__"]
    assert compiled is not stand_in and compiled.__qualname__.endswith("Lazy.__init__")
    assert Lazy(3, 4) == Lazy(3, 4) and Lazy.__dict__["__init__"] is compiled
    with pytest.raises(TypeError):
        Lazy()  # type: ignore[call-arg]


def test_signature_is_the_fields_before_the_first_construction() -> None:
    def declare(decorate: Any) -> type:
        @decorate
        class Shaped:
            name: str
            count: int = 1
            items: list[int] = field(default_factory=list)
            hidden: int = field(default=0, init=False)

        return Shaped

    ours, standard = declare(record(frozen=True)), declare(dataclass(frozen=True))
    before = str(inspect.signature(ours))  # no instance yet: the stand-in __init__ answers
    assert before == str(inspect.signature(standard))  # (their factory marks are not ours)
    assert before == "(name: 'str', count: 'int' = 1, items: 'list[int]' = <factory>) -> None"
    ours("a")
    assert str(inspect.signature(ours)) == before  # the compiled __init__ says the same


def test_records_use_only_public_dataclasses_api() -> None:
    """dataclass collected the fields (asked for no method), so its helpers are its own."""
    source = inspect.getsource(records)
    assert not re.search(r"dataclasses\._|\._field_type|_FIELD\b|_process_class", source)
    params = FrozenPoint.__dataclass_params__  # type: ignore[attr-defined]
    assert (params.init, params.repr, params.eq, params.frozen) == (False, False, False, False)
    assert record_options(FrozenPoint) == {"frozen": True, "eq": True, "repr": True}


def test_matmul_params_is_a_standard_frozen_dataclass() -> None:
    import pyfuse as pf

    assert dataclasses.is_dataclass(pf.MatmulParams)
    assert "__record_options__" not in pf.MatmulParams.__dict__
    assert pf.MatmulParams.__dataclass_params__.frozen  # type: ignore[attr-defined]
    names = [f.name for f in dataclasses.fields(pf.MatmulParams)]
    assert list(inspect.signature(pf.MatmulParams).parameters) == names
    params = pf.MatmulParams(tile_m=128)
    assert dataclasses.replace(params, stages=3).stages == 3
    assert dataclasses.asdict(params)["tile_m"] == 128
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.tile_m = 64  # type: ignore[misc]


def test_fields_collect_as_dataclass_collects_them() -> None:
    """Bases' fields first, a redeclared one in its place; the Field objects, the class
    attributes, ``__match_args__`` and pattern matching as dataclass leaves them."""

    def declare(decorate: Any) -> tuple[type, type]:
        @decorate
        class Base:
            a: int
            b: list[int] = field(default_factory=list)
            c: int = field(default=3, repr=False)

        @decorate
        class Child(Base):
            d: str = "d"
            a: int = 0

        return Base, Child

    (standard_base, standard), (our_base, ours) = declare(dataclass), declare(record)
    assert _fields(ours) == _fields(standard)
    types = [[f.type for f in dataclasses.fields(cls)] for cls in (ours, standard)]
    assert types[0] == types[1] == ["int", "list[int]", "int", "str"]
    assert ours.__match_args__ == standard.__match_args__ == ("a", "b", "c", "d")
    assert our_base.c == standard_base.c == 3 and not hasattr(our_base, "b")
    assert dataclasses.is_dataclass(ours) and dataclasses.replace(ours(), d="e").d == "e"
    match ours(5):
        case ours(a, b, c, d):  # type: ignore[misc]
            assert (a, b, c, d) == (5, [], 3, "d")


def test_field_mistakes_raise_as_under_dataclass() -> None:
    for decorate in (dataclass, record):
        with pytest.raises(ValueError, match="mutable default"):
            decorate(type("Mutable", (), {"__annotations__": {"x": "list[int]"}, "x": []}))
        with pytest.raises(TypeError, match="no type annotation"):
            decorate(type("Unannotated", (), {"__annotations__": {}, "x": field(default=1)}))
