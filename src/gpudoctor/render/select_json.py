"""`select --format json`: the GPUs chosen, the CUDA_VISIBLE_DEVICES value, why the others were
left out and the plan's notes, for a scheduler that reads JSON rather than stderr. Formatting
only; the plan is advice/gpu_select.py's."""

from __future__ import annotations

import json
from typing import Any

MIB = 1 << 20


def to_dict(selection: Any, uuids: bool = False) -> dict[str, Any]:
    return {
        "ok": selection.ok,
        "asked": selection.k,
        "qualified": len(selection.eligible),
        # the value only when K GPUs qualified: a partial list must not end up in a job's environment
        "cuda_visible_devices": selection.value(uuids) if selection.ok else None,
        "chosen": [
            {
                "index": c.index,
                "uuid": c.uuid,
                "bus_id": c.bus_id,
                "name": c.name,
                "free_memory_mib": c.free_bytes // MIB,
                "utilization_pct": c.utilization_pct,
                "numa_node": c.numa_node,
                "nvlink_island": c.island,
            }
            for c in selection.chosen
        ],
        "left_out": [{"gpu": label, "why": why} for label, why in selection.excluded],
        "notes": list(selection.notes),
    }


def render(selection: Any, uuids: bool = False) -> str:
    return json.dumps(to_dict(selection, uuids), indent=2, ensure_ascii=False) + "\n"
