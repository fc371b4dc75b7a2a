"""Golden reports: the text and JSON output for each fixture host, compared byte for byte.

Regenerate after an intended change with:  GPUDOCTOR_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py
then read the diff (git diff tests/golden) before committing it.
"""

from __future__ import annotations

import pytest

from gpudoctor.engine.loader import load_rules
from gpudoctor.engine.runner import run_rules
from gpudoctor.findings import Report
from gpudoctor.render import json_report, text
from tests.conftest import HOSTS, probed
from tests.helpers.golden import GOLDEN, check

SCENARIOS = sorted(p.name for p in HOSTS.iterdir() if p.is_dir())
RULESET = load_rules(include_plugins=False)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_golden_reports(scenario):
    facts = probed(scenario)
    report = Report(findings=run_rules(RULESET, facts), facts_origin=f"fixture {scenario}")
    check(GOLDEN / f"{scenario}.txt", text.render(report, facts))
    check(GOLDEN / f"{scenario}.json", json_report.render(report, facts))
