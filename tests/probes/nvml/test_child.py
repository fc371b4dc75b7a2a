"""The NVML child: hangs, deaths, deadlines, the spawn fallback, and its events."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpudoctor.context import ProbeContext, make_context
from gpudoctor.facts import Unavailable
from gpudoctor.probes import nvml
from gpudoctor.probes.nvml import child, fields
from gpudoctor.probes.nvml.section import Assembler
from tests.probes.nvml.answers import (
    GPU0,
    GPU1,
    HEALTHY,
    HOSTS,
    assert_no_child_left,
    healthy,
    probe,
    set_answer,
)

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
