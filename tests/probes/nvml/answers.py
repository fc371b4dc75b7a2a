"""Recorded NVML answers (tests/fixtures/make_nvml.py) and the facts the probe must make of them,
shared by the NVML probe's tests here and by tests/hardening."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import fastjsonschema
import psutil
import pytest

from gpudoctor.context import ProbeContext
from gpudoctor.facts import Unavailable, to_jsonable
from gpudoctor.probes import nvml
from gpudoctor.probes.nvml import fields
from gpudoctor.probes.nvml.section import Assembler

HOSTS = Path(__file__).resolve().parents[2] / "fixtures" / "hosts"
MAKE_NVML = Path(__file__).resolve().parents[2] / "fixtures" / "make_nvml.py"


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
    "recovery_action": "none",
    "nvlink_links": 18,
    "nvlink_active": 18,
    "nvlink_peers": [1],
    "nvlink_errors": {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0},
    "nvlink_link_errors": [
        {"link": link, "replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0} for link in range(18)
    ],
    # what the single-H200 VM answered: SUCCESS, state NOT_SUPPORTED
    **dict.fromkeys(
        ("fabric_state", "fabric_status", "fabric_clique_id", "fabric_cluster_uuid", "fabric_health"),
        Unavailable(
            "not_supported",
            "nvmlDeviceGetGpuFabricInfoV (v3): fabric state NOT_SUPPORTED (no NVLink fabric for this GPU)",
        ),
    ),
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


def assert_no_child_left(pids: list[int]) -> None:
    assert psutil.Process().children(recursive=True) == []
    for pid in pids:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
