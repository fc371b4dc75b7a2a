"""The NUMA binding planner on realistic fixture hosts: every strategy, allowed sets, memory policy,
where a GPU's node comes from, CUDA_VISIBLE_DEVICES, and RDMA NIC pairing."""

from __future__ import annotations

from typing import Any

import pytest

from gpudoctor.advice.numa_plan import STRATEGIES, plan_numa
from gpudoctor.facts import Unavailable
from gpudoctor.model.topology import cpulist
from tests.conftest import HOSTS, probed
from tests.helpers.tree import diff_tree

DGX_NODE0 = list(range(0, 56)) + list(range(112, 168))
DGX_NODE1 = list(range(56, 112)) + list(range(168, 224))
DGX_BUSES = ["0000:18:00.0", "0000:19:00.0", "0000:3a:00.0", "0000:3b:00.0",
             "0000:9a:00.0", "0000:9b:00.0", "0000:ba:00.0", "0000:bb:00.0"]
NUMA_HOSTS = sorted(p.name for p in HOSTS.iterdir() if p.is_dir())


def plan(host: str, facts: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    return plan_numa(facts if facts is not None else probed(host), **kwargs)


def siblings_of(facts: dict[str, Any]) -> dict[int, set[int]]:
    return {c["id"]: set(c["siblings"]) for c in facts["numa"]["cpus"]}


# --- node (default) ---------------------------------------------------------------------------------


def test_node_strategy_binds_each_dgx_gpu_to_its_socket_node():
    p = plan("numa-dgx-8gpu")
    assert p.ok and p.gpu_source == "NVML"
    assert [b.gpu.bus_id for b in p.bindings] == DGX_BUSES
    for i, b in enumerate(p.bindings):
        node = 0 if i < 4 else 1
        assert (b.cuda_index, b.gpu.index, b.node, b.gpu.node_source) == (i, i, node, "sysfs numa_node")
        assert b.argv == ["numactl", f"--cpunodebind={node}", f"--preferred={node}"]
        assert b.cpus == (DGX_NODE0 if node == 0 else DGX_NODE1)
        assert (b.cores, len(b.cpus)) == (56, 112)
        assert b.gpu.uuid.startswith("GPU-d9") and b.gpu.name == "NVIDIA H100 80GB HBM3"
        assert not b.warnings


def test_single_node_vm_gets_its_node_from_nvml_and_says_so():
    # The real 2 x H200 capture: sysfs numa_node is -1, NVML's memory affinity names node 0.
    p = plan("h200-x2-real")
    assert p.ok
    for b in p.bindings:
        assert b.node == 0
        assert b.gpu.node_source == "NVML memory affinity; sysfs numa_node is -1"
        assert b.argv == ["numactl", "--cpunodebind=0", "--preferred=0"]
        assert b.cpus == list(range(32))
    assert any("one NUMA node" in n for n in p.notes)


def test_multi_node_vm_without_proximity_gets_a_warning_not_a_guess():
    p = plan("numa-vm-2node")
    assert not p.ok and len(p.bindings) == 4
    for b in p.bindings:
        assert b.node is None and b.argv == [] and b.cpus == []
        assert "NUMA node unknown" in b.warnings[0] and "2-node" in b.warnings[0]


# --- where a GPU's node comes from ---------------------------------------------------------------------


def test_without_nvml_gpus_come_from_sysfs_in_bus_order():
    facts = probed("numa-dgx-8gpu")
    facts["nvml"] = {"status": "library_not_found", "error": "no libnvidia-ml"}
    p = plan("", facts)
    assert p.ok and p.gpu_source == "sysfs"
    assert [(b.gpu.index, b.gpu.bus_id, b.node) for b in p.bindings] == [
        (i, bus, 0 if i < 4 else 1) for i, bus in enumerate(DGX_BUSES)
    ]
    assert all(b.gpu.uuid is None and b.gpu.node_source == "sysfs numa_node" for b in p.bindings)
    assert any("NVML unavailable (library_not_found)" in n for n in p.notes)


def test_numa_node_minus_one_on_a_two_node_host_falls_back_to_nvml_memory_affinity():
    facts = probed("healthy-2gpu")
    for dev in facts["pci"]["devices"]:
        dev["numa_node"] = -1
    p = plan("", facts)
    assert [(b.node, b.gpu.node_source) for b in p.bindings] == [
        (0, "NVML memory affinity; sysfs numa_node is -1"),
        (1, "NVML memory affinity; sysfs numa_node is -1"),
    ]
    assert [b.argv[1] for b in p.bindings] == ["--cpunodebind=0", "--cpunodebind=1"]


def test_numa_node_minus_one_without_nvml_uses_a_narrow_local_cpulist():
    facts = probed("healthy-2gpu")
    for dev in facts["pci"]["devices"]:
        dev["numa_node"] = -1
    facts["nvml"] = {"status": "driver_not_loaded", "error": ""}
    p = plan("", facts)
    assert [(b.node, b.gpu.node_source) for b in p.bindings] == [
        (0, "sysfs local_cpulist; sysfs numa_node is -1"),
        (1, "sysfs local_cpulist; sysfs numa_node is -1"),
    ]


# --- socket ---------------------------------------------------------------------------------------------


def test_socket_strategy_equals_node_with_one_node_per_socket():
    for b_node, b_socket in zip(plan("numa-dgx-8gpu").bindings, plan("numa-dgx-8gpu", strategy="socket").bindings):
        assert b_node.argv == b_socket.argv and b_node.cpus == b_socket.cpus


def sub_numa_clustered_dgx() -> dict[str, Any]:
    """The DGX host with sub-NUMA clustering (SNC2): each socket split into two nodes of 28 cores."""
    facts = probed("numa-dgx-8gpu")
    halves = []
    for first in (0, 28, 56, 84):
        halves.append(list(range(first, first + 28)) + list(range(first + 112, first + 140)))
    facts["numa"]["nodes"] = [
        {"id": i, "cpus": cpus, "memory_total_bytes": 64 << 30, "distances": [10, 12, 21, 21]}
        for i, cpus in enumerate(halves)
    ]
    for cpu in facts["numa"]["cpus"]:
        cpu["node"] = next(i for i, cpus in enumerate(halves) if cpu["id"] in cpus)
    facts["host"]["allowed_mems"] = [0, 1, 2, 3]
    for dev in facts["pci"]["devices"]:
        if dev["bus_id"] in DGX_BUSES:
            dev["numa_node"] = DGX_BUSES.index(dev["bus_id"]) // 2
    return facts


def test_socket_strategy_spans_the_sub_numa_nodes_of_the_gpus_socket():
    facts = sub_numa_clustered_dgx()
    node = plan("", facts)
    socket = plan("", facts, strategy="socket")
    assert node.bindings[0].argv == ["numactl", "--cpunodebind=0", "--preferred=0"]
    assert socket.bindings[0].argv == ["numactl", "--cpunodebind=0,1", "--preferred=0"]
    assert socket.bindings[0].cpus == DGX_NODE0
    assert socket.bindings[6].argv == ["numactl", "--cpunodebind=2,3", "--preferred=3"]
    assert socket.bindings[6].cpus == DGX_NODE1


# --- exclusive --------------------------------------------------------------------------------------------


def test_exclusive_splits_whole_cores_evenly_with_smt_siblings_together():
    facts = probed("numa-dgx-8gpu")
    p = plan("", facts, strategy="exclusive")
    assert p.ok
    sib = siblings_of(facts)
    for node, group, cpus in ((0, p.bindings[:4], DGX_NODE0), (1, p.bindings[4:], DGX_NODE1)):
        sets = [set(b.cpus) for b in group]
        assert set().union(*sets) == set(cpus)  # the whole node is used
        assert sum(len(s) for s in sets) == len(cpus)  # and nothing twice
        for b, s in zip(group, sets):
            assert b.cores == 14 and len(s) == 28
            assert all(sib[c] <= s for c in s)  # both threads of every core
            assert b.argv == ["numactl", f"--physcpubind={cpulist(b.cpus)}", f"--preferred={node}"]
    # contiguous blocks in core order, lowest bus id first
    assert p.bindings[0].argv[1] == "--physcpubind=0-13,112-125"
    assert p.bindings[1].argv[1] == "--physcpubind=14-27,126-139"
    assert p.bindings[7].argv[1] == "--physcpubind=98-111,210-223"


def test_exclusive_gives_leftover_cores_to_the_first_gpus():
    p = plan("numa-1socket-4ccx", strategy="exclusive", visible="0,1,2")
    assert [b.cores for b in p.bindings] == [11, 11, 10]
    assert [len(b.cpus) for b in p.bindings] == [22, 22, 20]  # SMT on: two threads per core
    assert p.bindings[0].argv[1] == "--physcpubind=0-10,32-42"


def test_exclusive_without_smt_counts_each_cpu_as_a_core():
    p = plan("h200-x2-real", strategy="exclusive")
    assert [b.argv[1] for b in p.bindings] == ["--physcpubind=0-15", "--physcpubind=16-31"]
    assert [b.cores for b in p.bindings] == [16, 16]


def test_exclusive_warns_for_a_gpu_left_without_a_core():
    facts = probed("numa-dgx-8gpu")
    facts["host"]["allowed_cpus"] = [0, 112, 1, 113] + DGX_NODE1  # two cores of node 0
    p = plan("", facts, strategy="exclusive")
    node0 = p.bindings[:4]
    assert [b.argv[1] if b.argv else None for b in node0] == [
        "--physcpubind=0,112", "--physcpubind=1,113", None, None
    ]
    for b in node0[2:]:
        assert "only 2 allowed physical core(s) for 4 GPUs" in b.warnings[0]
    assert all(b.bindable for b in p.bindings[4:])
    assert not p.ok


# --- core-complex -------------------------------------------------------------------------------------------


def test_core_complex_gives_each_gpu_one_last_level_cache_group():
    p = plan("numa-1socket-4ccx", strategy="core-complex")
    assert p.ok
    assert [b.argv[1] for b in p.bindings] == [
        "--physcpubind=0-7,32-39",
        "--physcpubind=8-15,40-47",
        "--physcpubind=16-23,48-55",
        "--physcpubind=24-31,56-63",
    ]
    assert all("last-level cache" in b.cpu_note for b in p.bindings)


def test_core_complex_with_fewer_caches_than_gpus_splits_the_shared_cache():
    # One L3 per socket on the DGX host: four GPUs share it and split its cores, never a core twice.
    cc = plan("numa-dgx-8gpu", strategy="core-complex")
    ex = plan("numa-dgx-8gpu", strategy="exclusive")
    assert [b.cpus for b in cc.bindings] == [b.cpus for b in ex.bindings]


def test_core_complex_falls_back_to_exclusive_when_caches_are_unknown():
    facts = probed("numa-1socket-4ccx")
    for cpu in facts["numa"]["cpus"]:
        cpu["llc_cpus"] = Unavailable("not_found", "no cache directory")
    p = plan("", facts, strategy="core-complex")
    assert p.ok
    assert all("last-level cache groups unknown" in b.notes[0] for b in p.bindings)
    assert [b.cores for b in p.bindings] == [8, 8, 8, 8]


# --- what the process may use ----------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("host", NUMA_HOSTS)
def test_no_strategy_hands_out_a_disallowed_cpu(host, strategy):
    facts = probed(host)
    p = plan("", facts, strategy=strategy)
    allowed = set(facts["host"]["allowed_cpus"])
    if isinstance(facts["host"]["cgroup_cpus"], list):
        allowed &= set(facts["host"]["cgroup_cpus"])
    for b in p.bindings:
        assert set(b.cpus) <= allowed
        if b.bindable:
            assert b.cpus
        else:
            assert b.warnings  # a GPU without a command always says why


def test_container_binds_within_its_cpuset_and_warns_for_the_gpu_it_cannot_reach():
    p = plan("numa-container-limited")
    assert [b.gpu.bus_id for b in p.bindings] == ["0000:31:00.0", "0000:b1:00.0"]  # NVML's, not sysfs' four
    near, far = p.bindings
    assert near.argv == ["numactl", "--physcpubind=2-9", "--preferred=0"]  # never --cpunodebind=0 (0-15)
    assert near.cpu_note == "the allowed CPUs of node 0, 8 of 16"
    assert far.argv == [] and far.node == 1
    assert "none is near this GPU" in far.warnings[0] and "CPUs 2-9" in far.warnings[0]
    assert not p.ok
    assert any("0000:17:00.0, 0000:ca:00.0" in n and "not listed by NVML" in n for n in p.notes)
    assert any("numactl was not found" in n for n in p.notes)


def test_cgroup_cpuset_narrower_than_the_affinity_mask_is_respected():
    facts = probed("numa-dgx-8gpu")
    facts["host"]["cgroup_cpus"] = list(range(0, 8))
    p = plan("", facts)
    assert p.bindings[0].argv == ["numactl", "--physcpubind=0-7", "--preferred=0"]
    assert all(not b.bindable for b in p.bindings[4:])


def test_unknown_allowed_cpus_are_said_not_silently_assumed():
    facts = probed("numa-dgx-8gpu")
    facts["host"]["allowed_cpus"] = Unavailable("no_permission", "proc/self/status: permission denied")
    facts["host"]["cgroup_cpus"] = Unavailable("not_found", "no cpuset")
    p = plan("", facts)
    assert any("allowed CPUs unknown" in w for w in p.warnings)
    assert p.bindings[0].argv == ["numactl", "--cpunodebind=0", "--preferred=0"]


# --- memory -------------------------------------------------------------------------------------------------


def test_membind_only_when_asked_and_checked():
    assert plan("numa-dgx-8gpu").bindings[5].argv[-1] == "--preferred=1"
    p = plan("numa-dgx-8gpu", membind=True)
    assert p.bindings[5].argv == ["numactl", "--cpunodebind=1", "--membind=1"]
    assert "strict" in p.bindings[5].notes[0]


def test_membind_refused_for_a_node_outside_the_allowed_memory_nodes():
    facts = probed("numa-dgx-8gpu")
    facts["host"]["allowed_mems"] = [0]
    p = plan("", facts, membind=True)
    assert p.bindings[0].argv[-1] == "--membind=0"
    gpu4 = p.bindings[4]
    assert gpu4.argv == ["numactl", "--cpunodebind=1"]  # neither --membind nor --preferred: both would fail
    assert "--membind not used" in gpu4.warnings[0] and "Mems_allowed_list 0" in gpu4.warnings[0]
    # without --membind the preferred node is dropped for the same reason, with a note
    plain = plan("", facts)
    assert plain.bindings[4].argv == ["numactl", "--cpunodebind=1"]
    assert any("not in the allowed memory nodes" in n for n in plain.bindings[4].notes)


def test_membind_refused_for_a_node_without_memory():
    facts = probed("numa-dgx-8gpu")
    facts["numa"]["nodes"][1]["memory_total_bytes"] = 0
    p = plan("", facts, membind=True)
    assert p.bindings[4].argv == ["numactl", "--cpunodebind=1"]
    assert "has no memory of its own" in p.bindings[4].warnings[0]


def test_membind_warns_when_node_memory_does_not_add_up():
    # The H200 VM reports 6 GiB on its only node while MemTotal is 252 GiB.
    p = plan("h200-x2-real", membind=True)
    assert p.bindings[0].argv[-1] == "--membind=0"
    assert any("adds up to 6 GiB of the host's 252 GiB" in w for w in p.bindings[0].warnings)
    assert not any("adds up" in w for b in plan("h200-x2-real").bindings for w in b.warnings)


# --- CUDA_VISIBLE_DEVICES ----------------------------------------------------------------------------------------


def test_visible_indices_reorder_and_restrict_the_plan():
    p = plan("numa-dgx-8gpu", visible="5,0")
    assert [(b.cuda_index, b.gpu.index, b.node) for b in p.bindings] == [(0, 5, 1), (1, 0, 0)]


def test_visible_devices_recorded_in_the_facts_are_used():
    facts = probed("numa-dgx-8gpu")
    facts["host"]["env"]["CUDA_VISIBLE_DEVICES"] = "6"
    p = plan("", facts)
    assert [b.gpu.bus_id for b in p.bindings] == ["0000:ba:00.0"] and p.visible == "6"


def test_visible_uuid_prefixes_and_mig_instances_map_to_their_gpu():
    p = plan("numa-dgx-8gpu", visible="GPU-d9000003,MIG-GPU-d9000006-4e5f-6a7b-8c9d-0e1f2a3b4c06/1/0")
    assert [b.gpu.index for b in p.bindings] == [3, 6]
    assert any("MIG instance" in n for n in p.notes)


def test_visible_entry_naming_no_gpu_hides_it_and_the_rest():
    p = plan("numa-dgx-8gpu", visible="1,9,2")
    assert [b.gpu.index for b in p.bindings] == [1]
    assert "index 9 names no GPU" in p.warnings[0] and "every entry after it" in p.warnings[0]
    ambiguous = plan("numa-dgx-8gpu", visible="GPU-d90")
    assert ambiguous.bindings == [] and "prefix of 8 GPU UUIDs" in ambiguous.warnings[0]


def test_empty_visible_devices_means_no_gpu():
    p = plan("numa-dgx-8gpu", visible="")
    assert p.bindings == [] and not p.ok and "sees no GPU" in p.warnings[0]


def test_uuids_cannot_be_mapped_without_nvml():
    facts = probed("numa-dgx-8gpu")
    facts["nvml"] = {"status": "timeout", "error": "nvmlInit hung"}
    p = plan("", facts, visible="GPU-d9000003")
    assert p.bindings == [] and "UUIDs are unknown" in p.warnings[0]


def test_mixed_gpu_models_warn_about_cuda_device_order():
    facts = probed("numa-dgx-8gpu")
    facts["pci"]["devices"][0]["device_id"] = "0x2335"  # one H200 among H100s
    assert any("CUDA_DEVICE_ORDER" in w for w in plan("", facts).warnings)
    facts["host"]["env"]["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    assert not any("CUDA_DEVICE_ORDER" in w for w in plan("", facts).warnings)
    assert not any("CUDA_DEVICE_ORDER" in w for w in plan("numa-dgx-8gpu").warnings)  # one model: no doubt


# --- RDMA NICs -----------------------------------------------------------------------------------------------


def test_each_dgx_gpu_pairs_with_the_hca_on_its_pcie_switch():
    p = plan("numa-dgx-8gpu")
    assert [b.nic.nic.name for b in p.bindings] == ["mlx5_0", "mlx5_0", "mlx5_1", "mlx5_1",
                                                    "mlx5_2", "mlx5_2", "mlx5_3", "mlx5_3"]
    assert all(b.nic.relation == "same PCIe switch" for b in p.bindings)
    assert p.bindings[2].nic.env == {"NCCL_IB_HCA": "=mlx5_1", "UCX_NET_DEVICES": "mlx5_1:1"}


def test_nic_pairing_ranks_host_bridge_before_node_before_other_node():
    one = plan("numa-1socket-4ccx")
    assert [b.nic.relation for b in one.bindings] == [
        "same NUMA node, different host bridge",
        "same NUMA node, different host bridge",
        "same PCIe host bridge",
        "same NUMA node, different host bridge",
    ]
    two = plan("healthy-2gpu")
    assert [b.nic.relation for b in two.bindings] == ["same PCIe switch", "another NUMA node"]


def test_equally_near_nics_are_shared_out():
    facts = probed("numa-dgx-8gpu")
    # Move the storage NIC onto switch 0 beside mlx5_0: GPUs 0 and 1 then get one each.
    for dev in facts["pci"]["devices"]:
        if dev["bus_id"] == "0000:1d:00.0":
            dev["path"] = "/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:03.0/0000:1d:00.0"
    p = plan("", facts)
    assert [b.nic.nic.name for b in p.bindings[:2]] == ["mlx5_0", "mlx5_4"]


def test_no_gpu_no_plan():
    facts = probed("numa-dgx-8gpu")
    facts["pci"]["devices"] = []
    facts["nvml"] = {"status": "driver_not_loaded", "error": ""}
    p = plan("", facts)
    assert p.bindings == []
    assert p.warnings[0].startswith("no GPU found (NVML, the PCI bus and amdgpu list no NVIDIA or AMD GPU)")


def test_unknown_strategy_is_refused():
    with pytest.raises(ValueError, match="unknown strategy"):
        plan("numa-dgx-8gpu", strategy="nearest")


def test_kernel_without_numa_gets_warnings_not_commands():
    facts = probed("numa-dgx-8gpu")
    facts["numa"]["nodes"] = Unavailable("not_found", "sys/devices/system/node does not exist")
    p = plan("", facts)
    assert not p.ok and "NUMA nodes unknown" in p.warnings[0]
    assert all(not b.bindable and "NUMA nodes unknown" in b.warnings[0] for b in p.bindings)


def test_gpu_on_a_node_without_cpus_gets_a_warning():
    facts = probed("numa-dgx-8gpu")
    facts["numa"]["nodes"].append({"id": 2, "cpus": [], "memory_total_bytes": 96 << 30, "distances": [20, 20, 10]})
    facts["pci"]["devices"][0]["numa_node"] = 2  # e.g. a CXL or GPU-memory node
    p = plan("", facts)
    assert not p.bindings[0].bindable and "has no CPUs" in p.bindings[0].warnings[0]
    assert all(b.bindable for b in p.bindings[1:])


def test_numa_fixture_hosts_match_their_generator():
    from tests.fixtures.make_numa_hosts import SCENARIOS

    for name, build in SCENARIOS.items():
        problems = diff_tree(HOSTS / name, build())
        assert not problems, f"run tests/fixtures/make_numa_hosts.py: {problems[:5]}"
