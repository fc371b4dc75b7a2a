"""fix --numa, topo and select on AMD hosts: their GPUs come from amdgpu's sysfs (no NVML), numbered
as ROCm numbers them (KFD topology order), with free memory from mem_info_vram_*."""

from __future__ import annotations

import copy

from gpudoctor.advice.gpu_select import GIB, plan
from gpudoctor.advice.numa_plan import plan_numa
from gpudoctor.engine.loader import load_rules
from gpudoctor.engine.runner import run_rules
from gpudoctor.model.topology import Topology, gpus_from_facts
from tests.conftest import probed

RULESET = load_rules(include_plugins=False)
MI300X = [f"0000:{b}:00.0" for b in ("15", "35", "55", "75", "95", "b5", "d5", "f5")]


def test_numa_plan_binds_each_mi300x_to_its_socket() -> None:
    numa = plan_numa(probed("mi300x-8gpu-healthy"))
    assert [b.gpu.bus_id for b in numa.bindings] == MI300X
    assert [b.gpu.node for b in numa.bindings] == [0] * 4 + [1] * 4
    assert all(b.bindable for b in numa.bindings)
    assert not any("no NVIDIA GPU" in w for w in numa.warnings)
    assert not any("not planned" in n for n in numa.notes)  # the AMD GPUs are planned, not set aside


def test_amd_gpus_are_numbered_in_kfd_topology_order() -> None:
    facts = copy.deepcopy(probed("mi300x-8gpu-healthy"))
    records = facts["amdgpu"]["gpus"]
    # the firmware put GPU 0000:f5:00.0 first in the KFD topology: ROCm's device 0 is that one
    records[0]["kfd_node"], records[7]["kfd_node"] = records[7]["kfd_node"], records[0]["kfd_node"]
    index = {g.bus_id: g.index for g in gpus_from_facts(facts, Topology(facts))[0]}
    assert index["0000:f5:00.0"] == 0 and index["0000:15:00.0"] == 7
    assert index["0000:35:00.0"] == 1


def test_an_nvidia_host_is_planned_as_before() -> None:
    gpus, source, notes = gpus_from_facts(probed("healthy-2gpu"), Topology(probed("healthy-2gpu")))
    assert [g.index for g in gpus] == [0, 1] and source == "NVML"
    assert not any("AMD" in n for n in notes)


def test_select_ranks_amd_gpus_by_free_vram_and_leaves_out_failing_ones() -> None:
    facts = copy.deepcopy(probed("mi300x-ras-uncorrectable"))
    facts["amdgpu"]["gpus"][0]["vram_used_bytes"] = 150 * GIB  # a job holds most of GPU 0's memory
    findings = run_rules(RULESET, facts, [r for r in RULESET.rules if r.subject == "gpu"])
    chosen = plan(facts, findings, 6, min_free_gib=100)
    assert chosen.ok
    assert [c.bus_id for c in chosen.chosen] == [b for b in MI300X if b not in ("0000:15:00.0", "0000:75:00.0")]
    assert [c.index for c in chosen.chosen] == [1, 2, 4, 5, 6, 7]
    why = dict(chosen.excluded)
    assert why["GPU 0 (0000:15:00.0)"] == "42.0 GiB free, 100 GiB needed"
    assert why["GPU 3 (0000:75:00.0)"] == "failed amd-ras-uncorrectable-errors"
    assert chosen.chosen[0].free_bytes == 192 * GIB - 281 * (1 << 20)


def test_select_respects_cuda_visible_devices_on_an_amd_host() -> None:
    facts = copy.deepcopy(probed("mi300x-8gpu-healthy"))
    facts["host"]["env"]["CUDA_VISIBLE_DEVICES"] = "4,5"
    chosen = plan(facts, [], 2)
    assert [c.index for c in chosen.chosen] == [4, 5]
