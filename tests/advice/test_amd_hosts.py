"""fix --numa, topo and select on AMD hosts: their GPUs come from amdgpu's sysfs (no NVML), numbered
as ROCm numbers them (KFD topology order), with free memory from mem_info_vram_*."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from gpudoctor.advice.gpu_select import GIB, Selection, plan
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


def _select_with(env: dict[str, str], k: int = 2) -> Selection:
    facts = copy.deepcopy(probed("mi300x-8gpu-healthy"))
    facts["host"]["env"].update(env)
    return plan(facts, [], k)


def test_select_keeps_to_hip_visible_devices_on_an_amd_host() -> None:
    chosen = _select_with({"HIP_VISIBLE_DEVICES": "6,7"})
    assert chosen.value() == "6,7"
    assert ("GPU 0 (0000:15:00.0)", "not in HIP_VISIBLE_DEVICES") in chosen.excluded
    assert "only GPUs in HIP_VISIBLE_DEVICES=6,7 were considered" in chosen.notes
    # HIP ignores the entries from the first it cannot use: 9 and all after it
    assert _select_with({"HIP_VISIBLE_DEVICES": "3,9,4"}, 1).value() == "3"
    assert not _select_with({"HIP_VISIBLE_DEVICES": "3,9,4"}).ok
    assert not _select_with({"HIP_VISIBLE_DEVICES": ""}, 1).ok


def test_rocr_visible_devices_narrows_and_renumbers_the_choice_as_hip_sees_it() -> None:
    # ROCr leaves GPUs 5, 2 and 7, which HIP calls 0, 1 and 2: what select prints is HIP's
    chosen = _select_with({"ROCR_VISIBLE_DEVICES": "5,2,7"}, 3)
    assert chosen.value() == "0,1,2"
    assert [c.bus_id for c in sorted(chosen.chosen, key=lambda c: c.index)] == [MI300X[5], MI300X[2], MI300X[7]]
    assert ("GPU 0 (0000:15:00.0)", "not in ROCR_VISIBLE_DEVICES") in chosen.excluded
    assert any(n.endswith("GPU 5 is 0, GPU 2 is 1, GPU 7 is 2") for n in chosen.notes)
    # HIP_VISIBLE_DEVICES then counts ROCr's list: its 1 is GPU 2
    both = _select_with({"ROCR_VISIBLE_DEVICES": "5,2,7", "HIP_VISIBLE_DEVICES": "1"}, 1)
    assert both.value() == "1" and both.chosen[0].bus_id == MI300X[2]
    assert not _select_with({"ROCR_VISIBLE_DEVICES": "5,2,7", "HIP_VISIBLE_DEVICES": "1"}, 2).ok


def test_visible_devices_by_uuid_cannot_be_matched_on_an_amd_host() -> None:
    # the facts have no AMD GPU UUIDs: ROCr's list could renumber the GPUs, so none is chosen
    rocr = _select_with({"ROCR_VISIBLE_DEVICES": "GPU-4b2c1a9f8d3e6f7a"}, 1)
    assert not rocr.ok and len(rocr.excluded) == 8
    assert rocr.excluded[0][1].startswith("ROCR_VISIBLE_DEVICES names GPUs by UUID")
    hip = _select_with({"HIP_VISIBLE_DEVICES": "GPU-4b2c1a9f8d3e6f7a"})
    assert hip.value() == "0,1" and "it was not used to narrow the choice" in hip.notes[0]


def test_select_on_a_host_without_gpus_says_so_whatever_the_vendor(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from gpudoctor.cli.root import run
    from gpudoctor.facts import dumps

    facts = copy.deepcopy(probed("radeon-workstation"))  # no NVML, and its one AMD GPU taken away
    facts["pci"]["devices"] = [d for d in facts["pci"]["devices"] if d.get("vendor") != "amd"]
    facts["amdgpu"]["gpus"] = []
    snapshot = tmp_path / "facts.json"
    snapshot.write_text(dumps(facts))
    code = run(["select", "--facts", str(snapshot)])
    err = capsys.readouterr().err
    assert code == 1
    assert "no GPU found (NVML, the PCI bus and amdgpu list no NVIDIA or AMD GPU)" in err
