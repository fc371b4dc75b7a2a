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

Bounded, whatever the tree holds: nodes and CPUs are read until ``ctx.work_deadline()``; when
it passes first, the list is unavailable (timeout) rather than short, since a NUMA binding made
from part of a node's CPUs would be wrong. At most MAX_CACHE_INDEXES cache levels are read per CPU.
"""

from __future__ import annotations

import time
from typing import Any, List, Tuple, Union

from ..context import ProbeContext, excerpt
from ..facts import Unavailable
from ..lazy_re import LazyPattern
from ..model.cpus import MAX_CPU_ID
from .files import list_dir, read_cpulist, read_int, read_lines, read_parsed, read_text

NODE_DIR = "/sys/devices/system/node"
CPU_DIR = "/sys/devices/system/cpu"

_NODE_RE = LazyPattern(r"^node(\d+)$")
_CPU_RE = LazyPattern(r"^cpu(\d+)$")
_INDEX_RE = LazyPattern(r"^index\d{1,4}$")
# A CPU has four or five cache levels listed; a tree with hundreds is not a machine's.
MAX_CACHE_INDEXES = 64

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
    ids = sorted(int(m.group(1)) for m in map(_NODE_RE.match, names) if m and len(m.group(1)) <= 6)
    if not ids:
        return Unavailable("not_found", f"no node<N> directories in {ctx.path(NODE_DIR)}")
    stop = ctx.work_deadline()
    nodes = []
    named = 0  # CPUs the nodes' lists name: each CPU is in one node, so at most MAX_CPU_ID + 1
    for done, node in enumerate(ids):
        if time.monotonic() > stop:
            left = f"{len(ids) - done} of {len(ids)} NUMA nodes"
            return Unavailable("timeout", f"the deadline passed with {left} not read")
        cpus = read_cpulist(ctx, f"{NODE_DIR}/node{node}/cpulist")
        named += len(cpus) if isinstance(cpus, list) else 0
        if named > MAX_CPU_ID + 1:
            return Unavailable("error", f"the cpulists under {ctx.path(NODE_DIR)} name more CPUs than there can be")
        nodes.append({
            "id": node,
            "cpus": cpus,
            "memory_total_bytes": _node_mem_total(ctx, node),
            "distances": read_parsed(ctx, f"{NODE_DIR}/node{node}/distance", parse_distances),
        })
    return nodes


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
            if head.split()[:1] == ["Node"] and parts and parts[0].isascii() and parts[0].isdecimal() \
                    and len(parts[0]) <= 20:
                unit = parts[1].lower() if len(parts) > 1 else ""
                return int(parts[0]) * (1024 if unit == "kb" else 1)
            return Unavailable("error", f"{ctx.path(absolute)}: unexpected line {excerpt(line.strip())}")
    return Unavailable("not_found", f"{ctx.path(absolute)}: no MemTotal line")


def _online_cpus(ctx: ProbeContext) -> list[int] | Unavailable:
    online = read_cpulist(ctx, f"{CPU_DIR}/online")
    if isinstance(online, list) and online:
        return online
    names = list_dir(ctx, CPU_DIR)
    if isinstance(names, Unavailable):
        return online if isinstance(online, Unavailable) else names
    found = sorted(int(m.group(1)) for m in map(_CPU_RE.match, names) if m and len(m.group(1)) <= 6)
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
    stop = ctx.work_deadline()
    for done, cpu in enumerate(online):
        if time.monotonic() > stop:
            left = f"{len(online) - done} of {len(online)} CPUs"
            return Unavailable("timeout", f"the deadline passed with {left} not read")
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
    indexes = [name for name in names if _INDEX_RE.match(name)]
    if len(indexes) > MAX_CACHE_INDEXES:
        return Unavailable("error", f"{ctx.path(base)} lists {len(indexes)} caches, more than a CPU has")
    for name in indexes:
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
    return Unavailable("error", f"{ctx.path(CPU_DIR + '/smt/active')}: unexpected content {excerpt(text, 40)}")
