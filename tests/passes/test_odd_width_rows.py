"""Vectors over odd-width rows: aligned windows (iterdomain.Split's ``window``, the reduction
and 2-D pointwise schedulers' choice, passes/lower_windows.py) and flat vectors across the
rows of dense tensors (scheduler_utils.dense_flat_width). When the schedulers take them,
what the split means, how the lowering guards a row's partial vectors, and that the kernels
assemble without spills. Results on the interpreter and the PTX simulator:
tests/lowering_cases.py's ``window_*`` and ``dense_flat_*`` cases (test_correct_lowering.py),
on the GPU the same cases."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from check_utils import require_ptxas

import pyfuse as pf
from pyfuse.ir import kernel_ir as k
from pyfuse.ir.iterdomain import IterDomain, Split
from pyfuse.ir.kernel_printer import kernel_to_str
from pyfuse.runtime.compiled import Kernel


def _kernels(fn: object, *specs: pf.Spec) -> list[Kernel]:
    return list(pf.fuse(fn).compile(*specs).kernels)  # type: ignore[arg-type]


def test_a_window_split_counts_the_vectors_a_shifted_row_can_touch() -> None:
    split = Split(IterDomain(50257), 8, window=True)
    # A row of 50257 starting at position 7 of its first vector ends in vector 6283.
    assert split.outer.extent == 6283 and split.inner.extent == 8
    assert not split.divisible
    assert "aligned window" in split.describe()
    assert not split.same_kind(Split(IterDomain(50257), 8))
    with pytest.raises(ValueError, match="inner split"):
        Split(IterDomain(50257), 8, inner_split=False, window=True)


@pytest.mark.parametrize(
    ("shape", "dtype", "width"),
    [
        ((8192, 50257), pf.bfloat16, 8),
        ((64, 50257), pf.bfloat16, 4),
        ((64, 4097), pf.bfloat16, 8),
        ((5, 333), pf.float32, 4),
    ],
)
def test_odd_rows_take_windows_of_vectors(
    shape: tuple[int, int], dtype: pf.DType, width: int
) -> None:
    """A GPT-2 vocabulary row (50257) read one element at a time ran at 0.23x torch; each
    kernel of the log_softmax now reads vectors: 8192 rows in one kernel that reads the row
    again per loop nest (reread_rows.py), 64 rows in segment_recompute's kernels, whose
    streaming reductions' register budget narrows them to 4."""
    kernels = _kernels(lambda x: pf.log_softmax(x, -1), pf.spec(shape, dtype))
    reductions = [kernel for kernel in kernels if kernel.scheduler == "reduction"]
    assert reductions
    for kernel in reductions:
        assert kernel.params.get("window") is True, kernel.params
        assert kernel.params["vector_width"] == width, kernel.params
        assert "fallback" not in kernel.params


@pytest.mark.parametrize(
    ("fn", "spec"),
    [
        (lambda x: pf.softmax(x, -1), pf.spec((64, 4096), pf.bfloat16)),  # rows divide
        (lambda x: pf.softmax(x, -1), pf.spec((64, 63), pf.bfloat16)),  # under 8 vectors
        (lambda x: pf.sum(x, (1, 2)), pf.spec((4, 9, 99), pf.float32)),  # two reduced axes
        (lambda x: pf.sum(x, -1), pf.spec((64, 999), pf.float32, strides=(1, 64))),  # column-major
        # rows laid out differently: a weight beside its rows, a slice beside its output
        (
            lambda x, w: pf.rms_norm(x, w),
            [pf.spec((6, 1001), pf.bfloat16), pf.spec((1001,), pf.bfloat16)],
        ),
        (lambda x: pf.softmax(x[:, 1:], -1), pf.spec((9, 522), pf.float16)),
    ],
)
def test_windows_stay_out_where_they_do_not_apply(fn: object, spec: object) -> None:
    specs = spec if isinstance(spec, list) else [spec]
    for kernel in _kernels(fn, *specs):
        assert "window" not in kernel.params, kernel.params


def test_a_wide_row_at_1024_threads_keeps_windows_within_its_budget() -> None:
    """Rows of 40 elements a thread in windows at 1024 threads spilled 8-24 B: a bf16
    softmax of 28001 keeps windows (32 a thread), one of 40001 reads element by element."""
    (kept,) = _kernels(lambda x: pf.softmax(x, -1), pf.spec((8, 28001), pf.bfloat16))
    assert kept.params.get("window") and kept.params["threads"] == 1024
    assert kept.params["serial"] * kept.params["vector_width"] <= 32
    (wide,) = _kernels(lambda x: pf.softmax(x, -1), pf.spec((8, 40001), pf.bfloat16))
    assert "window" not in wide.params and wide.params["persistent"]


def test_a_pointwise_row_beside_its_statistics_takes_windows() -> None:
    """The 2-D pointwise schedule over one odd-width column axis (a log_softmax's output
    kernel past the persistent budget); not beside an input broadcast along the rows (a
    bias, loaded before the row loop, where no row's shift is known)."""
    specs = (pf.spec((9, 1001), pf.bfloat16), pf.spec((9, 1), pf.float32))
    (kernel,) = _kernels(lambda x, s: (x - s) * 2.0, *specs)
    assert kernel.params["break_point"] == 1 and kernel.params.get("window") is True
    assert kernel.params["vector_width"] == 4
    bias = (pf.spec((64, 1001), pf.bfloat16), pf.spec((1001,), pf.bfloat16))
    (kernel,) = _kernels(lambda x, b: x + b, *bias)
    assert "window" not in kernel.params


def _ir(fn: object, *specs: pf.Spec) -> str:
    (kernel,) = _kernels(fn, *specs)
    assert kernel.params.get("window") is True
    return kernel_to_str(kernel.kernel_ir)  # type: ignore[arg-type]


def test_a_row_vector_is_whole_or_copied_element_by_element() -> None:
    """The load of a row's vector: the vector instruction where the vector lies inside the
    row, else eight guarded element loads, each element zeroed first; the output's store
    the same; the reduction's update guarded on both sides of the row."""
    (kernel,) = _kernels(lambda x: pf.softmax(x, -1), pf.spec((13, 1027), pf.bfloat16))
    ir = kernel.kernel_ir
    assert isinstance(ir, k.Kernel)
    windows = [stmt for stmt in _walk(ir.body) if isinstance(stmt, k.If) and stmt.orelse]
    loads = [w for w in windows if isinstance(w.then[0], k.VectorLoad)]
    stores = [w for w in windows if isinstance(w.then[0], k.VectorStore)]
    assert loads and stores
    for window in loads:
        assert len([s for s in window.orelse if isinstance(s, k.If)]) == 8
        assert len([s for s in window.orelse if isinstance(s, k.Store)]) == 8  # the zeros
    for window in stores:
        assert len(window.orelse) == 8 and all(isinstance(s, k.If) for s in window.orelse)
    text = kernel_to_str(ir)
    # The shift: where the row starts (row * 1027) modulo the vector.
    assert "* 1027) % 8)" in text
    assert "-1 <" in text


def _walk(body: list[k.Stmt]) -> list[k.Stmt]:
    found: list[k.Stmt] = []
    for stmt in body:
        found.append(stmt)
        for block in stmt.children():
            found.extend(_walk(block))
    return found


@pytest.mark.parametrize(
    ("fn", "specs"),
    [
        (lambda x: pf.log_softmax(x, -1), [pf.spec((8192, 50257), pf.bfloat16)]),
        (lambda x: pf.softmax(x, -1), [pf.spec((4096, 32001), pf.bfloat16)]),
        (lambda x: pf.log_softmax(x, -1), [pf.spec((64, 24001), pf.bfloat16)]),
        (lambda x: pf.softmax(x, -1), [pf.spec((64, 30001), pf.float32)]),
    ],
)
def test_window_kernels_assemble_without_spills(
    fn: object, specs: list[pf.Spec], tmp_path: Path
) -> None:
    require_ptxas()
    for index, kernel in enumerate(_kernels(fn, *specs)):
        source = tmp_path / f"k{index}.ptx"
        source.write_text(kernel.ptx)
        done = subprocess.run(
            ["ptxas", "-arch=sm_90a", "-v", str(source), "-o", str(tmp_path / "k.cubin")],
            capture_output=True,
            text=True,
            check=True,
        )
        assert " 0 bytes spill stores" in done.stderr, done.stderr
        assert "0 bytes stack frame" in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("shapes", "width"),
    [
        ([(8192, 50257)] * 2, 8),
        ([(6, 1, 4097)] * 2, 2),  # 24582 elements: pairs
        ([(3, 5, 7)] * 2, 1),  # 105 elements: none
        ([(64, 4097), (4097,)], 1),  # a row broadcast: not one shape
    ],
)
def test_dense_tensors_of_one_shape_take_flat_vectors_across_rows(
    shapes: list[tuple[int, ...]], width: int
) -> None:
    specs = [pf.spec(shape, pf.bfloat16) for shape in shapes]
    (kernel,) = _kernels(lambda x, y: pf.gelu(x * y + 1.0), *specs)
    assert kernel.params["vector_width"] == width, kernel.params
    if width > 1:
        assert kernel.params["break_point"] == 0


@pytest.mark.parametrize(
    ("fn", "specs"),
    [
        (
            lambda x, y: x.T * y,
            [pf.spec((4097, 64), pf.bfloat16), pf.spec((64, 4097), pf.bfloat16)],
        ),
        (lambda x: x[:, 1:] * 2.0, [pf.spec((64, 4098), pf.bfloat16)]),
        (lambda x: x * 2.0, [pf.spec((64, 4097), pf.bfloat16, strides=(4100, 1))]),
    ],
)
def test_flat_vectors_stay_out_of_tensors_not_dense_in_order(
    fn: object, specs: list[pf.Spec]
) -> None:
    (kernel,) = _kernels(fn, *specs)
    assert kernel.params["vector_width"] == 1, kernel.params


def test_reshaped_logits_take_windows() -> None:
    """``log_softmax(logits.view(-1, V))``: the 3-D input is read only through the view,
    whose rows lie as the output's do, and the window's anchor is that view (the tensor the
    kernel indexes), not the input. It read one element per access before."""
    (kernel,) = _kernels(
        lambda x: pf.log_softmax(pf.reshape(x, (512, 50257)), -1),
        pf.spec((8, 64, 50257), pf.bfloat16),
    )
    assert kernel.params.get("window") is True and kernel.params["vector_width"] == 8
    assert "fallback" not in kernel.params
