"""Golden reports: the text and JSON output for each fixture host, compared byte for byte.

Regenerate after an intended change with:  GPUDOCTOR_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py
then read the diff (git diff tests/golden) before committing it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpudoctor.engine.loader import load_rules
from gpudoctor.engine.runner import run_rules
from gpudoctor.findings import Report
from gpudoctor.render import json_report, text
from tests.conftest import HOSTS, probed

GOLDEN = Path(__file__).with_name("golden")
SCENARIOS = sorted(p.name for p in HOSTS.iterdir() if p.is_dir())
RULESET = load_rules(include_plugins=False)


def check(path: Path, actual: str) -> None:
    if os.environ.get("GPUDOCTOR_UPDATE_GOLDEN"):
        path.write_text(actual, encoding="utf-8")
        return
    assert path.exists(), f"no golden file {path.name}; run with GPUDOCTOR_UPDATE_GOLDEN=1"
    expected = path.read_text(encoding="utf-8")
    assert actual == expected, f"{path.name} differs from the golden output (GPUDOCTOR_UPDATE_GOLDEN=1 to update)"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_golden_reports(scenario):
    facts = probed(scenario)
    report = Report(findings=run_rules(RULESET, facts), facts_origin=f"fixture {scenario}")
    check(GOLDEN / f"{scenario}.txt", text.render(report, facts))
    check(GOLDEN / f"{scenario}.json", json_report.render(report, facts))
