"""The device test's orchestration, on the CPU: stand-in interpreters that print canned events,
hang or die, and the real worker script run with CPU torch (skipped where torch is missing)."""

from __future__ import annotations

import importlib.util
import json
import sys
import time

import jsonschema
import pytest

from gpudoctor.findings import Cause, Status
from gpudoctor.preflight.api import run
from gpudoctor.preflight.device_test import parse_events, start_deep
from gpudoctor.preflight.policy import Policy
from gpudoctor.preflight.verdict import judge
from gpudoctor.schemas import load_schema
from tests.helpers.processes import gone_within
from tests.preflight.helpers import (
    HEALTHY,
    cli,
    device_events,
    device_findings,
    facts,
    fake_python,
    hung_nvml_root,
    passing_gpu,
    ruleset,
    step_events,
)

HAS_TORCH = importlib.util.find_spec("torch") is not None


def deep_run(python: str, budget: float = 5.0, **kwargs):
    return start_deep(python, deadline=time.monotonic() + budget, **kwargs).result()


def by_rule(findings, rule):
    return [f for f in findings if f.rule_id == rule]


def all_passing() -> list[dict]:
    events = device_events(2) + passing_gpu(0) + passing_gpu(1)
    events += step_events(0, "p2p", peer=1, peer_access=True, gbps=40.0)
    events += step_events(1, "p2p", peer=0, peer_access=True, gbps=40.0)
    events += step_events(None, "allreduce", mib=64)
    return events + [{"event": "done", "ok": True}]


def test_passing_device_test_maps_every_step_to_the_right_gpu(tmp_path):
    result = deep_run(fake_python(tmp_path, all_passing()))
    assert not result.timed_out and result.returncode == 0
    findings = device_findings(result, facts("healthy-2gpu"))
    assert all(f.status is Status.PASS for f in findings), [(f.rule_id, f.message) for f in findings]
    gpus = by_rule(findings, "gate-deep-gpu")
    assert [f.subject.bus_id for f in gpus] == ["0000:18:00.0", "0000:9a:00.0"]
    assert len(by_rule(findings, "gate-deep-p2p")) == 2 and len(by_rule(findings, "gate-deep-allreduce")) == 1
    assert "sees 2 CUDA device(s)" in by_rule(findings, "gate-deep-cuda")[0].message


def test_a_hung_gpu_is_named_and_the_child_is_killed_at_the_deadline(tmp_path):
    pidfile = tmp_path / "pid"
    events = device_events(2) + passing_gpu(0) + step_events(1, "context") + step_events(1, "memory")
    events += step_events(1, "matmul", ok="hang")
    python = fake_python(tmp_path, events, tail=f"echo $$ > {pidfile}\nexec sleep 60")
    started = time.monotonic()
    result = deep_run(python, budget=1.5)
    elapsed = time.monotonic() - started
    assert result.timed_out and elapsed < 3.0, elapsed
    findings = device_findings(result, facts("healthy-2gpu"))
    [hung] = [f for f in by_rule(findings, "gate-deep-gpu") if f.status is not Status.PASS]
    assert hung.status is Status.UNKNOWN and hung.subject.bus_id == "0000:9a:00.0"
    assert hung.message == "GPU 1 (0000:9a:00.0) did not finish the device test"
    assert "step 'matmul'" in hung.detail and "may be hung" in hung.detail
    assert hung.cause == Cause("deep", "timeout")
    # the stand-in (exec'd into sleep) is gone: killed with its process group, not waited for
    assert gone_within(int(pidfile.read_text()), 3), "the hung device test process was not killed"


def test_a_failed_step_fails_that_gpu_and_skips_the_collectives(tmp_path):
    events = device_events(2) + passing_gpu(0) + step_events(1, "context")
    events += step_events(1, "memory", ok=False, error="checksum mismatch: got 1 and 2, want 3 and 4")
    result = deep_run(fake_python(tmp_path, events + [{"event": "done", "ok": False}], tail="exit 1"))
    findings = device_findings(result, facts("healthy-2gpu"))
    [bad] = [f for f in findings if f.status is Status.FAIL]
    assert bad.rule_id == "gate-deep-gpu" and bad.subject.index == 1 and "memory failed: checksum" in bad.message
    assert {f.status for f in by_rule(findings, "gate-deep-p2p")} == {Status.SKIP}
    assert by_rule(findings, "gate-deep-allreduce")[0].status is Status.SKIP


def test_a_child_that_dies_mid_step_fails_the_gpu(tmp_path):
    events = device_events(2) + passing_gpu(0) + step_events(1, "context", ok="hang")
    result = deep_run(fake_python(tmp_path, events, tail="echo 'CUDA error: an illegal memory access' >&2\nkill -9 $$"))
    findings = device_findings(result, facts("healthy-2gpu"))
    [bad] = [f for f in findings if f.status is Status.FAIL]
    assert bad.subject.index == 1 and "died (killed by signal 9)" in bad.message


def test_torch_missing_is_a_check_that_could_not_run(tmp_path):
    python = fake_python(
        tmp_path, [{"event": "hello"}, {"event": "torch_error", "error": "ModuleNotFoundError: torch"}]
    )
    [f] = device_findings(deep_run(python), facts("healthy-2gpu"))
    assert f.status is Status.UNKNOWN and "cannot import torch" in f.detail and f.cause == Cause("deep", "not_found")


def test_cuda_unusable_fails(tmp_path):
    events = [
        {"event": "hello"},
        {"event": "torch", "version": "2.5.1+cpu", "cuda": None, "import_s": 1.0},
        {
            "event": "cuda",
            "available": False,
            "count": 0,
            "error": "AssertionError: Torch not compiled with CUDA enabled",
        },
    ]
    [f] = device_findings(deep_run(fake_python(tmp_path, events, tail="exit 4")), facts("healthy-2gpu"))
    assert f.status is Status.FAIL and "not compiled with CUDA" in f.message


def test_torch_seeing_fewer_gpus_than_nvml_fails(tmp_path):
    events = device_events(1) + passing_gpu(0) + [{"event": "done", "ok": True}]
    findings = device_findings(
        deep_run(fake_python(tmp_path, events), env={"PATH": "/usr/bin:/bin"}), facts("healthy-2gpu")
    )
    cuda = by_rule(findings, "gate-deep-cuda")[0]
    assert cuda.status is Status.FAIL and "sees 1 CUDA device(s) but NVML lists 2" in cuda.message


def test_stuck_in_torch_import_is_named(tmp_path):
    python = fake_python(tmp_path, [{"event": "hello"}], tail="exec sleep 30")
    [f] = device_findings(deep_run(python, budget=0.8), facts("healthy-2gpu"))
    assert f.status is Status.UNKNOWN and "importing torch" in f.detail and f.cause == Cause("deep", "timeout")


def test_interpreter_that_cannot_start(tmp_path):
    result = deep_run(str(tmp_path / "no-such-python"))
    [f] = device_findings(result, facts("healthy-2gpu"))
    assert not result.started and f.status is Status.UNKNOWN and "could not start" in f.detail


def test_deep_findings_block_through_the_gate_policy(tmp_path):
    events = device_events(2) + passing_gpu(0) + step_events(1, "context", ok="hang")
    result = deep_run(fake_python(tmp_path, events, tail="exec sleep 30"), budget=0.8)
    closed = judge(facts("healthy-2gpu"), ruleset(), Policy(deep=True), deep_result=result)
    assert not closed.go and "GPU 1 (0000:9a:00.0)" in closed.lines[0].text
    opened = judge(facts("healthy-2gpu"), ruleset(), Policy(deep=True, fail_closed=False), deep_result=result)
    assert opened.go
    ignored = judge(facts("healthy-2gpu"), ruleset(), Policy(deep=True, ignore=("deep",)), deep_result=result)
    assert ignored.go and not by_rule(ignored.findings, "gate-deep-gpu")


def test_gate_deep_on_the_command_line(capsys, tmp_path):
    report = tmp_path / "gate.json"
    python = fake_python(tmp_path, all_passing())
    code, out, _ = cli(capsys, "gate", "--root", HEALTHY, "--deep", "--python", python, "--json", str(report))
    assert code == 0 and "device test: torch 2.11.0+cu130 · 2 CUDA device(s)" in out
    data = json.loads(report.read_text())
    jsonschema.validate(data, load_schema("gate-report"))
    assert data["deep"]["ran"] and data["deep"]["torch_version"] == "2.11.0+cu130" and len(data["deep"]["steps"]) == 9
    hang = fake_python(tmp_path, device_events(2) + step_events(0, "context", ok="hang"), "exec sleep 30", "hang")
    started = time.monotonic()
    code, out, _ = cli(capsys, "gate", "--root", HEALTHY, "--deep", "--python", hang, "--timeout", "2")
    assert code == 1 and time.monotonic() - started < 4
    assert out.startswith("NO-GO  gate-deep-gpu: GPU 0 (0000:18:00.0)")
    code, _, err = cli(capsys, "gate", "--facts", "x.json", "--deep")
    assert code == 2 and "--deep" in err


def test_nvml_hang_stops_the_device_test_early(tmp_path):
    """With the driver not answering NVML the device test would only hang until the deadline."""
    python = fake_python(tmp_path, [{"event": "hello"}], tail="exec sleep 30")
    started = time.monotonic()
    report = run(Policy(deep=True, deadline_s=20), root=hung_nvml_root(tmp_path), python=python, nvml_timeout=1)
    assert time.monotonic() - started < 4
    deep = by_rule(report.findings, "gate-deep-cuda")[0]
    assert deep.status is Status.UNKNOWN and deep.cause == Cause("deep", "timeout")
    assert "NVML did not answer" in deep.detail
    assert not report.go


@pytest.mark.skipif(HAS_TORCH, reason="torch is installed here")
def test_the_real_worker_without_torch_says_so_in_event_lines():
    result = deep_run(sys.executable, budget=30)
    assert result.returncode == 3, result.stderr_tail
    assert [e["event"] for e in result.events] == ["hello", "torch_error"]
    assert "torch" in result.events[1]["error"] and isinstance(result.events[0]["t"], float)
    [f] = device_findings(result, facts("healthy-2gpu"))
    assert f.status is Status.UNKNOWN and "cannot import torch" in f.detail


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed here")
def test_the_real_worker_on_cpu_devices_passes_every_step():
    result = deep_run(sys.executable, budget=60, memory_mib=8, extra_args=["--cpu-devices", "2"])
    assert result.returncode == 0, result.stderr_tail
    steps = {(e["gpu"], e["step"]): e for e in result.events if e["event"] == "end"}
    assert set(steps) == {
        (0, "context"),
        (0, "memory"),
        (0, "matmul"),
        (1, "context"),
        (1, "memory"),
        (1, "matmul"),
        (0, "p2p"),
        (1, "p2p"),
        (None, "allreduce"),
    }
    assert all(e["ok"] for e in steps.values())
    assert steps[(0, "matmul")]["low_dtype"] == "bfloat16"
    findings = device_findings(result, facts("healthy-2gpu"))
    assert all(f.status is Status.PASS for f in findings), [(f.rule_id, f.message) for f in findings]


@pytest.mark.gpu
def test_the_real_worker_on_this_machines_gpus():
    """On a GPU host: every GPU passes every step, and each is matched to its NVML subject."""
    pytest.importorskip("torch")
    from gpudoctor.context import make_context
    from gpudoctor.probes import collect_all

    result = deep_run(sys.executable, budget=120)
    assert result.returncode == 0, (result.stderr_tail, result.events)
    live = collect_all(make_context(timeout=30))
    findings = device_findings(result, live)
    assert findings and all(f.status is Status.PASS for f in findings), [(f.rule_id, f.message) for f in findings]
    nvml_buses = {g["bus_id"] for g in live["nvml"]["gpus"]}
    assert {f.subject.bus_id for f in by_rule(findings, "gate-deep-gpu")} == nvml_buses


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed here")
def test_ignored_collectives_are_not_run():
    result = deep_run(
        sys.executable, budget=60, memory_mib=8, extra_args=["--cpu-devices", "2", "--skip", "p2p,allreduce"]
    )
    steps = {e["step"] for e in result.events if e["event"] == "end"}
    assert result.returncode == 0 and steps == {"context", "memory", "matmul"}


def test_event_lines_follow_the_one_child_line_protocol():
    good = '@@GPUDOCTOR@@ {"event":"begin","gpu":0}\n@@GPUDOCTOR@@ {"event":"done","ok":true}\n'
    assert parse_events(good) == [{"event": "begin", "gpu": 0}, {"event": "done", "ok": True}]
    for line in (
        "NCCL INFO Bootstrap : Using eth0",  # a library's print
        '@@GPUDOCTOR@@ {"event":"end","gpu":',  # cut by the kill
        '@@GPUDOCTOR@@ {"gpu":0}',  # no event
        '@@GPUDOCTOR@@ {"event":"end","s":NaN}',  # not strict JSON
        '@@GPUDOCTOR-DEEP@@{"e":"begin"}',  # the old marker
        '@@GPUDOCTOR@@ ["event"]',
        "@@GPUDOCTOR@@ " + '{"event":"x","pad":"' + "a" * (1 << 17) + '"}',  # longer than any event
    ):
        assert parse_events(line) == [], line
