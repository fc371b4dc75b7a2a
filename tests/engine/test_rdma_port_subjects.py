"""RDMA port subjects: one per port, with the GPUs model.nics pairs with its NIC and the rate to compare with."""

from __future__ import annotations

from gpudoctor.engine.subjects import rdma_port_subjects, subjects_for
from gpudoctor.facts import Unavailable
from tests.conftest import probed


def test_each_port_names_the_gpus_that_use_its_nic() -> None:
    ports = {p["label"]: p for p in rdma_port_subjects(probed("rdma-degraded"))}
    assert len(ports) == 9  # 8 NDR HCAs and the RoCE storage NIC
    # one HCA per GPU on each switch; the storage NIC on the root port serves none
    assert ports["mlx5_1 port 1"]["gpus"] == ["GPU 2 (0000:3a:00.0)"]
    assert ports["mlx5_6 port 1"]["gpus"] == ["GPU 5 (0000:9b:00.0)"]
    assert ports["mlx5_8 port 1"]["gpus"] == []
    assert (ports["mlx5_1 port 1"]["bus_id"], ports["mlx5_1 port 1"]["numa_node"]) == ("0000:3c:00.0", 0)


def test_a_port_is_compared_with_active_ports_of_its_own_model_and_link_layer() -> None:
    ports = {p["label"]: p for p in rdma_port_subjects(probed("rdma-degraded"))}
    assert ports["mlx5_6 port 1"]["peer_max_rate_gbps"] == 400  # the down mlx5_1 does not count
    assert ports["mlx5_8 port 1"]["peer_max_rate_gbps"] == 200  # the RoCE NIC is another model


def test_without_the_pci_device_there_is_nothing_to_compare_with() -> None:
    facts = dict(probed("rdma-8nic"))
    facts["pci"] = {"devices": []}
    port = rdma_port_subjects(facts)[0]
    assert isinstance(port["peer_max_rate_gbps"], Unavailable) and port["gpus"] == []


def test_subject_references_carry_the_bus_id() -> None:
    refs = subjects_for("rdma_port", probed("rdma-8nic"), [])
    assert [r.label for r, _ in refs][:2] == ["mlx5_0 port 1", "mlx5_1 port 1"]
    assert refs[0][0].kind == "rdma_port" and refs[0][0].bus_id == "0000:1a:00.0"
