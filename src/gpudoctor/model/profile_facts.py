"""What a golden-node profile fixes about a machine, read from its facts through the typed views.

One function, :func:`profile_facts`, and the list of facts it gives (:data:`FACTS`). It is what
`gpudoctor profile create` writes as expectations (fleet/profile.py), what `check --profile`
compares a machine with, what every report's envelope carries (render/envelope.py) and what
`report merge --drift` compares across nodes (fleet/drift.py): one definition of each value, so
a node that passes its profile has the same values in its report as the profile holds.

Shape (plain JSON values; None where the facts do not say)::

    {"host":       {"gpu_count", "gpu_model", "driver", "cuda", "torch", "kernel",
                    "nvlink_islands", "rdma_nics"},
     "gpus":       [{"index", "pcie_gen", "pcie_width", "nvlink_links", "numa_node", "nic"}, ...],
     "nics":       [{"name", "rate_gbps", "link_layer", "numa_node"}, ...],
     "numa_nodes": [{"id", "memory_gib"}, ...]}

Choices that make a value stable on a healthy node (a profile that flaps is worse than none):
PCIe generation is the link's maximum (the current one drops at idle on NVIDIA GPUs), width is
the current one (it does not drop at idle; x8 on an x16 card is a fault or a reduced-lane SKU);
memory per NUMA node is whole GiB, rounded down, and judged with a tolerance and as a warning
(NUMA_MEMORY_TOLERANCE below says why). VBIOS and InfoROM versions are not in the facts
(gpudoctor does not read them), so no profile fixes them.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from ..facts import Unavailable
from ..findings import Severity
from ..frozen import Frozen
from .cpus import format_cpulist
from .gpus import gpus_of, nvlink_islands
from .nics import nics_from_facts, pair_nics
from .topology import Topology, gpus_from_facts

SCOPES = ("host", "gpus", "nics", "numa_nodes")
# The key that names an entry of a list scope (it is not itself a fact).
ENTRY_KEY = {"gpus": "index", "nics": "name", "numa_nodes": "id"}


class ProfileFact(Frozen):
    """One fact a profile fixes. ``blocking``: a node that differs from the fleet's majority on it
    makes `report merge --drift` exit 1 (a job across nodes that differ on it can fail or slow
    down); the others (kernel, memory, placement) are reported, not blocking. ``ranged``: values
    that differ between a profile's snapshots become a range (min, max), not a set of values.

    Each fact is also a check, ``profile-<fact>`` (:attr:`rule_id`), that `rules list`, `rules
    show`, docs/rules.md, --only/--skip and the policy's required/ignore know like a YAML rule:
    ``action`` is what its failure recommends (findings.ACTIONS), ``tag`` the topic a selector may
    name besides its id and the area ``profile`` (pcie, nvlink, rdma, ...), ``why`` what a
    difference means."""

    __slots__ = (
        "scope", "key", "title", "blocking", "ranged", "text", "form", "action", "tag", "why", "severity", "tolerance"
    )
    scope: str
    key: str
    title: str
    blocking: bool
    ranged: bool
    text: bool  # its value is text ("13.0", a version), never a number
    form: str  # how a value reads in a sentence: "x{}" for a width (x8), "{} GiB"
    action: str
    tag: str
    why: str
    severity: Severity
    # how far a number may be from the profile's and still pass: the larger of ``tolerance[0]``
    # times the profile's value and ``tolerance[1]`` (in the fact's unit); None: exactly
    tolerance: tuple[float, float] | None

    def __init__(
        self,
        scope: str,
        key: str,
        title: str,
        blocking: bool,
        ranged: bool = False,
        text: bool = False,
        form: str = "{}",
        action: str = "drain-and-inspect-hardware",
        tag: str = "",
        why: str = "",
        severity: Severity = Severity.ERROR,
        tolerance: tuple[float, float] | None = None,
    ) -> None:
        object.__setattr__(self, "scope", scope)
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "title", title)
        object.__setattr__(self, "blocking", blocking)
        object.__setattr__(self, "ranged", ranged)
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "form", form)
        object.__setattr__(self, "action", action)
        object.__setattr__(self, "tag", tag)
        object.__setattr__(self, "why", why)
        object.__setattr__(self, "severity", severity)
        object.__setattr__(self, "tolerance", tolerance)

    def slack(self, expected: Any) -> float:
        """How far from ``expected`` (a number of the profile) a node's value may be and pass."""
        if self.tolerance is None or not isinstance(expected, (int, float)) or isinstance(expected, bool):
            return 0.0
        relative, least = self.tolerance
        return max(relative * abs(expected), least)

    @property
    def tolerance_words(self) -> str:
        """The tolerance as a clause for people ("" when a value must match exactly)."""
        return self.tolerance_of("the profile's value")

    def tolerance_of(self, what: str) -> str:
        """The tolerance as a clause about ``what`` the value is compared with ("" for none)."""
        if self.tolerance is None:
            return ""
        relative, least = self.tolerance
        return f"give or take {_number(_whole(relative * 100))} % of {what}, at least {self.shown(least)}"

    def shown(self, value: Any) -> str:
        """A value as people read it (x16, 400 Gb/s); None, a value no node has, is "unknown"."""
        if value is None:
            return "unknown"
        return self.form.format(value if isinstance(value, str) else _number(value))

    @property
    def rule_id(self) -> str:
        """The check's id: profile-<fact> (profile-driver, profile-gpu-pcie-width, profile-nic-rate)."""
        return f"profile-{_PREFIX[self.scope]}{_SHORT.get(self.key, self.key).replace('_', '-')}"

    @property
    def subject(self) -> str:
        """What its findings are about, in the words of a rule's subject."""
        return _SUBJECT[self.scope]

    @property
    def check_title(self) -> str:
        return f"{self.title} as the node profile expects"

    @property
    def keys(self) -> frozenset[str]:
        """What an --only/--skip or required/ignore selector may name to choose this check."""
        return frozenset({self.rule_id, PROFILE_AREA, *([self.tag] if self.tag else [])})


PROFILE_AREA = "profile"
# Memory per NUMA node (MemTotal of /sys/devices/system/node/nodeN/meminfo, in whole GiB rounded
# down) is not a fixed number: on bare metal the kernel's own reservations move it by some MiB
# between kernels and firmware releases, which flips the GiB at a boundary; on a VM a balloon
# driver moves it by whole GiB (a profile made a minute before had 4 GiB, the check read 6). So:
# - a tolerance: the larger of 2 % of the profile's value and 1 GiB. 1 GiB absorbs the rounding
#   (two readings less than 1 GiB apart are at most 1 whole GiB apart); 2 % absorbs reservations
#   on large nodes and stays below one DIMM of any current server node (24 DIMMs, two per channel
#   on 12 channels, make one 4.2 %; fewer DIMMs, or a node per quarter socket, make more), so a
#   missing DIMM still fails;
# - severity warning: a difference beyond it is reported (check exits 1 only with --fail-on
#   warning; the gate blocks on it only when the policy requires profile-numa-memory or fails on
#   warnings), as report merge --drift shows memory without blocking; a VM whose memory
#   balloons further than the tolerance warns, it does not fail.
NUMA_MEMORY_TOLERANCE = (0.02, 1)
# What a fact's check id says beside the fact's key, so that one id names one fact: a GPU's and a
# NIC's NUMA node are two checks.
_PREFIX = {"host": "", "gpus": "gpu-", "nics": "nic-", "numa_nodes": "numa-"}
_SHORT = {"rate_gbps": "rate", "memory_gib": "memory"}
_SUBJECT = {"host": "host", "gpus": "gpu", "nics": "nic", "numa_nodes": "numa_node"}
_SW = "fix-software"
_PLACED = (
    "Placement (the NUMA node and the NIC nearest a GPU) decides the NUMA binding and the NIC each rank "
    "uses; a node whose cards or NICs sit elsewhere than its peers' runs, with another binding."
)

# fmt: off
FACTS: tuple[ProfileFact, ...] = (
    ProfileFact("host", "gpu_count", "GPU count", True, tag="health",
                why="A GPU fewer than the known-good node has fell off the bus or NVML; a job sized for "
                "the fleet does not start or runs a rank short."),
    ProfileFact("host", "gpu_model", "GPU model", True, text=True, tag="health",
                why="Another GPU model (or a mix) is another node type: kernels, memory and speed differ "
                "from those of the nodes the job was sized for."),
    ProfileFact("host", "driver", "driver version", True, text=True, action=_SW, tag="driver",
                why="Nodes on different driver releases behave differently under one job; a driver one "
                "release behind is the usual drift after a partial roll-out."),
    ProfileFact("host", "cuda", "CUDA version of the driver", True, text=True, action=_SW, tag="driver",
                why="The CUDA version the driver supports bounds the CUDA builds of torch and NCCL that "
                "run; a node below its peers fails where they work."),
    ProfileFact("host", "torch", "torch version", True, text=True, action=_SW, tag="torch",
                why="Ranks on different torch versions can disagree on collectives and checkpoints."),
    ProfileFact("host", "kernel", "kernel release", False, text=True, action=_SW, tag="kernel",
                why="A different kernel needs its own build of the driver's module; drift reports it "
                "without blocking."),
    ProfileFact("host", "nvlink_islands", "NVLink islands", True, text=True, tag="nvlink",
                why="GPUs that the known-good node joins by NVLink and this one does not talk over PCIe: "
                "all-reduce inside the node slows down by an order of magnitude."),
    ProfileFact("host", "rdma_nics", "RDMA NIC count", True, tag="rdma",
                why="A NIC fewer (down, unplugged or unbound) leaves its GPUs without their own network "
                "path: collectives across nodes slow down or fail."),
    ProfileFact("gpus", "pcie_gen", "PCIe generation (link maximum)", True, form="Gen{}", tag="pcie",
                why="The link's maximum generation does not drop at idle; one below the profile's is a "
                "BIOS setting, a riser or the slot."),
    ProfileFact("gpus", "pcie_width", "PCIe link width", True, form="x{}", tag="pcie",
                why="Judged against the profile, a reduced-lane SKU that is x8 by design passes and an "
                "x16 card trained down to x8 fails, without thresholds written by hand."),
    ProfileFact("gpus", "nvlink_links", "active NVLink links", True, tag="nvlink",
                why="A GPU with fewer active NVLink links than on the known-good node has a link down: "
                "its peer traffic slows or falls back to PCIe."),
    ProfileFact("gpus", "numa_node", "NUMA node of the GPU", False, tag="numa", why=_PLACED),
    ProfileFact("gpus", "nic", "nearest RDMA NIC of the GPU", False, text=True, tag="numa", why=_PLACED),
    ProfileFact("nics", "rate_gbps", "RDMA port rate", True, form="{} Gb/s", tag="rdma",
                why="A port below the profile's rate (a cable, a switch port, a transceiver) slows every "
                "collective that crosses it."),
    ProfileFact("nics", "link_layer", "RDMA link layer", True, text=True, action=_SW, tag="rdma",
                why="InfiniBand and Ethernet (RoCE) ports need different NCCL settings; a port in the "
                "other mode is a firmware setting (its port type)."),
    ProfileFact("nics", "numa_node", "NUMA node of the NIC", False, tag="numa", why=_PLACED),
    ProfileFact("numa_nodes", "memory_gib", "memory of the NUMA node", False, ranged=True, form="{} GiB",
                tag="numa", severity=Severity.WARNING, tolerance=NUMA_MEMORY_TOLERANCE,
                why="Less memory on a NUMA node than on the known-good node is a DIMM missing or "
                "disabled; the data loaders bound to that node run short. The memory the kernel "
                "reports moves a little with its reservations (and on a VM with a balloon driver), "
                "so a value within 2 % of the profile's or 1 GiB of it, whichever is more, passes, "
                "and a difference is a warning: it blocks a gate only when the policy requires this "
                "check or fails on warnings."),
)
# fmt: on
BY_NAME = {(f.scope, f.key): f for f in FACTS}
BY_RULE_ID = {f.rule_id: f for f in FACTS}
# A failed profile check's fix, the same for every fact: the profile holds the expected values.
PROFILE_FIX = (
    "This node differs from its golden profile: fix the node, or, if the profile is what is "
    "out of date, make it again (gpudoctor profile create) from known-good snapshots."
)


# The bounds of report.schema.json's envelope ``profile``: a snapshot is outside input, and a
# value past them (a width of 10**30, a model name of a megabyte) is unknown here rather than
# a report that fails its own schema.
MAX_INT = 1 << 22
MAX_NUMBER = 1e12
MAX_TEXT = 1024


def _number(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def _known(value: Any, *kinds: type) -> Any:
    if isinstance(value, Unavailable) or not isinstance(value, kinds):
        return None
    if isinstance(value, bool):
        return value if bool in kinds else None
    if isinstance(value, int):
        return value if -1 <= value <= MAX_INT else None
    if isinstance(value, float):
        return value if 0 <= value <= MAX_NUMBER else None
    if isinstance(value, str):
        return value if 0 < len(value) <= MAX_TEXT else None
    return None


def _section(facts: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = facts.get(name)
    return value if isinstance(value, Mapping) else {}


def _text(facts: Mapping[str, Any], section: str, key: str) -> str | None:
    return _known(_section(facts, section).get(key), str)  # type: ignore[no-any-return]


def software_versions(facts: Mapping[str, Any]) -> dict[str, str | None]:
    """The driver (NVML's, else the loaded kernel module's), the driver's CUDA version and the
    target Python's torch, as the report envelope and the profile both name them."""
    torch = _section(facts, "torch")
    version = torch.get("version") if torch.get("installed") is True else None
    return {
        "driver": _text(facts, "nvml", "driver_version") or _text(facts, "modules", "nvidia_version"),
        "cuda": _text(facts, "nvml", "cuda_driver_version"),
        "torch": _known(version, str),
    }


def _islands(records: list[Mapping[str, Any]]) -> str | None:
    """The NVLink islands as text: "0-3 / 4-7", "none" with no NVLink peers; None when a GPU's
    peers are unknown."""
    if any(not isinstance(r.get("nvlink_peers"), list) for r in records):
        return None
    groups: dict[int, list[int]] = {}
    for index, island in nvlink_islands(records).items():
        groups.setdefault(island, []).append(index)
    if not groups:
        return "none"
    return " / ".join(format_cpulist(sorted(members)) for _, members in sorted(groups.items()))


def _host(facts: Mapping[str, Any], views: tuple[Any, ...], nic_count: int | None) -> dict[str, Any]:
    nvml_ok = _section(facts, "nvml").get("status") == "ok"
    # GPUs a job can use: NVML's when it answered; without NVML an NVIDIA GPU's presence is unknown
    usable = [g for g in views if g.in_nvml is True or g.vendor != "nvidia"]
    count = len(usable) if nvml_ok or all(g.vendor != "nvidia" for g in views) else None
    names = [g.name for g in usable]
    model = " + ".join(sorted(set(names))) if names and all(isinstance(n, str) for n in names) else None
    if model is not None:
        model = _known(model, str)
    records = [g.nvml for g in views if g.nvml is not None]
    return {
        "gpu_count": count,
        "gpu_model": model,
        **software_versions(facts),
        "kernel": _text(facts, "host", "kernel_release"),
        "nvlink_islands": _known(_islands(records), str) if nvml_ok and records else None,
        "rdma_nics": nic_count,
    }


def _first_int(*values: Any) -> int | None:
    return next((v for v in values if _known(v, int) is not None), None)


def _gpus(views: tuple[Any, ...], nic_of: Mapping[str, str]) -> list[dict[str, Any]]:
    out = []
    for g in views:
        if not isinstance(g.index, int):
            continue  # a GPU NVML does not number cannot be matched across nodes
        nvml, pci = g.nvml or {}, g.pci or {}
        node = _known(g.numa_node, int) if isinstance(g.numa_node, int) and g.numa_node >= 0 else None
        out.append(
            {
                "index": g.index,
                "pcie_gen": _first_int(nvml.get("pcie_max_gen"), pci.get("max_link_gen")),
                "pcie_width": _first_int(nvml.get("pcie_width"), pci.get("link_width")),
                "nvlink_links": _known(nvml.get("nvlink_active"), int),
                "numa_node": node,
                "nic": _known(nic_of.get(g.bus_id), str) if isinstance(g.bus_id, str) else None,
            }
        )
    return sorted(out, key=lambda e: e["index"])


def _whole(value: Any) -> Any:
    """400.0 as 400: a rate reads as sysfs and people write it."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _nics(nics: list[Any]) -> list[dict[str, Any]]:
    out = []
    for n in nics:
        rates = [_known(p.rate_gbps, int, float) for p in n.ports]
        layers = sorted({p.link_layer for p in n.ports if p.link_layer})
        name = _known(n.name, str)
        if name is None:
            continue
        out.append(
            {
                "name": name,
                # the slowest port: a dual-port NIC with one port trained down is slower
                "rate_gbps": _whole(min(rates)) if rates and None not in rates else None,
                "link_layer": _known(",".join(layers), str) if layers else None,
                "numa_node": n.node,
            }
        )
    return sorted(out, key=lambda e: e["name"])


def profile_facts(facts: Mapping[str, Any]) -> dict[str, Any]:
    """The profile facts of one machine (see the module docstring for the shape)."""
    topo = Topology(facts)
    views = gpus_of(facts)
    rdma_ok = isinstance(_section(facts, "rdma").get("devices"), list)
    nics = nics_from_facts(facts, topo)
    gpus, _, _ = gpus_from_facts(facts, topo)
    nic_of = {bus: choice.nic.name for bus, choice in pair_nics(gpus, nics).items()}
    return {
        "host": _host(facts, views, len(nics) if rdma_ok or nics else None),
        "gpus": _gpus(views, nic_of),
        "nics": _nics(nics),
        "numa_nodes": [
            {"id": n.id, "memory_gib": n.memory_bytes >> 30 if n.memory_bytes is not None else None}
            # memory_bytes is below 2**64 (model/topology.py), so the GiB are below 2**34
            for n in sorted(topo.nodes.values(), key=lambda n: n.id)
        ],
    }
