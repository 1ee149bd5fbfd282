"""PTX text to instruction records: the dialect pyfuse's emitter writes, one entry per module.

Expects a module of ``.visible .entry`` functions with ``.param`` lists, ``.reg`` declarations
(``.reg .b32 %r<103>;``), labels (``$L__x:``), one instruction per line, an optional guard
(``@%p3`` / ``@!%p3``) and ``//`` comments. Guarantees: an :class:`Entry` per function whose
``instrs`` keep the source order and line numbers, whose ``labels`` map each label to the index
of the instruction after it, and whose registers are typed by their declaration prefix; a
:class:`PtxParseError` naming the line for anything it does not read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pyfuse.errors import PyfuseError


class PtxParseError(PyfuseError):
    """The PTX simulator cannot read a line of a module."""


@dataclass(frozen=True)
class Operand:
    """One operand. ``kind`` is ``reg`` (``name``; ``negated`` for a ``!%p`` source),
    ``special`` (``%tid.x``: ``name``), ``imm`` (``value``: int or float bits as int with
    ``float_bits`` set), ``symbol`` (a param or shared array: ``name``), ``label``, ``sink``
    (``_``), ``vector`` (``items``),
    ``address`` (``base`` operand plus ``offset``; a tensor address also has ``items``: the
    coordinates), or ``pair`` (``_|%p6``: ``items``)."""

    kind: str
    name: str = ""
    value: int = 0
    float_bits: int = 0  # 32 or 64 where an immediate is written as 0f/0d hex bits
    offset: int = 0
    base: Operand | None = None
    items: tuple[Operand, ...] = ()
    negated: bool = False  # ``!%p``: a predicate source read inverted


@dataclass(frozen=True)
class Instr:
    opcode: str  # the first dotted part: "add", "mbarrier", "wgmma", ...
    modifiers: tuple[str, ...]  # the other dotted parts, in order
    operands: tuple[Operand, ...]
    guard: str | None  # predicate register name
    negated: bool
    line: int
    text: str

    @property
    def full(self) -> str:
        return ".".join((self.opcode, *self.modifiers))


@dataclass(frozen=True)
class Param:
    name: str
    type: str  # "u64", "b8" ...
    size: int  # bytes


@dataclass
class Entry:
    name: str
    params: list[Param] = field(default_factory=list)
    instrs: list[Instr] = field(default_factory=list)
    labels: dict[str, int] = field(default_factory=dict)
    # Register-name prefix -> declared type ("%rd" -> "b64"), longest prefixes first.
    reg_prefixes: list[tuple[str, str]] = field(default_factory=list)
    shared_symbols: list[str] = field(default_factory=list)
    _types: dict[str, str] = field(default_factory=dict, repr=False)

    def reg_type(self, name: str) -> str:
        known = self._types.get(name)
        if known is not None:
            return known
        for prefix, type_ in self.reg_prefixes:
            if name.startswith(prefix) and name[len(prefix) :].isdigit():
                self._types[name] = type_
                return type_
        raise PtxParseError(f"register {name} has no declaration in {self.name}")


_ENTRY = re.compile(r"\.(?:visible\s+)?\.entry\s+(\w+)\s*\(")
_PARAM = re.compile(r"\.param\s+(?:\.align\s+\d+\s+)?\.(\w+)\s+(\w+)(?:\[(\d+)\])?")
_REG_DECL = re.compile(r"\.reg\s+\.(\w+)\s+(%\w+?)<(\d+)>;")
_SHARED = re.compile(r"\.(?:extern\s+)?\.shared\s+.*?(\w+)\[\d*\];")
_LABEL = re.compile(r"^(\$?[\w$]+):$")
_GUARD = re.compile(r"^@(!?)(%\w+)\s+")
_INT = re.compile(r"^-?(0[xX][0-9a-fA-F]+|\d+)[uU]?$")
_FLOAT_BITS = re.compile(r"^0([fFdD])([0-9a-fA-F]+)$")
# Special registers written without a dimension suffix.
_SPECIAL_NAMES = frozenset({
    "laneid", "warpid", "nwarpid", "smid", "nsmid", "cluster_ctarank", "cluster_nctarank",
    "clock", "clock64", "globaltimer", "lanemask_eq", "is_explicit_cluster",
})  # fmt: skip
_SIZES = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2}


def parse_module(text: str) -> dict[str, Entry]:
    """Every entry function of the module ``text``, by name."""
    entries: dict[str, Entry] = {}
    shared: list[str] = []
    current: Entry | None = None
    in_params = False
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("//", 1)[0].strip()
        if not line:
            continue
        if current is None:
            match = _ENTRY.search(line)
            if match:
                current = Entry(match.group(1), shared_symbols=list(shared))
                entries[current.name] = current
                in_params = True
                line = line[match.end() :].strip()
                if not line:
                    continue
            else:
                symbol = _SHARED.search(line)
                if symbol:
                    shared.append(symbol.group(1))
                continue
        if in_params:
            for match in _PARAM.finditer(line):
                type_, name, count = match.groups()
                width = _SIZES.get(type_, int(re.sub(r"\D", "", type_) or 8) // 8)
                current.params.append(Param(name, type_, width * int(count or 1)))
            if ")" in line:
                in_params = False
            continue
        if line == "{" or line.startswith("."):
            decl = _REG_DECL.match(line)
            if decl:
                current.reg_prefixes.append((decl.group(2), decl.group(1)))
                current.reg_prefixes.sort(key=lambda item: -len(item[0]))
            continue
        if line == "}":
            current = None
            continue
        label = _LABEL.match(line)
        if label:
            current.labels[label.group(1)] = len(current.instrs)
            continue
        current.instrs.append(_instruction(line, number))
    return entries


def _instruction(line: str, number: int) -> Instr:
    if not line.endswith(";"):
        raise PtxParseError(f"line {number}: an instruction ends with ';': {line!r}")
    body = line[:-1].strip()
    guard, negated = None, False
    match = _GUARD.match(body)
    if match:
        negated, guard = match.group(1) == "!", match.group(2)
        body = body[match.end() :]
    head, _, rest = body.partition(" ")
    parts = head.split(".")
    operands = tuple(_operand(item, number) for item in _split(rest.strip())) if rest else ()
    return Instr(parts[0], tuple(parts[1:]), operands, guard, negated, number, line)


def _split(text: str) -> list[str]:
    """Split at commas outside brackets and braces."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    if tail:
        items.append(tail)
    return items


def _operand(text: str, number: int) -> Operand:
    if text.startswith("[") and text.endswith("]"):
        inner = _split(text[1:-1])
        base_text, offset = inner[0], 0
        plus = re.match(r"^(.+?)\s*\+\s*(-?\w+)$", base_text)
        if plus:
            base_text, offset = plus.group(1).strip(), int(plus.group(2), 0)
        items = tuple(_operand(item, number) for item in inner[1:])
        if len(items) == 1 and items[0].kind == "vector":
            items = items[0].items
        return Operand("address", base=_operand(base_text, number), offset=offset, items=items)
    if text.startswith("{") and text.endswith("}"):
        return Operand("vector", items=tuple(_operand(t, number) for t in _split(text[1:-1])))
    if "|" in text:
        return Operand("pair", items=tuple(_operand(t.strip(), number) for t in text.split("|")))
    if text == "_":
        return Operand("sink")
    if text.startswith("!%"):  # a negated predicate source
        return Operand("reg", name=text[1:], negated=True)
    if text.startswith("%"):
        if "." in text or text[1:] in _SPECIAL_NAMES:
            return Operand("special", name=text[1:])
        if re.match(r"^%\w+$", text) is None:
            raise PtxParseError(f"line {number}: unreadable register {text!r}")
        return Operand("reg", name=text)
    bits = _FLOAT_BITS.match(text)
    if bits:
        width = 32 if bits.group(1) in "fF" else 64
        return Operand("imm", value=int(bits.group(2), 16), float_bits=width)
    if _INT.match(text):
        return Operand("imm", value=int(text.rstrip("uU"), 0))
    if text.startswith("$"):
        return Operand("label", name=text)
    if re.match(r"^[A-Za-z_]\w*$", text):
        return Operand("symbol", name=text)
    raise PtxParseError(f"line {number}: unreadable operand {text!r}")
