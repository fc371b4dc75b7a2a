"""The NVML probe against the fake NVML (recorded answers), and against a real GPU where there is one."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import fastjsonschema
import psutil
import pynvml  # type: ignore[import-untyped]
import pytest

from gpudoctor.context import ProbeContext, make_context
from gpudoctor.facts import Unavailable, to_jsonable
from gpudoctor.probes import nvml
from gpudoctor.probes.nvml import child, fields, record
from gpudoctor.probes.nvml.record import RecordingBackend
from gpudoctor.probes.nvml.replay import ReplayNVML, call_key, check_answers
from gpudoctor.probes.nvml.section import Assembler

HOSTS = Path(__file__).resolve().parents[1] / "fixtures" / "hosts"
MAKE_NVML = Path(__file__).resolve().parents[1] / "fixtures" / "make_nvml.py"


def _load_make_nvml() -> Any:
    spec = importlib.util.spec_from_file_location("make_nvml", MAKE_NVML)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_nvml = _load_make_nvml()

HAS_GPU = os.path.exists("/dev/nvidiactl")

GPU0 = {
    "index": 0,
    "lost": False,
    "name": "NVIDIA H100 80GB HBM3",
    "uuid": "GPU-00000000-0000-0000-0000-000000000000",
    "serial": "SCRUBBED0",
    "bus_id": "0000:18:00.0",
    "pci_device_id": "0x233010de",
    "compute_capability": "9.0",
    "architecture": "hopper",
    "memory_total_bytes": 85520809984,
    "memory_used_bytes": 566 * (1 << 20),
    "pcie_gen": 5,
    "pcie_max_gen": 5,
    "pcie_gpu_max_gen": 5,
    "pcie_width": 16,
    "pcie_max_width": 16,
    "pcie_replay_counter": 0,
    "pstate": 0,
    "clocks_event_reasons": 1,
    "temperature_c": 34,
    "temperature_slowdown_c": 89,
    "temperature_shutdown_c": 92,
    "temperature_max_operating_c": 87,
    "power_draw_w": 70.0,
    "power_limit_w": 700.0,
    "power_default_limit_w": 700.0,
    "persistence_mode": True,
    "ecc_enabled": True,
    "ecc_pending_enabled": True,
    "ecc_uncorrected_volatile": 0,
    "ecc_uncorrected_aggregate": 0,
    "ecc_corrected_volatile": 0,
    "retired_pages_sbe": 0,
    "retired_pages_dbe": 0,
    "retired_pages_pending": False,
    "remapped_rows_correctable": 0,
    "remapped_rows_uncorrectable": 0,
    "remapped_rows_pending": False,
    "remapped_rows_failed": False,
    "mig_enabled": False,
    "mig_pending_enabled": False,
    "nvlink_links": 18,
    "nvlink_active": 18,
    "nvlink_peers": [1],
    "compute_mode": "default",
    "cpu_affinity": list(range(0, 16)) + list(range(32, 48)),
    "memory_affinity": [0],
    "numa_node_id": Unavailable("not_supported", "nvmlDeviceGetNumaNodeId: not supported on this GPU or driver"),
    "utilization_gpu_pct": 0,
    "processes": 0,
}
GPU1 = dict(
    GPU0,
    index=1,
    uuid="GPU-00000000-0000-0000-0000-000000000001",
    serial="SCRUBBED1",
    bus_id="0000:9a:00.0",
    temperature_c=35,
    cpu_affinity=list(range(16, 32)) + list(range(48, 64)),
    nvlink_peers=[0],
    memory_affinity=[1],
)
HEALTHY: dict[str, Any] = {
    "status": "ok",
    "error": "",
    "driver_version": "550.90.07",
    "cuda_driver_version": "12.4",
    "nvml_version": "12.550.90.07",
    "device_count": 2,
    "gpus": [GPU0, GPU1],
}


def _schema_validator() -> Any:
    from gpudoctor.schemas import load_schema

    schema = load_schema("facts")
    sub = dict(schema["properties"]["nvml"])
    sub["$defs"] = schema["$defs"]
    return fastjsonschema.compile(sub)


VALIDATE = _schema_validator()


def check_shape(section: dict[str, Any]) -> None:
    """Exactly the schema's keys, and valid against it."""
    from gpudoctor.schemas import load_schema

    schema = load_schema("facts")
    assert list(section) == list(schema["properties"]["nvml"]["properties"])
    if isinstance(section["gpus"], list):
        for gpu in section["gpus"]:
            assert list(gpu) == list(schema["$defs"]["nvml_gpu"]["properties"])
    VALIDATE(to_jsonable(section))


def healthy() -> dict[str, Any]:
    return make_nvml.healthy()  # type: ignore[no-any-return]


def probe(tmp_path: Path, answers: Any, timeout: float = 5.0) -> dict[str, Any]:
    path = tmp_path / "nvml.json"
    path.write_text(answers if isinstance(answers, str) else json.dumps(answers), encoding="utf-8")
    section = nvml.collect(ProbeContext(nvml_replay=path, nvml_timeout=timeout))
    check_shape(section)
    return section


def in_process(backend: Any) -> dict[str, Any]:
    sink = Assembler()
    fields.read_nvml(backend, sink, 1, 1)
    sink.finished()
    return sink.result()


def set_answer(answers: dict[str, Any], gpu: int | None, key: str, value: Any) -> dict[str, Any]:
    (answers["system"] if gpu is None else answers["devices"][gpu])[key] = value
    return answers


def error(name: str) -> dict[str, str]:
    return {"error": name}


@pytest.fixture
def forked_pids(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """PIDs of the children the probe forks (the child itself sees 0 and records nothing)."""
    pids: list[int] = []
    real_fork = os.fork

    def spy() -> int:
        pid = real_fork()
        if pid:
            pids.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", spy)
    return pids


def assert_no_child_left(pids: list[int]) -> None:
    assert psutil.Process().children(recursive=True) == []
    for pid in pids:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


# --- healthy and fixture hosts ------------------------------------------------------------


def test_healthy_fixture_root(forked_pids: list[int]) -> None:
    ctx = make_context(root=str(HOSTS / "healthy-2gpu"))
    assert ctx.nvml_replay == HOSTS / "healthy-2gpu" / "nvml.json"
    section = nvml.collect(ctx)
    check_shape(section)
    assert section == HEALTHY
    assert len(forked_pids) == 1
    assert_no_child_left(forked_pids)


def test_fixture_files_are_up_to_date() -> None:
    for name, answers in make_nvml.scenarios().items():
        path = HOSTS / name / "nvml.json"
        assert path.read_text(encoding="utf-8") == make_nvml.render(answers), f"run {MAKE_NVML}"
        assert check_answers(answers) is None


def test_pcie_degraded_fixture() -> None:
    section = nvml.collect(make_context(root=str(HOSTS / "pcie-degraded")))
    gpu = section["gpus"][1]
    assert (gpu["bus_id"], gpu["pcie_width"], gpu["pcie_max_width"], gpu["pstate"]) == ("0000:9a:00.0", 8, 16, 0)
    assert section["gpus"][0] == GPU0


def test_thermal_slowdown_fixture() -> None:
    section = nvml.collect(make_context(root=str(HOSTS / "thermal-slowdown")))
    gpu = section["gpus"][0]
    assert (gpu["clocks_event_reasons"], gpu["temperature_c"], gpu["pstate"]) == (0x60, 91, 0)
    assert section["gpus"][1] == GPU1


@pytest.mark.parametrize(
    ("scenario", "status", "reason"),
    [("no-driver", "driver_not_loaded", "driver_not_loaded"), ("nvml-mismatch", "driver_library_mismatch", "error")],
)
def test_init_failure_fixtures(scenario: str, status: str, reason: str) -> None:
    section = nvml.collect(make_context(root=str(HOSTS / scenario)))
    check_shape(section)
    assert section["status"] == status
    for key in ("driver_version", "cuda_driver_version", "nvml_version", "device_count", "gpus"):
        assert isinstance(section[key], Unavailable) and section[key].reason == reason


# --- nvmlInit failures -------------------------------------------------------------------

INIT_ERRORS = [
    ("NVML_ERROR_LIBRARY_NOT_FOUND", "library_not_found", "not_found", "ldconfig"),
    ("NVML_ERROR_DRIVER_NOT_LOADED", "driver_not_loaded", "driver_not_loaded", "modprobe nvidia"),
    ("NVML_ERROR_NO_PERMISSION", "no_permission", "no_permission", "/dev/nvidiactl"),
    ("NVML_ERROR_LIB_RM_VERSION_MISMATCH", "driver_library_mismatch", "error", "reboot"),
    ("NVML_ERROR_GPU_IS_LOST", "error", "error", "GPU is lost"),
    ("NVML_ERROR_UNKNOWN", "error", "error", "Unknown Error"),
    ("NVML_ERROR_NOT_SUPPORTED", "error", "error", "Not Supported"),
    ("NVML_ERROR_FUNCTION_NOT_FOUND", "error", "error", "Function Not Found"),
    ("NVML_ERROR_INSUFFICIENT_SIZE", "error", "error", "Insufficient Size"),
]


@pytest.mark.parametrize(("name", "status", "reason", "advice"), INIT_ERRORS)
def test_init_errors(tmp_path: Path, name: str, status: str, reason: str, advice: str) -> None:
    section = probe(tmp_path, dict(healthy(), init=error(name)))
    assert section["status"] == status
    assert name in section["error"] and section["error"].startswith("nvmlInit")
    for key in ("driver_version", "cuda_driver_version", "nvml_version", "device_count", "gpus"):
        fact = section[key]
        assert isinstance(fact, Unavailable), key
        assert fact.reason == reason
        assert name in fact.detail and advice in fact.detail


def test_missing_recording_is_library_not_found(tmp_path: Path) -> None:
    path = tmp_path / "absent" / "nvml.json"
    section = nvml.collect(ProbeContext(nvml_replay=path))
    check_shape(section)
    assert section["status"] == "library_not_found"
    assert section["driver_version"] == Unavailable("not_found", f"no recorded NVML answers at {path}")
    assert section["gpus"] == Unavailable("not_found", f"no recorded NVML answers at {path}")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"format": 1, "devices": [', "invalid JSON at line 1 column"),
        ("[1, 2]", "top level is a list, not an object"),
        ('{"format": 2}', "format is 2, this gpudoctor reads format 1"),
        ('{"format": 1, "devices": {}}', "'devices' is not a list"),
        ('{"format": 1, "init": 5}', "init must be null"),
        ('{"format": 1, "devices": [{"nvmlDeviceGetName": {"error": "NVML_ERROR_BOGUS"}}]}',
         "devices[0].nvmlDeviceGetName: unknown NVML error NVML_ERROR_BOGUS"),
        ('{"format": 1, "system": {"nvmlDeviceGetCount": 3}, "devices": [{}]}', "only 1 devices are recorded"),
        ("\xff\xfe", "invalid JSON"),
        ('{"format": 1, "devices": [{"nvmlDeviceGetTemperature": NaN}]}', "NaN is not JSON"),
    ],
)
def test_corrupt_recording_is_an_error_not_an_exception(tmp_path: Path, text: str, problem: str) -> None:
    section = probe(tmp_path, text)
    assert section["status"] == "error"
    for key in ("driver_version", "device_count", "gpus"):
        fact = section[key]
        assert isinstance(fact, Unavailable) and fact.reason == "error"
        assert "recorded NVML answers" in fact.detail and problem in fact.detail, fact.detail
    assert problem in section["error"]


# --- per-GPU failures --------------------------------------------------------------------

CALL_ERRORS = [
    ("NVML_ERROR_NOT_SUPPORTED", "not_supported", False, "nvmlDeviceGetPowerUsage: not supported"),
    ("NVML_ERROR_NO_PERMISSION", "no_permission", False, "insufficient permissions"),
    ("NVML_ERROR_FUNCTION_NOT_FOUND", "not_supported", False, "driver too old for nvmlDeviceGetPowerUsage"),
    ("NVML_ERROR_GPU_IS_LOST", "error", True, "GPU is lost (NVML_ERROR_GPU_IS_LOST)"),
    ("NVML_ERROR_UNKNOWN", "error", True, "Unknown Error (NVML_ERROR_UNKNOWN)"),
    ("NVML_ERROR_INSUFFICIENT_SIZE", "error", False, "Insufficient Size (NVML_ERROR_INSUFFICIENT_SIZE)"),
    ("NVML_ERROR_DRIVER_NOT_LOADED", "driver_not_loaded", False, "NVML_ERROR_DRIVER_NOT_LOADED"),
    ("NVML_ERROR_LIB_RM_VERSION_MISMATCH", "error", False, "NVML_ERROR_LIB_RM_VERSION_MISMATCH"),
    ("NVML_ERROR_TIMEOUT", "timeout", False, "NVML_ERROR_TIMEOUT"),
]


@pytest.mark.parametrize("gpu", [0, 1])
@pytest.mark.parametrize(("name", "reason", "lost", "detail"), CALL_ERRORS)
def test_per_gpu_call_errors(tmp_path: Path, gpu: int, name: str, reason: str, lost: bool, detail: str) -> None:
    section = probe(tmp_path, set_answer(healthy(), gpu, "nvmlDeviceGetPowerUsage", error(name)))
    assert section["status"] == "ok"
    entry = section["gpus"][gpu]
    assert entry["lost"] is lost
    fact = entry["power_draw_w"]
    assert isinstance(fact, Unavailable) and fact.reason == reason and detail in fact.detail, fact
    assert entry["temperature_max_operating_c"] == 87  # read before
    if lost:
        # the rest of that GPU is skipped, saying why
        later = entry["power_limit_w"]
        assert isinstance(later, Unavailable) and later.reason == "error"
        assert later.detail.startswith(f"not read: GPU {gpu} was lost") and name in later.detail
        assert isinstance(entry["processes"], Unavailable)
    else:
        assert entry["power_limit_w"] == 700.0 and entry["processes"] == 0
    assert section["gpus"][1 - gpu] == HEALTHY["gpus"][1 - gpu]


@pytest.mark.parametrize("gpu", [0, 1])
def test_handle_failure_keeps_gpu_as_lost(tmp_path: Path, gpu: int) -> None:
    answers = set_answer(healthy(), gpu, "nvmlDeviceGetHandleByIndex", error("NVML_ERROR_GPU_IS_LOST"))
    section = probe(tmp_path, answers)
    entry = section["gpus"][gpu]
    assert entry["index"] == gpu and entry["lost"] is True
    for key in fields.GPU_FIELDS:
        assert isinstance(entry[key], Unavailable) and entry[key].reason == "error"
        assert entry[key].detail.startswith(f"no NVML handle for GPU {gpu}: nvmlDeviceGetHandleByIndex: GPU is lost")
    # the other GPU is read in full, without the unreachable one among its NVLink peers
    assert section["gpus"][1 - gpu] == dict(HEALTHY["gpus"][1 - gpu], nvlink_peers=[])


def test_clocks_event_reasons_fall_back_to_throttle_reasons(tmp_path: Path) -> None:
    answers = healthy()
    for device in answers["devices"]:
        device["nvmlDeviceGetCurrentClocksEventReasons"] = error("NVML_ERROR_FUNCTION_NOT_FOUND")
    answers["devices"][1]["nvmlDeviceGetCurrentClocksThrottleReasons"] = 0x4
    section = probe(tmp_path, answers)
    assert section["gpus"][1]["clocks_event_reasons"] == 0x4
    # neither name answers: unavailable, from the older call
    gone = section["gpus"][0]["clocks_event_reasons"]
    assert isinstance(gone, Unavailable) and gone.reason == "not_supported"
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" in gone.detail


class _OldBindings(ReplayNVML):
    """An nvidia-ml-py that predates some functions: they are AttributeErrors."""

    MISSING = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCpuAffinityWithinScope",
               "nvmlDeviceGetGpuMaxPcieLinkGeneration")

    def __getattr__(self, name: str) -> Any:
        if name in self.MISSING:
            raise AttributeError(name)
        return super().__getattr__(name)


def test_old_bindings_fall_back_or_say_upgrade() -> None:
    answers = healthy()
    answers["devices"][0]["nvmlDeviceGetCurrentClocksThrottleReasons"] = 0x1
    answers["devices"][0]["nvmlDeviceGetCpuAffinity"] = make_nvml.cpu_mask((0, 3))
    section = in_process(_OldBindings(answers))
    gpu = section["gpus"][0]
    assert gpu["clocks_event_reasons"] == 1
    assert gpu["cpu_affinity"] == [0, 1, 2, 3]
    assert gpu["pcie_gpu_max_gen"] == Unavailable(
        "not_supported", "the installed nvidia-ml-py has no nvmlDeviceGetGpuMaxPcieLinkGeneration; upgrade nvidia-ml-py"
    )


def test_cpu_affinity_falls_back_when_driver_lacks_scope_call(tmp_path: Path) -> None:
    answers = healthy()
    answers["devices"][0]["nvmlDeviceGetCpuAffinityWithinScope(0)"] = error("NVML_ERROR_FUNCTION_NOT_FOUND")
    answers["devices"][0]["nvmlDeviceGetCpuAffinity"] = make_nvml.cpu_mask((8, 9), (100, 101))
    section = probe(tmp_path, answers)
    assert section["gpus"][0]["cpu_affinity"] == [8, 9, 100, 101]  # recorded words are never dropped


@pytest.mark.parametrize(("arch", "expected"), [(7, "ampere"), (10, "blackwell"), (13, None), (0xFFFFFFFF, None)])
def test_architecture_names(tmp_path: Path, arch: int, expected: str | None) -> None:
    section = probe(tmp_path, set_answer(healthy(), 0, "nvmlDeviceGetArchitecture", arch))
    got = section["gpus"][0]["architecture"]
    if expected is None:
        assert isinstance(got, Unavailable) and got.reason == "not_supported" and str(arch) in got.detail
    else:
        assert got == expected


def test_nvlink_counts(tmp_path: Path) -> None:
    answers = healthy()
    pcie_card, a100 = answers["devices"]
    for link in range(18):
        pcie_card[f"nvmlDeviceGetNvLinkState({link})"] = error("NVML_ERROR_NOT_SUPPORTED")
        a100[f"nvmlDeviceGetNvLinkState({link})"] = (
            error("NVML_ERROR_INVALID_ARGUMENT") if link >= 12 else int(link not in (3, 7))
        )
    section = probe(tmp_path, answers)
    assert (section["gpus"][0]["nvlink_links"], section["gpus"][0]["nvlink_active"]) == (0, 0)
    assert (section["gpus"][1]["nvlink_links"], section["gpus"][1]["nvlink_active"]) == (12, 10)


def test_nvlink_other_errors_are_unavailable(tmp_path: Path) -> None:
    answers = set_answer(healthy(), 1, "nvmlDeviceGetNvLinkState(2)", error("NVML_ERROR_NO_PERMISSION"))
    gpu = probe(tmp_path, answers)["gpus"][1]
    for key in ("nvlink_links", "nvlink_active"):
        assert isinstance(gpu[key], Unavailable) and gpu[key].reason == "no_permission"
    assert gpu["compute_mode"] == "default"


def test_unusual_values(tmp_path: Path) -> None:
    answers = healthy()
    gpu = answers["devices"][0]
    gpu["nvmlDeviceGetPciInfo"]["busId"] = "00010000:C1:1F.7"
    gpu["nvmlDeviceGetComputeMode"] = 3
    gpu["nvmlDeviceGetRetiredPages(1)"] = [4096, 8192]
    gpu["nvmlDeviceGetRetiredPagesPendingStatus"] = 1
    gpu["nvmlDeviceGetRemappedRows"] = [2, 1, 1, 0]
    gpu["nvmlDeviceGetMigMode"] = [0, 1]
    gpu["nvmlDeviceGetComputeRunningProcesses"] = [{"pid": 10, "usedGpuMemory": 1}, {"pid": 11, "usedGpuMemory": 2}]
    gpu["nvmlDeviceGetNumaNodeId"] = 4
    gpu["nvmlDeviceGetTemperature(0)"] = "hot"
    answers["system"]["nvmlSystemGetCudaDriverVersion"] = 13000
    section = probe(tmp_path, answers)
    got = section["gpus"][0]
    assert section["cuda_driver_version"] == "13.0"
    assert got["bus_id"] == "10000:c1:1f.7"
    assert got["compute_mode"] == "exclusive_process"
    assert (got["retired_pages_dbe"], got["retired_pages_pending"]) == (2, True)
    assert (got["remapped_rows_correctable"], got["remapped_rows_uncorrectable"]) == (2, 1)
    assert (got["remapped_rows_pending"], got["remapped_rows_failed"]) == (True, False)
    assert (got["mig_enabled"], got["mig_pending_enabled"]) == (False, True)
    assert (got["processes"], got["numa_node_id"]) == (2, 4)
    bad = got["temperature_c"]
    assert isinstance(bad, Unavailable) and bad.reason == "error" and "unexpected answer 'hot'" in bad.detail


def test_device_count_failure(tmp_path: Path) -> None:
    section = probe(tmp_path, set_answer(healthy(), None, "nvmlDeviceGetCount", error("NVML_ERROR_UNKNOWN")))
    assert section["status"] == "error" and "nvmlDeviceGetCount" in section["error"]
    assert section["driver_version"] == "550.90.07"
    assert isinstance(section["gpus"], Unavailable) and section["gpus"].reason == "error"


def test_system_call_errors(tmp_path: Path) -> None:
    answers = set_answer(healthy(), None, "nvmlSystemGetCudaDriverVersion", error("NVML_ERROR_FUNCTION_NOT_FOUND"))
    del answers["system"]["nvmlSystemGetNVMLVersion"]
    section = probe(tmp_path, answers)
    assert section["status"] == "ok"
    assert section["cuda_driver_version"] == Unavailable(
        "not_supported", "driver too old for nvmlSystemGetCudaDriverVersion"
    )
    assert isinstance(section["nvml_version"], Unavailable) and section["nvml_version"].reason == "not_supported"
    assert section["gpus"] == [GPU0, GPU1]


# --- hangs, deaths, deadlines ------------------------------------------------------------


def test_hang_in_init_times_out_and_kills_the_child(tmp_path: Path, forked_pids: list[int]) -> None:
    started = time.monotonic()
    section = probe(tmp_path, dict(healthy(), init={"hang": True}), timeout=0.5)
    assert time.monotonic() - started < 0.5 + 1.0
    assert section["status"] == "timeout"
    assert "stuck in nvmlInit;" in section["error"] and "0.5 s" in section["error"]
    for key in ("driver_version", "cuda_driver_version", "nvml_version", "device_count", "gpus"):
        fact = section[key]
        assert isinstance(fact, Unavailable) and fact.reason == "timeout" and "nvmlInit" in fact.detail
    assert len(forked_pids) == 1
    assert_no_child_left(forked_pids)


def test_hang_in_a_gpu_call_keeps_what_was_read(tmp_path: Path, forked_pids: list[int]) -> None:
    answers = set_answer(healthy(), 1, "nvmlDeviceGetPowerUsage", {"hang": True})
    started = time.monotonic()
    section = probe(tmp_path, answers, timeout=0.5)
    assert time.monotonic() - started < 0.5 + 1.0
    assert section["status"] == "timeout"
    assert "stuck in nvmlDeviceGetPowerUsage on GPU 1" in section["error"]
    assert section["driver_version"] == "550.90.07" and section["device_count"] == 2
    assert section["gpus"][0] == GPU0
    stuck = section["gpus"][1]
    assert stuck["lost"] is True
    assert stuck["temperature_max_operating_c"] == 87 and stuck["bus_id"] == "0000:9a:00.0"
    for key in ("power_draw_w", "power_limit_w", "processes"):
        fact = stuck[key]
        assert isinstance(fact, Unavailable) and fact.reason == "timeout"
        assert "nvmlDeviceGetPowerUsage on GPU 1" in fact.detail
    assert_no_child_left(forked_pids)


def test_hang_on_one_gpu_leaves_the_others_read(tmp_path: Path, forked_pids: list[int]) -> None:
    answers = set_answer(healthy(), 0, "nvmlDeviceGetNvLinkState(5)", {"hang": True})
    section = probe(tmp_path, answers, timeout=0.3)
    assert section["status"] == "timeout"
    assert "stuck in nvmlDeviceGetNvLinkState(5) on GPU 0;" in section["error"]
    assert section["gpus"][0]["lost"] is True and section["gpus"][0]["mig_enabled"] is False
    assert isinstance(section["gpus"][0]["nvlink_links"], Unavailable)
    assert section["gpus"][1] == GPU1  # GPUs are read in parallel threads
    assert_no_child_left(forked_pids)


def test_two_hung_gpus_are_both_named(tmp_path: Path) -> None:
    answers = set_answer(healthy(), 0, "nvmlDeviceGetSerial", {"hang": True})
    set_answer(answers, 1, "nvmlDeviceGetMigMode", {"hang": True})
    section = probe(tmp_path, answers, timeout=0.3)
    assert "stuck in nvmlDeviceGetSerial on GPU 0 and nvmlDeviceGetMigMode on GPU 1;" in section["error"]
    assert section["gpus"][0]["lost"] is True and section["gpus"][1]["lost"] is True
    assert section["gpus"][1]["remapped_rows_failed"] is False


def test_assembler_marks_unstarted_gpus() -> None:
    sink = Assembler()
    sink.system("device_count", 3)
    sink.calling("nvmlDeviceGetName", 0)
    sink.gpu(0, "name", "x")
    section = sink.result(("timeout", "NVML did not answer"))
    assert section["gpus"][0]["lost"] is True and section["gpus"][0]["name"] == "x"
    assert section["gpus"][0]["uuid"] == Unavailable("timeout", "not read: NVML did not answer")
    assert section["gpus"][2]["lost"] is False
    assert section["gpus"][2]["uuid"] == Unavailable(
        "timeout", "not read: the probe stopped earlier (NVML did not answer)"
    )


def test_sequential_reading_gives_the_same_facts() -> None:
    sink = Assembler()
    fields.read_nvml(ReplayNVML(healthy()), sink, 1, 1, parallel=False)
    sink.finished()
    assert sink.result() == HEALTHY


def test_deadline_is_capped_by_the_run_budget(tmp_path: Path) -> None:
    path = tmp_path / "nvml.json"
    path.write_text(json.dumps(dict(healthy(), init={"hang": True})), encoding="utf-8")
    ctx = ProbeContext(nvml_replay=path, nvml_timeout=30.0, deadline=time.monotonic() + 0.4)
    started = time.monotonic()
    section = nvml.collect(ctx)
    assert time.monotonic() - started < 0.4 + 1.0
    assert section["status"] == "timeout"


def test_child_that_dies_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = fields.read_gpu_fields

    def dies_on_gpu1(r: Any, cpu_words: int, node_words: int, count: int) -> None:
        if r.index == 1:
            r.call("nvmlDeviceGetName")
            os._exit(3)
        real(r, cpu_words, node_words, count)

    monkeypatch.setattr(fields, "read_gpu_fields", dies_on_gpu1)  # the forked child inherits it
    section = probe(tmp_path, healthy())
    assert section["status"] == "error"
    assert "the NVML child process exited with status 3 while calling " in section["error"]
    assert "nvmlDeviceGetName on GPU 1" in section["error"]
    assert section["driver_version"] == "550.90.07"
    assert section["gpus"][1]["lost"] is False
    assert isinstance(section["gpus"][1]["name"], Unavailable)
    assert psutil.Process().children() == []


def test_child_that_raises_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any) -> None:
        raise RuntimeError("probe bug")

    monkeypatch.setattr(fields, "read_gpu_fields", broken)
    section = probe(tmp_path, healthy())
    assert section["status"] == "error"
    assert "RuntimeError: probe bug" in section["error"]
    assert section["driver_version"] == "550.90.07"


def test_start_runs_in_the_background(forked_pids: list[int]) -> None:
    pending = nvml.start(make_context(root=str(HOSTS / "healthy-2gpu")))
    time.sleep(0.5)  # other probes would run here
    started = time.monotonic()
    assert pending.result() == HEALTHY
    assert time.monotonic() - started < 0.2
    assert_no_child_left(forked_pids)


def test_start_keeps_its_deadline_when_collected_late(tmp_path: Path, forked_pids: list[int]) -> None:
    path = tmp_path / "nvml.json"
    path.write_text(json.dumps(set_answer(healthy(), 1, "nvmlDeviceGetName", {"hang": True})), encoding="utf-8")
    pending = nvml.start(ProbeContext(nvml_replay=path, nvml_timeout=0.3))
    time.sleep(0.6)
    started = time.monotonic()
    section = pending.result()
    assert time.monotonic() - started < 0.5
    assert section["status"] == "timeout" and "stuck in nvmlDeviceGetName on GPU 1" in section["error"]
    assert section["gpus"][0] == GPU0
    assert_no_child_left(forked_pids)


def test_subprocess_fallback_gives_the_same_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(child, "can_fork", lambda: False)
    ctx = make_context(root=str(HOSTS / "healthy-2gpu"))
    assert nvml.collect(ctx) == HEALTHY
    assert psutil.Process().children() == []


def test_subprocess_fallback_hang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(child, "can_fork", lambda: False)
    answers = set_answer(healthy(), 0, "nvmlDeviceGetTemperature(0)", {"hang": True})
    started = time.monotonic()
    section = probe(tmp_path, answers, timeout=1.5)
    assert time.monotonic() - started < 1.5 + 1.0
    assert "stuck in nvmlDeviceGetTemperature(0) on GPU 0" in section["error"]
    assert section["gpus"][0]["pstate"] == 0
    assert psutil.Process().children() == []


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


def test_call_keys() -> None:
    assert call_key("nvmlDeviceGetName") == "nvmlDeviceGetName"
    assert call_key("nvmlDeviceGetTotalEccErrors", (1, 0)) == "nvmlDeviceGetTotalEccErrors(1,0)"
    assert call_key("nvmlDeviceGetCpuAffinityWithinScope", (4, 0)) == "nvmlDeviceGetCpuAffinityWithinScope(0)"
    assert call_key("nvmlDeviceGetCpuAffinity", (2,)) == "nvmlDeviceGetCpuAffinity"


def test_helpers() -> None:
    assert fields.normalise_bus_id("00000000:9A:00.0") == "0000:9a:00.0"
    assert fields.mask_to_ids([0b1011, 1 << 63, 0, 1]) == [0, 1, 3, 127, 192]
    assert fields.mask_to_ids([]) == []


def test_live_probe_without_gpu_says_why() -> None:
    if HAS_GPU:
        pytest.skip("this machine has a GPU")
    section = nvml.collect(ProbeContext())
    check_shape(section)
    assert section["status"] in ("library_not_found", "driver_not_loaded")
    assert isinstance(section["gpus"], Unavailable)


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


def test_nvlink_peers_are_the_gpus_reachable_over_nvlink(tmp_path: Path) -> None:
    # four GPUs as two bridged pairs: {0, 1} and {2, 3}; GPU 3's links are down
    answers = healthy()
    answers["devices"] = [copy.deepcopy(answers["devices"][0]) for _ in range(4)]
    answers["system"]["nvmlDeviceGetCount"] = 4
    for i, device in enumerate(answers["devices"]):
        device["nvmlDeviceGetPciInfo"]["busId"] = f"00000000:{0x18 + i:02X}:00.0"
        for j in range(4):
            device.pop(f"nvmlDeviceGetP2PStatus({j},2)", None)
            if j != i:
                device[f"nvmlDeviceGetP2PStatus({j},2)"] = 0 if (i < 2) == (j < 2) and 3 not in (i, j) else 5
    for link in range(18):
        answers["devices"][3][f"nvmlDeviceGetNvLinkState({link})"] = 0
    backend = ReplayNVML(answers)
    sink = Assembler()
    fields.read_nvml(backend, sink, 1, 1, parallel=False)
    sink.finished()
    gpus = sink.result()["gpus"]
    assert [g["nvlink_peers"] for g in gpus] == [[1], [0], [], []]
    # GPUs 0-2 ask about their three others each; GPU 3, with no link up, is not asked at all
    assert sum(call.startswith("nvmlDeviceGetP2PStatus") for call in backend.calls) == 9


def test_nvlink_peers_unavailable_when_nvml_cannot_say(tmp_path: Path) -> None:
    answers = set_answer(healthy(), 0, "nvmlDeviceGetP2PStatus(1,2)", error("NVML_ERROR_NO_PERMISSION"))
    gpus = probe(tmp_path, answers)["gpus"]
    assert isinstance(gpus[0]["nvlink_peers"], Unavailable) and gpus[0]["nvlink_peers"].reason == "no_permission"
    assert gpus[1]["nvlink_peers"] == [0]


# --- the console script's prestart ----------------------------------------------------------


@pytest.fixture
def no_prestart_left() -> Any:
    yield
    nvml.discard_prestarted()


def _wait_children_gone(seconds: float = 2.0) -> list[Any]:
    end = time.monotonic() + seconds
    while psutil.Process().children() and time.monotonic() < end:
        time.sleep(0.01)  # a killed child is reaped by gpudoctor.children's reaper thread
    return psutil.Process().children()


def test_prestart_starts_one_child_and_discard_stops_it(no_prestart_left: Any) -> None:
    assert nvml.prestart() is True
    assert nvml.prestart() is False  # one is waiting already
    assert len(nvml._PRESTARTED) == 1
    nvml.discard_prestarted()
    assert not nvml._PRESTARTED
    assert _wait_children_gone() == []


def test_prestarted_child_is_adopted_by_a_live_probe(no_prestart_left: Any) -> None:
    fresh = nvml.collect(make_context())
    assert nvml.prestart()
    prestarted = nvml._PRESTARTED[0][1]
    pending = nvml.start(make_context())
    assert pending.child is prestarted and not nvml._PRESTARTED
    section = pending.result()
    assert (section["status"], section["error"], section["gpus"]) == (fresh["status"], fresh["error"], fresh["gpus"])
    assert _wait_children_gone() == []


@pytest.mark.parametrize("how", ["shorter deadline", "longer deadline", "fixture root"])
def test_prestarted_child_is_not_adopted_when_it_would_differ(how: str, no_prestart_left: Any) -> None:
    assert nvml.prestart()
    prestarted = nvml._PRESTARTED[0][1]
    if how == "fixture root":
        ctx = make_context(root=str(HOSTS / "healthy-2gpu"))
    else:
        ctx = make_context(nvml_timeout=1.0 if how == "shorter deadline" else 20.0)
    pending = nvml.start(ctx)
    assert pending.child is not prestarted and prestarted.waited and not nvml._PRESTARTED
    section = pending.result()
    if how == "fixture root":
        assert section == HEALTHY
    assert _wait_children_gone() == []


# --- the child's events ------------------------------------------------------------------------


def test_the_child_reports_in_the_one_line_protocol() -> None:
    from gpudoctor.children import parse_event

    r, w = os.pipe()
    pipe = child._PipeSink(w)
    pipe.calling("nvmlDeviceGetName", 0)
    pipe.system("device_count", 1)
    pipe.gpu(0, "name", "NVIDIA H100 80GB HBM3")
    pipe.gpu(0, "serial", Unavailable("not_supported", "nvmlDeviceGetSerial: not supported"))
    pipe.gpu_done(0)
    pipe.finished()
    os.close(w)
    with os.fdopen(r, "rb") as stream:
        lines = stream.read().splitlines()
    events = [parse_event(line) for line in lines]
    assert [e["event"] if e else None for e in events] == ["call", "system", "gpu", "gpu", "gpu_done", "end"]
    sink = Assembler()
    for line in lines:
        child.dispatch(line, sink)
    assert sink.complete and sink.crash is None and sink.gpus_done == {0}
    assert sink.gpu_facts[0]["serial"] == Unavailable("not_supported", "nvmlDeviceGetSerial: not supported")


@pytest.mark.parametrize(
    "line",
    [b"C [\"nvmlInit\", null]", b'@@GPUDOCTOR@@ {"event":"gpu","index":0', b'@@GPUDOCTOR@@ {"event":"teleport"}'],
)
def test_a_line_from_the_child_that_is_not_an_event_is_its_breakage(line: bytes) -> None:
    sink = Assembler()
    child.dispatch(line, sink)
    assert sink.crash is not None and sink.crash.startswith("unreadable message from the NVML child")
    section = sink.result()
    assert section["status"] == "error" and "unreadable message from the NVML child" in section["error"]
