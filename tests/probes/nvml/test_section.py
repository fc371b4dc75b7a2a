"""The parent's assembly of the nvml section."""

from __future__ import annotations

from gpudoctor.facts import Unavailable
from gpudoctor.probes.nvml.section import Assembler


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
