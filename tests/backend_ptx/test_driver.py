"""The driver layer without a GPU: clean 'no CUDA driver' errors, and a fake driver for the rest."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from ptx_fake_driver import CUresult, FakeDriver, FakeTensorMap, cuuint32_t, cuuint64_t

from pyfuse.backend_ptx import driver, smem_desc
from pyfuse.backend_ptx import tma as tma_host
from pyfuse.backend_ptx.emitter import ParamKind
from pyfuse.errors import LaunchError

ALL_KINDS = [
    ParamKind.PTR,
    ParamKind.PTR,
    ParamKind.U32,
    ParamKind.S32,
    ParamKind.U64,
    ParamKind.S64,
    ParamKind.F32,
    ParamKind.TENSOR_MAP,
    ParamKind.TENSOR_MAP,
]


class DevicePointerLike:
    """Anything with __int__ (DeviceBuffer, CUdeviceptr) is a pointer argument."""

    def __int__(self) -> int:
        return 0xDEAD0000


@pytest.fixture
def fake() -> Iterator[FakeDriver]:
    fake_driver = FakeDriver()
    with driver.use_driver(fake_driver):
        yield fake_driver


def _launcher(fake: FakeDriver, kinds: list[ParamKind], **kwargs: Any) -> driver.Launcher:
    fake.expect_params = kinds
    function = driver.load_kernel(".version 9.0\n", "k")
    return driver.Launcher(function, kinds, **kwargs)


# ---- without a driver -------------------------------------------------------------------------


@pytest.mark.skipif(driver.available(), reason="a CUDA driver is present on this machine")
class TestWithoutDriver:
    def test_available_is_false(self) -> None:
        assert driver.available() is False

    def test_every_entry_point_raises_no_cuda_driver(self) -> None:
        for call in (
            lambda: driver.load_module(b".version 9.0\n", "my_kernel"),
            lambda: driver.mem_alloc(16),
            lambda: driver.device_info(),
            lambda: driver.cubin_from_ptx("x", "my_kernel"),
            lambda: driver.synchronize(),
        ):
            with pytest.raises(LaunchError, match="no CUDA driver"):
                call()

    def test_tensor_map_encode_raises_no_cuda_driver(self) -> None:
        plan = tma_host.plan_tiled(
            "bf16", (64, 64), (64, 1), (64, 64), swizzle=smem_desc.Swizzle.B128
        )
        with pytest.raises(LaunchError, match="no CUDA driver"):
            tma_host.encode(plan, 0x10000)


def test_importing_the_driver_package_does_not_load_cuda_bindings() -> None:
    code = "import sys, pyfuse.backend_ptx.driver; print('cuda.bindings' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


# ---- bootstrap failures through the hook -------------------------------------------------------


class ExplodingBindings:
    """Like cuda.bindings on a machine without libcuda: cuInit raises."""

    def cuInit(self, flags: int) -> tuple[Any, ...]:
        raise RuntimeError(
            '"cuda" is an NVIDIA driver library and can only be found via system search'
        )


def test_an_exception_at_cuinit_becomes_no_cuda_driver() -> None:
    with driver.use_driver(ExplodingBindings()):
        assert driver.available() is False
        with pytest.raises(LaunchError, match=r"no CUDA driver: RuntimeError: .*system search"):
            driver.load_module("x", "k")


def test_a_failing_cuinit_result_becomes_no_cuda_driver() -> None:
    with driver.use_driver(FakeDriver(init_result=CUresult.CUDA_ERROR_NO_DEVICE)):
        assert driver.available() is False
        with pytest.raises(
            LaunchError, match="no CUDA driver: cuInit failed with CUDA_ERROR_NO_DEVICE"
        ):
            driver.device_count()


# ---- contexts, device facts, modules -----------------------------------------------------------


def test_primary_context_is_retained_once_and_made_current(fake: FakeDriver) -> None:
    first = driver.context(0)
    second = driver.context(0)
    assert first == second
    assert fake.names().count("cuDevicePrimaryCtxRetain") == 1
    assert fake.names().count("cuCtxSetCurrent") == 1  # already current the second time
    fake.current = None  # another library switched this thread away
    driver.context(0)
    assert fake.names().count("cuCtxSetCurrent") == 2
    with pytest.raises(LaunchError, match="device 3 does not exist"):
        driver.context(3)


def test_device_info_is_read_once(fake: FakeDriver) -> None:
    info = driver.device_info()
    assert info == driver.device_info()
    assert info.sm_count == 132 and info.arch == "sm_90a"
    assert info.smem_per_block_optin == 232448
    assert info.name == "Fake H200"
    assert fake.names().count("cuDeviceGetAttribute") == 12


def test_load_module_passes_jit_logs_and_nul_terminates(fake: FakeDriver) -> None:
    module = driver.load_module(".version 9.0\n", "k")
    _, image, count, options, values, _ = fake.calls[-1]
    assert image.endswith(b"\0")
    assert count == 5
    assert values[options.index(fake.CUjit_option.CU_JIT_LOG_VERBOSE)] == 1
    assert "Used 12 registers" in module.info_log
    assert driver.load_module(b"\x7fELF...", "k") is not None
    assert not fake.calls[-1][1].endswith(b"\0")  # a cubin is passed as is


def test_bad_module_raises_launch_error_with_kernel_name_and_jit_log(fake: FakeDriver) -> None:
    with pytest.raises(LaunchError) as info:
        driver.load_module("bad ptx", "my_kernel")
    message = str(info.value)
    assert "kernel my_kernel" in message
    assert "CUDA_ERROR_INVALID_PTX" in message
    assert "line 7; error" in message


def test_cubin_from_ptx_copies_the_image_and_destroys_the_link(fake: FakeDriver) -> None:
    assert driver.cubin_from_ptx("ptx", "k") == fake.cubin
    assert fake.names()[-1] == "cuLinkDestroy"
    with pytest.raises(LaunchError, match="kernel k: linking PTX to a cubin failed"):
        driver.cubin_from_ptx("bad", "k")
    assert fake.names()[-1] == "cuLinkDestroy"


def _jit_log(spilled: int) -> bytes:
    return (
        b"ptxas info    : Function properties for k\n"
        + b"    %d bytes stack frame, %d bytes spill stores, %d bytes spill loads\n"
        % (spilled, spilled, spilled)
    )


def test_a_spilling_jit_is_rebuilt_until_a_build_spills_nothing(fake: FakeDriver) -> None:
    """The default build spills, so does the one with one block's registers; the build at
    the lower optimization level is clean and the search stops there."""
    fake.link_logs = [_jit_log(8), _jit_log(16), _jit_log(0)]
    ptx = ".visible .entry k()\n.maxntid 1024, 1, 1\n{\n    ret;\n}\n"
    driver.cubin_from_ptx(ptx, "k")
    links = [call for call in fake.calls if call[0] == "cuLinkCreate"]
    assert len(links) == 3
    level = fake.CUjit_option.CU_JIT_OPTIMIZATION_LEVEL
    assert [options.get(level) for *_, options in links] == [None, None, 1]
    texts = [call[2] for call in fake.calls if call[0] == "cuLinkAddData"]
    assert b".minnctapersm 1" in texts[1] and b".minnctapersm" not in texts[2]


def test_a_clean_jit_is_built_once(fake: FakeDriver) -> None:
    fake.link_logs = [_jit_log(0)]
    driver.cubin_from_ptx(".visible .entry k()\n.maxntid 1024, 1, 1\n{\n}\n", "k")
    assert fake.links() == 1


def test_tensor_map_encode_wraps_every_list_element(fake: FakeDriver) -> None:
    plan = tma_host.plan_tiled(
        "bf16", (64, 128), (128, 1), (64, 64), swizzle=smem_desc.Swizzle.B128
    )
    tensor_map = tma_host.encode(plan, 0x10000)
    assert isinstance(tensor_map, FakeTensorMap)
    _, dtype, rank, address, dims, strides, box, elem, _, swizzle, _, _ = fake.calls[-1]
    assert dtype == fake.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
    assert rank == cuuint32_t(2) and address == 0x10000
    assert dims == [cuuint64_t(128), cuuint64_t(64)]
    assert strides == [cuuint64_t(256)]
    assert box == [cuuint32_t(64), cuuint32_t(64)] and elem == [cuuint32_t(1), cuuint32_t(1)]
    assert swizzle == fake.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B
    with pytest.raises(ValueError, match="16-byte aligned"):
        tma_host.encode(plan, 0x10008)


# ---- the launcher -------------------------------------------------------------------------------


def test_launcher_packs_every_param_kind(fake: FakeDriver) -> None:
    launcher = _launcher(fake, ALL_KINDS)
    tensor_map = FakeTensorMap(5)
    raw_map = bytes(range(128))
    args = [0x7000_0000_1000, DevicePointerLike(), 7, -3, 1 << 40, -5, 1.5, tensor_map, raw_map]
    launcher.launch((4, 2, 1), (128, 1, 1), 0, 0, args)
    (launch,) = fake.launches
    assert launch["args"] == [
        0x7000_0000_1000,
        0xDEAD0000,
        7,
        -3,
        1 << 40,
        -5,
        1.5,
        tensor_map.bytes(),
        raw_map,
    ]
    assert launch["grid"] == (4, 2, 1) and launch["block"] == (128, 1, 1)


def test_launcher_updates_slots_in_place(fake: FakeDriver) -> None:
    launcher = _launcher(fake, [ParamKind.PTR, ParamKind.U32])
    launcher.launch((1,), (32,), 0, 0, [16, 1])
    launcher.launch((2, 1), (64, 1), 0, 0, [32, 2])
    first, second = fake.launches
    assert first["params_address"] == second["params_address"]  # built once
    assert first["args"] == [16, 1] and second["args"] == [32, 2]
    assert second["grid"] == (2, 1, 1) and second["block"] == (64, 1, 1)


def test_launcher_argument_errors_name_the_kernel_and_argument(fake: FakeDriver) -> None:
    launcher = _launcher(fake, [ParamKind.PTR, ParamKind.U32, ParamKind.TENSOR_MAP])
    with pytest.raises(
        LaunchError, match=r"kernel k: expects 3 arguments \(PTR, U32, TENSOR_MAP\), got 2"
    ):
        launcher.launch((1,), (32,), 0, 0, [1, 2])
    with pytest.raises(LaunchError, match=r"argument 1 \(U32\) cannot take 'x'"):
        launcher.launch((1,), (32,), 0, 0, [1, "x", bytes(128)])
    with pytest.raises(LaunchError, match=r"argument 2 \(TENSOR_MAP\).*128 bytes, got 64"):
        launcher.launch((1,), (32,), 0, 0, [1, 2, bytes(64)])
    with pytest.raises(LaunchError, match="grid must be 1 to 3 positive extents"):
        launcher.launch((0,), (32,), 0, 0, [1, 2, bytes(128)])


def test_launcher_opts_into_large_dynamic_smem_once(fake: FakeDriver) -> None:
    launcher = _launcher(fake, [])
    launcher.launch((1,), (128,), 48 * 1024, 0, [])
    assert "cuFuncSetAttribute" not in fake.names()
    launcher.launch((1,), (128,), 100 * 1024, 0, [])
    launcher.launch((1,), (128,), 100 * 1024, 0, [])
    attribute_calls = [c for c in fake.calls if c[0] == "cuFuncSetAttribute"]
    max_dynamic = fake.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    assert attribute_calls == [("cuFuncSetAttribute", max_dynamic, 100 * 1024)]
    with pytest.raises(LaunchError, match="exceeds the device's opt-in limit of 232448"):
        launcher.launch((1,), (128,), 300 * 1024, 0, [])


def test_launcher_reports_driver_errors(fake: FakeDriver) -> None:
    launcher = _launcher(fake, [ParamKind.U32])
    fake.launch_results = [CUresult.CUDA_ERROR_INVALID_VALUE]
    with pytest.raises(
        LaunchError, match=r"kernel k: launch grid=\(1,\) .* CUDA_ERROR_INVALID_VALUE"
    ):
        launcher.launch((1,), (32,), 0, 0, [1])


def test_launcher_recovers_when_another_library_switched_contexts(fake: FakeDriver) -> None:
    launcher = _launcher(fake, [ParamKind.U32])
    fake.current = None
    fake.launch_results = [CUresult.CUDA_ERROR_INVALID_CONTEXT]
    launcher.launch((1,), (32,), 0, 0, [1])
    assert len(fake.launches) == 2
    assert fake.names()[-1] == "cuCtxSetCurrent"


def test_bound_launch_writes_packed_pointers_and_falls_back_when_it_must(
    fake: FakeDriver,
) -> None:
    launcher = _launcher(fake, [ParamKind.PTR] * 3)
    lock = threading.Lock()
    run = launcher.bound((4,), (128,), 0, lock)
    run([16, 32, 48], 0x5000)
    run([64, 80, 96], 0x5000)
    first, second = fake.launches
    assert first["args"] == [16, 32, 48] and second["args"] == [64, 80, 96]
    assert first["params_address"] == second["params_address"]  # packed once, rewritten
    assert second["grid"] == (4, 1, 1) and second["block"] == (128, 1, 1)
    run([DevicePointerLike(), 1, 2], 0)  # not a plain int: the general path converts it
    assert fake.launches[-1]["args"] == [0xDEAD0000, 1, 2]
    with pytest.raises(LaunchError, match=r"expects 3 arguments \(PTR, PTR, PTR\), got 2"):
        run([1, 2], 0)
    fake.launch_results = [CUresult.CUDA_ERROR_INVALID_VALUE, CUresult.CUDA_ERROR_INVALID_VALUE]
    with pytest.raises(LaunchError, match="CUDA_ERROR_INVALID_VALUE"):
        run([1, 2, 3], 0)
    assert not lock.locked()  # released on every way out


def test_bound_launch_of_other_param_kinds_takes_the_general_path(fake: FakeDriver) -> None:
    launcher = _launcher(fake, [ParamKind.PTR, ParamKind.U32])
    lock = threading.Lock()
    launcher.bound((1,), (32,), 0, lock)([16, 7], 0)
    assert fake.launches[-1]["args"] == [16, 7]
    assert not lock.locked()


def test_cluster_launch_uses_launch_kernel_ex(fake: FakeDriver) -> None:
    launcher = _launcher(fake, [ParamKind.PTR], cluster=(2,))
    launcher.launch((4, 1, 1), (128, 1, 1), 1024, 5, [64])
    (launch,) = fake.launches
    assert launch["cluster"] == (2, 1, 1)
    assert launch["attribute_id"] == fake.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    assert launch["grid"] == (4, 1, 1) and launch["smem"] == 1024 and launch["args"] == [64]
    assert int(launch["stream"]) == 5
    with pytest.raises(LaunchError, match="not a multiple of the cluster"):
        launcher.launch((3, 1, 1), (128, 1, 1), 0, 0, [64])


def test_large_clusters_opt_into_non_portable_sizes(fake: FakeDriver) -> None:
    _launcher(fake, [], cluster=(16, 1, 1))
    non_portable = fake.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
    assert ("cuFuncSetAttribute", non_portable, 1) in fake.calls


def test_tensor_map_is_copied_into_the_launchers_own_slot(fake: FakeDriver) -> None:
    launcher = _launcher(fake, [ParamKind.TENSOR_MAP])
    tensor_map = FakeTensorMap(9)
    launcher.launch((1,), (32,), 0, 0, [tensor_map])
    launch = fake.launches[0]
    slot = ctypes.c_void_p.from_address(launch["params_address"]).value
    assert slot != tensor_map.getPtr()  # by value: the driver never sees the caller's storage
    assert launch["args"][0] == tensor_map.bytes()
