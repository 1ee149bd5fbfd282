"""A CPU simulator of the PTX pyfuse emits for Hopper, tensor-core kernels included: TMA tile
loads, mbarriers, wgmma, warp specialization and clusters, with a seeded scheduler that
interleaves warpgroups and asynchronous completions and reports races, protocol errors and
deadlocks (see :mod:`.machine`).

:func:`run_kernel` runs one lowered kernel's PTX on NumPy arrays bound as the kernel-IR
interpreter binds them (:func:`pyfuse.ir.kernel_interpreter.launch`), so
:func:`pyfuse.testing.simulator.run_on_simulator` can hand it the kernels the kernel-IR
interpreter has no rule for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from pyfuse.ir import kernel_ir as kir
from pyfuse.ir.kernel_interpreter import memory_span
from pyfuse.testing.ptx_sim.machine import Machine
from pyfuse.testing.ptx_sim.parse import parse_module
from pyfuse.testing.ptx_sim.state import GlobalMemory
from pyfuse.testing.ptx_sim.tensor_core import NotModeledError, SimulationError, TensorMap
from pyfuse.testing.ptx_sim.values import Array

__all__ = ["NotModeledError", "SimulationError", "run_kernel"]


def run_kernel(
    kernel: kir.Kernel,
    ptx: str,
    inputs: Sequence[Array],
    outputs: Sequence[Array],
    intermediates: Mapping[int, Array] | None = None,
    *,
    seed: int = 0,
    order: str = "eager",
    grid: tuple[int, int, int] | None = None,
) -> int:
    """Run ``kernel``'s ``ptx`` on the arrays (outputs written in place); the number of
    instructions it ran. ``order`` is ``eager`` (TMA loads land at random steps) or ``late``
    (only when every thread waits); ``grid`` overrides the launch grid (a persistent kernel
    on fewer CTAs)."""
    pools = {
        kir.ParamRole.INPUT: dict(enumerate(inputs)),
        kir.ParamRole.OUTPUT: dict(enumerate(outputs)),
        kir.ParamRole.INTERMEDIATE: dict(intermediates or {}),
    }
    memory = GlobalMemory()
    main_loop = kernel.main_loop()
    stream_k = main_loop.stream_k if main_loop is not None else None
    params: dict[str, int] = {}
    write_back: list[tuple[Array, Array]] = []
    for param in kernel.params:
        array = pools[param.role].get(param.index)
        if array is None:  # workspace: poisoned, as the kernel-IR interpreter's is
            raw = np.full(int(np.prod(param.shape)) * param.dtype.itemsize, 0xFF, np.uint8)
            array = raw.view(param.dtype.numpy()).reshape(param.shape)
        flat = memory_span(array)
        writable = param.role != kir.ParamRole.INPUT
        if stream_k is not None and param.buffer_name == stream_k.buffer_name:
            flat.view(np.uint8)[: stream_k.flag_bytes] = 0  # the runtime zeroes the flags
        if writable and not np.shares_memory(flat, array) and array.size:
            flat = flat.copy()
            write_back.append((flat, array))
        params[param.buffer_name] = memory.add(flat, param.buffer_name, writable)
    maps = _tensor_maps(kernel, params)
    (entry,) = parse_module(ptx).values()
    machine = Machine(
        entry,
        grid or kernel.grid,
        kernel.block,
        kernel.smem_bytes,
        params,
        maps,
        memory,
        cluster=kernel.cluster,
        seed=seed,
        order=order,
    )
    machine.run()
    for flat, array in write_back:
        array[...] = flat.reshape(array.shape)
    return machine.steps


def _tensor_maps(kernel: kir.Kernel, params: Mapping[str, int]) -> dict[str, TensorMap]:
    if not any(isinstance(s, kir.MatmulMainLoop) for s in kernel.walk()):
        return {}
    from pyfuse.backend_ptx import matmul_host

    stmt = matmul_host.find_main_loop(kernel)
    maps = {}
    for i, (buffer_name, plan) in enumerate(
        zip(matmul_host.mapped_buffers(stmt), matmul_host.tensor_map_plans(kernel), strict=True)
    ):
        tiled = plan.tiled_map()
        maps[f"tmap{i}_{buffer_name}"] = TensorMap(
            base=params[buffer_name],
            dtype_code=tiled.dtype_code,
            dims=tiled.global_dims,
            strides=tiled.global_strides,
            box=tiled.box_dims,
            element_strides=tiled.element_strides,
            swizzle=tiled.swizzle,
        )
    return maps
