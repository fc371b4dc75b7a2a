"""The GPU recovery action (NVML field 230) and the NVLink error counters, against the fake NVML."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpudoctor.facts import Unavailable
from gpudoctor.probes.nvml.replay import ReplayNVML, call_key
from tests.probes.nvml.answers import error, healthy, in_process, make_nvml, probe, set_answer

FIELD = "nvmlDeviceGetFieldValues(230)"


def test_a_list_argument_is_written_as_its_ids() -> None:
    assert call_key("nvmlDeviceGetFieldValues", ([230],)) == FIELD
    assert call_key("nvmlDeviceGetFieldValues", ([230, 38],)) == "nvmlDeviceGetFieldValues(230+38)"
    assert call_key("nvmlDeviceGetNvLinkErrorCounter", (17, 3)) == "nvmlDeviceGetNvLinkErrorCounter(17,3)"


@pytest.mark.parametrize(
    ("value", "fact"),
    [(0, "none"), (1, "gpu_reset"), (2, "node_reboot"), (3, "drain_p2p"), (4, "drain_and_reset"),
     (7, "system_reboot"), (9, "unknown_9")],
)
def test_recovery_action_names(value: int, fact: str) -> None:
    answers = set_answer(healthy(), 1, FIELD, make_nvml.recovery_action(value))
    section = in_process(ReplayNVML(answers))
    assert section["gpus"][1]["recovery_action"] == fact
    assert section["gpus"][0]["recovery_action"] == "none"


def test_a_field_the_driver_lacks_is_not_supported() -> None:
    """Drivers before r570 answer the call but set the entry's own return code."""
    entry: dict[str, Any] = {"fieldId": 230, "nvmlReturn": 3, "value": {"uiVal": 0}}  # NVML_ERROR_NOT_SUPPORTED
    section = in_process(ReplayNVML(set_answer(healthy(), 0, FIELD, [entry])))
    got = section["gpus"][0]["recovery_action"]
    assert isinstance(got, Unavailable) and got.reason == "not_supported" and "field 230" in got.detail
    assert section["gpus"][0]["lost"] is False


def test_recovery_action_unreadable_is_unavailable_with_its_reason(tmp_path: Path) -> None:
    answers = set_answer(healthy(), 0, FIELD, error("NVML_ERROR_NO_PERMISSION"))
    got = probe(tmp_path, answers)["gpus"][0]["recovery_action"]
    assert isinstance(got, Unavailable) and got.reason == "no_permission"


def test_nvlink_error_counters_are_summed_over_the_active_links() -> None:
    answers = healthy()
    dev = answers["devices"][1]
    dev["nvmlDeviceGetNvLinkErrorCounter(0,2)"] = 40  # CRC flit on link 0
    dev["nvmlDeviceGetNvLinkErrorCounter(5,2)"] = 1
    dev["nvmlDeviceGetNvLinkErrorCounter(5,0)"] = 3  # replays on link 5
    dev["nvmlDeviceGetNvLinkState(9)"] = 0  # a link down: its counters are not counted
    dev["nvmlDeviceGetNvLinkErrorCounter(9,3)"] = 1000
    section = in_process(ReplayNVML(answers))
    assert section["gpus"][1]["nvlink_errors"] == {"replay": 3, "recovery": 0, "crc_flit": 41, "crc_data": 0}
    assert section["gpus"][0]["nvlink_errors"] == {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}


def test_nvlink_errors_unavailable_without_links_or_answers() -> None:
    answers = healthy()
    for link in range(18):
        answers["devices"][0][f"nvmlDeviceGetNvLinkState({link})"] = error("NVML_ERROR_NOT_SUPPORTED")
    answers["devices"][1]["nvmlDeviceGetNvLinkErrorCounter(4,1)"] = error("NVML_ERROR_NOT_SUPPORTED")
    section = in_process(ReplayNVML(answers))
    none, missing = section["gpus"][0]["nvlink_errors"], section["gpus"][1]["nvlink_errors"]
    assert isinstance(none, Unavailable) and none.reason == "not_supported" and "no NVLink" in none.detail
    assert isinstance(missing, Unavailable) and missing.reason == "not_supported"
    assert "nvmlDeviceGetNvLinkErrorCounter" in missing.detail
