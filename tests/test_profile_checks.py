"""The node profile's checks are first-class: `rules list`/`show`, docs/rules.md, --only/--skip,
the policy's required/ignore and recommended_action know the profile-* ids (model/profile_facts.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpudoctor.findings import ACTIONS
from gpudoctor.model.profile_facts import FACTS
from tests.preflight.helpers import cli

FLEET = Path(__file__).resolve().parent / "fixtures" / "fleet" / "snapshots"
RULES_DOC = Path(__file__).resolve().parents[1] / "docs" / "rules.md"


@pytest.fixture
def profile(tmp_path, capsys):
    path = tmp_path / "fleet.yaml"
    good = [str(FLEET / f"node-0{n}.json") for n in (1, 2, 3)]
    assert cli(capsys, "profile", "create", *good, "-o", str(path))[0] == 0
    return path


def _profile_findings(report: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for f in json.loads(report)["findings"]:
        if f["rule"].startswith("profile-"):
            out.setdefault(f["rule"], []).append(f)
    return out


def test_every_profile_check_has_a_unique_id_an_action_and_words():
    ids = [f.rule_id for f in FACTS]
    assert len(set(ids)) == len(ids)
    for fact in FACTS:
        assert fact.action in ACTIONS and fact.action != "none"
        assert fact.why and fact.tag
    assert {f.action for f in FACTS if f.key in ("driver", "cuda", "torch")} == {"fix-software"}


def test_rules_list_and_show_know_the_profile_checks(capsys):
    code, text, _ = cli(capsys, "rules", "list")
    assert code == 0
    block = text[text.index("Node profile\n") :]
    assert "profile-gpu-pcie-width" in block and "profile-driver" in block
    assert f"and {len(FACTS)} node profile checks" in " ".join(text.split())
    code, listed, _ = cli(capsys, "rules", "list", "--format", "json")
    entries = {r["id"]: r for r in json.loads(listed)}
    assert entries["profile-driver"]["action"] == "fix-software"
    assert entries["profile-nic-rate"]["subject"] == "nic" and entries["profile-nic-rate"]["tags"] == ["rdma"]
    code, shown, _ = cli(capsys, "rules", "show", "profile-gpu-pcie-width")
    assert code == 0
    assert "On failure:    recommends drain-and-inspect-hardware" in shown
    assert "reduced-lane SKU" in shown
    code, _, err = cli(capsys, "rules", "show", "profile-gpu-pcie-widht")
    assert code == 2 and "did you mean profile-gpu-pcie-width" in err


def test_docs_explain_every_profile_check():
    doc = RULES_DOC.read_text()
    for fact in FACTS:
        assert f"### {fact.rule_id}\n" in doc
        assert f"| [{fact.rule_id}](#{fact.rule_id}) | {fact.severity.value} | {fact.action} |" in doc
    # the one with a tolerance says so where it says when it fails
    assert "inside its range, give or take 2 % of the profile's value, at least 1 GiB" in doc


def test_rules_list_and_show_give_each_profile_checks_severity_and_tolerance(capsys):
    code, listed, _ = cli(capsys, "rules", "list", "--format", "json")
    entries = {r["id"]: r for r in json.loads(listed)}
    assert {i: entries[i]["severity"] for i in ("profile-numa-memory", "profile-driver")} == {
        "profile-numa-memory": "warning",
        "profile-driver": "error",
    }
    assert entries["profile-numa-memory"]["fail_if"].endswith("give or take 2 % of the profile's value, at least 1 GiB")
    code, shown, _ = cli(capsys, "rules", "show", "profile-numa-memory")
    assert "severity: warning" in shown and "at least 1 GiB" in " ".join(shown.split())


def test_failed_profile_checks_recommend_their_action(profile, capsys):
    for node, rule, action in (
        ("node-07", "profile-driver", "fix-software"),
        ("node-12", "profile-gpu-pcie-width", "drain-and-inspect-hardware"),
    ):
        code, report, _ = cli(
            capsys, "check", "--facts", str(FLEET / f"{node}.json"), "--profile", str(profile), "--format", "json"
        )
        failed = [f for fs in _profile_findings(report).values() for f in fs if f["status"] == "fail"]
        assert [(f["rule"], f["recommended_action"]) for f in failed] == [(rule, action)]
        assert failed[0]["docs"] == f"docs/rules.md#{rule}"


def test_only_and_skip_choose_profile_checks(profile, capsys):
    node = str(FLEET / "node-12.json")
    code, report, _ = cli(capsys, "check", "--facts", node, "--profile", str(profile), "--format", "json")
    assert code == 1
    every = _profile_findings(report)
    assert "profile-gpu-pcie-width" in every and "profile-driver" in every
    # by id: the failing check left out, the node passes what is left of its profile
    code, report, _ = cli(
        capsys, "check", "--facts", node, "--profile", str(profile), "--skip", "profile-gpu-pcie-width",
        "--skip", "pcie-width-degraded", "--format", "json",
    )  # fmt: skip
    assert code == 0 and "profile-gpu-pcie-width" not in _profile_findings(report)
    # by tag: --only pcie keeps the PCIe rules and the profile's PCIe checks only
    code, report, _ = cli(
        capsys, "check", "--facts", node, "--profile", str(profile), "--only", "pcie", "--format", "json"
    )
    assert set(_profile_findings(report)) == {"profile-gpu-pcie-gen", "profile-gpu-pcie-width"}
    # by area: --skip profile drops them all
    code, report, _ = cli(
        capsys, "check", "--facts", node, "--profile", str(profile), "--skip", "profile", "--format", "json"
    )
    assert _profile_findings(report) == {}
    code, _, err = cli(capsys, "check", "--facts", node, "--only", "profile-drivr")
    assert code == 2 and "profile-drivr" in err


def test_policy_ignores_and_requires_profile_checks(profile, tmp_path, capsys):
    node07 = str(FLEET / "node-07.json")
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"profile: {profile}\nignore: [profile-driver]\n")
    target = tmp_path / "gate.json"
    code, _, _ = cli(capsys, "gate", "--facts", node07, "--policy", str(policy), "--json", str(target))
    report = json.loads(target.read_text())
    assert "profile-driver" not in [f["rule"] for f in report["findings"]]
    assert "profile-driver" not in [b["rule"] for b in report["blocking"]]
    # required without a profile to judge by is refused when the policy is read
    policy.write_text("required: [profile-gpu-pcie-width]\n")
    code, out, err = cli(capsys, "gate", "--facts", node07, "--policy", str(policy))
    assert code == 2 and "needs a node profile" in err
    policy.write_text(f"profile: {profile}\nrequired: [profile-driver]\n")
    code, _, _ = cli(capsys, "gate", "--facts", node07, "--policy", str(policy), "--json", str(target))
    assert code == 1 and [b["rule"] for b in json.loads(target.read_text())["blocking"]] == ["profile-driver"]
