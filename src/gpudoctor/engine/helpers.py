"""Functions rule expressions may call. Nothing else is callable.

Each is small, pure and total over the values facts can hold; bad input
raises ValueError/TypeError, which the runner reports as a rule error.
Functions that need the run's data tables or facts are bound per run by
:func:`bind`.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Mapping

from packaging.version import InvalidVersion, Version

_VERSION_HEAD = re.compile(r"\d+(?:\.\d+)*")


def version(text: Any) -> Version:
    """Leading dotted number of a version string: "580.65.06" → 580.65.6; "6.8.0-45-generic" → 6.8.0."""
    if isinstance(text, (int, float)):
        text = str(text)
    if not isinstance(text, str):
        raise TypeError(f"version() needs a string, got {type(text).__name__}")
    match = _VERSION_HEAD.search(text)
    if not match:
        raise ValueError(f"no version number in {text!r}")
    try:
        return Version(match.group(0))
    except InvalidVersion:
        raise ValueError(f"bad version {text!r}") from None


def major(text: Any) -> int:
    """Major number of a version: "12.4" → 12."""
    return version(text).major


def minor_version(text: Any) -> str:
    """ "major.minor" of a version: "12.4.131" → "12.4"."""
    v = version(text)
    return f"{v.major}.{v.minor}"


def has_bits(value: int, mask: int) -> bool:
    """True when any bit of mask is set in value."""
    return bool(int(value) & int(mask))


def intersect(a: Iterable[Any], b: Iterable[Any]) -> list[Any]:
    """Items of a that are also in b, in a's order."""
    other = set(b)
    return [x for x in a if x in other]


def difference(a: Iterable[Any], b: Iterable[Any]) -> list[Any]:
    other = set(b)
    return [x for x in a if x not in other]


def cpulist(cpus: Iterable[int]) -> str:
    """CPU ids as a kernel-style list: [0,1,2,3,8] → "0-3,8"."""
    from ..probes.files import format_cpulist

    return format_cpulist(list(cpus))


def gib(value: float) -> float:
    """Bytes to GiB."""
    return float(value) / (1 << 30)


def startswith(text: str, prefix: str) -> bool:
    return str(text).startswith(prefix)


def contains(container: Any, item: Any) -> bool:
    """Substring test for strings, membership for lists."""
    return item in container


def lower(text: str) -> str:
    return str(text).lower()


def _cc_tuple(cc: str) -> tuple[int, int]:
    major_s, _, minor_s = str(cc).partition(".")
    return int(major_s), int(minor_s or 0)


def _arch_tuple(arch: str) -> tuple[str, int, int] | None:
    """ "sm_90" → ("sm", 9, 0); "compute_90" → ("compute", 9, 0); "sm_100a"/"sm_90a" keep the base arch."""
    m = re.fullmatch(r"(sm|compute)_(\d+)([a-z]?)", arch.strip())
    if not m:
        return None
    digits = m.group(2)
    return m.group(1), int(digits[:-1]), int(digits[-1])


def arch_supported(arch_list: Iterable[str], cc: str) -> bool:
    """Can a build with these targets run on a GPU of compute capability cc?

    Machine code (sm_XY) runs on the same major with an equal or higher
    minor; PTX (compute_XY) is JIT-compiled for any GPU of capability >= X.Y.
    Architecture-specific targets (sm_90a) run only on exactly that GPU.
    """
    gpu = _cc_tuple(cc)
    for raw in arch_list:
        parsed = _arch_tuple(str(raw))
        if parsed is None:
            continue
        kind, maj, mino = parsed
        specific = str(raw).strip()[-1].isalpha()
        if kind == "sm":
            if specific and (maj, mino) == gpu:
                return True
            if not specific and maj == gpu[0] and mino <= gpu[1]:
                return True
        elif (maj, mino) <= gpu:
            return True
    return False


def sm(cc: str) -> str:
    """Compute capability as an arch name: "9.0" → "sm_90"."""
    maj, mino = _cc_tuple(cc)
    return f"sm_{maj}{mino}"


def visible_devices_problem(value: str, gpus: list[Any]) -> str:
    """What is wrong with a CUDA_VISIBLE_DEVICES value for these GPUs ("" when nothing).

    CUDA accepts comma-separated indices or UUIDs (GPU-..., MIG-...; unique
    prefixes allowed) and stops at the first invalid entry; an empty value
    hides every GPU.
    """
    text = value.strip()
    if text == "":
        return "it is empty, which hides every GPU from CUDA"
    nvidia = [g for g in gpus if _get(g, "vendor") == "nvidia"]
    count = len(nvidia)
    uuids = [u for u in (_get(g, "uuid") for g in nvidia) if isinstance(u, str)]
    seen: set[str] = set()
    for position, entry in enumerate(e.strip() for e in text.split(",")):
        if entry == "" or entry in ("NoDevFiles",):
            return f"entry {position + 1} is empty"
        if entry in seen:
            return f"{entry} is listed twice"
        seen.add(entry)
        if entry.lstrip("-").isdigit():
            idx = int(entry)
            if idx < 0:
                return f"{entry} is negative: CUDA ignores it and every entry after it"
            if idx >= count:
                return f"index {idx} does not exist: this host has {count} NVIDIA GPU(s) (0-{max(count - 1, 0)})"
        elif entry.startswith(("GPU-", "MIG-")):
            if entry.startswith("GPU-") and uuids:
                matches = [u for u in uuids if u.startswith(entry)]
                if not matches:
                    return f"{entry} matches no GPU UUID on this host"
                if len(matches) > 1:
                    return f"{entry} is a prefix of several GPU UUIDs"
        else:
            return f"{entry!r} is neither an index nor a GPU-/MIG- UUID"
    return ""


def _get(view: Any, name: str) -> Any:
    from .expressions import FactUnavailable

    try:
        return view.get(name) if hasattr(view, "get") else view[name]
    except (FactUnavailable, KeyError):
        return None


def count_where(items: Iterable[Any], field: str, value: Any) -> int:
    """How many items have field == value (items whose field is unavailable do not count)."""
    return sum(1 for item in items if _get(item, field) == value)


def values_of(items: Iterable[Any], field: str) -> list[Any]:
    """The known values of field across items."""
    out = []
    for item in items:
        v = _get(item, field)
        if v is not None:
            out.append(v)
    return out


STATIC: dict[str, Callable[..., Any]] = {
    "version": version,
    "major": major,
    "minor_version": minor_version,
    "has_bits": has_bits,
    "intersect": intersect,
    "difference": difference,
    "cpulist": cpulist,
    "gib": gib,
    "startswith": startswith,
    "contains": contains,
    "lower": lower,
    "arch_supported": arch_supported,
    "sm": sm,
    "visible_devices_problem": visible_devices_problem,
    "count_where": count_where,
    "values_of": values_of,
    "len": len,
    "any": any,
    "all": all,
    "min": min,
    "max": max,
    "sum": sum,
    "abs": abs,
    "int": int,
    "str": str,
    "sorted": sorted,
    "round": round,
}

# Bound per run (see bind) or evaluated specially (available: is the fact known?).
BOUND = ("lookup", "flag_names", "available", "supported")

FUNCTIONS: frozenset[str] = frozenset(STATIC) | frozenset(BOUND)

_MISSING = object()


def bind(tables: Mapping[str, Any]) -> dict[str, Callable[..., Any]]:
    """All functions, with those needing the run's data tables bound."""

    def lookup(table: str, key: Any, field: Any = None, default: Any = _MISSING) -> Any:
        """Row of a data table by key (a field of it when given); default when absent."""
        if table not in tables:
            raise ValueError(f"no data table {table!r}")
        rows = tables[table]["rows"]
        row = rows.get(str(key), _MISSING)
        if row is _MISSING:
            if default is not _MISSING:
                return default
            raise ValueError(f"{key!r} is not in table {table!r}")
        if field is None:
            return row
        if isinstance(row, Mapping) and field in row:
            return row[field]
        if default is not _MISSING:
            return default
        raise ValueError(f"table {table!r} row {key!r} has no {field!r}")

    def flag_names(value: int, table: str) -> list[str]:
        """Names of the bits set in value, from a data table of bit → name (unknown bits as hex)."""
        rows = tables[table]["rows"]
        names = []
        remaining = int(value)
        for bit_text, row in sorted(rows.items(), key=lambda kv: int(kv[0], 0)):
            bit = int(bit_text, 0)
            if remaining & bit:
                names.append(row["name"] if isinstance(row, Mapping) else str(row))
                remaining &= ~bit
        if remaining:
            names.append(hex(remaining))
        return names

    out: dict[str, Callable[..., Any]] = dict(STATIC)
    out["lookup"] = lookup
    out["flag_names"] = flag_names
    return out
