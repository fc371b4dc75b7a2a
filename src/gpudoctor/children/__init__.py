"""Child processes under a deadline: how gpudoctor starts and reads them.

Every child gpudoctor starts (the NVML probe, a tool such as ``nvcc --version``, the ``--python``
interpreter, the ``gate --deep`` device test, the bench worker) goes through this package, as a
:class:`Child` (a program, or with :meth:`Child.forked` a forked copy of gpudoctor):

- it is **registered** while it may be alive, killed on every way out of gpudoctor and never
  waited on when stuck (:mod:`gpudoctor.children.stopping`: the registry and the stop signals);
- its output is **read with a cap** (:func:`pump`): both pipes at once, until end-of-file, a
  deadline, or more than the cap (:data:`OUTPUT_CAP` per pipe unless told otherwise) has come;
  then the child is killed and its output marked cut, so a child that floods its stdout costs
  gpudoctor a megabyte, not gigabytes, and not the whole deadline;
- a worker or the forked NVML child **reports in one line format**: :data:`MARKER`, a space and a
  compact JSON object with an ``"event"`` (:func:`event_line`), read back by :func:`parse_event`
  as strict, bounded JSON; other lines are not events;
- every single wait (poll, sleep) lasts at most :data:`MAX_WAIT` seconds (:func:`wait_seconds`,
  :func:`poll_ms`): a deadline of weeks, or ``inf``, would overflow poll()'s C int of
  milliseconds; the loops re-check their deadline instead.

Base layer: imports the standard library (subprocess, select, json only when used), its own
:mod:`.stopping`, and gpudoctor.inputs (strict JSON) when an event is read.
"""

from __future__ import annotations

import math
import os
import signal
import time
from typing import IO, Any, Callable, Mapping, Sequence

from .stopping import forget, forget_in_child, kill, register, starting, unregister

# What one pipe of a child may bring before the child is stopped and its output marked cut.
OUTPUT_CAP = 1 << 20
# Longest single wait, in seconds; loops that wait for longer re-check their deadline.
MAX_WAIT = 3600.0

_READ_SIZE = 1 << 16
_LATE_READS = 64  # reads of what is already in the pipes once the deadline has passed

# Outcomes of pump().
EOF = "eof"  # every pipe reached end-of-file
DONE = "done"  # the caller's done() said so
DEADLINE = "deadline"  # the deadline passed first
CUT = "cut"  # a pipe brought more than its cap


def wait_seconds(seconds: float) -> float:
    """`seconds` as one wait may take it: 0 for a negative or NaN value, at most MAX_WAIT."""
    if not seconds > 0:  # also NaN
        return 0.0
    return min(float(seconds), MAX_WAIT)


def poll_ms(seconds: float) -> int:
    """`seconds` as poll()'s timeout in whole milliseconds (rounded up), within 0..MAX_WAIT."""
    return int(math.ceil(wait_seconds(seconds) * 1000))


def alarm_seconds(timeout: float, slack: int = 2) -> int:
    """A signal.alarm() argument for a child that must not outlive `timeout` by much: at least 1,
    at most one C int (an alarm in 68 years is as good as none)."""
    try:
        whole = int(math.ceil(float(timeout))) if timeout > 0 else 0
    except (OverflowError, ValueError):  # inf, NaN
        whole = (1 << 31) - 1
    return max(1, min(whole + slack, (1 << 31) - 1))


# ---------------------------------------------------------------------------
# Reading children's output: both pipes, a cap on each, a deadline.


class Capture:
    """One pipe of a child, read by :func:`pump`: at most `cap` bytes are taken in, either kept
    (:attr:`data`) or, with `on_line`, handed over line by line (without the newline) as they
    complete. With `partial_line`, a last line without a newline is handed over at end-of-file."""

    def __init__(
        self,
        fd: int,
        cap: int = OUTPUT_CAP,
        on_line: Callable[[bytes], None] | None = None,
        *,
        partial_line: bool = True,
    ) -> None:
        self.fd = fd
        self.cap = cap
        self.on_line = on_line
        self.partial_line = partial_line
        self.size = 0
        self.cut = False
        self.eof = False
        self._chunks: list[bytes] = []
        self._pending: list[bytes] = []  # the line begun and not ended yet, in pieces

    def feed(self, chunk: bytes) -> None:
        room = self.cap - self.size
        if len(chunk) > room:
            chunk = chunk[: max(0, room)]
            self.cut = True
        self.size += len(chunk)
        if self.on_line is None:
            if chunk:
                self._chunks.append(chunk)
            return
        if b"\n" not in chunk:
            if chunk:
                self._pending.append(chunk)
            return
        self._pending.append(chunk)
        *lines, rest = b"".join(self._pending).split(b"\n")
        self._pending = [rest] if rest else []
        for line in lines:
            self.on_line(line)

    def ended(self) -> None:
        self.eof = True
        if self.on_line is not None and self._pending and self.partial_line:
            pending, self._pending = b"".join(self._pending), []
            self.on_line(pending)

    @property
    def data(self) -> bytes:
        if len(self._chunks) > 1:
            self._chunks = [b"".join(self._chunks)]
        return self._chunks[0] if self._chunks else b""

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


def pump(
    captures: Sequence[Capture],
    deadline: float,
    done: Callable[[], bool] | None = None,
    late_reads: int = _LATE_READS,
) -> str:
    """Read the captures' pipes until every one is at end-of-file (EOF), `done()` says so (DONE),
    one brought more than its cap (CUT), or the deadline (time.monotonic()) passes (DEADLINE).

    Past the deadline, what is already in the pipes is still read, without waiting (at most
    `late_reads` times), so a child collected late is judged by what it had said by then.
    Never raises for the pipes (a read error is end-of-file); the fds are left open."""
    import select

    poller = select.poll()
    open_: dict[int, Capture] = {}
    for capture in captures:
        if not capture.eof:
            open_[capture.fd] = capture
            poller.register(capture.fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    late = 0
    while open_:
        left = deadline - time.monotonic()
        events = poller.poll(poll_ms(left))
        if not events:
            if not left > 0:
                return DEADLINE
            continue
        if not left > 0:
            late += 1
            if late > late_reads:  # still talking after its deadline: enough
                return DEADLINE
        for fd, _ in events:
            reading = open_.get(fd)
            if reading is None:
                continue
            try:
                chunk = os.read(fd, _READ_SIZE)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                poller.unregister(fd)
                del open_[fd]
                reading.ended()
                continue
            reading.feed(chunk)
            if reading.cut:
                return CUT
        if done is not None and done():
            return DONE
    return EOF


# ---------------------------------------------------------------------------
# The one line protocol: how a worker script or the forked NVML child reports to its parent.

# An event line is MARKER, a space, one compact JSON object with an "event" key (a short string;
# the other keys snake_case), and a newline, flushed at once. Lines without the marker are not
# events: libraries print, and what they print is kept apart (a tail for error messages).
MARKER = "@@GPUDOCTOR@@"
_MARKER_BYTES = MARKER.encode("ascii")
# The longest event line read as one: the NVML child's recording of a big host's answers is the
# longest, a few hundred kilobytes; a longer line is not an event.
EVENT_CAP = 8 << 20


def event_line(event: str, **fields: Any) -> bytes:
    """One event as the protocol writes it (gpudoctor's own forked child; a worker script, which
    cannot import gpudoctor, carries its own three lines that write the same)."""
    import json

    body = json.dumps({"event": event, **fields}, separators=(",", ":"))
    return _MARKER_BYTES + b" " + body.encode("utf-8") + b"\n"


def parse_event(line: bytes | str, limit: int = EVENT_CAP) -> dict[str, Any] | None:
    """The event a line of a child's stdout carries, or None: a line without the marker, longer
    than `limit`, not UTF-8, not strict JSON (gpudoctor.inputs.parse_json: no NaN, bounded
    integers and nesting), not an object, or without a string "event"."""
    from ..inputs import InputError, parse_json

    if len(line) > limit:
        return None
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError:
            return None
    line = line.strip()
    if not line.startswith(MARKER):
        return None
    try:
        data = parse_json(line[len(MARKER) :], "a child's event line", "event line")
    except InputError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("event"), str):
        return None
    return data


def sleep_until(deadline: float, step: float) -> None:
    time.sleep(min(step, wait_seconds(deadline - time.monotonic())))


class Child:
    """A program run in its own session (never through a shell), registered while it may live,
    its stdout and stderr read by :meth:`read` with a cap each. Raises OSError (as
    subprocess.Popen does) when it cannot be started. :meth:`forked` runs a function in a forked
    copy of gpudoctor instead, read the same way."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        name: str = "",
        stdout_cap: int = OUTPUT_CAP,
        stderr_cap: int = OUTPUT_CAP,
    ) -> None:
        import subprocess

        with starting:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=dict(env) if env is not None else None,
                start_new_session=True,
                close_fds=True,
            )
            register(proc.pid, True)
        self._adopt(proc, name or (os.path.basename(argv[0]) if argv else "?"), True, stdout_cap, stderr_cap)

    @classmethod
    def forked(cls, target: Callable[[int], None], *, name: str, stdout_cap: int = OUTPUT_CAP) -> Child:
        """Run ``target(fd)`` in a forked copy of this process (no re-import: the NVML probe's
        child), which reports on the pipe ``fd`` only: its stdin, stdout and stderr are
        /dev/null, so a copy stuck in the kernel does not hold the caller's pipes open (a job
        script reading ``$(gpudoctor check)`` would wait for it). It stays in gpudoctor's process
        group and is killed by pid. Raises OSError when it cannot fork."""
        r, w = os.pipe()
        with starting:  # a stop signal now is acted on once the copy is registered
            try:
                pid = os.fork()
            except OSError:
                os.close(r)
                os.close(w)
                raise
            if pid == 0:  # the copy: never return into the caller's code
                code = 70
                try:
                    forget_in_child()
                    os.close(r)
                    _detach_stdio()
                    target(w)
                    code = 0
                finally:
                    os._exit(code)
            register(pid, False)
        os.close(w)
        child = cls.__new__(cls)
        child._adopt(_Forked(pid, os.fdopen(r, "rb", buffering=0)), name, False, stdout_cap, 0)
        return child

    def _adopt(self, proc: Any, name: str, group: bool, stdout_cap: int, stderr_cap: int) -> None:
        self.proc = proc
        self.name = name
        self.group = group  # it leads its own process group: the whole group is killed
        out: IO[bytes] = proc.stdout
        err: IO[bytes] | None = proc.stderr
        self.stdout = Capture(out.fileno(), stdout_cap)
        self.stderr = Capture(err.fileno() if err is not None else -1, stderr_cap)
        self.stderr.eof = err is None  # a forked copy has no stderr pipe
        self.returncode: int | None = None
        self.killed = False

    @property
    def pid(self) -> int:
        return int(self.proc.pid)

    @property
    def cut(self) -> bool:
        return self.stdout.cut or self.stderr.cut

    def cut_stream(self) -> str:
        return "stdout" if self.stdout.cut else "stderr"

    def read(
        self,
        deadline: float,
        *,
        stdout_line: Callable[[bytes], None] | None = None,
        stderr_line: Callable[[bytes], None] | None = None,
        done: Callable[[], bool] | None = None,
    ) -> str:
        """Read until end-of-file, the deadline or a cap (see pump()); a child past its cap is
        killed at once. On any exception (KeyboardInterrupt, Stopped, ...) the child is killed."""
        if stdout_line is not None:
            self.stdout.on_line = stdout_line
        if stderr_line is not None:
            self.stderr.on_line = stderr_line
        if self.killed:
            return DEADLINE
        try:
            outcome = pump((self.stdout, self.stderr), deadline, done)
        except BaseException:
            self.kill()
            raise
        if outcome == CUT:
            self.kill()
        return outcome

    def poll(self) -> int | None:
        """Its exit status once it has exited (then it is unregistered), else None; never blocks.
        As subprocess reports it: a negative status is the signal that ended it."""
        if self.returncode is None and not self.killed:
            code = self.proc.poll()
            if code is not None:
                self.returncode = int(code)
                unregister(self.proc.pid)
        return self.returncode

    def wait(self, deadline: float) -> int | None:
        """Poll for its exit until the deadline; None if it is still running then. Never blocks
        on the child (a child stuck in the kernel is never reaped by a blocking wait here)."""
        delay = 0.0005
        while self.poll() is None:
            if self.killed or not deadline - time.monotonic() > 0:
                return None
            sleep_until(deadline, delay)
            delay = min(delay * 2, 0.01)
        return self.returncode

    def kill(self, grace: float = 0.0) -> None:
        """SIGKILL it (its process group when it leads one) and never block on it: reaped here
        when it is gone within `grace` seconds (polled), else by a daemon thread (see forget())."""
        if self.killed or self.returncode is not None:
            return
        kill(self.pid, self.group)
        if grace > 0 and self.wait(deadline_in(grace)) is not None:
            self.close()
            return
        self.killed = True
        forget(self.proc, self.name, self.group)

    def close(self) -> None:
        """Done with it: an exited child's pipes are closed, a running one is killed."""
        if self.poll() is None:
            self.kill()
            return
        for stream in (self.proc.stdout, self.proc.stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass

    def describe_exit(self) -> str:
        """How it ended, for a message: "exited with status 3", "was killed by signal 9 (SIGKILL)"."""
        code = self.returncode
        if code is None:
            return "did not exit"
        if code >= 0:
            return f"exited with status {code}"
        try:
            return f"was killed by signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"was killed by signal {-code}"


class _Forked:
    """What Child uses of a subprocess.Popen, for a forked copy of gpudoctor."""

    def __init__(self, pid: int, stdout: IO[bytes]) -> None:
        self.pid = pid
        self.stdin = self.stderr = None
        self.stdout = stdout
        self.returncode: int | None = None

    def _reaped(self, flags: int) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, flags)
            except ChildProcessError:  # reaped already (the reaper thread)
                pid, status = self.pid, 0
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def poll(self) -> int | None:
        return self._reaped(os.WNOHANG)

    def wait(self) -> int | None:  # only the reaper thread of forget() blocks here
        return self._reaped(0)


def _detach_stdio() -> None:
    """In a forked copy: stdin, stdout and stderr to /dev/null."""
    try:
        null = os.open(os.devnull, os.O_RDWR)
    except OSError:
        return
    for fd in (0, 1, 2):
        try:
            os.dup2(null, fd)
        except OSError:
            pass
    if null > 2:
        os.close(null)


def deadline_in(seconds: float) -> float:
    """time.monotonic() + seconds, for any float (inf stays inf, NaN and negatives are now)."""
    if not seconds > 0:
        return time.monotonic()
    return time.monotonic() + float(seconds)
