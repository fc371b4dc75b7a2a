"""probes/acs.py: which ports lie between GPUs and NICs, and what their ACS capability says."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from gpudoctor.context import ProbeContext
from gpudoctor.facts import Unavailable
from gpudoctor.probes import acs, pci
from tests.helpers.hosts import make_hosts
from tests.helpers.sections import def_keys, validate_section
from tests.helpers.tree import write_tree

ROOT = "sys/devices/pci0000:16/0000:16:01.0"
UP = f"{ROOT}/0000:17:00.0"
DOWN = [f"{UP}/0000:18:0{i}.0" for i in range(3)]


def function(path: str, cls: str = "0x030200", **kw: Any) -> dict:
    defaults: dict[str, Any] = dict(cls=cls, vendor="0x10de", device="0x2330", numa_node=0, local_cpus="0-7",
                                    speed="32.0 GT/s PCIe", width=16, driver="nvidia")
    defaults.update(kw)
    return make_hosts().pci_function(path, **defaults)  # type: ignore[no-any-return]


def switch_host(control: int = 0x001D, up_acs: bool = False) -> dict:
    """Root port -> switch upstream port -> three downstream ports: two GPUs and an RDMA NIC."""
    mh = make_hosts()
    spec: dict = {}
    for path in (ROOT, UP, *DOWN):
        spec.update(function(path, cls="0x060400", vendor="0x1000", device="0xc030", driver="pcieport"))
    spec[f"{ROOT}/config"] = mh.port_config(4, 0x001D, device="0x352a")
    spec[f"{UP}/config"] = mh.port_config(5, control, acs=up_acs)
    for path in DOWN:
        spec[f"{path}/config"] = mh.port_config(6, control)
    spec.update(function(f"{DOWN[0]}/0000:19:00.0"))
    spec.update(function(f"{DOWN[1]}/0000:1a:00.0"))
    nic = f"{DOWN[2]}/0000:1b:00.0"
    spec.update(function(nic, cls="0x020700", vendor="0x15b3", device="0x1021", driver="mlx5_core"))
    spec[f"{nic}/infiniband/mlx5_0/node_type"] = "1: CA\n"
    return spec


def ports(root: Path, spec: dict) -> list[dict]:
    write_tree(root, spec)
    section = pci.collect(ProbeContext(root=root, env={}))
    validate_section("pci", section)
    out = section["acs_ports"]
    assert isinstance(out, list)
    for entry in out:
        assert set(entry) == def_keys("acs_port")
    return out


def test_only_the_ports_on_gpu_and_nic_paths_are_read(tmp_path: Path) -> None:
    out = ports(tmp_path, switch_host())
    by_bus = {p["bus_id"]: p for p in out}
    # the root port is above the switch where the traffic turns: not on any path
    assert sorted(by_bus) == ["0000:17:00.0", "0000:18:00.0", "0000:18:01.0", "0000:18:02.0"]
    assert by_bus["0000:18:00.0"]["paths"] == ["0000:19:00.0 <-> 0000:1a:00.0", "0000:19:00.0 <-> 0000:1b:00.0"]
    down = by_bus["0000:18:01.0"]
    assert down["port_type"] == "downstream"
    assert (down["acs"], down["acs_control"]) == (True, 0x1D)
    assert (down["request_redirect"], down["completion_redirect"], down["source_validation"]) == (True, True, True)
    up = by_bus["0000:17:00.0"]
    assert up["port_type"] == "upstream" and up["acs"] is False and up["request_redirect"] is False
    assert isinstance(up["acs_control"], Unavailable) and up["acs_control"].reason == "not_found"


def test_acs_off_decodes_as_off(tmp_path: Path) -> None:
    out = ports(tmp_path, switch_host(control=0))
    assert all(p["request_redirect"] is False and p["completion_redirect"] is False for p in out)


def test_devices_meeting_only_in_the_root_complex_name_no_port(tmp_path: Path) -> None:
    spec: dict = {}
    for bus in ("16", "98"):
        spec.update(function(f"sys/devices/pci0000:{bus}/0000:{bus}:01.0", cls="0x060400", driver="pcieport"))
    spec.update(function("sys/devices/pci0000:16/0000:16:01.0/0000:17:00.0"))
    spec.update(function("sys/devices/pci0000:98/0000:98:01.0/0000:99:00.0"))
    assert ports(tmp_path, spec) == []


@pytest.mark.parametrize("size, reason", [(64, "no_permission"), (128, "no_permission")])
def test_a_read_as_a_user_is_no_permission(tmp_path: Path, size: int, reason: str) -> None:
    # the kernel gives a reader without CAP_SYS_ADMIN only the first 64 bytes (128 for CardBus)
    spec = switch_host()
    for path in DOWN:
        spec[f"{path}/config"] = spec[f"{path}/config"][:size]
    out = {p["bus_id"]: p for p in ports(tmp_path, spec)}
    for key in acs.PORT_KEYS:
        value = out["0000:18:00.0"][key]
        assert isinstance(value, Unavailable) and value.reason == reason, key
    assert "only to root" in out["0000:18:00.0"]["request_redirect"].detail


def test_256_bytes_means_no_extended_space_not_a_guess(tmp_path: Path) -> None:
    spec = switch_host()
    spec[f"{DOWN[0]}/config"] = spec[f"{DOWN[0]}/config"][:256]
    entry = {p["bus_id"]: p for p in ports(tmp_path, spec)}["0000:18:00.0"]
    assert entry["port_type"] == "downstream"  # from the standard capability list, below 256
    assert isinstance(entry["request_redirect"], Unavailable)
    assert entry["request_redirect"].reason == "not_supported"


def test_a_missing_config_file_is_not_found(tmp_path: Path) -> None:
    spec = switch_host()
    del spec[f"{DOWN[0]}/config"]
    entry = {p["bus_id"]: p for p in ports(tmp_path, spec)}["0000:18:00.0"]
    assert isinstance(entry["acs"], Unavailable) and entry["acs"].reason == "not_found"


def _config(ext: dict[int, int]) -> bytes:
    raw = bytearray(make_hosts().port_config(6, 0, acs=False))
    raw[0x100:0x104] = bytes(4)
    for offset, header in ext.items():
        raw[offset:offset + 4] = header.to_bytes(4, "little")
    return bytes(raw)


def test_extended_capability_walk_is_loop_safe_and_bounded() -> None:
    # AER at 0x100 pointing at itself: a loop, not a hang
    assert acs.find_ext_capability(_config({0x100: 0x0001 | 0x100 << 20}), acs.EXT_CAP_ID_ACS) is None
    # a pointer below 0x100 (into standard space) or past the end ends the walk
    assert acs.find_ext_capability(_config({0x100: 0x0001 | 0x040 << 20}), acs.EXT_CAP_ID_ACS) is None
    # all ones (a device that fell off the bus) and all zeros: no capabilities
    assert acs.find_ext_capability(_config({0x100: 0xFFFFFFFF}), acs.EXT_CAP_ID_ACS) is None
    assert acs.find_ext_capability(_config({}), acs.EXT_CAP_ID_ACS) is None
    # a long chain of other capabilities: found when within the kernel's limit
    chain = {0x100 + 8 * i: 0x000B | (0x100 + 8 * (i + 1)) << 20 for i in range(100)}
    chain[0x100 + 8 * 100] = acs.EXT_CAP_ID_ACS
    assert acs.find_ext_capability(_config(chain), acs.EXT_CAP_ID_ACS) == 0x100 + 800
    # the next-pointer's low two bits are reserved: the kernel masks them (& 0xffc), so do we
    assert acs.find_ext_capability(_config({0x100: 0x0001 | 0x14B << 20, 0x148: 0x000D}), 0x0D) == 0x148


def test_standard_capability_walk_is_loop_safe() -> None:
    raw = bytearray(make_hosts().port_config(6, 0))
    raw[0x40:0x42] = bytes([0x01, 0x40])  # a power management capability pointing at itself
    assert isinstance(acs.port_type(bytes(raw)), Unavailable)


def test_ports_past_the_cap_or_the_deadline_are_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = switch_host()
    write_tree(tmp_path, spec)
    devices = pci.collect(ProbeContext(root=tmp_path, env={}))["devices"]
    ctx = ProbeContext(root=tmp_path, env={})
    late = acs.collect_ports(ctx, devices, time.monotonic() - 1)
    assert isinstance(late, list) and len(late) == 1
    assert late[0]["acs"].reason == "timeout" and "4 ports" in late[0]["acs"].detail
    monkeypatch.setattr(acs, "MAX_PORTS", 2)
    capped = acs.collect_ports(ctx, devices, time.monotonic() + 60)
    assert isinstance(capped, list) and len(capped) == 3
    assert capped[2]["acs"].reason == "not_supported"


def test_nearest_nic_is_the_one_sharing_the_longest_chain() -> None:
    def dev(kind: str, path: str) -> dict:
        return {"bus_id": path.rsplit("/", 1)[-1], "kind": kind, "path": path}

    far = dev("nic", "/sys/devices/pci0000:16/0000:16:02.0/0000:20:00.0")
    near = dev("nic", f"/{UP}/0000:18:02.0/0000:1b:00.0")
    gpu = dev("gpu", f"/{UP}/0000:18:00.0/0000:19:00.0")
    crossing = acs.paths([gpu, far, near])
    assert sorted(crossing) == ["0000:17:00.0", "0000:18:00.0", "0000:18:02.0"]


@pytest.mark.parametrize("bus_id", ["0000:17:01.0; reboot", "$(reboot)", "0000:17:01.0\n", "17:01.0"])
def test_a_snapshot_cannot_smuggle_a_shell_word_into_the_setpci_line(bus_id: str) -> None:
    # the fix prints `setpci -s {port.bus_id} ...`: the schema admits only a bus id there
    import fastjsonschema

    with pytest.raises(fastjsonschema.JsonSchemaValueException):
        validate_section("pci", {"devices": [], "acs_ports": [{"bus_id": bus_id}]})
