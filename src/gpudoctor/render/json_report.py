"""The machine report (`--format json`), described by schemas/report.schema.json."""

from __future__ import annotations

import json
from typing import Any, Mapping

from .. import __version__
from ..findings import Report, Status, hostname_of
from ..model.gpus import gpu_rows
from .envelope import envelope
from .text import header

REPORT_SCHEMA_VERSION = 1


def to_dict(report: Report, facts: Mapping[str, Any], include_skipped: bool = False) -> dict[str, Any]:
    blocking = report.blocking()
    return {
        "report_schema_version": REPORT_SCHEMA_VERSION,
        "gpudoctor_version": __version__,
        "generated_at": report.generated_at,
        "hostname": hostname_of(facts),
        "host": header(facts),
        "envelope": envelope(facts),
        "facts_origin": report.facts_origin,
        "verdict": "fail" if blocking else "not_judged" if report.nothing_judged() else "pass",
        "exit_code": report.exit_code,
        "fail_on": report.fail_on.value,
        "summary": report.counts(),
        "gpus": gpu_rows(facts, report.findings, lambda f: any(f is b for b in blocking)),
        "findings": [f.to_json() for f in report.findings if include_skipped or f.status is not Status.SKIP],
    }


def render(report: Report, facts: Mapping[str, Any], include_skipped: bool = False) -> str:
    return json.dumps(to_dict(report, facts, include_skipped), indent=2, ensure_ascii=False) + "\n"
