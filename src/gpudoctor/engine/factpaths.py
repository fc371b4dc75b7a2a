"""Which fact paths exist: derived from the facts JSON Schema.

Rules are checked against this at load, so a typo such as
``gpu.pcie_widht`` is refused with a suggestion instead of silently
making the rule "unknown" forever.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from ..schemas import load_schema

# Sections `gpudoctor gate` adds to the facts before its rules (rules/gate/) judge them; never probed.
GATE_SECTIONS = ("policy", "device_test", "allreduce")
SECTIONS = (
    "host", "pci", "numa", "rdma", "modules", "kernel_modules", "rocm", "ascend", "amdgpu", "toolkit", "torch",
    "nvml",
    "kernel_log",
    "bench", "counter_rates", *GATE_SECTIONS,
)


def _facts() -> dict[str, Any]:
    return load_schema("facts")


def _deref(node: Any) -> Any:
    """Follow $ref and pick the object/array branch of an anyOf (not the unavailable marker)."""
    seen = 0
    while isinstance(node, dict) and seen < 16:
        seen += 1
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            node = _facts()["$defs"][name]
            continue
        if "anyOf" in node:
            branches = [b for b in node["anyOf"] if b.get("$ref") != "#/$defs/unavailable"]
            if len(branches) == 1:
                node = branches[0]
                continue
            # scalars with several types (e.g. string or null): a leaf
            return {"leaf": True}
        return node
    return node


def child(node: Any, name: str) -> Any | None:
    """Schema node of ``node.name``, or None when there is no such fact."""
    node = _deref(node)
    if not isinstance(node, dict):
        return None
    props = node.get("properties")
    if props and name in props:
        return props[name]
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        return extra
    return None


def children(node: Any) -> list[str]:
    node = _deref(node)
    if isinstance(node, dict):
        return sorted(node.get("properties", {}))
    return []


def _def(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = _facts()["$defs"][name]
    return schema


@cache
def subject_schema(kind: str) -> dict[str, Any]:
    """Schema of the subject variable a rule sees for ``subject: kind``."""
    if kind == "gpu":
        props = dict(_def("nvml_gpu")["properties"])
        props.update(
            {
                "bus_id": {"type": "string", "description": "PCI bus id, 0000:18:00.0"},
                "vendor": {"type": "string", "description": "nvidia, amd, intel, ..."},
                "label": {"type": "string", "description": "GPU 0 (0000:18:00.0)"},
                "in_nvml": {
                    "$ref": "#/$defs/bool",
                    "description": "NVML lists this GPU (unavailable when NVML did not answer)",
                },
                "on_pci": {"type": "boolean", "description": "sysfs lists this GPU"},
                "local_cpus": {
                    "$ref": "#/$defs/intlist",
                    "description": "CPUs local to the GPU: NVML affinity, else sysfs local_cpulist",
                },
                "numa_node": {
                    "$ref": "#/$defs/int",
                    "description": "NUMA node: sysfs numa_node unless -1, else NVML memory affinity",
                },
                "pci": {"$ref": "#/$defs/pci_device"},
                "amd": {
                    "anyOf": [{"$ref": "#/$defs/unavailable"}, {"$ref": "#/$defs/amdgpu_gpu"}],
                    "description": "this GPU's record of the amdgpu probe (by bus id); not_supported on other GPUs",
                },
                "xgmi_hive_size": {
                    "$ref": "#/$defs/int",
                    "description": "AMD GPUs sharing this GPU's XGMI hive id (amdgpu.gpus[].xgmi_hive_id)",
                },
                "xgmi_hive_max_links": {
                    "$ref": "#/$defs/int",
                    "description": "the most KFD XGMI links any GPU of this hive has",
                },
                "bench": {
                    "anyOf": [{"$ref": "#/$defs/unavailable"}, {"$ref": "#/$defs/bench_gpu"}],
                    "description": "this GPU's `gpudoctor bench` results (by bus id); not_found without a bench",
                },
                "nvlink_rates": {
                    "anyOf": [
                        {"$ref": "#/$defs/unavailable"},
                        {"type": "array", "items": {"$ref": "#/$defs/counter_rate"}},
                    ],
                    "description": "this GPU's entries of counter_rates.nvlink (by UUID): per active link and "
                    "counter, the growth between two reads; not_found without --previous or --sample",
                },
                "device_test": {
                    "anyOf": [{"$ref": "#/$defs/unavailable"}, {"$ref": "#/$defs/device_test_gpu"}],
                    "description": "this GPU's `gate --deep` results (by UUID, bus id or index); "
                    "not_found where it did not run",
                },
            }
        )
        return {"type": "object", "properties": props}
    if kind == "numa_node":
        props = dict(_def("numa_node")["properties"])
        props["gpus"] = {"type": "array", "description": "bus ids of GPUs on this node"}
        return {"type": "object", "properties": props}
    if kind == "nic":
        return _def("pci_device")
    if kind == "pci_port":
        return _def("acs_port")
    if kind == "rdma_port":
        props = dict(_def("rdma_port")["properties"])
        props.update(
            {
                "device": {"type": "string", "description": "the RDMA device (mlx5_0)"},
                "bus_id": {"$ref": "#/$defs/str", "description": "the device's PCI function"},
                "numa_node": {
                    "$ref": "#/$defs/int",
                    "description": "that function's sysfs numa_node (-1: none given)",
                },
                "label": {"type": "string", "description": "mlx5_0 port 1"},
                "gpus": {
                    "type": "array",
                    "description": "labels of the GPUs whose nearest RDMA NIC this is (the pairing `topo` shows)",
                },
                "rates": {
                    "anyOf": [
                        {"$ref": "#/$defs/unavailable"},
                        {"type": "array", "items": {"$ref": "#/$defs/counter_rate"}},
                    ],
                    "description": "this port's entries of counter_rates.rdma (by device and port): per error "
                    "counter, the growth between two reads; not_found without --previous or --sample",
                },
                "peer_max_rate_gbps": {
                    "anyOf": [{"$ref": "#/$defs/unavailable"}, {"type": "number"}],
                    "description": "the highest rate of an active port of the same link layer on a NIC of the same "
                    "PCI device id on this host (sysfs gives no port maximum)",
                },
            }
        )
        return {"type": "object", "properties": props}
    raise KeyError(kind)


def section_roots() -> dict[str, Any]:
    props: dict[str, Any] = _facts()["properties"]
    return {name: props[name] for name in SECTIONS}
