"""Things that never answer: NVML (init, one GPU call), nvcc, the --python interpreter, and children
that cannot be killed. `gpudoctor check` is run as a separate process, as a job script runs it:
it must answer within its deadline plus about a second, say what did not answer, and leave no
process behind that the caller would wait on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import psutil
import pytest

from tests.hardening.roots import light_copy
from tests.probes.nvml.answers import healthy, set_answer

NVML_TIMEOUT = 1.0
TIMEOUT = 3.0
SLACK = 1.5  # "its deadline plus about a second", plus a fresh interpreter's start on a loaded CI machine
REPO = Path(__file__).resolve().parents[2]

# Runs `gpudoctor check` in this process after arranging what the test asks for, then records
# which children are still alive as gpudoctor returns. Modes that make a child unkillable stand
# for a child stuck in the kernel (D state), where SIGKILL stays pending and waitpid never
# reports it: kill() does nothing to it and waitpid() never sees it exit.
WRAPPER = r'''
import json, os, signal, subprocess, sys, threading, time
log_path, mode, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
started = []
real_fork = os.fork
def fork():
    pid = real_fork()
    if pid:
        started.append(pid)
    return pid
os.fork = fork
real_init = subprocess.Popen.__init__
def init(self, *args, **kwargs):
    real_init(self, *args, **kwargs)
    started.append(self.pid)
subprocess.Popen.__init__ = init

if mode == "stuck-children":
    real_kill, real_killpg, real_waitpid = os.kill, os.killpg, os.waitpid
    def kill(pid, sig):
        if pid in started and sig == signal.SIGKILL:
            return
        real_kill(pid, sig)
    def killpg(pgid, sig):
        if pgid in started and sig == signal.SIGKILL:
            return
        real_killpg(pgid, sig)
    def waitpid(pid, options):
        if pid in started:
            if not options & os.WNOHANG:
                while True:
                    time.sleep(3600)
            return (0, 0)
        return real_waitpid(pid, options)
    os.kill, os.killpg, os.waitpid = kill, killpg, waitpid
    subprocess.Popen.kill = lambda self: None
    subprocess.Popen.send_signal = lambda self, sig: None
    signal.alarm = lambda seconds: 0  # nor does the NVML child's own alarm end it

sys.path.insert(0, os.environ["GPUDOCTOR_SRC"])
from gpudoctor.cli.root import run
code = run(argv)
import psutil
alive = []
for child in psutil.Process().children(recursive=True):
    try:
        if child.status() != psutil.STATUS_ZOMBIE:
            alive.append(child.pid)
    except psutil.NoSuchProcess:
        pass
with open(log_path, "w") as fh:
    json.dump({"started": started, "alive": alive, "code": code}, fh)
sys.stdout.flush()
sys.exit(code)
'''


class Outcome:
    def __init__(self, proc: subprocess.CompletedProcess[str], took: float, log: dict[str, Any]) -> None:
        self.code = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr
        self.took = took
        self.started: list[int] = log.get("started", [])
        self.alive: list[int] = log.get("alive", [])
        self.logged_code = log.get("code")


def launch(tmp: Path, name: str, args: list[str], mode: str = "plain", env: dict[str, str] | None = None) -> Any:
    """Start `gpudoctor check ARGS` in a child Python (its own process group); see finish()."""
    wrapper = tmp / "wrapper.py"
    if not wrapper.exists():
        wrapper.write_text(WRAPPER)
    log = tmp / f"log-{name}.json"
    full_env = dict(os.environ, GPUDOCTOR_SRC=str(REPO / "src"), **(env or {}))
    proc = subprocess.Popen(
        [sys.executable, str(wrapper), str(log), mode, "check", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
        start_new_session=True,
    )
    return proc, log, time.monotonic()


def finish(launched: Any) -> Outcome:
    """Wait for a launched run; the whole exchange, pipes to end-of-file included, is timed."""
    proc, log, started = launched
    out, err = proc.communicate(timeout=30)
    took = time.monotonic() - started
    data = json.loads(log.read_text()) if log.exists() else {}
    return Outcome(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), took, data)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Outcome]]:
    """Every scenario, run in two batches of concurrent runs (they mostly wait, so the whole
    takes about as long as the slowest); each test below asserts on its own scenario."""
    tmp = tmp_path_factory.mktemp("hangs")
    nvcc = hanging_program(tmp / "tools" / "bin" / "nvcc")
    python = hanging_program(tmp / "venv" / "bin" / "python")
    deadlines = ["--nvml-timeout", str(NVML_TIMEOUT), "--timeout", str(TIMEOUT)]
    # a distribution-style nvcc with no version file beside it: gpudoctor has to ask it
    nvcc_env = {"PATH": f"{nvcc.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}", "CUDA_HOME": ""}
    batches = [
        {
            "nvml-init": (hung_root(tmp / "a", dict(healthy(), init={"hang": True})), "plain", None),
            "nvml-gpu-call": (
                [*hung_root(tmp / "b", set_answer(healthy(), 1, "nvmlDeviceGetPowerUsage", {"hang": True})),
                 "--format", "json"],
                "plain",
                None,
            ),
            "nvml-stuck-child": (hung_root(tmp / "c", dict(healthy(), init={"hang": True})), "stuck-children", None),
        },
        {
            "nvcc": (deadlines, "plain", nvcc_env),
            "python": (["--python", str(python), *deadlines], "plain", None),
            "tool-stuck-child": (["--python", str(python), *deadlines], "stuck-children", None),
        },
    ]
    outcomes: dict[str, Outcome] = {}
    groups: list[int] = []
    try:
        for batch in batches:
            launched = {name: launch(tmp, name, args, mode, env) for name, (args, mode, env) in batch.items()}
            groups += [item[0].pid for item in launched.values()]
            for name, item in launched.items():
                outcomes[name] = finish(item)
        outcomes["python-path"] = python  # type: ignore[assignment]
        outcomes["nvcc-path"] = nvcc  # type: ignore[assignment]
        yield outcomes
    finally:
        # only what these runs started: each wrapper's group, each recorded child and the group it leads
        pids = groups + [pid for o in outcomes.values() if isinstance(o, Outcome) for pid in o.started]
        for pid in pids:
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def assert_answered_in_time(outcome: Outcome, deadline: float) -> None:
    assert outcome.code in (0, 1), outcome.err
    assert outcome.logged_code == outcome.code
    assert "Traceback" not in outcome.err
    sys.stderr.write(f"answered in {outcome.took:.2f} s\n")
    assert outcome.took < deadline + SLACK, f"took {outcome.took:.2f} s"


def in_groups(pids: list[int]) -> list[int]:
    """Running processes in the process groups led by pids (a tool's own children included)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) in pids and running(proc.pid):
                found.append(proc.pid)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    return found


def assert_nothing_left(outcome: Outcome) -> None:
    assert outcome.started, "the scenario started no child process"
    assert outcome.alive == [], "children still running when gpudoctor returned"
    for pid in outcome.started:
        assert not running(pid), pid
    assert in_groups(outcome.started) == []


def hung_root(tmp: Path, answers: dict[str, Any]) -> list[str]:
    root, sysfs = light_copy("healthy-2gpu", tmp / "host")
    (root / "nvml.json").write_text(json.dumps(answers))
    return ["--root", str(root), "--sysfs-root", str(sysfs), "--nvml-timeout", str(NVML_TIMEOUT),
            "--timeout", str(TIMEOUT)]


def hanging_program(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    # a shell that waits on a grandchild: the whole process group must go
    path.write_text("#!/bin/sh\nsleep 600\n")
    path.chmod(0o755)
    return path


def test_nvml_init_hang(runs: dict[str, Outcome]) -> None:
    outcome = runs["nvml-init"]
    assert_answered_in_time(outcome, TIMEOUT)
    assert outcome.code == 1
    assert "FAIL    nvml-not-responding" in outcome.out
    assert "NVML did not answer within 1.0 s, stuck in nvmlInit" in outcome.out
    assert "did not answer in time: NVML did not answer within 1.0 s, stuck in nvmlInit" in outcome.out
    assert_nothing_left(outcome)


def test_one_gpu_call_hangs(runs: dict[str, Outcome]) -> None:
    outcome = runs["nvml-gpu-call"]
    assert_answered_in_time(outcome, TIMEOUT)
    report = json.loads(outcome.out)
    failed = {(f["rule"], f["subject"]["label"]) for f in report["findings"] if f["status"] == "fail"}
    assert ("nvml-not-responding", "host") in failed
    hung = [f for f in report["findings"] if f["rule"] == "nvml-not-responding"][0]
    assert "stuck in nvmlDeviceGetPowerUsage on GPU 1" in hung["message"]
    # GPU 0 was read in full and judged; GPU 1 is unreachable, and said to be
    gpu0 = {f["rule"]: f["status"] for f in report["findings"] if f["subject"].get("index") == 0}
    assert gpu0["pcie-width-degraded"] == "pass" and gpu0["gpu-lost"] == "pass"
    assert ("gpu-lost", "GPU 1 (0000:9a:00.0)") in failed
    assert_nothing_left(outcome)


def test_nvcc_that_never_returns(runs: dict[str, Outcome]) -> None:
    outcome, nvcc = runs["nvcc"], runs["nvcc-path"]
    assert_answered_in_time(outcome, TIMEOUT)
    # the report wraps to its width: read it as words
    assert f"did not answer in time: {nvcc} did not finish within 2.0 s and was killed" in " ".join(outcome.out.split())
    assert_nothing_left(outcome)


def test_python_that_never_returns(runs: dict[str, Outcome]) -> None:
    outcome, python = runs["python"], runs["python-path"]
    assert_answered_in_time(outcome, TIMEOUT)
    assert f"did not answer in time: {python} did not finish within" in " ".join(outcome.out.split())
    # the probes that only read files still ran: a hung interpreter must not blind gpudoctor to the rest
    assert "numa.node_count is unavailable" not in outcome.out
    assert "modules.nvidia_loaded is unavailable" not in outcome.out
    # what could not run for lack of time says where the time went
    assert "the time went to: " in " ".join(outcome.out.split())
    assert_nothing_left(outcome)


def test_nvml_child_that_cannot_be_killed(runs: dict[str, Outcome]) -> None:
    """The NVML child ignores SIGKILL and is never reaped: gpudoctor still returns on time, and
    its stdout reaches end-of-file on time (a job script reading $(gpudoctor check) must not wait
    for the stuck child, which would otherwise hold the pipe open)."""
    outcome = runs["nvml-stuck-child"]
    assert_answered_in_time(outcome, TIMEOUT)
    assert "stuck in nvmlInit" in outcome.out
    assert outcome.started and running(outcome.started[0])  # it really is still there


def test_tool_child_that_cannot_be_killed(runs: dict[str, Outcome]) -> None:
    outcome = runs["tool-stuck-child"]
    assert_answered_in_time(outcome, TIMEOUT)
    assert "did not answer in time" in outcome.out
    assert any(running(pid) for pid in outcome.started)
