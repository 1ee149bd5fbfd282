"""The on-disk variant cache: what the key separates, records round-tripping into a usable
Compiled (matmul variants included), what is never stored, damaged records, and a fresh
process that skips the compiler. test_variant_cache_matmul.py launches restored matmul
variants."""

from __future__ import annotations

import dataclasses
import json
import os
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from check_utils import run_fresh_process

import pyfuse as pf
from pyfuse import knobs
from pyfuse.ir.kernel_printer import kernel_to_str
from pyfuse.ir.target import HOPPER
from pyfuse.runtime import cache, variant_cache

f32, bf16 = pf.float32, pf.bfloat16


@pytest.fixture
def cache_dir(tmp_path: Path) -> Iterator[Path]:
    with knobs.overrides(cache_dir=tmp_path, disable_cache=False, dump=frozenset()):
        yield tmp_path


def _key(fn: Callable[..., Any], *specs: Any) -> variant_cache.VariantKey | None:
    return variant_cache.variant_key(pf.fuse(fn, name="f").trace(*specs), HOPPER, None)


def _scaled(c: object) -> Callable[..., Any]:
    return lambda x, y: pf.gelu(x * c + y)  # one source line for every constant


def _binary(op: Callable[..., Any]) -> Callable[..., Any]:
    return lambda x, y: op(x, y)


def _records(cache_dir: Path) -> list[Path]:
    return sorted((cache_dir / "variant").glob("*.json"))


# ---- the key ---------------------------------------------------------------------------------


def test_key_is_stable_for_the_same_trace() -> None:
    spec = pf.spec((64, 96), bf16)
    assert _key(_scaled(0.5), spec, spec) == _key(_scaled(0.5), spec, spec)
    assert _key(_scaled(0.5), spec, spec) is not None


def test_key_separates_everything_that_changes_the_kernels() -> None:
    spec = pf.spec((64, 96), bf16)
    base = _key(_scaled(0.5), spec, spec)
    variants = [
        _key(_scaled(0.5000000000000001), spec, spec),  # the next float: exact, not decimal
        _key(_scaled(2), spec, spec),  # an int constant
        _key(_scaled(True), spec, spec),  # a bool is not the int 1
        _key(_scaled(0.5), pf.spec((64, 96), f32), spec),  # a dtype
        _key(_scaled(0.5), pf.spec((64, 97), bf16), pf.spec((64, 97), bf16)),  # a shape
        _key(_scaled(0.5), pf.spec((64, 96), bf16, (1, 64)), spec),  # a layout
        _key(_binary(pf.add), spec, spec),
    ]
    assert base not in variants and len(set(variants)) == len(variants)
    assert _key(_binary(pf.add), spec, spec) != _key(_binary(pf.sub), spec, spec)
    # The same text on another line is another op source (errors and warnings name it).
    first = lambda x, y: x + y  # noqa: E731
    second = lambda x, y: x + y  # noqa: E731
    assert _key(first, spec, spec) != _key(second, spec, spec)


def test_key_covers_the_target_and_refuses_matmul_params_and_verification() -> None:
    fusion = pf.fuse(_scaled(0.5), name="f").trace(*[pf.spec((64, 96), bf16)] * 2)
    base = variant_cache.variant_key(fusion, HOPPER, None)
    unvectorized = variant_cache.variant_key(
        fusion, dataclasses.replace(HOPPER, vector_bytes=1), None
    )
    assert base is not None and unvectorized is not None and base != unvectorized
    assert variant_cache.variant_key(fusion, HOPPER, pf.MatmulParams()) is None
    with knobs.overrides(verify=1):
        assert variant_cache.variant_key(fusion, HOPPER, None) is None


def test_an_unknown_object_in_the_fusion_makes_it_uncacheable() -> None:
    fusion = pf.fuse(_scaled(0.5), name="f").trace(*[pf.spec((64, 96), bf16)] * 2)
    assert variant_cache.fingerprint(fusion) is not None
    fusion.exprs()[0].note = object()  # type: ignore[attr-defined]
    assert variant_cache.fingerprint(fusion) is None
    assert variant_cache.variant_key(fusion, HOPPER, None) is None


def _stamp(root: Path) -> str | None:
    scan = variant_cache.scan_sources(root)
    return None if scan is None else variant_cache.stamp_of(root, scan)


def test_source_stamp_follows_contents_not_times(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    module = root / "sub" / "m.py"
    module.write_text("x = 16\n")
    (root / "notes.txt").write_text("not a module")
    base = _stamp(root)
    assert base is not None and base == _stamp(root)
    (root / "notes.txt").write_text("still not a module, and longer")
    assert _stamp(root) == base
    # A same-size edit with the modification time put back (as installers that normalize
    # times leave it) still changes the stamp.
    stat = module.stat()
    module.write_text("x = 32\n")
    os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert _stamp(root) != base
    module.write_text("x = 16\n")
    assert _stamp(root) == base
    # The same files in another folder are another install.
    other = tmp_path / "other"
    (other / "sub").mkdir(parents=True)
    (other / "sub" / "m.py").write_text("x = 16\n")
    assert _stamp(other) not in (None, base)


def _settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every file look older than the racy window (ctime cannot be set back)."""
    later = time.time_ns() + 10 * variant_cache.RACY_NS
    monkeypatch.setattr(variant_cache.time, "time_ns", lambda: later)


def _package(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "pkg"
    root.mkdir()
    module = root / "m.py"
    module.write_text("x = 16\n")
    return root, module


def test_a_settled_scan_remembers_its_stamp_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _ = _package(tmp_path)
    scan = variant_cache.scan_sources(root)
    assert scan is not None
    with knobs.overrides(cache_dir=tmp_path / "cache"):
        _settled(monkeypatch)
        stamp = variant_cache.remembered_stamp(root, scan)
        assert stamp == variant_cache.stamp_of(root, scan)
        assert variant_cache.stamp_memo_path(root, scan).exists()

        # A later process reads the memo and not the files.
        def unread(*_: object) -> str:
            raise AssertionError("the files were read again")

        monkeypatch.setattr(variant_cache, "stamp_of", unread)
        assert variant_cache.remembered_stamp(root, scan) == stamp


def test_files_too_new_to_trust_are_not_remembered(tmp_path: Path) -> None:
    root, _ = _package(tmp_path)
    scan = variant_cache.scan_sources(root)
    assert scan is not None
    with knobs.overrides(cache_dir=tmp_path / "cache"):
        assert variant_cache.remembered_stamp(root, scan) == variant_cache.stamp_of(root, scan)
        assert not variant_cache.stamp_memo_path(root, scan).exists()


def test_an_edit_with_its_times_put_back_scans_differently(tmp_path: Path) -> None:
    root, module = _package(tmp_path)
    before = variant_cache.scan_sources(root)
    stat = module.stat()
    time.sleep(0.01)
    module.write_text("x = 32\n")  # same size, mtime restored: only ctime tells
    os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    after = variant_cache.scan_sources(root)
    assert before is not None and after is not None and before != after
    with knobs.overrides(cache_dir=tmp_path / "cache"):
        memo = variant_cache.stamp_memo_path(root, before)
        assert variant_cache.stamp_memo_path(root, after) != memo


def test_a_damaged_stamp_memo_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, _ = _package(tmp_path)
    scan = variant_cache.scan_sources(root)
    assert scan is not None
    with knobs.overrides(cache_dir=tmp_path / "cache"):
        path = variant_cache.stamp_memo_path(root, scan)
        path.parent.mkdir(parents=True)
        for damaged in [b"garbage", cache.encode_entry(b"short", variant_cache.STAMP_MAGIC)]:
            path.write_bytes(damaged)
            stamp = variant_cache.remembered_stamp(root, scan)
            assert stamp == variant_cache.stamp_of(root, scan)


def _unread(*_: object) -> None:
    raise AssertionError("read without need")


def test_the_first_compile_on_a_cache_directory_stamps_the_sources_after_the_passes(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Settled sources, a cache directory with no record, a process that has not read the
    # stamp: the lookup is skipped, and the sources are read only when the record is stored.
    _settled(monkeypatch)
    monkeypatch.setattr(variant_cache, "_stamps", {})
    scan = variant_cache.scan_sources()
    assert scan is not None
    expected = variant_cache.stamp_of(variant_cache._ROOT, scan)
    spec = pf.spec((64, 96), bf16)
    fusion = pf.fuse(_scaled(8.0), name="first").trace(spec, spec)
    key = variant_cache.variant_key(fusion, HOPPER, None)
    assert key is not None and key.stamp is None
    with pytest.raises(ValueError, match="not known yet"):
        key.name  # noqa: B018
    with monkeypatch.context() as patched:
        patched.setattr(cache, "read_entry", _unread)
        patched.setattr(variant_cache, "stamp_of", _unread)
        assert variant_cache.load(key, fusion, lambda: None) is None  # type: ignore[arg-type,return-value]

    compiled = pf.fuse(_scaled(8.0), name="first").compile(spec, spec)
    assert "emit" in compiled.timings and len(_records(cache_dir)) == 1
    assert variant_cache.stamp_memo_path(variant_cache._ROOT, scan).exists()

    # A later process: the memo names the stamp of the contents, and the record is found.
    monkeypatch.setattr(variant_cache, "_stamps", {})
    monkeypatch.setattr(variant_cache, "stamp_of", _unread)
    again = variant_cache.variant_key(fusion, HOPPER, None)
    assert again is not None and again.stamp == expected
    assert dataclasses.replace(key, stamp=expected) == again
    hit = pf.fuse(_scaled(8.0), name="first").compile(spec, spec)
    assert set(hit.timings) == {"trace", "variant_cache"} and hit.ptx == compiled.ptx


def test_records_without_a_memo_are_found_by_reading_the_sources(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A memo is named by file times and inodes: a reinstall of the same files, a checkout
    # there and back, or a copied cache brings records whose scan has no memo yet.
    _settled(monkeypatch)
    spec = pf.spec((64, 96), bf16)
    pf.fuse(_scaled(9.0), name="moved").compile(spec, spec)
    scan = variant_cache.scan_sources()
    assert scan is not None
    memo = variant_cache.stamp_memo_path(variant_cache._ROOT, scan)
    memo.unlink()
    monkeypatch.setattr(variant_cache, "_stamps", {})
    hit = pf.fuse(_scaled(9.0), name="moved").compile(spec, spec)
    assert set(hit.timings) == {"trace", "variant_cache"}
    assert memo.exists()  # remembered again


def test_records_of_recently_edited_sources_stay_reachable(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No memo is written for files too new to trust; a record made moments ago is still found.
    monkeypatch.setattr(variant_cache, "RACY_NS", 10**20)
    monkeypatch.setattr(variant_cache, "_stamps", {})
    spec = pf.spec((64, 96), bf16)
    pf.fuse(_scaled(10.0), name="racy").compile(spec, spec)
    scan = variant_cache.scan_sources()
    assert scan is not None and len(_records(cache_dir)) == 1
    assert not variant_cache.stamp_memo_path(variant_cache._ROOT, scan).exists()
    monkeypatch.setattr(variant_cache, "_stamps", {})
    hit = pf.fuse(_scaled(10.0), name="racy").compile(spec, spec)
    assert set(hit.timings) == {"trace", "variant_cache"}
    assert not variant_cache.stamp_memo_path(variant_cache._ROOT, scan).exists()


def test_no_record_is_stored_when_the_sources_change_before_the_stamp_is_read(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stamp of a first compile is read after the passes: a file edited meanwhile scans
    # differently afterwards, and the record (of the old code) is not filed under it.
    _settled(monkeypatch)
    monkeypatch.setattr(variant_cache, "_stamps", {})
    real = variant_cache.scan_sources
    calls = []

    def edited_after_the_key(root: Path = variant_cache._ROOT) -> variant_cache.Scan | None:
        calls.append(root)
        scan = real(root)
        if len(calls) == 1 or scan is None:
            return scan
        return (*scan, ("/edited.py", 1, 2, 3, 4))

    monkeypatch.setattr(variant_cache, "scan_sources", edited_after_the_key)
    spec = pf.spec((64, 96), bf16)
    compiled = pf.fuse(_scaled(11.0), name="edited").compile(spec, spec)
    assert "emit" in compiled.timings and len(calls) >= 2
    assert _records(cache_dir) == []
    assert not (cache_dir / "variant" / "stamps").exists()


def test_sources_that_cannot_be_scanned_make_nothing_cacheable(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "m.py").write_text("x = 1\n")
    # An editor's lock file: a dangling symlink named like a module.
    (root / ".#m.py").symlink_to(tmp_path / "gone")
    assert variant_cache.scan_sources(root) is not None
    zipped = tmp_path / "pyfuse.zip"
    zipped.write_bytes(b"PK")
    assert variant_cache.scan_sources(zipped) is None
    assert variant_cache.scan_sources(tmp_path / "missing") is None


def test_the_namers_position_is_part_of_the_fingerprint() -> None:
    fusion = pf.fuse(_scaled(0.5), name="f").trace(*[pf.spec((64, 96), bf16)] * 2)
    before = variant_cache.fingerprint(fusion)
    fusion.namer.next("tv")
    assert variant_cache.fingerprint(fusion) != before


# ---- records ---------------------------------------------------------------------------------


def _long_sum(x: Any) -> Any:
    return x.sum()  # 7x32769: a grid reduction, two kernels and an intermediate


def _linear_bias_gelu(x: Any, w: Any, b: Any) -> Any:
    return pf.gelu(pf.linear(x, w, b), approximate="tanh")


def _matmul(a: Any, b: Any) -> Any:
    return a @ b


_LINEAR_SPECS = [pf.spec((256, 512), bf16), pf.spec((1024, 512), bf16), pf.spec((1024,), bf16)]


@pytest.mark.parametrize(
    ("fn", "specs"),
    [
        (_scaled(0.25), [pf.spec((64, 96), bf16), pf.spec((64, 96), bf16)]),
        (_long_sum, [pf.spec((7, 32769), f32)]),
        (lambda x: pf.softmax(x, -1), [pf.spec((4, 1 << 18), f32)]),
        (_linear_bias_gelu, _LINEAR_SPECS),
        (_matmul, [pf.spec((512, 16384), bf16), pf.spec((16384, 512), bf16)]),  # split-K
        (_matmul, [pf.spec((4, 128, 256), bf16), pf.spec((4, 256, 192), bf16)]),  # batched
    ],
    ids=["pointwise", "grid_reduction", "softmax", "linear_bias_gelu", "split_k", "batched"],
)
def test_a_second_function_reads_the_record_of_the_first(
    cache_dir: Path, fn: Callable[..., Any], specs: list[Any]
) -> None:
    first = pf.fuse(fn, name="cached").compile(*specs)
    assert len(_records(cache_dir)) == 1
    assert "emit" in first.timings

    second = pf.fuse(fn, name="cached").compile(*specs)  # a new function: no in-memory hit
    assert second is not first
    assert isinstance(second, pf.Compiled) and isinstance(second.kernels[0], pf.Kernel)
    assert set(second.timings) == {"trace", "variant_cache"}
    assert second.ptx == first.ptx and second.math_ir == first.math_ir
    assert second.global_intermediates == first.global_intermediates
    assert second.intermediate_bytes == first.intermediate_bytes
    for got, want in zip(second.kernels, first.kernels, strict=True):
        assert (got.name, got.scheduler, got.ir, got.params) == (
            want.name,
            want.scheduler,
            want.ir,
            want.params,
        )
        assert (got.grid, got.block, got.smem_bytes) == (want.grid, want.block, want.smem_bytes)
        assert got.arguments == want.arguments
        assert got.matmul_launch == want.matmul_launch
        assert (got.matmul_launch is not None) == (got.scheduler == "matmul")
        assert got.built_ir is None  # not rebuilt until asked for
    assert second.runtime.plan == first.runtime.plan

    # The kernel IR and the segmentation come back by compiling again, on first access.
    assert kernel_to_str(second.kernels[0].kernel_ir) == kernel_to_str(first.kernels[0].kernel_ir)
    assert len(second.segmented.kernels) == len(first.segmented.kernels)
    assert all(kernel.built_ir is not None for kernel in second.kernels)


def test_matmul_variants_are_stored_but_not_with_matmul_params(cache_dir: Path) -> None:
    specs = [pf.spec((256, 128), bf16), pf.spec((128, 192), bf16)]
    compiled = pf.fuse(_matmul, name="mm").compile(*specs)
    assert [kernel.scheduler for kernel in compiled.kernels] == ["matmul"]
    (path,) = _records(cache_dir)
    record = json.loads(cache.read_entry(path, variant_cache.MAGIC) or b"")
    # A and B, then the TMA-stored output.
    assert record["kernels"][0]["matmul_launch"]["pointer_arguments"] == [0, 1, 2]
    path.unlink()
    pf.fuse(_matmul, name="mm", matmul=pf.MatmulParams()).compile(*specs)
    assert _records(cache_dir) == []


def test_disabled_cache_and_dumps_write_no_record(
    cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = pf.spec((64, 96), bf16)
    with knobs.overrides(disable_cache=True):
        pf.fuse(_scaled(3.0), name="off").compile(spec, spec)
    with knobs.overrides(dump=frozenset({"ptx"})):
        pf.fuse(_scaled(3.0), name="off").compile(spec, spec)
    assert _records(cache_dir) == []
    assert "pyfuse ptx" in capsys.readouterr().err


def test_a_damaged_record_is_a_miss_and_is_rewritten(cache_dir: Path) -> None:
    spec = pf.spec((64, 96), bf16)
    pf.fuse(_scaled(4.0), name="damaged").compile(spec, spec)
    (path,) = _records(cache_dir)
    whole = path.read_bytes()
    path.write_bytes(whole[:-10])
    again = pf.fuse(_scaled(4.0), name="damaged").compile(spec, spec)
    assert "emit" in again.timings
    assert path.read_bytes() == whole

    # A record that frames correctly but lacks a field reads as a miss too.
    record = json.loads(cache.read_entry(path, variant_cache.MAGIC) or b"")
    del record["kernels"][0]["grid"]
    cache.write_entry(path, json.dumps(record).encode(), variant_cache.MAGIC)
    assert "emit" in pf.fuse(_scaled(4.0), name="damaged").compile(spec, spec).timings


@pytest.mark.parametrize(
    "damage",
    [
        lambda r: r.update(kernels=[]),
        lambda r: r["kernels"][0].update(smem_bytes=float("inf")),
        lambda r: r["kernels"][0].update(grid=[0, 1, 1]),
        lambda r: r["kernels"][0].update(arguments=[["input", [0]]]),
        lambda r: r["kernels"][0].update(arguments=[["input", 7]]),
        lambda r: r["kernels"][0].update(arguments=[["elsewhere", 0]]),
        lambda r: r["kernels"][0].update(params=[1, 2]),
        lambda r: r.update(format=99),
    ],
)
def test_a_record_that_does_not_add_up_is_a_miss(
    cache_dir: Path, damage: Callable[[dict[str, Any]], None]
) -> None:
    spec = pf.spec((64, 96), bf16)
    pf.fuse(_scaled(6.0), name="odd").compile(spec, spec)
    (path,) = _records(cache_dir)
    record = json.loads(cache.read_entry(path, variant_cache.MAGIC) or b"")
    damage(record)
    cache.write_entry(path, json.dumps(record).encode(), variant_cache.MAGIC)
    assert "emit" in pf.fuse(_scaled(6.0), name="odd").compile(spec, spec).timings
    # Deeply nested JSON: the parser's recursion error is a miss too.
    cache.write_entry(path, b"[" * 100000 + b"]" * 100000, variant_cache.MAGIC)
    assert "emit" in pf.fuse(_scaled(6.0), name="odd").compile(spec, spec).timings


def test_nothing_is_stored_once_the_sources_changed_under_the_compiler(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = pf.spec((64, 96), bf16)
    pf.fuse(_scaled(7.0), name="edited").compile(spec, spec)  # the compiler is loaded
    (record,) = _records(cache_dir)
    record.unlink()
    # The files scan differently from when the compiler was loaded: an edit since.
    monkeypatch.setattr(variant_cache, "_compiler_scan", (("/edited.py", 1, 2, 3),))
    pf.fuse(_scaled(7.0), name="edited").compile(spec, spec)
    assert _records(cache_dir) == []
    monkeypatch.undo()
    pf.fuse(_scaled(7.0), name="edited").compile(spec, spec)
    assert len(_records(cache_dir)) == 1


def test_a_record_whose_ptx_this_pyfuse_does_not_make_is_reported(cache_dir: Path) -> None:
    spec = pf.spec((64, 96), bf16)
    pf.fuse(_scaled(5.0), name="foreign").compile(spec, spec)
    (path,) = _records(cache_dir)
    record = json.loads(cache.read_entry(path, variant_cache.MAGIC) or b"")
    record["kernels"][0]["ptx"] += "// changed\n"
    cache.write_entry(path, json.dumps(record).encode(), variant_cache.MAGIC)
    compiled = pf.fuse(_scaled(5.0), name="foreign").compile(spec, spec)
    assert compiled.ptx.endswith("// changed\n")
    with pytest.raises(pf.PyfuseError, match="variant cache gave PTX"):
        compiled.kernels[0].kernel_ir  # noqa: B018


# ---- a fresh process -------------------------------------------------------------------------

_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import pyfuse as pf

    fused = pf.fuse(lambda x, y, z: pf.gelu(x * y + z), name="fresh")
    compiled = fused.compile(*[pf.spec((512, 256), pf.bfloat16)] * 3)
    loaded = sorted(name for name in sys.modules if name.startswith("pyfuse."))
    print(json.dumps({"timings": sorted(compiled.timings), "ptx": compiled.ptx,
                      "modules": loaded}))
    """
)


def test_a_fresh_process_skips_the_passes_and_the_emitter(tmp_path: Path) -> None:
    first, second = run_fresh_process(_SCRIPT, tmp_path), run_fresh_process(_SCRIPT, tmp_path)
    assert "emit" in first["timings"] and "pyfuse.passes.pipeline" in first["modules"]
    assert second["timings"] == ["trace", "variant_cache"]
    assert second["ptx"] == first["ptx"]
    compiler = [
        m for m in second["modules"] if m.startswith(("pyfuse.passes", "pyfuse.backend_ptx.emit"))
    ]
    assert compiler == []
    assert "pyfuse.ir.kernel_ir" not in second["modules"]
