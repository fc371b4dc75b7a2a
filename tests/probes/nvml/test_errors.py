"""nvmlInit failures: the status, reason and advice of each."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.facts import Unavailable
from tests.probes.nvml.answers import (
    error,
    healthy,
    probe,
)

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
