"""The gate's report as JSON (``gate --json PATH``, ``gate --format json``), as
schemas/gate-report.schema.json describes it; with ``--distributed``, rank 0's report with every
rank's row and the all-reduce measurement. Formatting only."""

from __future__ import annotations

import json
from typing import Any

from ..findings import Status
from .envelope import envelope
from .text import header


def report_json(report: Any) -> dict[str, Any]:
    from .. import __version__

    out: dict[str, Any] = {
        "report_schema_version": 1,
        "kind": "gate",
        "gpudoctor_version": __version__,
        "generated_at": report.generated_at,
        "hostname": report.hostname(),
        "host": header(report.facts),
        "envelope": envelope(report.facts),
        "facts_origin": report.facts_origin,
        "verdict": report.verdict,
        "exit_code": report.exit_code,
        "duration_s": round(report.duration_s, 3),
        "policy": report.policy.to_json(),
        "summary": report.counts(),
        "blocking": [line.to_json() for line in report.lines],
        "gpus": report.gpus(),
        "findings": [
            {**f.to_json(), "blocking": report.is_blocking(f)} for f in report.findings if f.status is not Status.SKIP
        ],
    }
    if report.deep is not None:
        out["deep"] = report.deep.to_json()
    return out


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def render(report: Any) -> str:
    return dumps(report_json(report))
