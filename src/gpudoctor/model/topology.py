"""The machine's CPU, NUMA and GPU layout, read from the facts (no system access); its RDMA NICs
and their pairing with the GPUs are in model/nics.py.

Shared by the NUMA binding planner (advice/numa_plan), the topology view (render/topo) and the
rule subjects (engine/subjects: which GPUs use each RDMA NIC). Every
value here comes from a facts snapshot, so a saved snapshot or a fixture root describes that
machine, not the one running gpudoctor.

Where a GPU sits (its NUMA node), in order of trust:

1. sysfs ``numa_node`` of its PCI function when it is 0 or more;
2. NVML's memory affinity when it names exactly one node (VMs and some BIOSes leave
   ``numa_node`` at -1 while the driver still knows the node);
3. NVML's CPU affinity when all its CPUs lie in one node;
4. sysfs ``local_cpulist`` when all its CPUs lie in one node (and it is not every CPU);
5. the only NUMA node that has CPUs, on a single-node machine.

Otherwise the node is unknown and nothing is guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ..frozen import Frozen
from .cpus import format_cpulist
from .gpus import gpus_of, pci_gpus


def cpulist(cpus: Iterable[int]) -> str:
    text = format_cpulist(sorted(set(cpus)))
    return text or "none"


def _section(facts: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = facts.get(name)
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


# CPU and NUMA node ids from the facts are taken only in [0, MAX_ID) (Linux builds at most 8192
# CPUs and 1024 nodes into a kernel), memory sizes only in [0, MAX_BYTES): a snapshot or root tree
# with negative ids or numbers of thousands of digits would otherwise reach numactl options, float
# division (OverflowError past 1e308) and str() (ValueError past 4300 digits). A value out of range
# counts as unknown, like a missing one.
MAX_ID = 1 << 22
MAX_BYTES = 1 << 64


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _id(value: Any) -> int | None:
    """A CPU, node, package or GPU index from the facts; None unless an int in [0, MAX_ID)."""
    number = _int(value)
    return number if number is not None and 0 <= number < MAX_ID else None


def _bytes(value: Any) -> int | None:
    number = _int(value)
    return number if number is not None and 0 <= number < MAX_BYTES else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _ints(value: Any) -> list[int] | None:
    """A list of CPU or node ids; None unless every entry is one (see _id)."""
    if isinstance(value, list) and all(_id(v) is not None for v in value):
        return list(value)
    return None


def _why(value: Any) -> str:
    detail = getattr(value, "detail", "")
    reason = getattr(value, "reason", "")
    return str(detail or reason or "not recorded")


def pci_components(path: Any) -> list[str] | None:
    """ "/sys/devices/pci0000:15/0000:15:01.0/0000:18:00.0" -> ["pci0000:15", "0000:15:01.0", "0000:18:00.0"]."""
    if not isinstance(path, str) or "/devices/" not in path:
        return None
    tail = path.split("/devices/", 1)[1]
    parts = [p for p in tail.split("/") if p]
    if not parts or not parts[0].startswith("pci"):
        return None
    return parts


class NodeInfo(Frozen):
    __slots__ = ("id", "cpus", "memory_bytes")
    id: int
    cpus: frozenset[int]
    memory_bytes: int | None  # None: unknown

    def __init__(self, id: int, cpus: frozenset[int], memory_bytes: int | None) -> None:
        object.__setattr__(self, "id", id)
        object.__setattr__(self, "cpus", cpus)
        object.__setattr__(self, "memory_bytes", memory_bytes)


class CpuInfo(Frozen):
    __slots__ = ("id", "package", "siblings", "llc")
    id: int
    package: int | None
    siblings: tuple[int, ...] | None
    llc: tuple[int, ...] | None

    def __init__(
        self,
        id: int,
        package: int | None,
        siblings: tuple[int, ...] | None,
        llc: tuple[int, ...] | None,
    ) -> None:
        object.__setattr__(self, "id", id)
        object.__setattr__(self, "package", package)
        object.__setattr__(self, "siblings", siblings)
        object.__setattr__(self, "llc", llc)


class Topology:
    """NUMA nodes and CPUs of the facts. ``problem`` says why nodes are unknown (then ``nodes`` is empty)."""

    def __init__(self, facts: Mapping[str, Any]) -> None:
        numa = _section(facts, "numa")
        self.problem: str | None = None
        self.nodes: dict[int, NodeInfo] = {}
        raw_nodes = numa.get("nodes") if numa else None
        if isinstance(raw_nodes, list):
            for entry in raw_nodes:
                if not isinstance(entry, Mapping) or _id(entry.get("id")) is None:
                    continue
                cpus = _ints(entry.get("cpus"))
                self.nodes[int(entry["id"])] = NodeInfo(
                    int(entry["id"]), frozenset(cpus or []), _bytes(entry.get("memory_total_bytes"))
                )
        if not self.nodes:
            if isinstance(raw_nodes, list) and raw_nodes:
                why = f"none of the {len(raw_nodes)} entries of numa.nodes has a node id from 0 to {MAX_ID - 1}"
            else:
                why = _why(raw_nodes) if raw_nodes is not None else "no numa section"
            self.problem = f"NUMA nodes unknown ({why})"
        self.cpus: dict[int, CpuInfo] = {}
        raw_cpus = numa.get("cpus") if numa else None
        if isinstance(raw_cpus, list):
            for entry in raw_cpus:
                if not isinstance(entry, Mapping) or _id(entry.get("id")) is None:
                    continue
                siblings = _ints(entry.get("siblings"))
                llc = _ints(entry.get("llc_cpus"))
                self.cpus[int(entry["id"])] = CpuInfo(
                    int(entry["id"]),
                    _id(entry.get("package")),
                    tuple(siblings) if siblings else None,
                    tuple(llc) if llc else None,
                )
        self._node_of: dict[int, int] = {}
        for node in sorted(self.nodes.values(), key=lambda n: n.id):
            for cpu in node.cpus:
                self._node_of.setdefault(cpu, node.id)
        smt = numa.get("smt_active") if numa else None
        self.smt_active: bool | None = smt if isinstance(smt, bool) else None

    @property
    def online(self) -> frozenset[int]:
        out: set[int] = set(self._node_of)
        out.update(self.cpus)
        return frozenset(out)

    def cpu_nodes(self) -> list[NodeInfo]:
        """Nodes that have CPUs (memory-only nodes, e.g. CXL or GPU memory, have none)."""
        return [n for n in sorted(self.nodes.values(), key=lambda n: n.id) if n.cpus]

    def node_of(self, cpu: int) -> int | None:
        return self._node_of.get(cpu)

    def nodes_of(self, cpus: Iterable[int]) -> set[int]:
        return {n for n in (self._node_of.get(c) for c in cpus) if n is not None}

    def siblings_known(self) -> bool:
        return bool(self.cpus) and all(c.siblings for c in self.cpus.values())

    def core_groups(self, cpus: Iterable[int]) -> list[tuple[int, ...]]:
        """The CPUs grouped into physical cores (SMT siblings together), ordered by their lowest CPU.

        A CPU whose siblings are unknown is a core of its own."""
        pool = set(cpus)
        seen: set[int] = set()
        groups: list[tuple[int, ...]] = []
        for cpu in sorted(pool):
            if cpu in seen:
                continue
            info = self.cpus.get(cpu)
            members = set(info.siblings) if info and info.siblings else {cpu}
            group = tuple(sorted((members | {cpu}) & pool))
            seen.update(group)
            groups.append(group)
        return groups

    def llc_groups(self, cpus: Iterable[int]) -> list[tuple[int, ...]] | None:
        """The CPUs grouped by shared last-level cache, largest group first (ties: lowest CPU).

        None when a CPU's last-level cache is unknown."""
        pool = set(cpus)
        seen: set[int] = set()
        groups: list[tuple[int, ...]] = []
        for cpu in sorted(pool):
            if cpu in seen:
                continue
            info = self.cpus.get(cpu)
            if info is None or info.llc is None:
                return None
            group = tuple(sorted((set(info.llc) | {cpu}) & pool))
            seen.update(group)
            groups.append(group)
        # Fuller groups first, so that where a cpuset leaves some caches half-allowed the
        # GPUs get the whole ones.
        groups.sort(key=lambda g: (-len(g), g[0]))
        return groups

    def packages_of_node(self, node: int) -> set[int] | None:
        info = self.nodes.get(node)
        if info is None or not info.cpus:
            return None
        packages: set[int] = set()
        for cpu in info.cpus:
            c = self.cpus.get(cpu)
            if c is None or c.package is None:
                return None
            packages.add(c.package)
        return packages

    def socket_nodes(self, node: int) -> list[int] | None:
        """The nodes that share a CPU package (socket) with node, node included; None when unknown."""
        mine = self.packages_of_node(node)
        if mine is None:
            return None
        out = []
        for other in self.cpu_nodes():
            theirs = self.packages_of_node(other.id)
            if theirs is None:
                return None
            if theirs & mine:
                out.append(other.id)
        return out


# --- GPUs ----------------------------------------------------------------------------------------


@dataclass
class GpuInfo:
    index: int | None  # NVML index (PCI order); the position in PCI order when NVML is down
    bus_id: str
    uuid: str | None
    name: str | None
    model: str | None  # what makes two GPUs the same kind: PCI device id, else the NVML name
    pci: Mapping[str, Any] | None
    nvml: Mapping[str, Any] | None
    node: int | None = None
    node_source: str = ""
    path: list[str] | None = None
    amd: Mapping[str, Any] | None = None  # the amdgpu probe's record of an AMD GPU

    @property
    def label(self) -> str:
        return f"GPU {self.index} ({self.bus_id})" if self.index is not None else f"GPU {self.bus_id}"

    def nvml_int(self, key: str) -> int | None:
        return _int(self.nvml.get(key)) if self.nvml else None

    def pci_int(self, key: str) -> int | None:
        return _int(self.pci.get(key)) if self.pci else None

    def amd_int(self, key: str) -> int | None:
        return _int(self.amd.get(key)) if self.amd else None


def nvml_ok(facts: Mapping[str, Any]) -> bool:
    return _section(facts, "nvml").get("status") == "ok"


def gpus_from_facts(facts: Mapping[str, Any], topo: Topology) -> tuple[list[GpuInfo], str, list[str]]:
    """The NVIDIA GPUs a CUDA job on this machine can see, in PCI bus order, with their nodes.

    Returns (gpus, source of the list, notes). With NVML answering, the list is NVML's: in a
    container sysfs shows every GPU of the host, NVML only those given to the container. Without
    NVML it is the NVIDIA display/3D controllers on the PCI bus, numbered in bus order; on a host
    with none of those, the AMD GPUs of the amdgpu probe, numbered as ROCm numbers them."""
    notes: list[str] = []
    by_bus = pci_gpus(facts)
    gpus: list[GpuInfo] = []
    nvml = _section(facts, "nvml")
    if nvml_ok(facts) and isinstance(nvml.get("gpus"), list):
        source = "NVML"
        hidden: list[str] = []
        for view in gpus_of(facts):
            if view.nvml is None:
                if view.vendor == "nvidia" and isinstance(view.bus_id, str):
                    hidden.append(view.bus_id)
                continue
            if not isinstance(view.bus_id, str):
                continue  # NVML could not say where it is: it cannot be placed on a node
            device_id = _str(view.pci.get("device_id")) if view.pci else None
            gpus.append(
                GpuInfo(
                    index=_id(view.nvml.get("index")),
                    bus_id=view.bus_id,
                    uuid=_str(view.uuid),
                    name=_str(view.name),
                    model=device_id or _str(view.name),
                    pci=view.pci,
                    nvml=view.nvml,
                )
            )
        if hidden:
            notes.append(
                f"NVIDIA GPU(s) {', '.join(hidden)} are on the PCI bus but not listed by NVML (not given to this "
                "container, or not initialised): not planned"
            )
    else:
        status = nvml.get("status", "not probed")
        source = "sysfs"
        nvidia = [(b, d) for b, d in sorted(by_bus.items()) if d.get("vendor") == "nvidia"]
        for position, (bus, dev) in enumerate(nvidia):
            gpus.append(
                GpuInfo(
                    index=position,
                    bus_id=bus,
                    uuid=None,
                    name=None,
                    model=_str(dev.get("device_id")),
                    pci=dev,
                    nvml=None,
                )
            )
        if nvidia:
            notes.append(
                f"NVML unavailable ({status}): GPUs taken from the PCI bus and numbered in bus order, as NVML "
                "and CUDA (with CUDA_DEVICE_ORDER=PCI_BUS_ID) number them; in a container sysfs may list GPUs "
                "that were not given to it"
            )
    if not gpus and source == "sysfs":
        gpus = _amd_gpus(facts, notes)
    planned = {g.bus_id for g in gpus}
    others = sorted(b for b, d in by_bus.items() if d.get("vendor") != "nvidia" and b not in planned)
    if others:
        notes.append(f"non-NVIDIA GPU(s) {', '.join(others)} not planned (CUDA device indices cover NVIDIA GPUs only)")
    gpus.sort(key=lambda g: g.bus_id)
    for gpu in gpus:
        gpu.path = pci_components(gpu.pci.get("path")) if gpu.pci else None
        gpu.node, gpu.node_source = resolve_node(gpu, topo)
    return gpus, source, notes


def _amd_gpus(facts: Mapping[str, Any], notes: list[str]) -> list[GpuInfo]:
    """On a host without NVIDIA GPUs, the AMD GPUs the amdgpu probe read, numbered in KFD topology
    node order: the order the ROCm runtime enumerates its GPU agents in, which HIP's device indices
    (HIP_VISIBLE_DEVICES, and CUDA_VISIBLE_DEVICES, which HIP honours too) count."""
    found = [(view.amd.get("kfd_node"), view) for view in gpus_of(facts) if view.amd is not None]
    found = [(node, view) for node, view in found if type(node) is int and isinstance(view.bus_id, str)]
    found.sort(key=lambda pair: (pair[0], pair[1].bus_id))
    out = [
        GpuInfo(
            index=position,
            bus_id=str(view.bus_id),
            uuid=None,
            name=_str(view.name),
            model=_str(view.pci.get("device_id")) if view.pci else None,
            pci=view.pci,
            nvml=None,
            amd=view.amd,
        )
        for position, (_, view) in enumerate(found)
    ]
    if out:
        notes.append(
            "AMD GPUs from amdgpu's sysfs, numbered in KFD topology order as ROCm numbers them "
            "(HIP_VISIBLE_DEVICES; HIP also honours CUDA_VISIBLE_DEVICES)"
        )
    return out


def resolve_node(gpu: GpuInfo, topo: Topology) -> tuple[int | None, str]:
    """(node, how it was found) for a GPU; (None, why not) when it cannot be known."""
    sysfs = gpu.pci_int("numa_node")
    if sysfs is not None and _id(sysfs) is not None:
        return sysfs, "sysfs numa_node"
    if sysfs is None:
        why_not = "sysfs numa_node unreadable"
    else:
        why_not = "sysfs numa_node is -1" if sysfs == -1 else "sysfs numa_node is out of range"
    cpu_nodes = topo.cpu_nodes()
    if gpu.nvml:
        mem = _ints(gpu.nvml.get("memory_affinity"))
        if mem and len(mem) == 1 and mem[0] in topo.nodes:
            return mem[0], f"NVML memory affinity; {why_not}"
        aff = _ints(gpu.nvml.get("cpu_affinity"))
        if aff:
            nodes = topo.nodes_of(aff)
            if len(nodes) == 1:
                return next(iter(nodes)), f"NVML CPU affinity; {why_not}"
    local = _ints(gpu.pci.get("local_cpus")) if gpu.pci else None
    if local and len(cpu_nodes) > 1:
        nodes = topo.nodes_of(local)
        if len(nodes) == 1:
            return next(iter(nodes)), f"sysfs local_cpulist; {why_not}"
    if len(cpu_nodes) == 1:
        return cpu_nodes[0].id, f"the only NUMA node; {why_not}"
    if not cpu_nodes:
        return None, topo.problem or "no NUMA node has CPUs"
    return None, f"{why_not} and NVML names no single node"


@dataclass
class AllowedSet:
    cpus: frozenset[int]
    known: bool
    detail: str
    sources: list[str] = field(default_factory=list)


def allowed_cpus(facts: Mapping[str, Any], topo: Topology) -> AllowedSet:
    """The CPUs the process may run on: Cpus_allowed_list ∩ the cgroup cpuset ∩ online CPUs."""
    host = _section(facts, "host")
    cpus = set(topo.online)
    sources = []
    problems = []
    for key, label in (("allowed_cpus", "Cpus_allowed_list"), ("cgroup_cpus", "cgroup cpuset")):
        value = _ints(host.get(key))
        if value is not None:
            cpus &= set(value)
            sources.append(label)
        else:
            problems.append(f"{label}: {_why(host.get(key))}")
    if not sources:
        return AllowedSet(frozenset(cpus), False, "allowed CPUs unknown (" + "; ".join(problems) + ")", [])
    return AllowedSet(frozenset(cpus), True, " ∩ ".join(sources), sources)


def allowed_mems(facts: Mapping[str, Any]) -> tuple[frozenset[int] | None, str]:
    value = _section(facts, "host").get("allowed_mems")
    mems = _ints(value)
    if mems is None:
        return None, _why(value)
    return frozenset(mems), "Mems_allowed_list"
