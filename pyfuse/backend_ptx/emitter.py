"""PTX module and kernel skeletons: header, params, directives, registers, body.

The lowering builds each kernel with a :class:`KernelBuilder`: it declares
params, asks for typed virtual registers, and appends the :class:`Instr` values
that the ``instructions`` modules return. The builder never writes instruction
text itself; it only writes the parts of a module that are not instructions
(header, ``.param`` list, performance directives, ``.reg`` declarations).

Rendering is deterministic: params keep declaration order, registers are
numbered in allocation order, and register classes are declared in a fixed
order, so the same kernel IR always gives byte-identical PTX (the golden-output
corpus and the on-disk cache key both depend on that).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pyfuse.backend_ptx.abi import TENSOR_MAP_ALIGN, TENSOR_MAP_BYTES, ParamKind
from pyfuse.backend_ptx.operands import (
    REG_PREFIX,
    Comment,
    Instr,
    Label,
    Line,
    PtxVersion,
    Reg,
    RegClass,
    Symbol,
)
from pyfuse.ir.hopper import SM90
from pyfuse.ir.records import record

# The highest PTX ISA version that CUDA 13.0's ptxas and the R580 (13.0) driver JIT
# accept (9.1 fails with "Unsupported .version 9.1"). Every feature pyfuse emits
# needs at most 8.6 (TMA with a .shared::cta destination); instructions record their
# own minimum and PtxModule.render checks it against the header.
PTX_VERSION: PtxVersion = (9, 0)
DEFAULT_TARGET = "sm_90a"

# Name of the module-scope dynamic shared memory array. Reserved: no param may use it.
DYNAMIC_SMEM = "smem"

# PTX identifiers: a letter then [A-Za-z0-9_$]*, or one of _$% then at least one more.
_IDENT = re.compile(r"^(?:[A-Za-z][A-Za-z0-9_$]*|[_$%][A-Za-z0-9_$]+)$")


def check_identifier(name: str, what: str) -> str:
    if not isinstance(name, str) or not _IDENT.match(name):
        raise ValueError(f"{what} must be a PTX identifier ([A-Za-z][A-Za-z0-9_$]*), got {name!r}")
    return name


# PTX type of each scalar param kind, for its declaration and its ld.param.
PARAM_PTX_TYPE: dict[ParamKind, str] = {
    ParamKind.PTR: "u64",
    ParamKind.U32: "u32",
    ParamKind.S32: "s32",
    ParamKind.U64: "u64",
    ParamKind.S64: "s64",
    ParamKind.F32: "f32",
}


@record(frozen=True)
class Param:
    """A declared kernel parameter."""

    name: str
    kind: ParamKind

    @property
    def symbol(self) -> Symbol:
        return Symbol(self.name)

    @property
    def ptx_type(self) -> str:
        """The ``ld.param`` type of a scalar param (tensor maps are never loaded)."""
        if self.kind is ParamKind.TENSOR_MAP:
            raise ValueError(
                f"param {self.name} is a tensor map: take its address with "
                "memory.mov_address + memory.cvta_param, never ld.param it"
            )
        return PARAM_PTX_TYPE[self.kind]

    def declaration(self) -> str:
        if self.kind is ParamKind.TENSOR_MAP:
            return f".param .align {TENSOR_MAP_ALIGN} .b8 {self.name}[{TENSOR_MAP_BYTES}]"
        return f".param .{PARAM_PTX_TYPE[self.kind]} {self.name}"


def _check_dims(dims: tuple[int, ...] | None, what: str, limit: int) -> None:
    if dims is None:
        return
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"{what} takes 1 to 3 extents, got {dims!r}")
    for extent in dims:
        if not isinstance(extent, int) or isinstance(extent, bool) or not 1 <= extent <= limit:
            raise ValueError(f"{what} extents must be integers in [1, {limit}], got {dims!r}")


@record(frozen=True)
class Directives:
    """Performance-tuning and cluster directives placed between params and body.

    Rules checked here come from PTX ISA section 11.4 and the notes: ``.reqntid``
    excludes ``.maxntid``; ``.minnctapersm`` means nothing without one of them;
    ``setmaxnreg`` needs a register cap at entry, so a kernel that uses it should
    set ``maxnreg`` or ``maxntid`` + ``minnctapersm`` (checked by ptxas as C7508).
    """

    maxntid: tuple[int, ...] | None = None
    reqntid: tuple[int, ...] | None = None
    minnctapersm: int | None = None
    maxnreg: int | None = None
    reqnctapercluster: tuple[int, ...] | None = None
    explicitcluster: bool = False
    maxclusterrank: int | None = None

    def __post_init__(self) -> None:
        threads = SM90.max_threads_per_block
        _check_dims(self.maxntid, ".maxntid", threads)
        _check_dims(self.reqntid, ".reqntid", threads)
        _check_dims(self.reqnctapercluster, ".reqnctapercluster", SM90.max_cluster_ctas)
        for dims, what in ((self.maxntid, ".maxntid"), (self.reqntid, ".reqntid")):
            if dims is not None and _product(dims) > threads:
                raise ValueError(f"{what} allows at most {threads} threads per CTA, got {dims!r}")
        if self.maxntid is not None and self.reqntid is not None:
            raise ValueError(".reqntid cannot be combined with .maxntid; give one of them")
        if self.minnctapersm is not None:
            if self.maxntid is None and self.reqntid is None:
                raise ValueError(".minnctapersm needs .maxntid or .reqntid (ptxas ignores it)")
            _check_positive(self.minnctapersm, ".minnctapersm", 64)
        if self.maxnreg is not None:
            _check_positive(self.maxnreg, ".maxnreg", 255)
        if self.maxclusterrank is not None:
            _check_positive(self.maxclusterrank, ".maxclusterrank", 16)
        if self.reqnctapercluster is not None and self.maxclusterrank is not None:
            raise ValueError(".reqnctapercluster and .maxclusterrank cannot both be given")

    def lines(self) -> list[str]:
        out: list[str] = []
        if self.maxntid is not None:
            out.append(".maxntid " + _dims3(self.maxntid))
        if self.reqntid is not None:
            out.append(".reqntid " + _dims3(self.reqntid))
        if self.minnctapersm is not None:
            out.append(f".minnctapersm {self.minnctapersm}")
        if self.maxnreg is not None:
            out.append(f".maxnreg {self.maxnreg}")
        if self.explicitcluster:
            out.append(".explicitcluster")
        if self.reqnctapercluster is not None:
            out.append(".reqnctapercluster " + _dims3(self.reqnctapercluster))
        if self.maxclusterrank is not None:
            out.append(f".maxclusterrank {self.maxclusterrank}")
        return out


def _product(dims: tuple[int, ...]) -> int:
    total = 1
    for extent in dims:
        total *= extent
    return total


def _check_positive(value: int, what: str, limit: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= limit:
        raise ValueError(f"{what} must be an integer in [1, {limit}], got {value!r}")


def _dims3(dims: tuple[int, ...]) -> str:
    padded = tuple(dims) + (1,) * (3 - len(dims))
    return ", ".join(str(d) for d in padded)


# Declaration order of register classes in the rendered kernel (fixed for determinism).
_REG_ORDER: tuple[RegClass, ...] = (
    RegClass.PRED,
    RegClass.B16,
    RegClass.B32,
    RegClass.B64,
    RegClass.F32,
    RegClass.F64,
)


class KernelBuilder:
    """One ``.entry``: its params, directives, registers and body lines."""

    def __init__(self, name: str, directives: Directives | None = None) -> None:
        self.name = check_identifier(name, "kernel name")
        self.directives = directives if directives is not None else Directives()
        self._params: list[Param] = []
        self._reg_counts: dict[RegClass, int] = {cls: 0 for cls in _REG_ORDER}
        self._label_count = 0
        self._lines: list[Line] = []
        self._uses_dynamic_smem = False

    # ---- parameters -------------------------------------------------------------------------

    def param(self, name: str, kind: ParamKind) -> Param:
        """Declare the next kernel parameter; launch arguments follow this order."""
        check_identifier(name, "param name")
        if name == DYNAMIC_SMEM:
            raise ValueError(f"param name {name!r} is reserved for dynamic shared memory")
        if any(p.name == name for p in self._params):
            raise ValueError(f"kernel {self.name} already has a param named {name!r}")
        if not isinstance(kind, ParamKind):
            raise ValueError(f"param kind must be a ParamKind, got {kind!r}")
        param = Param(name, kind)
        self._params.append(param)
        return param

    @property
    def params(self) -> tuple[Param, ...]:
        return tuple(self._params)

    # ---- registers, labels, shared memory ---------------------------------------------------

    def reg(self, cls: RegClass) -> Reg:
        if not isinstance(cls, RegClass):
            raise ValueError(f"register class must be a RegClass, got {cls!r}")
        index = self._reg_counts[cls]
        self._reg_counts[cls] = index + 1
        return Reg(cls, index)

    def regs(self, cls: RegClass, count: int) -> tuple[Reg, ...]:
        if not isinstance(count, int) or count < 0:
            raise ValueError(f"register count must be a non-negative integer, got {count!r}")
        return tuple(self.reg(cls) for _ in range(count))

    def new_label(self, hint: str = "L") -> Label:
        """A label unique in this kernel; place it with :meth:`place`."""
        check_identifier(hint, "label hint")
        label = Label(f"$L__{hint}_{self._label_count}")
        self._label_count += 1
        return label

    def dynamic_smem(self) -> Symbol:
        """The module's ``extern .shared`` array; its address is the CTA's smem base."""
        self._uses_dynamic_smem = True
        return Symbol(DYNAMIC_SMEM)

    @property
    def uses_dynamic_smem(self) -> bool:
        return self._uses_dynamic_smem

    # ---- body -------------------------------------------------------------------------------

    def emit(self, *items: Line | Iterable[Line]) -> None:
        """Append instructions, labels or comments (or sequences of them) in order."""
        for item in items:
            if isinstance(item, (Instr, Label, Comment)):
                self._lines.append(item)
            elif isinstance(item, (str, bytes)):
                raise ValueError(
                    f"emit takes Instr values from the instruction modules, not text: {item!r}"
                )
            else:
                for line in item:
                    self.emit(line)

    def place(self, label: Label) -> None:
        self._lines.append(label)

    def comment(self, text: str) -> None:
        if "\n" in text:
            raise ValueError("a comment must be a single line")
        self._lines.append(Comment(text))

    @property
    def lines(self) -> tuple[Line, ...]:
        return tuple(self._lines)

    def instructions(self) -> list[Instr]:
        return [line for line in self._lines if isinstance(line, Instr)]

    # ---- rendering --------------------------------------------------------------------------

    def render(self) -> str:
        out: list[str] = [f".visible .entry {self.name}("]
        decls = [p.declaration() for p in self._params]
        for i, decl in enumerate(decls):
            sep = "," if i + 1 < len(decls) else ""
            out.append(f"    {decl}{sep}")
        out.append(")")
        out.extend(self.directives.lines())
        out.append("{")
        for cls in _REG_ORDER:
            count = self._reg_counts[cls]
            if count:
                out.append(f"    .reg .{cls.value} {REG_PREFIX[cls]}<{count}>;")
        out.append("")
        for line in self._lines:
            if isinstance(line, Label):
                out.append(line.render())
            else:
                out.append("    " + line.render())
        out.append("}")
        return "\n".join(out) + "\n"


class PtxModule:
    """A PTX translation unit: header, optional dynamic smem, one or more kernels."""

    def __init__(
        self,
        *,
        target: str = DEFAULT_TARGET,
        version: PtxVersion = PTX_VERSION,
        address_size: int = 64,
    ) -> None:
        if not re.match(r"^sm_\d+a?$", target):
            raise ValueError(f"target must look like 'sm_90a', got {target!r}")
        if (
            not isinstance(version, tuple)
            or len(version) != 2
            or not all(isinstance(v, int) for v in version)
        ):
            raise ValueError(f"version must be a (major, minor) tuple, got {version!r}")
        if version > PTX_VERSION:
            raise ValueError(
                f"PTX .version {version[0]}.{version[1]} is newer than the {PTX_VERSION[0]}."
                f"{PTX_VERSION[1]} that CUDA 13.0 ptxas and the R580 driver accept"
            )
        if address_size != 64:
            raise ValueError(f"only .address_size 64 is supported, got {address_size}")
        self.target = target
        self.version = version
        self.address_size = address_size
        self._kernels: list[KernelBuilder] = []

    def kernel(self, name: str, directives: Directives | None = None) -> KernelBuilder:
        """Create a kernel in this module (rendered in creation order)."""
        builder = KernelBuilder(name, directives)
        self.add(builder)
        return builder

    def add(self, builder: KernelBuilder) -> None:
        if any(k.name == builder.name for k in self._kernels):
            raise ValueError(f"module already has a kernel named {builder.name!r}")
        self._kernels.append(builder)

    @property
    def kernels(self) -> tuple[KernelBuilder, ...]:
        return tuple(self._kernels)

    def _check_requirements(self) -> None:
        for kernel in self._kernels:
            for instr in kernel.instructions():
                if instr.min_version > self.version:
                    need = f"{instr.min_version[0]}.{instr.min_version[1]}"
                    have = f"{self.version[0]}.{self.version[1]}"
                    raise ValueError(
                        f"kernel {kernel.name}: '{instr.text}' needs PTX .version {need} "
                        f"or later, module is {have}"
                    )
                if instr.needs_arch_specific and not self.target.endswith("a"):
                    raise ValueError(
                        f"kernel {kernel.name}: '{instr.text}' needs an arch-specific "
                        f"target such as sm_90a, module targets {self.target}"
                    )

    def render(self) -> str:
        if not self._kernels:
            raise ValueError("a PTX module needs at least one kernel")
        self._check_requirements()
        out = [
            f".version {self.version[0]}.{self.version[1]}",
            f".target {self.target}",
            f".address_size {self.address_size}",
            "",
        ]
        if any(k.uses_dynamic_smem for k in self._kernels):
            # 1024-B alignment is what 128B-swizzled TMA tiles and wgmma descriptors with
            # base_offset 0 need; observed base 0x400 on the H200 without static smem.
            alignment = SM90.max_swizzle_pattern_bytes
            out.append(f".extern .shared .align {alignment} .b8 {DYNAMIC_SMEM}[];")
            out.append("")
        for kernel in self._kernels:
            out.append(kernel.render())
        return "\n".join(out)
