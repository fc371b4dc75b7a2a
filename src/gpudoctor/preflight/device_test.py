"""`gate --deep`: run the device test (workers/device_test.py) in a child process under the gate's deadline.

The child is the *target* interpreter (``--python``, default this one) running the worker's
source with ``-c`` (so the gpudoctor package directory is not put first on its sys.path). It gets
its own session; it is started before the probes so that its torch import overlaps them. The
parent reads its event lines until the child exits or the deadline passes; then it SIGKILLs the
child's process group and never waits for it (a process stuck in the kernel on a hung GPU cannot
be killed; a daemon thread reaps it if it ever exits). A step that had begun and not ended names
the GPU that hung.

device_facts.py turns the result into the facts section ``device_test`` that the gate's rules
(rules/gate/gate.yaml) judge.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..children import CUT, EOF, Child, parse_event
from ..findings import Cause

WORKER = Path(__file__).resolve().parent.parent / "workers" / "device_test.py"
GPU_STEPS = ("context", "memory", "matmul")
# What the test may print on stdout before it is stopped as runaway: its events are short lines
# (well under a megabyte on any host); the rest is room for a library's prints.
WORKER_STDOUT_CAP = 8 << 20


@dataclass
class DeepResult:
    python: str
    budget_s: float
    started: bool = False
    start_error: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)
    timed_out: bool = False
    cancelled: str = ""
    cancel_cause: Cause | None = None
    returncode: int | None = None
    # the pipe ("stdout", "stderr") on which the test printed more than gpudoctor reads; it was stopped
    cut: str = ""
    stderr_tail: str = ""
    duration_s: float = 0.0
    # CUDA indices are NVML's (PCI order, no CUDA_VISIBLE_DEVICES), so index matching is safe
    index_is_nvml: bool = True

    def first(self, kind: str) -> dict[str, Any] | None:
        return next((e for e in self.events if e.get("event") == kind), None)

    @property
    def devices(self) -> dict[int, dict[str, Any]]:
        return {int(e["gpu"]): e for e in self.events if e.get("event") == "device" and isinstance(e.get("gpu"), int)}

    def ends(self) -> dict[tuple[Any, Any, Any], dict[str, Any]]:
        return {(e.get("gpu"), e.get("step"), e.get("peer")): e for e in self.events if e.get("event") == "end"}

    def running(self) -> list[dict[str, Any]]:
        """Steps that began and never ended."""
        ended = set(self.ends())
        return [
            e
            for e in self.events
            if e.get("event") == "begin" and (e.get("gpu"), e.get("step"), e.get("peer")) not in ended
        ]

    def to_json(self) -> dict[str, Any]:
        torch = self.first("torch") or {}
        cuda = self.first("cuda") or {}
        return {
            "ran": self.started,
            "python": self.python,
            "torch_version": torch.get("version"),
            "devices": cuda.get("count"),
            "duration_s": round(self.duration_s, 3),
            "import_s": torch.get("import_s"),
            "timed_out": self.timed_out,
            "steps": [{k: v for k, v in e.items() if k != "event"} for e in self.events if e.get("event") == "end"],
        }


# An event line is short (a step's result); a longer line is not one of the worker's.
MAX_EVENT_LINE = 64 << 10


def parse_events(stdout: str) -> list[dict[str, Any]]:
    """The worker's events in the one child line protocol (gpudoctor.children.parse_event)."""
    events = (parse_event(line, limit=MAX_EVENT_LINE) for line in stdout.splitlines())
    return [event for event in events if event is not None]


class DeepRun:
    """The device test in progress: :meth:`result` waits until the deadline at most.

    The child is a gpudoctor.children.Child: registered while it lives (a signal, or any way out
    of gpudoctor, kills it), its output read with a cap (a test that floods its pipes is stopped)."""

    def __init__(
        self, python: str, argv: Sequence[str], deadline: float, env: Mapping[str, str], index_is_nvml: bool
    ) -> None:
        self.started = time.monotonic()
        self.deadline = deadline
        self.result_ = DeepResult(
            python=python, budget_s=max(0.0, deadline - self.started), index_is_nvml=index_is_nvml
        )
        self.child: Child | None = None
        try:
            self.child = Child(argv, env=env, name="deep", stdout_cap=WORKER_STDOUT_CAP)
            self.result_.started = True
        except OSError as exc:
            self.result_.start_error = f"{python}: cannot start: {exc.strerror or exc}"

    def _finish(self) -> DeepResult:
        r = self.result_
        child = self.child
        if child is not None:
            r.events = parse_events(child.stdout.text())
            tail = child.stderr.text().strip().splitlines()
            r.stderr_tail = "\n".join(line[:500] for line in tail[-5:])
            child.close()
        r.duration_s = time.monotonic() - self.started
        return r

    def _read(self, deadline: float) -> None:
        """Read until the child exits or `deadline`; a child still running then is killed."""
        child = self.child
        assert child is not None
        outcome = child.read(deadline)
        if outcome == CUT:
            self.result_.cut = child.cut_stream()
        code = child.wait(deadline) if outcome == EOF else None
        if code is None:
            child.kill()
        self.result_.returncode = code

    def result(self) -> DeepResult:
        if self.child is None:
            return self._finish()
        self._read(self.deadline)
        if self.result_.returncode is None and not self.result_.cut:
            self.result_.timed_out = True
        return self._finish()

    def cancel(self, reason: str, cause: Cause | None = None) -> DeepResult:
        """Stop the test now (the gate stopped, or the driver is known not to answer)."""
        self.result_.cancelled = reason
        self.result_.cancel_cause = cause
        if self.child is None:
            return self._finish()
        self._read(min(self.deadline, time.monotonic() + 0.05))
        return self._finish()


def start_deep(
    python: str,
    *,
    deadline: float,
    memory_mib: int = 256,
    devices: Sequence[int] | None = None,
    env: Mapping[str, str] | None = None,
    extra_args: Sequence[str] = (),
) -> DeepRun:
    """Start the device test now; it must end by ``deadline`` (time.monotonic())."""
    child_env = dict(os.environ if env is None else env)
    # CUDA numbers devices fastest-first unless told otherwise; PCI order makes its indices NVML's.
    child_env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    index_is_nvml = child_env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and "CUDA_VISIBLE_DEVICES" not in child_env
    # With -c the interpreter puts the current directory first on sys.path; a timeit.py or json.py
    # lying there must not replace the standard library in the test (sys itself is built in).
    source = (
        "import sys\n"
        "if sys.path and sys.path[0] == '': del sys.path[0]\n"
        f"path = {str(WORKER)!r}\n"
        "with open(path, encoding='utf-8') as fh: code = compile(fh.read(), path, 'exec')\n"
        "exec(code, {'__name__': '__main__', '__file__': path})\n"
    )
    argv = [python, "-c", source, "--memory-mib", str(memory_mib)]
    if devices is not None:
        argv += ["--devices", ",".join(str(d) for d in devices)]
    argv += list(extra_args)
    return DeepRun(python, argv, deadline, child_env, index_is_nvml)
