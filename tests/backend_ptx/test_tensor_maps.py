"""A matmul kernel's tensor maps as launch data (``Kernel.matmul_launch``): planned at compile
time, they round-trip through JSON and give the driver exactly the arguments the kernel IR
gives it, for plain, narrow, batched, split-K, epilogue and persistent cluster matmuls; a
launch record that does not add up is refused. All on the CPU (a fake driver records the
``cuTensorMapEncodeTiled`` calls)."""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from check_utils import run_fresh_process

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ptx_fake_driver import FakeDriver

import pyfuse as pf
from pyfuse.backend_ptx import driver, matmul_host, tensor_maps
from pyfuse.backend_ptx.tma import TMA_DTYPES, TensorMapPlan

S = pf.spec
bf16 = pf.bfloat16

# name -> (function, specs, MatmulParams or None)
MATMULS: dict[str, tuple[Callable[..., Any], list[pf.Spec], pf.MatmulParams | None]] = {
    "plain": (lambda a, b: a @ b, [S((256, 128), bf16), S((128, 192), bf16)], None),
    "narrow_n": (lambda a, b: a @ b, [S((256, 128), bf16), S((128, 16), bf16)], None),
    "f16_transposed_a": (
        lambda a, b: a.T @ b,
        [S((128, 256), pf.float16), S((128, 96), pf.float16)],
        None,
    ),
    "linear_bias_gelu": (
        lambda x, w, b: pf.gelu(pf.linear(x, w, b), approximate="tanh"),
        [S((256, 512), bf16), S((1024, 512), bf16), S((1024,), bf16)],
        None,
    ),
    "split_k": (lambda a, b: a @ b, [S((512, 16384), bf16), S((16384, 512), bf16)], None),
    "batched": (lambda a, b: a @ b, [S((4, 128, 256), bf16), S((4, 256, 192), bf16)], None),
    "persistent_cluster": (
        lambda a, b: a @ b,
        [S((1024, 512), bf16), S((512, 1024), bf16)],
        pf.MatmulParams(persistent=True, cluster_m=2),
    ),
}


@pytest.fixture(scope="module")
def compiled() -> dict[str, pf.Compiled]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            name: pf.fuse(fn, name=name, matmul=params).compile(*specs)
            for name, (fn, specs, params) in MATMULS.items()
        }


@pytest.fixture
def fake() -> Iterator[FakeDriver]:
    fake_driver = FakeDriver()
    # The fake's enums stop short of f16, the 32/64-byte swizzles and the 256-byte L2
    # promotion: take the values as they come (the calls record them).
    fake_driver.CUtensorMapDataType = int  # type: ignore[misc,assignment]
    fake_driver.CUtensorMapSwizzle = int  # type: ignore[misc,assignment]
    fake_driver.CUtensorMapL2promotion = int  # type: ignore[misc,assignment]
    with driver.use_driver(fake_driver):
        yield fake_driver


def _matmul_kernels(compiled: pf.Compiled) -> list[pf.Kernel]:
    kernels = [kernel for kernel in compiled.kernels if kernel.scheduler == "matmul"]
    assert kernels and all(kernel.params.get("fallback") is None for kernel in kernels)
    return kernels


def _pointers(kernel: pf.Kernel) -> list[int]:
    return [0x7000_0000 + 0x10_0000 * index for index in range(len(kernel.arguments))]


def _from_plan(plan: TensorMapPlan, address: int) -> dict[str, Any]:
    """The encoder's arguments written out from the IR-derived plan, field by field."""
    return {
        "dtype_code": TMA_DTYPES[plan.dtype].code,
        "global_address": address,
        "global_dims": plan.global_dims,
        "global_strides": plan.global_strides,
        "box_dims": plan.box_dims,
        "element_strides": plan.element_strides,
        "interleave": int(plan.interleave),
        "swizzle": plan.swizzle.tma_code,
        "l2_promotion": int(plan.l2_promotion),
        "oob_fill": int(plan.oob_fill),
    }


def _stored(launch: tensor_maps.MatmulLaunch) -> tensor_maps.MatmulLaunch:
    """``launch`` as the variant cache writes it and reads it back."""
    return tensor_maps.from_json(json.loads(json.dumps(tensor_maps.to_json(launch))))


@pytest.mark.parametrize("name", sorted(MATMULS))
def test_the_stored_launch_encodes_what_the_kernel_ir_encodes(
    compiled: dict[str, pf.Compiled], name: str
) -> None:
    for kernel in _matmul_kernels(compiled[name]):
        assert kernel.matmul_launch is not None
        stored = _stored(kernel.matmul_launch)
        assert stored == kernel.matmul_launch

        kernel_ir = kernel.kernel_ir
        loop = matmul_host.find_main_loop(kernel_ir)
        plans = matmul_host.tensor_map_plans(kernel_ir)
        pointers = _pointers(kernel)
        named = zip(kernel_ir.params, pointers, strict=True)
        by_name = {param.buffer_name: pointer for param, pointer in named}
        want = [
            _from_plan(plan, by_name[buffer])
            for plan, buffer in zip(plans, matmul_host.mapped_buffers(loop), strict=True)
        ]
        got = [
            tensor_maps.encode_arguments(tiled, pointers[position])
            for tiled, position in zip(stored.maps, stored.pointer_arguments, strict=True)
        ]
        assert got == want
        assert (stored.persistent, stored.cluster_ctas) == (loop.persistent, kernel_ir.cluster[0])


def test_the_cases_cover_what_the_launch_data_distinguishes(
    compiled: dict[str, pf.Compiled],
) -> None:
    launches = {
        name: kernel.matmul_launch
        for name, c in compiled.items()
        for kernel in _matmul_kernels(c)
        if kernel.matmul_launch is not None
    }
    maps = [m for launch in launches.values() for m in launch.maps]
    assert {m.swizzle for m in maps} == {0, 1, 2, 3}  # none (the bias), 32, 64 and 128 bytes
    # Operands and stores by their types; the bias vector as raw 16-bit words.
    codes = {TMA_DTYPES[name].code for name in ("bf16", "f16", "u16")}
    assert {m.dtype_code for m in maps} == codes
    assert {len(m.global_dims) for m in maps} >= {2, 3}  # rows (the bias: one); batch, split-K
    assert len(_matmul_kernels(compiled["split_k"])) < len(compiled["split_k"].kernels)
    cluster = launches["persistent_cluster"]
    assert cluster.persistent and cluster.cluster_ctas == 2
    # Maps for the operands, the TMA-stored output, then the bias loaded per tile (one row of
    # a 16-byte pitch, its box the tile's 128 columns).
    gelu = launches["linear_bias_gelu"]
    assert gelu.pointer_arguments == (0, 1, 3, 2)
    assert len(gelu.maps) == 4
    assert (gelu.maps[3].global_dims, gelu.maps[3].box_dims) == ((1024, 1), (128, 1))
    assert gelu.maps[3].global_strides == (2048,)
    assert len(compiled["linear_bias_gelu"].kernels[0].arguments) == 4


@pytest.mark.parametrize("name", ["plain", "f16_transposed_a", "split_k", "batched"])
def test_the_driver_gets_the_same_calls_from_either_path(
    compiled: dict[str, pf.Compiled], fake: FakeDriver, name: str
) -> None:
    for kernel in _matmul_kernels(compiled[name]):
        assert kernel.matmul_launch is not None
        pointers = _pointers(kernel)
        from_ir = matmul_host.encode_tensor_maps(kernel.kernel_ir, pointers)
        ir_calls = _encodes(fake)
        assert len(ir_calls) == len(kernel.matmul_launch.maps) > 0
        encode = tensor_maps.encoder(_stored(kernel.matmul_launch))
        from_record = encode(pointers)
        assert _encodes(fake) == ir_calls and len(from_record) == len(from_ir)
        assert encode(pointers) is from_record  # the same addresses encode nothing again
        assert _encodes(fake) == []


def _encodes(fake: FakeDriver) -> list[tuple[Any, ...]]:
    """The ``cuTensorMapEncodeTiled`` calls since the last look (the record is cleared)."""
    calls = [call for call in fake.calls if call[0] == "cuTensorMapEncodeTiled"]
    fake.calls.clear()
    return calls


def _json(compiled: dict[str, pf.Compiled]) -> dict[str, Any]:
    launch = compiled["plain"].kernels[0].matmul_launch
    assert launch is not None
    return json.loads(json.dumps(tensor_maps.to_json(launch)))  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    "damage",
    [
        lambda r: r.pop("persistent"),
        lambda r: r.update(persistent=1),
        lambda r: r.update(cluster_ctas=0),
        lambda r: r.update(pointer_arguments=[0]),
        lambda r: r.update(pointer_arguments=[0, -1]),
        lambda r: r.update(pointer_arguments=[0, True]),
        lambda r: r.update(maps={}),
        lambda r: r["maps"][0].update(swizzle="B128"),
        lambda r: r["maps"][0].update(dtype_code=9.0),
        lambda r: r["maps"][0].update(global_strides=[]),
        lambda r: r["maps"][0].update(box_dims=[64, 0]),
        lambda r: r["maps"][0].update(global_dims=[1] * 6),
        lambda r: r["maps"][0].update(extra=1),
    ],
)
def test_launch_data_that_does_not_add_up_is_refused(
    compiled: dict[str, pf.Compiled], damage: Callable[[dict[str, Any]], None]
) -> None:
    value = _json(compiled)
    tensor_maps.from_json(value)  # whole, it reads back
    damage(value)
    with pytest.raises(ValueError):
        tensor_maps.from_json(value)


def test_the_base_address_is_checked() -> None:
    tiled = TensorMapPlan("bf16", (64, 64), (128,), (64, 64)).tiled_map()
    assert tensor_maps.encode_arguments(tiled, 0x10010)["global_address"] == 0x10010
    with pytest.raises(ValueError, match="16-byte aligned"):
        tensor_maps.encode_arguments(tiled, 0x10008)
    with pytest.raises(ValueError, match="device address"):
        tensor_maps.encode_arguments(tiled, 0)
    interleaved = tensor_maps.TiledMap(9, (64, 4, 4), (128, 512), (64, 4, 4), (1, 1, 1), 2, 1, 0, 0)
    with pytest.raises(ValueError, match="32-byte aligned"):
        tensor_maps.encode_arguments(interleaved, 0x10010)


def test_the_launch_module_loads_nothing_of_the_compiler(tmp_path: Path) -> None:
    """What a restored matmul launch imports: the launch data and the driver layer only."""
    script = (
        "import json, sys, pyfuse.backend_ptx.tensor_maps\n"
        "print(json.dumps({'modules': sorted(m for m in sys.modules if 'pyfuse.' in m)}))\n"
    )
    loaded = run_fresh_process(script, tmp_path)["modules"]
    assert not [m for m in loaded if m.startswith(("pyfuse.passes", "pyfuse.backend_ptx.emit"))]
    assert "pyfuse.ir.kernel_ir" not in loaded and "pyfuse.backend_ptx.smem_desc" not in loaded
