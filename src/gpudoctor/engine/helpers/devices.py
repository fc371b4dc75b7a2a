"""Helpers that judge how the GPUs are exposed and placed: CUDA_VISIBLE_DEVICES and
HIP_VISIBLE_DEVICES values, GPUs per NUMA node, an OS and kernel against a support table row,
the RDMA ports in a state across the rdma section's devices."""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Mapping

from ...facts import Unavailable
from ..views import FactUnavailable, unrecorded
from .common import MAX_NUMBER_DIGITS, cut, field_or_none, required_field, shown
from .versions import minor_version


def cuda_visible_count(value: Any, gpus: list[Any]) -> int:
    """How many NVIDIA GPUs CUDA exposes under this CUDA_VISIBLE_DEVICES value.

    Counted are the GPUs NVML lists (in a container, the ones it was given; a GPU that fell off
    the bus is not there for CUDA either). None (unset) exposes all of them. Otherwise CUDA takes
    the comma-separated entries in order and stops at the first invalid one (an index out of
    range, a duplicate, an unknown UUID), so "0,7,1" on a 2-GPU host exposes one GPU.

    Example: cuda_visible_count("0,7,1", gpus) → 1
    Example: cuda_visible_count(host.env.CUDA_VISIBLE_DEVICES, gpus) → 2
    """
    nvidia = [g for g in gpus if field_or_none(g, "vendor") == "nvidia" and field_or_none(g, "in_nvml") is True]
    if value is None:
        return len(nvidia)
    uuids = [u for u in (field_or_none(g, "uuid") for g in nvidia) if isinstance(u, str)]
    seen: set[str] = set()
    count = 0
    for entry in (e.strip() for e in str(value).split(",")):
        if not entry:
            break
        if entry.isdecimal():
            if len(entry) > MAX_NUMBER_DIGITS or int(entry) >= len(nvidia):
                break  # an index that long is past the last GPU (and too long for int())
            key = f"index:{int(entry)}"
        elif entry.startswith("GPU-"):
            matches = [u for u in uuids if u.startswith(entry)] if uuids else [entry]
            if len(matches) != 1:
                break
            key = matches[0]
        elif entry.startswith("MIG-"):
            key = entry
        else:
            break
        if key in seen:
            break
        seen.add(key)
        count += 1
    return count


def amd_visible_devices_problem(value: str, gpus: list[Any]) -> str:
    """What is wrong with a HIP_VISIBLE_DEVICES (or ROCR_VISIBLE_DEVICES) value for the AMD GPUs
    here ("" when nothing).

    HIP takes comma-separated indices (0-based, in the runtime's enumeration of AMD GPUs) or
    GPU UUIDs ("GPU-" followed by the hex id rocm-smi prints); an index past the last GPU, a
    negative or empty entry, or a duplicate hides that GPU and, like CUDA, the runtime ignores
    the rest of the list. UUIDs cannot be checked here (NVML does not see AMD GPUs), only
    their form.

    Example: amd_visible_devices_problem("0", gpus) → "index 0 does not exist: this host has 0 AMD GPU(s) (0-0)"
    Example: amd_visible_devices_problem("GPU-zz", gpus) → "'GPU-zz' is neither an index nor a GPU- UUID"
    """
    if value.strip() == "":
        return "it is empty, which hides every GPU from HIP"
    return amd_visible_entries(value, sum(1 for g in gpus if field_or_none(g, "vendor") == "amd"))[1]


def amd_visible_entries(value: str, count: int) -> tuple[list[str], str]:
    """The entries of a HIP_VISIBLE_DEVICES or ROCR_VISIBLE_DEVICES value that the runtime uses
    (indices below ``count``, or GPU- UUIDs, up to the first entry it cannot use) and what is
    wrong with that entry ("" when none): `select` narrows its choice to them."""

    def problem(entry: str) -> str:
        if entry.lstrip("-").isdecimal():
            return _index_problem(entry, count, "AMD GPU(s)", "is negative")
        if not re.fullmatch(r"GPU-[0-9a-fA-F]+", entry):
            return f"{shown(entry)} is neither an index nor a GPU- UUID"
        return ""

    return _usable_entries(value.strip(), problem)


def ascend_visible_devices_problem(value: str, gpus: list[Any]) -> str:
    """What is wrong with an ASCEND_RT_VISIBLE_DEVICES or ASCEND_VISIBLE_DEVICES value for the
    Ascend NPUs on this host's PCI bus ("" when nothing).

    Both take comma-separated NPU ids from 0 (ASCEND_VISIBLE_DEVICES, read by the Ascend Docker
    Runtime, also ranges such as 0-3); an id past the last NPU, an empty entry or a duplicate
    names a device that does not exist.

    Example: ascend_visible_devices_problem("0,9", gpus) → "index 0 does not exist: this host has 0 Ascend NPU(s) (0-0)"
    Example: ascend_visible_devices_problem("", gpus) → "it is empty, which hides every NPU"
    """
    text = value.strip()
    if text == "":
        return "it is empty, which hides every NPU"
    count = sum(1 for g in gpus if field_or_none(g, "vendor") == "huawei")

    def problem(entry: str) -> str:
        first, dash, last = entry.partition("-")
        for end in [first, last] if dash and first else [entry]:
            if not end.isdecimal():
                return f"{shown(entry)} is not an NPU id (0, 1, ... or a range 0-3)"
            found = _index_problem(end, count, "Ascend NPU(s)", "is negative")
            if found:
                return found
        return ""

    return _first_entry_problem(text, problem)


# The vendors whose accelerators `gate --expect-gpus` can count without NVML, in the order a tie
# between them is broken.
OTHER_ACCELERATORS = ("amd", "huawei")


def counted_vendor(gpus: list[Any]) -> str:
    """Whose accelerators `gate --expect-gpus` counts: "nvidia" when the node has an NVIDIA GPU
    (NVML's, or on the PCI bus) or no accelerator at all, so NVIDIA nodes are judged by NVML's
    list as ever; else "amd" or "huawei", whichever has more accelerators on the PCI bus (a tie:
    amd). The vendors are scanned, not evidence: the count that follows is.

    Example: counted_vendor(gpus) → "nvidia"
    """
    vendors = [unrecorded(g).get("vendor") for g in gpus]
    if "nvidia" in vendors or not any(v in OTHER_ACCELERATORS for v in vendors):
        return "nvidia"
    return max(OTHER_ACCELERATORS, key=lambda v: (vendors.count(v), -OTHER_ACCELERATORS.index(v)))


def unbound(gpus: Iterable[Any], driver: str) -> list[Any]:
    """The bus ids of these GPUs that sit on the PCI bus bound to another driver than ``driver``
    (to none, to vfio-pci for a virtual machine, ...): the system's own stack cannot use them.

    Example: unbound(gpus, "nvidia") → []
    Example: unbound(gpus, "amdgpu") → ["0000:18:00.0", "0000:9a:00.0"]
    """
    out = []
    for g in gpus:
        pci = field_or_none(g, "pci")
        if pci is not None and field_or_none(g, "on_pci") is True and field_or_none(pci, "driver") != driver:
            out.append(field_or_none(g, "bus_id"))
    return out


def _first_entry_problem(text: str, problem: Callable[[str], str]) -> str:
    """The first problem of a comma-separated device list: an empty entry, a duplicate, or what
    `problem` says of an entry ("" when none)."""
    return _usable_entries(text, problem)[1]


def _usable_entries(text: str, problem: Callable[[str], str]) -> tuple[list[str], str]:
    """The entries of a comma-separated device list before its first problem, and that problem
    (see _first_entry_problem)."""
    used: list[str] = []
    seen: set[str] = set()
    for position, entry in enumerate(e.strip() for e in text.split(",")):
        if entry == "":
            return used, f"entry {position + 1} is empty"
        if entry in seen:
            return used, f"{cut(entry)} is listed twice"
        found = problem(entry)
        if found:
            return used, found
        seen.add(entry)
        used.append(entry)
    return used, ""


def visible_devices_problem(value: str, gpus: list[Any]) -> str:
    """What is wrong with a CUDA_VISIBLE_DEVICES value for these GPUs ("" when nothing).

    CUDA accepts comma-separated indices or UUIDs (GPU-..., MIG-...; unique
    prefixes allowed) and stops at the first invalid entry; an empty value
    hides every GPU.

    Example: visible_devices_problem("0,7", gpus) → "index 7 does not exist: this host has 2 NVIDIA GPU(s) (0-1)"
    Example: visible_devices_problem("1", gpus) → ""
    """
    text = value.strip()
    if text == "":
        return "it is empty, which hides every GPU from CUDA"
    nvidia = [g for g in gpus if field_or_none(g, "vendor") == "nvidia"]
    count = len(nvidia)
    uuids = [u for u in (field_or_none(g, "uuid") for g in nvidia) if isinstance(u, str)]
    seen: set[str] = set()
    for position, entry in enumerate(e.strip() for e in text.split(",")):
        if entry == "" or entry in ("NoDevFiles",):
            return f"entry {position + 1} is empty"
        if entry in seen:
            return f"{cut(entry)} is listed twice"
        seen.add(entry)
        if entry.lstrip("-").isdecimal():
            problem = _index_problem(
                entry, count, "NVIDIA GPU(s)", "is negative: CUDA ignores it and every entry after it"
            )
            if problem:
                return problem
        elif entry.startswith(("GPU-", "MIG-")):
            if entry.startswith("GPU-") and uuids:
                matches = [u for u in uuids if u.startswith(entry)]
                if not matches:
                    return f"{cut(entry)} matches no GPU UUID on this host"
                if len(matches) > 1:
                    return f"{cut(entry)} is a prefix of several GPU UUIDs"
        else:
            return f"{shown(entry)} is neither an index nor a GPU-/MIG- UUID"
    return ""


def gpus_per_node(gpus: Iterable[Any], nodes: Iterable[Any]) -> list[int]:
    """How many of the GPUs sit on each NUMA node that has CPUs, in node order.

    Memory-only nodes (CXL memory, HBM exposed as a node, a Grace GPU's memory) are left out:
    no process runs there, so they cannot be out of balance.

    Example: gpus_per_node(gpus, numa.nodes) → [1, 1]
    """
    node_ids = []
    for node in nodes:
        # An unreadable cpulist or GPU node makes the count unknown (the rule's status too):
        # skipping it would count that node's GPUs nowhere and report an imbalance that is not there.
        cpus = required_field(node, "cpus")
        node_id = required_field(node, "id")
        if isinstance(cpus, list) and cpus and isinstance(node_id, int):
            node_ids.append(node_id)
    if not node_ids:
        raise FactUnavailable("numa.nodes", Unavailable("error", "no NUMA node lists a CPU"))
    placed = [required_field(g, "numa_node") for g in gpus]
    return [sum(1 for n in placed if n == node_id) for node_id in node_ids]


def rdma_ports(devices: Iterable[Any], state: Any) -> list[str]:
    """The RDMA ports in this state across rdma.devices, named device:port (mlx5_0:1) as NCCL names them.

    NCCL makes one network device of each port in the ACTIVE state, so the active ports are what
    a job can use. A device whose ports, or a port whose state or number, could not be read makes
    the answer unknown (the rule's status too): leaving it out would count a port as missing that
    may be there.

    Example: rdma_ports(rdma.devices, "ACTIVE") → ['mlx5_0:1']
    Example: rdma_ports(rdma.devices, "DOWN") → []
    """
    out = []
    for device in devices:
        for port in required_field(device, "ports"):
            if required_field(port, "state") == state:
                out.append(f"{required_field(device, 'name')}:{required_field(port, 'port')}")
    return out


def os_support_problem(row: Any, os_id: Any, os_version: Any, kernel_release: Any) -> str:
    """Why this OS and kernel are outside a support table row ("" when they are inside).

    ``row`` is a table row with ``os``: a map of "<os-release ID> <VERSION_ID>" (as
    /etc/os-release spells them: "ubuntu 22.04", "rhel 9.4", "sles 15.5") to the kernel
    series ("6.8") listed for it; an empty list means the distribution's own kernel, which
    its version fixes.

    Example: os_support_problem(lookup("rocm_os_support", "6.0"), "ubuntu", "22.04", "6.5.0-45-generic") → ""
    Example: startswith(os_support_problem(lookup("rocm_os_support", "6.0"), "sles", "15.5", "6.4.0"), "kernel") → True
    """
    if not isinstance(row, Mapping) or not isinstance(row.get("os"), Mapping):
        raise ValueError("os_support_problem() needs a table row with an 'os' map")
    listed = row["os"]
    key = f"{str(os_id).strip().lower()} {str(os_version).strip()}"
    if key not in listed:
        return f"{key} is not a listed operating system (listed: {', '.join(listed)})"
    kernels = listed[key] or []
    if kernels:
        series = minor_version(kernel_release)
        if series not in [str(k) for k in kernels]:
            return f"kernel {kernel_release} is not a listed kernel for {key} ({', '.join(str(k) for k in kernels)})"
    return ""


def _index_problem(entry: str, count: int, devices: str, negative: str) -> str:
    """What is wrong with an index entry of a visible-devices list ("" when nothing) on a host with
    ``count`` of the ``devices`` ("NVIDIA GPU(s)", "Ascend NPU(s)"); ``negative`` says what a
    negative index means to the runtime."""
    if len(entry.lstrip("-")) > MAX_NUMBER_DIGITS:  # too long for int(); no such GPU either way
        if entry.startswith("-"):
            return f"{cut(entry)} {negative}"
        return f"index {cut(entry)} does not exist: this host has {count} {devices} (0-{max(count - 1, 0)})"
    idx = int(entry)
    if idx < 0:
        return f"{entry} {negative}"
    if idx >= count:
        return f"index {idx} does not exist: this host has {count} {devices} (0-{max(count - 1, 0)})"
    return ""
