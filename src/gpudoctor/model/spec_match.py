"""Which row of the GPU spec table (rules/data/gpu_specs.yaml) a GPU is.

A GPU is matched by its PCI vendor:device id first (sysfs, else NVML's combined id), then by the
NVML name, then, where one id covers several variants, by memory size. Here, in the base layer,
because the spec match serves the rules (the engine's gpu_spec helper) as well as the tiers, the
bench and advice.
"""

from __future__ import annotations

from typing import Any, Mapping

GIB = 1 << 30


def _hex4(text: Any) -> str | None:
    if not isinstance(text, str):
        return None
    t = text.strip().lower()
    if t.startswith("0x"):
        t = t[2:]
    return t.zfill(4)[-4:] if t and all(c in "0123456789abcdef" for c in t) else None


def pci_id_of(pci: Mapping[str, Any] | None, combined: Any) -> str | None:
    """ "10de:2335" from a GPU's sysfs vendor/device ids, else from NVML's combined 0xDDDDVVVV."""
    if isinstance(pci, Mapping):
        vendor, device = _hex4(pci.get("vendor_id")), _hex4(pci.get("device_id"))
        if vendor and device:
            return f"{vendor}:{device}"
    if isinstance(combined, str):
        text = combined.strip().lower()
        text = text[2:] if text.startswith("0x") else text
        if len(text) == 8 and all(c in "0123456789abcdef" for c in text):
            return f"{text[4:]}:{text[:4]}"
    return None


def match_row(
    rows: Mapping[str, Mapping[str, Any]], pci_id: str | None, name: str | None, memory_bytes: int | None
) -> tuple[str | None, str, list[str]]:
    """(row id or None, how it matched, the candidates considered)."""
    by_id = [k for k, r in rows.items() if pci_id and pci_id in (r.get("pci_ids") or [])]
    lname = name.strip().lower() if isinstance(name, str) else None
    by_name = [k for k, r in rows.items() if lname and lname in [n.lower() for n in r.get("nvml_names") or []]]
    if len(by_id) == 1:
        return by_id[0], "pci id", by_id
    candidates = by_id or by_name
    if len(by_id) > 1:
        both = [k for k in by_id if k in by_name]
        if len(both) == 1:
            return both[0], "pci id and name", by_id
    elif len(by_name) == 1:
        return by_name[0], "name", by_name
    if len(candidates) > 1 and isinstance(memory_bytes, int) and memory_bytes > 0:
        # Variants sharing an id or a name differ in memory; pick the closest, if it is clearly closest.
        gib = memory_bytes / GIB
        ranked = sorted(candidates, key=lambda k: abs(float(rows[k].get("memory_gb") or 0) - gib))
        best, second = ranked[0], ranked[1]
        if abs(float(rows[best].get("memory_gb") or 0) - gib) < abs(float(rows[second].get("memory_gb") or 0) - gib):
            return best, "pci id and memory size" if by_id else "name and memory size", candidates
    return None, "", candidates
