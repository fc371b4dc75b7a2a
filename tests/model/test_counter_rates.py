"""model/counter_rates.py: the growth of the NVLink and RDMA error counters between two reads,
only where the reads are comparable (one boot, one GPU, one port)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpudoctor.facts import Unavailable
from gpudoctor.model.counter_rates import counter_rate, elapsed, from_previous, from_samples, same_boot

BOOT = "3b9e6c1a-52d4-4f0e-9a7b-1c2d3e4f5a60"
UUID = "GPU-00000000-0000-0000-0000-000000000001"


def snapshot(uptime: float = 1000.0, when: str = "2026-12-01T12:00:00+00:00", boot: Any = BOOT) -> dict[str, Any]:
    links = [{"link": n, "replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0} for n in range(2)]
    return {
        "meta": {"collected_at": when},
        "host": {"boot_id": boot, "uptime_s": uptime},
        "nvml": {"status": "ok", "gpus": [{"index": 0, "uuid": UUID, "bus_id": "0000:18:00.0",
                                           "nvlink_link_errors": links}]},
        "rdma": {"devices": [{"name": "mlx5_0", "bus_id": "0000:17:00.0", "node_guid": "0c42:a103:0045:6f80",
                              "ports": [{"port": 1, "counters": {"link_downed": 0, "symbol_error": 10,
                                                                 "port_rcv_errors": 0,
                                                                 "excessive_buffer_overrun_errors": 0}}]}]},
    }


def later(seconds: float = 600.0) -> dict[str, Any]:
    return snapshot(1000.0 + seconds, "2026-12-01T12:10:00+00:00")


def test_growth_per_link_and_port_per_hour() -> None:
    a, b = snapshot(), later()
    b["nvml"]["gpus"][0]["nvlink_link_errors"][1]["crc_flit"] = 30
    b["rdma"]["devices"][0]["ports"][0]["counters"]["symbol_error"] = 40
    section = from_previous(a, b)
    assert section["source"] == "previous" and section["seconds"] == 600.0
    gpu = section["nvlink"][0]
    assert gpu["uuid"] == UUID and len(gpu["rates"]) == 8  # 2 links x 4 counters
    crc = next(r for r in gpu["rates"] if r["link"] == 1 and r["counter"] == "crc_flit")
    assert crc == {"link": 1, "counter": "crc_flit", "before": 0, "after": 30, "delta": 30, "per_hour": 180.0,
                   "reset": False}
    symbols = next(r for r in section["rdma"][0]["rates"] if r["counter"] == "symbol_error")
    assert symbols["delta"] == 30 and symbols["per_hour"] == 180.0


def test_a_counter_that_went_down_is_a_reset_not_a_rate() -> None:
    entry = counter_rate("symbol_error", 40, 0, 300.0)
    assert entry is not None and entry["reset"] is True and entry["delta"] == -40
    assert isinstance(entry["per_hour"], Unavailable) and "reset" in entry["per_hour"].detail


@pytest.mark.parametrize("before, after", [(None, 3), (3, "4"), (True, 5), (Unavailable("not_found"), 1)])
def test_a_read_that_is_not_a_count_gives_no_entry(before: Any, after: Any) -> None:
    assert counter_rate("replay", before, after, 60.0) is None


def test_another_boot_is_not_compared() -> None:
    a, b = snapshot(boot="7f00d2b4-91c3-4e6a-8b5d-0a1b2c3d4e5f"), later()
    problem = same_boot(a, b)
    assert problem is not None and problem.reason == "not_supported" and "another boot" in problem.detail
    section = from_previous(a, b)
    assert isinstance(section["seconds"], Unavailable) and section["nvlink"] == section["rdma"] == problem


def test_without_boot_ids_the_kernel_start_time_decides() -> None:
    a, b = snapshot(boot=None), later()
    del a["host"]["boot_id"]
    assert same_boot(a, b) is None  # 12:00 - 1000 s == 12:10 - 1600 s
    b["host"]["uptime_s"] = 100.0  # the kernel started 25 minutes later: a reboot in between
    problem = same_boot(a, b)
    assert problem is not None and "another boot" in problem.detail


def test_an_older_snapshot_without_boot_id_or_uptime_is_not_compared() -> None:
    a, b = snapshot(), later()
    a["host"] = {"hostname": "old"}
    problem = same_boot(a, b)
    assert problem is not None and problem.reason == "not_supported" and "older gpudoctor" in problem.detail


def test_elapsed_prefers_the_uptimes_then_the_clock() -> None:
    a, b = snapshot(), later(590.0)
    assert elapsed(a, b) == 590.0  # the uptimes' difference, whatever the clock said
    a["host"]["uptime_s"] = Unavailable("not_found")
    assert elapsed(a, b) == 600.0
    not_older = elapsed(later(), snapshot())
    assert isinstance(not_older, Unavailable) and not_older.reason == "error"


def test_another_gpu_in_the_slot_is_not_compared() -> None:
    a, b = snapshot(), later()
    a["nvml"]["gpus"][0]["uuid"] = "GPU-ffffffff-0000-0000-0000-000000000000"
    rates = from_previous(a, b)["nvlink"][0]["rates"]
    assert isinstance(rates, Unavailable) and "UUID" in rates.detail


def test_a_previous_snapshot_without_per_link_counters() -> None:
    a, b = snapshot(), later()
    del a["nvml"]["gpus"][0]["nvlink_link_errors"]
    rates = from_previous(a, b)["nvlink"][0]["rates"]
    assert isinstance(rates, Unavailable) and rates.reason == "not_supported" and "per-link" in rates.detail


def test_a_link_that_came_up_since_is_left_out() -> None:
    a, b = snapshot(), later()
    a["nvml"]["gpus"][0]["nvlink_link_errors"].pop()
    rates = from_previous(a, b)["nvlink"][0]["rates"]
    assert {r["link"] for r in rates} == {0}


def test_another_nic_under_the_same_name_is_not_compared() -> None:
    a, b = snapshot(), later()
    b["rdma"]["devices"][0]["node_guid"] = "0c42:a103:0045:7000"
    rates = from_previous(a, b)["rdma"][0]["rates"]
    assert isinstance(rates, Unavailable) and "another NIC" in rates.detail


def test_a_port_missing_from_the_previous_snapshot() -> None:
    a, b = snapshot(), later()
    a["rdma"]["devices"] = []
    rates = from_previous(a, b)["rdma"][0]["rates"]
    assert isinstance(rates, Unavailable) and rates.reason == "not_supported"


def test_nvml_down_now_or_then() -> None:
    a, b = snapshot(), later()
    b["nvml"] = {"status": "timeout", "gpus": Unavailable("timeout", "NVML did not answer")}
    assert from_previous(a, b)["nvlink"] == Unavailable("timeout", "NVML did not answer")
    a2, b2 = snapshot(), later()
    a2["nvml"] = {"status": "driver_not_loaded"}
    then = from_previous(a2, b2)["nvlink"]
    assert isinstance(then, Unavailable) and then.reason == "not_supported"


def test_garbage_shapes_give_no_traceback() -> None:
    a, b = snapshot(), later()
    for snap in (a, b):
        snap["nvml"]["gpus"] += ["x", 3, {"uuid": 7}, {"uuid": UUID, "nvlink_link_errors": ["x", {"link": "y"}]}]
        snap["rdma"]["devices"] += [None, {"name": "mlx5_9", "ports": "no"}, {"name": 5, "ports": [None, {}]}]
        snap["meta"]["collected_at"] = "not a time"
    section = from_previous(a, b)
    assert section["seconds"] == 600.0 and isinstance(section["nvlink"], list)


def test_samples_compare_each_gpu_with_its_own_first_read() -> None:
    first = snapshot()
    second = copy.deepcopy(first["nvml"]["gpus"][0]["nvlink_link_errors"])
    second[0]["replay"] = 2
    ports_later = copy.deepcopy(first["rdma"])
    ports_later["devices"][0]["ports"][0]["counters"]["link_downed"] = 1
    section = from_samples(first, {0: second}, {0: 10.0}, ports_later, 10.5, 10.0)
    assert section["source"] == "sample" and section["seconds"] == 10.0
    replay = next(r for r in section["nvlink"][0]["rates"] if r["link"] == 0 and r["counter"] == "replay")
    assert replay["delta"] == 2 and replay["per_hour"] == 720.0 and section["nvlink"][0]["seconds"] == 10.0
    downed = next(r for r in section["rdma"][0]["rates"] if r["counter"] == "link_downed")
    assert downed["per_hour"] == pytest.approx(342.857, abs=0.001)


def test_a_second_read_that_did_not_come() -> None:
    first = snapshot()
    hung = Unavailable("timeout", "the second NVML read: NVML did not answer")
    section = from_samples(first, hung, {}, Unavailable("error", "the rdma probe did not run"), hung, 10.0)
    assert section["nvlink"] == hung and section["rdma"].reason == "error"
    missing = from_samples(first, {}, {}, first["rdma"], 10.0, 10.0)["nvlink"][0]
    assert isinstance(missing["rates"], Unavailable) and missing["rates"].reason == "not_found"
