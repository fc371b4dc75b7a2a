"""The NVML probe's child process, its events, and the parent's reading of them.

Why a child: an NVML call can block forever in the kernel (a GPU that fell off the bus, a wedged
driver), and a Python thread cannot interrupt a ctypes call. So NVML runs in a forked copy of
gpudoctor (gpudoctor.children.Child.forked: no re-import; ``python -m gpudoctor.probes.nvml``
is the fallback where fork is unavailable or other threads run). pynvml is imported only there.

The child reports in gpudoctor.children's one line protocol, on a pipe of its own, one event per
line: ``call`` {call, gpu} *before* every NVML call, then the facts as they are read (``system``
{key, value}, ``gpu`` {index, key, value}, ``gpu_done`` {index}), or ``init_failed`` {status,
error, reason, detail}; ``recording`` {answers} in record mode; ``error`` {detail} when the probe
itself broke; ``end`` when it is done. Values are facts as gpudoctor.facts.to_jsonable writes them.

The parent reads until the deadline (``ctx.nvml_timeout`` capped by the run's budget). On timeout
it kills the child, names the call(s) that were running and keeps what was already read; a child
stuck in the kernel (D state) is never waited on (gpudoctor.children reaps it in the background).
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
import time
from typing import Any

from ... import children
from ...facts import from_jsonable, to_jsonable
from .errors import HANG_HINT
from .fields import read_nvml
from .query import Sink
from .replay import ReplayUnavailable
from .section import Assembler

# What the child may write before it is stopped as runaway: a recording of a big host is a few
# hundred kilobytes.
OUTPUT_CAP = 16 << 20
# How long a killed child gets to be reaped here before it is left to gpudoctor.children's reaper.
_GRACE = 0.1


class _PipeSink:
    """Child side. Facts are buffered and written together with the next progress event,
    so each NVML call costs one write, and what was read before a hang is already out."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pending: list[bytes] = []
        self.lock = threading.Lock()  # GPU reader threads share the pipe

    def _add(self, event: str, flush: bool = False, **fields: Any) -> None:
        line = children.event_line(event, **fields)
        with self.lock:
            self.pending.append(line)
            if flush:
                data = b"".join(self.pending)
                self.pending.clear()
                while data:
                    written = os.write(self.fd, data)
                    data = data[written:]

    def calling(self, call: str, gpu: int | None) -> None:
        self._add("call", flush=True, call=call, gpu=gpu)

    def init_failed(self, status: str, error: str, reason: str, detail: str) -> None:
        self._add("init_failed", status=status, error=error, reason=reason, detail=detail)

    def system(self, key: str, value: Any) -> None:
        self._add("system", key=key, value=to_jsonable(value))

    def gpu(self, index: int, key: str, value: Any) -> None:
        self._add("gpu", index=index, key=key, value=to_jsonable(value))

    def gpu_done(self, index: int) -> None:
        self._add("gpu_done", flush=True, index=index)

    def recording(self, answers: dict[str, Any]) -> None:
        self._add("recording", answers=answers)

    def sample(self, index: int, value: Any, seconds: float) -> None:
        self._add("sample", flush=True, index=index, value=to_jsonable(value), seconds=seconds)

    def crashed(self, detail: str) -> None:
        self._add("error", flush=True, detail=detail)

    def finished(self) -> None:
        self._add("end", flush=True)


def dispatch(line: bytes, sink: Assembler) -> None:
    """Feed one line of the child's pipe to `sink`. Nothing but events is written there, so a
    line that is not one (malformed, cut, unknown) is the child's breakage, reported as such."""
    event = children.parse_event(line)
    try:
        if event is None:
            raise ValueError("not an event line")
        kind = event["event"]
        if kind == "call":
            sink.calling(str(event["call"]), event["gpu"])
        elif kind == "system":
            sink.system(str(event["key"]), from_jsonable(event["value"]))
        elif kind == "gpu":
            sink.gpu(int(event["index"]), str(event["key"]), from_jsonable(event["value"]))
        elif kind == "gpu_done":
            sink.gpu_done(int(event["index"]))
        elif kind == "init_failed":
            sink.init_failed(*(str(event[k]) for k in ("status", "error", "reason", "detail")))
        elif kind == "recording":
            sink.recording(event["answers"])
        elif kind == "sample":
            seconds = float(event["seconds"])
            if not math.isfinite(seconds) or seconds <= 0:
                raise ValueError(f"sample seconds {seconds!r}")
            sink.sample(int(event["index"]), from_jsonable(event["value"]), seconds)
        elif kind == "error":
            sink.crashed(str(event["detail"]))
        elif kind == "end":
            sink.finished()
        else:
            raise ValueError(f"unknown event {kind!r}")
    except Exception as exc:
        sink.crashed(f"unreadable message from the NVML child ({type(exc).__name__}: {exc}): {line[:80]!r}")


def open_backend(plan: dict[str, Any], sink: Sink) -> Any:
    """The backend the child reads: recorded answers or the real pynvml. None after init_failed."""
    replay = plan.get("replay")
    try:
        if replay:
            sink.calling("loading recorded NVML answers", None)
            from .replay import ReplayNVML

            return ReplayNVML.from_file(replay)
        sink.calling("import pynvml", None)
        import pynvml  # type: ignore[import-untyped]

        return pynvml
    except ReplayUnavailable as exc:
        status = "library_not_found" if exc.reason == "not_found" else "error"
        sink.init_failed(status, exc.detail, exc.reason, exc.detail)
    except ImportError as exc:
        detail = f"the Python package nvidia-ml-py (module pynvml) is not installed ({exc}): pip install nvidia-ml-py"
        sink.init_failed("library_not_found", detail, "not_found", detail)
    return None


def child_main(plan: dict[str, Any], fd: int) -> None:
    """Runs in the child: read NVML (or record it) and report every step on fd."""
    try:
        # Ctrl-C or a kill of the process group ends us at once, even inside a C call.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        # Belt and braces: should the parent die without killing us, do not linger past the deadline
        # (clamped: an alarm takes a C int, and the deadline may be days, or inf).
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(children.alarm_seconds(float(plan.get("timeout", 5.0))))
    except ValueError:  # not the main thread of this process
        pass
    sink = _PipeSink(fd)
    try:
        backend = open_backend(plan, sink)
        if backend is not None:
            cpu_words, node_words = int(plan.get("cpu_words", 1)), int(plan.get("node_words", 1))
            if plan.get("mode") == "record":
                from .recorder import RecordingBackend

                recorder = RecordingBackend(backend, scrub=bool(plan.get("scrub", True)))
                read_nvml(recorder, sink, cpu_words, node_words)
                sink.recording(recorder.answers())
            elif float(plan.get("sample_s") or 0) > 0:
                from .resample import FirstRead, read_again

                first = FirstRead(sink)
                read_nvml(backend, first, cpu_words, node_words)
                read_again(backend, sink, first, float(plan["sample_s"]))
            else:
                read_nvml(backend, sink, cpu_words, node_words)
        sink.finished()
    except BrokenPipeError:
        return  # the parent gave up on us
    except Exception as exc:
        try:
            sink.crashed(f"{type(exc).__name__}: {exc}")
        except OSError:
            pass


# ---------------------------------------------------------------------------
# The parent: start the child, read until the deadline, never block on it.


def can_fork() -> bool:
    # fork() in a multi-threaded process can deadlock the child on a lock another thread held.
    return hasattr(os, "fork") and threading.active_count() == 1


def _grow_pipe(fd: int) -> None:
    # Room for every event of a big host, so a child started early (prestart) is not held up
    # by a full pipe before the parent reads. Linux only; elsewhere the default size does.
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
    except (ImportError, OSError):
        pass


def _start(plan: dict[str, Any], fork: bool) -> children.Child:
    if fork:
        child = children.Child.forked(lambda fd: child_main(plan, fd), name="nvml", stdout_cap=OUTPUT_CAP)
    else:
        if not sys.executable:
            raise OSError("no Python interpreter path (sys.executable) to start the NVML child with")
        src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
        env = dict(os.environ)
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        argv = [sys.executable, "-m", "gpudoctor.probes.nvml", json.dumps(plan)]
        child = children.Child(argv, env=env, name="nvml", stdout_cap=OUTPUT_CAP)
    # a last line without its newline was cut short by the child's death: not an event
    child.stdout.partial_line = False
    _grow_pipe(child.stdout.fd)
    return child


class PendingChild:
    """A started NVML child whose events are read (until its deadline) by :meth:`wait`."""

    def __init__(self, plan: dict[str, Any], timeout: float, sink: Assembler, use_fork: bool | None = None) -> None:
        self.sink = sink
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.outcome: tuple[str, str] | None = None
        self.waited = False
        self.child: children.Child | None = None
        fork = can_fork() if use_fork is None else use_fork
        try:
            self.child = _start(dict(plan, timeout=timeout), fork)
        except OSError as exc:
            self.outcome = ("error", f"cannot start the NVML child process: {exc}")

    def wait(self) -> tuple[str, str] | None:
        """None when the child finished, else (reason, detail): a timeout naming the stuck call(s),
        or how the child died. Returns by the deadline; never blocks on the child.

        Past the deadline, what is already in the pipe is still read (without waiting), so a
        child collected late (see PendingNvml) is judged by what it had said by then."""
        if self.waited or self.child is None:
            return self.outcome
        self.waited = True
        sink, child = self.sink, self.child

        def line(raw: bytes) -> None:
            if raw:
                dispatch(raw, sink)

        # An exception (KeyboardInterrupt, a stop signal) kills the child inside read().
        ended = child.read(self.deadline, stdout_line=line, done=lambda: sink.complete)
        if ended == children.CUT:
            child.close()
            self.outcome = (
                "error",
                f"the NVML child process wrote more than {OUTPUT_CAP >> 20} MiB (while calling {sink.where()}) "
                "and was stopped",
            )
            return self.outcome
        if ended == children.DEADLINE:
            child.kill(_GRACE)  # stuck in the kernel (D state): reaped later, never waited on
            child.close()
            self.outcome = (
                "timeout",
                f"NVML did not answer within {self.timeout:.1f} s, stuck in {sink.where()}; {HANG_HINT}",
            )
            return self.outcome
        # It said it is done (or closed the pipe): a moment to exit, then kill; never a blocking wait.
        if child.wait(children.deadline_in(min(0.5, max(0.05, self.deadline - time.monotonic())))) is None:
            child.kill(_GRACE)
        child.close()
        if sink.complete:
            self.outcome = None
        elif sink.crash is not None:
            self.outcome = ("error", f"the NVML probe broke in its child process, in {sink.where()}: {sink.crash}")
        else:
            self.outcome = ("error", f"the NVML child process {child.describe_exit()} while calling {sink.where()}")
        return self.outcome

    def cancel(self) -> None:
        """Stop a child whose answer is no longer wanted (the run ended early); never blocks."""
        if self.waited or self.child is None:
            return
        self.waited = True
        self.outcome = ("error", "cancelled: the run stopped before NVML was collected")
        self.child.kill(_GRACE)
        self.child.close()


def run_child(
    plan: dict[str, Any], timeout: float, sink: Assembler, use_fork: bool | None = None
) -> tuple[str, str] | None:
    """Run the NVML child for plan, feeding its events to sink; see :meth:`PendingChild.wait`."""
    return PendingChild(plan, timeout, sink, use_fork).wait()


def spawned_main(argv: list[str]) -> int:
    """``python -m gpudoctor.probes.nvml PLAN_JSON``: the fallback child; events on stdout."""
    out = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # nothing else may write into the event stream
    os.close(devnull)
    child_main(json.loads(argv[0]), out)
    return 0
