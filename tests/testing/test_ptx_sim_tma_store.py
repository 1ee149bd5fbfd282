"""TMA stores on the Hopper simulator (pyfuse.testing.ptx_sim.bulk_store): hand-written kernels
in which 128 threads fill a 64x64 bf16 staging tile (plain or 128B-swizzled) and one thread
stores it with ``cp.async.bulk.tensor``, land the tile (clipped at a ragged edge, nothing for
a box wholly outside); and each protocol mistake of a TMA-store epilogue is reported."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from pyfuse.testing.ptx_sim import NotModeledError, SimulationError
from pyfuse.testing.ptx_sim.machine import Machine
from pyfuse.testing.ptx_sim.parse import parse_module
from pyfuse.testing.ptx_sim.state import GlobalMemory
from pyfuse.testing.ptx_sim.tensor_core import TensorMap

BF16 = 9  # CUtensorMapDataType
SWIZZLE_128B = 3
BOX = (64, 64)  # columns, rows: one row is 128 bytes
BUFFER = 1024  # the staging buffer's offset in shared memory
SMEM = 16384
POISON = 0xFFFF
ORDERS = (("late", 0), ("eager", 1), ("eager", 2), ("late", 3))

_HEADER = """.version 8.0
.target sm_90a
.address_size 64

.extern .shared .align 1024 .b8 smem[];

.visible .entry k(
    .param .u64 OUT,
    .param .align 64 .b8 tmap0_OUT[128],
    .param .align 64 .b8 tmap1_IN[128]
)
{
    .reg .pred %p<8>;
    .reg .b32 %r<40>;
    .reg .b64 %rd<4>;

    mov.u32 %r0, smem;
    mov.u32 %r1, %tid.x;
    setp.eq.u32 %p1, %r1, 0;
    mov.b64 %rd0, tmap0_OUT;
    cvta.param.u64 %rd0, %rd0;
"""
_LOAD = (
    "    @%p1 cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
    "[%r22], [%rd1, {%r20, %r20}], [%r0];"
)
_REGS = "{%r10, %r11, %r12, %r13}"


def _fill(chunk: int, swizzle: bool, label: str) -> str:
    """Thread t writes row t/2, columns 32 (t%2) .. +31 of the tile: element (r, c) holds the
    bits r*64 + c + 4096 chunk, two per st.shared.b32, at the (swizzled) absolute address."""
    swizzling = (
        """    shr.u32 %r14, %r13, 7;
    and.b32 %r14, %r14, 7;
    shl.b32 %r14, %r14, 4;
    xor.b32 %r13, %r13, %r14;
"""
        if swizzle
        else ""
    )
    return f"""    shr.u32 %r2, %r1, 1;
    and.b32 %r3, %r1, 1;
    shl.b32 %r3, %r3, 5;
    mad.lo.u32 %r4, %r2, 64, %r3;
    add.u32 %r4, %r4, {4096 * chunk};
    shl.b32 %r5, %r2, 7;
    shl.b32 %r6, %r3, 1;
    add.u32 %r5, %r5, %r6;
    add.u32 %r5, %r5, %r0;
    add.u32 %r5, %r5, {BUFFER};
    mov.u32 %r7, 0;
{label}:
    shl.b32 %r8, %r7, 1;
    add.u32 %r9, %r4, %r8;
    add.u32 %r10, %r9, 1;
    shl.b32 %r10, %r10, 16;
    or.b32 %r11, %r9, %r10;
    shl.b32 %r12, %r7, 2;
    add.u32 %r13, %r5, %r12;
{swizzling}    st.shared.b32 [%r13], %r11;
    add.u32 %r7, %r7, 1;
    setp.lt.u32 %p0, %r7, 16;
    @%p0 bra {label};
"""


def _kernel(
    chunks: list[tuple[int, int]],
    *,
    swizzle: bool = False,
    fence: str = "fence.proxy.async.shared::cta;",
    bar: bool = True,
    wait: bool = True,
    reuse_wait: bool = True,
    source: str = f"add.u32 %r22, %r0, {BUFFER};",
) -> str:
    """Per chunk: warp 0 and warps 1-3 fill the tile in two copies of the loop (so that the
    scheduler interleaves them), fence, ``bar.sync 1, 128``; thread 0 stores the tile at the
    chunk's (column, row) and commits; before the next chunk it waits ``.read``."""
    body = [_HEADER]
    for i, (col, row) in enumerate(chunks):
        if i and reuse_wait:
            body.append("    @%p1 cp.async.bulk.wait_group.read 0;\n    bar.sync 1, 128;\n")
        body.append(f"    setp.lt.u32 %p2, %r1, 32;\n    @%p2 bra $L__warp0_{i};\n")
        body.append(_fill(i, swizzle, f"$L__rest_{i}"))
        body.append(f"    bra $L__filled_{i};\n$L__warp0_{i}:\n")
        body.append(_fill(i, swizzle, f"$L__first_{i}"))
        body.append(f"$L__filled_{i}:\n    {fence}\n")
        if bar:
            body.append("    bar.sync 1, 128;\n")
        body.append(
            f"""    mov.u32 %r20, {col};
    mov.u32 %r21, {row};
    {source}
    @%p1 cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd0, {{%r20, %r21}}], [%r22];
    @%p1 cp.async.bulk.commit_group;
"""
        )
    if wait:
        body.append("    @%p1 cp.async.bulk.wait_group 0;\n")
    body.append("    ret;\n}\n")
    return "".join(body)


def _run(
    ptx: str,
    shape: tuple[int, int],
    *,
    dims: tuple[int, int] | None = None,
    swizzle: bool = False,
    order: str = "late",
    seed: int = 0,
    writable: bool = True,
    block: int = 128,
    box: tuple[int, int] = BOX,
    source: np.ndarray | None = None,
) -> np.ndarray:
    """Run ``ptx`` on one CTA with an output of ``shape`` (rows, columns) full of poison,
    mapped with tensor dims ``dims`` (columns, rows; default the whole array)."""
    (entry,) = parse_module(ptx).values()
    memory = GlobalMemory()
    out = np.full(shape, POISON, dtype=np.uint16).view(ml_dtypes.bfloat16)
    base = memory.add(out, "OUT", writable)
    columns, rows = dims or (shape[1], shape[0])
    maps = {
        "tmap0_OUT": TensorMap(
            base,
            BF16,
            (columns, rows),
            (shape[1] * 2,),
            box,
            (1, 1),
            SWIZZLE_128B if swizzle else 0,
        )
    }
    if source is not None:
        source_base = memory.add(source, "IN", False)
        maps["tmap1_IN"] = TensorMap(
            source_base, BF16, (source.shape[1], source.shape[0]), (source.shape[1] * 2,), box,
            (1, 1), SWIZZLE_128B if swizzle else 0,
        )  # fmt: skip
    machine = Machine(
        entry, (1, 1, 1), (block, 1, 1), SMEM, {"OUT": base}, maps, memory, seed=seed, order=order
    )
    machine.run()
    assert not machine.stores
    bits: np.ndarray = out.view(np.uint16)
    return bits


def _tile(chunk: int = 0) -> np.ndarray:
    rows, cols = np.meshgrid(np.arange(64), np.arange(64), indexing="ij")
    tile: np.ndarray = (rows * 64 + cols + 4096 * chunk).astype(np.uint16)
    return tile


# ---- stores that land -----------------------------------------------------------------------


@pytest.mark.parametrize("swizzle", [False, True])
def test_a_staged_tile_lands_in_global_memory(swizzle: bool) -> None:
    ptx = _kernel([(64, 0)], swizzle=swizzle)
    for order, seed in ORDERS:
        got = _run(ptx, (64, 192), swizzle=swizzle, order=order, seed=seed)
        assert (got[:, 64:128] == _tile()).all()
        assert (got[:, :64] == POISON).all() and (got[:, 128:] == POISON).all()


def test_a_ragged_box_is_clipped_at_the_tensor_dims() -> None:
    # The map's tensor is 40 columns x 50 rows of a 64 x 72 array: the rest keeps its poison.
    got = _run(_kernel([(0, 0)], swizzle=True), (64, 72), dims=(40, 50), swizzle=True)
    assert (got[:50, :40] == _tile()[:50, :40]).all()
    assert (got[50:] == POISON).all() and (got[:, 40:] == POISON).all()
    # A box starting inside and passing the far edges: only its inside part is written.
    got = _run(_kernel([(16, 24)]), (50, 40))
    assert (got[24:, 16:] == _tile()[:26, :24]).all()
    assert (got[:24] == POISON).all() and (got[:, :16] == POISON).all()


def test_a_box_wholly_outside_the_tensor_writes_nothing() -> None:
    got = _run(_kernel([(64, 0)]), (64, 72), dims=(40, 50))
    assert (got == POISON).all()


def test_a_reused_staging_buffer_after_wait_group_read_stores_both_chunks() -> None:
    ptx = _kernel([(0, 0), (64, 0)], swizzle=True)
    for order, seed in ORDERS:
        got = _run(ptx, (64, 128), swizzle=True, order=order, seed=seed)
        assert (got[:, :64] == _tile(0)).all() and (got[:, 64:] == _tile(1)).all()


def _load_then_store(wait: bool) -> str:
    """Thread 0 loads a 64x64 tile with TMA into the buffer and stores it back out, after
    waiting on the load's mbarrier (``wait``) or not."""
    wait_code = (
        """$L__wait:
    mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 %p3, [%r0], %r20;
    @!%p3 bra $L__wait;
"""
        if wait
        else ""
    )
    store = (
        "    @%p1 cp.async.bulk.tensor.2d.global.shared::cta.bulk_group "
        "[%rd0, {%r20, %r20}], [%r22];"
    )
    return (
        _HEADER
        + f"""    mov.b64 %rd1, tmap1_IN;
    cvta.param.u64 %rd1, %rd1;
    add.u32 %r22, %r0, {BUFFER};
    mov.u32 %r20, 0;
    @%p1 mbarrier.init.shared::cta.b64 [%r0], 1;
    @%p1 fence.mbarrier_init.release.cluster;
    bar.sync 0;
    @%p1 mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%r0], 8192;
{_LOAD}
{wait_code}{store}
    @%p1 cp.async.bulk.commit_group;
    @%p1 cp.async.bulk.wait_group 0;
    ret;
}}
"""
    )


def test_a_tile_loaded_by_tma_and_stored_back_is_unchanged() -> None:
    """Both directions share one shared-memory layout, swizzle included."""
    ptx = _load_then_store(wait=True)
    data = (np.arange(64 * 64, dtype=np.uint16) * 7).reshape(64, 64).view(ml_dtypes.bfloat16)
    for order, seed in ORDERS:
        got = _run(ptx, (64, 64), swizzle=True, order=order, seed=seed, source=data)
        assert (got == data.view(np.uint16)).all()


@pytest.mark.parametrize("trans", [False, True])
def test_stmatrix_writes_the_fragment_layout(trans: bool) -> None:
    """One warp's stmatrix.x4: matrix j is rows 8j.. of a 32 x 8 tile; thread t's register j
    holds elements (t/4, 2(t%4)) and (+1) of it, with the bits (8j + row) * 8 + column."""
    regs = "".join(
        f"""    add.u32 %r{10 + j}, %r4, {64 * j};
    add.u32 %r9, %r{10 + j}, 1;
    shl.b32 %r9, %r9, 16;
    or.b32 %r{10 + j}, %r{10 + j}, %r9;
"""
        for j in range(4)
    )
    ptx = (
        _HEADER
        + f"""    shr.u32 %r2, %r1, 2;
    and.b32 %r3, %r1, 3;
    shl.b32 %r3, %r3, 1;
    shl.b32 %r4, %r2, 3;
    add.u32 %r4, %r4, %r3;
{regs}    shl.b32 %r5, %r1, 4;
    add.u32 %r5, %r5, %r0;
    add.u32 %r5, %r5, {BUFFER};
    stmatrix.sync.aligned.m8n8.x4{".trans" if trans else ""}.shared::cta.b16 [%r5], {_REGS};
    fence.proxy.async.shared::cta;
    bar.sync 0;
    mov.u32 %r20, 0;
    add.u32 %r22, %r0, {BUFFER};
    @%p1 cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd0, {{%r20, %r20}}], [%r22];
    @%p1 cp.async.bulk.commit_group;
    @%p1 cp.async.bulk.wait_group 0;
    ret;
}}
"""
    )
    got = _run(ptx, (32, 8), block=32, box=(8, 32))
    want = np.arange(256, dtype=np.uint16).reshape(4, 8, 8)  # matrix, row, column
    if trans:
        want = want.transpose(0, 2, 1)
    assert (got == want.reshape(32, 8)).all()


# ---- protocol mistakes -----------------------------------------------------------------------


def _errors(ptx: str, **kwargs: object) -> list[str]:
    """The SimulationError of each interleaving (wrong results reported as such)."""
    found = []
    for order, seed in ORDERS:
        try:
            got = _run(ptx, (64, 64), order=order, seed=seed, **kwargs)  # type: ignore[arg-type]
        except SimulationError as error:
            found.append(str(error))
        else:
            if not (got == _tile()).all():
                found.append("wrong result")
    return found


@pytest.mark.parametrize(
    ("bug", "ptx", "message"),
    [
        ("no fence", _kernel([(0, 0)], fence=""), r"did not follow with fence\.proxy\.async"),
        (
            "only warp 0 fences",
            _kernel([(0, 0)], fence="@%p2 fence.proxy.async.shared::cta;"),
            r"threads (3[2-9]|[4-9][0-9]|1[0-2][0-9]) wrote .* did not follow with fence",
        ),
        ("a fence of the global proxy only", _kernel([(0, 0)], fence="fence.proxy.async.global;"),
         "did not follow with fence"),
        ("no wait before exit", _kernel([(0, 0)], wait=False),
         r"exits after the TMA store of line \d+ .* no cp\.async\.bulk\.wait_group retired it"),
        ("misaligned source", _kernel([(0, 0)], source=f"add.u32 %r22, %r0, {BUFFER + 64};"),
         "not 128-byte aligned"),
        ("source past shared memory", _kernel([(0, 0)], source=f"mov.u32 %r22, {SMEM - 4096};"),
         "outside the CTA's shared memory"),
        ("negative coordinate", _kernel([(0, -8)]), "negative coordinate"),
    ],
)  # fmt: skip
def test_a_tma_store_protocol_mistake_is_reported(bug: str, ptx: str, message: str) -> None:
    found = _errors(ptx)
    assert len(found) == len(ORDERS), f"{bug}: some interleaving missed it: {found}"
    assert all(re.search(message, text) for text in found), f"{bug}: {found}"


def test_a_staging_buffer_rewritten_before_wait_group_read_is_reported() -> None:
    """The refill races the store still to read it (reported at the refill's st.shared), or
    overtakes its very issue (then the store reads unfenced bytes); an eager interleaving may
    instead complete the store first, and the second chunk lands."""
    ptx = _kernel([(0, 0), (0, 0)], reuse_wait=False)
    reused = (
        r"line \d+ \(st\.shared\.b32 .*\): a generic-proxy store into shared bytes that the "
        r"TMA store of line \d+ .* not yet read: the staging buffer was reused before "
        r"cp\.async\.bulk\.wait_group\.read"
    )
    found = []
    for order, seed in [*ORDERS, ("late", 4), ("late", 5)]:
        try:
            got = _run(ptx, (64, 64), order=order, seed=seed)
        except SimulationError as error:
            found.append(str(error))
        else:
            assert order == "eager" and (got == _tile(1)).all()
    assert any(re.search(reused, text) for text in found), found
    assert all(re.search(f"{reused}|did not follow with fence", text) for text in found), found


def test_a_store_before_the_writers_arrive_is_caught_in_some_interleaving() -> None:
    """Without the bar.sync, thread 0 may store while warps 1-3 still fill the tile."""
    found = _errors(_kernel([(0, 0)], bar=False))
    assert found, "no interleaving caught the missing barrier"
    pattern = "nothing ever wrote|did not follow with fence|staging buffer was reused|wrong result"
    assert all(re.search(pattern, text) for text in found), found


def test_a_store_of_bytes_a_tma_load_has_not_written_is_reported() -> None:
    ptx = _load_then_store(wait=False)
    data = np.zeros((64, 64), dtype=ml_dtypes.bfloat16)
    with pytest.raises(SimulationError, match="a TMA store reads shared bytes a TMA load has not"):
        _run(ptx, (64, 64), order="late", source=data)


def test_a_store_through_a_map_of_a_read_only_buffer_is_reported() -> None:
    with pytest.raises(SimulationError, match="a store into the read-only buffer OUT"):
        _run(_kernel([(0, 0)]), (64, 64), writable=False)


def test_a_cache_hinted_store_is_not_modeled() -> None:
    ptx = _kernel([(0, 0)]).replace(
        "shared::cta.bulk_group [%rd0, {%r20, %r21}], [%r22];",
        "shared::cta.bulk_group.L2::cache_hint [%rd0, {%r20, %r21}], [%r22], %rd2;",
    )
    with pytest.raises(NotModeledError, match="cache_hint"):
        _run(ptx, (64, 64))
