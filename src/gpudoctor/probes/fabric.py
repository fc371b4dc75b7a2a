"""NVIDIA's fabric manager: whether it runs (a process whose ``/proc/<pid>/comm`` is
``nv-fabricmanager``), which version the package manager installed, and whether its command
port listens.

The fabric manager (service nvidia-fabricmanager, binary nv-fabricmanager, per NVIDIA's Fabric
Manager user guide) programs the NVSwitches of an HGX/DGX baseboard; the rules judge its absence
only where ``pci.nvswitch_count`` says there are switches.

Its version, without running anything: dpkg's record, ``/var/lib/dpkg/status`` (the paragraph
of an installed package ``nvidia-fabricmanager-<branch>`` or ``nvidia-fabricmanager``, its
``Version:`` with the epoch and Debian revision taken off: ``550.90.07-1`` is ``550.90.07``).
The file is several MB on a full host: at most MAX_DPKG_STATUS bytes are read. RPM's database
(sqlite or Berkeley DB) is not read: on an RPM host the version is not_supported. The fabric
manager's own log is not parsed (the wording of its version line could not be checked
against NVIDIA's guide).

Its command interface: a TCP socket in state LISTEN (``0A``, TCP_LISTEN) on port 6666, the
fabric manager's default FM_CMD_PORT_NUMBER (bound to 127.0.0.1 by FM_CMD_BIND_INTERFACE), in
``/proc/net/tcp`` or ``/proc/net/tcp6``: evidence the daemon is up and serving, read from the
table's ``local_address`` (hex address:port) and ``st`` columns.

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
from ..lazy_re import LazyPattern
from .files import exists, list_dir, read_text

PROCESS_NAME = "nv-fabricmanager"
# Processes looked at, at most. A busy node runs a few thousand; more is not a machine we can
# search within a probe's time.
MAX_PIDS = 65536
# comm holds at most TASK_COMM_LEN - 1 = 15 characters (include/linux/sched.h): the kernel
# truncates "nv-fabricmanager" (16) to its first 15.
TASK_COMM_LEN = 16
_COMM = PROCESS_NAME[: TASK_COMM_LEN - 1]


# dpkg status read at most (a full host's is a few MB).
MAX_DPKG_STATUS = 32 << 20
DPKG_STATUS = "/var/lib/dpkg/status"
PACKAGE_RE = LazyPattern(r"^nvidia-fabricmanager(?:-\d{1,4})?$")
# The fabric manager's default command port (FM_CMD_PORT_NUMBER=6666 in its fabricmanager.cfg, per
# NVIDIA's Fabric Manager user guide) and the kernel's TCP_LISTEN state (10, include/net/tcp_states.h)
# as /proc/net/tcp writes it: the st column in hex (Documentation/networking/proc_net_tcp.rst).
FM_CMD_PORT = 6666
TCP_LISTEN = "0A"
# proc/net/tcp read at most: about 150 bytes a socket.
MAX_TCP_TABLE = 16 << 20
KEYS = (
    "fabric_manager_running", "fabric_manager_pid", "fabric_manager_package", "fabric_manager_version",
    "fabric_manager_listening",
)


def fabric_manager(ctx: ProbeContext) -> dict[str, Any]:
    """``fabric_manager_running`` (bool), ``fabric_manager_pid`` (the first such process),
    ``fabric_manager_package`` and ``fabric_manager_version`` (dpkg's record),
    ``fabric_manager_listening`` (the command port in LISTEN)."""
    running, pid = _search(ctx)
    package, version = installed_version(ctx)
    return {
        "fabric_manager_running": running,
        "fabric_manager_pid": pid,
        "fabric_manager_package": package,
        "fabric_manager_version": version,
        "fabric_manager_listening": listening(ctx),
    }


def upstream_version(version: str) -> str:
    """A Debian version's upstream part: ``[epoch:]upstream[-revision]`` (Debian Policy 5.6.12:
    the epoch ends at the first colon, the revision starts after the last hyphen)."""
    text = version.strip()
    if ":" in text:
        text = text.split(":", 1)[1]
    if "-" in text:
        text = text.rsplit("-", 1)[0]
    return text


def parse_dpkg_status(text: str) -> tuple[str, str] | None:
    """(package, upstream version) of the installed fabric manager package in a dpkg status
    file, the highest branch when several are; None when none is installed."""
    found: list[tuple[str, str]] = []
    for paragraph in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in paragraph.splitlines():
            if not line or line[0] in " \t" or ":" not in line:
                continue  # continuation lines of multi-line fields
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        name = fields.get("package", "")
        status = fields.get("status", "").split()
        if PACKAGE_RE.match(name) and status[-1:] == ["installed"] and fields.get("version"):
            found.append((name, upstream_version(fields["version"])[:64]))
    return max(found, key=lambda f: [int(p) if p.isdigit() else -1 for p in f[1].split(".")]) if found else None


def installed_version(ctx: ProbeContext) -> tuple[str | Unavailable, str | Unavailable]:
    """The fabric manager package dpkg installed, and its version."""
    text = read_text(ctx, DPKG_STATUS, strip=False, whole=False, limit=MAX_DPKG_STATUS)
    if isinstance(text, Unavailable):
        if text.reason == "not_found" and (exists(ctx, "/var/lib/rpm") or exists(ctx, "/usr/lib/sysimage/rpm")):
            text = Unavailable("not_supported", "an RPM host: gpudoctor does not read RPM's database (sqlite or "
                               "Berkeley DB); rpm -q nvidia-fabricmanager shows the version")
        return text, text
    found = parse_dpkg_status(text)
    if found is None:
        cut = len(text.encode("utf-8", "replace")) >= MAX_DPKG_STATUS
        if cut:
            gone = Unavailable("not_supported", f"{ctx.path(DPKG_STATUS)} is longer than {MAX_DPKG_STATUS} bytes; "
                               "no fabric manager package in what was read")
        else:
            gone = Unavailable("not_found", f"no installed nvidia-fabricmanager package in {ctx.path(DPKG_STATUS)}")
        return gone, gone
    return found


def _listens(lines: list[str], port: int) -> bool:
    for line in lines[1:]:  # the first line is the header
        cols = line.split()
        if len(cols) < 4 or ":" not in cols[1]:
            continue
        local_port = cols[1].rsplit(":", 1)[1]
        if cols[3].upper() == TCP_LISTEN and local_port.upper() == f"{port:04X}":
            return True
    return False


def listening(ctx: ProbeContext) -> bool | Unavailable:
    """Whether a TCP socket listens on the fabric manager's command port (this network namespace)."""
    failures: list[Unavailable] = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        text = read_text(ctx, table, strip=False, whole=False, limit=MAX_TCP_TABLE)
        if isinstance(text, Unavailable):
            failures.append(text)
        elif _listens(text.splitlines(), FM_CMD_PORT):
            return True
    # not listening where a table was read; unknown where neither could be
    return failures[0] if len(failures) == 2 else False


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
