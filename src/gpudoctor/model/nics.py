"""The machine's RDMA NICs and which GPU each one serves, read from the facts (no system access).

A NIC is a PCI function that backs an RDMA device (the pci section), with its ports as the rdma
section read them. Each GPU is paired with its nearest NIC by PCI topology (same switch, same host
bridge, same NUMA node), ties going to the NIC given to the fewest GPUs so far, as NCCL spreads
GPUs over NICs. The NUMA plan, `topo` and the RDMA rules' subjects (which GPUs a port finding
affects) all use this one pairing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..frozen import Frozen
from .bus_ids import normalise_bus_id
from .topology import GpuInfo, Topology, _id, _int, _list, _section, _str, pci_components


class NicPort(Frozen):
    """One port of one of the NIC's RDMA devices, as the rdma section read it (None: not known)."""

    __slots__ = ("device", "port", "state", "rate_gbps", "link_layer")
    device: str
    port: int
    state: str | None
    rate_gbps: int | float | None
    link_layer: str | None

    def __init__(
        self,
        device: str,
        port: int,
        state: str | None,
        rate_gbps: int | float | None,
        link_layer: str | None,
    ) -> None:
        object.__setattr__(self, "device", device)
        object.__setattr__(self, "port", port)
        object.__setattr__(self, "state", state)
        object.__setattr__(self, "rate_gbps", rate_gbps)
        object.__setattr__(self, "link_layer", link_layer)


@dataclass
class NicInfo:
    bus_id: str
    rdma: list[str]
    net: list[str]
    node: int | None
    path: list[str] | None
    vendor: str | None
    ports: list[NicPort] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.rdma[0] if self.rdma else self.bus_id


def _rdma_ports(facts: Mapping[str, Any]) -> dict[str, list[NicPort]]:
    """RDMA device name -> its ports, from the rdma section."""
    out: dict[str, list[NicPort]] = {}
    for dev in _list(_section(facts, "rdma").get("devices")):
        if not isinstance(dev, Mapping) or not isinstance(dev.get("name"), str):
            continue
        for port in _list(dev.get("ports")):
            if not isinstance(port, Mapping) or _int(port.get("port")) is None:
                continue
            rate = port.get("rate_gbps")
            out.setdefault(dev["name"], []).append(
                NicPort(
                    device=dev["name"],
                    port=port["port"],
                    state=_str(port.get("state")),
                    rate_gbps=rate if isinstance(rate, (int, float)) and not isinstance(rate, bool) else None,
                    link_layer=_str(port.get("link_layer")),
                )
            )
    return out


def nics_from_facts(facts: Mapping[str, Any], topo: Topology) -> list[NicInfo]:
    out = []
    single = topo.cpu_nodes()
    ports = _rdma_ports(facts)
    for dev in _list(_section(facts, "pci").get("devices")):
        if not isinstance(dev, Mapping) or dev.get("kind") != "nic" or not isinstance(dev.get("bus_id"), str):
            continue
        rdma = [r for r in _list(dev.get("rdma_devices")) if isinstance(r, str)]
        if not rdma:
            continue
        node = _id(dev.get("numa_node"))
        if node is None and len(single) == 1:
            node = single[0].id
        out.append(
            NicInfo(
                bus_id=normalise_bus_id(dev["bus_id"]),
                rdma=sorted(rdma),
                net=sorted(n for n in _list(dev.get("net_devices")) if isinstance(n, str)),
                node=node if node is not None and node >= 0 else None,
                path=pci_components(dev.get("path")),
                vendor=_str(dev.get("vendor")),
                ports=[p for name in sorted(rdma) for p in ports.get(name, [])],
            )
        )
    return sorted(out, key=lambda n: n.bus_id)


# Closeness of a GPU and a NIC, best first; the names follow nvidia-smi topo -m / NCCL's path types.
RELATIONS = {
    0: "same PCIe switch",
    1: "same PCIe host bridge",
    2: "same NUMA node, different host bridge",
    3: "another NUMA node",
    4: "distance unknown",
}


def pci_relation(gpu: GpuInfo, nic: NicInfo) -> tuple[int, int]:
    """(relation rank, -depth of the deepest shared PCI ancestor): lower is closer."""
    if gpu.path and nic.path:
        a, b = gpu.path[:-1], nic.path[:-1]
        shared = 0
        while shared < min(len(a), len(b)) and a[shared] == b[shared]:
            shared += 1
        # Two functions below one bridge (a root port has a single link, so sharing it means a
        # switch below it) talk without crossing the host bridge.
        if shared >= 2:
            return 0, -shared
        if shared == 1:
            return 1, -shared
    if gpu.node is not None and nic.node is not None:
        return (2 if gpu.node == nic.node else 3), 0
    return 4, 0


@dataclass
class NicChoice:
    nic: NicInfo
    rank: int

    @property
    def relation(self) -> str:
        return RELATIONS[self.rank]

    @property
    def env(self) -> dict[str, str]:
        # "=" asks NCCL for this exact HCA (a bare name is a prefix: mlx5_1 would also match mlx5_10).
        # The port is not in the facts; port 1 is the only port of most HCAs.
        return {"NCCL_IB_HCA": f"={self.nic.name}", "UCX_NET_DEVICES": f"{self.nic.name}:1"}


def pair_nics(gpus: list[GpuInfo], nics: list[NicInfo]) -> dict[str, NicChoice]:
    """Each GPU's nearest RDMA NIC by PCI topology; ties go to the NIC given to the fewest GPUs so far."""
    if not nics:
        return {}
    load: dict[str, int] = {n.bus_id: 0 for n in nics}
    out: dict[str, NicChoice] = {}
    for gpu in sorted(gpus, key=lambda g: g.bus_id):
        ranked = sorted(nics, key=lambda n: (pci_relation(gpu, n), load[n.bus_id], n.bus_id))
        best = ranked[0]
        out[gpu.bus_id] = NicChoice(best, pci_relation(gpu, best)[0])
        load[best.bus_id] += 1
    return out
