"""The GPU view of the snapshot and the one device matcher."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from gpudoctor.engine.subjects import gpu_subjects
from gpudoctor.facts import Unavailable, load_snapshot
from gpudoctor.model.gpus import Gpu, gpus_of, match_gpu
from tests.conftest import HOSTS, SNAPSHOTS, probed

FIXTURE_HOSTS = sorted(p.name for p in HOSTS.iterdir() if p.is_dir())


def _facts(name: str) -> dict:
    return load_snapshot(SNAPSHOTS / name) if name.endswith(".json") else probed(name)


@pytest.mark.parametrize("name", [*FIXTURE_HOSTS, "h200-x2.json"])
def test_the_view_has_the_subjects_gpus_with_their_labels_and_ids(name: str) -> None:
    facts = _facts(name)
    gpus = gpus_of(facts)
    subjects = gpu_subjects(facts)
    assert len(gpus) == len(subjects)
    for gpu, subject in zip(gpus, subjects):
        assert gpu.label == subject["label"]
        assert gpu.bus_id == subject["bus_id"]
        assert gpu.in_nvml == subject["in_nvml"] and gpu.on_pci == subject["on_pci"]
        assert gpu.numa_node == subject["numa_node"]
        for key in ("index", "uuid", "name", "memory_total_bytes"):
            want = subject.get(key)
            assert getattr(gpu, key) == want or (want is None and isinstance(getattr(gpu, key), Unavailable))


def test_the_view_is_frozen_and_reads_nothing_into_missing_values() -> None:
    facts = probed("nvml-mismatch")
    gpus = gpus_of(facts)
    with pytest.raises(dataclasses.FrozenInstanceError):
        gpus[0].label = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        gpus[0].nvml["name"] = "x"  # type: ignore[index]
    off_nvml = [g for g in gpus if g.nvml is None]
    assert off_nvml, "nvml-mismatch has a GPU that NVML does not list"
    for g in off_nvml:
        assert g.on_pci and isinstance(g.bus_id, str)
        assert isinstance(g.index, Unavailable) and isinstance(g.uuid, Unavailable)
        assert g.reading("temperature_c") is g.nvml_missing


def test_without_nvml_every_gpu_on_the_bus_is_there_with_the_reason() -> None:
    facts = probed("no-driver")
    gpus = gpus_of(facts)
    assert gpus and all(g.nvml is None and g.on_pci for g in gpus)
    for g in gpus:
        assert isinstance(g.in_nvml, Unavailable) and g.in_nvml.reason == g.nvml_missing.reason  # type: ignore[union-attr]


def test_a_gpu_whose_bus_id_nvml_lost_is_placed_only_when_certain() -> None:
    facts = probed("healthy-2gpu")
    lost = copy.deepcopy(facts)
    lost["nvml"]["gpus"][1]["bus_id"] = Unavailable("error", "nvmlDeviceGetPciInfo failed")
    gpus = gpus_of(lost)
    assert [g.bus_id for g in gpus] == [g.bus_id for g in gpus_of(facts)]  # the one free nvidia GPU on the bus
    both = copy.deepcopy(lost)
    both["nvml"]["gpus"][0]["bus_id"] = Unavailable("error", "nvmlDeviceGetPciInfo failed")
    placed = gpus_of(both)
    assert [g.label for g in placed[:2]] == ["GPU 0 (bus id unknown)", "GPU 1 (bus id unknown)"]
    assert all(isinstance(g.bus_id, Unavailable) for g in placed[:2])
    assert all(isinstance(g.in_nvml, Unavailable) for g in placed[2:])  # may be one of the two


def _two() -> tuple[Gpu, ...]:
    gpus = gpus_of(probed("healthy-2gpu"))
    assert len(gpus) == 2 and all(isinstance(g.uuid, str) and isinstance(g.bus_id, str) for g in gpus)
    return gpus


def test_the_matcher_takes_the_uuid_first_in_any_case() -> None:
    a, b = _two()
    assert match_gpu((a, b), uuid=str(b.uuid).upper(), bus_id=a.bus_id) is b


def test_the_matcher_takes_the_bus_id_in_any_spelling() -> None:
    a, b = _two()
    nvml_form = "0000" + str(b.bus_id).upper()
    assert match_gpu((a, b), uuid="GPU-not-here", bus_id=nvml_form) is b


def test_the_matcher_uses_the_index_only_when_the_numbering_is_nvmls() -> None:
    a, b = _two()
    assert match_gpu((a, b), index=1) is None
    assert match_gpu((a, b), index=1, index_known=True) is b
    assert match_gpu((a, b), index=True, index_known=True) is None  # a bool is no index
    assert match_gpu((a, b), index=7, index_known=True) is None


def test_a_bus_id_no_gpu_has_means_none_of_them_whatever_the_index() -> None:
    a, b = _two()
    assert match_gpu((a, b), bus_id="0000:ee:00.0", index=0, index_known=True) is None
    assert match_gpu((a, b), bus_id="garbage", index=0, index_known=True) is None


def test_ascend_npus_are_named_npus_numbered_in_bus_order() -> None:
    facts = probed("ascend-910b-healthy")
    npus = [g for g in gpus_of(facts) if g.vendor == "huawei"]
    assert [g.label for g in npus[:2]] == ["NPU 0 (0000:42:00.0)", "NPU 1 (0000:52:00.0)"]
    assert [g.label.split(" (")[0] for g in npus] == [f"NPU {i}" for i in range(8)]
    # the number is a place in bus order, not an NVML index: the index stays unavailable
    assert all(isinstance(g.index, Unavailable) for g in npus)
    # a GPU beside the NPUs keeps its GPU label, and the NPUs their numbers
    amd = {"bus_id": "0000:01:00.0", "kind": "gpu", "vendor": "amd", "driver": "amdgpu", "class_code": "0x030000"}
    facts["pci"]["devices"].insert(0, amd)
    labels = [g.label for g in gpus_of(facts)]
    assert labels[0] == "AMD GPU (0000:01:00.0)" and labels[1] == "NPU 0 (0000:42:00.0)"


def test_an_amd_gpu_is_joined_with_its_amdgpu_record_by_bus_id() -> None:
    facts = copy.deepcopy(probed("mi300x-8gpu-healthy"))
    # the probe's bus ids in another spelling still join
    facts["amdgpu"]["gpus"][1]["bus_id"] = facts["amdgpu"]["gpus"][1]["bus_id"].upper()
    gpus = gpus_of(facts)
    assert [g.vendor for g in gpus] == ["amd"] * 8
    second = gpus[1]
    assert second.bus_id == "0000:35:00.0" and second.amd is not None
    assert second.amd["xgmi_links"] == 7
    assert second.name == "AMD Instinct MI300X OAM"
    assert second.memory_total_bytes == 192 << 30
    subjects = gpu_subjects(facts)
    assert subjects[1]["amd"]["kfd_node"] == 3
    assert subjects[1]["memory_total_bytes"] == 192 << 30
    assert subjects[1]["xgmi_hive_size"] == 8 and subjects[1]["xgmi_hive_max_links"] == 7
    # an AMD GPU the amdgpu probe did not read (bound to vfio-pci, say): no record, with the reason
    del facts["amdgpu"]["gpus"][0]
    first = gpu_subjects(facts)[0]
    assert gpus_of(facts)[0].amd is None
    assert isinstance(first["amd"], Unavailable) and first["amd"].reason == "not_found"


def test_nvidia_gpus_have_no_amd_record() -> None:
    facts = probed("healthy-2gpu")
    assert all(g.amd is None for g in gpus_of(facts))
    assert all(s["amd"].reason == "not_supported" for s in gpu_subjects(facts))
    assert all(s["xgmi_hive_size"].reason == "not_supported" for s in gpu_subjects(facts))


def test_xgmi_hives_group_by_hive_id_and_know_the_most_links_only_when_all_were_counted() -> None:
    from gpudoctor.model.gpus import XgmiHive, xgmi_hives

    records = [
        {"xgmi_hive_id": "0xa", "xgmi_links": 7},
        None,  # an NVIDIA GPU
        {"xgmi_hive_id": "0xb", "xgmi_links": 1},
        {"xgmi_hive_id": "0xa", "xgmi_links": 5},
        {"xgmi_hive_id": "0xb", "xgmi_links": Unavailable("error", "an io_link unreadable")},
        {"xgmi_hive_id": Unavailable("not_supported", "in no hive"), "xgmi_links": 0},
    ]
    assert xgmi_hives(records) == [XgmiHive("0xa", (0, 3), 7), XgmiHive("0xb", (2, 4), None)]
