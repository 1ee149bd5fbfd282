"""The shortcuts that keep emission and its imports cheap give what the rules they stand for
give: operand checks from a table, expression hashes computed once, one shared IR repr, folds
that compute only the op asked for."""

from __future__ import annotations

import copy
import dataclasses
import math
import pickle

import pytest

from pyfuse.backend_ptx import emit_math
from pyfuse.backend_ptx.operands import (
    PTX_TYPES,
    Reg,
    RegClass,
    _reg_accepts,
    check_reg,
    fmt_operand,
)
from pyfuse.ir import dtypes
from pyfuse.ir import kernel_ir as kir
from pyfuse.ir.tensor import MemoryType

i32, f32 = dtypes.int32, dtypes.float32


# ---- operand checks ---------------------------------------------------------------------------


@pytest.mark.parametrize("ptype", sorted(PTX_TYPES))
def test_register_checks_follow_the_compatibility_rule(ptype: str) -> None:
    for cls in RegClass:
        reg = Reg(cls, 3)
        if _reg_accepts(cls, PTX_TYPES[ptype]):
            assert check_reg(reg, ptype, "d") is reg
            assert fmt_operand(reg, ptype, "a") == str(reg)
        else:
            with pytest.raises(ValueError, match=f"d must be a register compatible with .{ptype}"):
                check_reg(reg, ptype, "d")


def test_register_check_errors_name_the_operand_and_the_type() -> None:
    with pytest.raises(ValueError, match="must be a PTX type name such as 'f32', got 'f31'"):
        check_reg(Reg(RegClass.F32, 0), "f31", "d")
    with pytest.raises(ValueError, match="must be a PTX type name"):
        fmt_operand(Reg(RegClass.F32, 0), "f31", "a")
    with pytest.raises(ValueError, match=r"add: d must be a register for \.f32, got 1\.0"):
        check_reg(1.0, "f32", "add: d")
    with pytest.raises(ValueError, match=r"\(32-bit\), got %rd0 of class \.b64"):
        check_reg(Reg(RegClass.B64, 0), "f32", "add: d")


def test_register_classes_hash_by_identity() -> None:
    counts = {cls: 0 for cls in RegClass}
    counts[RegClass.B32] += 1
    assert counts[RegClass("b32")] == 1 and hash(RegClass.F32) == hash(RegClass["F32"])


# ---- expressions ------------------------------------------------------------------------------


def _index() -> kir.Binary:
    return kir.Binary("add", kir.Var("i", i32, 4), kir.Const(1, i32), i32)


def test_an_expression_hash_is_its_fields_hash() -> None:
    expr = _index()
    fields = tuple(getattr(expr, f.name) for f in dataclasses.fields(expr))
    assert hash(expr) == hash(fields) and hash(expr) == hash(_index())
    assert expr == _index() and len({expr, _index()}) == 1


def test_copied_and_unpickled_expressions_hash_like_fresh_ones() -> None:
    buffer = kir.Buffer("T1", f32, MemoryType.GLOBAL)
    load = kir.Load(buffer, _index(), f32)
    hash(load)  # cached on the node
    copied = copy.deepcopy(load)  # a new buffer: Load hashes its buffer's identity
    assert hash(copied) == hash(kir.Load(copied.buffer, _index(), f32))
    assert pickle.loads(pickle.dumps(_index())) == _index()
    with pytest.raises(dataclasses.FrozenInstanceError):
        load.index = _index()  # type: ignore[misc]


def test_kernel_ir_reprs_are_dataclass_reprs() -> None:
    buffer = kir.Buffer("T1", f32, MemoryType.LOCAL, 4)
    assert repr(kir.Const(1, i32)) == "Const(value=1, dtype=pf.int32)"
    assert repr(kir.Store(buffer, kir.Const(0, i32), kir.Const(2.0, f32))) == (
        "Store(buffer=Buffer(name='T1', dtype=pf.float32, memory=<MemoryType.LOCAL: 'l'>, "
        "size=4, smem_offset=0), index=Const(value=0, dtype=pf.int32), "
        "value=Const(value=2.0, dtype=pf.float32))"
    )
    assert repr(kir.For(kir.Var("j"), kir.Const(2), [kir.Sync()])) == (
        "For(var=Var(name='j', dtype=pf.int64, extent=None), "
        "extent=Const(value=2, dtype=pf.int64), body=[Sync()], unroll=False)"
    )


# ---- folding ----------------------------------------------------------------------------------


def test_folds_leave_ops_they_do_not_know_to_the_gpu() -> None:
    assert emit_math.fold_binary("atan2", 1.0, 2.0, f32) is None
    assert emit_math.fold_binary("atan2", 1, 2, i32) is None
    assert emit_math.fold_unary("exp", 1.0, f32) is None


def test_float_folds_give_ieee_special_values() -> None:
    assert math.isnan(float(emit_math.fold_unary("sqrt", -1.0, f32) or 0.0))
    assert emit_math.fold_unary("reciprocal", -0.0, f32) == -math.inf
    assert emit_math.fold_unary("relu", -3.0, f32) == 0.0
    assert emit_math.fold_binary("pow", 2.0, 0.5, f32) == emit_math.round_to(math.sqrt(2), f32)
    assert emit_math.fold_binary("sub", 1e30, -1e30, dtypes.float64) == 2e30
