"""Guards: the Python values a fused function reads from outside its arguments.

A trace runs the user's function once, and every plain Python value it reads becomes part of
what it builds: ``x * scale`` bakes ``scale`` into the IR as a constant, ``if use_sum:``
decides the graph. A compiled variant is therefore valid only while those values are as they
were when it was traced. :func:`guard_for` finds them from the names the function's code
objects hold (once per fused function, at its first call or compile), and the runtime keys
its caches by their values (:mod:`pyfuse.runtime.calls`), so a change retraces and a
change back finds the earlier variant again.

Guarded, where the value is *plain* (bool, int, float, complex, str, bytes, None, a pyfuse
dtype, a NumPy scalar, or a tuple of those):

- the function's closure cells;
- the globals its code (and the code of lambdas, comprehensions and functions nested in it)
  names (``co_names``);
- its default arguments (``__defaults__``, compared as one tuple) and keyword-only defaults;
- attributes ``obj.name`` where ``obj`` is a captured object (a closure cell, a global, or
  ``self`` of a bound method), ``name`` a name the code holds and an entry of ``obj``'s own
  ``__dict__``:
  ``self.eps = 1e-6`` is seen, as are a user module's (``config.SCALE``) and a user class's
  (``Config.SCALE``); not those of the standard library, pyfuse or installed packages
  (``math.pi``, ``np.pi``), which are constants;
- the same, recursively, for Python functions the code reaches through its globals and
  closure cells, defined outside the standard library and installed packages (helpers in the
  user's modules), up to :data:`_MAX_FUNCTIONS` functions.

Not guarded: anything else (modules, functions, classes, lists, dicts, arrays): rebinding a
captured helper function, or changing a list in place, does not retrace. Nor are class
attributes read through an instance (``self.EPS`` where ``EPS`` is the class's), properties,
chains (``self.config.eps``), or attributes of an object that a closure cell or global is
later rebound to (the object first seen is the one watched). The set of guarded places is
fixed by the function's first call: a name that did not hold a plain value then is never
guarded.

The check on every call compares each guarded place's current object with the one last seen,
by identity (a generated function: one cell read or subscript per place); only when one
differs are the values compared (:meth:`Guard.key`: type and value, floats by their bits, so
``-0.0`` and ``0.0`` differ).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from functools import cache
from typing import Any

from pyfuse.ir.dtypes import DType

# A function that reaches more helpers than this is guarded through the first ones found.
_MAX_FUNCTIONS = 64
_PLAIN_TYPES = frozenset({bool, int, float, complex, str, bytes, type(None), DType})
# Packages whose modules' attributes (and functions) are library constants, not user state.
_LIBRARIES = frozenset({"pyfuse", "numpy", "torch", "cupy", "ml_dtypes", "cuda"})


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


MISSING = _Sentinel("missing")  # an empty cell, or a name no longer in its dict
UNGUARDED = _Sentinel("unguarded")  # the key of a value that is not plain

CELL, ITEM, DEFAULTS = "cell", "item", "defaults"


class Slot:
    """One guarded place: a closure cell (``CELL``), a name in a dict (``ITEM``: globals, a
    keyword-defaults dict, an object's ``__dict__``) or a function's ``__defaults__``."""

    __slots__ = ("holder", "kind", "name", "where")

    def __init__(self, kind: str, holder: Any, name: str, where: str) -> None:
        self.kind = kind
        self.holder = holder
        self.name = name
        self.where = where  # for people: "global scale of module m", "closure cell s of f"

    def read(self) -> object:
        if self.kind == CELL:
            try:
                return self.holder.cell_contents
            except ValueError:
                return MISSING
        if self.kind == ITEM:
            return self.holder.get(self.name, MISSING)
        return self.holder.__defaults__

    def check_expression(self, index: int) -> str:
        """Python source: is this place's object still ``v[index]``? (``h{index}`` names the
        holder)."""
        if self.kind == CELL:
            return f"h{index}.cell_contents is v[{index}]"
        if self.kind == ITEM:
            return f"h{index}[{self.name!r}] is v[{index}]"
        return f"h{index}.__defaults__ is v[{index}]"


class Guard:
    """The guarded places of one fused function.

    ``check(values)``: whether every place still holds the object in ``values`` (a tuple from
    :meth:`read`); ``key(values)``: the hashable value key of such a tuple, which the runtime's
    caches are keyed by.
    """

    def __init__(self, slots: tuple[Slot, ...]) -> None:
        self.slots = slots
        self.check = _compile_check(slots)

    def read(self) -> tuple[object, ...]:
        return tuple(slot.read() for slot in self.slots)

    def key(self, values: tuple[object, ...]) -> tuple[object, ...]:
        return tuple(_value_key(value) for value in values)

    def describe(self) -> list[str]:
        """Where each guarded value lives, for people."""
        return [slot.where for slot in self.slots]

    def __repr__(self) -> str:
        return f"<pyfuse guard on {', '.join(self.describe())}>"


def _compile_check(slots: tuple[Slot, ...]) -> Callable[[tuple[object, ...]], bool]:
    # Generated rather than a loop over the slots: one call with inline reads is what keeps
    # a warm call's check near 0.1 us.
    namespace: dict[str, Any] = {f"h{index}": slot.holder for index, slot in enumerate(slots)}
    condition = " and ".join(slot.check_expression(index) for index, slot in enumerate(slots))
    source = (
        "def check(v):\n"
        "    try:\n"
        f"        return {condition}\n"
        "    except (KeyError, ValueError):  # a name deleted, a cell emptied\n"
        "        return False\n"
    )
    exec(compile(source, "<pyfuse guard>", "exec"), namespace)
    check: Callable[[tuple[object, ...]], bool] = namespace["check"]
    return check


# ---- values --------------------------------------------------------------------------------


def is_plain(value: object) -> bool:
    """Whether ``value`` is a value a guard compares (see the module docstring)."""
    kind = type(value)
    if kind in _PLAIN_TYPES:
        return True
    if kind is tuple:
        return all(is_plain(item) for item in value)  # type: ignore[attr-defined]
    numpy = sys.modules.get("numpy")  # not loaded: the value cannot be a NumPy scalar
    return numpy is not None and isinstance(value, numpy.number | numpy.bool_)


def _value_key(value: object) -> object:
    """Type and value; floats by their bits (``-0.0`` is not ``0.0``, a NaN is itself)."""
    kind = type(value)
    if kind is float:
        return (kind, value.hex())  # type: ignore[attr-defined]
    if kind is complex:
        return (kind, value.real.hex(), value.imag.hex())  # type: ignore[attr-defined]
    if kind is tuple:
        return (kind, tuple(_value_key(item) for item in value))  # type: ignore[attr-defined]
    if kind in _PLAIN_TYPES:
        return (kind, value)
    if value is MISSING:
        return MISSING
    if is_plain(value):  # a NumPy scalar
        return (kind, value.tobytes())  # type: ignore[attr-defined]
    return UNGUARDED


# ---- finding the guarded places --------------------------------------------------------------


def guard_for(fn: object) -> Guard | None:
    """The guard of a fused function's Python callable; None when it reads no plain value from
    outside its arguments (the warm path then checks nothing)."""
    finder = _Finder()
    finder.visit(fn)
    return Guard(tuple(finder.slots)) if finder.slots else None


@cache
def _library_module(name: str) -> bool:
    """Whether a module belongs to the standard library, pyfuse, or an installed package."""
    top = name.partition(".")[0]
    if top in _LIBRARIES or top in getattr(sys, "stdlib_module_names", ()) or top == "builtins":
        return True
    path = getattr(sys.modules.get(top), "__file__", None) or ""
    return "site-packages" in path or "dist-packages" in path


def _user_function(value: object) -> bool:
    return isinstance(value, types.FunctionType) and not _library_module(value.__module__ or "")


def _names(code: types.CodeType) -> set[str]:
    """The names ``code`` and every code object nested in it load as globals or attributes
    (``co_names``: also those of methods called and modules imported, which guard nothing)."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _names(constant)
    return names


class _Finder:
    """Collects the places a function reads; see :func:`guard_for`.

    By names, not by instructions: a global is guarded when the code names it, an attribute
    when the code names it and it is an entry of a captured object's ``__dict__``. A name that
    is also an attribute of something else (``x.shape`` beside a global ``shape``) is guarded
    needlessly, which costs a compare per call; reading the bytecode with ``dis`` instead took
    about four times as long at the first call (docs/performance.md, "Measured design
    choices") and depends on the interpreter's version.
    """

    def __init__(self) -> None:
        self.slots: list[Slot] = []
        self.seen: set[tuple[int, str]] = set()  # (id of holder, name): each place once
        self.visited: set[int] = set()  # functions

    def add(self, kind: str, holder: object, name: str, where: str) -> None:
        if (id(holder), name) not in self.seen:
            self.seen.add((id(holder), name))
            self.slots.append(Slot(kind, holder, name, where))

    def visit(self, fn: object) -> None:
        self_object = None
        if isinstance(fn, types.MethodType):
            self_object, fn = fn.__self__, fn.__func__
        if isinstance(fn, types.FunctionType):
            self.function(fn, self_object)

    def function(self, fn: types.FunctionType, self_object: object) -> None:
        if id(fn) in self.visited or len(self.visited) >= _MAX_FUNCTIONS:
            return
        self.visited.add(id(fn))
        code = fn.__code__
        names = _names(code)
        # Captured objects that are not plain: their attributes may be guarded.
        objects: list[tuple[str, object]] = []
        if self_object is not None:
            objects.append(("self", self_object))
        for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=False):
            try:
                value = cell.cell_contents
            except ValueError:  # not assigned yet (a function that refers to itself)
                continue
            if is_plain(value):
                self.add(CELL, cell, name, f"closure cell {name} of {fn.__qualname__}")
            else:
                objects.append((name, value))
        if fn.__defaults__ and any(is_plain(value) for value in fn.__defaults__):
            self.add(DEFAULTS, fn, "__defaults__", f"default arguments of {fn.__qualname__}")
        for name, value in (fn.__kwdefaults__ or {}).items():
            if is_plain(value):
                where = f"keyword default {name} of {fn.__qualname__}"
                self.add(ITEM, fn.__kwdefaults__, name, where)
        for name in sorted(names):  # sorted: the same guard, in the same order, every run
            value = fn.__globals__.get(name, MISSING)
            if value is MISSING:  # a builtin, an attribute or a method name
                continue
            if is_plain(value):
                self.add(ITEM, fn.__globals__, name, f"global {name} of module {fn.__module__}")
            else:
                objects.append((name, value))
        for obj_name, obj in objects:
            self.attributes(obj, obj_name, names)
            if _user_function(obj):
                self.function(obj, None)  # type: ignore[arg-type]

    def attributes(self, obj: object, obj_name: str, names: set[str]) -> None:
        """Guard ``obj.name`` for each name that is a plain entry of the object's own
        ``__dict__`` (for a class, the live view of its namespace); not for a library's
        module or class."""
        if isinstance(obj, types.ModuleType | type):
            module = obj.__name__ if isinstance(obj, types.ModuleType) else obj.__module__
            if _library_module(module):
                return
        elif isinstance(obj, types.FunctionType | types.BuiltinFunctionType):
            return  # a function's attributes are no state a trace reads
        try:
            holder = object.__getattribute__(obj, "__dict__")
        except Exception:  # __slots__, builtins, proxies that refuse
            return
        if type(holder) not in (dict, types.MappingProxyType):
            return
        for name in sorted(names & holder.keys()):
            if is_plain(holder[name]):
                self.add(ITEM, holder, name, f"attribute {name} of {obj_name}")
