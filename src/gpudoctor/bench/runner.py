"""Run the bench worker in a child process of the target Python, under a deadline.

The child gets its own session; at the deadline the whole process group is killed and what it
printed so far is kept (a test that had not finished is reported as timed out). Its events are
read as they come, so the progress bar moves while it runs. Nothing here imports torch.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .. import workers
from ..children import CUT, DEADLINE, DONE, MARKER, Child, deadline_in, parse_event

Progress = Callable[[int, int, str], None]
# What the worker may print on stdout (its events are a few hundred bytes each; a full bench of
# 8 GPUs, well under a megabyte) before it is stopped as runaway.
STDOUT_CAP = 8 << 20


@dataclass
class BenchRun:
    """What the worker reported."""

    status: str = "ok"  # ok, timeout, error, no_torch, no_device
    error: str = ""
    start: dict[str, Any] = field(default_factory=dict)
    results: list[dict[str, Any]] = field(default_factory=list)
    loads: dict[int, dict[str, Any]] = field(default_factory=dict)
    notes: list[dict[str, Any]] = field(default_factory=list)
    planned: int = 0
    done: bool = False
    duration_s: float = 0.0
    exit_code: int | None = None
    stderr_tail: str = ""
    fatal: bool = False  # the worker itself reported why it stopped
    mode: str = "quick"


@dataclass(frozen=True)
class NoDevice:
    """Why torch saw no GPU, from what the worker found (never from its stderr).

    remedy: "torch_build" (a CPU-only torch: install a CUDA or ROCm build), "visible_devices"
    (CUDA_VISIBLE_DEVICES hides every GPU), or "driver" (a GPU build that finds no device: the
    driver is not loaded, too old for the build, or the device files are not reachable)."""

    python: str
    torch_version: str
    build: str  # "CUDA 12.4", "ROCm 6.2" or "CPU-only"
    device_count: int | None
    visible_devices: str | None
    remedy: str


def no_device_cause(run: BenchRun, python: str) -> NoDevice:
    start = run.start
    cuda, hip = start.get("cuda_version"), start.get("hip_version")
    build = f"ROCm {hip}" if hip else (f"CUDA {cuda}" if cuda else "CPU-only")
    count = start.get("device_count")
    visible = start.get("cuda_visible_devices")
    visible = visible if isinstance(visible, str) else None
    if build == "CPU-only":
        remedy = "torch_build"
    elif visible is not None and visible.strip() in ("", "-1"):
        remedy = "visible_devices"
    else:
        remedy = "driver"
    return NoDevice(
        python=str(start.get("python") or python),
        torch_version=str(start.get("torch_version") or "?"),
        build=build,
        device_count=count if isinstance(count, int) and not isinstance(count, bool) else None,
        visible_devices=visible,
        remedy=remedy,
    )


def worker_path() -> str:
    return workers.path("bench")


def pynvml_file() -> str | None:
    """gpudoctor's NVML binding (nvidia-ml-py: one pure-Python module), found without importing it.
    The worker loads it from this file when the target Python has no pynvml, for its readings under
    load; nothing else of gpudoctor's environment reaches the worker."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("pynvml")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return str(Path(spec.origin).resolve())


def worker_argv(python: str, config: Mapping[str, Any]) -> list[str]:
    config = dict(config)
    binding = pynvml_file()
    if binding:
        config.setdefault("pynvml_file", binding)
    return [python, "-u", worker_path(), json.dumps(config)]


def child_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    # torch's device indices then follow PCI order, as NVML's and nvidia-smi's do
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def handle_event(run: BenchRun, event: Mapping[str, Any], progress: Progress | None) -> None:
    kind = event.get("event")
    if kind == "start":
        run.start = dict(event)
    elif kind == "plan":
        run.planned = int(event.get("steps", 0))
        run.mode = str(event.get("mode", run.mode))
    elif kind == "step":
        if progress is not None:
            progress(int(event.get("done", 0)), int(event.get("total", run.planned or 1)), str(event.get("label", "")))
    elif kind == "result":
        run.results.append(dict(event))
    elif kind == "load" and isinstance(event.get("gpu"), int):
        run.loads[int(event["gpu"])] = {k: v for k, v in event.items() if k not in ("event", "gpu")}
    elif kind == "done":
        run.done = True
    elif kind == "fatal":
        run.fatal = True
        if event.get("missing_torch"):
            run.status = "no_torch"
        elif event.get("no_device"):
            run.status = "no_device"
        else:
            run.status = "error"
        run.error = str(event.get("error", "the bench worker failed"))
        for key in ("torch_version", "cuda_version", "hip_version", "python", "device_count", "cuda_visible_devices"):
            if key in event and key not in run.start:
                run.start[key] = event[key]
    elif kind == "note":
        run.notes.append(dict(event))


def run_worker(
    argv: Sequence[str],
    timeout: float,
    progress: Progress | None = None,
    env: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> BenchRun:
    """Start the worker, read its events until it exits or the deadline passes.

    The worker is a gpudoctor.children.Child: registered while it lives (a signal, or any way out
    of gpudoctor, kills its process group), its pipes read with a cap each."""
    run = BenchRun()
    started = clock()
    try:
        child = Child(argv, env=env if env is not None else child_env(), name="bench-worker",
                      stdout_cap=STDOUT_CAP)
    except OSError as exc:
        run.status = "error"
        run.error = f"cannot start {argv[0]}: {exc.strerror or exc}"
        return run

    tail: collections.deque[str] = collections.deque(maxlen=40)

    def on_stdout(raw: bytes) -> None:
        event = parse_event(raw)
        if event is not None:
            handle_event(run, event, progress)
            return
        text = raw.decode("utf-8", "replace").strip()
        if text and not text.startswith(MARKER):  # a malformed event line is dropped
            tail.append(text[:500])  # stray prints of torch or a library: kept for the error message

    def on_stderr(raw: bytes) -> None:
        tail.append(raw.decode("utf-8", "replace").rstrip()[:500])

    deadline = deadline_in(timeout)
    # Its stdout closed means the worker is done; stderr may be held open by a process it left.
    outcome = child.read(deadline, stdout_line=on_stdout, stderr_line=on_stderr, done=lambda: child.stdout.eof)
    if outcome == DONE:
        late = child.read(min(deadline, time.monotonic() + 1.0))  # what it still says on stderr
        outcome = CUT if late == CUT else DONE
    if outcome == DEADLINE:
        child.kill()
        run.status = "timeout"
        running = f" while running test {len(run.results) + 1} of {run.planned}" if run.planned else ""
        run.error = f"the bench did not finish within {timeout:.0f} s{running} and was stopped"
    elif outcome == CUT:
        run.status = "error"
        run.error = f"the bench worker printed more than gpudoctor reads on its {child.cut_stream()} and was stopped"
    else:
        run.exit_code = child.wait(time.monotonic() + 5)
        if run.exit_code is None:
            child.kill()
        if run.status == "ok" and not run.done:
            run.status = "error"
            code = run.exit_code
            how = f"exit status {code}" if code is not None and code >= 0 else f"signal {-(code or 0)}"
            run.error = f"the bench worker stopped early ({how})"
    child.close()
    run.stderr_tail = "\n".join(list(tail)[-12:])
    run.duration_s = round(clock() - started, 2)
    return run


class ProgressBar:
    """A one-line bar on a terminal (stderr): [#####.....] 12/30  GPU 1: bf16 matmul"""

    def __init__(self, stream: Any = None, width: int = 28) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.started = time.monotonic()
        self._last = ""

    def __call__(self, done: int, total: int, label: str) -> None:
        if not self.enabled:
            return
        total = max(total, 1)
        filled = int(self.width * min(done, total) / total)
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = time.monotonic() - self.started
        line = f"\r[{bar}] {done}/{total} {elapsed:5.1f}s  {label}"[:120]
        pad = " " * max(0, len(self._last) - len(line))
        self.stream.write(line + pad)
        self.stream.flush()
        self._last = line

    def close(self) -> None:
        if self.enabled and self._last:
            self.stream.write("\r" + " " * len(self._last) + "\r")
            self.stream.flush()
