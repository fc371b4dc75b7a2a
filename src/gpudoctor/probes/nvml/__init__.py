"""NVML probe: the driver's view of the GPUs, read through nvidia-ml-py (pynvml).

NVML APIs read, in this order (pynvml names):

- ``nvmlInit``, ``nvmlSystemGetDriverVersion``, ``nvmlSystemGetCudaDriverVersion``,
  ``nvmlSystemGetNVMLVersion``, ``nvmlDeviceGetCount``;
- per GPU, by index: ``nvmlDeviceGetHandleByIndex``, ``nvmlDeviceGetName``,
  ``nvmlDeviceGetUUID``, ``nvmlDeviceGetSerial``, ``nvmlDeviceGetPciInfo``,
  ``nvmlDeviceGetCudaComputeCapability``, ``nvmlDeviceGetArchitecture``,
  ``nvmlDeviceGetMemoryInfo``, ``nvmlDeviceGetCurrPcieLinkGeneration``,
  ``nvmlDeviceGetMaxPcieLinkGeneration``, ``nvmlDeviceGetGpuMaxPcieLinkGeneration``,
  ``nvmlDeviceGetCurrPcieLinkWidth``, ``nvmlDeviceGetMaxPcieLinkWidth``,
  ``nvmlDeviceGetPcieReplayCounter``, ``nvmlDeviceGetPerformanceState``,
  ``nvmlDeviceGetCurrentClocksEventReasons`` (driver < 535:
  ``nvmlDeviceGetCurrentClocksThrottleReasons``), ``nvmlDeviceGetTemperature``
  (GPU sensor), ``nvmlDeviceGetTemperatureThreshold`` (shutdown, slowdown, GPU
  max), ``nvmlDeviceGetPowerUsage``, ``nvmlDeviceGetEnforcedPowerLimit``,
  ``nvmlDeviceGetPowerManagementDefaultLimit``, ``nvmlDeviceGetPersistenceMode``,
  ``nvmlDeviceGetEccMode``, ``nvmlDeviceGetTotalEccErrors``,
  ``nvmlDeviceGetRetiredPages``, ``nvmlDeviceGetRetiredPagesPendingStatus``,
  ``nvmlDeviceGetRemappedRows``, ``nvmlDeviceGetMigMode``,
  ``nvmlDeviceGetNvLinkState`` (links 0-17), ``nvmlDeviceGetP2PStatus`` (NVLink
  capability, towards every other GPU; only for a GPU with a link up),
  ``nvmlDeviceGetGpuFabricInfoV`` (v3, else v2; else ``nvmlDeviceGetGpuFabricInfo``; see
  :mod:`.fabric_info`), ``nvmlDeviceGetComputeMode``,
  ``nvmlDeviceGetCpuAffinityWithinScope`` (node scope; else
  ``nvmlDeviceGetCpuAffinity``), ``nvmlDeviceGetMemoryAffinity`` (node scope),
  ``nvmlDeviceGetNumaNodeId``, ``nvmlDeviceGetUtilizationRates``,
  ``nvmlDeviceGetComputeRunningProcesses``.

Files read (for the size of the affinity masks only):
``/sys/devices/system/cpu/possible`` and ``/sys/devices/system/node/possible``.

The package, by concern (each imports only those above it):

- :mod:`.errors`: NVML return codes, their mapping to Unavailable reasons (NotSupported ->
  not_supported, NoPermission -> no_permission, FunctionNotFound -> not_supported "driver too old
  for <fn>", GpuIsLost / Unknown / ResetRequired -> error and the GPU is marked lost, its
  remaining queries skipped; DriverNotLoaded -> driver_not_loaded; Timeout -> timeout; others ->
  error with NVML's message and code name), and what to do when nvmlInit fails;
- :mod:`.replay`: recorded answers served by a fake NVML (``ctx.nvml_replay``,
  ``<root>/nvml.json`` under a fixture root), through the same query code;
- :mod:`.query`: the one call wrapper and the sink the facts go to;
- :mod:`.fabric_info`: the fabric registration call (structures filled by reference) and its decoding;
- :mod:`.fields`: what is read, the system facts and each GPU's fields (each GPU on its own
  thread: NVML is thread-safe and ctypes releases the GIL, so the GPUs' first-call latencies
  overlap and one hung GPU does not leave the others unread);
- :mod:`.section`: the parent's assembly of the ``nvml`` section from the child's events;
- :mod:`.recorder`: the recorder's backend (child side; :func:`record` here runs it);
- :mod:`.child`: the child process, its events (gpudoctor.children's line protocol) and the
  parent's reading of them under the deadline;
- here: the probe's API. :func:`start` forks the child without waiting, so a caller can overlap
  NVML's latency with other probes; :func:`collect` is ``start(ctx).result()``; :func:`prestart`
  starts the child before the command line is parsed; :func:`record` records a machine's answers.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ...context import ProbeContext
from ..files import read_cpulist
from .child import PendingChild, run_child
from .section import Assembler


def _mask_words(ctx: ProbeContext, absolute: str, fallback: int) -> int:
    ids = read_cpulist(ctx, absolute)
    count = max(ids) + 1 if isinstance(ids, list) and ids else fallback
    return max(1, -(-count // 64))  # integers throughout: a float overflows on garbage ids


def make_plan(ctx: ProbeContext, mode: str = "probe") -> dict[str, Any]:
    """What the child is told: probe or record, recorded answers or the live NVML, and the size of
    the affinity masks (words of 64 CPUs or memory nodes), read here from
    ``/sys/devices/system/cpu/possible`` and ``/sys/devices/system/node/possible``."""
    return {
        "mode": mode,
        "replay": str(ctx.nvml_replay) if ctx.nvml_replay is not None else None,
        "cpu_words": _mask_words(ctx, "/sys/devices/system/cpu/possible", os.cpu_count() or 64),
        "node_words": _mask_words(ctx, "/sys/devices/system/node/possible", 1),
        "sample_s": ctx.sample_s if mode == "probe" else 0.0,
    }


class PendingNvml:
    """The NVML probe started in the background: NVML's own latency (import, init, first calls:
    about 90 ms on a 2 x H200 host) can overlap other probes; :meth:`result` collects it."""

    def __init__(self, ctx: ProbeContext) -> None:
        # with --sample the child waits that long and reads the NVLink counters again: one child,
        # one deadline, grown by the wait
        timeout = ctx.budget(ctx.nvml_timeout + ctx.sample_s)
        adopted = _take_prestarted(ctx, timeout)
        if adopted is not None:
            self.sink, self.child = adopted
        else:
            self.sink = Assembler()
            self.child = PendingChild(make_plan(ctx), timeout, self.sink)

    def result(self) -> dict[str, Any]:
        return self.sink.result(self.child.wait())

    def samples(self) -> dict[int, tuple[Any, float]]:
        """With --sample: each GPU's second read of nvlink_link_errors and the seconds since its first."""
        return dict(self.sink.samples)

    def cancel(self) -> None:
        self.child.cancel()


def start(ctx: ProbeContext) -> PendingNvml:
    """Fork the NVML child now; call ``.result()`` later (by then the deadline still holds)."""
    return PendingNvml(ctx)


def collect(ctx: ProbeContext) -> dict[str, Any]:
    """The ``nvml`` section of the facts (see the package docstring)."""
    return start(ctx).result()


# ---------------------------------------------------------------------------
# Starting before the command line is parsed (the console script's first step).

_PRESTARTED: list[tuple[Assembler, PendingChild]] = []


def prestart(timeout: float = 5.0) -> bool:
    """Fork the NVML child for a live probe of this machine now, unless one is waiting already.

    The console script calls this before it imports click and parses the command line (about
    20 ms on a 2 x H200 host), so NVML's own start-up overlaps them; whether the command will
    probe this machine is the caller's decision (the probe knows no commands). The probe adopts
    the child only when it would have started the same one (see _take_prestarted); an unused
    child is stopped by discard_prestarted()."""
    if _PRESTARTED:
        return False
    sink = Assembler()
    _PRESTARTED.append((sink, PendingChild(make_plan(ProbeContext()), timeout, sink)))
    return True


def _take_prestarted(ctx: ProbeContext, timeout: float) -> tuple[Assembler, PendingChild] | None:
    """The prestarted child, when `ctx` probes this machine and the child's deadline is the one a
    child started now would get (within a second, never later); else it is stopped, and None."""
    if not _PRESTARTED:
        return None
    sink, child = _PRESTARTED.pop()
    wanted = time.monotonic() + timeout
    if ctx.live and ctx.nvml_replay is None and not ctx.sample_s and wanted - 1.0 <= child.deadline <= wanted:
        return sink, child
    child.cancel()
    return None


def discard_prestarted() -> None:
    """Stop a prestarted child nobody adopted (the command failed first, or did not probe)."""
    while _PRESTARTED:
        _PRESTARTED.pop()[1].cancel()


def record(scrub: bool = True, timeout: float = 30.0, replay: str | Path | None = None) -> dict[str, Any]:
    """Record this machine's NVML answers (or re-record `replay`) as a replay document.

    Runs in the NVML probe's child process under `timeout`. An NVML that cannot
    be initialised is recorded as such (``"init": {"error": ...}``); a hang or
    a broken child raises RuntimeError naming the call.
    """
    ctx = ProbeContext(nvml_replay=Path(replay) if replay is not None else None)
    plan = dict(make_plan(ctx, mode="record"), scrub=scrub)
    sink = Assembler()
    interrupted = run_child(plan, timeout, sink)
    if interrupted is not None:
        raise RuntimeError(f"NVML answers not recorded: {interrupted[1]}")
    if sink.answers is None:
        detail = sink.init_failure[3] if sink.init_failure else "no recording came back from the NVML child"
        raise RuntimeError(f"NVML answers not recorded: {detail}")
    return sink.answers
