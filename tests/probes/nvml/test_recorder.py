"""The recorder, and a real GPU where there is one."""

from __future__ import annotations

import copy
import json
import re
import sys
import time
from pathlib import Path

import pynvml  # type: ignore[import-untyped]
import pytest

from gpudoctor.context import ProbeContext
from gpudoctor.facts import Unavailable, to_jsonable
from gpudoctor.probes import nvml
from gpudoctor.probes.nvml import fields, record
from gpudoctor.probes.nvml.recorder import RecordingBackend
from gpudoctor.probes.nvml.replay import ReplayNVML, check_answers
from tests.probes.nvml.answers import (
    HAS_GPU,
    HEALTHY,
    check_shape,
    error,
    healthy,
    in_process,
    make_nvml,
    probe,
    set_answer,
)

# --- recorder and replay ---------------------------------------------------------------------


def test_record_then_replay_round_trip(tmp_path: Path) -> None:
    answers = healthy()
    answers["devices"][0]["nvmlDeviceGetUUID"] = "GPU-3f2a9c4e-1111-2222-3333-444455556666"
    answers["devices"][1]["nvmlDeviceGetSerial"] = "1650123456789"
    answers["devices"][1]["nvmlDeviceGetTemperatureThreshold(3)"] = error("NVML_ERROR_NOT_SUPPORTED")
    source = tmp_path / "source.json"
    source.write_text(json.dumps(answers), encoding="utf-8")
    recorded = record(scrub=True, timeout=10.0, replay=source)
    assert check_answers(recorded) is None
    assert recorded["format"] == 1 and recorded["init"] is None
    text = json.dumps(recorded)
    assert "3f2a9c4e" not in text and "1650123456789" not in text
    assert recorded["devices"][0]["nvmlDeviceGetUUID"] == "GPU-00000000-0000-0000-0000-000000000000"
    assert recorded["devices"][1]["nvmlDeviceGetSerial"] == "SCRUBBED1"
    assert recorded["devices"][1]["nvmlDeviceGetTemperatureThreshold(3)"] == error("NVML_ERROR_NOT_SUPPORTED")
    mask = recorded["devices"][0]["nvmlDeviceGetCpuAffinityWithinScope(0)"]
    assert mask[0] == make_nvml.cpu_mask((0, 15), (32, 47))[0] and not any(mask[1:])  # padded to this host's size
    replayed = probe(tmp_path, recorded)
    expected = copy.deepcopy(HEALTHY)
    expected["gpus"][1]["temperature_max_operating_c"] = Unavailable(
        "not_supported", "nvmlDeviceGetTemperatureThreshold: not supported on this GPU or driver"
    )
    assert replayed == expected


def test_record_init_failure_and_hang(tmp_path: Path) -> None:
    source = tmp_path / "source.json"
    source.write_text(json.dumps(make_nvml.scenarios()["nvml-mismatch"]), encoding="utf-8")
    recorded = record(replay=source)
    assert recorded["init"] == error("NVML_ERROR_LIB_RM_VERSION_MISMATCH") and recorded["devices"] == []
    source.write_text(json.dumps(set_answer(healthy(), 1, "nvmlDeviceGetSerial", {"hang": True})), encoding="utf-8")
    with pytest.raises(RuntimeError, match="stuck in nvmlDeviceGetSerial on GPU 1"):
        record(replay=source, timeout=0.3)


def test_record_live_machine() -> None:
    recorded = record(timeout=20.0)
    assert check_answers(recorded) is None
    if not HAS_GPU:
        assert recorded["init"] in (error("NVML_ERROR_LIBRARY_NOT_FOUND"), error("NVML_ERROR_DRIVER_NOT_LOADED"))


def test_recording_backend_asks_what_the_probe_asks() -> None:
    replay = ReplayNVML(healthy())
    recorder = RecordingBackend(replay, scrub=False)
    assert in_process(recorder) == HEALTHY
    answers = recorder.answers()
    for device in (0, 1):
        assert answers["devices"][device] == healthy()["devices"][device]
    assert answers["system"] == healthy()["system"]


def test_probe_calls_only_real_pynvml_functions() -> None:
    answers = healthy()
    answers["devices"][0]["nvmlDeviceGetCurrentClocksEventReasons"] = error("NVML_ERROR_FUNCTION_NOT_FOUND")
    answers["devices"][0]["nvmlDeviceGetCpuAffinityWithinScope(0)"] = error("NVML_ERROR_FUNCTION_NOT_FOUND")
    replay = ReplayNVML(answers)
    in_process(replay)
    names = {key.split("(")[0] for key in replay.calls}
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" in names and "nvmlDeviceGetCpuAffinity" in names
    assert not [name for name in sorted(names) if not callable(getattr(pynvml, name, None))]

# --- a real GPU ------------------------------------------------------------------------------------

VOLATILE = {
    "memory_used_bytes", "pcie_gen", "pcie_width", "pcie_replay_counter", "pstate", "clocks_event_reasons",
    "temperature_c", "power_draw_w", "utilization_gpu_pct", "processes",
}


@pytest.mark.gpu  # skipped by tests/conftest.py where there is no GPU
def test_real_gpu_probe_and_recording(tmp_path: Path) -> None:
    started = time.monotonic()
    live = nvml.collect(ProbeContext(nvml_timeout=20.0))
    took = time.monotonic() - started
    check_shape(live)
    assert live["status"] == "ok", live["error"]
    assert live["device_count"] == len(live["gpus"]) >= 1
    for gpu in live["gpus"]:
        assert gpu["lost"] is False
        assert re.fullmatch(r"[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", gpu["bus_id"])
        assert re.fullmatch(r"\d+\.\d", gpu["compute_capability"])
        assert isinstance(gpu["memory_total_bytes"], int) and gpu["memory_total_bytes"] > 0
        assert isinstance(gpu["cpu_affinity"], list) and gpu["cpu_affinity"]
    print(f"live NVML probe: {took * 1000:.1f} ms for {live['device_count']} GPU(s)", file=sys.stderr)
    recorded = record(scrub=True, timeout=20.0)
    assert check_answers(recorded) is None
    replayed = probe(tmp_path, recorded)
    for want, got in zip(live["gpus"], replayed["gpus"]):
        for key in fields.GPU_FIELDS:
            if key not in VOLATILE | {"uuid", "serial"}:
                assert to_jsonable(got[key]) == to_jsonable(want[key]), key
        assert got["uuid"] == f"GPU-00000000-0000-0000-0000-{want['index']:012d}"
