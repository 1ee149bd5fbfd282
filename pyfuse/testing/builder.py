"""The program the generator is drawing: values traced as they are added.

A :class:`Builder` holds the values drawn so far (input records and op records) together with
the symbolic :class:`pyfuse.Tensor` each one traced to, so every op family knows its operands'
shapes and dtypes exactly, and :meth:`Builder.op` keeps a candidate only if it traces (a
:class:`pyfuse.FusionError` drops it) and fits the case's element budget. Any other exception
is a pyfuse bug at trace: the op is kept as the program's last and the builder is ``broken``.
The drawing helpers (extents, shapes, layouts, scalars) live here too, so that every family
draws sizes alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

import pyfuse as pf
from pyfuse.frontend.fuse import input_tensor
from pyfuse.ir.dtypes import DType
from pyfuse.ir.fusion import Fusion
from pyfuse.runtime.spec import contiguous_strides
from pyfuse.testing.program import Input, Op, Value

# Extents by kind: ragged (odd, primes), size 1, empty, and multiples of 8/16/64.
RAGGED = (3, 5, 7, 11, 13, 17, 31, 37, 61, 97, 127, 257)
ALIGNED = (8, 16, 24, 32, 64, 128, 192, 256, 512, 1024)
INPUT_DTYPES = (
    "f32", "f32", "f32", "bf16", "bf16", "f16", "i32", "bool", "i8", "u8", "i16", "f64",
)  # fmt: skip


class Builder:
    """A program being drawn, traced as it grows so every op's shape and dtype is known."""

    def __init__(self, rng: np.random.Generator, budget: int) -> None:
        self.rng = rng
        self.budget = budget
        self.values: list[Value] = []
        self.tensors: list[pf.Tensor] = []
        self.fusion = Fusion("fuzz_generate")
        self.rejected = 0
        # Set when a candidate raised something other than FusionError: the program ends
        # with that op (there is no tensor to build on), so the runner sees the bug.
        self.broken = False

    # -- drawing helpers -----------------------------------------------------------------
    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def pick(self, options: Sequence[str]) -> str:
        return str(options[int(self.rng.integers(len(options)))])

    def extent(self) -> int:
        roll = self.rng.random()
        if roll < 0.45:
            return int(self.rng.choice(RAGGED))
        if roll < 0.62:
            return 1
        if roll < 0.64:
            return 0
        if roll < 0.94:
            return int(self.rng.choice(ALIGNED))
        return int(self.rng.integers(2, 40))

    def shape(self, limit: int | None = None) -> tuple[int, ...]:
        limit = limit or self.budget
        rank = int(self.rng.choice([0, 1, 2, 3, 4], p=[0.05, 0.25, 0.4, 0.2, 0.1]))
        dims = [self.extent() for _ in range(rank)]
        while math.prod(dims) > limit:
            largest = int(np.argmax(dims))
            dims[largest] = max(1, dims[largest] // int(self.rng.integers(2, 9)))
        return tuple(dims)

    def strides(self, shape: tuple[int, ...]) -> tuple[int, ...] | None:
        """Row-major mostly; else transposed, column-major, row-padded or broadcast (0)."""
        if not shape or not self.chance(0.22):
            return None
        roll = self.rng.random()
        order = list(range(len(shape)))  # memory order, outermost first
        if roll < 0.45 and len(shape) >= 2:
            while order == sorted(order):
                order = [int(i) for i in self.rng.permutation(len(shape))]
        pad = int(self.rng.choice([1, 3, 8, 13])) if roll >= 0.3 else 0
        strides = [0] * len(shape)
        running = 1
        for position, axis in enumerate(reversed(order)):
            strides[axis] = running
            running *= max(shape[axis], 1)
            if position == 0 and len(shape) >= 2:
                running += pad * (1 if shape[axis] else 0)
        if roll > 0.92:
            wide = [axis for axis, extent in enumerate(shape) if extent > 1]
            if wide:
                strides[int(self.rng.choice(wide))] = 0
        result = tuple(strides)
        return None if result == contiguous_strides(shape) else result

    def partner_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """A shape that broadcasts with ``shape``: equal, a suffix, or with some dims 1."""
        roll = self.rng.random()
        if roll < 0.35 or not shape:
            return shape
        if roll < 0.6:
            return shape[int(self.rng.integers(0, len(shape) + 1)) :]
        out = list(shape)
        for axis in range(len(out)):
            if self.chance(0.5):
                out[axis] = 1
        if self.chance(0.2):
            out.insert(0, int(self.rng.choice([1, 2, 3])))
        return tuple(out)

    def scalar(self, dtype: str) -> str:
        roll = self.rng.random()
        if roll < 0.15:
            return self.pick(("True", "False"))
        if roll < 0.45 or dtype in ("i32", "bool"):
            return str(int(self.rng.integers(-3, 6)) or 2)
        return repr(float(self.rng.choice([0.5, -1.5, 2.0, 0.1, 3.25, -0.75])))

    # -- values --------------------------------------------------------------------------
    def shape_of(self, index: int) -> tuple[int, ...]:
        return tuple(self.tensors[index].shape)

    def dtype_of(self, index: int) -> DType:
        return self.tensors[index].dtype

    def is_float(self, index: int) -> bool:
        return self.dtype_of(index).is_floating

    def computed(self, index: int) -> bool:
        return isinstance(self.values[index], Op)

    def choose(self, predicate: Callable[[int], bool] | None = None) -> int | None:
        """A value, recent ones likelier; None when none satisfies ``predicate``."""
        indices = [i for i in range(len(self.values)) if predicate is None or predicate(i)]
        if not indices:
            return None
        weights = np.array([(1.0 + i) ** 2 for i in indices])
        return int(self.rng.choice(indices, p=weights / weights.sum()))

    def add_input(
        self, shape: tuple[int, ...], dtype: str, strides: tuple[int, ...] | None = None
    ) -> int:
        value = Input(shape, dtype, strides)
        with self.fusion:
            tv = self.fusion.add_input(input_tensor(value.spec()))
        self.values.append(value)
        self.tensors.append(pf.Tensor(tv))
        return len(self.values) - 1

    def new_input(self, shape: tuple[int, ...], dtype: str | None = None) -> int:
        dtype = dtype or self.pick(INPUT_DTYPES)
        return self.add_input(shape, dtype, self.strides(shape))

    def op(self, name: str, template: str, args: Sequence[int], flips: bool = False) -> int | None:
        """Trace the candidate now; keep it if it traces and fits the budget."""
        candidate = Op(name, template, tuple(args), flips)
        namespace: dict[str, object] = {"pf": pf, "np": np}
        namespace.update({f"v{arg}": self.tensors[arg] for arg in args})
        try:
            with self.fusion:
                result = eval(candidate.expression(), namespace)  # pyfuse ops and ufuncs
        except pf.FusionError:
            self.rejected += 1
            return None
        except Exception:  # a valid op pyfuse cannot trace: keep it, the runner reports it
            self.broken = True
            self.values.append(candidate)
            self.tensors.append(self.tensors[args[0]])
            return len(self.values) - 1
        if not isinstance(result, pf.Tensor) or math.prod(result.shape) > self.budget:
            self.rejected += 1
            return None
        self.values.append(candidate)
        self.tensors.append(result)
        return len(self.values) - 1

    def flips_on(self, *indices: int) -> bool:
        """Whether a discontinuous op on these operands may flip on a last-bit difference."""
        return any(self.is_float(i) and self.computed(i) for i in indices)

    def ops(self) -> list[Op]:
        return [value for value in self.values if isinstance(value, Op)]

    def rollback(self, mark: int) -> None:
        del self.values[mark:]
        del self.tensors[mark:]


def broadcasts(a: tuple[int, ...], c: tuple[int, ...]) -> bool:
    for p, q in zip(reversed(a), reversed(c), strict=False):
        if p != q and p != 1 and q != 1:
            return False
    return True
