"""A TMA kernel's tensor maps as launch data: what ``cuTensorMapEncodeTiled`` takes, planned
at compile time and read at launch without the kernel IR.

A matmul kernel takes one CUDA tensor map per TMA operand by value after its pointers. All
of a map but its base address follows from the compiled shapes, so the compile plans it once
(:func:`pyfuse.backend_ptx.matmul_host.matmul_launch`, from the kernel IR), the
:class:`~pyfuse.runtime.compiled.Kernel` record keeps it, and the variant cache stores it
as JSON: a variant restored from disk then launches its matmul kernels with neither the
compiler nor the kernel IR loaded.

Expects nothing at import beyond :mod:`pyfuse.ir.records` and :mod:`pyfuse.ir.hopper` (this
module is on the restored launch path); the driver loads with the first encode.

Guarantees:

- :class:`TiledMap`: one map minus its base address, as the encoder's arguments (CUDA enum
  values, dims and byte strides innermost first); the ranks and kinds of its fields are
  checked on construction, the ranges the driver enforces by
  :class:`pyfuse.backend_ptx.tma.TensorMapPlan`, which plans it;
- :class:`MatmulLaunch`: a kernel's maps in the order of its tensor-map parameters, which
  pointer argument is each one's base, and the facts the launch grid depends on;
- :func:`to_json` / :func:`from_json`: a form of plain JSON values that comes back equal; a
  value that does not fit raises ValueError (a damaged record is the caller's miss);
- :func:`encode_arguments`: the keyword arguments of ``driver.encode_tensor_map_tiled``
  for one map at one address, pure (tests compare them without a driver);
- :func:`encoder`: for launches, pointer arguments to encoded maps, cached by the operands'
  addresses (a launch with the same tensors encodes nothing).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from pyfuse.ir.hopper import SM90
from pyfuse.ir.records import record

# Encoded map sets kept per launch (one per distinct tuple of operand addresses).
TENSOR_MAP_CACHE_SIZE = 256
INTERLEAVE_32B = 2  # CU_TENSOR_MAP_INTERLEAVE_32B: the base must then be 32-byte aligned
_TUPLE_FIELDS = ("global_dims", "global_strides", "box_dims", "element_strides")
_INT_FIELDS = ("dtype_code", "interleave", "swizzle", "l2_promotion", "oob_fill")
_LAUNCH_FIELDS = {"maps", "pointer_arguments", "persistent", "cluster_ctas", "zeroed"}


def _is_count(value: object) -> bool:
    return type(value) is int and value >= 0


@record(frozen=True)
class TiledMap:
    """One tiled tensor map minus its base address: ``cuTensorMapEncodeTiled``'s arguments.

    ``dtype_code``, ``interleave``, ``swizzle``, ``l2_promotion`` and ``oob_fill`` are the
    CUDA enums' values; dims, box and element strides are innermost first, the byte strides
    for dims 1..rank-1."""

    dtype_code: int
    global_dims: tuple[int, ...]
    global_strides: tuple[int, ...]
    box_dims: tuple[int, ...]
    element_strides: tuple[int, ...]
    interleave: int
    swizzle: int
    l2_promotion: int
    oob_fill: int

    def __post_init__(self) -> None:
        rank = len(self.global_dims)
        if not 1 <= rank <= SM90.tma_max_rank:
            raise ValueError(f"a tensor map has rank 1..{SM90.tma_max_rank}, got {rank}")
        lengths = (rank, rank - 1, rank, rank)
        for name, length in zip(_TUPLE_FIELDS, lengths, strict=True):
            values = getattr(self, name)
            if type(values) is not tuple or len(values) != length:
                raise ValueError(f"{name} of a rank-{rank} map must be {length} ints: {values!r}")
            if not all(_is_count(v) and v > 0 for v in values):
                raise ValueError(f"{name} must be positive ints: {values!r}")
        for name in _INT_FIELDS:
            if not _is_count(getattr(self, name)):
                raise ValueError(f"{name} must be a CUDA enum value: {getattr(self, name)!r}")

    @property
    def address_alignment(self) -> int:
        return 32 if self.interleave == INTERLEAVE_32B else SM90.tma_alignment


@record(frozen=True)
class MatmulLaunch:
    """What launching a TMA kernel needs beyond its pointers and launch shape.

    ``maps[i]`` is the kernel's tensor-map parameter ``i``; its base address is the kernel's
    pointer argument ``pointer_arguments[i]`` (a position in ``Kernel.arguments``). A
    ``persistent`` kernel whose clusters have ``cluster_ctas > 1`` CTAs may launch fewer
    clusters than its grid has, as many as the device holds at once (its tile loop strides by
    the launched count). ``zeroed`` is ``(argument position, bytes)`` of a workspace whose
    first bytes every launch zeroes first (stream-K's flags), or None."""

    maps: tuple[TiledMap, ...]
    pointer_arguments: tuple[int, ...]
    persistent: bool
    cluster_ctas: int
    zeroed: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if type(self.maps) is not tuple or not all(type(m) is TiledMap for m in self.maps):
            raise ValueError(f"maps must be a tuple of TiledMaps: {self.maps!r}")
        pointers = self.pointer_arguments
        if type(pointers) is not tuple or not all(_is_count(p) for p in pointers):
            raise ValueError(f"pointer arguments must be argument positions: {pointers!r}")
        if len(pointers) != len(self.maps):
            raise ValueError(f"{len(self.maps)} maps but {len(pointers)} pointer arguments")
        if type(self.persistent) is not bool:
            raise ValueError(f"persistent must be a bool: {self.persistent!r}")
        if not (_is_count(self.cluster_ctas) and self.cluster_ctas >= 1):
            raise ValueError(f"cluster CTAs must be a positive int: {self.cluster_ctas!r}")
        zeroed = self.zeroed
        if zeroed is not None and (
            type(zeroed) is not tuple or len(zeroed) != 2 or not all(map(_is_count, zeroed))
        ):
            raise ValueError(f"zeroed must be (argument position, bytes): {zeroed!r}")


def to_json(launch: MatmulLaunch) -> dict[str, Any]:
    """``launch`` as JSON values (tuples as lists), which :func:`from_json` reads back."""
    return {
        "maps": [
            {
                **{name: getattr(m, name) for name in _INT_FIELDS},
                **{name: list(getattr(m, name)) for name in _TUPLE_FIELDS},
            }
            for m in launch.maps
        ],
        "pointer_arguments": list(launch.pointer_arguments),
        "persistent": launch.persistent,
        "cluster_ctas": launch.cluster_ctas,
        "zeroed": None if launch.zeroed is None else list(launch.zeroed),
    }


def from_json(value: Any) -> MatmulLaunch:
    """The launch :func:`to_json` wrote; ValueError for anything that does not fit."""
    if type(value) is not dict or set(value) != _LAUNCH_FIELDS:
        raise ValueError(f"not a matmul launch: {value!r}")
    maps = []
    for item in _list(value["maps"]):
        if type(item) is not dict or set(item) != {*_INT_FIELDS, *_TUPLE_FIELDS}:
            raise ValueError(f"not a tensor map: {item!r}")
        fields: dict[str, Any] = {name: item[name] for name in _INT_FIELDS}
        fields.update({name: tuple(_list(item[name])) for name in _TUPLE_FIELDS})
        maps.append(TiledMap(**fields))
    return MatmulLaunch(
        maps=tuple(maps),
        pointer_arguments=tuple(_list(value["pointer_arguments"])),
        persistent=value["persistent"],
        cluster_ctas=value["cluster_ctas"],
        zeroed=None if value["zeroed"] is None else tuple(_list(value["zeroed"])),
    )


def _list(value: object) -> list[Any]:
    if type(value) is not list:
        raise ValueError(f"not a list: {value!r}")
    return value


def check_address(global_address: int, alignment: int) -> int:
    """``global_address``, checked: a device address on an ``alignment``-byte boundary."""
    if not isinstance(global_address, int) or global_address <= 0:
        raise ValueError(f"tensor map base must be a device address, got {global_address!r}")
    if global_address % alignment:
        raise ValueError(
            f"tensor map base address must be {alignment}-byte aligned, got 0x{global_address:x}"
        )
    return global_address


def encode_arguments(tiled: TiledMap, global_address: int) -> dict[str, Any]:
    """The keyword arguments of ``driver.encode_tensor_map_tiled`` for ``tiled`` at
    ``global_address`` (checked: a device address, aligned as the map needs)."""
    return {
        "dtype_code": tiled.dtype_code,
        "global_address": check_address(global_address, tiled.address_alignment),
        "global_dims": tiled.global_dims,
        "global_strides": tiled.global_strides,
        "box_dims": tiled.box_dims,
        "element_strides": tiled.element_strides,
        "interleave": tiled.interleave,
        "swizzle": tiled.swizzle,
        "l2_promotion": tiled.l2_promotion,
        "oob_fill": tiled.oob_fill,
    }


def encode(tiled: TiledMap, global_address: int, description: str = "") -> object:
    """Encode ``tiled`` at ``global_address``: a CUtensorMap to pass by value to a launch.

    Raises :class:`pyfuse.errors.LaunchError` when there is no driver or the driver refuses
    the map (the message then carries ``description``, by default the map)."""
    from pyfuse.backend_ptx import driver

    arguments = encode_arguments(tiled, global_address)
    return driver.encode_tensor_map_tiled(**arguments, description=description or repr(tiled))


@record
class EncodedMaps:
    """Encoded map sets for ``maps``, by operand addresses, least recently used first."""

    maps: tuple[TiledMap, ...]
    encoded: OrderedDict[tuple[int, ...], list[Any]]

    def maps_for(self, addresses: tuple[int, ...]) -> list[Any]:
        """The maps for these operand addresses: cached, else encoded and cached (the least
        recently used entry goes beyond TENSOR_MAP_CACHE_SIZE)."""
        maps = self.encoded.get(addresses)
        if maps is None:
            maps = [encode(m, a) for m, a in zip(self.maps, addresses, strict=True)]
            self.encoded[addresses] = maps
            if len(self.encoded) > TENSOR_MAP_CACHE_SIZE:
                self.encoded.popitem(last=False)
        else:
            self.encoded.move_to_end(addresses)
        return maps


def encoder(launch: MatmulLaunch) -> Callable[[Sequence[int]], list[Any]]:
    """For launches: a function from the kernel's pointer arguments (one per
    ``Kernel.arguments`` entry, in order) to its tensor maps, in parameter order."""
    positions = launch.pointer_arguments
    cache = EncodedMaps(launch.maps, OrderedDict())

    def encode_maps(pointers: Sequence[int]) -> list[Any]:
        return cache.maps_for(tuple([int(pointers[index]) for index in positions]))

    return encode_maps
