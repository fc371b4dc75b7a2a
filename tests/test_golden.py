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
from tests.helpers.golden import EPOCH, GOLDEN, check

SCENARIOS = sorted(p.name for p in HOSTS.iterdir() if p.is_dir())
RULESET = load_rules(include_plugins=False)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_golden_reports(scenario):
    facts = probed(scenario)
    report = Report(findings=run_rules(RULESET, facts), facts_origin=f"fixture {scenario}", generated_epoch=EPOCH)
    check(GOLDEN / f"{scenario}.txt", text.render(report, facts))
    check(GOLDEN / f"{scenario}.json", json_report.render(report, facts))


# What a terminal of 60, 80 or 120 columns shows (check passes the terminal's width): a failing
# host, one without a driver, a healthy one and the real H200 snapshot.
WIDTH_SCENARIOS = ["nvlink-down-8gpu", "no-driver", "healthy-2gpu", "h200-x2-real"]


@pytest.mark.parametrize("width", [60, 80, 120])
@pytest.mark.parametrize("scenario", WIDTH_SCENARIOS)
def test_golden_text_at_terminal_widths(scenario, width):
    facts = probed(scenario)
    report = Report(findings=run_rules(RULESET, facts), facts_origin=f"fixture {scenario}")
    check(GOLDEN / "width" / f"{scenario}.{width}.txt", text.render(report, facts, width=width))
