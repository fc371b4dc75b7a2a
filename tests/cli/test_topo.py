"""`gpudoctor topo`: a person sees at a glance which GPU and NIC sits on which node, bridge and switch."""

from __future__ import annotations

import json
from pathlib import Path

from gpudoctor.cli.root import run
from tests.conftest import HOSTS, REPO


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def section(text: str, head: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(head))
    end = next((i for i in range(start + 1, len(lines)) if lines[i] == ""), len(lines))
    return lines[start:end]


def test_dgx_tree_puts_each_gpu_and_hca_under_its_node_bridge_and_switch(capsys):
    code, out, err = cli(capsys, "topo", "--root", str(HOSTS / "numa-dgx-8gpu"))
    assert code == 0, err
    assert out.splitlines()[0] == (
        "dgx-01 · 2 socket(s) · 2 NUMA node(s) · 224 CPUs, SMT on · 8 GPU(s) (from NVML) · 5 RDMA NIC(s)"
    )
    node0 = section(out, "NUMA node 0")
    assert node0[0] == "NUMA node 0 · socket 0 · CPUs 0-55,112-167 (56 cores, 112 threads) · 128 GiB"
    assert node0[1:10] == [
        "├── host bridge pci0000:15",
        "│   ├── PCIe switch 0000:16:00.0",
        "│   │   ├── GPU 0  0000:18:00.0  NVIDIA H100 80GB HBM3  Gen5 x16  NVLink 18/18  → mlx5_0",
        "│   │   ├── GPU 1  0000:19:00.0  NVIDIA H100 80GB HBM3  Gen5 x16  NVLink 18/18  → mlx5_0",
        "│   │   └── NIC mlx5_0  0000:1a:00.0  ibp26s0  port 1 ACTIVE 400 Gb/s InfiniBand",
        "│   └── NIC mlx5_4  0000:1d:00.0  enp29s0f0np0  port 1 ACTIVE 200 Gb/s Ethernet",
        "└── host bridge pci0000:37",
        "    └── PCIe switch 0000:38:00.0",
        "        ├── GPU 2  0000:3a:00.0  NVIDIA H100 80GB HBM3  Gen5 x16  NVLink 18/18  → mlx5_1",
    ]
    node1 = "\n".join(section(out, "NUMA node 1"))
    assert "GPU 7  0000:bb:00.0" in node1 and "NIC mlx5_3" in node1 and "GPU 0 " not in node1
    table = section(out, "GPU  bus id")
    assert table[1].split() == ["0", "0000:18:00.0", "0", "0-55,112-167", "18/18", "mlx5_0", "(same", "PCIe",
                                "switch)"]
    assert table[8].split()[:4] == ["7", "0000:bb:00.0", "1", "56-111,168-223"]


def test_container_view_marks_the_cpus_it_may_use(capsys):
    code, out, _ = cli(capsys, "topo", "--root", str(HOSTS / "numa-container-limited"))
    assert code == 0
    assert "NUMA node 0 · socket 0 · CPUs 0-15 (16 cores, 16 threads) · allowed here: 2-9 (8 of 16)" in out
    assert "NUMA node 1 · socket 1 · CPUs 16-31 (16 cores, 16 threads) · no CPU allowed here" in out
    assert "1    0000:b1:00.0  1          none allowed" in out
    assert "0000:17:00.0, 0000:ca:00.0 are on the PCI bus but not listed by NVML" in out


def test_gpus_without_a_node_are_shown_apart(capsys):
    code, out, _ = cli(capsys, "topo", "--root", str(HOSTS / "numa-vm-2node"))
    assert code == 0
    unknown = section(out, "NUMA node unknown")
    assert unknown[1] == "└── host bridge pci0000:00" and len(unknown) == 6
    assert "NUMA node from: sysfs numa_node is -1 and NVML names no single node" in out


def test_topo_of_a_snapshot_in_json(capsys):
    snapshot = str(REPO / "tests" / "fixtures" / "snapshots" / "h200-x2.json")
    code, out, _ = cli(capsys, "topo", "--facts", snapshot, "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert [(g["index"], g["bus_id"], g["numa_node"], g["nvlink_active"]) for g in data["gpus"]] == [
        (0, "0000:00:06.0", 0, 18),
        (1, "0000:00:07.0", 0, 18),
    ]
    assert data["gpus"][0]["numa_node_source"] == "NVML memory affinity; sysfs numa_node is -1"
    # the node's memory is whatever the capture read (it grows as this VM's memory is touched)
    node_memory = json.loads(Path(snapshot).read_text())["numa"]["nodes"][0]["memory_total_bytes"]
    assert data["numa_nodes"] == [{"id": 0, "cpus": "0-31", "cores": 32, "threads": 32, "sockets": [0],
                                   "allowed_cpus": "0-31", "memory_bytes": node_memory}]


def test_json_names_each_gpus_nearest_nic(capsys):
    code, out, _ = cli(capsys, "topo", "--root", str(HOSTS / "numa-1socket-4ccx"), "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert [g["nearest_nic"]["relation"] for g in data["gpus"]] == [
        "same NUMA node, different host bridge", "same NUMA node, different host bridge",
        "same PCIe host bridge", "same NUMA node, different host bridge",
    ]
    assert data["nics"][0]["pci_path"] == ["pci0000:80", "0000:80:03.1", "0000:82:00.0"]


def test_bad_snapshot_exits_2(capsys, tmp_path):
    bad = tmp_path / "host.json"
    bad.write_text("{not json")
    code, out, err = cli(capsys, "topo", "--facts", str(bad))
    assert code == 2 and out == "" and err.count("\n") == 1


def test_nvlink_islands_are_shown(capsys, tmp_path):
    code, out, _ = cli(capsys, "topo", "--root", str(HOSTS / "numa-dgx-8gpu"))
    assert code == 0 and "NVLink islands (peer-to-peer over NVLink): GPUs 0,1,2,3,4,5,6,7" in out
    # two bridged pairs, from a snapshot whose peers were rewired
    code, out, _ = cli(capsys, "probe", "--root", str(HOSTS / "numa-vm-2node"))
    facts = json.loads(out)
    for gpu in facts["nvml"]["gpus"]:
        gpu["nvlink_peers"] = [gpu["index"] ^ 1]
    snapshot = tmp_path / "pairs.json"
    snapshot.write_text(json.dumps(facts))
    code, out, _ = cli(capsys, "topo", "--facts", str(snapshot))
    assert code == 0 and "NVLink islands (peer-to-peer over NVLink): GPUs 0,1 · GPUs 2,3" in out
    code, out, _ = cli(capsys, "topo", "--facts", str(snapshot), "--format", "json")
    data = json.loads(out)
    assert data["nvlink_islands"] == [[0, 1], [2, 3]]
    assert [g["nvlink_peers"] for g in data["gpus"]] == [[1], [0], [3], [2]]
    # no NVLink: no islands line
    code, out, _ = cli(capsys, "topo", "--root", str(HOSTS / "numa-1socket-4ccx"))
    assert code == 0 and "NVLink islands" not in out


def test_each_nic_shows_its_ports_state_rate_and_link_layer(capsys):
    code, out, _ = cli(capsys, "topo", "--root", str(HOSTS / "rdma-degraded"))
    assert code == 0
    assert "NIC mlx5_1  0000:3c:00.0  ibp60s0  port 1 DOWN 10 Gb/s InfiniBand" in out
    assert "NIC mlx5_6  0000:ac:00.0  ibp172s0  port 1 ACTIVE 200 Gb/s InfiniBand" in out
    code, out, _ = cli(capsys, "topo", "--root", str(HOSTS / "rdma-degraded"), "--format", "json")
    ports = {n["rdma_devices"][0]: n["ports"] for n in json.loads(out)["nics"]}
    assert ports["mlx5_1"] == [
        {"rdma_device": "mlx5_1", "port": 1, "state": "DOWN", "rate_gbps": 10, "link_layer": "InfiniBand"}
    ]


def test_nvswitches_and_the_fabric_manager_are_shown(capsys):
    code, out, _ = cli(capsys, "topo", "--root", str(HOSTS / "nvswitch-8gpu"))
    assert code == 0
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("NVSwitches: "))
    assert lines[at : at + 2] == [  # at 100 columns the fabric manager goes on a line of its own
        "NVSwitches: 4 (0000:20:00.0, 0000:21:00.0, 0000:22:00.0, 0000:23:00.0) ·",
        "  fabric manager (nv-fabricmanager): running (pid 1402)",
    ]
    code, out, _ = cli(capsys, "topo", "--root", str(HOSTS / "fabric-manager-stopped"))
    assert code == 0 and out.splitlines()[at + 1].endswith("fabric manager (nv-fabricmanager): not running")
    code, out, _ = cli(capsys, "topo", "--root", str(HOSTS / "nvswitch-8gpu"), "--format", "json")
    assert json.loads(out)["nvswitches"] == {
        "count": 4,
        "bus_ids": ["0000:20:00.0", "0000:21:00.0", "0000:22:00.0", "0000:23:00.0"],
        "fabric_manager_running": True,
        "fabric_manager_pid": 1402,
    }


def test_hosts_without_nvswitches_show_no_nvswitch_line(capsys, tmp_path):
    code, out, _ = cli(capsys, "topo", "--root", str(HOSTS / "numa-dgx-8gpu"))
    assert code == 0 and "NVSwitch" not in out and out.splitlines()[1] == ""
    code, out, _ = cli(capsys, "topo", "--root", str(HOSTS / "numa-dgx-8gpu"), "--format", "json")
    assert json.loads(out)["nvswitches"] == {
        "count": 0, "bus_ids": [], "fabric_manager_running": None, "fabric_manager_pid": None,
    }
    # hidepid: the switches are there, whether the fabric manager runs is not known
    code, out, _ = cli(capsys, "probe", "--root", str(HOSTS / "nvswitch-8gpu"))
    facts = json.loads(out)
    facts["pci"]["fabric_manager_running"] = {"unavailable": "no_permission", "detail": "hidepid"}
    facts["pci"]["fabric_manager_pid"] = {"unavailable": "no_permission", "detail": "hidepid"}
    del facts["pci"]["nvswitch_bus_ids"]  # a snapshot from before the bus ids were recorded
    snapshot = tmp_path / "hidepid.json"
    snapshot.write_text(json.dumps(facts))
    code, out, _ = cli(capsys, "topo", "--facts", str(snapshot))
    assert code == 0
    assert "\nNVSwitches: 4 · fabric manager (nv-fabricmanager): unknown (no permission)\n" in out


def test_amd_host_shows_its_xgmi_hive_and_the_gpus_that_lost_links(capsys):
    # mi300x-xgmi-down: GPU 1 (0000:35:00.0) lost its links to GPUs 0 and 2, so 0 and 2 lost one each
    code, out, err = cli(capsys, "topo", "--root", str(HOSTS / "mi300x-xgmi-down"))
    assert code == 0, err
    assert "│   └── GPU 1  0000:35:00.0  AMD Instinct MI300X OAM  Gen5 x16  XGMI 5/7  → mlx5_0" in out
    table = section(out, "GPU  bus id")
    assert table[0].split() == ["GPU", "bus", "id", "node", "CPUs", "XGMI", "NIC"]
    assert [row.split()[4] for row in table[1:9]] == ["6/7", "5/7", "6/7", "7/7", "7/7", "7/7", "7/7", "7/7"]
    assert "XGMI hive 0x4c2a8f31d6e0b7a5 (peer-to-peer over XGMI): GPUs 0,1,2,3,4,5,6,7, up to 7 links a GPU" in out
    assert "XGMI links down: GPU 0 has 6 of 7, GPU 1 has 5 of 7, GPU 2 has 6 of 7" in out
    healthy = cli(capsys, "topo", "--root", str(HOSTS / "mi300x-8gpu-healthy"))[1]
    assert "XGMI hive 0x4c2a8f31d6e0b7a5" in healthy and "XGMI links down" not in healthy


def test_amd_host_json_gives_each_gpus_xgmi_links_and_the_hive(capsys):
    code, out, _ = cli(capsys, "topo", "--root", str(HOSTS / "mi300x-xgmi-down"), "--format", "json")
    assert code == 0
    view = json.loads(out)
    assert view["xgmi_hives"] == [{"hive_id": "0x4c2a8f31d6e0b7a5", "gpus": list(range(8)), "max_links": 7}]
    assert {g["index"]: g["xgmi_links"] for g in view["gpus"]} == {0: 6, 1: 5, 2: 6, 3: 7, 4: 7, 5: 7, 6: 7, 7: 7}
    radeon = json.loads(cli(capsys, "topo", "--root", str(HOSTS / "radeon-workstation"), "--format", "json")[1])
    assert radeon["xgmi_hives"] == [] and radeon["gpus"][0]["xgmi_links"] == 0


def test_nvidia_host_keeps_its_nvlink_column(capsys):
    out = cli(capsys, "topo", "--root", str(HOSTS / "nvlink-down-8gpu"))[1]
    assert "  local CPUs (allowed)  NVLink  nearest RDMA NIC" in section(out, "GPU  bus id")[0]
    assert "XGMI" not in out
