"""RDMA facts: each InfiniBand/RoCE device's ports (state, speed, link layer, error counters, GIDs)
and whether the verbs device files a job opens are there.

Reads (all through the context root):

- ``/sys/class/infiniband/<dev>/device``: the PCI function (its bus id, ``numa_node``)
- ``/sys/class/infiniband/<dev>/node_guid``: the device's GUID ("xxxx:xxxx:xxxx:xxxx"), which tells
  one NIC from another put in its place between two snapshots
- ``/sys/class/infiniband/<dev>/ports/<n>/``: ``state``, ``phys_state``, ``rate``, ``link_layer``,
  ``counters/{link_downed,symbol_error,port_rcv_errors,excessive_buffer_overrun_errors}``,
  ``gids/<i>`` (only until the first GID that is not all zero)
- ``/sys/class/infiniband_verbs``: the ``uverbsN`` devices the kernel made
- ``/dev/infiniband``: the ``uverbsN``, ``umadN`` and ``rdma_cm`` files a process can open

Formats, from the kernel (Documentation/ABI/stable/sysfs-class-infiniband for what each file is,
drivers/infiniband/core/sysfs.c for how it is printed): ``state`` and ``phys_state`` are
"<number>: <name>" ("4: ACTIVE", "5: LinkUp"); ``rate`` is "<Gb/s>[.5] Gb/sec (<width>X <speed>)"
("400 Gb/sec (4X NDR)") and is the *active* width times the active speed: sysfs has no maximum.
The counters are the port's PortCounters since the driver loaded. Never judged here.
"""

from __future__ import annotations

import os
import time
from typing import Any

from ..context import ProbeContext, excerpt
from ..facts import Unavailable
from ..lazy_re import LazyPattern
from .files import list_dir, read_int, read_parsed, read_text, resolve_path

# RDMA devices and ports per device looked at, at most (a host has tens; SR-IOV a few hundred).
MAX_DEVICES = 1024
MAX_PORTS = 64
# GID table entries read per port before giving up on finding a usable one (mlx5 RoCE tables hold
# 255; the first usable entry is normally index 0 or 1).
MAX_GIDS = 256
COUNTERS = ("link_downed", "symbol_error", "port_rcv_errors", "excessive_buffer_overrun_errors")

_STATE_RE = LazyPattern(r"^(\d{1,3}):\s{0,4}(\S(?:.{0,62}\S)?)$")
_RATE_RE = LazyPattern(r"^(\d{1,6})(\.5)?\s{1,4}Gb/sec\b")
_BDF_RE = LazyPattern(r"^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_GUID_RE = LazyPattern(r"^[0-9a-f]{4}(?::[0-9a-f]{4}){3}$")
_GID_RE = LazyPattern(r"^[0-9a-f]{4}(?::[0-9a-f]{4}){7}$")


def parse_state(text: str) -> str:
    """The name of "4: ACTIVE" / "5: LinkUp" (as the kernel prints it); raises ValueError."""
    match = _STATE_RE.match(text.strip())
    if not match:
        raise ValueError("not '<number>: <name>'")
    return match.group(2)


def parse_guid(text: str) -> str:
    """A node GUID as the kernel prints it ("0c42:a103:0045:6f80"), lower case; raises ValueError."""
    value = text.strip().lower()
    if not _GUID_RE.match(value):
        raise ValueError("not four groups of four hex digits")
    return value


def parse_rate(text: str) -> int | float:
    """Gb/s of "400 Gb/sec (4X NDR)" or "2.5 Gb/sec (1X SDR)"; raises ValueError."""
    match = _RATE_RE.match(text.strip())
    if not match:
        raise ValueError("not '<number> Gb/sec'")
    whole = int(match.group(1))
    return whole + 0.5 if match.group(2) else whole


def collect(ctx: ProbeContext) -> dict[str, Any]:
    names = list_dir(ctx, "/sys/class/infiniband")
    if isinstance(names, Unavailable) and names.reason == "not_found":
        names = []  # no RDMA driver loaded: no devices, which is a fact, not a failure
    devices: list[dict[str, Any]] | Unavailable
    if isinstance(names, Unavailable):
        devices = names
    else:
        stop = ctx.work_deadline()
        devices = []
        for name in names[:MAX_DEVICES]:
            if time.monotonic() > stop:
                break  # the devices read so far stand; the rest were not reached
            devices.append(_device(ctx, name))
    return {"devices": devices, "verbs": _verbs(ctx)}


def _device(ctx: ProbeContext, name: str) -> dict[str, Any]:
    base = f"/sys/class/infiniband/{name}"
    target = resolve_path(ctx, f"{base}/device")
    bus_id: str | Unavailable
    numa_node: int | Unavailable
    if isinstance(target, str):
        tail = os.path.basename(target)
        bus_id = tail
        if not _BDF_RE.match(tail):
            bus_id = Unavailable("not_supported", f"{name} is not a PCI device ({excerpt(tail)})")
        numa_node = read_int(ctx, f"{target}/numa_node")
    else:
        bus_id = numa_node = target
    ports = list_dir(ctx, f"{base}/ports")
    port_list: list[dict[str, Any]] | Unavailable
    if isinstance(ports, Unavailable):
        port_list = ports
    else:
        numbers = sorted(int(p) for p in ports if p.isdigit() and len(p) <= 4)
        port_list = [_port(ctx, f"{base}/ports/{n}", n) for n in numbers[:MAX_PORTS]]
    return {
        "name": name,
        "bus_id": bus_id,
        "numa_node": numa_node,
        "node_guid": read_parsed(ctx, f"{base}/node_guid", parse_guid),
        "ports": port_list,
    }


def _port(ctx: ProbeContext, base: str, number: int) -> dict[str, Any]:
    link_layer = read_text(ctx, f"{base}/link_layer")
    counters_dir = list_dir(ctx, f"{base}/counters")
    counters: dict[str, Any] = {}
    for counter in COUNTERS:
        if isinstance(counters_dir, Unavailable):
            counters[counter] = counters_dir
        else:
            counters[counter] = read_int(ctx, f"{base}/counters/{counter}")
    return {
        "port": number,
        "state": read_parsed(ctx, f"{base}/state", parse_state),
        "phys_state": read_parsed(ctx, f"{base}/phys_state", parse_state),
        "rate_gbps": read_parsed(ctx, f"{base}/rate", parse_rate),
        "link_layer": link_layer,
        "counters": counters,
        "gid_usable": _usable_gid(ctx, f"{base}/gids"),
    }


def _usable_gid(ctx: ProbeContext, gids: str) -> bool | Unavailable:
    """Whether the port's GID table holds a GID that is not all zero (RoCE needs one: it is
    made from an IP address of the port's network interface)."""
    entries = list_dir(ctx, gids)
    if isinstance(entries, Unavailable):
        return entries
    indices = sorted(int(e) for e in entries if e.isdigit() and len(e) <= 4)
    unreadable: Unavailable | None = None
    for index in indices[:MAX_GIDS]:
        text = read_text(ctx, f"{gids}/{index}")
        if isinstance(text, Unavailable):
            unreadable = unreadable or text
            continue
        if _GID_RE.match(text.lower()) and text.replace(":", "").strip("0"):
            return True
    if unreadable is not None and unreadable.reason != "not_found":
        return unreadable  # could not read them all: not known to have none
    return False


def _verbs(ctx: ProbeContext) -> dict[str, Any]:
    """The uverbs devices the kernel made (sysfs) and the files under /dev/infiniband."""
    sysfs = list_dir(ctx, "/sys/class/infiniband_verbs")
    if isinstance(sysfs, Unavailable) and sysfs.reason == "not_found":
        sysfs = []
    kernel_uverbs = [n for n in sysfs if n.startswith("uverbs")] if isinstance(sysfs, list) else sysfs
    dev = list_dir(ctx, "/dev/infiniband")
    if isinstance(dev, Unavailable) and dev.reason == "not_found":
        dev = []  # the directory is not there: no files, the case the rules look for
    if isinstance(dev, Unavailable):
        return {"kernel_uverbs": kernel_uverbs, "dev_uverbs": dev, "dev_umad": dev, "dev_rdma_cm": dev}
    return {
        "kernel_uverbs": kernel_uverbs,
        "dev_uverbs": [n for n in dev if n.startswith("uverbs")],
        "dev_umad": [n for n in dev if n.startswith("umad")],
        "dev_rdma_cm": "rdma_cm" in dev,
    }
