"""Probes: each module reads one source and returns one section of the facts.

A probe module exposes ``collect(ctx) -> dict``. It never judges, never
raises for a missing or broken source (those become Unavailable facts), and
reads every path through the context root. A probe that crashes anyway is
recorded as crashed in ``meta.probes`` and its section becomes unavailable
(error); the other probes still run.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any, Callable

from ..context import ProbeContext
from ..facts import Unavailable, make_snapshot

Collector = Callable[[ProbeContext], Any]


def _collectors() -> dict[str, Collector]:
    # Imported here so that `gpudoctor rules list` never pays for probe imports.
    from . import host, modules, nvml, numa, pci, rocm, toolkit, torch

    # sysfs first: it cannot hang; NVML (in a child under a deadline) last but one,
    # torch last since it may start an interpreter.
    return {
        "host": host.collect,
        "pci": pci.collect,
        "numa": numa.collect,
        "modules": modules.collect,
        "rocm": rocm.collect,
        "toolkit": toolkit.collect,
        "nvml": nvml.collect,
        "torch": torch.collect,
    }


def collect_all(ctx: ProbeContext) -> dict[str, Any]:
    """Run every probe and assemble the snapshot."""
    started = time.monotonic()
    sections: dict[str, Any] = {}
    meta_probes: dict[str, Any] = {}
    for name, collect in _collectors().items():
        t0 = time.monotonic()
        if ctx.remaining() <= 0:
            sections[name] = Unavailable("timeout", "the run's deadline passed before this probe started")
            meta_probes[name] = {"status": "timeout", "duration_s": 0.0}
            continue
        try:
            sections[name] = collect(ctx)
            meta_probes[name] = {"status": "ok", "duration_s": round(time.monotonic() - t0, 4)}
        except Exception as exc:  # a probe bug must not take the run down
            tb = f"{type(exc).__name__}: {exc}"
            sections[name] = Unavailable("error", f"probe {name} crashed: {tb}")
            meta_probes[name] = {"status": "crashed", "duration_s": round(time.monotonic() - t0, 4), "error": tb}
    if not isinstance(sections.get("nvml"), dict):
        # nvml is always an object so rules can read nvml.status.
        failure = sections.get("nvml")
        detail = failure.detail if isinstance(failure, Unavailable) else "probe failed"
        sections["nvml"] = {"status": "error", "error": detail}
    meta = {
        "collected_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "root": str(ctx.root),
        "live": ctx.live,
        "duration_s": round(time.monotonic() - started, 4),
        "probes": meta_probes,
    }
    return make_snapshot(sections, meta)
