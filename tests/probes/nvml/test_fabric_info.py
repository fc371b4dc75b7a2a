"""The GPU's NVLink fabric registration (probes/nvml/fabric_info.py): the structures NVML fills by
reference, the fallbacks to older structures, the decoding, and the fake NVML's answers."""

from __future__ import annotations

import ctypes
from typing import Any

import pytest

from gpudoctor.facts import Unavailable
from gpudoctor.probes.nvml import fabric_info
from gpudoctor.probes.nvml.fabric_info import FABRIC_FIELDS, FabricInfoV1, FabricInfoV2, FabricInfoV3
from gpudoctor.probes.nvml.recorder import RecordingBackend
from gpudoctor.probes.nvml.replay import ReplayNVML
from tests.probes.nvml.answers import error, healthy, in_process, make_nvml, set_answer

V3 = "nvmlDeviceGetGpuFabricInfoV(3)"


def test_the_structures_are_nvml_h_s() -> None:
    import pynvml  # type: ignore[import-untyped]

    # NVML_STRUCT_VERSION(GpuFabricInfo, n) as nvidia-ml-py spells it
    assert fabric_info.struct_version(FabricInfoV3, 3) == pynvml.nvmlGpuFabricInfo_v3 == 0x03000028
    assert fabric_info.struct_version(FabricInfoV2, 2) == pynvml.nvmlGpuFabricInfo_v2 == 0x02000024
    # v1 carries no version word: a 16-byte cluster UUID, status, clique id, state (nvml.h), 28
    # bytes. nvidia-ml-py 13.610 (the GPU host's) declares a longer UUID field (92 bytes in all);
    # 13.615 has nvml.h's 16: compare with the one that agrees with the header.
    assert ctypes.sizeof(FabricInfoV1) == 28
    if pynvml.c_nvmlGpuFabricInfo_t.clusterUuid.size == pynvml.NVML_GPU_FABRIC_UUID_LEN == 16:
        assert ctypes.sizeof(FabricInfoV1) == ctypes.sizeof(pynvml.c_nvmlGpuFabricInfo_t)
    pairs = ((FabricInfoV2, pynvml.c_nvmlGpuFabricInfo_v2_t), (FabricInfoV3, pynvml.c_nvmlGpuFabricInfo_v3_t))
    for ours, theirs in pairs:
        assert [f[0] for f in ours._fields_] == [f[0] for f in theirs._fields_]
        for name, *_ in ours._fields_:
            # nvml.h's nvmlGpuFabricState_t is an unsigned char (pynvml reads it as an int): same offsets
            assert getattr(ours, name).offset == getattr(theirs, name).offset, name
    assert pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS == 2 and pynvml.NVML_GPU_FABRIC_STATE_COMPLETED == 3


def test_the_health_mask_decoding_matches_pynvml_s_constants() -> None:
    import pynvml  # type: ignore[import-untyped]

    for name, (shift, width) in fabric_info.YES_NO_FIELDS.items():
        key = {"degraded_bandwidth": "DEGRADED_BW"}.get(name, name.upper())
        assert getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_{key}") == shift
        assert getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_{key}") == width
        assert getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_{key}_TRUE") == 1
    assert fabric_info.INCORRECT_CONFIGURATION[0] == pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_INCORRECT_CONFIGURATION
    assert pynvml.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_INSUFFICIENT_NVLINKS == 5
    assert pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY == 3
    health = fabric_info.decode_health((1 << 0) | (2 << 2) | (1 << 4) | (0 << 6) | (5 << 8), 3)
    assert health == {
        "mask": 1 | 8 | 16 | (5 << 8), "degraded_bandwidth": "yes", "route_recovery": "no", "route_unhealthy": "yes",
        "access_timeout_recovery": "not_supported", "incorrect_configuration": "insufficient_nvlinks",
        "summary": "limited_capacity",
    }
    assert fabric_info.decode_health(15 << 8, None)["incorrect_configuration"] == "unknown_15"
    assert fabric_info.decode_health(0, None)["summary"] == "not_supported"


def test_cluster_uuid() -> None:
    assert fabric_info.cluster_uuid(bytes(range(16))) == "00010203-0405-0607-0809-0a0b0c0d0e0f"
    none = fabric_info.cluster_uuid(bytes(16))
    assert isinstance(none, Unavailable) and none.reason == "not_found"


def fabric_answers(gpu: int, answer: Any, key: str = V3) -> dict[str, Any]:
    return set_answer(healthy(), gpu, key, answer)


def gpu_facts(answers: dict[str, Any], gpu: int = 0) -> dict[str, Any]:
    entry = in_process(ReplayNVML(answers))["gpus"][gpu]
    return {k: entry[k] for k in FABRIC_FIELDS}


def test_the_single_h200_vm_s_answer_is_not_supported() -> None:
    # SUCCESS with every field zero: state NOT_SUPPORTED (the lead's capture, driver 580.159.04)
    facts = gpu_facts(healthy())
    assert all(isinstance(v, Unavailable) and v.reason == "not_supported" for v in facts.values())
    assert "fabric state NOT_SUPPORTED" in facts["fabric_state"].detail


def test_completed_with_a_clique_and_a_cluster() -> None:
    answer = make_nvml.fabric_info("completed", clique=7, cluster=bytes(range(1, 17)),
                                   mask=make_nvml.FABRIC_HEALTHY_MASK, summary=1)
    facts = gpu_facts(fabric_answers(1, answer), gpu=1)
    assert facts["fabric_state"] == "completed" and facts["fabric_status"] == "success"
    assert facts["fabric_clique_id"] == 7
    assert facts["fabric_cluster_uuid"] == "01020304-0506-0708-090a-0b0c0d0e0f10"
    assert facts["fabric_health"]["summary"] == "healthy"
    assert facts["fabric_health"]["route_unhealthy"] == "no"


def test_in_progress_leaves_the_status_unread() -> None:
    facts = gpu_facts(fabric_answers(0, make_nvml.fabric_info("in_progress")))
    assert facts["fabric_state"] == "in_progress"
    assert isinstance(facts["fabric_status"], Unavailable) and "not completed" in facts["fabric_status"].detail


def test_a_failed_registration_names_the_nvml_error() -> None:
    facts = gpu_facts(fabric_answers(0, make_nvml.fabric_info("completed", status=27)))  # NVML_ERROR_NOT_READY
    assert facts["fabric_status"] == "NVML_ERROR_NOT_READY"


def test_a_driver_without_v3_is_asked_v2() -> None:
    answers = fabric_answers(0, error("NVML_ERROR_ARGUMENT_VERSION_MISMATCH"))
    v2 = make_nvml.fabric_info("completed", mask=make_nvml.FABRIC_HEALTHY_MASK)
    del v2["healthSummary"]
    set_answer(answers, 0, "nvmlDeviceGetGpuFabricInfoV(2)", v2)
    backend = ReplayNVML(answers)
    facts = in_process(backend)["gpus"][0]
    assert facts["fabric_state"] == "completed"
    assert facts["fabric_health"]["summary"] == "not_supported" and facts["fabric_health"]["route_recovery"] == "no"
    assert "nvmlDeviceGetGpuFabricInfoV(2)" in backend.calls


def test_a_library_without_the_v_call_is_asked_the_old_one() -> None:
    answers = fabric_answers(0, error("NVML_ERROR_FUNCTION_NOT_FOUND"))
    old = make_nvml.fabric_info("in_progress")
    unversioned = {k: old[k] for k in ("clusterUuid", "status", "cliqueId", "state")}
    set_answer(answers, 0, "nvmlDeviceGetGpuFabricInfo", unversioned)
    facts = gpu_facts(answers)
    assert facts["fabric_state"] == "in_progress"
    assert isinstance(facts["fabric_health"], Unavailable) and facts["fabric_health"].reason == "not_supported"


def test_every_attempt_failing_says_so() -> None:
    answers = fabric_answers(0, error("NVML_ERROR_ARGUMENT_VERSION_MISMATCH"))
    facts = gpu_facts(answers)  # v2 not recorded: NOT_SUPPORTED
    state = facts["fabric_state"]
    assert isinstance(state, Unavailable) and state.reason == "not_supported"
    assert "NVML_ERROR_ARGUMENT_VERSION_MISMATCH" in state.detail and "; then " in state.detail


@pytest.mark.parametrize("garbage", [
    "completed", [3], {"state": "3"}, {"state": -1}, {"clusterUuid": [1, 2]}, {"state": 1 << 40}, {"status": True},
])
def test_garbage_recorded_is_an_error_not_a_traceback(garbage: Any) -> None:
    facts = gpu_facts(fabric_answers(0, garbage))
    assert all(isinstance(v, Unavailable) and v.reason == "error" for v in facts.values()), facts


class CLibrary:
    """A backend whose fabric call is a C function, as pynvml's is (fn(device, gpuFabricInfo)):
    a structure passed by value instead of by reference is refused by ctypes here (on the real
    H200 host it crashed the process)."""

    def __init__(self, state: int) -> None:
        self.replay = ReplayNVML(healthy())
        self.NVMLError = self.replay.NVMLError
        self.versions: list[int] = []

        def fill(device: Any, pointer: int) -> int:
            version = ctypes.cast(pointer, ctypes.POINTER(ctypes.c_uint))[0]
            self.versions.append(version)
            ctypes.cast(pointer, ctypes.POINTER(FabricInfoV3)).contents.state = state
            return 0

        self.fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(fill)

    def nvmlDeviceGetGpuFabricInfoV(self, handle: Any, info: Any) -> int:
        ret = self.fn(None, info)
        if ret:
            raise self.NVMLError(ret)
        return 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.replay, name)


def test_the_structure_is_passed_by_reference_with_its_version_set() -> None:
    backend = CLibrary(state=2)
    section = in_process(backend)
    assert [g["fabric_state"] for g in section["gpus"]] == ["in_progress", "in_progress"]
    assert backend.versions == [0x03000028, 0x03000028]


def test_the_recorder_keeps_the_filled_structure_under_its_version() -> None:
    answer = make_nvml.fabric_info("completed", clique=3, mask=make_nvml.FABRIC_HEALTHY_MASK, summary=1)
    recorder = RecordingBackend(ReplayNVML(fabric_answers(0, answer)), scrub=False)
    in_process(recorder)
    recorded = recorder.answers()["devices"][0][V3]
    assert recorded == answer  # no version field: the key says it
    assert gpu_facts(fabric_answers(0, recorded))["fabric_clique_id"] == 3
