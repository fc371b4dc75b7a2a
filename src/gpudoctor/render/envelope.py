"""The report envelope: which machine a report is about, when it was read, its GPUs and the
versions that matter, in the same shape in the check report (render/json_report.py) and the gate
report (render/gate_json.py), so that `report merge` (fleet.py) reads one object for both instead
of parsing the human header line back. Built here and nowhere else; the human header line
(render/text.py ``header``) takes its host and versions from it too. Formatting only: a value the
facts do not have, or have as something other than a string, is null.

Shape (schemas/report.schema.json and gate-report.schema.json, ``$defs/envelope``)::

    {"host": {"hostname", "os", "kernel"},
     "collected_at": when the facts were read (UTC, RFC 3339, "2026-12-01T12:00:00Z"),
     "gpus": [{"index", "name", "bus_id", "uuid"}, ...]   at most MAX_GPUS,
     "versions": {"gpudoctor", "driver", "cuda" (the driver's CUDA version), "torch"},
     "profile": the facts a golden-node profile fixes (model/profile_facts.py), which
                `report merge --drift` compares across nodes}
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Mapping

from ..facts import Unavailable
from ..model.gpus import gpus_of
from ..model.profile_facts import profile_facts, software_versions

# More GPU rows than any machine has (the facts bound NVML's list at 1024 and PCI's at 4096): a
# report stays bounded whatever the snapshot holds, and `report merge` refuses a longer list.
MAX_GPUS = 4096
# "2026-12-01T12:00:00.123456+05:30" is 32 characters; a longer stamp is not one.
_MAX_STAMP_CHARS = 40


def _known(value: Any, kind: type) -> Any:
    return value if isinstance(value, kind) and not isinstance(value, bool) else None


def _get(facts: Mapping[str, Any], section: str, key: str) -> str | None:
    """A string fact, or None when the section or the fact is absent, unavailable or not a string."""
    s = facts.get(section)
    value = s.get(key) if isinstance(s, Mapping) else None
    return None if isinstance(value, Unavailable) else _known(value, str)


def utc_stamp(text: Any) -> str | None:
    """An ISO 8601 time as UTC "YYYY-MM-DDTHH:MM:SSZ", or None when it is not one (the snapshot's
    meta is outside input, and the fleet compares these stamps as strings)."""
    if not isinstance(text, str) or len(text) > _MAX_STAMP_CHARS:
        return None
    try:
        stamp = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        return None
    if stamp.tzinfo is None:
        return None
    return stamp.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _gpus(facts: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "index": _known(g.index, int),
            "name": _known(g.name, str),
            "bus_id": _known(g.bus_id, str),
            "uuid": _known(g.uuid, str),
        }
        for g in gpus_of(facts)[:MAX_GPUS]
    ]


def host_of(facts: Mapping[str, Any]) -> dict[str, str | None]:
    """The envelope's ``host``: hostname, OS name and kernel release."""
    return {
        "hostname": _get(facts, "host", "hostname"),
        "os": _get(facts, "host", "os_name"),
        "kernel": _get(facts, "host", "kernel_release"),
    }


def versions_of(facts: Mapping[str, Any]) -> dict[str, str | None]:
    """The envelope's ``versions``: gpudoctor (this one), the driver, the driver's CUDA, torch."""
    from .. import __version__

    return {"gpudoctor": __version__, **software_versions(facts)}


def envelope(facts: Mapping[str, Any]) -> dict[str, Any]:
    meta = facts.get("meta")
    return {
        "host": host_of(facts),
        "collected_at": utc_stamp(meta.get("collected_at")) if isinstance(meta, Mapping) else None,
        "gpus": _gpus(facts),
        "versions": versions_of(facts),
        "profile": profile_facts(facts),
    }
