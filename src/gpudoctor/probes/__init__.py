"""Probes: each module reads one source and returns one section of the facts.

A probe module exposes ``collect(ctx) -> dict``. It never judges, never
raises for a missing or broken source (those become Unavailable facts), and
reads every path through the context root. A probe that crashes anyway is
recorded as crashed in ``meta.probes`` and its section becomes unavailable
(error); the other probes still run.

What a probe may import: the base layer only (context, facts, inputs, children, model, schemas,
tables) and the other probe modules; never the engine, advice, the gate, bench, render or the
CLI, which all read what the probes wrote. Worker scripts are not imported, only run.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any, Callable

from ..context import ProbeContext
from ..facts import Unavailable, make_snapshot, walk

Collector = Callable[[ProbeContext], Any]


def _collectors() -> dict[str, Collector]:
    # Imported here so that `gpudoctor rules list` never pays for probe imports.
    from . import amdgpu, ascend, host, kernel_modules, kmsg, modules, numa, pci, rdma, rocm, toolkit, torch

    # sysfs first: it cannot hang; torch last of these since it may start an interpreter.
    return {
        "host": host.collect,
        "pci": pci.collect,
        "numa": numa.collect,
        "rdma": rdma.collect,
        "modules": modules.collect,
        "kernel_modules": kernel_modules.collect,
        "rocm": rocm.collect,
        "ascend": ascend.collect,
        "amdgpu": amdgpu.collect,
        "toolkit": toolkit.collect,
        "kernel_log": kmsg.collect,
        "torch": torch.collect,
    }


ORDER = (
    "host", "pci", "numa", "rdma", "modules", "kernel_modules", "rocm", "ascend", "amdgpu", "toolkit", "kernel_log",
    "nvml",
    "torch",
)

# Probes that only read sysfs and procfs files: they wait on no other process, so they still run
# (milliseconds) once the run's deadline has passed, rather than leave PCIe, NUMA and the
# driver unknown because a hung interpreter or tool took the time.
FILE_ONLY = frozenset({"pci", "numa", "rdma", "modules", "kernel_modules", "rocm", "ascend", "amdgpu"})


class Collection:
    """A probe run in progress. NVML (about 90 ms of import, init and first calls on a 2-GPU
    host) is forked first, so it runs while the file-based probes read and, in `check`, while
    the rules load; :meth:`finish` collects it under its own deadline."""

    def __init__(self, ctx: ProbeContext) -> None:
        from . import nvml

        self.ctx = ctx
        self.started = time.monotonic()
        self.meta_probes: dict[str, Any] = {}
        self.sections: dict[str, Any] = {}
        self.timeouts: list[str] = []  # details of what did not answer in time, in order
        self.rdma_read_at: float | None = None  # when the rdma probe ran (--sample reads it again)
        self.nvml_samples: dict[int, Any] | Unavailable | None = None
        t0 = time.monotonic()
        try:
            self._nvml: Any = nvml.start(ctx)
        except Exception as exc:  # never let NVML's start take the run down
            self._nvml = None
            self.sections["nvml"] = {"status": "error", "error": f"probe nvml crashed: {type(exc).__name__}: {exc}"}
            self.meta_probes["nvml"] = {"status": "crashed", "duration_s": 0.0, "error": str(exc)}
        self._nvml_started = t0

    def _run(self, name: str, collect: Collector, bounded: bool = False) -> None:
        """Run one probe; after the run's deadline only when it is `bounded` (cannot wait long)."""
        t0 = time.monotonic()
        if self.ctx.remaining() <= 0 and not bounded:
            late = "the run's deadline passed before this probe started"
            if self.timeouts:  # say where the time went: that is what to fix
                late += f"; the time went to: {self.timeouts[0]}"
            self.sections[name] = Unavailable("timeout", late)
            self.meta_probes[name] = {"status": "timeout", "duration_s": 0.0}
            return
        try:
            self.sections[name] = collect(self.ctx)
            self.meta_probes[name] = {"status": "ok", "duration_s": round(time.monotonic() - t0, 4)}
            self.timeouts.extend(
                leaf.detail for _, leaf in walk(self.sections[name])
                if isinstance(leaf, Unavailable) and leaf.reason == "timeout"
            )
        except Exception as exc:  # a probe bug must not take the run down
            tb = f"{type(exc).__name__}: {exc}"
            self.sections[name] = Unavailable("error", f"probe {name} crashed: {tb}")
            self.meta_probes[name] = {"status": "crashed", "duration_s": round(time.monotonic() - t0, 4), "error": tb}

    def finish(
        self, on_step: Callable[[str], None] | None = None, meanwhile: Callable[[], object] | None = None
    ) -> dict[str, Any]:
        """The snapshot. ``on_step(name)`` is called as each step starts (a probe's name, "nvml",
        then "counter_rates" with --sample), so that the CLI can say what a slow run waits on.
        ``meanwhile()`` is the caller's own work, done after the other probes and before NVML's
        child is waited for (which may still be answering): `check` compiles its rules' first
        conditions there. Whatever it raises is ignored; it is the caller's, not a probe's."""
        step = on_step or (lambda _name: None)
        # NVML is collected last: its child has been running since the start, so every other
        # probe (torch's interpreter too, when one is started) overlaps its latency, and its own
        # deadline, fixed when it was forked, holds whatever they took.
        for name, collect in _collectors().items():
            if name == "rdma":
                self.rdma_read_at = time.monotonic()
            step(name)
            self._run(name, collect, bounded=name in FILE_ONLY)
        if meanwhile is not None:
            try:
                meanwhile()
            except Exception:  # noqa: BLE001, S110 - see the docstring
                pass
        if self._nvml is not None:
            step("nvml")
            self._finish_nvml()
        if not isinstance(self.sections.get("nvml"), dict):
            # nvml is always an object so rules can read nvml.status.
            failure = self.sections.get("nvml")
            detail = failure.detail if isinstance(failure, Unavailable) else "probe failed"
            self.sections["nvml"] = {"status": "error", "error": detail}
        meta = {
            "collected_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "root": str(self.ctx.root),
            "live": self.ctx.live,
            "duration_s": round(time.monotonic() - self.started, 4),
            "probes": {name: self.meta_probes[name] for name in ORDER if name in self.meta_probes},
        }
        sections = {name: self.sections[name] for name in ORDER if name in self.sections}
        if self.ctx.sample_s > 0:
            from .sampling import sample_rates

            step("counter_rates")
            sections["counter_rates"] = sample_rates(self.ctx, sections, self.nvml_samples, self.rdma_read_at)
        return make_snapshot(sections, meta)

    def abort(self) -> None:
        """The caller will not finish (e.g. a bad rule file): stop the NVML child, leave nothing behind."""
        if self._nvml is not None:
            pending, self._nvml = self._nvml, None
            pending.cancel()

    def _finish_nvml(self) -> None:
        pending, self._nvml = self._nvml, None
        # Its deadline was fixed when it was forked, within the run's: collected even when the run's
        # deadline has passed, so an answer already in the pipe is kept and the child is reaped.
        self._run("nvml", lambda _ctx: pending.result(), bounded=True)
        if self.ctx.sample_s > 0:
            outcome = pending.child.outcome
            self.nvml_samples = (
                pending.samples() if outcome is None else Unavailable(outcome[0], f"the second NVML read: {outcome[1]}")
            )
        # NVML ran in the background since the start: report its wall time, not the wait
        self.meta_probes["nvml"]["duration_s"] = round(time.monotonic() - self._nvml_started, 4)


def start_collection(ctx: ProbeContext) -> Collection:
    """Start probing (NVML forked at once); call ``.finish()`` for the snapshot."""
    return Collection(ctx)


def collect_all(ctx: ProbeContext) -> dict[str, Any]:
    """Run every probe and assemble the snapshot."""
    return start_collection(ctx).finish()
