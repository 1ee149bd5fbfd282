"""The sm_90a facts live in one record (``pyfuse.ir.hopper.SM90``) that the rest reads.

The ``ir`` layer stays below the passes, the backend and the frontend; the tables that keep
their own encodings (the swizzle codes, the tensor-map limits, the wgmma K per PTX type)
agree with the record; the target's defaults that the driver also reports come from it.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pyfuse
from pyfuse.backend_ptx import matmul_host, smem_desc, tma
from pyfuse.backend_ptx.driver import DEFAULT_DYNAMIC_SMEM_LIMIT
from pyfuse.backend_ptx.instructions import wgmma
from pyfuse.ir.hopper import SM90, HopperFacts
from pyfuse.ir.target import HOPPER
from pyfuse.passes import lower_matmul, matmul_operands

IR = Path(pyfuse.__file__).parent / "ir"


def test_the_ir_layer_imports_nothing_above_it() -> None:
    above = ("pyfuse.passes", "pyfuse.backend_ptx", "pyfuse.frontend", "pyfuse.testing")
    for path in sorted(IR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            assert not [n for n in names if n.startswith(above)], f"{path.name} imports {names}"


def test_facts_are_one_frozen_record() -> None:
    assert dataclasses.is_dataclass(HopperFacts) and HopperFacts() == SM90
    assert SM90.warpgroup_threads == 128 and SM90.wgmma_k(2) == 16
    assert SM90.max_swizzle_pattern_bytes == 1024
    assert list(SM90.swizzle_spans) == sorted(SM90.swizzle_spans, reverse=True)


def test_the_target_defaults_come_from_the_facts() -> None:
    assert HOPPER.warp_size == SM90.warp_size
    assert HOPPER.max_threads_per_block == SM90.max_threads_per_block
    assert HOPPER.default_smem_per_block == SM90.default_dynamic_smem_bytes == 48 * 1024
    assert HOPPER.max_smem_per_block == SM90.max_dynamic_smem_bytes
    assert HOPPER.default_smem_per_block == DEFAULT_DYNAMIC_SMEM_LIMIT


def test_tables_with_their_own_encodings_agree_with_the_facts() -> None:
    for swizzle in smem_desc.Swizzle:
        assert swizzle.pattern_bytes == SM90.swizzle_atom_rows * swizzle.span_bytes
    assert tuple(matmul_host.SWIZZLES) == SM90.swizzle_spans
    assert (SM90.tma_max_rank, SM90.tma_max_box) == (tma.MAX_RANK, tma.MAX_BOX)
    assert set(wgmma.WGMMA_K.values()) == {matmul_operands.WGMMA_K} == {16}


def test_the_mbarrier_object_and_the_barrier_region_are_different_sizes() -> None:
    """8 bytes per mbarrier; the region in front of the operand tiles that holds them is
    padded to the widest swizzle pattern, so the first tile starts on its boundary."""
    assert SM90.mbarrier_bytes == 8
    assert matmul_operands.BARRIER_REGION_BYTES == lower_matmul.SMEM_ALIGN == 1024
    most_stages = matmul_operands.BARRIER_REGION_BYTES // (2 * SM90.mbarrier_bytes)
    assert most_stages >= 8  # full[s] and empty[s] for the scheduler's largest ring
