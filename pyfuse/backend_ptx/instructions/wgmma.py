"""Warpgroup MMA (sm_90a): ``wgmma.fence``, ``mma_async``, ``commit_group``, ``wait_group``.

All four are ``.sync.aligned``: the 128 threads of a warpgroup must execute them
together, never under thread-divergent control flow. The protocol:

    wgmma.fence            (before the first mma, and after any ordinary register
                            write of the accumulators or A fragments)
    mma_async ...          (any number; same-shape back-to-back needs no fence)
    commit_group           (batch the uncommitted mmas)
    wait_group N           (before touching accumulators of the last N+1 groups)

Shapes: M is 64, K is 16 for f16/bf16, N a multiple of 8 in [8, 256]. A reads
from shared memory through a descriptor (SS) or from four b32 registers (RS,
K-major only); B always through a descriptor.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyfuse.backend_ptx.operands import (
    Instr,
    Reg,
    RegClass,
    check_choice,
    check_int,
    check_reg,
    fmt_vector,
)
from pyfuse.ir.hopper import SM90

RS_A_REGISTERS = 4
MAX_WAIT_GROUPS = 7

# K per instruction for each operand type pyfuse emits (both 2-byte types).
WGMMA_K: dict[str, int] = {"bf16": SM90.wgmma_k(2), "f16": SM90.wgmma_k(2)}
# Accumulator types allowed for each operand type (bf16 accumulates in f32 only).
_ACC_TYPES: dict[str, tuple[str, ...]] = {"bf16": ("f32",), "f16": ("f32", "f16")}
# Elements of the accumulator held per 32-bit register (f16 accumulators are packed).
_ACC_PER_REG: dict[str, int] = {"f32": 1, "f16": 2}

_WGMMA_VERSION = (8, 0)


def check_n(n: int) -> int:
    """N must be a multiple of 8 in [8, 256] (ptxas: 'Unknown modifier' for m64n60k16)."""
    if (
        not isinstance(n, int)
        or isinstance(n, bool)
        or n % SM90.wgmma_n_step
        or not 0 < n <= SM90.wgmma_n_max
    ):
        raise ValueError(
            f"wgmma: N must be a multiple of {SM90.wgmma_n_step} and at most "
            f"{SM90.wgmma_n_max}, got {n}"
        )
    return n


def accumulator_count(n: int, acc_dtype: str = "f32") -> int:
    """Registers per thread holding the m64nN accumulator: N/2 for f32, N/4 for f16."""
    check_n(n)
    check_choice(acc_dtype, tuple(_ACC_PER_REG), "wgmma: accumulator dtype")
    return (SM90.wgmma_m * n) // (SM90.warpgroup_threads * _ACC_PER_REG[acc_dtype])


def fence() -> Instr:
    return Instr("wgmma.fence.sync.aligned", min_version=_WGMMA_VERSION, needs_arch_specific=True)


def commit_group() -> Instr:
    return Instr(
        "wgmma.commit_group.sync.aligned", min_version=_WGMMA_VERSION, needs_arch_specific=True
    )


def wait_group(pending: int) -> Instr:
    """Wait until at most ``pending`` wgmma groups of this warpgroup are in flight."""
    check_int(pending, "wgmma.wait_group: pending groups", 0, MAX_WAIT_GROUPS)
    return Instr(
        f"wgmma.wait_group.sync.aligned {pending}",
        min_version=_WGMMA_VERSION,
        needs_arch_specific=True,
    )


def _scale_d(scale_d: Reg | int) -> str:
    if isinstance(scale_d, Reg):
        if scale_d.cls is not RegClass.PRED:
            raise ValueError(f"wgmma: scale_d must be a predicate register or 0/1, got {scale_d}")
        return str(scale_d)
    check_int(scale_d, "wgmma: scale_d (0 = overwrite D, 1 = accumulate)", 0, 1)
    return str(scale_d)


def _imm_scale(value: int, what: str) -> str:
    if value not in (1, -1) or isinstance(value, bool):
        raise ValueError(f"wgmma: {what} must be 1 or -1 (negate the operand), got {value!r}")
    return str(value)


def _imm_trans(value: int, what: str) -> str:
    if value not in (0, 1) or isinstance(value, bool):
        raise ValueError(f"wgmma: {what} must be 0 (K-major) or 1 (MN-major), got {value!r}")
    return str(value)


def mma_async(
    n: int,
    d: Sequence[Reg],
    a: Reg | Sequence[Reg],
    b_desc: Reg,
    *,
    ab_dtype: str = "bf16",
    acc_dtype: str = "f32",
    scale_d: Reg | int = 1,
    scale_a: int = 1,
    scale_b: int = 1,
    trans_a: int = 0,
    trans_b: int = 0,
) -> Instr:
    """D(64xN) = A(64x16)·B(16xN) + scale_d·D, issued asynchronously by the warpgroup.

    ``a`` is a 64-bit descriptor register (SS form) or four b32 registers of
    packed A fragments (RS form, which has no ``trans_a``). ``scale_d=0`` ignores
    the old accumulator, which is how the first k-step avoids zero-filling D.
    """
    check_n(n)
    check_choice(ab_dtype, tuple(WGMMA_K), "wgmma: A/B dtype")
    check_choice(acc_dtype, _ACC_TYPES[ab_dtype], f"wgmma {ab_dtype}: accumulator dtype")
    expected = accumulator_count(n, acc_dtype)
    if len(d) != expected:
        raise ValueError(
            f"wgmma m64n{n} with {acc_dtype} accumulators needs {expected} registers, got {len(d)}"
        )
    acc_ptype = "f32" if acc_dtype == "f32" else "f16x2"
    for reg in d:
        check_reg(reg, acc_ptype, "wgmma: accumulator")
    if len(set(d)) != len(d):
        raise ValueError("wgmma: accumulator registers must be distinct")
    check_reg(b_desc, "b64", "wgmma: B descriptor")
    tail = [_scale_d(scale_d), _imm_scale(scale_a, "scale_a"), _imm_scale(scale_b, "scale_b")]
    if isinstance(a, Reg):
        check_reg(a, "b64", "wgmma: A descriptor")
        a_operand = str(a)
        tail.append(_imm_trans(trans_a, "trans_a"))
    else:
        a_regs = list(a)
        if len(a_regs) != RS_A_REGISTERS:
            raise ValueError(
                f"wgmma: register A needs {RS_A_REGISTERS} b32 registers, got {len(a_regs)}"
            )
        for reg in a_regs:
            check_reg(reg, "b32", "wgmma: A fragment")
        if trans_a != 0:
            raise ValueError("wgmma: A from registers must be K-major; trans_a must be 0")
        a_operand = fmt_vector(a_regs)
    tail.append(_imm_trans(trans_b, "trans_b"))
    k = WGMMA_K[ab_dtype]
    text = (
        f"wgmma.mma_async.sync.aligned.m{SM90.wgmma_m}n{n}k{k}.{acc_dtype}.{ab_dtype}.{ab_dtype} "
        f"{fmt_vector(d)}, {a_operand}, {b_desc}, {', '.join(tail)}"
    )
    return Instr(text, min_version=_WGMMA_VERSION, needs_arch_specific=True)
