"""CPU (and memory node) lists as the kernel writes them: "0-3,8,10-11".

The kernel's cpulist format is read from sysfs and procfs (probes), shown in reports and plans
(render, advice) and produced by rule helpers (engine); it lives here, in the base layer, so that
none of them reaches into another's room for it.
"""

from __future__ import annotations

from ..context import excerpt
from ..lazy_re import LazyPattern

# Highest CPU (or memory node) id believed: Linux builds for at most 8192 CPUs (x86 MAXSMP);
# anything far above is garbage, and a mask sized from it would be huge.
MAX_CPU_ID = (1 << 16) - 1
_CPULIST_PART = LazyPattern(r"([0-9]+)(?:-([0-9]+))?")


def parse_cpulist(text: str) -> list[int]:
    """Parse a kernel cpulist ("0-3,8,10-11"; "" is empty). Raises ValueError.

    Linear in the text: ranges are merged before they are expanded, so a megabyte of
    "0-65535," costs one expansion, not a hundred thousand."""
    text = text.strip()
    if not text:
        return []
    ranges: list[tuple[int, int]] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if ":" in part:  # "0-15:2/4" style is not used by sysfs cpulists; refuse clearly
            raise ValueError(f"unsupported cpulist range {excerpt(part, 30)}")
        # ASCII digits only: int() would also take "+3", "1_0" and other scripts' digits
        match = _CPULIST_PART.fullmatch(part) if len(part) <= 24 else None  # no id has more digits
        if match is None:
            raise ValueError(f"bad cpulist entry {excerpt(part, 30)}")
        lo = int(match.group(1))
        hi = int(match.group(2)) if match.group(2) is not None else lo
        if hi < lo or hi > MAX_CPU_ID:
            raise ValueError(f"bad cpulist range {excerpt(part, 30)}")
        ranges.append((lo, hi))
    ranges.sort()
    out: list[int] = []
    top = -1  # highest id already in out
    for lo, hi in ranges:
        if hi > top:
            out.extend(range(max(lo, top + 1), hi + 1))
            top = hi
    return out


def format_cpulist(cpus: list[int]) -> str:
    """Format CPU ids as a compact kernel-style list ("0-3,8")."""
    ids = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)
