"""Tests for probes/rocm.py: an MI300X host with ROCm 6.4.0, and hosts without ROCm."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpudoctor.context import ProbeContext
from gpudoctor.facts import Unavailable
from gpudoctor.probes import rocm
from tests.helpers.sections import section_keys, validate_section
from tests.helpers.tree import deny, write_tree

HOSTS = Path(__file__).resolve().parents[1] / "fixtures" / "hosts"
TOPOLOGY = "sys/devices/virtual/kfd/kfd/topology/nodes"


def node_properties(gfx_target_version: int, simd_count: int) -> str:
    return (
        f"cpu_cores_count {0 if gfx_target_version else 96}\n"
        f"simd_count {simd_count}\n"
        "mem_banks_count 1\n"
        f"gfx_target_version {gfx_target_version}\n"
        "vendor_id 4098\n"
    )


def mi300x_tree(gpus: int = 2) -> dict[str, Any]:
    tree: dict[str, Any] = {
        "opt/rocm-6.4.0/.info/version": "6.4.0-47\n",
        "opt/rocm": ("link", "rocm-6.4.0"),
        "dev/kfd": b"",
        "dev/dri/card0": b"",
        "sys/class/kfd/kfd": ("link", "../../devices/virtual/kfd/kfd"),
        f"{TOPOLOGY}/0/properties": node_properties(0, 0),
        f"{TOPOLOGY}/1/properties": node_properties(0, 0),  # second socket
    }
    for i in range(gpus):
        tree[f"dev/dri/renderD{128 + i}"] = b""
        tree[f"{TOPOLOGY}/{i + 2}/properties"] = node_properties(90402, 1216)
    return tree


def collect(root: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    out = rocm.collect(ProbeContext(root=root, env=env or {}))
    validate_section("rocm", out)
    assert set(out) == section_keys("rocm")
    return out


def reason(value: Any) -> str:
    assert isinstance(value, Unavailable), value
    return value.reason


@pytest.mark.parametrize(
    "number, name",
    [
        (90402, "gfx942"),
        (90010, "gfx90a"),
        (90008, "gfx908"),
        (90500, "gfx950"),
        (110000, "gfx1100"),
        (100302, "gfx1032"),
        (120001, "gfx1201"),
        (90012, "gfx90c"),
    ],
)
def test_gfx_name(number: int, name: str) -> None:
    assert rocm.gfx_name(number) == name


def test_mi300x_rocm_6_4(tmp_path: Path) -> None:
    write_tree(tmp_path, mi300x_tree(gpus=3))
    out = collect(tmp_path)
    assert out["version"] == "6.4.0"
    assert out["path"] == "/opt/rocm"
    assert out["kfd_present"] is True
    assert reason(out["kfd_accessible"]) == "not_supported"  # fixture root: no access check
    assert [n["path"] for n in out["render_nodes"]] == [f"/dev/dri/renderD{n}" for n in (128, 129, 130)]
    assert all(reason(n["accessible"]) == "not_supported" for n in out["render_nodes"])
    assert out["gfx_targets"] == ["gfx942"]


def test_mixed_gpus_in_node_order(tmp_path: Path) -> None:
    tree = mi300x_tree(gpus=1)
    tree[f"{TOPOLOGY}/10/properties"] = node_properties(110000, 96)
    tree[f"{TOPOLOGY}/3/properties"] = node_properties(90010, 416)
    write_tree(tmp_path, tree)
    assert collect(tmp_path)["gfx_targets"] == ["gfx942", "gfx90a", "gfx1100"]


def test_render_nodes_sorted_numerically(tmp_path: Path) -> None:
    write_tree(tmp_path, {"dev/dri/renderD129": b"", "dev/dri/renderD1000": b"", "dev/dri/renderD128": b""})
    paths = [n["path"] for n in collect(tmp_path)["render_nodes"]]
    assert paths == ["/dev/dri/renderD128", "/dev/dri/renderD129", "/dev/dri/renderD1000"]


def test_version_from_directory_name(tmp_path: Path) -> None:
    # /opt/rocm -> /etc/alternatives/rocm -> /opt/rocm-6.3.1, absolute links taken inside the root
    write_tree(
        tmp_path,
        {
            "opt/rocm-6.3.1/bin/rocminfo": b"",
            "etc/alternatives/rocm": ("link", "/opt/rocm-6.3.1"),
            "opt/rocm": ("link", "/etc/alternatives/rocm"),
        },
    )
    out = collect(tmp_path)
    assert out["version"] == "6.3.1"
    assert out["path"] == "/opt/rocm"


def test_rocm_path_from_environment(tmp_path: Path) -> None:
    write_tree(tmp_path, {"home/u/rocm/.info/version": "7.0.2-56\n", "opt/rocm-6.4.0/.info/version": "6.4.0-47\n"})
    out = collect(tmp_path, {"ROCM_PATH": "/home/u/rocm/"})
    assert out["version"] == "7.0.2"
    assert out["path"] == "/home/u/rocm"
    out = collect(tmp_path, {"ROCM_PATH": "/nowhere"})
    assert reason(out["version"]) == "not_found"
    assert "ROCM_PATH=/nowhere" in out["path"].detail


def test_garbage_and_unreadable_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(tmp_path, {"opt/rocm/.info/version": "not a version\n"})
    assert reason(collect(tmp_path)["version"]) == "error"
    write_tree(tmp_path, {"opt/rocm/.info/version": "6.2.4\n"})
    assert collect(tmp_path)["version"] == "6.2.4"
    deny(monkeypatch, [tmp_path / "opt/rocm/.info/version"])
    assert reason(collect(tmp_path)["version"]) == "no_permission"


def test_no_rocm_is_not_found(tmp_path: Path) -> None:
    out = collect(tmp_path)
    for key in ("version", "path", "kfd_accessible", "render_nodes", "gfx_targets"):
        assert reason(out[key]) == "not_found", key
    assert out["kfd_present"] is False


def test_fixture_hosts_have_no_rocm() -> None:
    out = collect(HOSTS / "healthy-2gpu")
    assert reason(out["version"]) == "not_found"
    assert reason(out["gfx_targets"]) == "not_found"


def test_cpu_only_topology(tmp_path: Path) -> None:
    write_tree(tmp_path, {f"{TOPOLOGY}/0/properties": node_properties(0, 0)})
    assert collect(tmp_path)["gfx_targets"] == []


def test_garbage_gfx_target_version(tmp_path: Path) -> None:
    write_tree(tmp_path, {f"{TOPOLOGY}/0/properties": "gfx_target_version 9x4\n"})
    assert reason(collect(tmp_path)["gfx_targets"]) == "error"
    # one readable GPU node still counts
    write_tree(tmp_path, {f"{TOPOLOGY}/1/properties": node_properties(90402, 1216)})
    assert collect(tmp_path)["gfx_targets"] == ["gfx942"]


def test_unreadable_topology(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(tmp_path, {f"{TOPOLOGY}/1/properties": node_properties(90402, 1216)})
    deny(monkeypatch, [tmp_path / TOPOLOGY / "1" / "properties"])
    assert reason(collect(tmp_path)["gfx_targets"]) == "no_permission"


def test_live_access_checks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A live context whose /dev paths are redirected into tmp_path, and os.access answered.
    write_tree(tmp_path, {"dev/kfd": b"", "dev/dri/renderD128": b""})
    ctx = ProbeContext(env={})
    real_path = ctx.path

    def path(absolute: str) -> Path:
        if absolute.startswith("/dev"):
            return tmp_path / absolute.lstrip("/")
        return real_path(absolute)

    monkeypatch.setattr(ctx, "path", path)
    monkeypatch.setattr(rocm.os, "access", lambda p, mode: not str(p).endswith("kfd"))
    out = rocm.collect(ctx)
    validate_section("rocm", out)
    assert out["kfd_present"] is True
    assert out["kfd_accessible"] is False
    assert out["render_nodes"] == [{"path": "/dev/dri/renderD128", "accessible": True}]
