from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from gpudoctor.context import ProbeContext
from gpudoctor.facts import Unavailable
from gpudoctor.probes import pci
from gpudoctor.probes.files import resolve_path
from tests.helpers.hosts import make_hosts
from tests.helpers.sections import def_keys, validate_section
from tests.helpers.tree import deny, write_tree

ROOT_PORT = "sys/devices/pci0000:00/0000:00:01.0"
GPU = f"{ROOT_PORT}/0000:01:00.0"


def function(path: str, **kw: Any) -> dict:
    defaults: dict[str, Any] = dict(cls="0x030200", vendor="0x10de", device="0x2335", numa_node=0,
                                    local_cpus="0-7", speed="32.0 GT/s PCIe", width=16, driver="nvidia")
    defaults.update(kw)
    return make_hosts().pci_function(path, **defaults)  # type: ignore[no-any-return]


def port(path: str = ROOT_PORT, **kw: Any) -> dict:
    return function(path, **{"cls": "0x060400", "vendor": "0x8086", "device": "0x352a", "driver": "pcieport", **kw})


def collect(root: Path, spec: dict) -> list[dict]:
    write_tree(root, spec)
    facts = pci.collect(ProbeContext(root=root, env={}))
    validate_section("pci", facts)
    devices = facts["devices"]
    assert isinstance(devices, list)
    for device in devices:
        assert set(device) == def_keys("pci_device")
    return devices


def by_id(devices: list[dict]) -> dict[str, dict]:
    return {d["bus_id"]: d for d in devices}


def reason(value: object) -> str | None:
    return value.reason if isinstance(value, Unavailable) else None


# --- the usual case -------------------------------------------------------------------------------

def test_gpu_behind_root_port(tmp_path: Path) -> None:
    (gpu,) = collect(tmp_path, {**port(), **function(GPU)})
    assert gpu == {
        "bus_id": "0000:01:00.0", "kind": "gpu", "class_code": "0x030200", "vendor": "nvidia",
        "vendor_id": "0x10de", "device_id": "0x2335", "driver": "nvidia", "numa_node": 0,
        "local_cpus": list(range(8)), "link_speed_gts": 32.0, "link_width": 16, "max_link_speed_gts": 32.0,
        "max_link_width": 16, "link_gen": 5, "max_link_gen": 5, "parent_bus_id": "0000:00:01.0",
        "parent_max_link_speed_gts": 32.0, "parent_max_link_width": 16, "parent_max_link_gen": 5,
        "path": "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0", "rdma_devices": [], "net_devices": [],
    }


def test_bridges_audio_and_plain_nics_are_skipped(tmp_path: Path) -> None:
    spec = {**port(), **function(GPU)}
    spec.update(function(f"{ROOT_PORT}/0000:01:00.1", cls="0x040300", driver="snd_hda_intel"))
    spec.update(function("sys/devices/pci0000:00/0000:00:1f.6", cls="0x020000", vendor="0x8086", driver="e1000e"))
    spec["sys/devices/pci0000:00/0000:00:1f.6/net/eno1/operstate"] = "up\n"
    assert [d["bus_id"] for d in collect(tmp_path, spec)] == ["0000:01:00.0"]


@pytest.mark.parametrize(("cls", "listed"), [
    ("0x030000", True), ("0x030200", True), ("0x038000", True), ("0x120000", True), ("0x120001", True),
    ("0x040300", False), ("0x060400", False), ("0x010802", False), ("0x020700", False),
])
def test_gpu_classes(tmp_path: Path, cls: str, listed: bool) -> None:
    devices = collect(tmp_path, {**port(), **function(GPU, cls=cls)})
    assert bool(devices) is listed


@pytest.mark.parametrize(("vendor", "name"), [
    ("0x10de", "nvidia"), ("0x1002", "amd"), ("0x8086", "intel"), ("0x15b3", "mellanox"),
    ("0x14e4", "broadcom"), ("0x1d0f", "amazon"), ("0x19e5", "huawei"), ("0x1a03", "other"), ("0x1DE0", "other"),
])
def test_vendor_names(tmp_path: Path, vendor: str, name: str) -> None:
    (gpu,) = collect(tmp_path, {**port(), **function(GPU, vendor=vendor)})
    assert gpu["vendor"] == name
    assert gpu["vendor_id"] == vendor.lower()


def test_unbound_gpu_has_driver_none(tmp_path: Path) -> None:
    (gpu,) = collect(tmp_path, {**port(), **function(GPU, driver=None)})
    assert gpu["driver"] == "none"


def test_numa_node_minus_one_is_kept(tmp_path: Path) -> None:
    (gpu,) = collect(tmp_path, {**port(), **function(GPU, numa_node=-1, local_cpus="0-31")})
    assert gpu["numa_node"] == -1
    assert gpu["local_cpus"] == list(range(32))


# --- link speed formats ---------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "speed", "gen"), [
    ("2.5 GT/s", 2.5, 1), ("2.5 GT/s PCIe", 2.5, 1), ("5 GT/s", 5.0, 2), ("5.0 GT/s PCIe", 5.0, 2),
    ("8 GT/s", 8.0, 3), ("8.0 GT/s PCIe", 8.0, 3), ("16.0 GT/s PCIe", 16.0, 4), ("32.0 GT/s PCIe", 32.0, 5),
    ("64.0 GT/s PCIe", 64.0, 6),
])
def test_link_speed_formats(tmp_path: Path, text: str, speed: float, gen: int) -> None:
    (gpu,) = collect(tmp_path, {**port(), **function(GPU, speed=text, max_speed="32.0 GT/s PCIe")})
    assert (gpu["link_speed_gts"], gpu["link_gen"]) == (speed, gen)
    assert (gpu["max_link_speed_gts"], gpu["max_link_gen"]) == (32.0, 5)


@pytest.mark.parametrize(("text", "why"), [
    ("Unknown", "not_supported"), ("Unknown speed", "not_supported"), ("fast", "error"),
    ("GT/s", "error"), ("", "not_found"), ("\n", "not_found"),
])
def test_bad_link_speed(tmp_path: Path, text: str, why: str) -> None:
    spec = {**port(), **function(GPU)}
    spec[f"{GPU}/current_link_speed"] = text
    (gpu,) = collect(tmp_path, spec)
    assert reason(gpu["link_speed_gts"]) == why
    assert reason(gpu["link_gen"]) == why
    assert gpu["max_link_gen"] == 5


def test_odd_rate_has_no_generation(tmp_path: Path) -> None:
    (gpu,) = collect(tmp_path, {**port(), **function(GPU, speed="20.0 GT/s PCIe")})
    assert gpu["link_speed_gts"] == 20.0
    assert reason(gpu["link_gen"]) == "not_supported"


def test_degraded_width_and_missing_link_files(tmp_path: Path) -> None:
    spec = {**port(), **function(GPU, width=8, max_width=16)}
    (gpu,) = collect(tmp_path / "a", spec)
    assert (gpu["link_width"], gpu["max_link_width"]) == (8, 16)
    # conventional PCI / some virtual devices have no link files at all
    (bare,) = collect(tmp_path / "b", {**port(), **function(GPU, speed=None)})
    for key in ("link_speed_gts", "link_width", "max_link_speed_gts", "max_link_width", "link_gen"):
        assert reason(bare[key]) == "not_found", key


# --- parents --------------------------------------------------------------------------------------

def test_gpu_on_root_bus_has_no_parent(tmp_path: Path) -> None:
    # As passed-through GPUs in a VM: directly on pci0000:00, no upstream port.
    (gpu,) = collect(tmp_path, function("sys/devices/pci0000:00/0000:00:06.0", numa_node=-1))
    for key in ("parent_bus_id", "parent_max_link_speed_gts", "parent_max_link_width", "parent_max_link_gen"):
        assert reason(gpu[key]) == "not_found", key
    assert "pci0000:00" in gpu["parent_bus_id"].detail
    assert gpu["path"] == "/sys/devices/pci0000:00/0000:00:06.0"


def test_parent_without_link_files_and_slot_limit(tmp_path: Path) -> None:
    spec = {**port(speed=None), **function(GPU)}
    (gpu,) = collect(tmp_path / "a", spec)
    assert gpu["parent_bus_id"] == "0000:00:01.0"
    assert reason(gpu["parent_max_link_width"]) == "not_found"
    assert reason(gpu["parent_max_link_gen"]) == "not_found"
    (slot,) = collect(tmp_path / "b", {**port(speed="16.0 GT/s PCIe", width=8), **function(GPU)})
    assert (slot["parent_max_link_width"], slot["parent_max_link_gen"]) == (8, 4)


# --- NICs -----------------------------------------------------------------------------------------

NIC = "sys/devices/pci0000:00/0000:00:02.0/0000:02:00.0"


def nic(**kw: Any) -> dict:
    args = {"cls": "0x020700", "vendor": "0x15b3", "device": "0x1021", "driver": "mlx5_core",
            "speed": "16.0 GT/s PCIe", **kw}
    return {**port("sys/devices/pci0000:00/0000:00:02.0"), **function(NIC, **args)}


def test_nic_from_class_link_and_device_dir(tmp_path: Path) -> None:
    spec = nic()
    spec[f"{NIC}/infiniband/mlx5_0/device"] = ("link", "../../../0000:02:00.0")
    spec["sys/class/infiniband/mlx5_0"] = ("link", f"../../{NIC[len('sys/'):]}/infiniband/mlx5_0")
    spec[f"{NIC}/net/ib0/operstate"] = "up\n"
    spec[f"{NIC}/net/ib1/operstate"] = "down\n"
    (dev,) = collect(tmp_path, spec)
    assert (dev["kind"], dev["vendor"], dev["driver"]) == ("nic", "mellanox", "mlx5_core")
    assert dev["rdma_devices"] == ["mlx5_0"]
    assert dev["net_devices"] == ["ib0", "ib1"]


def test_nic_from_class_link_only(tmp_path: Path) -> None:
    # A captured tree may keep /sys/class/infiniband/<name>/device but not the device's subdirectory.
    spec = nic()
    spec["sys/class/infiniband/mlx5_3/device"] = ("link", "../../../devices/pci0000:00/0000:00:02.0/0000:02:00.0")
    (dev,) = collect(tmp_path, spec)
    assert dev["rdma_devices"] == ["mlx5_3"]
    assert dev["net_devices"] == []


def test_nic_from_device_dir_only(tmp_path: Path) -> None:
    spec = nic(cls="0x020000")
    spec[f"{NIC}/infiniband/rocep2s0/node_type"] = "1: CA\n"
    (dev,) = collect(tmp_path, spec)
    assert (dev["kind"], dev["class_code"], dev["rdma_devices"]) == ("nic", "0x020000", ["rocep2s0"])


def test_soft_rdma_device_without_pci_backing_is_ignored(tmp_path: Path) -> None:
    spec = nic()
    spec["sys/class/infiniband/rxe0/node_type"] = "1: CA\n"  # soft RoCE: no PCI device link
    assert collect(tmp_path, spec) == []


# --- links, broken trees --------------------------------------------------------------------------

def test_absolute_links_are_resolved_inside_the_root(tmp_path: Path) -> None:
    spec = {**port(), **function(GPU)}
    spec["sys/bus/pci/devices/0000:01:00.0"] = ("link", "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0")
    (gpu,) = collect(tmp_path, spec)
    assert gpu["path"] == "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
    assert gpu["parent_bus_id"] == "0000:00:01.0"


def test_separate_sysfs_root(tmp_path: Path) -> None:
    write_tree(tmp_path / "capture", {k[len("sys/"):]: v for k, v in {**port(), **function(GPU)}.items()})
    ctx = ProbeContext(root=tmp_path / "empty", sysfs_root=tmp_path / "capture", env={})
    (gpu,) = pci.collect(ctx)["devices"]
    assert gpu["path"] == "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
    assert gpu["parent_max_link_gen"] == 5


def test_no_pci_bus(tmp_path: Path) -> None:
    write_tree(tmp_path, {"sys/devices/system/cpu/online": "0\n"})
    facts = pci.collect(ProbeContext(root=tmp_path, env={}))
    validate_section("pci", facts)
    assert reason(facts["devices"]) == "not_found"


def test_garbage_files(tmp_path: Path) -> None:
    spec = {**port(), **function(GPU)}
    spec.update({
        f"{GPU}/vendor": "nvidia\n",
        f"{GPU}/device": b"\xff\xfe\n",
        f"{GPU}/numa_node": "zero\n",
        f"{GPU}/local_cpulist": "0-\n",
        f"{GPU}/current_link_width": "x16\n",
        f"{GPU}/max_link_width": "",
    })
    (gpu,) = collect(tmp_path, spec)
    assert reason(gpu["vendor_id"]) == "error" and reason(gpu["vendor"]) == "error"
    assert reason(gpu["device_id"]) == "error"
    assert reason(gpu["numa_node"]) == "error"
    assert reason(gpu["local_cpus"]) == "error"
    assert reason(gpu["link_width"]) == "error"
    assert reason(gpu["max_link_width"]) == "not_found"


def test_unreadable_class_is_listed_as_other(tmp_path: Path) -> None:
    spec = {**port(), **function(GPU)}
    spec[f"{GPU}/class"] = "display\n"
    (dev,) = collect(tmp_path, spec)
    assert dev["kind"] == "other"
    assert reason(dev["class_code"]) == "error"
    assert dev["vendor"] == "nvidia"


def test_symlink_loops(tmp_path: Path) -> None:
    spec = {**port(), **function(GPU)}
    spec[f"{GPU}/driver"] = ("link", "driver")
    spec["sys/bus/pci/devices/0000:07:00.0"] = ("link", "0000:07:00.0")
    devices = by_id(collect(tmp_path, spec))
    assert reason(devices["0000:01:00.0"]["driver"]) == "error"
    looped = devices["0000:07:00.0"]
    assert looped["kind"] == "other"
    assert reason(looped["path"]) == "error" and "loop" in looped["path"].detail
    assert reason(looped["parent_bus_id"]) == "error"


def test_dangling_device_link(tmp_path: Path) -> None:
    spec = {"sys/bus/pci/devices/0000:03:00.0": ("link", "../../../devices/pci0000:00/0000:03:00.0")}
    (dev,) = collect(tmp_path, spec)
    assert dev["kind"] == "other"
    assert reason(dev["path"]) == "not_found"


def test_driver_that_is_not_a_link(tmp_path: Path) -> None:
    spec = {**port(), **function(GPU, driver=None)}
    spec[f"{GPU}/driver"] = "nvidia\n"
    (gpu,) = collect(tmp_path, spec)
    assert reason(gpu["driver"]) == "error"


def test_permission_denied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = {**port(), **function(GPU)}
    spec[f"{GPU}/infiniband/mlx5_9/node_type"] = "1: CA\n"
    write_tree(tmp_path, spec)
    deny(monkeypatch, [tmp_path / GPU / "current_link_speed", tmp_path / GPU / "infiniband",
                       tmp_path / GPU / "driver"])
    (gpu,) = pci.collect(ProbeContext(root=tmp_path, env={}))["devices"]
    assert reason(gpu["link_speed_gts"]) == "no_permission"
    assert reason(gpu["link_gen"]) == "no_permission"
    assert reason(gpu["rdma_devices"]) == "no_permission"
    assert reason(gpu["driver"]) == "no_permission"
    deny(monkeypatch, [tmp_path / "sys/bus/pci/devices"])
    assert reason(pci.collect(ProbeContext(root=tmp_path, env={}))["devices"]) == "no_permission"


def test_odd_bus_entries_are_ignored(tmp_path: Path) -> None:
    spec = {**port(), **function(GPU)}
    spec["sys/bus/pci/devices/README"] = "not a device\n"
    spec["sys/bus/pci/devices/0000:01:00.0.bak"] = "x\n"
    assert [d["bus_id"] for d in collect(tmp_path, spec)] == ["0000:01:00.0"]


def test_live_machine_collects_without_error() -> None:
    facts = pci.collect(ProbeContext())
    validate_section("pci", facts)


# --- resolve_path ---------------------------------------------------------------------------------

def test_resolve_path_chains_and_dotdot(tmp_path: Path) -> None:
    write_tree(tmp_path, {
        "sys/devices/pci0000:00/0000:00:02.0/0000:02:00.0/infiniband/mlx5_0/device": ("link", "../../../0000:02:00.0"),
        "sys/class/infiniband/mlx5_0": ("link", "../../devices/pci0000:00/0000:00:02.0/0000:02:00.0/infiniband/mlx5_0"),
        "a/b": ("link", "/a/c/../d"),
        "a/d/x": "1\n",
    })
    ctx = ProbeContext(root=tmp_path, env={})
    expected = "/sys/devices/pci0000:00/0000:00:02.0/0000:02:00.0"
    assert resolve_path(ctx, "/sys/class/infiniband/mlx5_0/device") == expected
    assert reason(resolve_path(ctx, "/a/b/x")) == "not_found"  # a/c does not exist
    write_tree(tmp_path, {"a/c/.keep": ""})
    assert resolve_path(ctx, "/a/b/x") == "/a/d/x"
    assert resolve_path(ctx, "/../../a/./d/x") == "/a/d/x"


def test_resolve_path_loops(tmp_path: Path) -> None:
    write_tree(tmp_path, {"a/self": ("link", "self"), "a/ping": ("link", "pong"), "a/pong": ("link", "/a/ping")})
    ctx = ProbeContext(root=tmp_path, env={})
    for path in ("/a/self", "/a/ping/x"):
        looped = resolve_path(ctx, path)
        assert reason(looped) == "error" and "loop" in looped.detail  # type: ignore[union-attr]


def test_resolve_path_live_root() -> None:
    assert resolve_path(ProbeContext(), "/proc/self/..") == "/proc"
    assert os.path.exists(ProbeContext().path(str(resolve_path(ProbeContext(), "/proc/self/status"))))


# --- NVSwitches -----------------------------------------------------------------------------------

def test_nvswitches_are_counted_not_listed(tmp_path: Path) -> None:
    """NVIDIA functions of class 0x0680xx are counted; a bridge-other of another vendor is not."""
    spec = {**port(), **function(GPU)}
    for n in range(4):
        spec.update(function(f"sys/devices/pci0000:00/0000:00:0{2 + n}.0", cls="0x068000", device="0x22a3",
                             driver="nvidia-nvswitch"))
    spec.update(function("sys/devices/pci0000:00/0000:00:07.0", cls="0x068000", vendor="0x8086", driver="none"))
    write_tree(tmp_path, spec)
    facts = pci.collect(ProbeContext(root=tmp_path, env={}))
    validate_section("pci", facts)
    assert [d["bus_id"] for d in facts["devices"]] == ["0000:01:00.0"]
    assert facts["nvswitch_count"] == 4
    assert facts["nvswitch_bus_ids"] == ["0000:00:02.0", "0000:00:03.0", "0000:00:04.0", "0000:00:05.0"]


def test_nvswitch_count_unknown_when_functions_were_left_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pci, "MAX_FUNCTIONS", 1)
    spec = {**port(), **function(GPU)}
    write_tree(tmp_path, spec)
    facts = pci.collect(ProbeContext(root=tmp_path, env={}))
    assert reason(facts["nvswitch_count"]) == "not_supported"
    assert facts["nvswitch_count"] == facts["devices"][-1]["class_code"]
    assert facts["nvswitch_bus_ids"] == facts["nvswitch_count"]


def test_nvswitch_count_unknown_without_the_pci_listing(tmp_path: Path) -> None:
    facts = pci.collect(ProbeContext(root=tmp_path, env={}))
    assert reason(facts["nvswitch_count"]) == "not_found" and reason(facts["nvswitch_bus_ids"]) == "not_found"
