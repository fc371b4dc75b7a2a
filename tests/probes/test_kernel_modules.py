"""probes/kernel_modules.py: the nvidia module on disk per kernel, DKMS, headers, and the installed
module's version read from its ELF .modinfo (plain, xz, gz; zst not readable here)."""

from __future__ import annotations

import gzip
import lzma
import os
import struct
from pathlib import Path
from typing import Any

import pytest

from gpudoctor.context import ProbeContext
from gpudoctor.facts import Unavailable
from gpudoctor.probes import kernel_modules as km
from tests.fixtures.make_kernel_hosts import DRIVER, NEW_KERNEL, OLD_KERNEL, tiny_module
from tests.helpers.sections import section_keys, validate_section
from tests.helpers.tree import deny, write_tree


def tree(**extra: Any) -> dict[str, Any]:
    """A host booted into NEW_KERNEL with the module under the old kernel and DKMS built for it."""
    spec: dict[str, Any] = {
        "proc/sys/kernel/osrelease": f"{NEW_KERNEL}\n",
        f"lib/modules/{NEW_KERNEL}/modules.dep": "\n",
        f"lib/modules/{NEW_KERNEL}/build": ("link", f"/usr/src/linux-headers-{NEW_KERNEL}"),
        f"usr/src/linux-headers-{NEW_KERNEL}/Makefile": "VERSION = 5\n",
        f"lib/modules/{OLD_KERNEL}/updates/dkms/nvidia.ko": tiny_module(DRIVER),
        f"var/lib/dkms/nvidia/{DRIVER}/{OLD_KERNEL}/x86_64/module/nvidia.ko": tiny_module(DRIVER),
        f"var/lib/dkms/nvidia/{DRIVER}/build/make.log": "make: *** [Makefile:82: modules] Error 2\n",
    }
    spec.update(extra)
    return {k: v for k, v in spec.items() if v is not None}


def collect(root: Path, spec: dict[str, Any]) -> dict[str, Any]:
    write_tree(root, spec)
    facts = km.collect(ProbeContext(root=root, env={}))
    validate_section("kernel_modules", facts)
    assert set(facts) == section_keys("kernel_modules")
    return facts


def test_after_a_kernel_upgrade_without_the_module(tmp_path: Path) -> None:
    facts = collect(tmp_path, tree())
    assert facts["release"] == NEW_KERNEL
    assert facts["running_has_module"] is False
    assert facts["running_module"].reason == "not_found"
    assert facts["other_kernels_with_module"] == [OLD_KERNEL]
    assert facts["headers_present"] is True
    assert facts["dkms_versions"] == [DRIVER] and facts["dkms_version"] == DRIVER
    assert facts["dkms_built_for_running"] is False and facts["dkms_built_kernels"] == [OLD_KERNEL]
    assert facts["dkms_make_log_error"] == "make: *** [Makefile:82: modules] Error 2"
    assert facts["nvidia_installed_version"] == DRIVER and facts["nvidia_installed_version_source"] == "dkms"


@pytest.mark.parametrize("where", ["updates/dkms", "extra", "kernel/drivers/video", "updates", "kernel/nvidia-550",
                                   "extra/nvidia/open"])
@pytest.mark.parametrize("name", km.MODULE_NAMES)
def test_the_module_is_found_where_installers_put_it(tmp_path: Path, where: str, name: str) -> None:
    path = f"lib/modules/{NEW_KERNEL}/{where}/{name}"
    facts = collect(tmp_path, tree(**{path: b"\x7fELF"}))
    assert facts["running_has_module"] is True
    assert facts["running_module"] == "/" + path


def test_newest_dkms_version_built_for_the_running_kernel_is_judged(tmp_path: Path) -> None:
    facts = collect(tmp_path, tree(**{
        f"var/lib/dkms/nvidia/550.54.15/{NEW_KERNEL}/x86_64/module/nvidia.ko.zst": b"",
        "var/lib/dkms/nvidia/not-a-version/x": "",
    }))
    assert facts["dkms_versions"] == [DRIVER, "550.54.15"]
    assert facts["dkms_version"] == "550.54.15" and facts["dkms_built_for_running"] is True
    assert facts["dkms_make_log_error"].reason == "not_found"  # that version has no build log


def test_headers_missing_dangling_or_without_makefile(tmp_path: Path) -> None:
    assert collect(tmp_path / "a", tree(**{f"lib/modules/{NEW_KERNEL}/build": None}))["headers_present"] is False
    dangling = tree(**{f"usr/src/linux-headers-{NEW_KERNEL}/Makefile": None})
    assert collect(tmp_path / "b", dangling)["headers_present"] is False


def test_headers_link_out_of_the_root_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "linux").mkdir(parents=True)
    (outside / "linux" / "Makefile").write_text("VERSION = 6\n")
    spec = tree(**{f"lib/modules/{NEW_KERNEL}/build": ("link", "../../../../outside/linux")})
    facts = collect(tmp_path / "root", spec)
    # ".." stops at the root, as under chroot: the link names root/outside/linux, which is not there
    assert facts["headers_present"] is False


def test_no_lib_modules_is_not_found_and_dkms_absent(tmp_path: Path) -> None:
    facts = collect(tmp_path, {"proc/sys/kernel/osrelease": "6.18.44\n", "sys/module/nvidia/version": "580.159.04\n"})
    for key in ("running_has_module", "running_module", "other_kernels_with_module", "headers_present"):
        assert facts[key].reason == "not_found", key
    assert facts["dkms_version"].reason == "not_found"
    assert facts["nvidia_installed_version"].reason == "not_found"


def test_running_kernel_without_a_modules_directory(tmp_path: Path) -> None:
    facts = collect(tmp_path, tree(**{f"lib/modules/{NEW_KERNEL}/modules.dep": None,
                                      f"lib/modules/{NEW_KERNEL}/build": None}))
    assert facts["running_has_module"] is False and facts["headers_present"] is False


def test_unreadable_as_non_root_is_no_permission(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(tmp_path, tree())
    deny(monkeypatch, [tmp_path / "lib/modules", tmp_path / "var/lib/dkms/nvidia"])
    facts = km.collect(ProbeContext(root=tmp_path, env={}))
    validate_section("kernel_modules", facts)
    assert facts["running_has_module"].reason == "no_permission"
    assert facts["dkms_version"].reason == "no_permission"
    assert facts["nvidia_installed_version"].reason == "no_permission"


def test_make_log_unreadable_is_no_permission(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(tmp_path, tree())
    deny(monkeypatch, [tmp_path / f"var/lib/dkms/nvidia/{DRIVER}/build/make.log"])
    facts = km.collect(ProbeContext(root=tmp_path, env={}))
    assert facts["dkms_make_log_error"].reason == "no_permission"
    assert facts["dkms_built_for_running"] is False


# --- the installed version from the module file -------------------------------------------------


def without_dkms(**extra: Any) -> dict[str, Any]:
    spec = tree(**extra)
    return {k: v for k, v in spec.items() if not k.startswith("var/lib/dkms")}


@pytest.mark.parametrize("suffix, pack", [
    ("", lambda b: b),
    (".xz", lambda b: lzma.compress(b)),
    (".gz", lambda b: gzip.compress(b, mtime=0)),
])
def test_version_from_the_running_kernels_module(tmp_path: Path, suffix: str, pack: Any) -> None:
    path = f"lib/modules/{NEW_KERNEL}/updates/dkms/nvidia.ko{suffix}"
    facts = collect(tmp_path, without_dkms(**{path: pack(tiny_module("570.133.20", NEW_KERNEL))}))
    assert facts["nvidia_installed_version"] == "570.133.20"
    assert facts["nvidia_installed_version_source"] == f"modinfo of /{path}"


def test_version_from_another_kernels_module_when_the_running_one_has_none(tmp_path: Path) -> None:
    facts = collect(tmp_path, without_dkms())
    assert facts["nvidia_installed_version"] == DRIVER
    assert OLD_KERNEL in facts["nvidia_installed_version_source"]


def test_zst_module_is_not_supported(tmp_path: Path) -> None:
    facts = collect(tmp_path, without_dkms(**{f"lib/modules/{NEW_KERNEL}/updates/dkms/nvidia.ko.zst": b"(\xb5/\xfd"}))
    assert facts["running_has_module"] is True
    assert facts["nvidia_installed_version"].reason == "not_supported"


def test_module_not_read_while_loaded(tmp_path: Path) -> None:
    facts = collect(tmp_path, without_dkms(**{"sys/module/nvidia/version": "550.90.07\n"}))
    assert facts["nvidia_installed_version"].reason == "not_supported"


def test_big_endian_module(tmp_path: Path) -> None:
    path = f"lib/modules/{NEW_KERNEL}/extra/nvidia.ko"
    facts = collect(tmp_path, without_dkms(**{path: tiny_module("535.104.05", big_endian=True)}))
    assert facts["nvidia_installed_version"] == "535.104.05"


def _reader(data: bytes) -> km.Reader:
    return lambda offset, count: data[offset:offset + count] if offset >= 0 else b""


def test_elf_parse_of_garbage_and_truncation() -> None:
    good = tiny_module(DRIVER)
    assert km.elf_modinfo_version(_reader(good)) == DRIVER
    for cut in (0, 10, 60, 100, len(good) - 10):
        with pytest.raises(km.ModuleReadError):
            km.elf_modinfo_version(_reader(good[:cut]))
    with pytest.raises(km.ModuleReadError):
        km.elf_modinfo_version(_reader(b"MZ" + good[2:]))
    # a section count past the cap is refused before anything is read for it
    huge = bytearray(good)
    struct.pack_into("<H", huge, 0x3C, 0)
    with pytest.raises(km.ModuleReadError):
        km.elf_modinfo_version(_reader(bytes(huge)))
    no_version = good.replace(f"version={DRIVER}".encode(), f"xersion={DRIVER}".encode())
    assert km.elf_modinfo_version(_reader(no_version)) is None


def test_truncated_and_garbage_module_files_are_errors(tmp_path: Path) -> None:
    path = f"lib/modules/{NEW_KERNEL}/updates/dkms/nvidia.ko"
    facts = collect(tmp_path / "a", without_dkms(**{path: tiny_module(DRIVER)[:90]}))
    assert facts["nvidia_installed_version"].reason == "error"
    facts = collect(tmp_path / "b", without_dkms(**{path + ".xz": b"\xfd7zXZ\x00garbage" * 10}))
    assert facts["nvidia_installed_version"].reason == "error"
    facts = collect(tmp_path / "c", without_dkms(**{path + ".xz": lzma.compress(tiny_module(DRIVER))[:40]}))
    assert facts["nvidia_installed_version"].reason == "error"


def test_decompression_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(km, "MAX_DECOMPRESSED", 4096)
    module = bytearray(tiny_module(DRIVER))
    shoff, = struct.unpack_from("<Q", module, 0x28)
    struct.pack_into("<Q", module, 0x28, shoff + (1 << 20))  # a megabyte before the section headers
    padded = bytes(module[:shoff]) + b"\0" * (1 << 20) + bytes(module[shoff:])
    path = f"lib/modules/{NEW_KERNEL}/updates/dkms/nvidia.ko.xz"
    facts = collect(tmp_path, without_dkms(**{path: lzma.compress(padded)}))
    assert facts["nvidia_installed_version"].reason == "error"
    assert "more than 4096 bytes decompressed" in facts["nvidia_installed_version"].detail


# --- the build log ------------------------------------------------------------------------------


def test_last_error_line_prefers_the_compiler_error() -> None:
    log = "a.c:1:2: error: first\nb.c:3:4: error: second\nmake: *** [x] Error 2\n"
    assert km.last_error_line(log) == "b.c:3:4: error: second"
    assert km.last_error_line("make: *** [x] Error 2\nok\n") == "make: *** [x] Error 2"
    assert km.last_error_line("all good\n") is None
    shown = km.last_error_line("x.c: error: \x1b[31m" + "y" * 1000)
    assert shown is not None and len(shown) <= km.MAX_LOG_LINE and "\x1b" not in shown


def test_a_huge_make_log_is_read_from_its_tail_only(tmp_path: Path) -> None:
    body = ("  CC [M]  something.o\n" * 400_000) + "z.c:9:9: error: the last one\n"
    facts = collect(tmp_path, tree(**{f"var/lib/dkms/nvidia/{DRIVER}/build/make.log": body}))
    assert facts["dkms_make_log_error"] == "z.c:9:9: error: the last one"
    early = "a.c:1:1: error: early\n" + "  CC [M]  something.o\n" * 400_000
    facts = collect(tmp_path / "b", tree(**{f"var/lib/dkms/nvidia/{DRIVER}/build/make.log": early}))
    assert facts["dkms_make_log_error"].reason == "not_found"


def test_make_log_fifo_is_not_opened(tmp_path: Path) -> None:
    write_tree(tmp_path, tree(**{f"var/lib/dkms/nvidia/{DRIVER}/build/make.log": None}))
    (tmp_path / f"var/lib/dkms/nvidia/{DRIVER}/build").mkdir(parents=True)
    os.mkfifo(tmp_path / f"var/lib/dkms/nvidia/{DRIVER}/build/make.log")
    facts = km.collect(ProbeContext(root=tmp_path, env={}))
    assert isinstance(facts["dkms_make_log_error"], Unavailable)


def test_walk_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(km, "MAX_ENTRIES", 20)
    spec = tree(**{f"lib/modules/{NEW_KERNEL}/updates/dkms/sub/f{i}.ko": b"" for i in range(50)})
    facts = collect(tmp_path, spec)
    assert facts["running_has_module"] is False or isinstance(facts["running_has_module"], Unavailable)


def test_symlinked_module_directory_is_not_walked(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "nvidia.ko").write_bytes(tiny_module(DRIVER))
    spec = tree(**{f"lib/modules/{NEW_KERNEL}/extra": ("link", "../../../../outside")})
    facts = collect(tmp_path / "root", spec)
    assert facts["running_has_module"] is False


def test_live_release_comes_from_uname(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ctx = ProbeContext(root=Path("/"), env={})
    assert ctx.live
    assert km._release(ctx) == os.uname().release


@pytest.mark.parametrize("name", ["kernel-upgrade-no-module", "dkms-headers-missing"])
def test_fixture_hosts_match_their_generator(name: str) -> None:
    from tests.fixtures.make_kernel_hosts import SCENARIOS
    from tests.helpers.hosts import HOSTS
    from tests.helpers.tree import diff_tree

    problems = diff_tree(HOSTS / name, SCENARIOS[name]())
    assert not problems, f"run tests/fixtures/make_kernel_hosts.py: {problems[:5]}"
