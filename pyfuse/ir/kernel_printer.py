"""Text form of kernel IR: one line per statement, nested blocks indented.

What ``PYFUSE_DUMP=kernel`` prints and error messages quote; stable, so tests may compare it.
"""

from __future__ import annotations

from pyfuse.ir.kernel_ir import (
    Alloc,
    Assign,
    Comment,
    For,
    If,
    Kernel,
    Let,
    MatmulMainLoop,
    StagedLoad,
    StageStore,
    Stmt,
    Store,
    Sync,
    ThreadReduce,
    VectorLoad,
    VectorStore,
)
from pyfuse.ir.tensor import MemoryType


def stmt_to_lines(stmt: Stmt, indent: str = "") -> list[str]:
    inner = indent + "  "
    if isinstance(stmt, For):
        kind = "unroll " if stmt.unroll else ""
        lines = [f"{indent}for {kind}{stmt.var} in range({stmt.extent}):"]
        for child in stmt.body:
            lines += stmt_to_lines(child, inner)
        return lines
    if isinstance(stmt, If):
        lines = [f"{indent}if {stmt.condition}:"]
        for child in stmt.then:
            lines += stmt_to_lines(child, inner)
        if stmt.orelse:
            lines.append(f"{indent}else:")
            for child in stmt.orelse:
                lines += stmt_to_lines(child, inner)
        return lines
    if isinstance(stmt, Let):
        return [f"{indent}{stmt.var}: {stmt.var.dtype.short} = {stmt.value}"]
    if isinstance(stmt, Assign):
        return [f"{indent}{stmt.var} = {stmt.value}"]
    if isinstance(stmt, Alloc):
        buffer = stmt.buffer
        where = f" @ smem+{buffer.smem_offset}" if buffer.memory == MemoryType.SHARED else ""
        return [
            f"{indent}alloc {buffer.name}: {buffer.dtype.short}[{buffer.size}] "
            f"{buffer.memory.name.lower()}{where}"
        ]
    if isinstance(stmt, Store):
        return [f"{indent}{stmt.buffer.name}[{stmt.index}] = {stmt.value}"]
    if isinstance(stmt, VectorLoad | VectorStore):
        return [
            f"{indent}{stmt.target.name}[{stmt.target_index}:+{stmt.width}] = "
            f"{stmt.source.name}[{stmt.source_index}:+{stmt.width}]  # vector"
        ]
    if isinstance(stmt, StageStore):
        return [f"{indent}stage[{stmt.store}] = {stmt.source.name}[0:+{stmt.width}]  # smem, TMA"]
    if isinstance(stmt, StagedLoad):
        return [
            f"{indent}{stmt.target.name}[0:+{stmt.width}] = stage[{stmt.store}]  # smem, TMA-loaded"
        ]
    if isinstance(stmt, Sync):
        return [f"{indent}sync"]
    if isinstance(stmt, ThreadReduce):
        return [
            f"{indent}{stmt.var} = thread_all_reduce_{stmt.op}({stmt.var}, threads={stmt.threads})"
        ]
    if isinstance(stmt, Comment):
        return [f"{indent}# {stmt.text}"]
    if isinstance(stmt, MatmulMainLoop):
        lines = [
            f"{indent}matmul_main_loop m={stmt.m} n={stmt.n} k={stmt.k} batch={stmt.batch} "
            f"tile=({stmt.tile_m}, {stmt.tile_n}, {stmt.tile_k}) stages={stmt.stages} "
            f"consumer_warpgroups={stmt.consumer_warpgroups} grid_swizzle={stmt.grid_swizzle} "
            f"persistent={stmt.persistent}"
            + (f" cluster=({stmt.cluster_m}, {stmt.cluster_n})" if stmt.cluster_size > 1 else "")
        ]
        for operand in stmt.operands:
            layout = "K-major" if operand.k_major else "MN-major"
            lines.append(
                f"{inner}tma {operand.buffer_name}: shape={list(operand.shape)} "
                f"strides={list(operand.strides)} box={list(operand.box)} "
                f"roles={list(operand.roles)} {layout} swizzle={operand.swizzle_bytes}B "
                f"smem+{operand.smem_offset} (+{operand.stage_bytes}/stage)"
            )
        for a, b, accumulator in stmt.mmas:
            lines.append(f"{inner}{accumulator.name} += wgmma(operand {a}, operand {b})")
        for index, store in enumerate(stmt.stores):
            lines.append(
                f"{inner}tma store [{index}] {store.buffer_name}: shape={list(store.shape)} "
                f"strides={list(store.strides)} box={list(store.box)} "
                f"roles={list(store.roles)} swizzle={store.swizzle_bytes}B "
                f"smem+{store.smem_offset} ({store.buffers} x {store.buffer_bytes} B per warpgroup)"
            )
        for residual in stmt.residuals:
            lines.append(
                f"{inner}tma residual {residual.buffer_name} into store [{residual.store}]'s "
                f"staging: shape={list(residual.shape)} strides={list(residual.strides)} "
                f"box={list(residual.box)} roles={list(residual.roles)} "
                f"swizzle={residual.swizzle_bytes}B"
            )
        for vector in stmt.vectors:
            lines.append(
                f"{inner}tma vector {vector.buffer_name} along {vector.role}: "
                f"extent={vector.extent} box={vector.span} smem+{vector.smem_offset} "
                f"({vector.buffer_bytes} B per warpgroup, loaded per tile)"
            )
        lines.append(
            f"{inner}epilogue for each ({stmt.batch_index}, {stmt.row}, {stmt.col}) at "
            f"{stmt.element}:"
        )
        for child in stmt.epilogue:
            lines += stmt_to_lines(child, inner + "  ")
        handoff = stmt.handoff
        if handoff is not None:
            names = ", ".join(value.name for value in stmt.handoff_values)
            lines.append(
                f"{inner}epilogue warps, from {names} (the handoff tiles: "
                f"smem+{handoff.smem_offset}, {handoff.tensors} x {handoff.row_blocks}x"
                f"{handoff.chunks} boxes of {handoff.box_bytes} B):"
            )
            for child in stmt.late_epilogue:
                lines += stmt_to_lines(child, inner + "  ")
        return lines
    return [f"{indent}{type(stmt).__name__}"]


def kernel_to_str(kernel: Kernel) -> str:
    params = ", ".join(f"{p.buffer_name}: {p.dtype.short}{list(p.shape)}" for p in kernel.params)
    lines = [
        f"kernel {kernel.name}({params})",
        f"  grid={kernel.grid} block={kernel.block} smem={kernel.smem_bytes} "
        f"index={kernel.index_dtype.short}"
        + (f" cluster={kernel.cluster}" if kernel.cluster != (1, 1, 1) else ""),
    ]
    for stmt in kernel.body:
        lines += stmt_to_lines(stmt, "  ")
    return "\n".join(lines)
