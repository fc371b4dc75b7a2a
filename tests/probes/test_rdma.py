"""probes/rdma.py: RDMA ports as sysfs prints them, the verbs device files, and what cannot be read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpudoctor.context import ProbeContext
from gpudoctor.facts import Unavailable
from gpudoctor.probes import rdma
from tests.helpers.hosts import make_hosts
from tests.helpers.sections import section_keys, validate_section
from tests.helpers.tree import deny, write_tree

mh = make_hosts()
NIC = "sys/devices/pci0000:15/0000:15:01.0/0000:1a:00.0"
PORT = f"{NIC}/infiniband/mlx5_0/ports/1"


def hca(**files: str) -> dict[str, Any]:
    """One HCA (mlx5_0 on 0000:1a:00.0, NUMA node 1) with an active NDR port; `files` override
    port files by their name under ports/1 (a value of None drops the file)."""
    base = f"{NIC}/infiniband/mlx5_0"
    spec: dict[str, Any] = {
        f"{NIC}/numa_node": mh.line("1"),
        f"{base}/device": mh.rel_link(f"{base}/device", NIC),
        f"{PORT}/state": mh.line("4: ACTIVE"),
        f"{PORT}/phys_state": mh.line("5: LinkUp"),
        f"{PORT}/rate": mh.line("400 Gb/sec (4X NDR)"),
        f"{PORT}/link_layer": mh.line("InfiniBand"),
        **mh.rdma_port_files(PORT, 0xB83FD20300A10001),
        "sys/class/infiniband/mlx5_0": mh.rel_link("sys/class/infiniband/mlx5_0", base),
    }
    for name, text in files.items():
        key = f"{PORT}/{name.replace('__', '/')}"
        if text is None:
            spec.pop(key, None)
        else:
            spec[key] = mh.line(text)
    return spec


def collect(root: Path, spec: dict[str, Any]) -> dict[str, Any]:
    write_tree(root, spec)
    facts = rdma.collect(ProbeContext(root=root, env={}))
    validate_section("rdma", facts)
    assert set(facts) == section_keys("rdma")
    return facts


def port(facts: dict[str, Any]) -> dict[str, Any]:
    (device,) = facts["devices"]
    (first,) = device["ports"]
    return first  # type: ignore[no-any-return]


def test_an_active_ndr_port(tmp_path: Path) -> None:
    facts = collect(tmp_path, {**hca(), **mh.verbs_files(1)})
    (device,) = facts["devices"]
    assert (device["name"], device["bus_id"], device["numa_node"]) == ("mlx5_0", "0000:1a:00.0", 1)
    assert port(facts) == {
        "port": 1, "state": "ACTIVE", "phys_state": "LinkUp", "rate_gbps": 400, "link_layer": "InfiniBand",
        "counters": {"link_downed": 0, "symbol_error": 0, "port_rcv_errors": 0, "excessive_buffer_overrun_errors": 0},
        "gid_usable": True,
    }
    assert facts["verbs"] == {"kernel_uverbs": ["uverbs0"], "dev_uverbs": ["uverbs0"], "dev_umad": ["umad0"],
                              "dev_rdma_cm": True}


@pytest.mark.parametrize("text, expected", [
    ("1: DOWN", "DOWN"), ("4: ACTIVE", "ACTIVE"), ("5: ACTIVE_DEFER", "ACTIVE_DEFER"), ("7: Phy Test", "Phy Test"),
    ("4: PortConfigurationTraining", "PortConfigurationTraining"),
])
def test_states_are_the_names_the_kernel_prints(text: str, expected: str) -> None:
    assert rdma.parse_state(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("400 Gb/sec (4X NDR)", 400), ("200 Gb/sec (2X NDR)", 200), ("2.5 Gb/sec (1X SDR)", 2.5),
    ("56 Gb/sec (4X FDR)", 56), ("10 Gb/sec (4X SDR)", 10),
])
def test_rates_in_gbps(text: str, expected: float) -> None:
    assert rdma.parse_rate(text) == expected


@pytest.mark.parametrize("text", ["ACTIVE", "4:", "x: ACTIVE", ""])
def test_a_state_not_as_the_kernel_prints_it_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        rdma.parse_state(text)


def test_a_down_port_and_garbage_rate(tmp_path: Path) -> None:
    facts = collect(tmp_path, hca(state="1: DOWN", phys_state="2: Polling", rate="fast"))
    p = port(facts)
    assert (p["state"], p["phys_state"]) == ("DOWN", "Polling")
    assert isinstance(p["rate_gbps"], Unavailable) and p["rate_gbps"].reason == "error"


def test_roce_port_with_only_zero_gids(tmp_path: Path) -> None:
    spec = hca(link_layer="Ethernet")
    spec.update({f"{PORT}/gids/{i}": mh.line(mh.ZERO_GID) for i in range(4)})
    assert port(collect(tmp_path, spec))["gid_usable"] is False


def test_counters_missing_are_not_found_not_zero(tmp_path: Path) -> None:
    spec = {k: v for k, v in hca().items() if "/counters/" not in k}
    counters = port(collect(tmp_path, spec))["counters"]
    assert all(isinstance(v, Unavailable) and v.reason == "not_found" for v in counters.values())


def test_no_rdma_driver_means_no_devices(tmp_path: Path) -> None:
    facts = collect(tmp_path, {"sys/class/net/eth0/operstate": mh.line("up")})
    assert facts["devices"] == []
    assert facts["verbs"] == {"kernel_uverbs": [], "dev_uverbs": [], "dev_umad": [], "dev_rdma_cm": False}


def test_a_container_without_dev_infiniband(tmp_path: Path) -> None:
    spec = {**hca(), **{k: v for k, v in mh.verbs_files(1).items() if k.startswith("sys/")}}
    verbs = collect(tmp_path, spec)["verbs"]
    assert verbs["kernel_uverbs"] == ["uverbs0"] and verbs["dev_uverbs"] == [] and verbs["dev_rdma_cm"] is False


def test_unreadable_as_non_root_is_no_permission(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(tmp_path, {**hca(), **mh.verbs_files(1)})
    deny(monkeypatch, [tmp_path / PORT / "counters", tmp_path / PORT / "gids", tmp_path / "dev/infiniband"])
    facts = rdma.collect(ProbeContext(root=tmp_path, env={}))
    validate_section("rdma", facts)
    p = port(facts)
    assert p["counters"]["symbol_error"].reason == "no_permission"
    assert p["gid_usable"].reason == "no_permission"
    assert facts["verbs"]["dev_uverbs"].reason == "no_permission"


def test_the_h200_vm_shape_rdma_core_loaded_without_devices(tmp_path: Path) -> None:
    # What the real 2 x H200 VM showed: sys/class/infiniband there but empty, /dev/infiniband holding
    # only rdma_cm, no uverbs devices.
    (tmp_path / "sys/class/infiniband").mkdir(parents=True)
    facts = collect(tmp_path, {"dev/infiniband/rdma_cm": ""})
    assert facts["devices"] == []
    assert facts["verbs"] == {"kernel_uverbs": [], "dev_uverbs": [], "dev_umad": [], "dev_rdma_cm": True}
