"""Functions rule expressions may call. Nothing else is callable.

Each is small, pure and total over the values facts can hold; bad input
raises ValueError/TypeError, which the runner reports as a rule error.
Functions that need the run's data tables or facts are bound per run by
:func:`bind`.

Numbers in strings: facts are untrusted, and Python refuses to convert a decimal string of
more than 4300 digits to an int (and takes quadratic time below that). No helper hands such a
string to int(): a version component, a compute capability or an architecture number longer
than MAX_NUMBER_DIGITS digits is a ValueError saying so, an index in CUDA_VISIBLE_DEVICES or
HIP_VISIBLE_DEVICES that long is simply out of range, and values quoted in error messages are
cut (see _shown), so an error's text does not grow with the fact.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Mapping

from packaging.version import InvalidVersion, Version

from ..inputs import MAX_INT_DIGITS

_VERSION_HEAD = re.compile(r"\d+(?:\.\d+)*")

# Digits a number in a fact string may have for a helper to convert it (2**64 has 20).
MAX_NUMBER_DIGITS = MAX_INT_DIGITS
# Dotted parts a version may have ("580.65.06" has 3).
MAX_VERSION_PARTS = 16


def _shown(value: Any, limit: int = 80) -> str:
    """repr() of a value for an error message, cut to about ``limit`` characters."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]!r}… ({len(value)} characters)"
    try:
        text = repr(value)
    except ValueError:  # an int past int_max_str_digits
        return f"<{type(value).__name__}>"
    return text if len(text) <= 2 * limit else text[: 2 * limit] + "…"


def _small_int(text: str, what: str, base: int = 10) -> int:
    """int(text, base), refusing more than MAX_NUMBER_DIGITS digits with a clear ValueError."""
    digits = text.strip().lstrip("+-")
    if len(digits) > MAX_NUMBER_DIGITS:
        raise ValueError(f"{what} {_shown(text)} has {len(digits)} digits, more than {MAX_NUMBER_DIGITS}")
    try:
        return int(text, base)
    except ValueError:
        raise ValueError(f"{what} {_shown(text)} is not a number") from None


def version(text: Any) -> Version:
    """Leading dotted number of a version string: "580.65.06" → 580.65.6; "6.8.0-45-generic" → 6.8.0."""
    if isinstance(text, (int, float)):
        text = str(text)
    if not isinstance(text, str):
        raise TypeError(f"version() needs a string, got {type(text).__name__}")
    match = _VERSION_HEAD.search(text)
    if not match:
        raise ValueError(f"no version number in {_shown(text)}")
    parts = match.group(0).split(".")
    if len(parts) > MAX_VERSION_PARTS:
        raise ValueError(f"bad version {_shown(text)}: more than {MAX_VERSION_PARTS} dotted parts")
    longest = max(map(len, parts))
    if longest > MAX_NUMBER_DIGITS:
        raise ValueError(f"bad version {_shown(text)}: a part with {longest} digits (at most {MAX_NUMBER_DIGITS})")
    try:
        return Version(match.group(0))
    except (InvalidVersion, ValueError):
        raise ValueError(f"bad version {_shown(text)}") from None


def major(text: Any) -> int:
    """Major number of a version: "12.4" → 12."""
    return version(text).major


def minor_version(text: Any) -> str:
    """ "major.minor" of a version: "12.4.131" → "12.4"."""
    v = version(text)
    return f"{v.major}.{v.minor}"


def _as_int(value: Any, what: str) -> int:
    """int(value) of a number or a number's string, refusing a string too long to convert."""
    if isinstance(value, str):
        return _small_int(value, what)
    return int(value)


def has_bits(value: Any, mask: Any) -> bool:
    """True when any bit of mask is set in value."""
    return bool(_as_int(value, "has_bits() value") & _as_int(mask, "has_bits() mask"))


def intersect(a: Iterable[Any], b: Iterable[Any]) -> list[Any]:
    """Items of a that are also in b, in a's order."""
    other = set(b)
    return [x for x in a if x in other]


def difference(a: Iterable[Any], b: Iterable[Any]) -> list[Any]:
    other = set(b)
    return [x for x in a if x not in other]


def cpulist(cpus: Iterable[int]) -> str:
    """CPU ids as a kernel-style list: [0,1,2,3,8] → "0-3,8"."""
    from ..model.cpus import format_cpulist

    return format_cpulist(list(cpus))


def gib(value: float) -> float:
    """Bytes to GiB."""
    if isinstance(value, str) and len(value.strip()) > 100:
        raise ValueError(f"gib() of {_shown(value)}: not a number of bytes")
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
    return _small_int(major_s, "compute capability"), _small_int(minor_s or "0", "compute capability")


_ARCH = re.compile(rf"(sm|compute)_(\d{{1,{MAX_NUMBER_DIGITS}}})([a-z]?)")


def _arch_tuple(arch: str) -> tuple[str, int, int] | None:
    """ "sm_90" → ("sm", 9, 0); "compute_90" → ("compute", 9, 0); "sm_100a"/"sm_90a" keep the base arch."""
    m = _ARCH.fullmatch(arch.strip())
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


def local_version(text: Any) -> str:
    """The local part of a wheel version, after "+": "2.4.1+cu121" → "cu121"; "" when it has none."""
    if not isinstance(text, str):
        raise TypeError(f"local_version() needs a string, got {type(text).__name__}")
    return text.partition("+")[2].strip()


def wheel_family(text: Any) -> str:
    """Which accelerator family a torch/torchvision/torchaudio wheel was built for, from its
    local version: "2.4.1+cu121" → "cuda12", "0.26.0+cu130" → "cuda13", "+rocm6.2.4" → "rocm6",
    "+cpu" → "cpu", "+xpu" → "xpu"; "" when the version carries no tag (a PyPI default wheel or
    a source build), where the family cannot be told.

    The CUDA tag is the major and minor run together with the minor as its last digit
    (cu92, cu118, cu130), so the major is everything but the last digit.
    """
    tag = local_version(text).lower()
    digits = re.fullmatch(r"cu(\d+)", tag)
    if digits:
        number = digits.group(1)
        return f"cuda{number[:-1] or number}"
    rocm = re.fullmatch(r"rocm(\d+)(?:\.\d+)*", tag)
    if rocm:
        return f"rocm{rocm.group(1)}"
    if tag in ("cpu", "xpu"):
        return tag
    return ""


def _gfx_base(name: Any) -> str:
    # "gfx90a:sramecc+:xnack-" → "gfx90a": torch and rocminfo may append target features.
    return str(name).strip().split(":", 1)[0].lower()


def missing_gfx(targets: Iterable[Any], arch_list: Iterable[Any]) -> list[str]:
    """The GPU targets (gfx names) that a ROCm build's arch list has no code for, in order,
    each once; target features after ":" are ignored on both sides."""
    built = {_gfx_base(a) for a in arch_list}
    out: list[str] = []
    for target in targets:
        base = _gfx_base(target)
        if base not in built and base not in out:
            out.append(base)
    return out


def filter_by(items: Iterable[Any], field: str, value: Any) -> list[Any]:
    """The items whose field equals value (items whose field is unavailable are left out)."""
    return [item for item in items if _get(item, field) == value]


def cuda_visible_count(value: Any, gpus: list[Any]) -> int:
    """How many NVIDIA GPUs CUDA exposes under this CUDA_VISIBLE_DEVICES value.

    Counted are the GPUs NVML lists (in a container, the ones it was given; a GPU that fell off
    the bus is not there for CUDA either). None (unset) exposes all of them. Otherwise CUDA takes
    the comma-separated entries in order and stops at the first invalid one (an index out of
    range, a duplicate, an unknown UUID), so "0,7,1" on a 2-GPU host exposes one GPU.
    """
    nvidia = [g for g in gpus if _get(g, "vendor") == "nvidia" and _get(g, "in_nvml") is True]
    if value is None:
        return len(nvidia)
    uuids = [u for u in (_get(g, "uuid") for g in nvidia) if isinstance(u, str)]
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
    """
    text = value.strip()
    if text == "":
        return "it is empty, which hides every GPU from HIP"
    count = sum(1 for g in gpus if _get(g, "vendor") == "amd")
    seen: set[str] = set()
    for position, entry in enumerate(e.strip() for e in text.split(",")):
        if entry == "":
            return f"entry {position + 1} is empty"
        if entry in seen:
            return f"{_cut(entry)} is listed twice"
        seen.add(entry)
        if entry.lstrip("-").isdecimal():
            if len(entry.lstrip("-")) > MAX_NUMBER_DIGITS:  # too long for int(); no such GPU either way
                if entry.startswith("-"):
                    return f"{_cut(entry)} is negative"
                return f"index {_cut(entry)} does not exist: this host has {count} AMD GPU(s) (0-{max(count - 1, 0)})"
            idx = int(entry)
            if idx < 0:
                return f"{entry} is negative"
            if idx >= count:
                return f"index {idx} does not exist: this host has {count} AMD GPU(s) (0-{max(count - 1, 0)})"
        elif not re.fullmatch(r"GPU-[0-9a-fA-F]+", entry):
            return f"{_shown(entry)} is neither an index nor a GPU- UUID"
    return ""


def env_set(env: Any, names: Iterable[str]) -> list[str]:
    """ "NAME=value" for each of names that is set in env (host.env), in the order given."""
    out = []
    for name in names:
        value = _get(env, str(name))
        if value is not None:
            out.append(f"{name}={value}")
    return out


def gpus_per_node(gpus: Iterable[Any], nodes: Iterable[Any]) -> list[int]:
    """How many of the GPUs sit on each NUMA node that has CPUs, in node order.

    Memory-only nodes (CXL memory, HBM exposed as a node, a Grace GPU's memory) are left out:
    no process runs there, so they cannot be out of balance.
    """
    node_ids = []
    for node in nodes:
        # An unreadable cpulist or GPU node makes the count unknown (the rule's status too):
        # skipping it would count that node's GPUs nowhere and report an imbalance that is not there.
        cpus = _required(node, "cpus")
        node_id = _required(node, "id")
        if isinstance(cpus, list) and cpus and isinstance(node_id, int):
            node_ids.append(node_id)
    if not node_ids:
        from ..facts import Unavailable
        from .expressions import FactUnavailable

        raise FactUnavailable("numa.nodes", Unavailable("error", "no NUMA node lists a CPU"))
    placed = [_required(g, "numa_node") for g in gpus]
    return [sum(1 for n in placed if n == node_id) for node_id in node_ids]


def _required(view: Any, name: str) -> Any:
    """Like _get, but an unavailable fact raises FactUnavailable, which makes the rule unknown."""
    return view.get(name) if hasattr(view, "get") else view[name]


def os_support_problem(row: Any, os_id: Any, os_version: Any, kernel_release: Any) -> str:
    """Why this OS and kernel are outside a support table row ("" when they are inside).

    ``row`` is a table row with ``os``: a map of "<os-release ID> <VERSION_ID>" (as
    /etc/os-release spells them: "ubuntu 22.04", "rhel 9.4", "sles 15.5") to the kernel
    series ("6.8") listed for it; an empty list means the distribution's own kernel, which
    its version fixes.
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
            return f"{_cut(entry)} is listed twice"
        seen.add(entry)
        if entry.lstrip("-").isdecimal():
            if len(entry.lstrip("-")) > MAX_NUMBER_DIGITS:  # too long for int(); no such GPU either way
                if entry.startswith("-"):
                    return f"{_cut(entry)} is negative: CUDA ignores it and every entry after it"
                return (
                    f"index {_cut(entry)} does not exist: this host has {count} NVIDIA GPU(s) (0-{max(count - 1, 0)})"
                )
            idx = int(entry)
            if idx < 0:
                return f"{entry} is negative: CUDA ignores it and every entry after it"
            if idx >= count:
                return f"index {idx} does not exist: this host has {count} NVIDIA GPU(s) (0-{max(count - 1, 0)})"
        elif entry.startswith(("GPU-", "MIG-")):
            if entry.startswith("GPU-") and uuids:
                matches = [u for u in uuids if u.startswith(entry)]
                if not matches:
                    return f"{_cut(entry)} matches no GPU UUID on this host"
                if len(matches) > 1:
                    return f"{_cut(entry)} is a prefix of several GPU UUIDs"
        else:
            return f"{_shown(entry)} is neither an index nor a GPU-/MIG- UUID"
    return ""


def _cut(text: str, limit: int = 80) -> str:
    """A fact's text for a message, cut to ``limit`` characters (the rest counted)."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


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


def _round(number: Any, ndigits: Any = None) -> Any:
    """round(), with ndigits kept small: round(5, -10**12) would compute 10**(10**12)."""
    if ndigits is None:
        return round(number)
    if not isinstance(ndigits, int) or abs(ndigits) > 30:
        raise ValueError("round() takes at most 30 digits")
    return round(number, ndigits)


def _sum(items: Iterable[Any], start: Any = 0) -> Any:
    """sum() of numbers only: summing lists copies them again at every step."""
    values = list(items)
    for value in [start, *values]:
        if not isinstance(value, (int, float)):
            raise TypeError(f"sum() adds numbers, not {type(value).__name__}")
    return sum(values, start)


def _int(value: Any, *base: Any) -> int:
    """int(), refusing long digit strings (converting them is quadratic on Pythons without
    the int_max_str_digits limit)."""
    if isinstance(value, str) and len(value.strip()) > 100:
        raise ValueError(f"int() of a string longer than 100 characters ({len(value.strip())}): {_shown(value)}")
    try:
        return int(value, *base)
    except ValueError as exc:
        raise ValueError(f"int() of {_shown(value)}: {str(exc).split(':', 1)[0]}") from None


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
    "sum": _sum,
    "abs": abs,
    "int": _int,
    "str": str,
    "sorted": sorted,
    "local_version": local_version,
    "wheel_family": wheel_family,
    "missing_gfx": missing_gfx,
    "filter_by": filter_by,
    "cuda_visible_count": cuda_visible_count,
    "amd_visible_devices_problem": amd_visible_devices_problem,
    "gpus_per_node": gpus_per_node,
    "env_set": env_set,
    "os_support_problem": os_support_problem,
    "round": _round,
}

# Bound per run (see bind) or evaluated specially (available: is the fact known?).
BOUND = ("lookup", "flag_names", "available", "supported", "gpu_arch", "xids_of", "lookup_path")

FUNCTIONS: frozenset[str] = frozenset(STATIC) | frozenset(BOUND)

_MISSING = object()


def _key_text(key: Any) -> str:
    """str(key) for a table lookup; an int too long to print is a key no table has."""
    try:
        return str(key)
    except ValueError:  # int_max_str_digits
        return ""


def bind(tables: Mapping[str, Any]) -> dict[str, Callable[..., Any]]:
    """All functions, with those needing the run's data tables bound."""

    def lookup(table: str, key: Any, field: Any = None, default: Any = _MISSING) -> Any:
        """Row of a data table by key (a field of it when given); default when absent."""
        if table not in tables:
            raise ValueError(f"no data table {_shown(table)}")
        rows = tables[table]["rows"]
        row = rows.get(_key_text(key), _MISSING)
        if row is _MISSING:
            if default is not _MISSING:
                return default
            raise ValueError(f"{_shown(key)} is not in table {table!r}")
        if field is None:
            return row
        if isinstance(row, Mapping) and field in row:
            return row[field]
        if default is not _MISSING:
            return default
        raise ValueError(f"table {table!r} row {_shown(key)} has no {_shown(field)}")

    def flag_names(value: int, table: str) -> list[str]:
        """Names of the bits set in value, from a data table of bit → name (unknown bits as hex)."""
        if table not in tables:
            raise ValueError(f"no data table {_shown(table)}")
        rows = tables[table]["rows"]
        names = []
        remaining = _as_int(value, "flag_names() value")
        bits = sorted(
            ((_small_int(str(key), f"table {table!r} bit", 0), row) for key, row in rows.items()), key=lambda b: b[0]
        )
        for bit, row in bits:
            if remaining & bit:
                names.append(row["name"] if isinstance(row, Mapping) else str(row))
                remaining &= ~bit
        if remaining:
            names.append(hex(remaining))
        return names

    def lookup_path(table: str, key: Any, *fields: Any) -> Any:
        """A value nested inside a table row: lookup_path("torch_releases", "2.7", "variants",
        "rocm6.3", "gfx") is rows["2.7"]["variants"]["rocm6.3"]["gfx"]. None when the row or any
        step is missing (or null), so a rule can test for it; an unknown table is an error."""
        if table not in tables:
            raise ValueError(f"no data table {_shown(table)}")
        node: Any = tables[table]["rows"].get(_key_text(key))
        for name in fields:
            if not isinstance(node, Mapping):
                return None
            node = node.get(str(name))
        return node

    def gpu_arch(gpu: Any) -> str:
        """A GPU's architecture (kepler .. blackwell): NVML's answer, else looked up from its PCI
        device id in the nvidia_pci_ids table of device-id ranges.

        The fallback matters exactly when NVML is silent about a GPU: a driver that does not
        support the card (too old for it, or a branch that dropped it, or the proprietary
        module on a GPU that needs the open one) does not initialise it, so NVML never lists
        it. Unknown either way makes the rule unknown (FactUnavailable), not pass.
        """
        from ..facts import Unavailable
        from .expressions import FactUnavailable

        arch = _get(gpu, "architecture")
        if isinstance(arch, str) and arch:
            return arch
        pci = _get(gpu, "pci")
        device = _get(pci, "device_id") if pci is not None else None
        if isinstance(device, str):
            try:
                number = _small_int(device, "PCI device id", 16)
            except ValueError:
                number = -1
            for key, row in tables.get("nvidia_pci_ids", {}).get("rows", {}).items():
                low, _, high = key.partition("-")
                if _small_int(low, "nvidia_pci_ids key", 16) <= number <= _small_int(high, "nvidia_pci_ids key", 16):
                    return str(row["architecture"])
            missing = Unavailable(
                "not_found", f"PCI device id {_cut(device)} is in no range of the nvidia_pci_ids table"
            )
        else:
            missing = Unavailable("not_found", "neither NVML nor the PCI device id tells this GPU's architecture")
        raise FactUnavailable("gpu.architecture", missing)

    def xids_of(entries: Iterable[Any], severity: str) -> list[str]:
        """Kernel-log Xid entries of one severity in the xid_errors table, as
        "Xid 79 (GPU has fallen off the bus) 2x: <last message>". An Xid the table does not
        list counts as a warning: worth a look, not proof that the GPU is broken."""
        rows = tables.get("xid_errors", {}).get("rows", {})
        out = []
        for entry in entries:
            code = _get(entry, "code")
            row = rows.get(str(code))
            level = row.get("severity", "warning") if isinstance(row, Mapping) else "warning"
            if level != severity:
                continue
            name = row.get("name") if isinstance(row, Mapping) else "not in gpudoctor's Xid table"
            count = _get(entry, "count")
            message = _get(entry, "message")
            text = f"Xid {code} ({name}) {count}x"
            out.append(f"{text}: {message}" if message else text)
        return out

    out: dict[str, Callable[..., Any]] = dict(STATIC)
    out["lookup"] = lookup
    out["flag_names"] = flag_names
    out["gpu_arch"] = gpu_arch
    out["xids_of"] = xids_of
    out["lookup_path"] = lookup_path
    return out
