"""What the NVML probe reads, against the fake NVML: fixture hosts, per-GPU failures, fields."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from gpudoctor.context import ProbeContext, make_context
from gpudoctor.facts import Unavailable
from gpudoctor.probes import nvml
from gpudoctor.probes.nvml import fields
from gpudoctor.probes.nvml.replay import ReplayNVML, check_answers
from gpudoctor.probes.nvml.section import Assembler
from tests.probes.nvml.answers import (
    GPU0,
    GPU1,
    HAS_GPU,
    HEALTHY,
    HOSTS,
    MAKE_NVML,
    assert_no_child_left,
    check_shape,
    error,
    healthy,
    in_process,
    make_nvml,
    probe,
    set_answer,
)

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

def test_sequential_reading_gives_the_same_facts() -> None:
    sink = Assembler()
    fields.read_nvml(ReplayNVML(healthy()), sink, 1, 1, parallel=False)
    sink.finished()
    assert sink.result() == HEALTHY

def test_helpers() -> None:
    assert fields.mask_to_ids([0b1011, 1 << 63, 0, 1]) == [0, 1, 3, 127, 192]
    assert fields.mask_to_ids([]) == []


def test_live_probe_without_gpu_says_why() -> None:
    if HAS_GPU:
        pytest.skip("this machine has a GPU")
    section = nvml.collect(ProbeContext())
    check_shape(section)
    assert section["status"] in ("library_not_found", "driver_not_loaded")
    assert isinstance(section["gpus"], Unavailable)

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
