"""Rule subjects built from the facts: the host, each GPU, each NUMA node, each NIC, each RDMA port,
and each PCIe switch port on a GPU<->GPU or GPU<->NIC path.


A GPU subject is one GPU of the machine's GPU view (model/gpus.py, which joins what sysfs (PCI)
and NVML say about one card by PCI bus id): its NVML record as the rules read it, with the joined
identity beside it. NVML fields of a GPU NVML does not list are unavailable, with the reason. A
GPU's own results of `gpudoctor bench` (gpu.bench) and of the gate's device test
(gpu.device_test) are attached to it by the view's device matcher.

An RDMA port subject is one port of the rdma section with its device's name, bus id and NUMA node,
the labels of the GPUs that use its NIC (model/nics.py's GPU↔NIC pairing, the one `topo` and
the NUMA plan show) and the best rate of its kind on the host to compare with.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..facts import Unavailable
from ..findings import HOST, Subject, bounded_subject
from ..model.bus_ids import normalise_bus_id
from ..model.gpus import Gpu, gpus_of, match_gpu, xgmi_hives
from ..model.nics import nics_from_facts, pair_nics
from ..model.topology import Topology, gpus_from_facts
from . import factpaths


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _section(facts: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = facts.get(name)
    return value if isinstance(value, Mapping) else {}


def gpu_subjects(facts: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One subject per GPU of the view (model/gpus.py): its NVML fields (or why NVML has none),
    the joined identity, and its bench and device test results."""
    nvml_fields = list(factpaths.subject_schema("gpu")["properties"])
    gpus = gpus_of(facts)
    out: list[dict[str, Any]] = []
    for gpu in gpus:
        if gpu.nvml is not None:
            subject = dict(gpu.nvml)
            subject["bus_id"] = gpu.bus_id
            subject["vendor"] = gpu.vendor
            subject["in_nvml"] = gpu.in_nvml
            subject["on_pci"] = gpu.on_pci
            subject["pci"] = (
                dict(gpu.pci) if gpu.pci else Unavailable("not_found", f"sysfs lists no PCI device {_bus_text(gpu)}")
            )
            subject["label"] = gpu.label
        else:
            subject = {name: gpu.nvml_missing for name in nvml_fields}
            subject.update(
                {
                    "bus_id": gpu.bus_id,
                    "vendor": gpu.vendor,
                    "in_nvml": gpu.in_nvml,
                    "on_pci": gpu.on_pci,
                    "pci": dict(gpu.pci or {}),
                    "label": gpu.label,
                    "index": gpu.index,
                    # an AMD GPU's from the amdgpu probe; NVML's reason otherwise, as the fields above
                    "name": gpu.name,
                    "memory_total_bytes": gpu.memory_total_bytes,
                }
            )
        cpus = gpu.local_cpus
        subject["local_cpus"] = list(cpus) if isinstance(cpus, tuple) else cpus
        subject["numa_node"] = gpu.numa_node
        subject["bench"] = _NO_BENCH
        subject["amd"] = dict(gpu.amd) if gpu.amd is not None else _not_amd(gpu)
        out.append(subject)
    _attach_hives(gpus, out)
    _attach_bench(facts, gpus, out)
    _attach_device_test(facts, gpus, out)
    _attach_nvlink_rates(facts, out)
    return out


def _not_amd(gpu: Gpu) -> Unavailable:
    if gpu.vendor == "amd":
        return Unavailable("not_found", "the amdgpu probe has no record of this GPU (not bound to amdgpu?)")
    return Unavailable("not_supported", f"not an AMD GPU ({gpu.vendor})")


def _attach_hives(gpus: Sequence[Gpu], subjects: list[dict[str, Any]]) -> None:
    """Each AMD GPU's XGMI hive as the rules compare it: how many GPUs share its hive id
    (gpu.xgmi_hive_size) and the most XGMI links any of them has (gpu.xgmi_hive_max_links,
    unavailable when one of them could not be counted: it might have more)."""
    for subject in subjects:
        hive = subject["amd"].get("xgmi_hive_id") if isinstance(subject["amd"], dict) else subject["amd"]
        none = hive if isinstance(hive, Unavailable) else Unavailable("not_found", "no XGMI hive id")
        subject["xgmi_hive_size"] = subject["xgmi_hive_max_links"] = none
    for hive in xgmi_hives([gpu.amd for gpu in gpus]):
        for place in hive.members:
            subjects[place]["xgmi_hive_size"] = len(hive.members)
            subjects[place]["xgmi_hive_max_links"] = (
                hive.max_links if hive.max_links is not None
                else Unavailable("not_found", "the XGMI links of a GPU of this hive could not be counted")
            )


_NO_GPU_RATES = Unavailable("not_found", "no counter rates for this GPU")
_NO_PORT_RATES = Unavailable("not_found", "no counter rates for this port")
_NO_RATES = Unavailable("not_found", "no counter rates (check or gate --previous FILE or --sample SECONDS)")


def _rates_list(facts: Mapping[str, Any], group: str) -> list[Any] | Unavailable:
    """counter_rates.<group> (nvlink or rdma): its entries, or why there are none."""
    section = facts.get("counter_rates")
    if isinstance(section, Unavailable):
        return section
    if not isinstance(section, Mapping):
        return _NO_RATES
    entries = section.get(group, _NO_RATES)
    return entries if isinstance(entries, (list, Unavailable)) else _NO_RATES


def _attach_nvlink_rates(facts: Mapping[str, Any], subjects: list[dict[str, Any]]) -> None:
    """Each GPU's NVLink counter rates (counter_rates.nvlink, by UUID) as gpu.nvlink_rates."""
    entries = _rates_list(facts, "nvlink")
    by_uuid = {
        e.get("uuid"): e.get("rates")
        for e in _list(entries)
        if isinstance(e, Mapping) and isinstance(e.get("uuid"), str)
    }
    for subject in subjects:
        if isinstance(entries, Unavailable):
            subject["nvlink_rates"] = entries
            continue
        rates = by_uuid.get(subject.get("uuid"))
        subject["nvlink_rates"] = rates if isinstance(rates, (list, Unavailable)) else _NO_GPU_RATES


def _bus_text(gpu: Gpu) -> str:
    return gpu.bus_id if isinstance(gpu.bus_id, str) else ""


_NO_BENCH = Unavailable("not_found", "no bench results for this GPU (gpudoctor bench --facts FILE -o FILE adds them)")


def _attach_bench(facts: Mapping[str, Any], gpus: Sequence[Gpu], subjects: list[dict[str, Any]]) -> None:
    """Each GPU's results of the bench section (gpu.bench), matched by PCI bus id; of two entries
    for one GPU the last is kept."""
    bench = facts.get("bench")
    subject_of = {id(g): s for g, s in zip(gpus, subjects)}
    for entry in _list(bench.get("gpus")) if isinstance(bench, Mapping) else []:
        bus = entry.get("bus_id") if isinstance(entry, Mapping) else None
        match = match_gpu(gpus, bus_id=bus) if isinstance(bus, str) else None
        if match is not None:
            subject_of[id(match)]["bench"] = entry


_NO_DEVICE_TEST = Unavailable("not_found", "the device test did not run on this GPU")


def _attach_device_test(facts: Mapping[str, Any], gpus: Sequence[Gpu], subjects: list[dict[str, Any]]) -> None:
    """Each GPU's own device test results (the device_test section `gate --deep` adds) as
    gpu.device_test, the CUDA device matched by model.gpus.match_gpu (UUID, bus id, or index where
    CUDA's indices are NVML's); a p2p result names the GPU copied to by that GPU's label."""
    for subject in subjects:
        subject["device_test"] = _NO_DEVICE_TEST
    section = facts.get("device_test")
    if not isinstance(section, Mapping):
        return
    subject_of = {id(g): s for g, s in zip(gpus, subjects)}
    index_known = section.get("index_is_nvml") is True
    by_index: dict[int, dict[str, Any]] = {}
    for entry in _list(section.get("gpus")):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("index"), int):
            continue
        gpu = match_gpu(
            gpus, uuid=entry.get("uuid"), bus_id=entry.get("bus_id"), index=entry["index"], index_known=index_known
        )
        match = subject_of[id(gpu)] if gpu is not None else None
        if match is not None and match["device_test"] is _NO_DEVICE_TEST:
            match["device_test"] = dict(entry)
            by_index[entry["index"]] = match
    for subject in by_index.values():
        p2p = subject["device_test"].get("p2p")
        if isinstance(p2p, Mapping) and isinstance(p2p.get("peer"), int):
            peer = by_index.get(p2p["peer"])
            label = str(peer["label"]) if peer is not None else f"CUDA device {p2p['peer']}"
            subject["device_test"]["p2p"] = {**p2p, "peer_label": label}


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


def port_subjects(facts: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One subject per PCIe port on a GPU<->GPU or GPU<->NIC path (pci.acs_ports)."""
    return [dict(p) for p in _list(_section(facts, "pci").get("acs_ports")) if isinstance(p, Mapping)]


def _gpus_by_nic(facts: Mapping[str, Any]) -> dict[str, list[str]]:
    """NIC bus id -> labels of the GPUs whose nearest RDMA NIC it is (model.nics.pair_nics)."""
    topo = Topology(facts)
    gpus = gpus_from_facts(facts, topo)[0]
    label = {g.bus_id: g.label for g in gpus}
    out: dict[str, list[str]] = {}
    for bus, choice in pair_nics(gpus, nics_from_facts(facts, topo)).items():
        out.setdefault(choice.nic.bus_id, []).append(label[bus])
    return out


def _bus(value: Any) -> str | None:
    return normalise_bus_id(value) if isinstance(value, str) else None


def rdma_port_subjects(facts: Mapping[str, Any]) -> list[dict[str, Any]]:
    devices = _list(_section(facts, "rdma").get("devices"))
    device_ids = {
        _bus(d.get("bus_id")): d.get("device_id")
        for d in _list(_section(facts, "pci").get("devices"))
        if isinstance(d, Mapping) and isinstance(d.get("device_id"), str)
    }
    gpus_by_nic = _gpus_by_nic(facts) if devices else {}
    out: list[dict[str, Any]] = []
    for device in devices:
        if not isinstance(device, Mapping):
            continue
        bus = _bus(device.get("bus_id"))
        for port in _list(device.get("ports")):
            if not isinstance(port, Mapping):
                continue
            subject = dict(port)
            subject.update(
                {
                    "device": device.get("name"),
                    "bus_id": device.get("bus_id"),
                    "numa_node": device.get("numa_node"),
                    # short: the text report's subject column is 24 wide; the bus id is the subject's own field
                    "label": f"{device.get('name')} port {port.get('port')}",
                    "gpus": list(gpus_by_nic.get(bus, [])) if bus else [],
                    "_kind": (device_ids.get(bus), port.get("link_layer")) if bus in device_ids else None,
                }
            )
            out.append(subject)
    _attach_port_rates(facts, out)
    best: dict[Any, Any] = {}
    for s in out:
        rate = s.get("rate_gbps")
        if s["_kind"] is not None and s.get("state") == "ACTIVE" and isinstance(rate, (int, float)):
            best[s["_kind"]] = max(best.get(s["_kind"], rate), rate)
    for s in out:
        kind = s.pop("_kind")
        if kind is None:
            s["peer_max_rate_gbps"] = Unavailable("not_found", "the NIC's PCI device id is not known")
        elif kind in best:
            s["peer_max_rate_gbps"] = best[kind]
        else:
            s["peer_max_rate_gbps"] = Unavailable("not_found", "no active port of this NIC model and link layer")
    return out


def _attach_port_rates(facts: Mapping[str, Any], subjects: list[dict[str, Any]]) -> None:
    """Each port's counter rates (counter_rates.rdma, by device and port) as port.rates."""
    entries = _rates_list(facts, "rdma")
    by_key = {
        (e.get("device"), e.get("port")): e.get("rates") for e in _list(entries) if isinstance(e, Mapping)
    }
    for subject in subjects:
        if isinstance(entries, Unavailable):
            subject["rates"] = entries
            continue
        rates = by_key.get((subject.get("device"), subject.get("port")))
        subject["rates"] = rates if isinstance(rates, (list, Unavailable)) else _NO_PORT_RATES


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
    if kind == "pci_port":
        return [
            (bounded_subject(Subject("pci_port", str(p.get("bus_id")), bus_id=p.get("bus_id"))), p)
            for p in port_subjects(facts)
        ]
    if kind == "rdma_port":
        return [
            (bounded_subject(Subject("rdma_port", str(p["label"]), bus_id=_bus(p.get("bus_id")))), p)
            for p in rdma_port_subjects(facts)
        ]
    raise KeyError(kind)


SUBJECT_VARIABLE = {
    "host": None,
    "gpu": "gpu",
    "numa_node": "node",
    "nic": "nic",
    "rdma_port": "port",
    "pci_port": "bridge",
}
