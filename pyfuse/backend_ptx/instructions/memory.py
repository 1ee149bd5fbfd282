"""Loads, stores, address conversion, atomics and reductions, ldmatrix/stmatrix.

Vector widths follow sm_90: ``.v2``/``.v4`` with at most 128 bits in total
(``.v8.b32`` and ``.v4.b64`` need sm_100). Shared-memory operands may use a
32-bit register (the shared window address from ``mov.u32 %r, smem``); global,
local and const operands need a 64-bit one.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyfuse.backend_ptx.abi import ParamKind
from pyfuse.backend_ptx.emitter import Param
from pyfuse.backend_ptx.operands import (
    Address,
    AddressLike,
    Instr,
    Operand,
    Reg,
    RegClass,
    Symbol,
    as_address,
    check_choice,
    check_reg,
    check_reg_relaxed,
    fmt_operand,
    fmt_vector,
    type_info,
)

LD_SPACES = ("global", "shared", "shared::cta", "shared::cluster", "local", "const", "param")
ST_SPACES = ("global", "shared", "shared::cta", "shared::cluster", "local")
SHARED_SPACES = ("shared", "shared::cta", "shared::cluster")
_LD_ST_TYPES = (
    "b8",
    "b16",
    "b32",
    "b64",
    "u8",
    "u16",
    "u32",
    "u64",
    "s8",
    "s16",
    "s32",
    "s64",
    "f32",
    "f64",
)
_LD_CACHE_OPS = ("ca", "cg", "cs", "lu", "cv")
_ST_CACHE_OPS = ("wb", "cg", "cs", "wt")
_L1_EVICTION = (
    "L1::evict_normal",
    "L1::evict_unchanged",
    "L1::evict_first",
    "L1::evict_last",
    "L1::no_allocate",
)
_MAX_VECTOR_BITS = 128
_SCOPES = ("cta", "cluster", "gpu", "sys")


def _check_address(addr: AddressLike, space: str, what: str) -> Address:
    address = as_address(addr, what)
    if address.is_32bit and space not in SHARED_SPACES:
        raise ValueError(
            f"{what}: a 32-bit address register is only valid for shared memory, "
            f"not .{space}; use a .b64 register"
        )
    return address


def _vector_suffix(count: int, dtype: str, op: str) -> str:
    if count == 1:
        return ""
    if count not in (2, 4):
        raise ValueError(f"{op}: vector width must be 1, 2 or 4, got {count}")
    bits = type_info(dtype).bits * count
    if bits > _MAX_VECTOR_BITS:
        raise ValueError(
            f"{op}: .v{count}.{dtype} moves {bits} bits; sm_90 allows at most "
            f"{_MAX_VECTOR_BITS} bits per vector access"
        )
    return f"v{count}"


def _cache_mods(
    op: str, cache: str | None, eviction: str | None, allowed_cache: Sequence[str]
) -> tuple[str, str]:
    if cache is not None:
        check_choice(cache, allowed_cache, f"{op}: cache operator")
    if eviction is not None:
        check_choice(eviction, _L1_EVICTION, f"{op}: eviction priority")
    if cache is not None and eviction is not None:
        raise ValueError(f"{op}: a cache operator and an eviction priority cannot be combined")
    return cache or "", eviction or ""


def _as_list(value: Reg | Sequence[Reg]) -> list[Reg]:
    if isinstance(value, Reg):
        return [value]
    return list(value)


def _fmt_values(values: Sequence[str]) -> str:
    if len(values) == 1:
        return values[0]
    return "{" + ", ".join(values) + "}"


def ld(
    space: str,
    dtype: str,
    dst: Reg | Sequence[Reg],
    addr: AddressLike,
    *,
    nc: bool = False,
    cache: str | None = None,
    eviction: str | None = None,
    sem: str | None = None,
    scope: str | None = None,
) -> Instr:
    """Load one value or a v2/v4 vector; ``nc`` uses the read-only (texture) path; ``sem``
    (``relaxed`` or ``acquire``) with ``scope`` makes it a strong load."""
    check_choice(space, LD_SPACES, "ld: space")
    check_choice(dtype, _LD_ST_TYPES, "ld: dtype")
    if nc and space != "global":
        raise ValueError(f"ld: .nc is only valid for .global loads, got .{space}")
    regs = _as_list(dst)
    vec = _vector_suffix(len(regs), dtype, "ld")
    for reg in regs:
        check_reg_relaxed(reg, dtype, "ld: destination")
    address = _check_address(addr, space, "ld: address")
    cache_s, evict_s = _cache_mods("ld", cache, eviction, _LD_CACHE_OPS)
    if (sem is None) != (scope is None) or (sem is not None and (nc or cache)):
        raise ValueError("ld: sem and scope go together, without .nc or a cache operator")
    ordering = _sem_scope("ld", sem, scope, ("relaxed", "acquire"))
    parts = ["ld", *ordering, space, cache_s, "nc" if nc else "", evict_s, vec, dtype]
    text = ".".join(p for p in parts if p)
    return Instr(f"{text} {_fmt_values([str(r) for r in regs])}, {address}")


def st(
    space: str,
    dtype: str,
    addr: AddressLike,
    src: Operand | Sequence[Operand],
    *,
    cache: str | None = None,
    eviction: str | None = None,
) -> Instr:
    """Store one value or a v2/v4 vector."""
    check_choice(space, ST_SPACES, "st: space")
    check_choice(dtype, _LD_ST_TYPES, "st: dtype")
    values: list[Operand] = list(src) if isinstance(src, (list, tuple)) else [src]  # type: ignore[list-item]
    vec = _vector_suffix(len(values), dtype, "st")
    rendered = []
    for value in values:
        if isinstance(value, Reg):
            rendered.append(str(check_reg_relaxed(value, dtype, "st: source")))
        else:
            rendered.append(fmt_operand(value, dtype, "st: source"))
    address = _check_address(addr, space, "st: address")
    cache_s, evict_s = _cache_mods("st", cache, eviction, _ST_CACHE_OPS)
    text = ".".join(p for p in ["st", space, cache_s, evict_s, vec, dtype] if p)
    return Instr(f"{text} {address}, {_fmt_values(rendered)}")


def ld_param(d: Reg, param: Param) -> Instr:
    """Read a scalar kernel parameter (pointer, integer or float) into a register."""
    dtype = param.ptx_type
    check_reg(d, dtype, f"ld_param {param.name}: d")
    return Instr(f"ld.param.{dtype} {d}, [{param.name}]")


_CVTA_SPACES = ("global", "shared", "shared::cta", "shared::cluster", "local", "const", "param")


def cvta(space: str, d: Reg, a: Reg | Symbol, *, to: bool) -> Instr:
    """Convert between generic and ``space`` addresses (``to=True``: generic -> space).

    ``cvta.to.global`` turns a pointer param into a global address (what nvcc emits);
    ``cvta.param`` makes the generic address of a by-value tensor map (PTX 7.7).
    """
    check_choice(space, _CVTA_SPACES, "cvta: space")
    if not isinstance(d, Reg) or d.cls not in (RegClass.B32, RegClass.B64):
        raise ValueError(f"cvta: d must be a .b32 or .b64 register, got {d!r}")
    size = "u64" if d.cls is RegClass.B64 else "u32"
    if size == "u32" and not (to and space in SHARED_SPACES):
        raise ValueError("cvta: a 32-bit result is only meaningful for cvta.to.shared")
    if isinstance(a, Reg):
        src = str(check_reg(a, size, "cvta: a"))
    elif isinstance(a, Symbol):
        src = str(a)
    else:
        raise ValueError(f"cvta: a must be a register or symbol, got {a!r}")
    version = (7, 7) if space == "param" else (0, 0)
    middle = f"to.{space}" if to else space
    return Instr(f"cvta.{middle}.{size} {d}, {src}", min_version=version)


def mov_address(d: Reg, symbol: Symbol) -> Instr:
    """The address of a symbol: ``mov.u32 %r, smem`` gives the 32-bit shared window address."""
    if not isinstance(symbol, Symbol):
        raise ValueError(f"mov_address: symbol must be a Symbol, got {symbol!r}")
    if not isinstance(d, Reg) or d.cls not in (RegClass.B32, RegClass.B64):
        raise ValueError(f"mov_address: d must be a .b32 or .b64 register, got {d!r}")
    size = "u64" if d.cls is RegClass.B64 else "u32"
    return Instr(f"mov.{size} {d}, {symbol}")


def tensor_map_address(d: Reg, param: Param) -> list[Instr]:
    """Generic address of a by-value tensor-map param, for cp.async.bulk.tensor / prefetch.

    The two instructions nvcc emits for a ``__grid_constant__ CUtensorMap``; the
    map must not be ``ld.param``-ed into registers.
    """
    if param.kind is not ParamKind.TENSOR_MAP:
        raise ValueError(f"tensor_map_address: param {param.name} is not a tensor map")
    check_reg(d, "b64", "tensor_map_address: d")
    return [Instr(f"mov.b64 {d}, {param.name}"), cvta("param", d, d, to=False)]


def mapa(d: Reg, a: Reg, cta_rank: Operand) -> Instr:
    """Map a local shared::cta address to the same offset in cluster CTA ``cta_rank``."""
    if not isinstance(d, Reg) or d.cls not in (RegClass.B32, RegClass.B64):
        raise ValueError(f"mapa: d must be a .b32 or .b64 register, got {d!r}")
    size = "u64" if d.cls is RegClass.B64 else "u32"
    check_reg(a, size, "mapa: a")
    rank = fmt_operand(cta_rank, "u32", "mapa: cta_rank")
    return Instr(f"mapa.shared::cluster.{size} {d}, {a}, {rank}")


# ---- atomics and reductions -----------------------------------------------------------------

_ATOM_SPACES = ("global", "shared", "shared::cta", "shared::cluster")
_BITWISE_TYPES = ("b32", "b64")
_ATOM_TYPES: dict[str, tuple[str, ...]] = {
    "and": _BITWISE_TYPES,
    "or": _BITWISE_TYPES,
    "xor": _BITWISE_TYPES,
    "exch": _BITWISE_TYPES,
    "cas": ("b16", *_BITWISE_TYPES),
    "add": ("u32", "u64", "s32", "f32", "f64", "f16", "bf16", "f16x2", "bf16x2"),
    "inc": ("u32",),
    "dec": ("u32",),
    "min": ("u32", "u64", "s32", "s64"),
    "max": ("u32", "u64", "s32", "s64"),
}
_HALF_ATOM_TYPES = ("f16", "bf16", "f16x2", "bf16x2")


def _sem_scope(op: str, sem: str | None, scope: str | None, sems: Sequence[str]) -> list[str]:
    parts = []
    if sem is not None:
        parts.append(check_choice(sem, sems, f"{op}: memory-order semantics"))
    if scope is not None:
        parts.append(check_choice(scope, _SCOPES, f"{op}: scope"))
    return parts


def _atomic_mods(op_name: str, op: str, dtype: str) -> list[str]:
    """Modifiers between the op and the type: half-precision forms need ``.noftz``."""
    allowed = _ATOM_TYPES.get(op)
    if allowed is None:
        raise ValueError(f"{op_name}: op must be one of {list(_ATOM_TYPES)}, got {op!r}")
    check_choice(dtype, allowed, f"{op_name}.{op}: dtype")
    return ["noftz"] if dtype in _HALF_ATOM_TYPES else []


def atom(
    space: str,
    op: str,
    dtype: str,
    d: Reg,
    addr: AddressLike,
    b: Operand,
    c: Operand | None = None,
    *,
    sem: str | None = None,
    scope: str | None = None,
) -> Instr:
    """Atomic read-modify-write returning the old value; ``cas`` takes compare ``b``, new ``c``."""
    check_choice(space, _ATOM_SPACES, "atom: space")
    mods = _atomic_mods("atom", op, dtype)
    if (op == "cas") != (c is not None):
        raise ValueError("atom: operand c is required for cas and invalid otherwise")
    check_reg(d, dtype, "atom: d")
    address = _check_address(addr, space, "atom: address")
    ordering = _sem_scope("atom", sem, scope, ("relaxed", "acquire", "release", "acq_rel"))
    text = ".".join(["atom", *ordering, space, op, *mods, dtype])
    srcs = fmt_operand(b, dtype, "atom: b")
    if c is not None:
        srcs += f", {fmt_operand(c, dtype, 'atom: c')}"
    return Instr(f"{text} {d}, {address}, {srcs}")


def red(
    space: str,
    op: str,
    dtype: str,
    addr: AddressLike,
    b: Operand | Sequence[Reg],
    *,
    sem: str | None = None,
    scope: str | None = None,
) -> Instr:
    """Reduction into memory without a result (split-K accumulation).

    A sequence ``b`` gives the vector form, defined for ``add.f32`` with v2/v4
    (PTX 8.1+) and for the f16/bf16 types with add/min/max.
    """
    check_choice(space, _ATOM_SPACES, "red: space")
    if op in ("cas", "exch"):
        raise ValueError(f"red: op {op!r} returns a value; use atom")
    mods = _atomic_mods("red", op, dtype)
    address = _check_address(addr, space, "red: address")
    ordering = _sem_scope("red", sem, scope, ("relaxed", "release"))
    if isinstance(b, (list, tuple)):
        regs = list(b)
        if dtype != "f32" and dtype not in _HALF_ATOM_TYPES:
            raise ValueError(f"red: vector form is defined for f32 and half types, got {dtype}")
        if space != "global":
            raise ValueError(f"red: the vector form is defined for .global only, got .{space}")
        vec = _vector_suffix(len(regs), dtype, "red")
        for reg in regs:
            check_reg(reg, dtype, "red: b")
        text = ".".join(["red", *ordering, space, op, *mods, vec, dtype])
        return Instr(f"{text} {address}, {_fmt_values([str(r) for r in regs])}", min_version=(8, 1))
    text = ".".join(["red", *ordering, space, op, *mods, dtype])
    return Instr(f"{text} {address}, {fmt_operand(b, dtype, 'red: b')}")  # type: ignore[arg-type]


# ---- matrix load/store (8x8 b16 tiles) ------------------------------------------------------

_MATRIX_COUNTS = {1: "x1", 2: "x2", 4: "x4"}


def _matrix_regs(op: str, regs: Sequence[Reg]) -> str:
    num = _MATRIX_COUNTS.get(len(regs))
    if num is None:
        raise ValueError(f"{op}: needs 1, 2 or 4 registers (x1/x2/x4), got {len(regs)}")
    for reg in regs:
        check_reg(reg, "b32", f"{op}: fragment register")
    return num


def ldmatrix(regs: Sequence[Reg], addr: AddressLike, *, trans: bool = False) -> Instr:
    """Load 1/2/4 8x8 b16 matrices; lanes 8i..8i+7 supply the row addresses of matrix i."""
    num = _matrix_regs("ldmatrix", regs)
    address = _check_address(addr, "shared::cta", "ldmatrix: address")
    trans_s = ".trans" if trans else ""
    return Instr(
        f"ldmatrix.sync.aligned.m8n8.{num}{trans_s}.shared::cta.b16 {fmt_vector(regs)}, {address}"
    )


def stmatrix(addr: AddressLike, regs: Sequence[Reg], *, trans: bool = False) -> Instr:
    """Store 1/2/4 8x8 b16 matrices (sm_90); a generic-proxy write, fence before TMA reads it."""
    num = _matrix_regs("stmatrix", regs)
    address = _check_address(addr, "shared::cta", "stmatrix: address")
    trans_s = ".trans" if trans else ""
    return Instr(
        f"stmatrix.sync.aligned.m8n8.{num}{trans_s}.shared::cta.b16 {address}, {fmt_vector(regs)}",
        min_version=(7, 8),
    )
