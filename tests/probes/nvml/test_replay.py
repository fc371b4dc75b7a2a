"""Recorded answers: call keys, and a recording missing or unusable."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.context import ProbeContext
from gpudoctor.facts import Unavailable
from gpudoctor.probes import nvml
from gpudoctor.probes.nvml.replay import call_key
from tests.probes.nvml.answers import (
    check_shape,
    probe,
)


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

def test_call_keys() -> None:
    assert call_key("nvmlDeviceGetName") == "nvmlDeviceGetName"
    assert call_key("nvmlDeviceGetTotalEccErrors", (1, 0)) == "nvmlDeviceGetTotalEccErrors(1,0)"
    assert call_key("nvmlDeviceGetCpuAffinityWithinScope", (4, 0)) == "nvmlDeviceGetCpuAffinityWithinScope(0)"
    assert call_key("nvmlDeviceGetCpuAffinity", (2,)) == "nvmlDeviceGetCpuAffinity"
