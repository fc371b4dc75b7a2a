"""The parent's side of the probe: the events of the NVML child, assembled into the ``nvml``
section of the facts as the schema describes it; what was not read (a hang, a crash, a child
that died) is Unavailable with the reason, naming the call that was running.
"""

from __future__ import annotations

from typing import Any

from ...facts import Unavailable
from .fields import GPU_FIELDS, SYSTEM_FIELDS


class Assembler:
    """Collects sink events and builds the ``nvml`` section of the facts."""

    def __init__(self) -> None:
        # The call each reader (None: the system stage, else a GPU index) is in, until it is done.
        self.in_flight: dict[int | None, str] = {}
        self.gpus_done: set[int] = set()
        self.init_failure: tuple[str, str, str, str] | None = None
        self.system_facts: dict[str, Any] = {}
        self.gpu_facts: dict[int, dict[str, Any]] = {}
        self.answers: dict[str, Any] | None = None
        self.crash: str | None = None
        self.complete = False
        # --sample: GPU index -> (second read of nvlink_link_errors, seconds after the first)
        self.samples: dict[int, tuple[Any, float]] = {}

    # Sink interface
    def calling(self, call: str, gpu: int | None) -> None:
        if gpu is not None:
            self.in_flight.pop(None, None)  # the system stage is over once GPUs are read
        self.in_flight[gpu] = call

    def init_failed(self, status: str, error: str, reason: str, detail: str) -> None:
        self.init_failure = (status, error, reason, detail)

    def system(self, key: str, value: Any) -> None:
        self.system_facts[key] = value

    def gpu(self, index: int, key: str, value: Any) -> None:
        self.gpu_facts.setdefault(index, {})[key] = value

    def gpu_done(self, index: int) -> None:
        self.in_flight.pop(index, None)
        self.gpus_done.add(index)

    def recording(self, answers: dict[str, Any]) -> None:
        self.answers = answers

    def sample(self, index: int, value: Any, seconds: float) -> None:
        self.samples[index] = (value, seconds)

    def crashed(self, detail: str) -> None:
        self.crash = detail

    def finished(self) -> None:
        self.complete = True

    # Results
    def where(self) -> str:
        """The calls in flight, e.g. "nvmlDeviceGetPowerUsage on GPU 1"."""
        if not self.in_flight:
            return "no NVML call (between calls)"
        parts = [
            call + (f" on GPU {gpu}" if gpu is not None else "")
            for gpu, call in sorted(self.in_flight.items(), key=lambda item: -1 if item[0] is None else item[0])
        ]
        return " and ".join(parts)

    def result(self, interrupted: tuple[str, str] | None = None) -> dict[str, Any]:
        """The section. `interrupted` = (reason, detail) when the child did not finish."""
        if self.init_failure is not None:
            status, error, reason, detail = self.init_failure
            gone = Unavailable(reason, detail)
            return _section(status, error, dict.fromkeys(SYSTEM_FIELDS, gone), gone)
        if self.crash is not None and interrupted is None:
            interrupted = ("error", f"the NVML probe failed in its child process: {self.crash}")
        if interrupted is None and not self.complete:
            interrupted = ("error", f"the NVML child process stopped without finishing, {self.where()}")
        status, error = "ok", ""
        fill = Unavailable("error", "not read by the NVML probe")
        if interrupted is not None:
            reason, detail = interrupted
            status, error = ("timeout" if reason == "timeout" else "error"), detail
            fill = Unavailable(reason, detail)
        system = {key: self.system_facts.get(key, fill) for key in SYSTEM_FIELDS}
        count = system["device_count"]
        if isinstance(count, Unavailable):
            if status == "ok":
                status, error = "error", count.detail
            return _section(status, error, system, count)
        gpus = [self._gpu_entry(i, fill, interrupted) for i in range(count)]
        return _section(status, error, system, gpus)

    def _gpu_entry(self, index: int, fill: Unavailable, interrupted: tuple[str, str] | None) -> dict[str, Any]:
        got = self.gpu_facts.get(index, {})
        entry: dict[str, Any] = {"index": index, "lost": bool(got.get("lost", False))}
        missing = fill
        if interrupted is not None and index in self.in_flight:
            # A GPU being read when the child stopped: after a hang, that GPU is unreachable.
            if interrupted[0] == "timeout":
                entry["lost"] = True
            missing = Unavailable(interrupted[0], f"not read: {interrupted[1]}")
        elif interrupted is not None and index not in self.gpus_done:
            missing = Unavailable(interrupted[0], f"not read: the probe stopped earlier ({interrupted[1]})")
        for key in GPU_FIELDS:
            entry[key] = got.get(key, missing)
        return entry


def _section(status: str, error: str, system: dict[str, Any], gpus: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"status": status, "error": error}
    out.update(system)
    out["gpus"] = gpus
    return out
