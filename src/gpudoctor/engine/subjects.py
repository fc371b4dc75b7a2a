"""Rule subjects built from the facts: the host, each GPU, each NUMA node, each NIC.

A GPU subject joins what sysfs (PCI) and NVML say about one card by PCI
bus id, so a GPU that fell off NVML but is still on the bus is a subject
too, and every GPU is named by index *and* bus id. NVML fields of a GPU
NVML does not list are unavailable, with the reason. A GPU's own results of
`gpudoctor bench` (gpu.bench) and of the gate's device test (gpu.device_test)
are attached to it.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..facts import Unavailable
from ..findings import HOST, Subject, bounded_subject
from . import factpaths

NVML_REASON = {
    "library_not_found": "not_found",
    "driver_not_loaded": "driver_not_loaded",
    "no_permission": "no_permission",
    "timeout": "timeout",
}


def normalise_bus_id(bus_id: str) -> str:
    """ "00000000:9A:00.0" → "0000:9a:00.0"."""
    text = bus_id.strip().lower()
    domain, _, rest = text.partition(":")
    if rest and len(domain) > 4:
        domain = domain[-4:]
    return f"{domain}:{rest}" if rest else text


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _section(facts: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = facts.get(name)
    return value if isinstance(value, Mapping) else {}


def is_compute_gpu(dev: Mapping[str, Any]) -> bool:
    """NVIDIA and AMD GPUs, and other vendors' 3D controllers/accelerators; not a BMC's VGA chip."""
    if dev.get("kind") != "gpu":
        return False
    if dev.get("vendor") in ("nvidia", "amd"):
        return True
    code = dev.get("class_code")
    return isinstance(code, str) and code.lower().startswith(("0x0302", "0x12"))


def gpu_subjects(facts: Mapping[str, Any]) -> list[dict[str, Any]]:
    nvml = _section(facts, "nvml")
    status = nvml.get("status", "error")
    nvml_ok = status == "ok"
    nvml_gpus = _list(nvml.get("gpus"))
    pci_gpus = [
        d for d in _list(_section(facts, "pci").get("devices")) if isinstance(d, Mapping) and is_compute_gpu(d)
    ]
    by_bus: dict[str, Mapping[str, Any]] = {}
    for dev in pci_gpus:
        bus = dev.get("bus_id")
        if isinstance(bus, str):
            by_bus[normalise_bus_id(bus)] = dev

    nvml_fields = list(factpaths.subject_schema("gpu")["properties"])
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    records = [rec for rec in nvml_gpus if isinstance(rec, Mapping)]
    bus_of = _nvml_bus_ids(records, by_bus)
    for rec in records:
        bus_norm = bus_of[id(rec)]
        pci = by_bus.get(bus_norm)
        seen.add(bus_norm)
        subject = dict(rec)
        bus = rec.get("bus_id")
        unknown_bus = bus if isinstance(bus, Unavailable) else Unavailable("error", "NVML gave no PCI bus id")
        subject["bus_id"] = bus_norm or unknown_bus
        vendor = pci.get("vendor") if pci else "nvidia"
        subject["vendor"] = vendor if isinstance(vendor, str) else "nvidia"
        subject["in_nvml"] = True
        subject["on_pci"] = pci is not None
        subject["pci"] = dict(pci) if pci else Unavailable("not_found", f"sysfs lists no PCI device {bus_norm}")
        subject["label"] = f"GPU {rec.get('index')} ({bus_norm or 'bus id unknown'})"
        out.append(subject)
    unplaced = [str(rec.get("index")) for rec in records if not bus_of[id(rec)]]

    if nvml_ok and unplaced:
        # NVML may well list this GPU under an index whose bus id it could not give: unknown, not absent.
        missing = Unavailable(
            "error", f"NVML could not give the PCI bus id of GPU {', '.join(unplaced)}; it may be this one"
        )
        in_nvml: Any = missing
    elif nvml_ok:
        missing = Unavailable("not_found", "NVML does not list this GPU")
        in_nvml = False
    else:
        reason = NVML_REASON.get(str(status), "error")
        error = str(nvml.get("error", "")).strip()
        detail = f"NVML did not answer ({status})" + (f": {error}" if error else "")
        missing = Unavailable(reason, detail)
        in_nvml = missing
    for bus_norm, dev in sorted(by_bus.items()):
        if bus_norm in seen:
            continue
        vendor = dev.get("vendor") if isinstance(dev.get("vendor"), str) else "other"
        subject = {name: missing for name in nvml_fields}
        if vendor != "nvidia":
            subject = {
                name: Unavailable("not_supported", f"NVML covers NVIDIA GPUs only ({vendor})") for name in nvml_fields
            }
        subject.update(
            {
                "bus_id": bus_norm,
                "vendor": vendor,
                "in_nvml": in_nvml if vendor == "nvidia" else False,
                "on_pci": True,
                "pci": dict(dev),
                "label": f"{vendor.upper() if vendor in ('amd', 'nvidia') else vendor} GPU ({bus_norm})"
                if vendor != "nvidia"
                else f"GPU {bus_norm}",
                "index": Unavailable(missing.reason, missing.detail)
                if vendor == "nvidia"
                else Unavailable("not_supported", "no NVML index for a non-NVIDIA GPU"),
            }
        )
        out.append(subject)

    bench = _bench_by_bus(facts)
    for subject in out:
        subject["local_cpus"] = _local_cpus(subject)
        subject["numa_node"] = _numa_node(subject)
        bus = subject.get("bus_id")
        subject["bench"] = bench.get(bus, _NO_BENCH) if isinstance(bus, str) else _NO_BENCH
    _attach_device_test(facts, out)
    return out


_NO_BENCH = Unavailable("not_found", "no bench results for this GPU (gpudoctor bench --facts FILE -o FILE adds them)")


def _bench_by_bus(facts: Mapping[str, Any]) -> dict[str, Any]:
    """The bench section's per-GPU results by normalised bus id (empty without a bench)."""
    bench = facts.get("bench")
    out: dict[str, Any] = {}
    for entry in _list(bench.get("gpus")) if isinstance(bench, Mapping) else []:
        bus = entry.get("bus_id") if isinstance(entry, Mapping) else None
        if isinstance(bus, str):
            out[normalise_bus_id(bus)] = entry
    return out


_NO_DEVICE_TEST = Unavailable("not_found", "the device test did not run on this GPU")


def _attach_device_test(facts: Mapping[str, Any], subjects: list[dict[str, Any]]) -> None:
    """Each GPU's own device test results (the device_test section `gate --deep` adds) as
    gpu.device_test: the CUDA device matched by UUID, else by PCI bus id, else by index where CUDA's
    indices are NVML's; a p2p result names the GPU copied to by that GPU's label."""
    for subject in subjects:
        subject["device_test"] = _NO_DEVICE_TEST
    section = facts.get("device_test")
    if not isinstance(section, Mapping):
        return
    by_index: dict[int, dict[str, Any]] = {}
    for entry in _list(section.get("gpus")):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("index"), int):
            continue
        match = _tested_gpu(entry, subjects, section.get("index_is_nvml") is True)
        if match is not None and match["device_test"] is _NO_DEVICE_TEST:
            match["device_test"] = dict(entry)
            by_index[entry["index"]] = match
    for subject in by_index.values():
        p2p = subject["device_test"].get("p2p")
        if isinstance(p2p, Mapping) and isinstance(p2p.get("peer"), int):
            peer = by_index.get(p2p["peer"])
            label = str(peer["label"]) if peer is not None else f"CUDA device {p2p['peer']}"
            subject["device_test"]["p2p"] = {**p2p, "peer_label": label}


def _tested_gpu(entry: Mapping[str, Any], subjects: list[dict[str, Any]], index_is_nvml: bool) -> dict[str, Any] | None:
    uuid, bus = entry.get("uuid"), entry.get("bus_id")
    if isinstance(uuid, str):
        for g in subjects:
            if isinstance(g.get("uuid"), str) and g["uuid"].lower() == uuid.lower():
                return g
    if isinstance(bus, str):
        wanted = normalise_bus_id(bus)
        for g in subjects:
            if g.get("bus_id") == wanted:
                return g
    if index_is_nvml:
        return next((g for g in subjects if g.get("index") == entry["index"]), None)
    return None


def _local_cpus(subject: Mapping[str, Any]) -> Any:
    affinity = subject.get("cpu_affinity")
    if isinstance(affinity, list) and affinity:
        return affinity
    pci = subject.get("pci")
    if isinstance(pci, Mapping):
        return pci.get("local_cpus", Unavailable("not_found", "no local_cpulist"))
    return affinity if isinstance(affinity, Unavailable) else Unavailable("not_found", "no CPU affinity known")


def _numa_node(subject: Mapping[str, Any]) -> Any:
    pci = subject.get("pci")
    sysfs_node = pci.get("numa_node") if isinstance(pci, Mapping) else None
    if isinstance(sysfs_node, int) and sysfs_node >= 0:
        return sysfs_node
    mem = subject.get("memory_affinity")
    if isinstance(mem, list) and len(mem) == 1:
        return mem[0]
    if isinstance(sysfs_node, int):
        return sysfs_node  # -1: the firmware gave none and NVML could not say either
    if isinstance(sysfs_node, Unavailable):
        return sysfs_node
    return Unavailable("not_found", "no NUMA node known for this GPU")


def _nvml_bus_ids(records: list[Mapping[str, Any]], by_bus: Mapping[str, Mapping[str, Any]]) -> dict[int, str]:
    """Normalised bus id of each NVML record ("" when unknown), by id() of the record.

    A record whose bus id NVML could not give (the PCI info call failed, or the GPU was lost
    before it) is placed only when that is certain: it is the one such record and exactly one
    GPU bound to the nvidia driver on the PCI bus is named by no other record.
    """
    out: dict[int, str] = {}
    for rec in records:
        bus = rec.get("bus_id")
        out[id(rec)] = normalise_bus_id(bus) if isinstance(bus, str) else ""
    unknown = [rec for rec in records if not out[id(rec)]]
    named = set(out.values())
    free = [bus for bus, dev in by_bus.items() if bus not in named and dev.get("driver") == "nvidia"]
    if len(unknown) == 1 and len(free) == 1:
        out[id(unknown[0])] = free[0]
    return out


def gpu_subject_ref(subject: Mapping[str, Any]) -> Subject:
    index = subject.get("index")
    uuid = subject.get("uuid")
    bus = subject.get("bus_id")
    return Subject(
        kind="gpu",
        label=str(subject.get("label")),
        index=index if isinstance(index, int) else None,
        bus_id=bus if isinstance(bus, str) else None,
        uuid=uuid if isinstance(uuid, str) else None,
    )


def numa_subjects(facts: Mapping[str, Any], gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    nodes = _list(_section(facts, "numa").get("nodes"))
    # GPUs by node once, not a walk of every GPU for each node (both can be thousands)
    by_node: dict[Any, list[Any]] = {}
    for g in gpus:
        node_id = g.get("numa_node")
        if isinstance(node_id, (int, float)):  # keyed as == compares: 1, 1.0 and True alike
            by_node.setdefault(node_id, []).append(g["bus_id"])
    out = []
    for node in nodes:
        if not isinstance(node, Mapping):
            continue
        subject = dict(node)
        node_id = node.get("id")
        if type(node_id) is int:
            subject["gpus"] = list(by_node.get(node_id, ()))
        else:  # an id that is no int (a float, a string): compared as before
            subject["gpus"] = [g["bus_id"] for g in gpus if g.get("numa_node") == node_id]
        out.append(subject)
    return out


def nic_subjects(facts: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        dict(d)
        for d in _list(_section(facts, "pci").get("devices"))
        if isinstance(d, Mapping) and d.get("kind") == "nic"
    ]


def subjects_for(
    kind: str, facts: Mapping[str, Any], gpus: list[dict[str, Any]]
) -> list[tuple[Subject, dict[str, Any] | None]]:
    """(reference, data) pairs for a rule's subject kind; host has no data of its own."""
    if kind == "host":
        return [(HOST, None)]
    if kind == "gpu":
        return [(bounded_subject(gpu_subject_ref(g)), g) for g in gpus]
    if kind == "numa_node":
        return [
            (bounded_subject(Subject("numa_node", f"node {n.get('id')}", index=n.get("id"))), n)
            for n in numa_subjects(facts, gpus)
        ]
    if kind == "nic":
        refs: list[tuple[Subject, dict[str, Any] | None]] = []
        for n in nic_subjects(facts):
            rdma = n.get("rdma_devices")
            name = rdma[0] if isinstance(rdma, list) and rdma else "NIC"
            ref = Subject("nic", f"{name} ({n.get('bus_id')})", bus_id=n.get("bus_id"))
            refs.append((bounded_subject(ref), n))
        return refs
    raise KeyError(kind)


SUBJECT_VARIABLE = {"host": None, "gpu": "gpu", "numa_node": "node", "nic": "nic"}
