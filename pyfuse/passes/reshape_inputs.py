"""Reshapes of inputs that are not views: a copy first.

A reshape reads its input in place only when that memory is row-major and contiguous
(:func:`pyfuse.passes.skip_intermediates.view_allocation`); lowering derives every index from
one reference tensor, and a reshape's input and output share no axis, so a reshape whose input
is computed in the same kernel cannot be indexed there. Segmentation therefore ends a kernel
before such a reshape, and the next kernel reads the written (contiguous) intermediate as a
view. A fusion input that is strided (a transpose or a row-padded slice of a larger buffer)
gives segmentation nothing to cut: this pass puts a plain copy between it and the reshape.

Expects the math IR. Guarantees: every ReshapeOp reads a computed tensor or a row-major
contiguous fusion input; the values are unchanged.
"""

from __future__ import annotations

from pyfuse.ir import ops as ir_ops
from pyfuse.ir.exprs import ReshapeOp
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.naming import source_location
from pyfuse.passes.skip_intermediates import is_row_major_contiguous


def copy_strided_reshape_inputs(fusion: Fusion) -> int:
    """Insert the copies (module docstring) in place; returns how many were inserted."""
    count = 0
    for expr in fusion.exprs():
        if not isinstance(expr, ReshapeOp):
            continue
        source = expr.tensor_inputs[0]
        if not fusion.is_input(source) or is_row_major_contiguous(source):
            continue
        with fusion, source_location(expr.source):
            copy = ir_ops.set_copy(source)
        expr.replace_input(source, copy)
        count += 1
    return count
