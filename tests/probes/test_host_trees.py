"""The generated fixture hosts: in step with make_hosts.py, and what host/pci/numa read from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.context import make_context
from gpudoctor.facts import Unavailable
from gpudoctor.probes import host, numa, pci
from tests.helpers.hosts import HOSTS, make_hosts
from tests.helpers.sections import validate_section
from tests.helpers.tree import diff_tree

SCENARIOS = sorted(make_hosts().SCENARIOS)
HEALTHY_LIKE = ["healthy-2gpu", "pcie-degraded", "thermal-slowdown", "nvml-mismatch"]
NODE0 = list(range(0, 16)) + list(range(32, 48))
NODE1 = list(range(16, 32)) + list(range(48, 64))


def sections(name: str) -> dict:
    ctx = make_context(root=str(HOSTS / name))
    out = {"host": host.collect(ctx), "pci": pci.collect(ctx), "numa": numa.collect(ctx)}
    for section, facts in out.items():
        validate_section(section, facts)
    return out


@pytest.mark.parametrize("name", SCENARIOS)
def test_tree_matches_generator(name: str) -> None:
    problems = diff_tree(HOSTS / name, make_hosts().SCENARIOS[name]())
    assert not problems, f"run tests/fixtures/make_hosts.py: {problems[:5]}"


@pytest.mark.parametrize("name", HEALTHY_LIKE)
def test_healthy_like_hosts(name: str) -> None:
    facts = sections(name)
    h = facts["host"]
    assert (h["hostname"], h["kernel_release"], h["os_id"], h["os_version"], h["os_name"]) == (
        "gpu-node-01", "5.15.0-105-generic", "ubuntu", "22.04", "Ubuntu 22.04.4 LTS")
    assert (h["cpu_count"], h["memory_total_bytes"]) == (64, 527939480 * 1024)
    assert (h["allowed_cpus"], h["allowed_mems"], h["cgroup_cpus"]) == (list(range(64)), [0, 1], list(range(64)))
    assert (h["in_container"], h["wsl"], h["shm_bytes"]) == (False, False, 263969740 * 1024)
    assert (h["memlock_soft_bytes"], h["memlock_hard_bytes"]) == (-1, -1)
    assert h["env"] == {"OMP_NUM_THREADS": "8"}
    assert isinstance(h["arch"], Unavailable)  # a 5.15 kernel has no kernel.arch sysctl

    devices = {d["bus_id"]: d for d in facts["pci"]["devices"]}
    assert list(devices) == ["0000:18:00.0", "0000:19:00.0", "0000:9a:00.0"]
    gpu0, hca, gpu1 = devices.values()
    assert (gpu0["kind"], gpu0["device_id"], gpu0["driver"], gpu0["numa_node"]) == ("gpu", "0x2330", "nvidia", 0)
    assert (gpu0["local_cpus"], gpu0["parent_bus_id"]) == (NODE0, "0000:17:01.0")
    assert (gpu1["numa_node"], gpu1["local_cpus"], gpu1["parent_bus_id"]) == (1, NODE1, "0000:99:01.0")
    assert gpu1["path"] == "/sys/devices/pci0000:98/0000:98:01.0/0000:99:01.0/0000:9a:00.0"
    for gpu in (gpu0, gpu1):
        assert (gpu["link_gen"], gpu["max_link_gen"], gpu["max_link_width"]) == (5, 5, 16)
        assert (gpu["parent_max_link_gen"], gpu["parent_max_link_width"]) == (5, 16)
    assert gpu1["link_width"] == (8 if name == "pcie-degraded" else 16)
    assert gpu0["link_width"] == 16
    assert (hca["kind"], hca["vendor"], hca["driver"], hca["numa_node"]) == ("nic", "mellanox", "mlx5_core", 0)
    assert (hca["rdma_devices"], hca["net_devices"]) == (["mlx5_0"], ["ib0"])

    n = facts["numa"]
    assert (n["node_count"], n["socket_count"], n["smt_active"], n["balancing"]) == (2, 2, True, 0)
    assert [(x["cpus"], x["memory_total_bytes"], x["distances"]) for x in n["nodes"]] == [
        (NODE0, 256 << 30, [10, 21]), (NODE1, 256 << 30, [21, 10])]
    cpus = n["cpus"]
    assert len(cpus) == 64
    assert cpus[40] == {"id": 40, "package": 0, "core": 8, "node": 0, "siblings": [8, 40], "llc_cpus": NODE0}
    assert cpus[17] == {"id": 17, "package": 1, "core": 1, "node": 1, "siblings": [17, 49], "llc_cpus": NODE1}


def test_no_driver_host() -> None:
    facts = sections("no-driver")
    h = facts["host"]
    assert (h["hostname"], h["kernel_release"], h["os_version"], h["arch"]) == (
        "workstation-01", "6.8.0-45-generic", "24.04", "x86_64")
    assert (h["cpu_count"], h["allowed_mems"], h["memlock_soft_bytes"], h["env"]) == (8, [0], 8388608, {})
    (gpu,) = facts["pci"]["devices"]
    assert (gpu["bus_id"], gpu["class_code"], gpu["device_id"], gpu["driver"]) == (
        "0000:01:00.0", "0x030000", "0x2204", "nouveau")
    assert (gpu["link_gen"], gpu["parent_bus_id"], gpu["parent_max_link_gen"]) == (4, "0000:00:01.0", 4)
    n = facts["numa"]
    assert (n["node_count"], n["socket_count"], n["smt_active"]) == (1, 1, False)
    assert [c["siblings"] for c in n["cpus"]] == [[i] for i in range(8)]
    assert all(c["llc_cpus"] == list(range(8)) for c in n["cpus"])


def test_generator_leaves_other_files_alone(tmp_path: Path) -> None:
    other = tmp_path / "healthy-2gpu" / "nvml.json"
    other.parent.mkdir()
    other.write_text("{}")
    assert make_hosts().main(["--dest", str(tmp_path), "healthy-2gpu"]) == 0
    assert other.read_text() == "{}"
    assert make_hosts().main(["--dest", str(tmp_path), "--check", "healthy-2gpu"]) == 0
    (tmp_path / "healthy-2gpu/proc/sys/kernel/hostname").write_text("changed\n")
    assert make_hosts().main(["--dest", str(tmp_path), "--check", "healthy-2gpu"]) == 1
