"""The functions rule expressions may call (nothing else is callable), and the helpers bound per
run to the run's data tables (:func:`bind`: lookup, flag_names, lookup_path, gpu_arch, xids_of, gpu_spec).

Each is small, pure and total over the values facts can hold; bad input raises
ValueError/TypeError, which the runner reports as a rule error.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from ...facts import Unavailable
from ...model.spec_match import match_row, pci_id_of
from ...tables import architecture_of_device
from ..views import FactUnavailable
from . import devices, rates, values, versions
from .common import as_int, cut, field_or_none, shown, small_int

STATIC: dict[str, Callable[..., Any]] = {
    "version": versions.version,
    "major": versions.major,
    "minor_version": versions.minor_version,
    "has_bits": values.has_bits,
    "intersect": values.intersect,
    "difference": values.difference,
    "cpulist": values.cpulist,
    "gib": values.gib,
    "startswith": values.startswith,
    "contains": values.contains,
    "lower": values.lower,
    "arch_supported": versions.arch_supported,
    "sm": versions.sm,
    "visible_devices_problem": devices.visible_devices_problem,
    "count_where": values.count_where,
    "values_of": values.values_of,
    "len": values.length,
    "any": values.any_true,
    "all": values.all_true,
    "min": values.smallest,
    "max": values.largest,
    "sum": values.bounded_sum,
    "abs": values.absolute,
    "int": values.bounded_int,
    "str": values.as_text,
    "sorted": values.in_order,
    "local_version": versions.local_version,
    "wheel_family": versions.wheel_family,
    "missing_gfx": versions.missing_gfx,
    "hsa_override_gfx": versions.hsa_override_gfx,
    "filter_by": values.filter_by,
    "cuda_visible_count": devices.cuda_visible_count,
    "amd_visible_devices_problem": devices.amd_visible_devices_problem,
    "ascend_visible_devices_problem": devices.ascend_visible_devices_problem,
    "counted_vendor": devices.counted_vendor,
    "unbound": devices.unbound,
    "gpus_per_node": devices.gpus_per_node,
    "rdma_ports": devices.rdma_ports,
    "env_set": values.env_set,
    "env_names": values.env_names,
    "shell_words": values.shell_words,
    "os_support_problem": devices.os_support_problem,
    "round": values.bounded_round,
    "rising": rates.rising,
    "rates_text": rates.rates_text,
    "resets": rates.resets,
}

# Bound per run (see bind) or evaluated specially (available: is the fact known?).
BOUND = ("lookup", "flag_names", "available", "supported", "gpu_arch", "xids_of", "lookup_path", "gpu_spec")

FUNCTIONS: frozenset[str] = frozenset(STATIC) | frozenset(BOUND)

# Evaluated by the evaluator itself, which must hand them the fact unevaluated
# (evaluator._make_call): their signatures and documentation, for the helpers reference.
FORMS: dict[str, tuple[str, str]] = {
    "available": (
        "available(fact)",
        """True when the fact is known, False when it is unavailable (for any reason).

        A rule reads it to choose between two sources of one value, or to skip what it cannot judge.

        Example: available(host.kernel_release) → True
        Example: available(rocm.version) → False
        """,
    ),
    "supported": (
        "supported(fact)",
        """False only when the fact is unavailable because this GPU or driver does not have it.

        So a feature a GPU lacks (ECC on a GeForce card) is skipped, not unknown; a fact that could
        not be read for another reason is still "supported".

        Example: supported(gpu.temperature_c) → True
        """,
    ),
}

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
        """A row of a data table by key, or one field of it; default when absent (an error without
        one).

        Example: lookup("cuda_driver", "12.4", "min_driver") → "550.54.14"
        Example: lookup("cuda_driver", "99.9", "min_driver", None) → None
        """
        if table not in tables:
            raise ValueError(f"no data table {shown(table)}")
        rows = tables[table]["rows"]
        row = rows.get(_key_text(key), _MISSING)
        if row is _MISSING:
            if default is not _MISSING:
                return default
            raise ValueError(f"{shown(key)} is not in table {table!r}")
        if field is None:
            return row
        if isinstance(row, Mapping) and field in row:
            return row[field]
        if default is not _MISSING:
            return default
        raise ValueError(f"table {table!r} row {shown(key)} has no {shown(field)}")

    def flag_names(value: int, table: str) -> list[str]:
        """The names of the bits set in value, from a data table of bit → name (unknown bits as hex).

        Example: flag_names(96, "clock_event_reasons") → ["SwThermalSlowdown", "HwThermalSlowdown"]
        """
        if table not in tables:
            raise ValueError(f"no data table {shown(table)}")
        rows = tables[table]["rows"]
        names = []
        remaining = as_int(value, "flag_names() value")
        bits = sorted(
            ((small_int(str(key), f"table {table!r} bit", 0), row) for key, row in rows.items()), key=lambda b: b[0]
        )
        for bit, row in bits:
            if remaining & bit:
                names.append(row["name"] if isinstance(row, Mapping) else str(row))
                remaining &= ~bit
        if remaining:
            names.append(hex(remaining))
        return names

    def lookup_path(table: str, key: Any, *fields: Any) -> Any:
        """A value nested inside a table row: rows[key][field][field]...; None when the row or any
        step is missing (or null), so a rule can test for it; an unknown table is an error.

        Example: lookup_path("torch_releases", "2.4", "torchvision") → "0.19.1"
        Example: lookup_path("torch_releases", "2.4", "variants", "cu999") → None
        """
        if table not in tables:
            raise ValueError(f"no data table {shown(table)}")
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

        Example: gpu_arch(gpu) → "hopper"
        """
        arch = field_or_none(gpu, "architecture")
        if isinstance(arch, str) and arch:
            return arch
        pci = field_or_none(gpu, "pci")
        device = field_or_none(pci, "device_id") if pci is not None else None
        if isinstance(device, str):
            found = architecture_of_device(tables, device)
            if found is not None:
                return found
            missing = Unavailable(
                "not_found", f"PCI device id {cut(device)} is in no range of the nvidia_pci_ids table"
            )
        else:
            missing = Unavailable("not_found", "neither NVML nor the PCI device id tells this GPU's architecture")
        raise FactUnavailable("gpu.architecture", missing)

    def xids_of(entries: Iterable[Any], severity: str) -> list[str]:
        """Kernel-log Xid entries of one severity in the xid_errors table, as
        "Xid 79 (GPU has fallen off the bus) 2x: <last message>". An Xid the table does not
        list counts as a warning: worth a look, not proof that the GPU is broken.

        Example: xids_of([], "error") → []
        """
        rows = tables.get("xid_errors", {}).get("rows", {})
        out = []
        for entry in entries:
            code = field_or_none(entry, "code")
            row = rows.get(str(code))
            level = row.get("severity", "warning") if isinstance(row, Mapping) else "warning"
            if level != severity:
                continue
            name = row.get("name") if isinstance(row, Mapping) else "not in gpudoctor's Xid table"
            count = field_or_none(entry, "count")
            message = field_or_none(entry, "message")
            text = f"Xid {code} ({name}) {count}x"
            out.append(f"{text}: {message}" if message else text)
        return out

    def gpu_spec(gpu: Any, field: str) -> Any:
        """One field of the GPU's row in the gpu_specs table (matched by PCI id, else NVML name,
        else memory size, as `gpudoctor tiers` matches it); None when no row matches or the row
        does not give the field, so a rule's `applies` can skip GPUs the table cannot judge.

        Example: gpu_spec(gpu, "nvlink_links") → 18
        """
        rows = tables.get("gpu_specs", {}).get("rows", {})
        pci = field_or_none(gpu, "pci")
        ids = {k: field_or_none(pci, k) for k in ("vendor_id", "device_id")} if pci is not None else None
        memory = field_or_none(gpu, "memory_total_bytes")
        name = field_or_none(gpu, "name")
        spec_id, _how, _candidates = match_row(
            rows,
            pci_id_of(ids, field_or_none(gpu, "pci_device_id")),
            name if isinstance(name, str) else None,
            memory if isinstance(memory, int) else None,
        )
        row = rows.get(spec_id) if spec_id is not None else None
        return row.get(str(field)) if isinstance(row, Mapping) else None

    out: dict[str, Callable[..., Any]] = dict(STATIC)
    out["lookup"] = lookup
    out["flag_names"] = flag_names
    out["gpu_arch"] = gpu_arch
    out["xids_of"] = xids_of
    out["lookup_path"] = lookup_path
    out["gpu_spec"] = gpu_spec
    return out
