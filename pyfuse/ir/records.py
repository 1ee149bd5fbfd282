"""``record``: ``@dataclass`` with the same meaning, built for a faster import.

Why: the standard library's ``dataclass`` compiles each generated method (``__init__``,
``__repr__``, ``__eq__``, ``__hash__``, the frozen ``__setattr__`` and ``__delattr__``) from its
own source string, a separate ``exec`` each. pyfuse declares some seventy record classes, and
the first compile of a new fusion loads most of them: on Python 3.11 and 3.12 that was 35 ms of
a 56 ms compiler import and 25 ms of the runtime's (measured with ``time.perf_counter`` around
``dataclasses._process_class``). ``record`` lets the standard library collect the fields (so
``dataclasses.fields``, ``replace``, ``astuple`` and ``is_dataclass`` keep working) but asks it
for no methods. It compiles ``__init__`` alone (its speed matters: the passes build IR nodes
by the thousand); the other methods are closures over the field names.

Supported: ``frozen``, ``eq``, ``repr``; fields with defaults, ``field(default_factory=...)``,
``field(repr=False)``, ``field(compare=False)``, ``field(hash=...)`` and ``field(init=False)``
(with a default or factory); ``__post_init__``; methods the class defines itself are kept, as
``dataclass`` keeps them. The generated methods behave as Python 3.11's: ``__eq__`` compares
the compared fields as tuples when both operands have the same class; ``eq`` with ``frozen``
hashes that tuple; ``eq`` without ``frozen`` makes instances unhashable; frozen instances raise
``dataclasses.FrozenInstanceError`` on assignment and deletion. Not supported (rejected):
``order``, ``unsafe_hash``, ``slots``, ``kw_only``, ``InitVar`` fields and ``match_args=False``.
``__dataclass_params__`` reports ``frozen=False, eq=False`` (what the standard library was
asked for); ``record_options(cls)`` gives the real options. So a record and a standard
dataclass must not inherit from each other: their frozen checks would disagree.
"""

from __future__ import annotations

import dataclasses
import operator
import reprlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:  # only type checkers read it; importing typing_extensions would cost the import time

    def dataclass_transform(**_: Any) -> Callable[[Any], Any]:
        return lambda decorated: decorated


_Class = TypeVar("_Class", bound=type)


class _UseFactory:
    """The default of an ``__init__`` parameter whose field has a ``default_factory``."""

    def __repr__(self) -> str:
        return "<factory>"


_USE_FACTORY = _UseFactory()


@overload
@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def record(cls: _Class, /) -> _Class: ...


@overload
def record(
    *, frozen: bool = False, eq: bool = True, repr: bool = True
) -> Callable[[_Class], _Class]: ...


def record(
    cls: _Class | None = None,
    /,
    *,
    frozen: bool = False,
    eq: bool = True,
    repr: bool = True,  # noqa: A002
) -> _Class | Callable[[_Class], _Class]:
    """Decorate a class as ``@dataclass(frozen=..., eq=..., repr=...)`` would."""

    def wrap(target: _Class) -> _Class:
        return _build(target, frozen=frozen, eq=eq, repr_=repr)

    return wrap if cls is None else wrap(cls)


def record_options(cls: type) -> dict[str, bool]:
    """The options ``record`` built ``cls`` with: ``frozen``, ``eq``, ``repr``."""
    return dict(cls.__dict__["__record_options__"])


def _build(cls: _Class, *, frozen: bool, eq: bool, repr_: bool) -> _Class:
    # A frozen base with a non-frozen subclass (or the reverse) is an error for dataclass; the
    # standard library cannot see it here (it is asked for frozen=False), so check it.
    for base in cls.__mro__[1:]:
        options = base.__dict__.get("__record_options__")
        if options is not None and options["frozen"] != frozen:
            mine, theirs = ("frozen", "non-frozen") if frozen else ("non-frozen", "frozen")
            raise TypeError(f"cannot inherit {mine} record {cls.__qualname__} from a {theirs} one")
    # The class body's own methods win, as with dataclass; look before any are added.
    own = cls.__dict__
    explicit_hash = "__hash__" in own and not (own["__hash__"] is None and "__eq__" in own)
    keep = {name for name in ("__init__", "__repr__", "__eq__") if name in own}
    if frozen:
        for name in ("__setattr__", "__delattr__"):
            if name in own:  # as dataclass: a frozen class's own would be overwritten
                raise TypeError(f"cannot overwrite attribute {name} in class {cls.__name__}")
    has_doc = bool(own.get("__doc__"))
    if not has_doc:
        # dataclass documents a class without a docstring by its signature: here that of
        # object.__init__, which inspect parses from text at the cost of a regex compile
        # (16 ms). The docstring is written below, from the fields.
        cls.__doc__ = cls.__name__
    dataclasses.dataclass(cls, init=False, repr=False, eq=False)
    fields = dataclasses.fields(cls)
    if any(f.kw_only is True for f in fields):
        raise TypeError(f"record {cls.__qualname__}: kw_only fields are not supported")
    # fields() leaves out ClassVar and InitVar pseudo-fields; an InitVar would need an
    # __init__ parameter that is not a field.
    named = {f.name for f in fields}
    for name, pseudo in cls.__dataclass_fields__.items():  # type: ignore[attr-defined]
        if name not in named and "InitVar" in str(pseudo.type):
            raise TypeError(f"record {cls.__qualname__}: InitVar fields are not supported")

    made: dict[str, Callable[..., Any]] = {}
    if "__init__" not in keep:
        made["__init__"] = _compiled_init(cls, fields, frozen)
        if not has_doc:  # as dataclass does: the class's signature (here without types)
            cls.__doc__ = f"{cls.__name__}({', '.join(f.name for f in fields if f.init)})"
    if repr_ and "__repr__" not in keep:
        made["__repr__"] = _repr_method(tuple(f.name for f in fields if f.repr))
    if eq and "__eq__" not in keep:
        made["__eq__"] = _eq_method(_values_getter([f.name for f in fields if f.compare]))
    if eq and frozen and not explicit_hash:
        hashed = [f.name for f in fields if (f.compare if f.hash is None else f.hash)]
        made["__hash__"] = _hash_method(_values_getter(hashed))
    if frozen:
        made.update(_frozen_methods(cls, frozenset(f.name for f in fields)))
    for name, method in made.items():
        method.__module__ = cls.__module__
        method.__name__ = name
        method.__qualname__ = f"{cls.__qualname__}.{name}"
        setattr(cls, name, method)
    if eq and not frozen and not explicit_hash:
        cls.__hash__ = None  # type: ignore[assignment]  # mutable and compared: unhashable
    cls.__record_options__ = {"frozen": frozen, "eq": eq, "repr": repr_}  # type: ignore[attr-defined]
    return cls


# Only __init__ is compiled from source: its speed matters (the passes build IR nodes by
# the thousand) and a generic one would bind arguments in Python. The other methods are
# closures; attrgetter collects the compared fields in C, as fast as a generated tuple.


def _values_getter(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    if not names:
        return lambda _: ()
    if len(names) == 1:
        (name,) = names
        return lambda obj: (getattr(obj, name),)
    return operator.attrgetter(*names)


def _repr_method(names: tuple[str, ...]) -> Callable[[Any], str]:
    @reprlib.recursive_repr()
    def describe(self: Any) -> str:
        values = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{type(self).__qualname__}({values})"

    return describe


def _eq_method(values: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any, Any], Any]:
    def equals(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    return equals


def _hash_method(values: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any], int]:
    def hash_of(self: Any) -> int:
        return hash(values(self))

    return hash_of


def _frozen_methods(owner: type, names: frozenset[str]) -> dict[str, Callable[..., None]]:
    def refuse_assignment(self: Any, name: str, value: Any) -> None:
        if type(self) is owner or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(owner, self).__setattr__(name, value)  # type: ignore[arg-type]

    def refuse_deletion(self: Any, name: str) -> None:
        if type(self) is owner or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(owner, self).__delattr__(name)  # type: ignore[arg-type]

    return {"__setattr__": refuse_assignment, "__delattr__": refuse_deletion}


def _compiled_init(
    cls: type, fields: tuple[dataclasses.Field[Any], ...], frozen: bool
) -> Callable[..., None]:
    namespace: dict[str, Any] = {
        "__use_factory__": _USE_FACTORY,
        "__object_setattr__": object.__setattr__,
    }
    # The instance's name in the generated code; a field may be called "self".
    me = "__record_self__" if any(f.name == "self" for f in fields) else "self"
    parameters = [me]
    body: list[str] = []
    seen_default = False
    for f in fields:
        has_default = f.default is not dataclasses.MISSING
        has_factory = f.default_factory is not dataclasses.MISSING
        if has_default:
            namespace[f"__default_{f.name}__"] = f.default
        if has_factory:
            namespace[f"__factory_{f.name}__"] = f.default_factory
        if f.init:
            if has_default:
                parameters.append(f"{f.name}=__default_{f.name}__")
            elif has_factory:
                parameters.append(f"{f.name}=__use_factory__")
            elif seen_default:
                raise TypeError(f"non-default argument {f.name!r} follows default argument")
            else:
                parameters.append(f.name)
            seen_default = seen_default or has_default or has_factory
            if has_factory:
                value = f"__factory_{f.name}__() if {f.name} is __use_factory__ else {f.name}"
            else:
                value = f.name
        elif has_factory:
            value = f"__factory_{f.name}__()"
        elif has_default:
            value = f"__default_{f.name}__"
        else:
            continue  # dataclass leaves an init=False field without a default unset as well
        if not frozen:
            body.append(f"    {me}.{f.name} = {value}")
        elif hasattr(type(getattr(cls, f.name, None)), "__set__"):
            # A data descriptor of the field's name takes the value, as under dataclass.
            body.append(f"    __object_setattr__({me}, {f.name!r}, {value})")
        else:
            # A frozen instance's __setattr__ refuses; its __dict__ takes the value directly
            # (dataclass calls object.__setattr__ per field, a slower path to the same place).
            body.append(f"    __fields[{f.name!r}] = {value}")
    if frozen and body:
        body.insert(0, f"    __fields = {me}.__dict__")
    if hasattr(cls, "__post_init__"):
        body.append(f"    {me}.__post_init__()")
    source = "\n".join([f"def __init__({', '.join(parameters)}):", *(body or ["    pass"])])
    # The source is built from the field names alone; the defaults are in the namespace.
    exec(source, namespace)
    return namespace["__init__"]  # type: ignore[no-any-return]
