"""Faults injected into the real NVML of a GPU host (marked gpu: skipped where there is none).

An NVML stand-in wraps nvidia-ml-py in the probe's forked child: every call goes to the real
driver except the one a test makes block forever or fail with an NVML error, on one GPU. What
must hold on real hardware: the run answers within its deadline, names the call, keeps what the
other GPUs answered (compared with a clean read of the same machine), leaves no process behind,
and a lost GPU or a driver/library mismatch gets its own finding. Nothing here changes a GPU
setting: every call made is a query.

Run on the GPU host:  python -m pytest -q -m gpu tests/hardening/test_gpu_faults.py -rs
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpudoctor.context import ProbeContext, make_context
from gpudoctor.engine.loader import load_rules
from gpudoctor.engine.runner import run_rules
from gpudoctor.facts import Unavailable, to_jsonable
from gpudoctor.findings import Status
from gpudoctor.probes import collect_all, nvml
from gpudoctor.probes.nvml import child as nvml_child
from gpudoctor.probes.nvml.fields import GPU_FIELDS

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
# Facts that move between two reads of an idle machine.
VOLATILE = {
    "memory_used_bytes", "pcie_gen", "pcie_width", "pcie_replay_counter", "pstate", "clocks_event_reasons",
    "temperature_c", "power_draw_w", "utilization_gpu_pct", "processes",
}


class FaultyNVML:
    """nvidia-ml-py with one call on one GPU replaced: it blocks forever, or raises an NVML error."""

    def __init__(self, real: Any, call: str, gpu: int | None, fault: str) -> None:
        self._real = real
        self._call = call
        self._gpu = gpu
        self._fault = fault
        self._index: dict[int, int] = {}
        self.NVMLError = real.NVMLError

    def _fail(self) -> None:
        if self._fault == "hang":
            while True:  # as a call stuck in the driver: the parent gives up on the child
                time.sleep(3600)
        raise self._real.NVMLError(getattr(self._real, self._fault))

    def nvmlInit(self) -> None:
        if self._call == "nvmlInit":
            self._fail()
        self._real.nvmlInit()

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        handle = self._real.nvmlDeviceGetHandleByIndex(index)
        self._index[id(handle)] = int(index)
        return handle

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._real, name)
        if name != self._call:
            return real

        def call(*args: Any) -> Any:
            if args and self._index.get(id(args[0])) == self._gpu:
                self._fail()
            return real(*args)

        return call


def inject(monkeypatch: pytest.MonkeyPatch, call: str, gpu: int | None, fault: str) -> None:
    """Make the probe's child (forked, so it inherits this) read through FaultyNVML."""

    def open_backend(plan: dict[str, Any], sink: Any) -> Any:
        sink.calling("import pynvml", None)
        import pynvml  # type: ignore[import-untyped]

        return FaultyNVML(pynvml, call, gpu, fault)

    monkeypatch.setattr(nvml_child, "open_backend", open_backend)
    monkeypatch.setattr(nvml_child, "can_fork", lambda: True)  # the fallback child would not inherit it


def two_gpus(section: dict[str, Any]) -> dict[str, Any]:
    """A clean read of the host's NVML, or a skip on a host with fewer than two GPUs (these tests
    make one GPU faulty and check that the other is still read): a one-GPU host is not a failure."""
    assert section["status"] == "ok", section["error"]
    count = len(section["gpus"])
    if count < 2:
        pytest.skip(f"these tests need two GPUs: one faulty, one to keep reading (this host has {count})")
    return section


@pytest.fixture(scope="module")
def clean() -> dict[str, Any]:
    return two_gpus(nvml.collect(ProbeContext(nvml_timeout=20.0)))


def same(a: dict[str, Any], b: dict[str, Any], fields: Any) -> list[str]:
    return [f for f in fields if f not in VOLATILE and to_jsonable(a[f]) != to_jsonable(b[f])]


def no_child_left() -> None:
    deadline = time.monotonic() + 1.0
    while psutil.Process().children(recursive=True) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert psutil.Process().children(recursive=True) == []


@pytest.mark.parametrize("call", ["nvmlDeviceGetPowerUsage", "nvmlDeviceGetName", "nvmlDeviceGetMemoryAffinity"])
def test_one_call_blocks_on_the_last_gpu(monkeypatch: pytest.MonkeyPatch, clean: dict[str, Any], call: str) -> None:
    last = len(clean["gpus"]) - 1
    inject(monkeypatch, call, last, "hang")
    started = time.monotonic()
    section = nvml.collect(ProbeContext(nvml_timeout=3.0))
    took = time.monotonic() - started
    print(f"\n{call} blocked on GPU {last}: answered in {took:.2f} s: {section['error']}", file=sys.stderr)
    assert took < 3.0 + 1.0
    assert section["status"] == "timeout"
    assert f"stuck in {call}" in section["error"] and f"on GPU {last}" in section["error"]
    for index, (got, want) in enumerate(zip(section["gpus"][:last], clean["gpus"][:last])):
        assert got["lost"] is False, index
        assert same(got, want, GPU_FIELDS) == [], index  # the other GPUs, read in full, from the driver
    stuck = section["gpus"][last]
    assert stuck["lost"] is True
    assert any(isinstance(stuck[f], Unavailable) and stuck[f].reason == "timeout" for f in GPU_FIELDS)
    no_child_left()


@pytest.mark.parametrize("fault", ["NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_UNKNOWN", "NVML_ERROR_NO_PERMISSION",
                                   "NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_TIMEOUT"])
def test_one_call_fails_on_gpu_0(monkeypatch: pytest.MonkeyPatch, clean: dict[str, Any], fault: str) -> None:
    inject(monkeypatch, "nvmlDeviceGetCurrPcieLinkWidth", 0, fault)
    section = nvml.collect(ProbeContext(nvml_timeout=20.0))
    assert section["status"] == "ok"
    width = section["gpus"][0]["pcie_width"]
    assert isinstance(width, Unavailable) and "nvmlDeviceGetCurrPcieLinkWidth" in width.detail
    assert section["gpus"][0]["lost"] is (fault in ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_UNKNOWN"))
    for index in range(1, len(clean["gpus"])):
        assert same(section["gpus"][index], clean["gpus"][index], GPU_FIELDS) == []
    no_child_left()


def test_lost_gpu_end_to_end(monkeypatch: pytest.MonkeyPatch, clean: dict[str, Any]) -> None:
    inject(monkeypatch, "nvmlDeviceGetTemperature", 1, "NVML_ERROR_GPU_IS_LOST")
    facts = collect_all(make_context(nvml_timeout=20.0))
    findings = run_rules(load_rules(include_plugins=False), facts)
    lost = {f.subject.index: f.status for f in findings if f.rule_id == "gpu-lost"}
    assert lost[1] is Status.FAIL
    assert all(status is Status.PASS for index, status in lost.items() if index != 1)
    assert not [f for f in findings if f.status is Status.ERROR]


def test_driver_library_mismatch_end_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    inject(monkeypatch, "nvmlInit", None, "NVML_ERROR_LIB_RM_VERSION_MISMATCH")
    facts = collect_all(make_context(nvml_timeout=20.0))
    assert facts["nvml"]["status"] == "driver_library_mismatch"
    findings = run_rules(load_rules(include_plugins=False), facts)
    failed = {f.rule_id for f in findings if f.status is Status.FAIL}
    assert "nvml-driver-library-mismatch" in failed
    # the GPUs are still on the PCI bus: what NVML would have said is unknown, not guessed
    gpu_rules = [f for f in findings if f.subject.kind == "gpu" and f.rule_id == "gpu-missing-from-nvml"]
    assert gpu_rules and all(f.status is Status.UNKNOWN for f in gpu_rules)


CLI_WRAPPER = r"""
import os, sys, time
sys.path.insert(0, os.environ["GPUDOCTOR_SRC"])
sys.path.insert(0, os.environ["GPUDOCTOR_TESTS"])
import pytest
from gpudoctor.cli.root import run
from test_gpu_faults import inject
monkeypatch = pytest.MonkeyPatch()
inject(monkeypatch, "nvmlDeviceGetPowerUsage", int(sys.argv[1]), "hang")
code = run(sys.argv[2:])
import psutil
left = [p.pid for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
print("CHILDREN-LEFT", left, file=sys.stderr)
sys.exit(code)
"""


def test_check_on_the_real_host_with_a_blocked_call(tmp_path: Path, clean: dict[str, Any]) -> None:
    last = len(clean["gpus"]) - 1
    wrapper = tmp_path / "wrapper.py"
    wrapper.write_text(CLI_WRAPPER)
    env = dict(os.environ, GPUDOCTOR_SRC=str(REPO / "src"), GPUDOCTOR_TESTS=str(Path(__file__).parent),
               # keep what the interpreter already needs on its path (e.g. carried dependencies)
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(wrapper), str(last), "check", "--nvml-timeout", "2", "--timeout", "6", "--format", "json"],
        capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL,
    )
    took = time.monotonic() - started
    print(f"\ncheck with nvmlDeviceGetPowerUsage blocked on GPU {last}: exit {proc.returncode} in {took:.2f} s",
          file=sys.stderr)
    assert took < 6.0 + 1.0
    assert proc.returncode == 1, proc.stderr
    assert "CHILDREN-LEFT []" in proc.stderr
    report = json.loads(proc.stdout)
    failed = {(f["rule"], f["subject"].get("index")) for f in report["findings"] if f["status"] == "fail"}
    assert ("nvml-not-responding", None) in failed and ("gpu-lost", last) in failed
    hung = next(f for f in report["findings"] if f["rule"] == "nvml-not-responding")
    assert f"stuck in nvmlDeviceGetPowerUsage on GPU {last}" in hung["message"]
    for f in report["findings"]:
        if f["subject"].get("index") == 0 and f["rule"] == "pcie-width-degraded":
            assert f["status"] in ("pass", "fail")  # GPU 0 was read from the driver and judged
