"""Warp-level data exchange: ``shfl.sync``, ``redux.sync``, ``vote.sync``, ``activemask``.

A row reduction inside a warp is five ``shfl.sync.bfly`` steps (offsets 16..1)
each followed by the combining op; ``redux.sync`` does integer add/min/max and
bitwise reductions in one instruction (sm_80+), but its f32 form needs sm_100a,
so float reductions on Hopper use the shuffle ladder.
"""

from __future__ import annotations

from pyfuse.backend_ptx.operands import (
    Instr,
    Operand,
    Reg,
    check_choice,
    check_int,
    check_pred,
    check_reg,
    fmt_operand,
)
from pyfuse.ir.hopper import SM90

FULL_MASK = 0xFFFFFFFF
SHFL_MODES = ("up", "down", "bfly", "idx")

# Default "c" operand per mode: c = (segmask << 8) | clamp. For up the clamp is the
# lowest lane (0); for the others it is the highest lane of the segment (31).
_DEFAULT_CLAMP = {"up": 0x0, "down": 0x1F, "bfly": 0x1F, "idx": 0x1F}


def _mask(membermask: Operand, op: str) -> str:
    if isinstance(membermask, Reg):
        return fmt_operand(membermask, "b32", f"{op}: membermask")
    check_int(membermask, f"{op}: membermask", 1, FULL_MASK)
    return f"0x{membermask:08x}" if membermask == FULL_MASK else str(membermask)


def shfl_sync(
    mode: str,
    d: Reg,
    a: Operand,
    b: Operand,
    *,
    c: Operand | None = None,
    membermask: Operand = FULL_MASK,
    p: Reg | None = None,
) -> Instr:
    """Read ``a`` from another lane: ``b`` is the lane (idx), offset (up/down) or xor mask.

    ``p`` (optional) is set when the source lane was in range, so a reduction
    over a ragged segment can ignore clamped reads.
    """
    check_choice(mode, SHFL_MODES, "shfl.sync: mode")
    check_reg(d, "b32", "shfl.sync: d")
    dst = str(d) if p is None else f"{d}|{check_pred(p, 'shfl.sync: p')}"
    if not isinstance(b, Reg):
        check_int(b, f"shfl.sync.{mode}: lane operand b", 0, SM90.warp_size - 1)
    clamp = _DEFAULT_CLAMP[mode] if c is None else c
    if not isinstance(clamp, Reg):
        check_int(clamp, "shfl.sync: c (segmask << 8 | clamp)", 0, 0x1F1F)
    return Instr(
        f"shfl.sync.{mode}.b32 {dst}, {fmt_operand(a, 'b32', 'shfl.sync: a')}, "
        f"{fmt_operand(b, 'b32', 'shfl.sync: b')}, {fmt_operand(clamp, 'b32', 'shfl.sync: c')}, "
        f"{_mask(membermask, 'shfl.sync')}"
    )


_REDUX_TYPES: dict[str, tuple[str, ...]] = {
    "add": ("u32", "s32"),
    "min": ("u32", "s32"),
    "max": ("u32", "s32"),
    "and": ("b32",),
    "or": ("b32",),
    "xor": ("b32",),
}


def redux_sync(op: str, dtype: str, d: Reg, a: Reg, *, membermask: Operand = FULL_MASK) -> Instr:
    """Whole-warp integer reduction in one instruction (result in every lane)."""
    if op not in _REDUX_TYPES:
        raise ValueError(f"redux.sync: op must be one of {list(_REDUX_TYPES)}, got {op!r}")
    if dtype == "f32":
        raise ValueError("redux.sync.f32 needs sm_100a; on sm_90 reduce floats with shfl_sync")
    check_choice(dtype, _REDUX_TYPES[op], f"redux.sync.{op}: dtype")
    check_reg(d, dtype, "redux.sync: d")
    check_reg(a, dtype, "redux.sync: a")
    return Instr(f"redux.sync.{op}.{dtype} {d}, {a}, {_mask(membermask, 'redux.sync')}")


def vote_sync(
    mode: str, d: Reg, a: Reg, *, negate: bool = False, membermask: Operand = FULL_MASK
) -> Instr:
    """``all``/``any``/``uni`` give a predicate; ``ballot`` gives the b32 lane mask."""
    check_choice(mode, ("all", "any", "uni", "ballot"), "vote.sync: mode")
    check_pred(a, "vote.sync: a")
    if mode == "ballot":
        check_reg(d, "b32", "vote.sync.ballot: d")
        dtype = "b32"
    else:
        check_pred(d, f"vote.sync.{mode}: d")
        dtype = "pred"
    src = f"{'!' if negate else ''}{a}"
    return Instr(f"vote.sync.{mode}.{dtype} {d}, {src}, {_mask(membermask, 'vote.sync')}")


def activemask(d: Reg) -> Instr:
    check_reg(d, "b32", "activemask: d")
    return Instr(f"activemask.b32 {d}")
