"""Golden advice: `fix --numa` (shell and JSON) and `fix --torch` (text and shell) for each fixture
host, compared byte for byte.

Regenerate after an intended change with:
GPUDOCTOR_UPDATE_GOLDEN=1 python -m pytest tests/render/test_advice_golden.py, then read git diff tests/golden.
"""

from __future__ import annotations

import datetime

import pytest

from gpudoctor.advice.numa_plan import plan_numa
from gpudoctor.advice.torch_build import recommend
from gpudoctor.advice.torch_variants import load_release_tables
from gpudoctor.render import torch_build
from gpudoctor.render.numa_plan import render_numa_plan
from tests.conftest import HOSTS, probed
from tests.helpers.golden import GOLDEN, check

SCENARIOS = sorted(p.name for p in HOSTS.iterdir() if p.is_dir())
ADVICE = GOLDEN / "advice"
# The age of the torch release data is counted to 30 days after the table's retrieval date, so a
# refresh of the table changes only the date in the goldens' "data:" line.
TODAY = datetime.date.fromisoformat(load_release_tables()[2] or "2026-12-01") + datetime.timedelta(days=30)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_golden_numa_plan(scenario):
    facts = probed(scenario)
    plan = plan_numa(facts)
    check(ADVICE / f"{scenario}.fix-numa.sh", render_numa_plan(plan, facts, "shell"))
    check(ADVICE / f"{scenario}.fix-numa.json", render_numa_plan(plan, facts, "json"))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_golden_torch_build(scenario):
    rec = recommend(probed(scenario), today=TODAY)
    check(ADVICE / f"{scenario}.fix-torch.txt", torch_build.render_text(rec, f"fixture {scenario}"))
    check(ADVICE / f"{scenario}.fix-torch.sh", torch_build.render_shell(rec))
