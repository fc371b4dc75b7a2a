"""Tests for probes/modules.py on small trees and on the fixture hosts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpudoctor.context import ProbeContext
from gpudoctor.facts import Unavailable
from gpudoctor.probes import modules
from tests.helpers.sections import section_keys, validate_section
from tests.helpers.tree import deny, write_tree

HOSTS = Path(__file__).resolve().parents[1] / "fixtures" / "hosts"
EFI_VAR = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
OPEN_550 = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.90.07  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Fri May 31 09:34:34 UTC 2024\nGCC version:  gcc version 12.3.0\n"
)
PROPRIETARY_535 = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
    "GCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04)\n"
)
MODULES = "nvidia_uvm 1531904 0 - Live 0x0000000000000000 (POE)\nnvidia 8581120 1 nvidia_uvm, Live 0x0 (POE)\n"


def collect(root: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    out = modules.collect(ProbeContext(root=root, env=env or {}))
    validate_section("modules", out)
    assert set(out) == section_keys("modules")
    return out


def reason(value: Any) -> str:
    assert isinstance(value, Unavailable), value
    return value.reason


def test_healthy_fixture() -> None:
    out = collect(HOSTS / "healthy-2gpu")
    assert out["nvidia_loaded"] is True
    assert out["nvidia_uvm_loaded"] is True
    assert out["nvidia_peermem_loaded"] is True
    assert out["nouveau_loaded"] is False
    assert out["amdgpu_loaded"] is False
    assert "nvidia_modeset" in out["loaded"]
    assert out["nvidia_version"] == "550.90.07"
    assert out["nvidia_flavour"] == "open"
    assert out["nvidia_proc_version"].startswith("NVRM version: NVIDIA UNIX Open Kernel Module")
    assert out["nvml_library_version"] == "550.90.07"
    assert out["nvml_library_path"] == "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.90.07"
    assert out["nouveau_blacklisted"] is True
    assert reason(out["secure_boot"]) == "not_supported"
    assert out["secure_boot"].detail == "not an EFI boot"
    assert out["cmdline"].endswith("ro iommu=pt")
    assert out["iommu_mode"] == "passthrough"
    assert reason(out["amdgpu_version"]) == "driver_not_loaded"


def test_nvml_mismatch_fixture() -> None:
    out = collect(HOSTS / "nvml-mismatch")
    assert out["nvidia_version"] == "550.54.15"
    assert out["nvml_library_version"] == "550.90.07"


def test_no_driver_fixture() -> None:
    out = collect(HOSTS / "no-driver")
    assert out["nouveau_loaded"] is True
    assert out["nvidia_loaded"] is False
    for key in ("nvidia_version", "nvidia_flavour", "nvidia_proc_version"):
        assert reason(out[key]) == "driver_not_loaded"
    assert reason(out["nvml_library_version"]) == "not_found"
    assert reason(out["nvml_library_path"]) == "not_found"


def test_empty_root_is_all_unavailable_or_false(tmp_path: Path) -> None:
    out = collect(tmp_path)
    assert reason(out["loaded"]) == "not_found"
    assert reason(out["nvidia_loaded"]) == "not_found"
    assert reason(out["nvidia_version"]) == "not_found"
    assert reason(out["cmdline"]) == "not_found"
    assert reason(out["nouveau_blacklisted"]) == "not_found"
    assert reason(out["iommu_mode"]) == "not_found"


def test_proprietary_module_version_from_proc(tmp_path: Path) -> None:
    write_tree(tmp_path, {"proc/modules": MODULES, "proc/driver/nvidia/version": PROPRIETARY_535})
    out = collect(tmp_path)
    assert out["nvidia_flavour"] == "proprietary"
    assert out["nvidia_version"] == "535.104.05"  # no sys/module/nvidia/version
    assert out["nvidia_proc_version"] == PROPRIETARY_535.splitlines()[0]


def test_open_module_on_aarch64(tmp_path: Path) -> None:
    text = "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.159.04  Release Build  (nixbld@)\n"
    write_tree(tmp_path, {"proc/modules": MODULES, "proc/driver/nvidia/version": text})
    out = collect(tmp_path)
    assert out["nvidia_version"] == "580.159.04"
    assert out["nvidia_flavour"] == "open"


def test_sys_module_version_wins_and_garbage_falls_back(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "proc/modules": MODULES,
            "proc/driver/nvidia/version": OPEN_550,
            "sys/module/nvidia/version": "560.35.03\n",
        },
    )
    assert collect(tmp_path)["nvidia_version"] == "560.35.03"
    write_tree(tmp_path, {"sys/module/nvidia/version": "\x00\xffgarbage\n"})
    assert collect(tmp_path)["nvidia_version"] == "550.90.07"


def test_garbage_proc_version(tmp_path: Path) -> None:
    write_tree(tmp_path, {"proc/modules": MODULES, "proc/driver/nvidia/version": "hello world\n"})
    out = collect(tmp_path)
    assert reason(out["nvidia_flavour"]) == "error"
    assert reason(out["nvidia_version"]) == "error"
    assert out["nvidia_proc_version"] == "hello world"


def test_proc_version_permission_denied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(tmp_path, {"proc/modules": MODULES, "proc/driver/nvidia/version": OPEN_550})
    deny(monkeypatch, [tmp_path / "proc/driver/nvidia/version"])
    out = collect(tmp_path)
    assert reason(out["nvidia_flavour"]) == "no_permission"
    assert reason(out["nvidia_version"]) == "no_permission"


def test_modules_fall_back_to_sysfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(
        tmp_path,
        {
            "proc/modules": MODULES,
            "sys/module/nvidia/initstate": "live\n",
            "sys/module/nvidia_uvm/initstate": "coming\n",
            "sys/module/nouveau/parameters/modeset": "0\n",  # built in: no initstate
        },
    )
    deny(monkeypatch, [tmp_path / "proc/modules"])
    out = collect(tmp_path)
    assert reason(out["loaded"]) == "no_permission"
    assert out["nvidia_loaded"] is True
    assert out["nvidia_uvm_loaded"] is False
    assert out["nouveau_loaded"] is True
    assert out["amdgpu_loaded"] is False


def test_empty_proc_modules(tmp_path: Path) -> None:
    write_tree(tmp_path, {"proc/modules": "\n"})
    out = collect(tmp_path)
    assert reason(out["loaded"]) == "not_found"  # empty file
    assert reason(out["nvidia_loaded"]) == "not_found"


def test_nvml_library_prefers_ld_library_path(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.90.07": b"",
            "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1": ("link", "libnvidia-ml.so.550.90.07"),
            "usr/local/nvidia/lib64/libnvidia-ml.so.580.159.04": b"",
            # an absolute link is followed inside the root
            "usr/local/nvidia/lib64/libnvidia-ml.so.1": ("link", "/usr/local/nvidia/lib64/libnvidia-ml.so.580.159.04"),
        },
    )
    out = collect(tmp_path, {"LD_LIBRARY_PATH": "/usr/local/nvidia/lib64:/usr/local/nvidia/lib"})
    assert out["nvml_library_version"] == "580.159.04"
    assert out["nvml_library_path"] == "/usr/local/nvidia/lib64/libnvidia-ml.so.580.159.04"
    out = collect(tmp_path)
    assert out["nvml_library_version"] == "550.90.07"


def test_nvml_library_without_soname_link(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "usr/lib64/libnvidia-ml.so": ("link", "libnvidia-ml.so.535.54.03"),
            "usr/lib64/libnvidia-ml.so.535.54.03": b"",
        },
    )
    out = collect(tmp_path)
    assert out["nvml_library_version"] == "535.54.03"
    assert out["nvml_library_path"] == "/usr/lib64/libnvidia-ml.so.535.54.03"


def test_nvml_library_dangling_link_and_wsl(tmp_path: Path) -> None:
    write_tree(tmp_path, {"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1": ("link", "libnvidia-ml.so.550.1.1")})
    assert reason(collect(tmp_path)["nvml_library_version"]) == "not_found"
    write_tree(tmp_path, {"usr/lib/wsl/lib/libnvidia-ml.so.1": b"\x7fELF"})
    out = collect(tmp_path)
    assert reason(out["nvml_library_version"]) == "not_found"


def test_wsl_library_has_no_version(tmp_path: Path) -> None:
    write_tree(tmp_path, {"usr/lib/wsl/lib/libnvidia-ml.so.1": b"\x7fELF"})
    out = collect(tmp_path)
    assert reason(out["nvml_library_version"]) == "not_found"
    assert "WSL" in out["nvml_library_version"].detail


def test_amdgpu_version(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "proc/modules": "amdgpu 16318464 0 - Live 0x0000000000000000 (OE)\n",
            "sys/module/amdgpu/version": "6.12.12\n",
        },
    )
    out = collect(tmp_path)
    assert out["amdgpu_loaded"] is True
    assert out["amdgpu_version"] == "6.12.12"
    (tmp_path / "sys/module/amdgpu/version").unlink()
    out = collect(tmp_path)
    assert reason(out["amdgpu_version"]) == "not_found"
    assert "in-kernel" in out["amdgpu_version"].detail


@pytest.mark.parametrize(
    "cmdline, expected",
    [
        ("ro quiet modprobe.blacklist=floppy,nouveau", True),
        ("ro rd.driver.blacklist=nouveau", True),
        ("ro quiet nouveau.modeset=0", False),
        ("ro modprobe.blacklist=nouveau_x", False),
    ],
)
def test_nouveau_blacklist_on_cmdline(tmp_path: Path, cmdline: str, expected: bool) -> None:
    write_tree(tmp_path, {"proc/cmdline": cmdline + "\n"})
    assert collect(tmp_path)["nouveau_blacklisted"] is expected


def test_nouveau_blacklist_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(
        tmp_path,
        {
            "proc/cmdline": "ro\n",
            "etc/modprobe.d/nvidia.conf": "# blacklist nouveau\noptions nvidia NVreg_OpenRmEnableUnsupportedGpus=1\n",
            "etc/modprobe.d/blacklist-nouveau.txt": "blacklist nouveau\n",  # not *.conf: modprobe ignores it
            "etc/modprobe.d/empty.conf": "",
        },
    )
    assert collect(tmp_path)["nouveau_blacklisted"] is False
    write_tree(tmp_path, {"usr/lib/modprobe.d/nvidia-graphics-drivers.conf": "blacklist   nouveau  # vendor\n"})
    assert collect(tmp_path)["nouveau_blacklisted"] is True
    (tmp_path / "usr/lib/modprobe.d/nvidia-graphics-drivers.conf").unlink()
    write_tree(tmp_path, {"lib/modprobe.d/secret.conf": "blacklist nouveau\n"})
    deny(monkeypatch, [tmp_path / "lib/modprobe.d/secret.conf"])
    assert reason(collect(tmp_path)["nouveau_blacklisted"]) == "no_permission"


@pytest.mark.parametrize(
    "data, expected",
    [(b"\x06\x00\x00\x00\x01", True), (b"\x06\x00\x00\x00\x00", False), (b"\x16\x00\x00\x00\x01\n", True)],
)
def test_secure_boot(tmp_path: Path, data: bytes, expected: bool) -> None:
    write_tree(tmp_path, {EFI_VAR: data})
    assert collect(tmp_path)["secure_boot"] is expected


def test_secure_boot_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(tmp_path, {"sys/firmware/efi/efivars/Boot0000-8be4df61-93ca-11d2-aa0d-00e098032b8c": b"x"})
    assert reason(collect(tmp_path)["secure_boot"]) == "not_found"
    write_tree(tmp_path, {EFI_VAR: b"\x06\x00"})
    assert reason(collect(tmp_path)["secure_boot"]) == "error"
    deny(monkeypatch, [tmp_path / EFI_VAR])
    assert reason(collect(tmp_path)["secure_boot"]) == "no_permission"


def test_secure_boot_legacy_vars(tmp_path: Path) -> None:
    write_tree(tmp_path, {"sys/firmware/efi/vars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c/data": b"\x01"})
    assert collect(tmp_path)["secure_boot"] is True


def groups(*types: str) -> dict[str, Any]:
    return {f"sys/kernel/iommu_groups/{i}/type": f"{t}\n" for i, t in enumerate(types)}


@pytest.mark.parametrize(
    "cmdline, tree, expected",
    [
        ("ro iommu=pt", groups("identity", "identity"), "passthrough"),
        ("ro", groups("identity"), "passthrough"),
        ("ro", groups("DMA-FQ", "DMA-FQ"), "translated"),
        ("ro iommu=pt", groups("identity", "DMA"), "translated"),
        ("ro intel_iommu=off", {"sys/kernel/iommu_groups": ("dir",)}, "off"),
        ("ro", {"sys/kernel/iommu_groups": ("dir",)}, "off"),
        ("ro", {"sys/kernel/mm": ("dir",)}, "off"),
        ("ro amd_iommu=off", {}, "off"),
        ("ro iommu.passthrough=1", {"sys/kernel/iommu_groups/0/devices": ("dir",)}, "passthrough"),
        ("ro", {"sys/kernel/iommu_groups/0/devices": ("dir",)}, "unknown"),
        ("ro", groups("unmanaged"), "unknown"),
    ],
)
def test_iommu_mode(tmp_path: Path, cmdline: str, tree: dict[str, Any], expected: str) -> None:
    write_tree(tmp_path, {"proc/cmdline": cmdline + "\n", **tree})
    mode = collect(tmp_path)["iommu_mode"]
    if expected == "unknown":  # no answer is a fact that is unavailable, never a guessed mode
        assert isinstance(mode, Unavailable), mode
    else:
        assert mode == expected


def test_iommu_groups_unreadable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(tmp_path, {"proc/cmdline": "ro\n", **groups("DMA")})
    deny(monkeypatch, [tmp_path / "sys/kernel/iommu_groups"])
    assert reason(collect(tmp_path)["iommu_mode"]) == "no_permission"


def test_parse_helpers() -> None:
    assert modules.parse_nvrm_version(OPEN_550) == "550.90.07"
    assert modules.parse_nvrm_version(PROPRIETARY_535) == "535.104.05"
    assert modules.parse_nvrm_version("NVRM version: something else\n") is None
    assert modules.parse_proc_modules(MODULES) == ["nvidia_uvm", "nvidia"]
    with pytest.raises(ValueError):
        modules.parse_proc_modules("\n\n")
