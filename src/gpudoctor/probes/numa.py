"""NUMA and CPU topology facts: nodes, per-CPU package/core/siblings/last-level cache, SMT, balancing.

Reads (all through the context root):

- ``/sys/devices/system/node/node<N>/{cpulist,meminfo,distance}`` (absent on a kernel without
  NUMA support: nodes are then unavailable, not_found)
- ``/sys/devices/system/cpu/online`` (else the ``cpu<N>`` directories)
- ``/sys/devices/system/cpu/cpu<N>/topology/{physical_package_id,core_id,thread_siblings_list}``
- ``/sys/devices/system/cpu/cpu<N>/cache/index<M>/{level,type,shared_cpu_list}``
- ``/sys/devices/system/cpu/smt/active``, ``/proc/sys/kernel/numa_balancing``

Hosts have hundreds of CPUs and sysfs reads are not free, so shared facts are read once per
group: thread siblings share one core (and so its package and core id), and the CPUs in a
cache's shared_cpu_list share that cache. A 2x64-core SMT host costs about 400 small reads.
"""

from __future__ import annotations

import re
from typing import Any, List, Tuple, Union

from ..context import ProbeContext
from ..facts import Unavailable
from .files import list_dir, read_cpulist, read_int, read_lines, read_parsed, read_text

NODE_DIR = "/sys/devices/system/node"
CPU_DIR = "/sys/devices/system/cpu"

_NODE_RE = re.compile(r"^node(\d+)$")
_CPU_RE = re.compile(r"^cpu(\d+)$")
_INDEX_RE = re.compile(r"^index\d+$")

IntList = Union[List[int], Unavailable]
Topology = Tuple[Union[int, Unavailable], Union[int, Unavailable], IntList]


def collect(ctx: ProbeContext) -> dict[str, Any]:
    nodes = _nodes(ctx)
    cpus = _cpus(ctx, nodes)
    return {
        "nodes": nodes,
        "cpus": cpus,
        "node_count": len(nodes) if isinstance(nodes, list) else nodes,
        "socket_count": _socket_count(cpus),
        "smt_active": _smt_active(ctx),
        "balancing": read_int(ctx, "/proc/sys/kernel/numa_balancing"),
    }


def parse_distances(text: str) -> list[int]:
    return [int(x) for x in text.split()]


def _nodes(ctx: ProbeContext) -> list[dict[str, Any]] | Unavailable:
    names = list_dir(ctx, NODE_DIR)
    if isinstance(names, Unavailable):
        if names.reason == "not_found":
            return Unavailable("not_found", f"{ctx.path(NODE_DIR)} does not exist (kernel without NUMA support)")
        return names
    ids = sorted(int(m.group(1)) for m in map(_NODE_RE.match, names) if m)
    if not ids:
        return Unavailable("not_found", f"no node<N> directories in {ctx.path(NODE_DIR)}")
    return [
        {
            "id": node,
            "cpus": read_cpulist(ctx, f"{NODE_DIR}/node{node}/cpulist"),
            "memory_total_bytes": _node_mem_total(ctx, node),
            "distances": read_parsed(ctx, f"{NODE_DIR}/node{node}/distance", parse_distances),
        }
        for node in ids
    ]


def _node_mem_total(ctx: ProbeContext, node: int) -> int | Unavailable:
    absolute = f"{NODE_DIR}/node{node}/meminfo"
    lines = read_lines(ctx, absolute)
    if isinstance(lines, Unavailable):
        return lines
    for line in lines:
        # "Node 0 MemTotal:       263921240 kB"
        head, sep, tail = line.partition("MemTotal:")
        if sep:
            parts = tail.split()
            if head.split()[:1] == ["Node"] and parts and parts[0].isdecimal():
                unit = parts[1].lower() if len(parts) > 1 else ""
                return int(parts[0]) * (1024 if unit == "kb" else 1)
            return Unavailable("error", f"{ctx.path(absolute)}: unexpected line {line.strip()!r}")
    return Unavailable("not_found", f"{ctx.path(absolute)}: no MemTotal line")


def _online_cpus(ctx: ProbeContext) -> list[int] | Unavailable:
    online = read_cpulist(ctx, f"{CPU_DIR}/online")
    if isinstance(online, list) and online:
        return online
    names = list_dir(ctx, CPU_DIR)
    if isinstance(names, Unavailable):
        return online if isinstance(online, Unavailable) else names
    found = sorted(int(m.group(1)) for m in map(_CPU_RE.match, names) if m)
    if not found:
        return Unavailable("not_found", f"no online CPUs listed under {ctx.path(CPU_DIR)}")
    return found


def _cpus(ctx: ProbeContext, nodes: list[dict[str, Any]] | Unavailable) -> list[dict[str, Any]] | Unavailable:
    online = _online_cpus(ctx)
    if isinstance(online, Unavailable):
        return online
    node_of: dict[int, int] = {}
    if isinstance(nodes, list):
        for entry in nodes:
            if isinstance(entry["cpus"], list):
                for cpu in entry["cpus"]:
                    node_of.setdefault(cpu, entry["id"])
    topology: dict[int, Topology] = {}
    llc: dict[int, IntList] = {}
    out = []
    for cpu in online:
        if cpu not in topology:
            _read_topology(ctx, cpu, topology)
        if cpu not in llc:
            _read_llc(ctx, cpu, llc)
        package, core, siblings = topology[cpu]
        node: int | Unavailable
        if cpu in node_of:
            node = node_of[cpu]
        elif isinstance(nodes, Unavailable):
            node = nodes
        else:
            node = Unavailable("not_found", f"cpu{cpu} is in no node's cpulist")
        out.append({
            "id": cpu,
            "package": package,
            "core": core,
            "node": node,
            "siblings": siblings,
            "llc_cpus": llc[cpu],
        })
    return out


def _read_topology(ctx: ProbeContext, cpu: int, into: dict[int, Topology]) -> None:
    base = f"{CPU_DIR}/cpu{cpu}/topology"
    siblings = read_cpulist(ctx, f"{base}/thread_siblings_list")
    entry: Topology = (
        read_int(ctx, f"{base}/physical_package_id"),
        read_int(ctx, f"{base}/core_id"),
        siblings,
    )
    into[cpu] = entry
    if isinstance(siblings, list) and cpu in siblings:
        for other in siblings:
            into.setdefault(other, entry)


def _read_llc(ctx: ProbeContext, cpu: int, into: dict[int, IntList]) -> None:
    shared = _llc_of(ctx, cpu)
    into[cpu] = shared
    if isinstance(shared, list) and cpu in shared:
        for other in shared:
            into.setdefault(other, shared)


def _llc_of(ctx: ProbeContext, cpu: int) -> IntList:
    """shared_cpu_list of the highest-level data or unified cache of one CPU."""
    base = f"{CPU_DIR}/cpu{cpu}/cache"
    names = list_dir(ctx, base)
    if isinstance(names, Unavailable):
        return names
    best: tuple[int, str] | None = None
    problem: Unavailable | None = None
    for name in names:
        if not _INDEX_RE.match(name):
            continue
        level = read_int(ctx, f"{base}/{name}/level")
        kind = read_text(ctx, f"{base}/{name}/type")
        if isinstance(level, Unavailable):
            problem = problem or level
        elif isinstance(kind, Unavailable):
            problem = problem or kind
        # Instruction caches hold no data a thread shares with another.
        elif kind in ("Unified", "Data") and (best is None or level > best[0]):
            best = (level, name)
    if problem is not None:
        # An unreadable index may be the last level: picking the best of the rest would guess.
        return problem
    if best is None:
        return Unavailable("not_found", f"{ctx.path(base)} lists no data or unified cache")
    return read_cpulist(ctx, f"{base}/{best[1]}/shared_cpu_list")


def _socket_count(cpus: list[dict[str, Any]] | Unavailable) -> int | Unavailable:
    if isinstance(cpus, Unavailable):
        return cpus
    packages = set()
    for cpu in cpus:
        if isinstance(cpu["package"], Unavailable):
            return Unavailable(cpu["package"].reason, f"package of cpu{cpu['id']} unknown: {cpu['package'].detail}")
        packages.add(cpu["package"])
    return len(packages)


def _smt_active(ctx: ProbeContext) -> bool | Unavailable:
    text = read_text(ctx, f"{CPU_DIR}/smt/active")
    if isinstance(text, Unavailable):
        return text
    if text in ("0", "1"):
        return text == "1"
    return Unavailable("error", f"{ctx.path(CPU_DIR + '/smt/active')}: unexpected content {text[:40]!r}")
