"""PCI facts: GPUs and RDMA NICs, with link state, NUMA placement and upstream port.

Reads (all through the context root, symlinks resolved inside it):

- ``/sys/bus/pci/devices/<bdf>``: links into ``/sys/devices/pci<domain>:<bus>/...``; the resolved
  path is the device's place in the PCI hierarchy
- per device: ``class``, ``vendor``, ``device``, ``driver`` (symlink), ``numa_node``,
  ``local_cpulist``, ``current_link_speed``, ``current_link_width``, ``max_link_speed``,
  ``max_link_width``, ``infiniband/<name>``, ``net/<name>``
- the parent directory (the upstream port, i.e. the slot): ``max_link_speed``, ``max_link_width``
- ``/sys/class/infiniband/<name>/device``: which PCI function backs each RDMA device
- ``config`` of the ports between GPUs and between each GPU and its nearest NIC (probes/acs.py):
  ``acs_ports``

Listed: display/3D controllers (class 0x03xxxx) and processing accelerators (0x1200xx) as kind
"gpu"; any other function that backs an RDMA device as kind "nic"; a function whose class cannot
be read as kind "other" (it might be a GPU). Everything else is skipped, but NVIDIA functions of
class 0x0680xx (bridge, other: the NVSwitches of HGX/DGX baseboards) are counted in
``nvswitch_count`` and their bus ids listed in ``nvswitch_bus_ids``, both unavailable when the
functions were not all probed. Where there are
NVSwitches, whether the fabric manager runs (probes/fabric.py: proc/<pid>/comm), the service that
programs them, its installed version (dpkg status) and its command port (proc/net/tcp); elsewhere
that is not looked for (not_supported).

Bounded, whatever the tree holds: at most MAX_FUNCTIONS functions are probed, and none once
``ctx.work_deadline()`` has passed. What was not probed is one last entry of kind "other" whose
facts are unavailable (timeout, or not_supported past the cap) and say how many functions, from
which bus id on, were left out.
"""

from __future__ import annotations

import errno
import os
import time
from typing import Any, Callable

from ..context import ProbeContext, excerpt
from ..facts import Unavailable
from ..lazy_re import LazyPattern
from . import acs, fabric
from .files import list_dir, read_cpulist, read_int, read_link, read_parsed, resolve_path, stat_path

BDF_RE = LazyPattern(r"^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")

VENDORS = {
    0x10DE: "nvidia",
    0x1002: "amd",
    0x8086: "intel",
    0x15B3: "mellanox",
    0x14E4: "broadcom",
    0x1D0F: "amazon",
    0x19E5: "huawei",
}

# Transfer rate per lane of each PCIe generation, as the kernel prints it.
GEN_BY_SPEED = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6, 128.0: 7}

_SPEED_RE = LazyPattern(r"^(\d{1,4}(?:\.\d{1,4})?)\s{0,8}GT/s")

# PCI functions probed at most. A large host has a few hundred (with SR-IOV virtual functions, a
# couple of thousand); a tree with more is not a machine, and probing it would outlast any deadline.
MAX_FUNCTIONS = 4096
# RDMA devices (sys/class/infiniband entries) looked at, for the same reason.
MAX_RDMA_DEVICES = 4096

# NVSwitch: vendor NVIDIA with base class 0x06 (bridge), subclass 0x80 (other). The driver's device
# table (open-gpu-kernel-modules kernel-open/nvidia/nv-pci-table.c, nv_module_device_table) takes
# NVIDIA devices of PCI_CLASS_BRIDGE_OTHER (0x0680, include/linux/pci_ids.h) besides the display
# classes: the NVSwitches, served by the NVSwitch driver inside nvidia.ko.
NVIDIA_VENDOR_ID = 0x10DE
NVSWITCH_CLASS = 0x0680


def collect(ctx: ProbeContext) -> dict[str, Any]:
    names = list_dir(ctx, "/sys/bus/pci/devices")
    if isinstance(names, Unavailable):
        return {
            "devices": names,
            "acs_ports": names,
            "nvswitch_count": names,
            "nvswitch_bus_ids": names,
            **dict.fromkeys(fabric.KEYS, names),
        }
    stop = ctx.work_deadline()
    rdma_by_bdf = _rdma_class_links(ctx, stop)
    functions = [bdf for bdf in names if BDF_RE.match(bdf)]
    devices = []
    switches: list[str] = []
    nvswitch_count: int | Unavailable = 0
    for done, bdf in enumerate(functions):
        if done >= MAX_FUNCTIONS or time.monotonic() > stop:
            devices.append(_not_probed(ctx, functions, done))
            # the entry's own reason (timeout, or past the cap): the functions left out may be switches
            nvswitch_count = devices[-1]["class_code"]
            break
        device = _device(ctx, bdf, rdma_by_bdf.get(bdf, []), switches)
        if device is not None:
            devices.append(device)
    bus_ids: list[str] | Unavailable = nvswitch_count if isinstance(nvswitch_count, Unavailable) else sorted(switches)
    if not isinstance(nvswitch_count, Unavailable):
        nvswitch_count = len(switches)
    out = {
        "devices": devices,
        "acs_ports": acs.collect_ports(ctx, devices, stop),
        "nvswitch_count": nvswitch_count,
        "nvswitch_bus_ids": bus_ids,
    }
    out.update(_fabric_manager(ctx, nvswitch_count))
    return out


def _fabric_manager(ctx: ProbeContext, nvswitch_count: int | Unavailable) -> dict[str, Any]:
    """Whether the fabric manager runs, looked for only where it is needed: reading every
    process's comm costs about 14 µs a process, too much for every run on a busy node."""
    if nvswitch_count == 0:
        none = Unavailable("not_supported", "no NVSwitch on the PCI bus: no fabric manager needed")
        return dict.fromkeys(fabric.KEYS, none)
    return fabric.fabric_manager(ctx)


def _not_probed(ctx: ProbeContext, functions: list[str], done: int) -> dict[str, Any]:
    """The one entry that stands for the functions left out: kind "other" (any might be a GPU)."""
    left = len(functions) - done
    listing = ctx.path("/sys/bus/pci/devices")
    where = f"{left} of the {len(functions)} PCI functions in {listing}, from {functions[done]} on"
    if done >= MAX_FUNCTIONS:
        gone = Unavailable("not_supported", f"{where}, were not probed: gpudoctor probes at most {MAX_FUNCTIONS}")
    else:
        gone = Unavailable("timeout", f"{where}, were not probed: the run's deadline passed")
    entry: dict[str, Any] = dict.fromkeys(_DEVICE_KEYS, gone)
    entry["bus_id"] = functions[done]
    entry["kind"] = "other"
    return entry


def is_gpu_class(class_code: int) -> bool:
    return class_code >> 16 == 0x03 or class_code >> 8 == 0x1200


def parse_link_speed(text: str) -> float | Unavailable:
    """GT/s of a sysfs link speed: "32.0 GT/s PCIe", older "8 GT/s", "Unknown" (not_supported)."""
    text = text.strip()
    if text.lower().startswith("unknown"):
        return Unavailable("not_supported", f"link speed {excerpt(text, 40)}")
    match = _SPEED_RE.match(text)
    if not match:
        raise ValueError("not a GT/s rate")
    return float(match.group(1))


def link_gen(speed: float | Unavailable) -> int | Unavailable:
    if isinstance(speed, Unavailable):
        return speed
    gen = GEN_BY_SPEED.get(speed)
    if gen is None:
        return Unavailable("not_supported", f"{speed} GT/s is not the rate of a PCIe generation")
    return gen


def _hex_id(width: int) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = int(text, 16)
        if value < 0 or value >= 1 << (4 * width):
            raise ValueError("out of range")
        return f"0x{value:0{width}x}"

    return parse


def _read_speed(ctx: ProbeContext, absolute: str) -> float | Unavailable:
    value = read_parsed(ctx, absolute, parse_link_speed)
    if isinstance(value, Unavailable) and value.reason == "not_supported":
        return Unavailable("not_supported", f"{ctx.path(absolute)}: {value.detail}")
    return value


def _driver(ctx: ProbeContext, base: str) -> str | Unavailable:
    path = ctx.path(f"{base}/driver")
    try:
        target = read_link(ctx, f"{base}/driver")
    except ValueError as exc:  # a NUL byte in the path
        return Unavailable("error", f"{path}: {exc}")
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return "none"  # an unbound function has no driver link
        if exc.errno == errno.EINVAL:
            return Unavailable("error", f"{path} is not a symlink")
        if exc.errno in (errno.EACCES, errno.EPERM):
            return Unavailable("no_permission", f"{path}: permission denied")
        return Unavailable("error", f"{path}: {exc.strerror or exc}")
    try:
        stat_path(ctx, f"{base}/driver")
    except (OSError, ValueError) as exc:
        # A captured tree keeps the link but not the driver directory: a dangling link still
        # names the driver. A loop names nothing.
        if isinstance(exc, OSError) and exc.errno == errno.ELOOP:
            return Unavailable("error", f"{path}: symlink loop")
    name = os.path.basename(target.rstrip("/"))
    if not name:
        return Unavailable("error", f"{path}: empty link target")
    if len(name) > 64 or not name.isprintable():  # driver names are short identifiers
        return Unavailable("error", f"{path}: not a driver name: {excerpt(name)}")
    return name


_DEVICE_KEYS = (
    "bus_id", "kind", "class_code", "vendor", "vendor_id", "device_id", "driver", "numa_node", "local_cpus",
    "link_speed_gts", "link_width", "max_link_speed_gts", "max_link_width", "link_gen", "max_link_gen",
    "parent_bus_id", "parent_max_link_speed_gts", "parent_max_link_width", "parent_max_link_gen", "path",
    "rdma_devices", "net_devices",
)


def _names(ctx: ProbeContext, absolute: str) -> list[str] | Unavailable:
    names = list_dir(ctx, absolute)
    if isinstance(names, Unavailable) and names.reason == "not_found":
        return []  # no such directory: the device has none
    return names


def _is_nvswitch(ctx: ProbeContext, base: str, class_code: str | Unavailable) -> bool:
    if not isinstance(class_code, str) or int(class_code, 16) >> 8 != NVSWITCH_CLASS:
        return False
    vendor_id = read_parsed(ctx, f"{base}/vendor", _hex_id(4))
    return isinstance(vendor_id, str) and int(vendor_id, 16) == NVIDIA_VENDOR_ID


def _device(ctx: ProbeContext, bdf: str, rdma_from_class: list[str], switches: list[str]) -> dict[str, Any] | None:
    """The device entry of one function, or None for a function not listed (an NVSwitch among
    them is appended to ``switches``)."""
    resolved = resolve_path(ctx, f"/sys/bus/pci/devices/{bdf}")
    base = resolved if isinstance(resolved, str) else f"/sys/bus/pci/devices/{bdf}"
    class_code = read_parsed(ctx, f"{base}/class", _hex_id(6))
    rdma = _names(ctx, f"{base}/infiniband")
    if isinstance(rdma, list):
        rdma = sorted(set(rdma) | set(rdma_from_class))
    elif rdma_from_class:
        rdma = sorted(rdma_from_class)
    if isinstance(class_code, str) and is_gpu_class(int(class_code, 16)):
        kind = "gpu"
    elif isinstance(rdma, list) and rdma:
        kind = "nic"
    elif isinstance(class_code, Unavailable):
        # Could be a GPU we cannot see: list it, unclassified, rather than drop it silently.
        kind = "other"
    else:
        if _is_nvswitch(ctx, base, class_code):
            switches.append(bdf)
        return None

    vendor_id = read_parsed(ctx, f"{base}/vendor", _hex_id(4))
    vendor: str | Unavailable = vendor_id
    if isinstance(vendor_id, str):
        vendor = VENDORS.get(int(vendor_id, 16), "other")
    speed = _read_speed(ctx, f"{base}/current_link_speed")
    max_speed = _read_speed(ctx, f"{base}/max_link_speed")
    parent = _parent(ctx, bdf, resolved)
    return {
        "bus_id": bdf,
        "kind": kind,
        "class_code": class_code,
        "vendor": vendor,
        "vendor_id": vendor_id,
        "device_id": read_parsed(ctx, f"{base}/device", _hex_id(4)),
        "driver": _driver(ctx, base),
        "numa_node": read_int(ctx, f"{base}/numa_node"),
        "local_cpus": read_cpulist(ctx, f"{base}/local_cpulist"),
        "link_speed_gts": speed,
        "link_width": read_int(ctx, f"{base}/current_link_width"),
        "max_link_speed_gts": max_speed,
        "max_link_width": read_int(ctx, f"{base}/max_link_width"),
        "link_gen": link_gen(speed),
        "max_link_gen": link_gen(max_speed),
        **parent,
        "path": resolved,
        "rdma_devices": rdma,
        "net_devices": _names(ctx, f"{base}/net"),
    }


def _parent(ctx: ProbeContext, bdf: str, resolved: str | Unavailable) -> dict[str, Any]:
    keys = ("parent_bus_id", "parent_max_link_speed_gts", "parent_max_link_width", "parent_max_link_gen")
    if isinstance(resolved, Unavailable):
        return dict.fromkeys(keys, resolved)
    parent = os.path.dirname(resolved)
    name = os.path.basename(parent)
    if not BDF_RE.match(name):
        # Directly on a root bus (pci0000:00), as passed-through GPUs in VMs often are: there is
        # no upstream port and so no slot limit to read.
        gone = Unavailable("not_found", f"{bdf} sits directly on {name or parent}, no upstream port")
        return dict.fromkeys(keys, gone)
    max_speed = _read_speed(ctx, f"{parent}/max_link_speed")
    return {
        "parent_bus_id": name,
        "parent_max_link_speed_gts": max_speed,
        "parent_max_link_width": read_int(ctx, f"{parent}/max_link_width"),
        "parent_max_link_gen": link_gen(max_speed),
    }


def _rdma_class_links(ctx: ProbeContext, stop: float) -> dict[str, list[str]]:
    """bus id -> RDMA device names, from /sys/class/infiniband/<name>/device."""
    out: dict[str, list[str]] = {}
    names = list_dir(ctx, "/sys/class/infiniband")
    if isinstance(names, Unavailable):
        return out
    for name in names[:MAX_RDMA_DEVICES]:
        if time.monotonic() > stop:
            break  # the devices' own infiniband/ directories still name theirs
        target = resolve_path(ctx, f"/sys/class/infiniband/{name}/device")
        if isinstance(target, str):
            bdf = os.path.basename(target)
            if BDF_RE.match(bdf):
                out.setdefault(bdf, []).append(name)
    return out

