"""Whether NVIDIA's fabric manager runs: a process whose ``/proc/<pid>/comm`` is ``nv-fabricmanager``.

The fabric manager (service nvidia-fabricmanager, binary nv-fabricmanager, per NVIDIA's Fabric
Manager user guide) programs the NVSwitches of an HGX/DGX baseboard; the rules judge its absence
only where ``pci.nvswitch_count`` says there are switches. Its version is not read: the only
sources are running the binary or asking the package manager, and probes run neither.

Reads, through the context root: the numeric entries of ``/proc`` and each one's ``comm`` (the
task name, which the kernel cuts to 15 characters: "nv-fabricmanage"). Bounded: at most
MAX_PIDS processes are looked at and none once the run's deadline passed; a search cut short
without a match is unavailable (timeout or not_supported), never "not running".

Unreadable: a ``/proc`` that cannot be listed is unavailable with its reason. A ``/proc`` mounted
with ``hidepid`` hides other users' processes from a non-root reader; gpudoctor sees that as
``/proc/1`` missing from the listing (pid 1 always exists) and reports no_permission rather than
guess (under a ``--root`` tree, not_found: the tree holds no processes). In a container the
host's processes are in another pid namespace, so "not running" there says nothing about the
host: the rule skips containers (``host.in_container``).
"""

from __future__ import annotations

import time
from typing import Any

from ..context import ProbeContext
from ..facts import Unavailable
from .files import list_dir, read_text

PROCESS_NAME = "nv-fabricmanager"
# Processes looked at, at most. A busy node runs a few thousand; more is not a machine we can
# search within a probe's time.
MAX_PIDS = 65536
# comm holds at most TASK_COMM_LEN - 1 = 15 characters (include/linux/sched.h): the kernel
# truncates "nv-fabricmanager" (16) to its first 15.
TASK_COMM_LEN = 16
_COMM = PROCESS_NAME[: TASK_COMM_LEN - 1]


def fabric_manager(ctx: ProbeContext) -> dict[str, Any]:
    """``fabric_manager_running`` (bool) and ``fabric_manager_pid`` (the first such process)."""
    running, pid = _search(ctx)
    return {"fabric_manager_running": running, "fabric_manager_pid": pid}


def _search(ctx: ProbeContext) -> tuple[bool | Unavailable, int | Unavailable]:
    names = list_dir(ctx, "/proc")
    if isinstance(names, Unavailable):
        return names, names
    pids = sorted(int(name) for name in names if name.isdigit() and len(name) <= 10)
    if 1 not in pids:
        if ctx.live:
            hidden = "mounted with hidepid, other users' processes are hidden"
            gone = Unavailable("no_permission", f"{ctx.path('/proc')} does not list pid 1: {hidden}")
        else:  # a captured tree without its processes
            gone = Unavailable("not_found", f"{ctx.path('/proc')} holds no processes (no pid 1)")
        return gone, gone
    stop = ctx.work_deadline()
    for done, pid in enumerate(pids):
        if done >= MAX_PIDS or time.monotonic() > stop:
            reason = "not_supported" if done >= MAX_PIDS else "timeout"
            where = f"{done} of {len(pids)} processes in {ctx.path('/proc')}"
            gone = Unavailable(reason, f"searched {where} for {PROCESS_NAME} without finding it")
            return gone, gone
        comm = read_text(ctx, f"/proc/{pid}/comm", limit=TASK_COMM_LEN + 1)
        if comm == _COMM:
            return True, pid
    absent = Unavailable("not_found", f"no process named {PROCESS_NAME} among the {len(pids)} in {ctx.path('/proc')}")
    return False, absent
