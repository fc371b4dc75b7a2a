"""The one line protocol of gpudoctor's children (gpudoctor.children: MARKER, event_line,
parse_event), as the NVML child, the bench worker and the device test use it, and a child read
through it: events split across reads, a malformed line, a line over the cap, a child that
never answers (killed at the deadline, never waited for), a forked copy read like any child.

tests/hardening/test_children.py has the signals, floods and stops of whole gpudoctor runs."""

from __future__ import annotations

import io
import json
import os
import sys
import threading
import time
from contextlib import redirect_stdout
from typing import Any

import pytest

from gpudoctor import children
from gpudoctor.children import stopping
from gpudoctor.workers import bench as bench_worker

LINE = b'@@GPUDOCTOR@@ {"event":"result","gpu":0,"tflops":712.5}'


def test_an_event_line_is_read_back() -> None:
    assert children.parse_event(LINE) == {"event": "result", "gpu": 0, "tflops": 712.5}
    assert children.parse_event(LINE.decode() + "\r\n") == {"event": "result", "gpu": 0, "tflops": 712.5}
    line = children.event_line("gpu", index=1, key="name", value="H200")
    assert line == b'@@GPUDOCTOR@@ {"event":"gpu","index":1,"key":"name","value":"H200"}\n'  # compact, event first
    assert children.parse_event(line) == {"event": "gpu", "index": 1, "key": "name", "value": "H200"}


def test_the_bench_worker_writes_what_the_parent_reads() -> None:
    # a worker cannot import gpudoctor: its own emit must write gpudoctor.children's marker
    out = io.StringIO()
    with redirect_stdout(out):
        bench_worker.emit({"event": "step", "done": 1, "label": "GPU 0: bf16 matmul"})
    text = out.getvalue()
    assert text.startswith(children.MARKER + " ") and text.endswith("\n") and text.count("\n") == 1
    assert children.parse_event(text) == {"event": "step", "done": 1, "label": "GPU 0: bf16 matmul"}


@pytest.mark.parametrize(
    "line",
    [
        b"a library prints this",  # no marker: not an event
        b"",
        b"@@GPUDOCTOR@@",
        b'@@GPUDOCTOR@@ {"event":"result","gpu":0',  # cut short
        b"@@GPUDOCTOR@@ not json",
        b'@@GPUDOCTOR@@ ["event","result"]',  # not an object
        b'@@GPUDOCTOR@@ {"gpu":0}',  # no event
        b'@@GPUDOCTOR@@ {"event":7}',  # not a string
        b'@@GPUDOCTOR@@ {"event":"result","tflops":NaN}',  # not strict JSON
        b'@@GPUDOCTOR@@ {"event":"result","n":' + b"9" * 100 + b"}",  # an unbounded integer
        b'@@GPUDOCTOR@@ {"event":"x","deep":' + b"[" * 100 + b"]" * 100 + b"}",  # nested too deep
        b'@@GPUDOCTOR@@ {"event":"result","name":"\xff"}',  # not UTF-8
        b'@@GPUDOCTOR-BENCH@@{"event":"done"}',  # the old bench marker
    ],
)
def test_a_line_that_is_not_an_event_is_none(line: bytes) -> None:
    assert children.parse_event(line) is None


def test_a_line_over_the_cap_is_not_an_event() -> None:
    padded = b'@@GPUDOCTOR@@ {"event":"recording","answers":"' + b"x" * 1000 + b'"}'
    assert children.parse_event(padded) is not None
    assert children.parse_event(padded, limit=len(padded) - 1) is None
    assert children.parse_event(padded.decode(), limit=len(padded) - 1) is None
    huge = b'@@GPUDOCTOR@@ {"event":"recording","answers":"' + b"x" * children.EVENT_CAP + b'"}'
    assert children.parse_event(huge) is None


def test_an_event_split_across_reads_is_read_whole() -> None:
    events: list[dict[str, Any] | None] = []
    capture = children.Capture(-1, on_line=lambda raw: events.append(children.parse_event(raw)))
    stream = b"torch warns here\n" + LINE + b"\n" + children.event_line("done")
    for i in range(0, len(stream), 7):  # a pipe hands over whatever it holds: any split
        capture.feed(stream[i : i + 7])
    capture.ended()
    assert events == [None, {"event": "result", "gpu": 0, "tflops": 712.5}, {"event": "done"}]


def test_a_child_that_never_answers_is_killed_at_its_deadline() -> None:
    script = "import time\nprint('starting', flush=True)\ntime.sleep(600)\n"
    child = children.Child([sys.executable, "-c", script], name="silent")
    events: list[dict[str, Any]] = []

    def line(raw: bytes) -> None:
        event = children.parse_event(raw)
        if event is not None:
            events.append(event)

    started = time.monotonic()
    assert child.read(started + 1.0, stdout_line=line, done=lambda: bool(events)) == children.DEADLINE
    child.kill(0.5)
    assert time.monotonic() - started < 1.0 + 1.0 and events == []
    end = time.monotonic() + 5
    while child.pid in stopping.registered() and time.monotonic() < end:
        time.sleep(0.01)
    assert child.pid not in stopping.registered()


def test_a_child_stuck_in_the_kernel_is_never_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    # A child in uninterruptible sleep (a hung GPU) does not die of SIGKILL: it is seen here as a
    # child that never exits. kill() must return within its grace, and leave it to the reaper.
    child = children.Child([sys.executable, "-c", "import time; time.sleep(600)"], name="stuck")
    released = threading.Event()
    real_pid = child.pid
    monkeypatch.setattr(child.proc, "poll", lambda: None)

    def wait_forever(*args: Any) -> int:
        released.wait(30)  # the reaper thread blocks here, never the caller
        return os.waitpid(real_pid, 0)[1]

    monkeypatch.setattr(child.proc, "wait", wait_forever)
    started = time.monotonic()
    assert child.read(started + 0.2) == children.DEADLINE
    child.kill(0.2)
    assert time.monotonic() - started < 0.2 + 0.2 + 0.5
    assert child.killed and child.poll() is None
    assert real_pid in stopping.registered()  # still accounted for: kill_all() would reach it
    released.set()
    end = time.monotonic() + 5
    while real_pid in stopping.registered() and time.monotonic() < end:
        time.sleep(0.01)
    assert real_pid not in stopping.registered()


def _report(fd: int) -> None:
    os.write(fd, b"noise without the marker\n")
    os.write(fd, children.event_line("ready", pid=os.getpid()))
    os.write(fd, children.event_line("end"))


def test_a_forked_copy_is_read_and_reaped_like_any_child() -> None:
    if not hasattr(os, "fork") or threading.active_count() != 1:
        pytest.skip("forking needs a single-threaded process")
    child = children.Child.forked(_report, name="copy")
    assert stopping.registered().get(child.pid) is False  # in gpudoctor's own group: killed by pid
    events = []
    outcome = child.read(time.monotonic() + 10, stdout_line=lambda raw: events.append(children.parse_event(raw)))
    assert outcome == children.EOF
    assert events[0] is None and events[1] == {"event": "ready", "pid": child.pid} and events[2] == {"event": "end"}
    assert child.wait(time.monotonic() + 10) == 0 and child.describe_exit() == "exited with status 0"
    assert child.pid not in stopping.registered()
    child.close()


def _hang(fd: int) -> None:
    os.write(fd, children.event_line("call", call="nvmlInit", gpu=None))
    time.sleep(600)


def test_a_forked_copy_that_hangs_is_killed_and_says_how_it_ended() -> None:
    if not hasattr(os, "fork") or threading.active_count() != 1:
        pytest.skip("forking needs a single-threaded process")
    child = children.Child.forked(_hang, name="copy")
    seen: list[Any] = []
    started = time.monotonic()
    assert child.read(started + 0.5, stdout_line=lambda raw: seen.append(json.loads(raw.split(b" ", 1)[1]))) == (
        children.DEADLINE
    )
    child.kill(0.5)
    assert seen == [{"event": "call", "call": "nvmlInit", "gpu": None}]
    assert child.returncode is not None and child.describe_exit() == "was killed by signal 9 (SIGKILL)"
    assert child.pid not in stopping.registered() and time.monotonic() - started < 2.0
