"""Shell completion through click's own protocol, as the shell calls it: the environment
variable _GPUDOCTOR_COMPLETE=bash_complete with COMP_WORDS/COMP_CWORD, one candidate a line."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from gpudoctor.cli.root import main
from gpudoctor.findings import AREAS
from gpudoctor.model.profile_facts import FACTS

RULES = Path(__file__).resolve().parents[2] / "rules"


def complete(words: str, cword: int) -> list[tuple[str, str]]:
    env = {"_GPUDOCTOR_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    result = CliRunner().invoke(main, [], prog_name="gpudoctor", env=env)
    assert result.exit_code == 0, result.output
    # bash_complete writes "type,value" a line
    return [tuple(line.split(",", 1)) for line in result.output.splitlines() if line]  # type: ignore[misc]


def test_rules_show_completes_the_builtin_rule_ids():
    candidates = complete("gpudoctor rules show nvml-", 3)
    every_id = set(re.findall(r"^- id: (\S+)$", "\n".join(p.read_text() for p in RULES.rglob("*.yaml")), re.M))
    want = sorted(i for i in every_id if i.startswith("nvml-"))
    assert len(want) >= 2 and candidates == [("plain", i) for i in want]
    assert ("plain", "nvml-driver-library-mismatch") in candidates


def test_rules_show_completes_the_gates_rule_ids_too():
    gate_ids = re.findall(r"^- id: (\S+)$", (RULES / "gate" / "gate.yaml").read_text(), re.M)
    values = {value for _, value in complete("gpudoctor rules show ", 3)}
    assert gate_ids and set(gate_ids) <= values


def _ids(directory: Path) -> set[str]:
    return set(re.findall(r"^- id: (\S+)$", "\n".join(p.read_text() for p in directory.glob("*.yaml")), re.M))


def test_rules_show_completes_the_profile_check_ids():
    values = [value for _, value in complete("gpudoctor rules show profile-", 3)]
    assert values == sorted(f.rule_id for f in FACTS)
    assert ("plain", "profile-gpu-pcie-width") in complete("gpudoctor rules show profile-gpu-pcie-w", 3)


def test_check_only_and_skip_complete_areas_then_check_ids():
    # the areas first, then the ids of the checks `check` runs: its rules and the profile-* checks
    values = [value for _, value in complete("gpudoctor check --only pc", 3)]
    assert values[0] == "pcie"
    assert values[1:] == sorted(i for i in _ids(RULES) if i.startswith("pc"))
    values = [value for _, value in complete("gpudoctor check --skip ", 3)]
    areas = [a for a in AREAS if a != "gate"]  # check does not run the gate's checks
    assert values[: len(areas)] == areas
    assert values[len(areas) :] == sorted(_ids(RULES) | {f.rule_id for f in FACTS})
    assert not _ids(RULES / "gate") & set(values)
    skip = [value for _, value in complete("gpudoctor check --skip profile-n", 3)]
    assert skip == sorted(f.rule_id for f in FACTS if f.rule_id.startswith("profile-n"))
    assert "profile-numa-memory" in skip


def test_an_unknown_prefix_completes_nothing():
    assert complete("gpudoctor rules show no-such-", 3) == []
