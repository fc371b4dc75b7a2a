"""The machine's GPUs, as one frozen, typed view built from the facts, and the one device matcher.

A GPU is what NVML lists joined with what sysfs shows on the PCI bus, by bus id, so a GPU that fell
off NVML but is still on the bus is one of them, and every GPU is named by index *and* bus id. The
rule subjects (engine/subjects.py), the NUMA plan, the spec match, the bench, the gate's report and
the report envelope all read the GPUs through this view rather than joining the sections again.

A value the facts do not have stays Unavailable, with the reason; nothing is guessed into None or
a default. The raw NVML record and PCI device stay reachable (``nvml``, ``pci``) for the readers
that need a field the view does not name; so does an AMD GPU's record of the amdgpu probe
(``amd``, joined by bus id), which gives an AMD GPU its name and memory size.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence, TypeVar

from ..facts import Unavailable
from ..frozen import Frozen
from .bus_ids import normalise_bus_id

if TYPE_CHECKING:
    from ..findings import Finding

NVML_REASON = {
    "library_not_found": "not_found",
    "driver_not_loaded": "driver_not_loaded",
    "no_permission": "no_permission",
    "timeout": "timeout",
}


@dataclass(frozen=True)
class Gpu:
    """One GPU of the machine."""

    # "GPU 1 (0000:9a:00.0)", "GPU 0000:9a:00.0" (not in NVML), "AMD GPU (0000:c1:00.0)",
    # "NPU 0 (0000:42:00.0)" (a Huawei Ascend NPU)
    label: str
    bus_id: str | Unavailable  # canonical (model/bus_ids.py); unavailable when NVML gave none
    index: int | Unavailable  # NVML's index
    uuid: str | Unavailable
    name: str | Unavailable
    vendor: str  # nvidia, amd, intel, other (sysfs' word; NVML lists NVIDIA GPUs only)
    in_nvml: bool | Unavailable  # unavailable when NVML did not answer, or could not say
    on_pci: bool
    numa_node: int | Unavailable  # sysfs numa_node, else NVML's single memory node; -1: none given
    local_cpus: tuple[int, ...] | Unavailable  # NVML CPU affinity, else sysfs local_cpulist
    memory_total_bytes: int | Unavailable
    nvml: Mapping[str, Any] | None  # the NVML record as probed, read-only; None: NVML lists no such GPU
    pci: Mapping[str, Any] | None  # the sysfs PCI device, read-only; None: not on the PCI bus
    nvml_missing: Unavailable | None  # why this GPU's NVML fields are unavailable (None: it has a record)
    amd: Mapping[str, Any] | None = None  # the amdgpu probe's record, read-only; None: not an amdgpu GPU

    def reading(self, key: str) -> Any:
        """One NVML field of this GPU as probed (absent: None), or why NVML has none for it."""
        if self.nvml is None:
            return self.nvml_missing
        return self.nvml.get(key)


def is_compute_gpu(dev: Mapping[str, Any]) -> bool:
    """NVIDIA and AMD GPUs, and other vendors' 3D controllers/accelerators; not a BMC's VGA chip."""
    if dev.get("kind") != "gpu":
        return False
    if dev.get("vendor") in ("nvidia", "amd"):
        return True
    code = dev.get("class_code")
    return isinstance(code, str) and code.lower().startswith(("0x0302", "0x12"))


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _section(facts: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = facts.get(name)
    return value if isinstance(value, Mapping) else {}


def pci_gpus(facts: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The compute GPUs on the PCI bus by canonical bus id, in the order sysfs listed them."""
    out: dict[str, Mapping[str, Any]] = {}
    for dev in _list(_section(facts, "pci").get("devices")):
        if isinstance(dev, Mapping) and is_compute_gpu(dev) and isinstance(dev.get("bus_id"), str):
            out[normalise_bus_id(dev["bus_id"])] = dev
    return out


def _typed(value: Any, kind: type, what: str) -> Any:
    if isinstance(value, Unavailable) or (isinstance(value, kind) and not isinstance(value, bool)):
        return value
    return Unavailable("not_found" if value is None else "error", f"NVML gave no {what}")


def _frozen(value: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    return MappingProxyType(dict(value)) if value is not None else None


def amd_gpus(facts: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The amdgpu probe's GPU records by canonical bus id."""
    out: dict[str, Mapping[str, Any]] = {}
    for rec in _list(_section(facts, "amdgpu").get("gpus")):
        if isinstance(rec, Mapping) and isinstance(rec.get("bus_id"), str):
            out.setdefault(normalise_bus_id(rec["bus_id"]), rec)
    return out


def gpus_of(facts: Mapping[str, Any]) -> tuple[Gpu, ...]:
    """The machine's GPUs: NVML's, in NVML's order, then those only on the PCI bus, by bus id."""
    nvml = _section(facts, "nvml")
    amd = amd_gpus(facts)
    status = nvml.get("status", "error")
    by_bus = pci_gpus(facts)
    records = [rec for rec in _list(nvml.get("gpus")) if isinstance(rec, Mapping)]
    bus_of = _nvml_bus_ids(records, by_bus)

    out: list[Gpu] = []
    for rec, bus_norm in zip(records, bus_of):
        pci = by_bus.get(bus_norm)
        vendor = pci.get("vendor") if pci else "nvidia"
        bus = rec.get("bus_id")
        unknown_bus = bus if isinstance(bus, Unavailable) else Unavailable("error", "NVML gave no PCI bus id")
        out.append(
            _gpu(
                label=f"GPU {rec.get('index')} ({bus_norm or 'bus id unknown'})",
                bus_id=bus_norm or unknown_bus,
                index=_typed(rec.get("index"), int, "index"),
                vendor=vendor if isinstance(vendor, str) else "nvidia",
                in_nvml=True,
                nvml=rec,
                pci=pci,
                nvml_missing=None,
            )
        )

    unplaced = [str(rec.get("index")) for rec, bus in zip(records, bus_of) if not bus]
    if status == "ok" and unplaced:
        # NVML may well list this GPU under an index whose bus id it could not give: unknown, not absent.
        missing = Unavailable(
            "error", f"NVML could not give the PCI bus id of GPU {', '.join(unplaced)}; it may be this one"
        )
        in_nvml: bool | Unavailable = missing
    elif status == "ok":
        missing = Unavailable("not_found", "NVML does not list this GPU")
        in_nvml = False
    else:
        error = str(nvml.get("error", "")).strip()
        detail = f"NVML did not answer ({status})" + (f": {error}" if error else "")
        missing = Unavailable(NVML_REASON.get(str(status), "error"), detail)
        in_nvml = missing
    listed = set(bus_of)
    npus = 0
    for bus_norm, dev in sorted(by_bus.items()):
        if bus_norm in listed:
            continue
        vendor = dev["vendor"] if isinstance(dev.get("vendor"), str) else "other"
        nvidia = vendor == "nvidia"
        if vendor == "huawei":
            # An Ascend NPU, numbered by its place in PCI bus order among the node's NPUs (sysfs
            # shows all of them, also in a container given fewer): the ids 0..N-1 the
            # ASCEND_*VISIBLE_DEVICES check counts. sysfs does not say which /dev/davinci<N> an
            # NPU is, so the number is the bus order, not read from the driver.
            label = f"NPU {npus} ({bus_norm})"
            npus += 1
        elif nvidia:
            label = f"GPU {bus_norm}"
        else:
            label = f"{vendor.upper() if vendor == 'amd' else vendor} GPU ({bus_norm})"
        out.append(
            _gpu(
                label=label,
                bus_id=bus_norm,
                index=Unavailable(missing.reason, missing.detail)
                if nvidia
                else Unavailable("not_supported", "no NVML index for a non-NVIDIA GPU"),
                vendor=vendor,
                in_nvml=in_nvml if nvidia else False,
                nvml=None,
                pci=dev,
                nvml_missing=missing
                if nvidia
                else Unavailable("not_supported", f"NVML covers NVIDIA GPUs only ({vendor})"),
                amd=amd.get(bus_norm) if vendor == "amd" else None,
            )
        )
    return tuple(out)


def _gpu(
    *,
    label: str,
    bus_id: str | Unavailable,
    index: int | Unavailable,
    vendor: str,
    in_nvml: bool | Unavailable,
    nvml: Mapping[str, Any] | None,
    pci: Mapping[str, Any] | None,
    nvml_missing: Unavailable | None,
    amd: Mapping[str, Any] | None = None,
) -> Gpu:
    def field(key: str, kind: type, what: str, amd_key: str = "") -> Any:
        if nvml is None and amd is not None and amd_key:
            value = amd.get(amd_key)
            if isinstance(value, Unavailable) or (isinstance(value, kind) and not isinstance(value, bool)):
                return value
            return Unavailable("not_found", f"the amdgpu probe gave no {what}")
        return _typed(nvml.get(key), kind, what) if nvml is not None else nvml_missing

    return Gpu(
        label=label,
        bus_id=bus_id,
        index=index,
        uuid=field("uuid", str, "UUID"),
        name=field("name", str, "name", "product_name"),
        vendor=vendor,
        in_nvml=in_nvml,
        on_pci=pci is not None,
        numa_node=_numa_node(nvml, pci),
        local_cpus=_local_cpus(nvml, pci, nvml_missing),
        memory_total_bytes=field("memory_total_bytes", int, "memory size", "vram_total_bytes"),
        nvml=_frozen(nvml),
        pci=_frozen(pci),
        nvml_missing=nvml_missing,
        amd=_frozen(amd),
    )


def _nvml_bus_ids(records: list[Mapping[str, Any]], by_bus: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Canonical bus id of each NVML record ("" when unknown), in the records' order.

    A record whose bus id NVML could not give (the PCI info call failed, or the GPU was lost
    before it) is placed only when that is certain: it is the one such record and exactly one
    GPU bound to the nvidia driver on the PCI bus is named by no other record.
    """
    out = [normalise_bus_id(bus) if isinstance(bus := rec.get("bus_id"), str) else "" for rec in records]
    unknown = [i for i, bus in enumerate(out) if not bus]
    named = set(out)
    free = [bus for bus, dev in by_bus.items() if bus not in named and dev.get("driver") == "nvidia"]
    if len(unknown) == 1 and len(free) == 1:
        out[unknown[0]] = free[0]
    return out


def _ints(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return tuple(value)
    return None


def _local_cpus(
    nvml: Mapping[str, Any] | None, pci: Mapping[str, Any] | None, missing: Unavailable | None
) -> tuple[int, ...] | Unavailable:
    affinity = nvml.get("cpu_affinity") if nvml is not None else missing
    if isinstance(affinity, list) and affinity:
        return _ints(affinity) or Unavailable("error", "NVML's CPU affinity is not a CPU list")
    if pci is not None:
        local = pci.get("local_cpus", Unavailable("not_found", "no local_cpulist"))
        if isinstance(local, Unavailable):
            return local
        cpus = _ints(local)
        return cpus if cpus is not None else Unavailable("error", "sysfs local_cpulist is not a CPU list")
    return affinity if isinstance(affinity, Unavailable) else Unavailable("not_found", "no CPU affinity known")


def _numa_node(nvml: Mapping[str, Any] | None, pci: Mapping[str, Any] | None) -> int | Unavailable:
    sysfs_node = pci.get("numa_node") if pci is not None else None
    if isinstance(sysfs_node, int) and sysfs_node >= 0:
        return sysfs_node
    mem = nvml.get("memory_affinity") if nvml is not None else None
    if isinstance(mem, list) and len(mem) == 1 and isinstance(mem[0], int):
        return int(mem[0])
    if isinstance(sysfs_node, int):
        return sysfs_node  # -1: the firmware gave none and NVML could not say either
    if isinstance(sysfs_node, Unavailable):
        return sysfs_node
    return Unavailable("not_found", "no NUMA node known for this GPU")


class Identified(Protocol):
    """What the matcher reads of a GPU (a Gpu, or a reader's own row built from one)."""

    @property
    def uuid(self) -> object: ...

    @property
    def bus_id(self) -> object: ...

    @property
    def index(self) -> object: ...


G = TypeVar("G", bound=Identified)


def match_gpu(
    gpus: Sequence[G], *, uuid: Any = None, bus_id: Any = None, index: Any = None, index_known: bool = False
) -> G | None:
    """The GPU a device someone else numbered (torch, CUDA, a worker) is: by UUID (any case), else
    by PCI bus id, else by index, but only when that numbering is known to be NVML's
    (``index_known``: PCI order, nothing hidden by CUDA_VISIBLE_DEVICES) and the device gave no bus
    id: a bus id that none of the GPUs has says the device is none of them, whatever its number."""
    if isinstance(uuid, str) and uuid:
        wanted = uuid.lower()
        for g in gpus:
            if isinstance(g.uuid, str) and g.uuid.lower() == wanted:
                return g
    if isinstance(bus_id, str):
        bus = normalise_bus_id(bus_id)
        for g in gpus:
            if g.bus_id == bus:
                return g
    if index_known and not isinstance(bus_id, str) and isinstance(index, int) and not isinstance(index, bool):
        return next((g for g in gpus if g.index == index and not isinstance(g.index, bool)), None)
    return None


def _known(value: Any, kind: type) -> Any:
    return value if isinstance(value, kind) and not isinstance(value, bool) else None


def gpu_rows(
    facts: Mapping[str, Any], findings: Sequence[Finding], is_blocking: Callable[[Finding], bool]
) -> list[dict[str, Any]]:
    """The reports' ``gpus`` list (check and gate JSON, one shape): one row per GPU with its
    identity, memory, the checks that failed on it and whether one of them blocks."""
    from ..findings import Status

    # the findings about each GPU, gathered in one pass (not one pass per GPU: 512 GPUs x 50 000
    # findings would be 25 million comparisons)
    by_bus: dict[Any, list[Finding]] = {}
    for f in findings:
        if f.subject.kind == "gpu":
            by_bus.setdefault(f.subject.bus_id, []).append(f)
    rows = []
    for g in gpus_of(facts):
        bus = _known(g.bus_id, str)
        on_it = by_bus.get(bus, [])
        rows.append(
            {
                "index": _known(g.index, int),
                "bus_id": bus,
                "uuid": _known(g.uuid, str),
                "name": _known(g.name, str),
                "memory_total_bytes": _known(g.memory_total_bytes, int),
                "memory_used_bytes": _known(
                    g.amd.get("vram_used_bytes") if g.amd is not None else g.reading("memory_used_bytes"), int
                ),
                "utilization_gpu_pct": _known(g.reading("utilization_gpu_pct"), int),
                "failed_checks": list(dict.fromkeys(f.rule_id for f in on_it if f.status is Status.FAIL)),
                "blocking": any(is_blocking(f) for f in on_it),
            }
        )
    return rows


def nvlink_islands(gpus: Sequence[Mapping[str, Any]]) -> dict[int, int]:
    """NVML index -> its NVLink island (the island's lowest index), for GPUs with NVLink peers.

    Islands are the connected groups of the peer relation (a link counts when either end lists
    the other). GPUs whose peers are unknown or empty are in no island."""
    parent: dict[int, int] = {}

    def find(i: int) -> int:
        while parent.setdefault(i, i) != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for g in gpus:
        index, peers = g.get("index"), g.get("nvlink_peers")
        if not isinstance(index, int) or not isinstance(peers, list):
            continue
        for peer in peers:
            if isinstance(peer, int) and peer != index:
                a, b = find(index), find(peer)
                parent[max(a, b)] = min(a, b)
    return {i: find(i) for i in list(parent)}


class XgmiHive(Frozen):
    """AMD GPUs that share an XGMI hive id: their places in the list given to xgmi_hives, and the
    most XGMI links any of them has (None when one member's links could not be counted: it might
    have more). A GPU of the hive with fewer links than that has lost some."""

    __slots__ = ("hive_id", "members", "max_links")
    hive_id: str
    members: tuple[int, ...]
    max_links: int | None

    def __init__(self, hive_id: str, members: tuple[int, ...], max_links: int | None) -> None:
        object.__setattr__(self, "hive_id", hive_id)
        object.__setattr__(self, "members", members)
        object.__setattr__(self, "max_links", max_links)


def xgmi_hives(records: Sequence[Mapping[str, Any] | None]) -> list[XgmiHive]:
    """The XGMI hives among these amdgpu probe records (None: not an AMD GPU), in the order of
    their first member. The rules (engine/subjects) and the topology view both count from here."""
    members: dict[str, list[tuple[int, Any]]] = {}
    for place, record in enumerate(records):
        hive = record.get("xgmi_hive_id") if record is not None else None
        if record is not None and isinstance(hive, str):
            members.setdefault(hive, []).append((place, record.get("xgmi_links")))
    hives = []
    for hive, found in members.items():
        counted = [n for _, n in found if isinstance(n, int) and not isinstance(n, bool)]
        most = max(counted) if len(counted) == len(found) else None
        hives.append(XgmiHive(hive, tuple(place for place, _ in found), most))
    return hives
