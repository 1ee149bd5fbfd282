"""Bulk tensor copies and warpgroup MMA: exact text, validation, and ptxas acceptance."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ptx_probes
import pytest

from pyfuse.backend_ptx.emitter import Directives, PtxModule
from pyfuse.backend_ptx.instructions import control, tma, wgmma
from pyfuse.backend_ptx.operands import Address, Instr, Reg, RegClass

P = Reg(RegClass.PRED, 0)
R = [Reg(RegClass.B32, i) for i in range(4)]
RD = [Reg(RegClass.B64, i) for i in range(3)]
H = Reg(RegClass.B16, 0)
ACC = tuple(Reg(RegClass.F32, i) for i in range(128))


@pytest.mark.parametrize(
    ("instr", "text"),
    [
        (
            tma.load_tile(Address(R[0], 1024), RD[0], [0, R[1]], R[2]),
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
            "[%r0+1024], [%rd0, {0, %r1}], [%r2]",
        ),
        (
            tma.load_tile(R[0], RD[0], [R[1], R[1], 3], R[2], dst_space="shared::cta"),
            "cp.async.bulk.tensor.3d.shared::cta.global.mbarrier::complete_tx::bytes "
            "[%r0], [%rd0, {%r1, %r1, 3}], [%r2]",
        ),
        (
            tma.load_tile(R[0], RD[0], [0, 0], R[2], multicast_mask=H, cache_policy=RD[1]),
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
            ".multicast::cluster.L2::cache_hint [%r0], [%rd0, {0, 0}], [%r2], %rs0, %rd1",
        ),
        (
            tma.store_tile(RD[0], [R[1], 0], R[0]),
            "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd0, {%r1, 0}], [%r0]",
        ),
        (
            tma.reduce_tile("add", RD[0], [0], R[0]),
            "cp.reduce.async.bulk.tensor.1d.global.shared::cta.add.tile.bulk_group "
            "[%rd0, {0}], [%r0]",
        ),
        (tma.commit_group(), "cp.async.bulk.commit_group"),
        (tma.wait_group(1, read=True), "cp.async.bulk.wait_group.read 1"),
        (tma.prefetch_tensormap(RD[0]), "prefetch.tensormap [%rd0]"),
        (
            tma.prefetch_tile_l2(RD[0], [0, 1, 2, 3, 4]),
            "cp.async.bulk.prefetch.tensor.5d.L2.global [%rd0, {0, 1, 2, 3, 4}]",
        ),
        (wgmma.fence(), "wgmma.fence.sync.aligned"),
        (wgmma.commit_group(), "wgmma.commit_group.sync.aligned"),
        (wgmma.wait_group(1), "wgmma.wait_group.sync.aligned 1"),
        (
            wgmma.mma_async(8, ACC[:4], RD[0], RD[1], scale_d=P, trans_b=1),
            "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%f0, %f1, %f2, %f3}, "
            "%rd0, %rd1, %p0, 1, 1, 0, 1",
        ),
        (
            wgmma.mma_async(8, ACC[:4], R, RD[1], ab_dtype="f16", scale_a=-1),
            "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%f0, %f1, %f2, %f3}, "
            "{%r0, %r1, %r2, %r3}, %rd1, 1, -1, 1, 0",
        ),
        (
            wgmma.mma_async(8, R[:2], RD[0], RD[1], ab_dtype="f16", acc_dtype="f16", scale_d=0),
            "wgmma.mma_async.sync.aligned.m64n8k16.f16.f16.f16 {%r0, %r1}, %rd0, %rd1, "
            "0, 1, 1, 0, 0",
        ),
    ],
)
def test_exact_text(instr: Instr, text: str) -> None:
    assert instr.text == text


def test_requirements_are_recorded() -> None:
    assert tma.load_tile(R[0], RD[0], [0], R[1], dst_space="shared::cta").min_version == (8, 6)
    assert tma.load_tile(R[0], RD[0], [0], R[1]).min_version == (8, 0)
    assert wgmma.mma_async(8, ACC[:4], RD[0], RD[1]).needs_arch_specific


@pytest.mark.parametrize(("n", "count"), [(8, 4), (64, 32), (256, 128)])
def test_accumulator_count(n: int, count: int) -> None:
    assert wgmma.accumulator_count(n) == count
    assert wgmma.accumulator_count(n, "f16") == count // 2


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: wgmma.check_n(260), "N must be a multiple of 8 and at most 256, got 260"),
        (lambda: wgmma.check_n(60), "N must be a multiple of 8 and at most 256, got 60"),
        (lambda: wgmma.check_n(0), "got 0"),
        (lambda: wgmma.mma_async(64, ACC[:31], RD[0], RD[1]), "needs 32 registers, got 31"),
        (
            lambda: wgmma.mma_async(8, ACC[:4], RD[0], RD[1], ab_dtype="tf32"),
            "A/B dtype must be one of",
        ),
        (
            lambda: wgmma.mma_async(8, R[:2], RD[0], RD[1], acc_dtype="f16"),
            "accumulator dtype must be",
        ),
        (lambda: wgmma.mma_async(8, [ACC[0]] * 4, RD[0], RD[1]), "must be distinct"),
        (lambda: wgmma.mma_async(8, ACC[:4], R[:3], RD[1]), "needs 4 b32 registers, got 3"),
        (lambda: wgmma.mma_async(8, ACC[:4], R, RD[1], trans_a=1), "must be K-major"),
        (lambda: wgmma.mma_async(8, ACC[:4], RD[0], R[0]), "B descriptor"),
        (
            lambda: wgmma.mma_async(8, ACC[:4], RD[0], RD[1], scale_d=2),
            r"scale_d .* must be in \[0, 1\]",
        ),
        (
            lambda: wgmma.mma_async(8, ACC[:4], RD[0], RD[1], scale_d=R[0]),
            "predicate register or 0/1",
        ),
        (lambda: wgmma.mma_async(8, ACC[:4], RD[0], RD[1], scale_a=0), "scale_a must be 1 or -1"),
        (lambda: wgmma.mma_async(8, ACC[:4], RD[0], RD[1], trans_b=2), "trans_b must be 0"),
        (lambda: wgmma.wait_group(8), r"pending groups must be in \[0, 7\]"),
        (lambda: tma.load_tile(R[0], RD[0], [], R[1]), "needs 1 to 5 coordinates, got 0"),
        (lambda: tma.load_tile(R[0], RD[0], [0] * 6, R[1]), "needs 1 to 5 coordinates, got 6"),
        (lambda: tma.load_tile(R[0], R[1], [0], R[1]), "tensor map"),
        (
            lambda: tma.load_tile(
                R[0], RD[0], [0], R[1], dst_space="shared::cta", multicast_mask=3
            ),
            "multicast needs dst_space 'shared::cluster'",
        ),
        (lambda: tma.load_tile(R[0], RD[0], [0], R[1], multicast_mask=0), "multicast mask"),
        (lambda: tma.load_tile(R[0], RD[0], [1 << 31], R[1]), "coordinate 0"),
        (lambda: tma.reduce_tile("mul", RD[0], [0], R[0]), "op must be one of"),
        (lambda: tma.wait_group(-1), "pending groups"),
    ],
)
def test_validation(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_every_tma_and_wgmma_form_assembles(assemble_lines: Callable[..., Any]) -> None:
    result = assemble_lines(ptx_probes.tma_wgmma_probe, directives=Directives(reqntid=(128,)))
    assert result.kernel("probe").spill_store_bytes == 0


@pytest.mark.parametrize("n", range(8, 257, 8))
def test_every_wgmma_n_is_a_legal_shape(n: int) -> None:
    text = wgmma.mma_async(n, ACC[: n // 2], RD[0], RD[1]).text
    assert f".m64n{n}k16." in text


def test_ptxas_accepts_every_wgmma_n(assemble_clean: Callable[..., Any]) -> None:
    module = PtxModule()
    for n in range(8, 257, 8):
        kb = module.kernel(f"wgmma_n{n}", Directives(reqntid=(128,)))
        desc_a, desc_b = kb.regs(RegClass.B64, 2)
        acc = kb.regs(RegClass.F32, wgmma.accumulator_count(n))
        kb.emit(
            wgmma.fence(),
            wgmma.mma_async(n, acc, desc_a, desc_b, scale_d=0),
            wgmma.commit_group(),
            wgmma.wait_group(0),
            control.ret(),
        )
    result = assemble_clean(module.render())
    assert len(result.kernels) == 32
