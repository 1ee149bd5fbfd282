"""Special registers, ``elect.sync`` and ``setmaxnreg``.

``setmaxnreg`` moves registers between warpgroups of a warp-specialized kernel
(producer gives, consumers take). It is sm_90a-only, its count is an immediate in
[24, 256] and a multiple of 8 (ptxas rejects 230 and 16), and it only takes effect
when the kernel has a register cap at entry (``.maxnreg``, or ``.maxntid`` with
``.minnctapersm``); otherwise ptxas prints C7508 and ignores it.
"""

from __future__ import annotations

from pyfuse.backend_ptx.instructions.shuffle import FULL_MASK
from pyfuse.backend_ptx.operands import (
    Instr,
    Operand,
    Reg,
    check_choice,
    check_int,
    check_pred,
    check_reg,
)

_XYZ = ("x", "y", "z")
_VECTOR_SREGS = (
    "tid", "ntid", "ctaid", "nctaid",
    "clusterid", "nclusterid", "cluster_ctaid", "cluster_nctaid",
)  # fmt: skip
_SCALAR_SREGS_32 = (
    "laneid", "warpid", "nwarpid", "smid", "nsmid",
    "lanemask_eq", "lanemask_le", "lanemask_lt", "lanemask_ge", "lanemask_gt",
    "clock", "cluster_ctarank", "cluster_nctarank",
    "dynamic_smem_size", "total_smem_size",
)  # fmt: skip
_SREGS_64 = ("clock64", "globaltimer", "gridid")

# Width of every special register pyfuse reads, by name (without the leading %).
SPECIAL_REGISTERS: dict[str, str] = {
    **{f"{name}.{axis}": "u32" for name in _VECTOR_SREGS for axis in _XYZ},
    **{name: "u32" for name in _SCALAR_SREGS_32},
    **{name: "u64" for name in _SREGS_64},
}


def read_sreg(d: Reg, name: str) -> Instr:
    """Copy ``%name`` (e.g. ``tid.x``, ``laneid``, ``cluster_ctarank``) into ``d``.

    ``%warpid`` is the warp's current hardware slot and can change under
    preemption; compute the warp index as ``tid.x / 32`` for scheduling decisions.
    """
    if name not in SPECIAL_REGISTERS:
        raise ValueError(
            f"special register must be one of {sorted(SPECIAL_REGISTERS)}, got {name!r}"
        )
    dtype = SPECIAL_REGISTERS[name]
    check_reg(d, dtype, f"read_sreg %{name}: d")
    return Instr(f"mov.{dtype} {d}, %{name}")


def elect_sync(p: Reg, *, lane: Reg | None = None, membermask: Operand = FULL_MASK) -> Instr:
    """Set ``p`` in exactly one lane of ``membermask`` (the TMA / barrier-init issuer)."""
    check_pred(p, "elect.sync: p")
    dst = "_" if lane is None else str(check_reg(lane, "b32", "elect.sync: lane"))
    if isinstance(membermask, Reg):
        mask = str(check_reg(membermask, "b32", "elect.sync: membermask"))
    else:
        check_int(membermask, "elect.sync: membermask", 1, FULL_MASK)
        mask = f"0x{membermask:08x}"
    return Instr(f"elect.sync {dst}|{p}, {mask}", min_version=(8, 0))


SETMAXNREG_MIN = 24
SETMAXNREG_MAX = 256


def setmaxnreg(action: str, count: int) -> Instr:
    """Grow (``inc``) or shrink (``dec``) this warpgroup's per-thread register budget."""
    check_choice(action, ("inc", "dec"), "setmaxnreg: action")
    check_int(count, "setmaxnreg: register count", SETMAXNREG_MIN, SETMAXNREG_MAX)
    if count % 8:
        raise ValueError(f"setmaxnreg: register count must be a multiple of 8, got {count}")
    return Instr(
        f"setmaxnreg.{action}.sync.aligned.u32 {count}",
        min_version=(8, 0),
        needs_arch_specific=True,
    )
