"""Children that misbehave, and a gpudoctor that is stopped while they run (gpudoctor.children).

- a child that floods its pipes costs gpudoctor a megabyte, not gigabytes, and not its deadline;
- SIGINT, SIGTERM or SIGHUP during `check --python`, `gate --deep`, `bench`, or NVML's probe
  (the prestarted child too) end gpudoctor at once with status 128 + the signal, and take every
  child process group with them; so does any exception in the readers (a KeyboardInterrupt);
- a deadline of weeks, or inf, does not overflow a poll() or an alarm();
- Ctrl-C at any moment of gpudoctor's own code exits 130 without a traceback.

gpudoctor runs as a separate process here, as a job script runs it. `--python` is only run on a
live probe (a fixture root's torch facts are its recorded torch.json), so those runs probe this
machine, with short deadlines.
"""

from __future__ import annotations

import json
import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import psutil
import pytest

from gpudoctor import children
from gpudoctor.children import stopping
from gpudoctor.context import make_context
from gpudoctor.facts import Unavailable
from gpudoctor.probes.nvml import make_plan
from gpudoctor.probes.nvml.child import run_child
from gpudoctor.probes.nvml.section import Assembler
from gpudoctor.probes.tools import CommandResult, run_bounded
from tests.conftest import HOSTS, SNAPSHOTS

REPO = Path(__file__).resolve().parents[2]
HEALTHY = str(HOSTS / "healthy-2gpu")
PROMPT = 1.0  # seconds within which a stopped gpudoctor must have exited, and its children be gone


# ---------------------------------------------------------------------------------------- helpers


def env(**extra: str) -> dict[str, str]:
    paths = [p for p in (extra.pop("PYTHONPATH", ""), str(REPO / "src"), os.environ.get("PYTHONPATH", "")) if p]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths), **extra)


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts (each in its own session); their groups are killed afterwards."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        for kill in (os.killpg, os.kill):
            try:
                kill(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        proc.wait()


def gpudoctor(procs: list[subprocess.Popen[bytes]], *args: str, **env_extra: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpudoctor", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env(**env_extra),
        start_new_session=True,
    )
    procs.append(proc)
    return proc


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def gone_within(pid: int, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while alive(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


def wait_for_pid(path: Path, proc: subprocess.Popen[bytes], seconds: float = 15.0) -> int:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            text = path.read_text().strip()
        except FileNotFoundError:
            text = ""
        if text:
            return int(text)
        assert proc.poll() is None, f"gpudoctor ended first: {proc.communicate()}"
        time.sleep(0.01)
    pytest.fail(f"no pid in {path}")


def executable(path: Path, text: str) -> str:
    path.write_text(text)
    path.chmod(0o755)
    return str(path)


def write_pid(path: Path, pid: str = "$$") -> str:
    """sh lines that write a pid to `path` whole (a reader never sees it half-written)."""
    return f"echo {pid} > {path}.tmp\nmv {path}.tmp {path}"


def sleeper(tmp_path: Path) -> tuple[str, Path]:
    """A stand-in interpreter that starts a grandchild (in its process group), writes the
    grandchild's pid, and waits: the whole group must go when gpudoctor is stopped."""
    pid_file = tmp_path / "grandchild.pid"
    script = executable(
        tmp_path / "python-sleeps",
        f"#!/bin/sh\nsleep 60 &\n{write_pid(pid_file, '$!')}\nwait\n",
    )
    return script, pid_file


def skip_if_ignored(signo: int) -> None:
    """A run started under nohup, or in the background by a non-interactive shell, ignores SIGHUP
    or SIGINT; gpudoctor keeps an ignore it inherits (as a shell's `cmd &` expects), so the signal
    tests cannot run there."""
    if signal.getsignal(signo) is signal.SIG_IGN:
        pytest.skip(f"{signal.Signals(signo).name} is ignored in this test run (nohup or a background job)")


def stop(proc: subprocess.Popen[bytes], signo: int) -> tuple[int, str, str, float]:
    skip_if_ignored(signo)
    t0 = time.monotonic()
    proc.send_signal(signo)
    out, err = proc.communicate(timeout=30)
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"), time.monotonic() - t0


# ----------------------------------------------------------------- 1. output is read with a cap

# Prints `mib` MiB as fast as it can, then hangs. Finite, so that gpudoctor without a cap (which
# buffered 4.8 GB in 10 s of an endless one) fails these tests without exhausting the machine.
FLOOD = (
    "import sys, time\nb = b'x' * 65536\nfor _ in range({mib} * 16):\n    sys.{stream}.buffer.write(b)\n"
    "sys.{stream}.flush()\ntime.sleep(60)\n"
)

# Runs a command and reports the largest resident set of any process it waited for (gpudoctor).
MEASURE = (
    "import json, resource, subprocess, sys, time\n"
    "t0 = time.monotonic()\n"
    "p = subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL, capture_output=True)\n"
    "print(json.dumps({'code': p.returncode, 'took': time.monotonic() - t0,\n"
    "    'maxrss_mb': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,\n"
    "    'out': p.stdout.decode(errors='replace')[-20000:], 'err': p.stderr.decode(errors='replace')[-5000:]}))\n"
)


def test_a_python_that_floods_stdout_is_stopped_at_the_cap(tmp_path: Path) -> None:
    flood = executable(tmp_path / "python-floods", f"#!{sys.executable}\n" + FLOOD.format(stream="stdout", mib=512))
    argv = [sys.executable, "-m", "gpudoctor", "check", "--python", flood, "--timeout", "5", "--nvml-timeout", "1"]
    measured = subprocess.run(
        [sys.executable, "-c", MEASURE, *argv], capture_output=True, text=True, env=env(), timeout=60
    )
    report = json.loads(measured.stdout)
    assert report["code"] in (0, 1), report["err"]
    assert "Traceback" not in report["err"]
    assert report["took"] < 5 + 1.5, report["took"]
    assert report["maxrss_mb"] < 300, f"gpudoctor grew to {report['maxrss_mb']:.0f} MB"
    said = " ".join(report["out"].split())  # the text report wraps its lines
    assert f"{flood} printed more than 1 MiB on stdout and was stopped" in said, report["out"]


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_run_bounded_cuts_a_flood_and_kills_it(stream: str) -> None:
    argv = [sys.executable, "-c", FLOOD.format(stream=stream, mib=64)]
    small = run_bounded(argv, 20, partial=True, cap=1000)
    assert isinstance(small, CommandResult) and small.cut and len(getattr(small, stream)) == 1000
    t0 = time.monotonic()
    failed = run_bounded(argv, 20)
    assert time.monotonic() - t0 < 5  # stopped at the cap, not at the deadline
    assert isinstance(failed, Unavailable) and failed.reason == "error"
    assert f"printed more than 1 MiB on {stream} and was stopped" in failed.detail
    partial = run_bounded(argv, 20, partial=True)
    assert isinstance(partial, CommandResult) and partial.cut and not partial.timed_out
    assert len(getattr(partial, stream)) == 1 << 20


def test_run_bounded_still_reads_a_normal_child_whole() -> None:
    script = "import sys; sys.stdout.write('o' * 300000); sys.stderr.write('e' * 200000); sys.exit(3)"
    before = set(stopping.registered())
    result = run_bounded([sys.executable, "-c", script], 20)
    assert isinstance(result, CommandResult) and not result.cut and not result.timed_out
    assert (result.returncode, len(result.stdout), len(result.stderr)) == (3, 300000, 200000)
    assert set(stopping.registered()) <= before  # reaped, so no longer registered


def test_capture_hands_over_lines_across_reads_and_stops_at_its_cap() -> None:
    got: list[bytes] = []
    capture = children.Capture(-1, cap=20, on_line=got.append)
    for chunk in (b"ab", b"c\nde", b"f\n\ng"):
        capture.feed(chunk)
    assert got == [b"abc", b"def", b""] and not capture.cut
    capture.feed(b"h" * 100)
    assert capture.cut and capture.size == 20
    capture.ended()
    assert got[-1] == b"g" + b"h" * 10
    kept = children.Capture(-1, cap=5)
    kept.feed(b"abc")
    kept.feed(b"defg")
    assert (kept.data, kept.cut) == (b"abcde", True)


def test_a_child_is_registered_until_it_is_reaped() -> None:
    child = children.Child(["sleep", "60"])
    assert stopping.registered().get(child.pid) is True  # its own process group
    child.kill()
    end = time.monotonic() + 5
    while child.pid in stopping.registered() and time.monotonic() < end:
        time.sleep(0.01)
    assert child.pid not in stopping.registered() and not alive(child.pid)
    done = children.Child([sys.executable, "-c", "print('x')"])
    assert done.read(time.monotonic() + 10) == children.EOF
    assert done.wait(time.monotonic() + 10) == 0 and done.pid not in stopping.registered()


def test_deep_and_bench_runners_stop_a_worker_that_floods(tmp_path: Path) -> None:
    from gpudoctor.bench import runner
    from gpudoctor.preflight.device_test import start_deep
    from tests.preflight.helpers import device_findings, facts

    flood = executable(tmp_path / "floods", f"#!{sys.executable}\n" + FLOOD.format(stream="stdout", mib=64))
    t0 = time.monotonic()
    deep = start_deep(flood, deadline=time.monotonic() + 10).result()
    assert time.monotonic() - t0 < 5 and deep.cut == "stdout" and not deep.timed_out
    [finding] = device_findings(deep, facts("healthy-2gpu"))
    assert "printed more than gpudoctor reads on its stdout" in finding.detail
    t0 = time.monotonic()
    bench = runner.run_worker([flood], 10)
    assert time.monotonic() - t0 < 10
    assert bench.status == "error" and "printed more than gpudoctor reads on its stdout" in bench.error


# ----------------------------------------------- 2. a stopped gpudoctor takes its children along

SIGNALS = [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)]


@pytest.mark.parametrize(("signo", "code"), SIGNALS, ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_check_python_stopped_by_a_signal(tmp_path: Path, spawned: Any, signo: int, code: int) -> None:
    python, pid_file = sleeper(tmp_path)
    proc = gpudoctor(spawned, "check", "--python", python, "--timeout", "30", "--nvml-timeout", "1")
    grandchild = wait_for_pid(pid_file, proc)
    returncode, out, err, took = stop(proc, signo)
    assert returncode == code, (out, err)
    assert took < PROMPT, took
    assert "Traceback" not in err
    said = "gpudoctor: interrupted" if signo == signal.SIGINT else f"gpudoctor: stopped by {signal.Signals(signo).name}"
    assert err.strip().splitlines()[-1] == said
    assert gone_within(grandchild, PROMPT), "the --python interpreter's process group outlived gpudoctor"


def test_gate_deep_stopped_by_sigterm(tmp_path: Path, spawned: Any) -> None:
    from tests.preflight.helpers import fake_python

    pid_file = tmp_path / "worker.pid"
    python = fake_python(tmp_path, [{"event": "hello"}], tail=f"{write_pid(pid_file)}\nexec sleep 60")
    proc = gpudoctor(spawned, "gate", "--root", HEALTHY, "--deep", "--python", python, "--timeout", "60")
    worker = wait_for_pid(pid_file, proc)
    returncode, out, err, took = stop(proc, signal.SIGTERM)
    assert (returncode, took < PROMPT, "Traceback" in err) == (143, True, False), (out, err, took)
    assert gone_within(worker, PROMPT), "the device test outlived gpudoctor"


def test_bench_stopped_by_sigint(tmp_path: Path, spawned: Any) -> None:
    pid_file = tmp_path / "worker.pid"
    # stands in for the target interpreter: ignores `-u bench.py CONFIG`, never prints an event
    python = executable(tmp_path / "python", f"#!/bin/sh\n{write_pid(pid_file)}\nexec sleep 60\n")
    proc = gpudoctor(spawned, "bench", "--facts", str(SNAPSHOTS / "h200-x2.json"), "--python", python, "--no-progress")
    worker = wait_for_pid(pid_file, proc)
    returncode, out, err, took = stop(proc, signal.SIGINT)
    assert (returncode, took < PROMPT, "Traceback" in err) == (130, True, False), (out, err, took)
    assert gone_within(worker, PROMPT), "the bench worker outlived gpudoctor"


def fake_pynvml(tmp_path: Path) -> tuple[Path, Path]:
    """A pynvml whose import never ends, and says who imported it: the NVML child hangs in it."""
    where = tmp_path / "fake-nvml"
    where.mkdir()
    pid_file = tmp_path / "nvml-child.pid"
    (where / "pynvml.py").write_text(
        f"import os, time\nopen({str(pid_file) + '.tmp'!r}, 'w').write(str(os.getpid()))\n"
        f"os.rename({str(pid_file) + '.tmp'!r}, {str(pid_file)!r})\ntime.sleep(60)\n"
    )
    return where, pid_file


@pytest.mark.parametrize(("signo", "code"), SIGNALS[:2], ids=["SIGTERM", "SIGINT"])
def test_the_nvml_child_goes_with_a_stopped_gpudoctor(tmp_path: Path, spawned: Any, signo: int, code: int) -> None:
    where, pid_file = fake_pynvml(tmp_path)
    # a live probe: the NVML child is forked before the command line is parsed (prestart)
    proc = gpudoctor(spawned, "check", "--nvml-timeout", "20", "--timeout", "30", PYTHONPATH=str(where))
    nvml_child = wait_for_pid(pid_file, proc)
    returncode, out, err, took = stop(proc, signo)
    assert (returncode, took < PROMPT, "Traceback" in err) == (code, True, False), (out, err, took)
    assert gone_within(nvml_child, PROMPT), "the NVML child outlived gpudoctor"


# Starts gpudoctor's console entry once the interpreter is up and the package imported (what
# `python -m gpudoctor` and the console script do first, before any gpudoctor code can handle a
# signal), and says so on a pipe: the signal below then always lands in gpudoctor's own code.
LAUNCHER = (
    "import os, sys\n"
    "ready = int(sys.argv.pop(1))\n"
    "import gpudoctor.__main__ as console\n"
    "os.write(ready, b'R')\n"
    "os.close(ready)\n"
    "console.main()\n"
)


def launch(args: list[str], extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    r, w = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(w), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env(**(extra_env or {})),
        pass_fds=(w,),
        start_new_session=True,
    )
    os.close(w)
    try:
        ready, _, _ = select.select([r], [], [], 20)
        assert ready and os.read(r, 1) == b"R", "the launcher did not start"
    finally:
        os.close(r)
    return proc


def test_ctrl_c_at_any_moment_exits_130_without_a_traceback() -> None:
    skip_if_ignored(signal.SIGINT)
    args = ["check", "--root", HEALTHY]
    normal = launch(args)
    want_out, want_err = normal.communicate(timeout=30)
    assert normal.returncode == 0 and want_err == b""
    rng = random.Random(20240611)
    seen = {"interrupted": 0, "finished": 0}
    for _ in range(30):
        proc = launch(args)
        try:
            time.sleep(rng.uniform(0, 0.2))
            finished = proc.poll() is not None
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert b"Traceback" not in err, err.decode(errors="replace")
        if proc.returncode == 130:
            assert err.strip().splitlines()[-1:] == [b"gpudoctor: interrupted"], err
            seen["interrupted"] += 1
        else:
            # only a run that had ended (written all of its report, past its last look at signals)
            assert (proc.returncode, out, err) == (0, want_out, b""), (finished, proc.returncode, err)
            seen["finished"] += 1
    assert seen["interrupted"] >= 5, seen


def test_ctrl_c_during_the_imports_kills_the_prestarted_nvml_child(tmp_path: Path) -> None:
    where, pid_file = fake_pynvml(tmp_path)
    for _ in range(10):
        if pid_file.exists():
            pid_file.unlink()
        proc = launch(["check", "--nvml-timeout", "20", "--timeout", "30"], {"PYTHONPATH": str(where)})
        try:
            nvml_child = wait_for_pid(pid_file, proc)
            returncode, out, err, took = stop(proc, signal.SIGINT)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        assert (returncode, "Traceback" in err) == (130, False), err
        assert gone_within(nvml_child, PROMPT), "the prestarted NVML child outlived gpudoctor"


# A stop signal that arrives while a child is being started is acted on once it is registered.
STARTING = r'''
import os, signal, sys, time
from gpudoctor import children
from gpudoctor.children import stopping
stopping.install_handlers()
try:
    with stopping.starting:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # the handler runs now, and must not raise yet
        child = children.Child(["sleep", "60"])
        print(child.pid, flush=True)
    print("not stopped", flush=True)
except SystemExit as exc:
    print("stopped", exc.code, flush=True)
'''


def test_a_signal_while_a_child_starts_waits_until_it_is_registered() -> None:
    done = subprocess.run([sys.executable, "-c", STARTING], capture_output=True, text=True, env=env(), timeout=30)
    pid, outcome = done.stdout.splitlines()
    assert outcome == "stopped 143", done.stderr
    assert gone_within(int(pid), PROMPT)


# A stop signal whose handler runs inside a weakref callback (importlib's module-lock callback,
# a __del__): Python swallows what the handler raises there and prints a traceback.
IN_A_CALLBACK = r'''
import os, signal, sys, time, weakref
from gpudoctor.children import stopping
stopping.install_handlers()

class Thing:
    pass

def callback(ref):
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(1000):  # the handler runs in here, where its exception cannot escape
        pass
    print("callback ended", flush=True)

started = time.monotonic()
try:
    thing = Thing()
    ref = weakref.ref(thing, callback)
    del thing
    print("after the callback", flush=True)
    time.sleep(20)  # a blocking call (a --sample wait, a write to a stalled pipe): the stop wakes it
    print("not stopped", flush=True)
except SystemExit as exc:
    print("stopped", exc.code, "early" if time.monotonic() - started < 10 else "late", flush=True)
'''


def test_a_stop_inside_a_weakref_callback_still_stops_without_a_traceback() -> None:
    skip_if_ignored(signal.SIGTERM)
    done = subprocess.run([sys.executable, "-c", IN_A_CALLBACK], capture_output=True, text=True, env=env(), timeout=30)
    assert done.stderr == ""
    # (the stop may come in the middle of a print: the line before it may lack its newline)
    assert done.stdout.endswith("stopped 143 early\n") and "not stopped" not in done.stdout, done.stdout


def interrupt_after(seconds: float) -> Any:
    """Raise KeyboardInterrupt in the main thread `seconds` from now, as Ctrl-C would."""

    def handler(signo: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    return previous


@pytest.fixture
def restore_alarm() -> Iterator[None]:
    previous = signal.getsignal(signal.SIGALRM)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


def test_an_exception_while_reading_the_device_test_kills_it(tmp_path: Path, restore_alarm: None) -> None:
    """gpudoctor as a library (no handlers): a KeyboardInterrupt in the reader kills the child."""
    from gpudoctor.preflight.device_test import start_deep
    from tests.preflight.helpers import fake_python

    pid_file = tmp_path / "worker.pid"
    python = fake_python(tmp_path, [{"event": "hello"}], tail=f"echo $$ > {pid_file}\nexec sleep 60")
    pending = start_deep(python, deadline=time.monotonic() + 60)
    interrupt_after(0.5)
    with pytest.raises(KeyboardInterrupt):
        pending.result()
    assert gone_within(int(pid_file.read_text()), PROMPT)


def test_an_exception_while_reading_the_bench_worker_kills_it(tmp_path: Path, restore_alarm: None) -> None:
    from gpudoctor.bench import runner

    pid_file = tmp_path / "worker.pid"
    worker = executable(tmp_path / "worker", f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 60\n")
    interrupt_after(0.5)
    with pytest.raises(KeyboardInterrupt):
        runner.run_worker([worker], 60)
    assert gone_within(int(pid_file.read_text()), PROMPT)


def test_an_exception_while_reading_a_tool_kills_it(tmp_path: Path, restore_alarm: None) -> None:
    pid_file = tmp_path / "tool.pid"
    tool = executable(tmp_path / "tool", f"#!/bin/sh\nsleep 60 &\necho $! > {pid_file}\nwait\n")
    interrupt_after(0.5)
    with pytest.raises(KeyboardInterrupt):
        run_bounded([tool], 60)
    assert gone_within(int(pid_file.read_text()), PROMPT)


# ------------------------------------------------------- 3. deadlines of weeks, or inf, do not overflow


def nvml_and_findings(timeout: float, nvml_timeout: float) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    from gpudoctor.engine.loader import load_rules
    from gpudoctor.engine.runner import run_rules
    from gpudoctor.probes import collect_all

    facts = collect_all(make_context(root=HEALTHY, timeout=timeout, nvml_timeout=nvml_timeout))
    ruleset = load_rules()
    found = [(f.rule_id, f.status, f.subject, f.message) for f in run_rules(ruleset, facts, ruleset.rules)]
    return facts["nvml"], found


@pytest.mark.parametrize("huge", [1e7, 2.5e6, float("inf")])
def test_a_huge_nvml_timeout_reads_the_replayed_nvml_as_the_default_does(huge: float) -> None:
    """The Python API takes any float (the CLI refuses more than a day): a deadline of weeks, or
    inf, once overflowed poll()'s milliseconds in the parent and alarm() in the child."""
    from gpudoctor.preflight.api import run as gate
    from gpudoctor.preflight.policy import Policy

    default = nvml_and_findings(30.0, 5.0)
    assert default[0]["status"] == "ok"
    assert nvml_and_findings(30.0, huge) == default
    assert nvml_and_findings(huge, huge) == default
    report = gate(Policy(deadline_s=huge), root=HEALTHY, nvml_timeout=huge)
    assert report.go, [line.text for line in report.lines]


@pytest.mark.parametrize("timeout", [1e7, float("inf")])
def test_the_nvml_child_under_a_huge_timeout(timeout: float) -> None:
    ctx = make_context(root=HEALTHY)
    sink = Assembler()
    assert run_child(make_plan(ctx), timeout, sink) is None
    assert sink.result(None)["status"] == "ok"


def test_every_wait_is_clamped() -> None:
    assert children.poll_ms(float("inf")) == children.poll_ms(1e12) == int(children.MAX_WAIT * 1000)
    assert children.poll_ms(float("nan")) == children.poll_ms(-5) == 0
    assert children.poll_ms(0.0001) == 1
    assert children.alarm_seconds(float("inf")) == children.alarm_seconds(1e30) == (1 << 31) - 1
    assert children.alarm_seconds(5.0) == 7 and children.alarm_seconds(0) == 2
    result = run_bounded([sys.executable, "-c", "print('hi')"], float("inf"))
    assert isinstance(result, CommandResult) and result.stdout == "hi\n"
    r, w = os.pipe()
    try:
        os.write(w, b"x")
        poller = select.poll()
        poller.register(r, select.POLLIN)
        assert poller.poll(children.poll_ms(float("inf")))  # the clamped value is one poll() takes
    finally:
        os.close(r)
        os.close(w)


def test_a_stop_signal_wrapped_by_python_is_still_a_stop() -> None:
    """A signal during click's import once arrived inside a class's __set_name__, which Python
    re-raises as a RuntimeError caused by the handler's exception: a traceback, not exit 130."""
    from gpudoctor.children.stopping import Stopped, stop_in

    try:
        try:
            raise Stopped(signal.SIGTERM)
        except BaseException as inner:
            raise RuntimeError("Error calling __set_name__") from inner
    except RuntimeError as wrapped:
        found = stop_in(wrapped)
    assert isinstance(found, Stopped) and found.code == 143
    assert stop_in(ValueError("not a signal")) is None
    interrupted = RuntimeError("wrapped")
    interrupted.__context__ = KeyboardInterrupt()
    assert isinstance(stop_in(interrupted), KeyboardInterrupt)
