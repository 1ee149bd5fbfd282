"""Assemble PTX with the offline ``ptxas`` and read back what it says about each kernel.

CPU tests (and CI, where there is no GPU) assemble every emitted kernel with
``ptxas -arch=sm_90a -v``; the verbose report gives registers, spills, stack
frame and shared memory per kernel, plus performance advisories such as
``(C7515)`` (wgmma serialized) and ``(C7508)`` (setmaxnreg ignored). A kernel
pyfuse emits should assemble with zero spills, zero local memory and none of
those advisories; :meth:`PtxasResult.problems` lists whatever is not so.

The binary comes from ``knobs.ptxas_path()`` (``PYFUSE_PTXAS``, default ``ptxas``).

ptxas picks a register target from ``.maxntid`` and an occupancy goal of its own, and at
times spills to meet it while one block per SM's registers would hold the kernel (a
12800-element max at 512 threads: 40 registers and 8 spilled bytes, 51 and none with
``.minnctapersm 1``); the directive is no better in general (a 12285-wide layer_norm row
at 512 threads: 110 registers without it, 128 and 68 spilled bytes with it). So a kernel
that spills is built again with :func:`full_register_budget` and the build that spills
less is kept: :func:`assemble_least_spilling` here, ``driver.cubin_from_ptx`` on a GPU.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import field
from pathlib import Path

from pyfuse import knobs
from pyfuse.ir.records import record

DEFAULT_ARCH = "sm_90a"
_TIMEOUT_S = 300

_COMPILING = re.compile(r"Compiling entry function '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")
_LMEM = re.compile(r"(\d+) bytes lmem")
# Performance advisories "(C7515) ...", "ptxas warning : ...", and "file, line N; warning : ...".
_ADVISORY = re.compile(r"\(C\d{4}\)|ptxas warning|; warning\s*:")
_FUNCTION_NAMED = re.compile(r"function '([^']+)'")
_ERROR_LINE = re.compile(r"line (\d+); error")


class PtxasError(RuntimeError):
    """ptxas rejected the PTX (or could not be run); the message carries its log."""


@record(frozen=True)
class KernelResources:
    """What ptxas reports for one ``.entry``."""

    name: str
    registers: int = 0
    barriers: int = 0
    stack_frame_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    local_bytes: int = 0
    smem_bytes: int = 0
    warnings: tuple[str, ...] = ()

    def problems(self) -> list[str]:
        """Spills, stack, local memory and advisories, each as a readable sentence."""
        out = []
        if self.spill_store_bytes or self.spill_load_bytes:
            out.append(
                f"{self.name}: spills {self.spill_store_bytes} B stores / "
                f"{self.spill_load_bytes} B loads"
            )
        if self.stack_frame_bytes:
            out.append(f"{self.name}: {self.stack_frame_bytes} B stack frame")
        if self.local_bytes:
            out.append(f"{self.name}: {self.local_bytes} B local memory")
        out.extend(f"{self.name}: {w}" for w in self.warnings)
        return out


@record(frozen=True)
class PtxasResult:
    kernels: dict[str, KernelResources]
    # Advisories ptxas printed without naming a function (it prints C7508 that way).
    module_warnings: tuple[str, ...]
    cubin: bytes = field(repr=False)
    log: str = field(repr=False)

    def kernel(self, name: str) -> KernelResources:
        if name not in self.kernels:
            raise KeyError(f"ptxas reported no kernel {name!r}; it reported {sorted(self.kernels)}")
        return self.kernels[name]

    def problems(self) -> list[str]:
        out = [f"module: {w}" for w in self.module_warnings]
        for name in sorted(self.kernels):
            out.extend(self.kernels[name].problems())
        return out


def ptxas_available() -> bool:
    """Whether the configured ptxas binary can be found."""
    return shutil.which(knobs.ptxas_path()) is not None


def _source_context(ptx: str, log: str) -> str:
    lines = ptx.splitlines()
    shown = []
    for match in _ERROR_LINE.finditer(log):
        number = int(match.group(1))
        if 1 <= number <= len(lines):
            shown.append(f"  {number}: {lines[number - 1].strip()}")
    return "\n".join(dict.fromkeys(shown))


def parse_log(log: str) -> tuple[dict[str, KernelResources], tuple[str, ...]]:
    """Split ptxas -v output into per-kernel resources and unattributed advisories."""
    fields: dict[str, dict[str, int]] = {}
    warnings: dict[str, list[str]] = {}
    loose: list[str] = []
    current: str | None = None
    for raw in log.splitlines():
        line = raw.strip()
        if match := _COMPILING.search(line):
            current = match.group(1)
            fields.setdefault(current, {})
            continue
        if match := _PROPERTIES.search(line):
            current = match.group(1)
            fields.setdefault(current, {})
            continue
        if _ADVISORY.search(line):
            text = re.sub(r"^ptxas (info|warning)\s*:\s*|^ptxas \S+, ", "", line)
            named = _FUNCTION_NAMED.search(line)
            if named:
                warnings.setdefault(named.group(1), []).append(text)
            else:
                loose.append(text)
            continue
        if current is None:
            continue
        entry = fields[current]
        if match := _FRAME.search(line):
            entry["stack_frame_bytes"] = int(match.group(1))
            entry["spill_store_bytes"] = int(match.group(2))
            entry["spill_load_bytes"] = int(match.group(3))
        if match := _USED.search(line):
            entry["registers"] = int(match.group(1))
        if match := _BARRIERS.search(line):
            entry["barriers"] = int(match.group(1))
        if match := _SMEM.search(line):
            entry["smem_bytes"] = int(match.group(1))
        if match := _LMEM.search(line):
            entry["local_bytes"] = int(match.group(1))
    kernels = {
        name: KernelResources(name=name, warnings=tuple(warnings.get(name, ())), **values)
        for name, values in fields.items()
    }
    for name in warnings:
        if name not in kernels:
            loose.extend(warnings[name])
    return kernels, tuple(loose)


def spilled_bytes(kernels: Mapping[str, KernelResources]) -> int:
    """Local memory a module's kernels use: spills both ways, stack frames, local arrays."""
    return sum(
        k.spill_store_bytes + k.spill_load_bytes + k.stack_frame_bytes + k.local_bytes
        for k in kernels.values()
    )


_MAXNTID = re.compile(r"^(\.maxntid [^\n]*)$", re.MULTILINE)


def full_register_budget(ptx: str) -> str | None:
    """``ptx`` with ``.minnctapersm 1`` after each ``.maxntid``: ptxas may then use the
    registers of one block per SM. None where that changes nothing (no ``.maxntid``) or
    the module sets its budget itself (``.minnctapersm`` or ``.maxnreg``)."""
    if ".minnctapersm" in ptx or ".maxnreg" in ptx:
        return None
    variant, count = _MAXNTID.subn(r"\1\n.minnctapersm 1", ptx)
    return variant if count else None


# The optimization level of the last rebuild of a spilling kernel: ptxas's scheduler at -O3
# hoists the loads of a fully unrolled row ahead of their use; at -O1 it keeps them where they
# are. A 1024-thread row streaming three 13-element register arrays spilled at 32 registers
# (-O3) and at 64 (one block's budget), and assembled at 32 without spills at -O1 (the CPU
# fuzzer, seed 229).
REBUILD_OPTIMIZATION_LEVEL = 1


def rebuilds(ptx: str) -> list[tuple[str, int | None]]:
    """The builds to try, in order, after the default build of ``ptx`` spills: the module with
    :func:`full_register_budget`, then the module as it is at
    ``REBUILD_OPTIMIZATION_LEVEL``; each as ``(text, optimization level or None for the
    default)``. The build that spills least is kept, the earliest on a tie, and one that spills
    nothing ends the search: a clean build at full optimization always wins."""
    builds: list[tuple[str, int | None]] = []
    variant = full_register_budget(ptx)
    if variant is not None:
        builds.append((variant, None))
    builds.append((ptx, REBUILD_OPTIMIZATION_LEVEL))
    return builds


def assemble_least_spilling(
    ptx: str, *, arch: str = DEFAULT_ARCH, options: Sequence[str] = ()
) -> PtxasResult:
    """:func:`assemble`, and where the kernel spills, the :func:`rebuilds` too, as the GPU's
    JIT path does; the result that spills least (the first on a tie)."""
    best = assemble(ptx, arch=arch, options=options)
    least = spilled_bytes(best.kernels)
    for text, level in rebuilds(ptx) if least else ():
        extra = () if level is None else (f"-O{level}",)
        other = assemble(text, arch=arch, options=(*options, *extra))
        if spilled_bytes(other.kernels) < least:
            best, least = other, spilled_bytes(other.kernels)
        if not least:
            break
    return best


def assemble(ptx: str, *, arch: str = DEFAULT_ARCH, options: Sequence[str] = ()) -> PtxasResult:
    """Run ``ptxas -arch=<arch> -v`` on ``ptx``; raise :class:`PtxasError` if it fails."""
    binary = knobs.ptxas_path()
    if shutil.which(binary) is None:
        raise PtxasError(
            f"ptxas not found (PYFUSE_PTXAS={binary!r}); install the CUDA toolkit or "
            "point PYFUSE_PTXAS at a ptxas binary"
        )
    with tempfile.TemporaryDirectory(prefix="pyfuse-ptxas-") as tmp:
        src = Path(tmp) / "kernel.ptx"
        out = Path(tmp) / "kernel.cubin"
        src.write_text(ptx)
        cmd = [
            binary,
            f"-arch={arch}",
            "-v",
            "--warn-on-spills",
            "--warn-on-local-memory-usage",
            *options,
            "-o",
            str(out),
            str(src),
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PtxasError(f"could not run {binary}: {exc}") from exc
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            context = _source_context(ptx, log)
            where = f"\noffending PTX:\n{context}" if context else ""
            raise PtxasError(
                f"ptxas -arch={arch} failed (exit {proc.returncode}):\n{log.strip()}{where}"
            )
        cubin = out.read_bytes()
    kernels, loose = parse_log(log)
    return PtxasResult(kernels=kernels, module_warnings=loose, cubin=cubin, log=log)
