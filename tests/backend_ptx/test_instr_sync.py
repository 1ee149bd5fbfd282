"""Control flow, barriers, fences, warp shuffles, special registers, elect, setmaxnreg, mbarrier."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ptx_probes
import pytest

from pyfuse.backend_ptx import ptxas
from pyfuse.backend_ptx.emitter import Directives, PtxModule
from pyfuse.backend_ptx.instructions import control, mbarrier, shuffle, special
from pyfuse.backend_ptx.operands import Address, Instr, Label, Reg, RegClass

P = Reg(RegClass.PRED, 0)
R = [Reg(RegClass.B32, i) for i in range(3)]
RD = Reg(RegClass.B64, 0)
F = Reg(RegClass.F32, 0)
H = Reg(RegClass.B16, 0)


@pytest.mark.parametrize(
    ("instr", "text"),
    [
        (control.bra(Label("$L__x_0"), uni=True), "bra.uni $L__x_0"),
        (control.bar_sync(), "bar.sync 0"),
        (control.bar_sync(1, 256), "bar.sync 1, 256"),
        (control.bar_arrive(2, R[0]), "bar.arrive 2, %r0"),
        (control.barrier_cluster_arrive(), "barrier.cluster.arrive.release.aligned"),
        (control.barrier_cluster_wait(), "barrier.cluster.wait.acquire.aligned"),
        (control.fence("gpu"), "fence.acq_rel.gpu"),
        (control.membar("gl"), "membar.gl"),
        (shuffle.shfl_sync("bfly", F, F, 16), "shfl.sync.bfly.b32 %f0, %f0, 16, 31, 0xffffffff"),
        (
            shuffle.shfl_sync("up", R[0], R[1], 1, p=P),
            "shfl.sync.up.b32 %r0|%p0, %r1, 1, 0, 0xffffffff",
        ),
        (
            shuffle.shfl_sync("idx", R[0], R[1], R[2], membermask=0xFF),
            "shfl.sync.idx.b32 %r0, %r1, %r2, 31, 255",
        ),
        (shuffle.redux_sync("add", "u32", R[0], R[1]), "redux.sync.add.u32 %r0, %r1, 0xffffffff"),
        (
            shuffle.vote_sync("ballot", R[0], P, negate=True),
            "vote.sync.ballot.b32 %r0, !%p0, 0xffffffff",
        ),
        (special.read_sreg(R[0], "laneid"), "mov.u32 %r0, %laneid"),
        (special.read_sreg(RD, "globaltimer"), "mov.u64 %rd0, %globaltimer"),
        (special.elect_sync(P), "elect.sync _|%p0, 0xffffffff"),
        (special.elect_sync(P, lane=R[0]), "elect.sync %r0|%p0, 0xffffffff"),
        (special.setmaxnreg("inc", 232), "setmaxnreg.inc.sync.aligned.u32 232"),
        (mbarrier.init(R[0], 1), "mbarrier.init.shared::cta.b64 [%r0], 1"),
        (mbarrier.fence_init(), "fence.mbarrier_init.release.cluster"),
        (mbarrier.arrive(R[0]), "mbarrier.arrive.release.cta.shared::cta.b64 _, [%r0]"),
        (
            mbarrier.arrive(R[0], count=2, scope="cluster", remote=True),
            "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r0], 2",
        ),
        (
            mbarrier.arrive_expect_tx(Address(R[0], 8), 16384, state=RD),
            "mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 %rd0, [%r0+8], 16384",
        ),
        (mbarrier.expect_tx(R[0], 64), "mbarrier.expect_tx.shared::cta.b64 [%r0], 64"),
        (
            mbarrier.try_wait_parity(P, R[0], R[1]),
            "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 %p0, [%r0], %r1",
        ),
        (mbarrier.fence_proxy_async(), "fence.proxy.async.shared::cta"),
        (mbarrier.fence_proxy_async(None), "fence.proxy.async"),
    ],
)
def test_exact_text(instr: Instr, text: str) -> None:
    assert instr.text == text


def test_wait_parity_is_a_retry_loop() -> None:
    retry = Label("$L__full_0")
    lines = mbarrier.wait_parity(P, R[0], 1, retry)
    assert [line.render() for line in lines] == [
        "$L__full_0:",
        "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 %p0, [%r0], 1;",
        "@!%p0 bra $L__full_0;",
    ]


def test_setmaxnreg_and_elect_record_their_requirements() -> None:
    assert special.setmaxnreg("dec", 40).needs_arch_specific
    assert special.elect_sync(P).min_version == (8, 0)
    assert mbarrier.arrive(R[0], sem="relaxed").min_version == (8, 6)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: control.bra("L1"), "must be a Label"),  # type: ignore[arg-type]
        (lambda: control.bar_sync(16), r"id must be in \[0, 15\]"),
        (lambda: control.bar_sync(1, 100), "multiple of 32"),
        (lambda: control.bar_arrive(1, 2048), r"thread count must be in \[32, 1024\]"),
        (lambda: control.fence("block"), "scope must be one of"),
        (lambda: shuffle.shfl_sync("xor", R[0], R[1], 1), "mode must be one of"),
        (lambda: shuffle.shfl_sync("bfly", R[0], R[1], 32), r"lane operand b must be in \[0, 31\]"),
        (lambda: shuffle.shfl_sync("bfly", RD, R[1], 1), r"compatible with \.b32"),
        (lambda: shuffle.shfl_sync("bfly", R[0], R[1], 1, membermask=0), r"membermask must be in"),
        (lambda: shuffle.redux_sync("add", "f32", F, F), "needs sm_100a"),
        (lambda: shuffle.redux_sync("and", "u32", R[0], R[1]), "dtype must be one of"),
        (lambda: shuffle.vote_sync("all", R[0], P), "predicate register"),
        (lambda: special.read_sreg(R[0], "tid"), "special register must be one of"),
        (lambda: special.read_sreg(R[0], "clock64"), r"compatible with \.u64"),
        (lambda: special.elect_sync(R[0]), "predicate register"),
        (lambda: special.setmaxnreg("inc", 230), "multiple of 8, got 230"),
        (lambda: special.setmaxnreg("inc", 16), r"must be in \[24, 256\], got 16"),
        (lambda: special.setmaxnreg("grow", 64), "action must be one of"),
        (lambda: mbarrier.init(R[0], 0), r"arrival count must be in \[1, 1048575\]"),
        (lambda: mbarrier.arrive(R[0], state=RD, remote=True), "no state result"),
        (lambda: mbarrier.arrive(R[0], sem="acquire"), "sem must be one of"),
        (lambda: mbarrier.arrive_expect_tx(R[0], 1 << 20), r"tx bytes must be in \[0, 1048575\]"),
        (lambda: mbarrier.try_wait_parity(P, R[0], 2), r"parity must be in \[0, 1\]"),
        (lambda: mbarrier.try_wait_parity(R[1], R[0], 0), "predicate register"),
        (lambda: mbarrier.expect_tx(R[0], 8, scope="gpu"), "scope must be one of"),
        (lambda: mbarrier.fence_proxy_async("local"), "space must be one of"),
        (lambda: mbarrier.wait_parity(P, R[0], 0, "L"), "must be a Label"),  # type: ignore[arg-type]
    ],
)
def test_validation(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_every_sync_form_assembles(assemble_lines: Callable[..., Any]) -> None:
    # The register cap at entry (.maxntid + .minnctapersm) keeps setmaxnreg from C7508.
    assemble_lines(ptx_probes.sync_probe, directives=Directives(maxntid=(384,), minnctapersm=1))


def test_setmaxnreg_without_register_cap_is_reported(assemble_clean: Callable[..., Any]) -> None:
    module = PtxModule()
    kb = module.kernel("no_cap", Directives(maxntid=(384,)))
    kb.emit(special.setmaxnreg("inc", 232), control.ret())
    result = ptxas.assemble(module.render())
    assert any("C7508" in problem for problem in result.problems())
