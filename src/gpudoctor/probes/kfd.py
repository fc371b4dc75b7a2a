"""The AMD KFD topology's GPU nodes and their XGMI links, for probes/amdgpu.py.

Reads ``/sys/class/kfd/kfd/topology/nodes/<N>/properties`` (else the same under
``/sys/devices/virtual/kfd``): "key value" lines, of which ``gfx_target_version`` (0 on a CPU
node), ``domain`` and ``location_id`` (the PCI bus << 8 | devfn) place a GPU node on the PCI
bus; and ``nodes/<N>/io_links/<M>/properties``, whose ``type`` is the CRAT I/O link type
(``CRAT_IOLINK_TYPE_XGMI`` = 11, drivers/gpu/drm/amd/amdkfd/kfd_crat.h) and ``node_to`` the
node at the other end (drivers/gpu/drm/amd/amdkfd/kfd_topology.c, kfd_topology iolink_show).
"""

from __future__ import annotations

import time
from typing import Any

from ..context import ProbeContext
from ..facts import Unavailable
from .files import list_dir, read_text

TOPOLOGY_DIRS = ("/sys/class/kfd/kfd/topology/nodes", "/sys/devices/virtual/kfd/kfd/topology/nodes")
# A node's properties are a few dozen lines; longer files are not those. Nodes looked at, at most
# (a node per CPU socket and GPU partition), and io_links per node.
MAX_PROPERTIES = 1 << 16
MAX_NODES = 1024
MAX_LINKS = 256
XGMI = 11


def topology_nodes(ctx: ProbeContext) -> tuple[str, list[str]] | Unavailable:
    """(the topology's nodes directory, its entries) from the first place that has one."""
    problem: Unavailable | None = None
    for topology in TOPOLOGY_DIRS:
        names = list_dir(ctx, topology)
        if not isinstance(names, Unavailable):
            return topology, names
        problem = problem or names
    if problem is not None and problem.reason == "not_found":
        return Unavailable("not_found", "no KFD topology (amdgpu/kfd not loaded)")
    return problem or Unavailable("not_found", "no KFD topology")


def _properties(ctx: ProbeContext, path: str) -> dict[str, int] | Unavailable:
    text = read_text(ctx, path, limit=MAX_PROPERTIES)
    if isinstance(text, Unavailable):
        return text
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        value = value.strip()
        if value.isdecimal() and len(value) <= 20:
            out[key] = int(value)
    return out


def _bus_id(props: dict[str, int]) -> str | None:
    location = props.get("location_id")
    if location is None:
        return None
    domain = props.get("domain", 0)
    return f"{domain:04x}:{(location >> 8) & 0xFF:02x}:{(location >> 3) & 0x1F:02x}.{location & 0x7}"


def _xgmi_peers(ctx: ProbeContext, node_dir: str) -> list[int] | Unavailable:
    links = list_dir(ctx, f"{node_dir}/io_links")
    if isinstance(links, Unavailable):
        return [] if links.reason == "not_found" else links
    peers: list[int] = []
    for link in links[:MAX_LINKS]:
        props = _properties(ctx, f"{node_dir}/io_links/{link}/properties")
        if isinstance(props, Unavailable):
            return props  # a link not read may be an XGMI link: the count would be short
        if props.get("type") == XGMI and "node_to" in props:
            peers.append(props["node_to"])
    return peers


def gpu_nodes(ctx: ProbeContext) -> dict[str, dict[str, Any]] | Unavailable:
    """bus id -> {"node": KFD node number, "xgmi_links": XGMI links to other GPU nodes}."""
    found = topology_nodes(ctx)
    if isinstance(found, Unavailable):
        return found
    topology, names = found
    stop = ctx.work_deadline()
    gpus: dict[int, tuple[str, list[int] | Unavailable]] = {}
    for name in [n for n in names if n.isdecimal()][:MAX_NODES]:
        if time.monotonic() > stop:
            return Unavailable("timeout", "the KFD topology was not read in time")
        props = _properties(ctx, f"{topology}/{name}/properties")
        if isinstance(props, Unavailable) or props.get("gfx_target_version", 0) <= 0:
            continue
        bus = _bus_id(props)
        if bus is not None:
            gpus[int(name)] = (bus, _xgmi_peers(ctx, f"{topology}/{name}"))
    out: dict[str, dict[str, Any]] = {}
    for node, (bus, peers) in gpus.items():
        links = peers if isinstance(peers, Unavailable) else len({p for p in peers if p in gpus and p != node})
        out.setdefault(bus, {"node": node, "xgmi_links": links})
    return out
