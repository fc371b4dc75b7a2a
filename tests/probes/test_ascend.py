"""Tests for probes/ascend.py: an Ascend 910B node's driver install, CANN and device files, and
hosts without them (every file may be absent)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpudoctor.context import ProbeContext
from gpudoctor.facts import Unavailable
from gpudoctor.probes import ascend
from tests.helpers.sections import section_keys, validate_section
from tests.helpers.tree import deny, write_tree

TOOLKIT_80 = "usr/local/Ascend/ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info"
TOOLKIT_85 = "usr/local/Ascend/cann/x86_64-linux/ascend_toolkit_install.info"


def npu_node(npus: int = 8) -> dict[str, Any]:
    tree: dict[str, Any] = {
        "usr/local/Ascend/driver/version.info": "Version=24.1.0\nascendhal_version=7.35.19\n",
        "usr/local/Ascend/firmware/version.info": "Version=7.5.0.3.220\n",
        TOOLKIT_80: "package_name=Ascend-cann-toolkit\nversion=8.0.0\narch=aarch64\n",
        "dev/davinci_manager": b"",
        "dev/devmm_svm": b"",
        "dev/hisi_hdc": b"",
    }
    for i in range(npus):
        tree[f"dev/davinci{i}"] = b""
    return tree


def collect(root: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    out = ascend.collect(ProbeContext(root=root, env=env or {}))
    validate_section("ascend", out)
    assert set(out) == section_keys("ascend")
    return out


def reason(value: Any) -> str:
    assert isinstance(value, Unavailable), value
    return value.reason


def test_npu_node(tmp_path: Path) -> None:
    tree = npu_node(npus=10)
    write_tree(tmp_path, tree)
    out = collect(tmp_path)
    assert out["driver_version"] == "24.1.0"
    assert out["firmware_version"] == "7.5.0.3.220"
    assert out["cann_version"] == "8.0.0"
    assert out["cann_info_path"] == "/" + TOOLKIT_80
    # numeric order: davinci10 after davinci9, not after davinci1
    assert [d["index"] for d in out["devices"]] == list(range(10))
    assert all(reason(d["accessible"]) == "not_supported" for d in out["devices"])  # a tree: no access check
    assert out["davinci_manager_present"] and out["devmm_svm_present"] and out["hisi_hdc_present"]


def test_cann_85_layout_and_toolkit_home(tmp_path: Path) -> None:
    home = "home/u/cann/aarch64-linux/ascend_toolkit_install.info"
    write_tree(tmp_path, {TOOLKIT_85: "version=8.5.0\n", home: "Version=9.0.0\n"})
    assert collect(tmp_path)["cann_version"] == "8.5.0"
    assert collect(tmp_path, {"ASCEND_TOOLKIT_HOME": "/home/u/cann/"})["cann_version"] == "9.0.0"


def test_nothing_installed(tmp_path: Path) -> None:
    write_tree(tmp_path, {"dev/null": b""})
    out = collect(tmp_path)
    for field in ("driver_version", "firmware_version", "cann_version", "cann_info_path"):
        assert reason(out[field]) == "not_found"
    assert out["devices"] == []
    assert out["davinci_manager_present"] is False
    assert reason(out["davinci_manager_accessible"]) == "not_found"


def test_garbage_version_file_is_an_error_not_a_version(tmp_path: Path) -> None:
    write_tree(tmp_path, {"usr/local/Ascend/driver/version.info": "\x00\xff{garbage\n"})
    out = collect(tmp_path)
    assert reason(out["driver_version"]) == "error"
    assert "no Version= line" in out["driver_version"].detail


def test_unreadable_driver_info_is_no_permission(tmp_path: Path, monkeypatch: Any) -> None:
    write_tree(tmp_path, npu_node())
    deny(monkeypatch, [tmp_path / "usr/local/Ascend/driver/version.info"])
    assert reason(collect(tmp_path)["driver_version"]) == "no_permission"
