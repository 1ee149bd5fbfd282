"""The warm path's shortcut (pyfuse.runtime.repeat_call): made on the second call in a row
with one call key, it serves later calls with the same tensor metadata, and every call that
differs (shape, strides, dtype, alignment, a Python number, requires_grad, a changed
closure value) still gets its own variant and the right answer."""

from __future__ import annotations

from typing import Any

import pytest

import pyfuse as pf
from pyfuse.runtime import calls

pytestmark = pytest.mark.gpu


def _state(fused: Any) -> Any:
    return fused.__dict__[calls._STATE]


def _misaligned(torch: Any, like: Any) -> Any:
    """A tensor of ``like``'s shape and strides whose address is 4 bytes off 16."""
    backing = torch.randn(like.numel() + 1, device="cuda", dtype=like.dtype)
    return backing[1:].view(like.shape)


def _check(torch: Any, got: Any, want: Any) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_the_shortcut_serves_repeats_and_steps_aside_for_any_difference(torch: Any) -> None:
    fused = pf.fuse(lambda x, y: x * 2.0 + y, name="repeat_call")
    x = torch.randn(64, 33, device="cuda")
    y = torch.randn(64, 33, device="cuda")
    for _ in range(3):
        _check(torch, fused(x, y), x * 2.0 + y)
    repeat = _state(fused).repeat
    assert repeat is not None, "the second call in a row with one key makes the shortcut"
    assert fused.repeat_call == repeat.run  # the function's call tries it first
    # New tensors of the same metadata take the shortcut too.
    a, b = torch.randn(64, 33, device="cuda"), torch.randn(64, 33, device="cuda")
    assert repeat.pointers((a, b)) is not None
    _check(torch, fused(a, b), a * 2.0 + b)
    others = {
        "another shape": (torch.randn(8, 33, device="cuda"), torch.randn(8, 33, device="cuda")),
        "a transposed view": (x.t(), y.t()),
        "a strided view": (x[:, ::2], y[:, ::2]),
        "a misaligned view": (_misaligned(torch, x), y),
        "another dtype": (x.double(), y.double()),
        "a broadcast operand": (x, y[:1]),
        "a Python number": (x, 3.0),
        "requires_grad": (x.clone().requires_grad_(), y),
    }
    for what, arguments in others.items():
        assert repeat.pointers(arguments) is None, what
        first, second = arguments
        want = (first * 2.0 + second).detach()
        _check(torch, fused(*arguments).detach(), want)
        _check(torch, fused(*arguments).detach(), want)  # its own shortcut, when made
    _check(torch, fused(x, y), x * 2.0 + y)


def test_a_changed_closure_value_is_not_served_by_the_shortcut(torch: Any) -> None:
    scale = 2.0

    def scaled(x: Any) -> Any:
        return x * scale

    fused = pf.fuse(scaled, name="repeat_call_closure")
    x = torch.randn(1000, device="cuda")
    for _ in range(3):
        _check(torch, fused(x), x * 2.0)
    assert _state(fused).repeat is not None
    scale = 5.0
    _check(torch, fused(x), x * 5.0)
    _check(torch, fused(x), x * 5.0)
    _check(torch, fused(x), x * 5.0)
    scale = 2.0  # back: the first table, whose shortcut is stale no longer matters
    _check(torch, fused(x), x * 2.0)
    _check(torch, fused(x), x * 2.0)
