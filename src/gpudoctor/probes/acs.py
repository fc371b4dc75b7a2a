"""PCIe Access Control Services (ACS) on the ports between GPUs, and between each GPU and its
nearest RDMA NIC: the ``pci.acs_ports`` facts.

Which ports: the PCI facts hold each device's resolved sysfs path, whose directories are its
chain of bridges (``/sys/devices/pci0000:16/0000:16:01.0/0000:17:00.0/0000:18:01.0/<device>``).
Traffic between two devices under one switch turns at their lowest common ancestor; the ports
from there down to each device are the ones whose ACS redirect bits can send it up through the
root complex instead. Devices on different root ports or host bridges meet only in the root
complex, where their traffic goes whatever ACS says, so such pairs name no port. The nearest NIC
of a GPU is the one sharing the longest chain with it (ties: the lowest bus id).

What is read: only those ports' ``config`` files, never every device's. Register layout from the
kernel's include/uapi/linux/pci_regs.h (PCI_CAPABILITY_LIST 0x34, PCI_CAP_ID_EXP 0x10,
PCI_EXP_FLAGS 2 with PCI_EXP_FLAGS_TYPE 0x00f0, PCI_EXT_CAP_ID_ACS 0x0d, PCI_ACS_CAP 0x04,
PCI_ACS_CTRL 0x06, PCI_ACS_SV/RR/CR 0x01/0x04/0x08, extended header id 0xffff, next offset
(header >> 20) & 0xffc). The kernel's pci_read_config (drivers/pci/pci-sysfs.c) gives a reader
without CAP_SYS_ADMIN only the first 64 bytes (128 for CardBus), so a read that short is
no_permission; exactly 256 bytes means the kernel itself cannot reach the extended space
(conventional PCI, or no ECAM/MMCONFIG), so ACS is not_supported there, never guessed.

Bounded: at most MAX_PATH_DEVICES GPUs and NICs, MAX_PORTS ports (one read of at most 4096
bytes each, none after the run's deadline), and capability lists walked at most as many steps
as the kernel allows (48 standard, 480 extended), 4-byte aligned, each offset once.
"""

from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

from ..context import ProbeContext
from ..facts import Unavailable
from ..lazy_re import LazyPattern
from .files import read_bytes

_BDF_RE = LazyPattern(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")

CONFIG_SIZE = 256  # PCI_CFG_SPACE_SIZE
CONFIG_EXP_SIZE = 4096  # PCI_CFG_SPACE_EXP_SIZE
CAPABILITY_LIST = 0x34  # PCI_CAPABILITY_LIST
STATUS = 0x06  # PCI_STATUS
STATUS_CAP_LIST = 0x10  # PCI_STATUS_CAP_LIST
CAP_ID_EXP = 0x10  # PCI_CAP_ID_EXP
EXP_FLAGS = 2  # PCI_EXP_FLAGS
EXP_FLAGS_TYPE = 0x00F0  # PCI_EXP_FLAGS_TYPE
EXT_CAP_ID_ACS = 0x0D  # PCI_EXT_CAP_ID_ACS
ACS_CAP = 0x04  # PCI_ACS_CAP
ACS_CTRL = 0x06  # PCI_ACS_CTRL
ACS_SV = 0x01  # PCI_ACS_SV: source validation
ACS_RR = 0x04  # PCI_ACS_RR: P2P request redirect
ACS_CR = 0x08  # PCI_ACS_CR: P2P completion redirect

# PCI_EXP_TYPE_* of the Device/Port Type field
PORT_TYPES = {
    0x0: "endpoint", 0x1: "legacy_endpoint", 0x4: "root_port", 0x5: "upstream", 0x6: "downstream",
    0x7: "pcie_to_pci_bridge", 0x8: "pci_to_pcie_bridge", 0x9: "rc_endpoint", 0xA: "rc_event_collector",
}

MAX_STD_CAPS = 48  # the kernel's PCI_FIND_CAP_TTL
MAX_EXT_CAPS = (CONFIG_EXP_SIZE - CONFIG_SIZE) // 8  # as the kernel's extended capability walk
# GPUs and NICs whose paths are compared (pairs grow as the square), and ports read at most.
MAX_PATH_DEVICES = 256
MAX_PORTS = 1024

PORT_KEYS = ("port_type", "acs", "acs_capability", "acs_control", "request_redirect", "completion_redirect",
             "source_validation")


def _chain(device: Mapping[str, Any]) -> list[str] | None:
    """The bus ids from the root bus down to the device itself, or None without a usable path."""
    path = device.get("path")
    if not isinstance(path, str):
        return None
    parts = [p for p in path.split("/") if _BDF_RE.match(p)]
    return parts or None


def _ports_between(a: list[str], b: list[str]) -> list[str]:
    """Ports where traffic between the two devices may be redirected: from their lowest common
    ancestor (a switch port) down to each, the devices themselves left out."""
    common = 0
    for x, y in zip(a, b):
        if x != y:
            break
        common += 1
    if common == 0:
        return []  # they meet only in the root complex
    return [a[common - 1], *a[common:-1], *b[common:-1]]


def paths(devices: Sequence[Any]) -> dict[str, list[str]]:
    """port bus id -> the sorted device pairs ("A <-> B") whose path crosses it."""
    chains: dict[str, tuple[str, list[str]]] = {}
    for device in devices:
        if not isinstance(device, Mapping) or device.get("kind") not in ("gpu", "nic"):
            continue
        chain = _chain(device)
        if chain is not None and len(chains) < MAX_PATH_DEVICES:
            chains[chain[-1]] = (str(device["kind"]), chain)
    gpus = sorted(b for b, (kind, _) in chains.items() if kind == "gpu")
    nics = sorted(b for b, (kind, _) in chains.items() if kind == "nic")
    pairs: list[tuple[str, str]] = [(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1:]]
    for gpu in gpus:
        nearest = max(nics, key=lambda n: (_shared(chains[gpu][1], chains[n][1]), [-ord(c) for c in n]), default=None)
        if nearest is not None:
            pairs.append((gpu, nearest))
    out: dict[str, set[str]] = {}
    for a, b in pairs:
        for port in _ports_between(chains[a][1], chains[b][1]):
            out.setdefault(port, set()).add(f"{a} <-> {b}")
    return {port: sorted(out[port]) for port in sorted(out)}


def _shared(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def collect_ports(ctx: ProbeContext, devices: Sequence[Any] | Unavailable, stop: float) -> list[Any] | Unavailable:
    """One entry per port on a GPU<->GPU or GPU<->nearest-NIC path, with its ACS state."""
    if isinstance(devices, Unavailable):
        return devices
    crossing = paths(devices)
    out: list[dict[str, Any]] = []
    for done, (port, between) in enumerate(crossing.items()):
        if done >= MAX_PORTS or time.monotonic() > stop:
            reason = "not_supported" if done >= MAX_PORTS else "timeout"
            why = f"gpudoctor reads at most {MAX_PORTS}" if done >= MAX_PORTS else "the run's deadline passed"
            gone = Unavailable(reason, f"{len(crossing) - done} ports from {port} on were not read: {why}")
            out.append({"bus_id": port, "paths": between, **dict.fromkeys(PORT_KEYS, gone)})
            break
        out.append({"bus_id": port, "paths": between, **read_port(ctx, port)})
    return out


def read_port(ctx: ProbeContext, bdf: str) -> dict[str, Any]:
    absolute = f"/sys/bus/pci/devices/{bdf}/config"
    raw = read_bytes(ctx, absolute, limit=CONFIG_EXP_SIZE)
    if isinstance(raw, Unavailable):
        return dict.fromkeys(PORT_KEYS, raw)
    shown = ctx.path(absolute)
    if len(raw) < CONFIG_SIZE:
        gone = Unavailable(
            "no_permission", f"{shown}: {len(raw)} bytes; the kernel shows the rest of config space only to root"
        )
        return dict.fromkeys(PORT_KEYS, gone)
    decoded = decode_config(raw)
    if len(raw) < CONFIG_EXP_SIZE:
        gone = Unavailable(
            "not_supported", f"{len(raw)} bytes, no extended configuration space (where ACS would be)"
        )
        decoded.update(dict.fromkeys(PORT_KEYS[1:], gone))
    return {k: (v if not isinstance(v, Unavailable) else Unavailable(v.reason, f"{shown}: {v.detail}"))
            for k, v in decoded.items()}


def _u16(raw: bytes, offset: int) -> int:
    return int.from_bytes(raw[offset:offset + 2], "little")


def _u32(raw: bytes, offset: int) -> int:
    return int.from_bytes(raw[offset:offset + 4], "little")


def port_type(raw: bytes) -> str | Unavailable:
    """Device/Port Type from the PCI Express capability, found on the standard capability list."""
    if not _u16(raw, STATUS) & STATUS_CAP_LIST:
        return Unavailable("not_supported", "no capability list: not a PCI Express function")
    offset, seen = raw[CAPABILITY_LIST] & 0xFC, set()
    for _ in range(MAX_STD_CAPS):
        if offset < 0x40 or offset in seen or offset + 4 > CONFIG_SIZE:
            break
        seen.add(offset)
        if raw[offset] == CAP_ID_EXP:
            kind = (_u16(raw, offset + EXP_FLAGS) & EXP_FLAGS_TYPE) >> 4
            return PORT_TYPES.get(kind, f"type_{kind:#x}")
        offset = raw[offset + 1] & 0xFC
    return Unavailable("not_supported", "no PCI Express capability")


def find_ext_capability(raw: bytes, cap_id: int) -> int | None:
    """Offset of an extended capability, walking the list from 0x100 with bounds; None if absent."""
    offset, seen = CONFIG_SIZE, set()
    for _ in range(MAX_EXT_CAPS):
        if offset < CONFIG_SIZE or offset + 8 > len(raw) or offset % 4 or offset in seen:
            return None
        seen.add(offset)
        header = _u32(raw, offset)
        if header in (0, 0xFFFFFFFF):  # no extended capabilities (or the device did not answer)
            return None
        if header & 0xFFFF == cap_id:
            return offset
        offset = (header >> 20) & 0xFFC
    return None


def decode_config(raw: bytes) -> dict[str, Any]:
    """The port type and ACS state of one function's configuration space (at least 256 bytes)."""
    out: dict[str, Any] = {"port_type": port_type(raw)}
    at = find_ext_capability(raw, EXT_CAP_ID_ACS)
    if at is None:
        absent = Unavailable("not_found", "no ACS extended capability")
        # Without the capability nothing is redirected: the bits the rule judges are plain false.
        out.update({"acs": False, "acs_capability": absent, "acs_control": absent,
                    "request_redirect": False, "completion_redirect": False, "source_validation": False})
        return out
    control = _u16(raw, at + ACS_CTRL)
    out.update({
        "acs": True,
        "acs_capability": _u16(raw, at + ACS_CAP),
        "acs_control": control,
        "request_redirect": bool(control & ACS_RR),
        "completion_redirect": bool(control & ACS_CR),
        "source_validation": bool(control & ACS_SV),
    })
    return out
