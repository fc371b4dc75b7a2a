"""A status line on stderr while a slow step runs: "gpudoctor: importing torch in /usr/bin/python3 ..."

Shown only on a terminal and only once a step has taken DELAY_S, so a fast run prints nothing
extra and pipes, files and CliRunner see exactly what they saw before. The line is cleared when
the next step starts and when the work is done, so the report that follows starts on a clean line.
"""

from __future__ import annotations

import sys
import threading
from types import TracebackType
from typing import Any, Callable

from ..escaping import printable
from .output import _isatty

# A step shorter than this prints nothing: the line would only flicker.
DELAY_S = 1.0


class Progress:
    """Callable as ``progress(label)``: the step now running (None: none). Use as a context manager
    or call :meth:`done`; the timer thread is a daemon, so a run that ends early never waits on it."""

    def __init__(self, stream: Any = None, enabled: bool = True, delay: float | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled and _isatty(self.stream)
        self.delay = DELAY_S if delay is None else delay
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._step = 0  # which step a pending timer belongs to
        self._shown = 0  # length of the line on the terminal now (0: none)

    def __call__(self, label: str | None) -> None:
        if not self.enabled:
            return
        with self._lock:
            self._stop()
            self._step += 1
            if label is None:
                return
            line = f"gpudoctor: {printable(label)} ..."
            if self.delay <= 0:
                self._write(line)
                return
            self._timer = threading.Timer(self.delay, self._show, (self._step, line))
            self._timer.daemon = True
            self._timer.start()

    def done(self) -> None:
        self(None)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.done()

    def _show(self, step: int, line: str) -> None:
        with self._lock:
            if step == self._step:  # not yet replaced by the next step
                self._write(line)

    def _write(self, line: str) -> None:
        try:
            self.stream.write(line)
            self.stream.flush()
        except (OSError, ValueError):  # a closed terminal must not take the run down
            self.enabled = False
            return
        self._shown = len(line)

    def _stop(self) -> None:
        # called with the lock held: cancel a pending line and clear the one on screen
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._shown:
            width, self._shown = self._shown, 0
            try:
                self.stream.write("\r" + " " * width + "\r")
                self.stream.flush()
            except (OSError, ValueError):
                self.enabled = False


def finish_collection(
    collection: Any,
    python: str | None,
    torch_import: bool,
    sample_s: float | None = None,
    enabled: bool = True,
    meanwhile: Callable[[], object] | None = None,
) -> Any:
    """``collection.finish()`` (a probe run, see gpudoctor.probes) with a status line for its slow
    steps; ``meanwhile``: see Collection.finish."""
    with Progress(enabled=enabled) as progress:
        return collection.finish(on_step=steps(progress, python, torch_import, sample_s), meanwhile=meanwhile)


def steps(progress: Progress, python: str | None, torch_import: bool, sample_s: float | None) -> Callable[[str], None]:
    """An ``on_step(name)`` for the probes and the gate that shows each step's words on ``progress``."""
    return lambda name: progress(step_label(name, python, torch_import, sample_s))


def step_label(name: str, python: str | None, torch_import: bool, sample_s: float | None) -> str:
    """The words for a step of a probe run, by the name `Collection.finish` gives it."""
    if name == "torch":
        return f"{'importing' if torch_import else 'reading'} torch in {python or sys.executable}"
    if name == "nvml":
        if sample_s:
            return f"reading the GPU error counters twice, {sample_s:g} s apart"
        return "waiting for NVML"
    if name == "counter_rates":
        return "reading the RDMA error counters again"
    if name == "deep":
        return f"running the device test (--deep) in {python or sys.executable}"
    if name == "kernel_log":
        return "reading the kernel log"
    return f"reading {name}"
