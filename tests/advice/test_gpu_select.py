"""`gpudoctor select`: the K best free, healthy GPUs, on one NUMA node where possible."""

from __future__ import annotations

import json

from gpudoctor.advice.gpu_select import plan
from gpudoctor.engine.runner import run_rules
from tests.preflight.helpers import DEGRADED, HEALTHY, cli, facts, four_gpu_facts, ruleset

GIB = 1 << 30


def choose(data, k, min_free=0.0):
    return plan(data, run_rules(ruleset(), data), k, min_free)


def use(data, index, free_gib=None, util=None, processes=None):
    gpu = data["nvml"]["gpus"][index]
    if free_gib is not None:
        gpu["memory_used_bytes"] = gpu["memory_total_bytes"] - int(free_gib * GIB)
    if util is not None:
        gpu["utilization_gpu_pct"] = util
    if processes is not None:
        gpu["processes"] = processes
    return data


def test_select_prints_the_value_only(capsys):
    code, out, err = cli(capsys, "select", "-n", "1", "--root", HEALTHY)
    assert code == 0 and out == "0\n" and err == ""
    code, out, err = cli(capsys, "select", "-n", "2", "--root", HEALTHY)
    assert code == 0 and out == "0,1\n"
    assert "span NUMA nodes 0, 1" in err  # the fixture's GPUs sit on two nodes


def test_a_gpu_with_a_failed_check_is_never_chosen(capsys):
    code, out, _ = cli(capsys, "select", "-n", "1", "--root", DEGRADED)
    assert code == 0 and out == "0\n"
    code, out, err = cli(capsys, "select", "-n", "2", "--root", DEGRADED)
    assert code == 1 and out == ""
    assert "1 GPU(s) qualify, 2 asked for" in err and "GPU 1 (0000:9a:00.0): failed pcie-width-degraded" in err


def test_most_free_memory_then_least_busy():
    data = use(use(facts("healthy-2gpu"), 0, free_gib=20), 1, free_gib=60)
    assert choose(data, 1).value() == "1"
    # the GPU with more free memory is busy: an idle one comes first
    data = use(use(facts("healthy-2gpu"), 0, free_gib=50), 1, free_gib=60, util=90, processes=1)
    assert choose(data, 1).value() == "0"
    data = use(use(facts("healthy-2gpu"), 0, util=40), 1, util=10)
    assert choose(data, 1).value() == "1"


def test_min_free_memory(capsys):
    data = use(facts("healthy-2gpu"), 0, free_gib=5)
    selection = choose(data, 1, min_free=10)
    assert selection.value() == "1"
    assert ("GPU 0 (0000:18:00.0)", "5.0 GiB free, 10 GiB needed") in selection.excluded
    code, _, err = cli(capsys, "select", "-n", "1", "--min-free-memory", "500", "--root", HEALTHY)
    assert code == 1 and "GiB needed" in err


def test_several_gpus_come_from_one_numa_node():
    data = four_gpu_facts()  # 0, 1 on node 0; 2, 3 on node 1
    use(data, 0, free_gib=70)  # the single best GPU is on node 0 ...
    use(data, 1, free_gib=5)  # ... but its neighbour is nearly full
    use(data, 2, free_gib=60)
    use(data, 3, free_gib=60)
    selection = choose(data, 2)
    assert selection.value() == "2,3" and not selection.notes
    assert choose(data, 1).value() == "0"
    # three GPUs fit on no node: the best three, and the plan says so
    three = choose(data, 3)
    assert three.value() == "0,2,3" and "span NUMA nodes 0, 1" in three.notes[0]


def test_cuda_visible_devices_limits_the_choice():
    data = facts("healthy-2gpu")
    data["host"]["env"]["CUDA_VISIBLE_DEVICES"] = "1"
    assert choose(data, 1).value() == "1"
    assert not choose(data, 2).ok
    data["host"]["env"]["CUDA_VISIBLE_DEVICES"] = data["nvml"]["gpus"][1]["uuid"]
    assert choose(data, 1).value() == "1"
    # CUDA stops at an entry it cannot use (an ambiguous UUID prefix): nothing after it counts
    data["host"]["env"]["CUDA_VISIBLE_DEVICES"] = "GPU-0000,0"
    assert not choose(data, 1).ok


def test_prohibited_and_occupied_exclusive_gpus_are_left_out():
    data = facts("healthy-2gpu")
    data["nvml"]["gpus"][0]["compute_mode"] = "prohibited"
    data["nvml"]["gpus"][1]["compute_mode"] = "exclusive_process"
    data["nvml"]["gpus"][1]["processes"] = 1
    selection = choose(data, 1)
    assert not selection.ok and len(selection.excluded) == 2


def test_uuids_and_snapshots(capsys, tmp_path):
    snap = tmp_path / "host.json"
    cli(capsys, "probe", "--root", HEALTHY, "-o", str(snap))
    uuids = [g["uuid"] for g in json.loads(snap.read_text())["nvml"]["gpus"]]
    code, out, _ = cli(capsys, "select", "-n", "2", "--uuid", "--facts", str(snap))
    assert code == 0 and out.strip() == ",".join(uuids)


def test_no_gpus_at_all(capsys):
    code, _, err = cli(capsys, "select", "--root", DEGRADED.replace("pcie-degraded", "no-driver"))
    assert code == 1 and "not listed by NVML" in err


def islands(data, *groups):
    """Rewire the GPUs' NVLink peers into these islands; GPUs in none have no NVLink."""
    for gpu in data["nvml"]["gpus"]:
        group = next((g for g in groups if gpu["index"] in g), [])
        gpu["nvlink_peers"] = [j for j in group if j != gpu["index"]]
        gpu["nvlink_active"] = 18 if group else 0
    return data


def test_several_gpus_come_from_one_nvlink_island_before_one_numa_node():
    # bridged pairs that cross the sockets: {0, 2} and {1, 3}; NUMA nodes are {0, 1} and {2, 3}
    data = islands(four_gpu_facts(), [0, 2], [1, 3])
    selection = choose(data, 2)
    assert selection.value() == "0,2"
    assert any("span NUMA nodes 0, 1" in n for n in selection.notes)
    assert not any("NVLink" in n for n in selection.notes)
    # the best island is the one whose second GPU ranks best
    use(data, 0, free_gib=5)
    assert choose(data, 2).value() == "1,3"


def test_island_and_node_together_win_over_either_alone():
    # islands {0, 1, 2} and {3}; nodes {0, 1} and {2, 3}: 0 and 1 share both
    data = islands(four_gpu_facts(), [0, 1, 2])
    use(data, 2, free_gib=79)  # 2 ranks best, but 1 shares 0's node and island
    selection = choose(data, 2)
    assert selection.value() == "0,1" and not selection.notes


def test_no_island_big_enough_is_said():
    data = islands(four_gpu_facts(), [0, 1], [2, 3])
    three = choose(data, 3)
    assert len(three.chosen) == 3
    assert any("no NVLink island has 3 usable GPUs" in n for n in three.notes)
    # a GPU that fails a check breaks its island: the other pair is chosen whole
    data = islands(four_gpu_facts(), [0, 1], [2, 3])
    use(data, 0, free_gib=70)
    data["nvml"]["gpus"][1]["lost"] = True
    assert choose(data, 2).value() == "2,3"


def test_pcie_only_machines_get_no_nvlink_note():
    data = islands(four_gpu_facts())
    three = choose(data, 3)
    assert not any("NVLink" in n for n in three.notes)


def test_islands_from_the_peer_relation():
    from gpudoctor.model.gpus import nvlink_islands

    gpus = [
        {"index": 0, "nvlink_peers": [1]},
        {"index": 1, "nvlink_peers": []},  # one end listing the link is enough
        {"index": 2, "nvlink_peers": [3]},
        {"index": 3, "nvlink_peers": [2, 4]},
        {"index": 4, "nvlink_peers": {"unavailable": "error"}},
        {"index": 5, "nvlink_peers": []},
    ]
    assert nvlink_islands(gpus) == {0: 0, 1: 0, 2: 2, 3: 2, 4: 2}


def test_select_json_names_the_chosen_gpus_and_the_value(capsys):
    code, out, err = cli(capsys, "select", "-n", "2", "--format", "json", "--root", HEALTHY)
    data = json.loads(out)
    assert code == 0 and data["ok"] is True and data["cuda_visible_devices"] == "0,1"
    assert [(g["index"], g["bus_id"], g["numa_node"]) for g in data["chosen"]] == [
        (0, "0000:18:00.0", 0),
        (1, "0000:9a:00.0", 1),
    ]
    first = data["chosen"][0]
    assert first["name"] == "NVIDIA H100 80GB HBM3" and first["uuid"].startswith("GPU-")
    assert first["free_memory_mib"] == (85520809984 - 593494016) // (1 << 20)
    assert any("span NUMA nodes 0, 1" in n for n in data["notes"])
    code, out, _ = cli(capsys, "select", "-n", "1", "--uuid", "--format", "json", "--root", HEALTHY)
    assert code == 0 and json.loads(out)["cuda_visible_devices"] == json.loads(out)["chosen"][0]["uuid"]


def test_select_json_when_too_few_qualify_says_why_and_exits_1(capsys):
    code, out, _ = cli(capsys, "select", "-n", "2", "--format", "json", "--root", DEGRADED)
    data = json.loads(out)
    assert code == 1 and data["ok"] is False and data["cuda_visible_devices"] is None and data["chosen"] == []
    assert data["qualified"] == 1
    assert data["left_out"] == [{"gpu": "GPU 1 (0000:9a:00.0)", "why": "failed pcie-width-degraded"}]


def test_on_an_ascend_host_select_says_it_cannot_choose_npus(capsys):
    from tests.conftest import HOSTS

    root = str(HOSTS / "ascend-910b-healthy")
    code, out, err = cli(capsys, "select", "-n", "2", "--root", root)
    assert code == 1 and out == "" and "Traceback" not in err
    assert "8 Ascend NPU(s) here cannot be chosen: their free memory and load are unknown" in err
    assert "NPU 0 (0000:42:00.0): an Ascend NPU: free memory unknown" in err
    assert "no NVIDIA GPU found" not in err
    code, out, _ = cli(capsys, "select", "--root", root, "--format", "json")
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False and doc["cuda_visible_devices"] is None
    assert [e["gpu"] for e in doc["left_out"]][:1] == ["NPU 0 (0000:42:00.0)"] and len(doc["left_out"]) == 8
    assert "ASCEND_RT_VISIBLE_DEVICES" in doc["notes"][0]


def test_npus_beside_nvidia_gpus_leave_the_gpus_choosable():
    data = facts("healthy-2gpu")
    npu = {"bus_id": "0000:c1:00.0", "kind": "gpu", "vendor": "huawei", "driver": "devdrv_device_driver",
           "class_code": "0x120000"}
    data["pci"]["devices"].append(npu)
    selection = choose(data, 2)
    assert selection.ok and selection.value() == "0,1"
    assert selection.excluded == [("NPU 0 (0000:c1:00.0)", "an Ascend NPU: free memory unknown")]
