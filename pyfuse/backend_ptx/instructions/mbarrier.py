"""mbarrier objects (8-byte, in shared memory) and the async-proxy fences around them.

A phase completes when the pending arrival count and the transaction count both
reach zero; TMA loads decrement the transaction count by the bytes they deliver
(``complete_tx``), so a consumer waits with ``try_wait.parity`` on the phase's
parity bit. The usual sequence, which :func:`wait_parity` emits for the waiting
side:

    init (one thread) -> fence_init -> bar.sync        (before anyone uses it)
    producer: arrive_expect_tx(bytes); cp.async.bulk.tensor ... [mbar]
    consumer: LOOP: try_wait.parity p, [mbar], parity; @!p bra LOOP

Arrival counts are limited to [1, 2**20 - 1] and tx counts to [0, 2**20 - 1] per
operation (the tx-count field is 20 bits plus sign).
"""

from __future__ import annotations

from pyfuse.backend_ptx.operands import (
    AddressLike,
    Instr,
    Label,
    Line,
    Operand,
    Reg,
    as_address,
    check_choice,
    check_int,
    check_pred,
    check_reg,
    fmt_operand,
)

MAX_COUNT = (1 << 20) - 1
MAX_TX_BYTES = (1 << 20) - 1
_SCOPES = ("cta", "cluster")


def _barrier_address(addr: AddressLike, op: str) -> str:
    return str(as_address(addr, f"{op}: mbarrier address"))


def _count_operand(value: Operand, what: str, low: int, high: int) -> str:
    if isinstance(value, Reg):
        return fmt_operand(value, "u32", what)
    return str(check_int(value, what, low, high))


def init(addr: AddressLike, count: Operand) -> Instr:
    """Initialize a barrier for ``count`` arrivals per phase (phase 0, tx-count 0)."""
    bar = _barrier_address(addr, "mbarrier.init")
    arrivals = _count_operand(count, "mbarrier.init: arrival count", 1, MAX_COUNT)
    return Instr(f"mbarrier.init.shared::cta.b64 {bar}, {arrivals}", min_version=(7, 8))


def fence_init() -> Instr:
    """Make this thread's ``mbarrier.init`` visible to other threads and to TMA.

    Must be followed by a CTA barrier (``bar.sync``), or a cluster barrier when
    peer CTAs multicast into or arrive on this CTA's barriers.
    """
    return Instr("fence.mbarrier_init.release.cluster", min_version=(8, 0))


def inval(addr: AddressLike) -> Instr:
    """Invalidate a barrier before its memory is reused for anything else."""
    return Instr(
        f"mbarrier.inval.shared::cta.b64 {_barrier_address(addr, 'mbarrier.inval')}",
        min_version=(7, 0),
    )


def _arrive_prefix(op: str, sem: str, scope: str, remote: bool, state: Reg | None) -> str:
    check_choice(sem, ("release", "relaxed"), f"{op}: sem")
    check_choice(scope, _SCOPES, f"{op}: scope")
    if remote:
        if state is not None:
            raise ValueError(f"{op}: a remote (shared::cluster) arrive has no state result")
        return f"{op}.{sem}.{scope}.shared::cluster.b64 _"
    sink = "_" if state is None else str(check_reg(state, "b64", f"{op}: state"))
    return f"{op}.{sem}.{scope}.shared::cta.b64 {sink}"


def _sem_version(sem: str) -> tuple[int, int]:
    # .relaxed on mbarrier operations needs PTX 8.6; .release needs 8.0.
    return (8, 6) if sem == "relaxed" else (8, 0)


def arrive(
    addr: AddressLike,
    *,
    count: Operand | None = None,
    state: Reg | None = None,
    sem: str = "release",
    scope: str = "cta",
    remote: bool = False,
) -> Instr:
    """Arrive on a barrier (``count`` arrivals, default 1).

    ``remote=True`` arrives on a peer CTA's barrier through an address from
    ``memory.mapa``; that form requires the sink ``_`` and usually scope cluster.
    """
    prefix = _arrive_prefix("mbarrier.arrive", sem, scope, remote, state)
    text = f"{prefix}, {_barrier_address(addr, 'mbarrier.arrive')}"
    if count is not None:
        text += f", {_count_operand(count, 'mbarrier.arrive: count', 1, MAX_COUNT)}"
    return Instr(text, min_version=_sem_version(sem))


def arrive_expect_tx(
    addr: AddressLike,
    tx_bytes: Operand,
    *,
    state: Reg | None = None,
    sem: str = "release",
    scope: str = "cta",
    remote: bool = False,
) -> Instr:
    """Expect ``tx_bytes`` more bytes this phase, then arrive once.

    ``tx_bytes`` must equal everything the TMA loads signalling this barrier
    deliver (every box, every multicast source), or the phase never completes.
    """
    prefix = _arrive_prefix("mbarrier.arrive.expect_tx", sem, scope, remote, state)
    tx = _count_operand(tx_bytes, "mbarrier.arrive.expect_tx: tx bytes", 0, MAX_TX_BYTES)
    text = f"{prefix}, {_barrier_address(addr, 'mbarrier.arrive.expect_tx')}, {tx}"
    return Instr(text, min_version=_sem_version(sem))


def expect_tx(addr: AddressLike, tx_bytes: Operand, *, scope: str | None = None) -> Instr:
    """Raise the expected transaction count without arriving."""
    tx = _count_operand(tx_bytes, "mbarrier.expect_tx: tx bytes", 0, MAX_TX_BYTES)
    mods = "mbarrier.expect_tx"
    if scope is not None:
        # A scope needs the explicit .relaxed (expect_tx's only ordering); ptxas takes it at
        # PTX 8.0, unlike .relaxed on arrive/try_wait, which needs 8.6.
        mods += f".relaxed.{check_choice(scope, _SCOPES, 'mbarrier.expect_tx: scope')}"
    bar = _barrier_address(addr, "mbarrier.expect_tx")
    return Instr(f"{mods}.shared::cta.b64 {bar}, {tx}", min_version=(8, 0))


def _wait(
    op: str,
    p: Reg,
    addr: AddressLike,
    parity: Operand,
    sem: str,
    scope: str,
    suspend_hint: Operand | None,
) -> Instr:
    check_pred(p, f"{op}: p")
    check_choice(sem, ("acquire", "relaxed"), f"{op}: sem")
    check_choice(scope, _SCOPES, f"{op}: scope")
    if isinstance(parity, Reg):
        phase = fmt_operand(parity, "u32", f"{op}: parity")
    else:
        phase = str(check_int(parity, f"{op}: parity", 0, 1))
    text = f"{op}.{sem}.{scope}.shared::cta.b64 {p}, {_barrier_address(addr, op)}, {phase}"
    if suspend_hint is not None:
        if op.startswith("mbarrier.test_wait"):
            raise ValueError("mbarrier.test_wait takes no suspend-time hint")
        text += f", {_count_operand(suspend_hint, f'{op}: suspend hint (ns)', 0, 0xFFFFFFFF)}"
    return Instr(text, min_version=_sem_version(sem))


def try_wait_parity(
    p: Reg,
    addr: AddressLike,
    parity: Operand,
    *,
    sem: str = "acquire",
    scope: str = "cta",
    suspend_hint: Operand | None = None,
) -> Instr:
    """Potentially blocking test: ``p`` is true once the phase with ``parity`` completed."""
    return _wait("mbarrier.try_wait.parity", p, addr, parity, sem, scope, suspend_hint)


def test_wait_parity(
    p: Reg, addr: AddressLike, parity: Operand, *, sem: str = "acquire", scope: str = "cta"
) -> Instr:
    """Non-blocking test of the same condition as :func:`try_wait_parity`."""
    return _wait("mbarrier.test_wait.parity", p, addr, parity, sem, scope, None)


def wait_parity(
    p: Reg,
    addr: AddressLike,
    parity: Operand,
    retry: Label,
    *,
    sem: str = "acquire",
    scope: str = "cta",
) -> list[Line]:
    """The blocking wait loop: ``retry: try_wait.parity p ...; @!p bra retry``.

    An acquire wait that succeeds makes the TMA-written bytes of that phase
    visible to this thread, so ``ld.shared`` or wgmma may read them right after.
    """
    if not isinstance(retry, Label):
        raise ValueError(f"wait_parity: retry must be a Label, got {retry!r}")
    wait = try_wait_parity(p, addr, parity, sem=sem, scope=scope)
    branch = Instr(f"bra {retry.name}").guarded(p, negate=True)
    return [retry, wait, branch]


def fence_proxy_async(space: str | None = "shared::cta") -> Instr:
    """Order generic-proxy writes before async-proxy reads (st.shared -> TMA store/wgmma).

    Every writing thread runs this after its stores and before the barrier that
    precedes the TMA store or wgmma. ``space=None`` covers all state spaces.
    """
    if space is None:
        return Instr("fence.proxy.async", min_version=(8, 0))
    check_choice(space, ("global", "shared::cta", "shared::cluster"), "fence.proxy.async: space")
    return Instr(f"fence.proxy.async.{space}", min_version=(8, 0))
