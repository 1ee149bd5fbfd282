"""``record``: ``@dataclass`` with the same meaning, built for a faster import.

Why: on Python 3.11 and 3.12 the standard library's ``dataclass`` compiles each generated
method (``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, the frozen ``__setattr__`` and
``__delattr__``) from its own source string, a separate ``exec`` each, about ten times the
cost of ``dataclass(init=False, repr=False, eq=False)``, which only collects the fields
(docs/performance.md, "Measured design choices"). pyfuse declares some seventy record
classes and a first compile loads most of them.

How, with the standard library's public API only: ``dataclasses.dataclass`` collects the
fields (so ``dataclasses.fields``, ``replace``, ``asdict``, ``astuple``, ``is_dataclass`` and
``__match_args__`` are dataclass's own); ``record`` then adds ``__repr__``, ``__eq__``,
``__hash__`` and the frozen ``__setattr__``/``__delattr__`` as closures over the field names,
and an ``__init__`` compiled at the class's first construction (its speed matters: the passes
build IR nodes by the thousand; a first call builds only about half the record classes it
loads). Before that construction the stand-in ``__init__`` carries the real signature, so
``inspect.signature`` reads the fields from the start.

Guarantees: the generated methods behave as Python 3.11's dataclass's. ``__eq__`` compares
the compared fields as tuples when both operands have the same class; ``eq`` with ``frozen``
hashes that tuple; ``eq`` without ``frozen`` makes instances unhashable; frozen instances raise
``dataclasses.FrozenInstanceError`` on assignment and deletion; methods the class defines
itself are kept. Supported: ``frozen``, ``eq``, ``repr``; defaults, ``field(default_factory=
...)``, ``field(repr=False)``, ``field(compare=False)``, ``field(hash=...)``, ``field(init=
False)`` (with a default or factory), ``__post_init__``. Rejected: ``InitVar`` and ``kw_only``
fields (``order``, ``unsafe_hash`` and ``slots`` are not options).

Expects: a record's ``__dataclass_params__`` is what dataclass was asked for (fields only:
``init``, ``repr``, ``eq`` and ``frozen`` all false); :func:`record_options` gives a record's
real options. So a record and a standard dataclass must not inherit from each other (their
frozen checks would disagree). A class that users hold or that other libraries inspect as a
dataclass (``MatmulParams``, ``TargetInfo``) is a plain frozen ``dataclass``: its few hundred
microseconds buy a ``__dataclass_params__`` that tells the truth.
"""

from __future__ import annotations

import abc
import dataclasses
import inspect
import operator
import re
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
    fields = _fields_of(cls)
    _check_order(fields)

    made: dict[str, Callable[..., Any]] = {}
    if "__init__" not in keep:
        made["__init__"] = _lazy_init(cls, fields, frozen)
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
        setattr(cls, name, _named(method, cls, name))
    if eq and not frozen and not explicit_hash:
        cls.__hash__ = None  # type: ignore[assignment]  # mutable and compared: unhashable
    cls.__record_options__ = {"frozen": frozen, "eq": eq, "repr": repr_}  # type: ignore[attr-defined]
    if isinstance(cls, abc.ABCMeta):  # as dataclass: a method written here may be an abstract one
        abstract: type = cls
        abc.update_abstractmethods(abstract)
    return cls


# An annotation (a string under ``from __future__ import annotations``) of an InitVar, with or
# without its module: dataclass keeps such a pseudo-field out of ``fields()``, so it is looked
# for in the class's own annotations.
_INIT_VAR = re.compile(r"^\s*(?:\w+\s*\.\s*)?InitVar\b")


def _fields_of(cls: type) -> tuple[dataclasses.Field[Any], ...]:
    """The fields of ``cls`` (its bases' first, then its own in annotation order), collected
    by ``dataclass`` asked to write no method; refuses what a record does not support."""
    for annotation in inspect.get_annotations(cls).values():
        if _is_init_var(annotation):
            raise TypeError(f"record {cls.__qualname__}: InitVar fields are not supported")
    dataclasses.dataclass(cls, init=False, repr=False, eq=False)
    fields = dataclasses.fields(cls)
    if any(f.kw_only is True for f in fields):
        raise TypeError(f"record {cls.__qualname__}: kw_only fields are not supported")
    return fields


def _is_init_var(annotation: Any) -> bool:
    if isinstance(annotation, str):
        return _INIT_VAR.match(annotation) is not None
    return isinstance(annotation, dataclasses.InitVar) or annotation is dataclasses.InitVar


def _check_order(fields: tuple[dataclasses.Field[Any], ...]) -> None:
    """As dataclass: an ``__init__`` parameter without a default may not follow one with
    (dataclass checks it while writing ``__init__``, which it is not asked to do here)."""
    seen_default = False
    for f in fields:
        if not f.init:
            continue
        has_default = f.default is not dataclasses.MISSING
        if not has_default and f.default_factory is dataclasses.MISSING and seen_default:
            raise TypeError(f"non-default argument {f.name!r} follows default argument")
        seen_default = seen_default or has_default or f.default_factory is not dataclasses.MISSING


def _named(method: Callable[..., Any], cls: type, name: str) -> Callable[..., Any]:
    """``method`` named as ``cls``'s method ``name`` (module, name, qualified name)."""
    method.__module__ = cls.__module__
    method.__name__ = name
    method.__qualname__ = f"{cls.__qualname__}.{name}"
    return method


def _lazy_init(
    cls: type, fields: tuple[dataclasses.Field[Any], ...], frozen: bool
) -> Callable[..., None]:
    """An ``__init__`` that compiles the real one at the first construction and puts it in
    its place: a first call loads some seventy record classes and builds about half of them.
    It carries the real one's signature, for ``inspect.signature`` of the class."""

    def first_init(self: Any, *args: Any, **kwargs: Any) -> None:
        compiled = _named(_compiled_init(cls, fields, frozen), cls, "__init__")
        compiled.__signature__ = signature  # type: ignore[attr-defined]  # with the types
        if cls.__dict__.get("__init__") is first_init:
            type.__setattr__(cls, "__init__", compiled)
        compiled(self, *args, **kwargs)

    signature = _init_signature(fields)
    first_init.__signature__ = signature  # type: ignore[attr-defined]
    return first_init


def _init_signature(fields: tuple[dataclasses.Field[Any], ...]) -> inspect.Signature:
    """The signature of the ``__init__`` that :func:`_compiled_init` writes."""
    me = "__record_self__" if any(f.name == "self" for f in fields) else "self"
    parameters = [inspect.Parameter(me, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for f in fields:
        if not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            default: Any = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = _USE_FACTORY
        else:
            default = inspect.Parameter.empty
        parameters.append(
            inspect.Parameter(
                f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=f.type
            )
        )
    return inspect.Signature(parameters, return_annotation=None)


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
    # The parameters' order was checked when the class was made (_check_order).
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
            else:
                parameters.append(f.name)
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
