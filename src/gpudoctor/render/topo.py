"""The topology view (`gpudoctor topo`): which GPU and NIC sits on which NUMA node, behind which
PCIe host bridge and switch, with the node's CPUs; the NVSwitches on the bus and whether the fabric
manager runs; an AMD host's XGMI hives and each GPU's XGMI links against the most any GPU of its
hive has (fewer: links down); text (a tree per node, then a table) or JSON.

Formatting only: the layout comes from model.topology and model.nics, read from the facts. In the text,
every name from the facts (hostname, device, bus and interface names, notes) goes through
gpudoctor.escaping.printable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Union

from ..escaping import printable
from ..facts import Unavailable
from ..model.gpus import XgmiHive, xgmi_hives
from ..model.nics import RELATIONS, NicChoice, NicInfo, nics_from_facts, pair_nics
from ..model.topology import GpuInfo, Topology, allowed_cpus, cpulist, gpus_from_facts
from .layout import pack, wrap

GIB = 1 << 30

Item = Union[GpuInfo, NicInfo]


@dataclass
class Layout:
    hostname: str
    topo: Topology
    gpus: list[GpuInfo]
    gpu_source: str
    nics: list[NicInfo]
    pairs: dict[str, NicChoice]
    allowed: Any
    notes: list[str]
    switches: NvSwitches = field(default_factory=lambda: NvSwitches(None, [], None, None))
    hives: list[XgmiHive] = field(default_factory=list)  # members are places in ``gpus``

    def xgmi(self, gpu: GpuInfo) -> tuple[int, int | None] | None:
        """(XGMI links, the most any GPU of its hive has: None when unknown) of a GPU in a hive
        whose links were counted; None for any other GPU."""
        links = gpu.amd_int("xgmi_links")
        for hive in self.hives:
            if links is not None and any(self.gpus[p] is gpu for p in hive.members):
                return links, hive.max_links
        return None

    @property
    def link_header(self) -> str:
        """The links column's header: XGMI on a host of AMD GPUs (gpus_from_facts lists them only
        where it lists no NVIDIA GPU), NVLink otherwise."""
        return "XGMI" if any(g.amd is not None for g in self.gpus) else "NVLink"


@dataclass
class NvSwitches:
    """The NVSwitches the pci section counted, their bus ids, and whether nv-fabricmanager runs
    (None where the facts do not say: an older snapshot, or the PCI bus not read in full)."""

    count: int | None
    bus_ids: list[str]
    fabric_manager_running: bool | None
    fabric_manager_pid: int | None
    fabric_manager_reason: str = ""

    @classmethod
    def from_facts(cls, facts: Mapping[str, Any]) -> NvSwitches:
        pci = facts.get("pci")
        pci = pci if isinstance(pci, Mapping) else {}
        count, ids = pci.get("nvswitch_count"), pci.get("nvswitch_bus_ids")
        running, pid = pci.get("fabric_manager_running"), pci.get("fabric_manager_pid")
        return cls(
            count=count if isinstance(count, int) and not isinstance(count, bool) else None,
            bus_ids=[b for b in ids if isinstance(b, str)] if isinstance(ids, list) else [],
            fabric_manager_running=running if isinstance(running, bool) else None,
            fabric_manager_pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
            fabric_manager_reason=running.reason if isinstance(running, Unavailable) else "",
        )

    def text(self) -> list[str]:
        """The parts of the line for a host with NVSwitches (none without: other hosts' output is
        unchanged): the switches, then the fabric manager."""
        if not self.count:
            return []
        shown = f" ({printable(', '.join(self.bus_ids))})" if self.bus_ids else ""
        if self.fabric_manager_running is True:
            pid = f" (pid {self.fabric_manager_pid})" if self.fabric_manager_pid is not None else ""
            manager = f"running{pid}"
        elif self.fabric_manager_running is False:
            manager = "not running"
        else:
            manager = "unknown" + (f" ({printable(self.fabric_manager_reason.replace('_', ' '))})"
                                   if self.fabric_manager_reason else "")
        return [f"NVSwitches: {self.count}{shown}", f"fabric manager (nv-fabricmanager): {manager}"]

    def to_json(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "bus_ids": self.bus_ids,
            "fabric_manager_running": self.fabric_manager_running,
            "fabric_manager_pid": self.fabric_manager_pid,
        }


def layout(facts: Mapping[str, Any]) -> Layout:
    topo = Topology(facts)
    gpus, source, notes = gpus_from_facts(facts, topo)
    nics = nics_from_facts(facts, topo)
    host = facts.get("host")
    name = host.get("hostname") if isinstance(host, Mapping) else None
    return Layout(
        hostname=name if isinstance(name, str) else "this host",
        topo=topo,
        gpus=gpus,
        gpu_source=source,
        nics=nics,
        pairs=pair_nics(gpus, nics),
        allowed=allowed_cpus(facts, topo),
        notes=notes,
        switches=NvSwitches.from_facts(facts),
        hives=xgmi_hives([g.amd for g in gpus]),
    )


# --- text -----------------------------------------------------------------------------------------


@dataclass
class _Branch:
    key: str
    children: dict[str, _Branch] = field(default_factory=dict)
    items: list[Item] = field(default_factory=list)

    def size(self) -> int:
        return len(self.children) + len(self.items)


def _insert(root: _Branch, item: Item, path: list[str] | None) -> None:
    branch = root
    for part in (path or [])[:-1]:
        branch = branch.children.setdefault(part, _Branch(part))
    branch.items.append(item)


def _simplify(branch: _Branch, depth: int) -> None:
    for child in list(branch.children.values()):
        _simplify(child, depth + 1)
    if depth == 0:
        return  # the host bridges (root complexes) always show
    for key, child in list(branch.children.items()):
        # A chain of bridges with one way down (root port -> switch upstream port) shows as its
        # deepest bridge; a port leading to a single device shows as that device.
        while not child.items and len(child.children) == 1:
            child = next(iter(child.children.values()))
        branch.children[key] = child
        if not child.children and len(child.items) == 1:
            branch.items.extend(child.items)
            del branch.children[key]


def _xgmi_text(lay: Layout, g: GpuInfo) -> str | None:
    """"5/7": the GPU's XGMI links of the most any GPU of its hive has; "5" when that is unknown."""
    found = lay.xgmi(g)
    if found is None:
        return None
    links, most = found
    return f"{links}/{most}" if most is not None else str(links)


def _gpu_line(g: GpuInfo, lay: Layout) -> list[str]:
    parts = [f"GPU {g.index if g.index is not None else '?'}", printable(g.bus_id)]
    if g.name:
        parts.append(printable(g.name))
    gen, width = g.pci_int("link_gen"), g.pci_int("link_width")
    if gen is not None and width is not None:
        parts.append(f"Gen{gen} x{width}")
    active, links = g.nvml_int("nvlink_active"), g.nvml_int("nvlink_links")
    if active is not None and links:
        parts.append(f"NVLink {active}/{links}")
    xgmi = _xgmi_text(lay, g)
    if xgmi is not None:
        parts.append(f"XGMI {xgmi}")
    choice = lay.pairs.get(g.bus_id)
    if choice is not None:
        parts.append(f"→ {printable(choice.nic.name)}")
    return parts


def _nic_line(n: NicInfo) -> list[str]:
    parts = [f"NIC {printable(n.name)}", printable(n.bus_id)]
    if n.net:
        parts.append(printable(",".join(n.net)))
    for port in n.ports:
        words = [f"port {port.port}" if len(n.rdma) == 1 else f"{printable(port.device)}:{port.port}"]
        words.append(printable(port.state) if port.state else "state ?")
        words.append(f"{port.rate_gbps:g} Gb/s" if port.rate_gbps is not None else "rate ?")
        if port.link_layer:
            words.append(printable(port.link_layer))
        parts.append(" ".join(words))
    return parts


def _label(branch: _Branch) -> str:
    if branch.key.startswith("pci"):
        return f"host bridge {printable(branch.key)}"
    return f"{'PCIe switch' if branch.size() > 1 else 'PCIe bridge'} {printable(branch.key)}"


def _sort_key(entry: Any) -> str:
    return entry.key if isinstance(entry, _Branch) else entry.bus_id


def _render_branch(
    branch: _Branch, prefix: str, lines: list[str], lay: Layout, width: int
) -> None:
    entries: list[Any] = [*branch.items, *branch.children.values()]
    entries.sort(key=_sort_key)
    for i, entry in enumerate(entries):
        last = i == len(entries) - 1
        connector = "└── " if last else "├── "
        below = prefix + ("    " if last else "│   ")
        if isinstance(entry, _Branch):
            lines.append(prefix + connector + _label(entry))
            _render_branch(entry, below, lines, lay, width)
        else:  # a device's parts flow onto lines under it, the tree's lines carried on
            parts = _gpu_line(entry, lay) if isinstance(entry, GpuInfo) else _nic_line(entry)
            lines.extend(pack(parts, width, prefix + connector, below + "  ", "  "))


def _node_head(lay: Layout, node_id: int) -> list[str]:
    topo = lay.topo
    node = topo.nodes[node_id]
    packages = topo.packages_of_node(node_id)
    parts = [f"NUMA node {node_id}"]
    if packages is not None:
        parts.append(("socket " if len(packages) == 1 else "sockets ") + ",".join(map(str, sorted(packages))))
    if node.cpus:
        cores = len(topo.core_groups(node.cpus))
        parts.append(f"CPUs {cpulist(node.cpus)} ({cores} cores, {len(node.cpus)} threads)")
        allowed = node.cpus & lay.allowed.cpus
        if allowed != node.cpus:
            if allowed:
                parts.append(f"allowed here: {cpulist(allowed)} ({len(allowed)} of {len(node.cpus)})")
            else:
                parts.append("no CPU allowed here")
    else:
        parts.append("no CPUs")
    if node.memory_bytes is not None:
        parts.append(f"{node.memory_bytes / GIB:.0f} GiB")
    return parts


def render_text(facts: Mapping[str, Any], width: int = 100) -> str:
    """The view at `width` columns: the head lines and a device's parts flow onto indented lines
    (in the tree, under the device, the tree's lines carried on), and the GPU table shortens its
    headers, then turns into a list (`_table`), where a row would not fit."""
    lay = layout(facts)
    topo = lay.topo
    sockets = {c.package for c in topo.cpus.values() if c.package is not None}
    smt = {True: ", SMT on", False: ", SMT off", None: ""}[topo.smt_active]
    head = [
        printable(lay.hostname),
        f"{len(sockets) or '?'} socket(s)",
        f"{len(topo.nodes)} NUMA node(s)",
        f"{len(topo.online)} CPUs{smt}",
        f"{len(lay.gpus)} GPU(s) (from {printable(lay.gpu_source)})",
        f"{len(lay.nics)} RDMA NIC(s)",
    ]
    lines = pack(head, width, "", "  ", " · ")
    if topo.problem:
        lines.extend(wrap(printable(topo.problem), width, "  ", "  "))
    switches = lay.switches.text()
    if switches:  # the two parts on lines of their own if need be, a long bus id list wrapped
        said = pack(switches, width, "", "  ", " · ")
        lines.extend(said if max(map(len, said)) <= width else wrap(" · ".join(switches), width, "", "  "))
    groups: dict[int | None, list[Item]] = {}
    for g in lay.gpus:
        groups.setdefault(g.node if g.node in topo.nodes else None, []).append(g)
    for n in lay.nics:
        groups.setdefault(n.node if n.node in topo.nodes else None, []).append(n)
    for node in sorted(topo.nodes):
        lines.append("")
        lines.extend(pack(_node_head(lay, node), width, "", "  ", " · "))
        _render_items(groups.get(node, []), lines, lay, width)
    if None in groups:
        lines.append("")
        lines.append("NUMA node unknown")
        _render_items(groups[None], lines, lay, width)
    if lay.gpus:
        lines.append("")
        lines.extend(_table(lay, width))
    for note in lay.notes:
        lines.extend(wrap(printable(note), width, "note: ", "  "))
    return "\n".join(lines) + "\n"


def _render_items(items: list[Item], lines: list[str], lay: Layout, width: int) -> None:
    if not items:
        lines.append("└── (no GPU or RDMA NIC)")
        return
    root = _Branch("")
    for item in items:
        _insert(root, item, item.path)
    _simplify(root, 0)
    _render_branch(root, "", lines, lay, width)


# The GPU table's headers, and the shorter ones it takes where a row with the long ones would be
# wider than the output; where even those do not fit, each GPU is a short list of its own. The
# links column says XGMI instead of NVLink on an AMD host (Layout.link_header).
HEADERS = ("GPU", "bus id", "NUMA node", "local CPUs (allowed)", "NVLink", "nearest RDMA NIC")
SHORT_HEADERS = ("GPU", "bus id", "node", "CPUs", "NVLink", "NIC")


def _table(lay: Layout, width: int) -> list[str]:
    rows = []
    for g in lay.gpus:
        if g.node is not None and g.node in lay.topo.nodes:
            local = lay.topo.nodes[g.node].cpus & lay.allowed.cpus
            cpus = cpulist(local) if local else "none allowed"
            node = str(g.node)
        else:
            cpus, node = "?", "?"
        active, links = g.nvml_int("nvlink_active"), g.nvml_int("nvlink_links")
        nvlink = f"{active}/{links}" if active is not None and links else _xgmi_text(lay, g) or "-"
        choice = lay.pairs.get(g.bus_id)
        nic = f"{printable(choice.nic.name)} ({printable(choice.relation)})" if choice else "-"
        rows.append((str(g.index if g.index is not None else "?"), printable(g.bus_id), node, cpus, nvlink, nic))
    out = []
    short = (*SHORT_HEADERS[:4], lay.link_header, SHORT_HEADERS[5])
    for headers in ((*HEADERS[:4], lay.link_header, HEADERS[5]), short):
        widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
        if sum(widths) + 2 * (len(widths) - 1) <= width:
            for row in [headers, *rows]:
                out.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
            break
    else:  # the list form: one GPU's fields, labelled, flowing onto indented lines
        for row in rows:
            labelled = [f"GPU {row[0]}", row[1], *(f"{h} {c}" for h, c in zip(short[2:], row[2:]))]
            out.extend(pack(labelled, width, "", "    ", "  "))
    sources = sorted({g.node_source for g in lay.gpus if g.node_source != "sysfs numa_node"})
    for source in sources:
        out.extend(wrap(f"NUMA node from: {printable(source)}", width, "", "  "))
    islands = nvlink_island_lists(lay.gpus)
    if islands:
        shown = " · ".join("GPUs " + ",".join(str(i) for i in island) for island in islands)
        out.extend(wrap(f"NVLink islands (peer-to-peer over NVLink): {shown}", width, "", "  "))
    out.extend(_hive_lines(lay, width))
    return out


def _index(g: GpuInfo) -> str:
    return str(g.index) if g.index is not None else printable(g.bus_id)


def _hive_lines(lay: Layout, width: int) -> list[str]:
    """Per XGMI hive its GPUs and the most links one has, then the GPUs with fewer (links down)."""
    out: list[str] = []
    for hive in lay.hives:
        members = sorted((lay.gpus[p] for p in hive.members), key=lambda g: (g.index is None, g.index or 0))
        most = f"up to {hive.max_links} links a GPU" if hive.max_links is not None else "links not all counted"
        shown = ",".join(_index(g) for g in members)
        text = f"XGMI hive {printable(hive.hive_id)} (peer-to-peer over XGMI): GPUs {shown}, {most}"
        out.extend(wrap(text, width, "", "  "))
        down = [(g, lay.xgmi(g)) for g in members]
        fewer = [f"GPU {_index(g)} has {found[0]} of {found[1]}" for g, found in down
                 if found is not None and found[1] is not None and found[0] < found[1]]
        if fewer:
            out.extend(wrap(f"XGMI links down: {', '.join(fewer)}", width, "", "  "))
    return out


def nvlink_island_lists(gpus: list[GpuInfo]) -> list[list[int]]:
    """The NVLink islands among these GPUs, each a sorted list of NVML indices."""
    from ..model.gpus import nvlink_islands

    members: dict[int, list[int]] = {}
    for index, island in nvlink_islands([g.nvml for g in gpus if g.nvml]).items():
        members.setdefault(island, []).append(index)
    return [sorted(m) for _, m in sorted(members.items())]


# --- json -----------------------------------------------------------------------------------------


def to_json(facts: Mapping[str, Any]) -> dict[str, Any]:
    lay = layout(facts)
    topo = lay.topo
    nodes = []
    for node in sorted(topo.nodes.values(), key=lambda n: n.id):
        packages = topo.packages_of_node(node.id)
        nodes.append({
            "id": node.id,
            "cpus": cpulist(node.cpus) if node.cpus else "",
            "cores": len(topo.core_groups(node.cpus)),
            "threads": len(node.cpus),
            "sockets": sorted(packages) if packages is not None else None,
            "allowed_cpus": cpulist(node.cpus & lay.allowed.cpus) if node.cpus & lay.allowed.cpus else "",
            "memory_bytes": node.memory_bytes,
        })
    gpus = []
    for g in lay.gpus:
        choice = lay.pairs.get(g.bus_id)
        gpus.append({
            "index": g.index,
            "bus_id": g.bus_id,
            "uuid": g.uuid,
            "name": g.name,
            "numa_node": g.node,
            "numa_node_source": g.node_source,
            "pci_path": g.path,
            "link_gen": g.pci_int("link_gen"),
            "link_width": g.pci_int("link_width"),
            "nvlink_active": g.nvml_int("nvlink_active"),
            "nvlink_links": g.nvml_int("nvlink_links"),
            "nvlink_peers": g.nvml.get("nvlink_peers") if g.nvml and isinstance(g.nvml.get("nvlink_peers"), list)
            else None,
            "xgmi_hive_id": g.amd.get("xgmi_hive_id") if g.amd and isinstance(g.amd.get("xgmi_hive_id"), str)
            else None,
            "xgmi_links": g.amd_int("xgmi_links"),
            "nearest_nic": None
            if choice is None
            else {"rdma_device": choice.nic.name, "bus_id": choice.nic.bus_id, "relation": choice.relation},
        })
    return {
        "format": 1,
        "hostname": lay.hostname,
        "gpu_source": lay.gpu_source,
        "numa_nodes": nodes,
        "gpus": gpus,
        "nics": [
            {
                "rdma_devices": n.rdma,
                "net_devices": n.net,
                "bus_id": n.bus_id,
                "numa_node": n.node,
                "pci_path": n.path,
                "ports": [
                    {
                        "rdma_device": p.device,
                        "port": p.port,
                        "state": p.state,
                        "rate_gbps": p.rate_gbps,
                        "link_layer": p.link_layer,
                    }
                    for p in n.ports
                ],
            }
            for n in lay.nics
        ],
        "nvlink_islands": nvlink_island_lists(lay.gpus),
        "xgmi_hives": [
            {
                "hive_id": hive.hive_id,
                "gpus": sorted(i for i in (lay.gpus[p].index for p in hive.members) if i is not None),
                "max_links": hive.max_links,
            }
            for hive in lay.hives
        ],
        "nvswitches": lay.switches.to_json(),
        "relations": list(RELATIONS.values()),
        "notes": lay.notes,
    }


def render_json(facts: Mapping[str, Any]) -> str:
    return json.dumps(to_json(facts), indent=2, ensure_ascii=False) + "\n"
