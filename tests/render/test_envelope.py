"""The report envelope: one object saying which machine, when, which GPUs and which versions, the
same in the check report and the gate report."""

from __future__ import annotations

import json

import pytest

from gpudoctor import __version__
from gpudoctor.engine.loader import load_rules
from gpudoctor.engine.runner import run_rules
from gpudoctor.facts import Unavailable
from gpudoctor.findings import Report
from gpudoctor.preflight.policy import Policy
from gpudoctor.preflight.verdict import judge
from gpudoctor.render import gate_json, json_report
from gpudoctor.render.envelope import MAX_GPUS, envelope, utc_stamp
from gpudoctor.schemas import validate
from tests.conftest import SNAPSHOTS, probed
from tests.preflight.helpers import cli, ruleset

RULES = load_rules(include_plugins=False)


def test_the_envelope_names_host_time_gpus_and_versions():
    env = envelope(probed("healthy-2gpu"))
    assert env["host"] == {"hostname": "gpu-node-01", "os": "Ubuntu 22.04.4 LTS", "kernel": "5.15.0-105-generic"}
    assert env["collected_at"] == "2026-12-01T12:00:00Z"
    assert [(g["index"], g["name"], g["bus_id"]) for g in env["gpus"]] == [
        (0, "NVIDIA H100 80GB HBM3", "0000:18:00.0"),
        (1, "NVIDIA H100 80GB HBM3", "0000:9a:00.0"),
    ]
    assert all(isinstance(g["uuid"], str) and g["uuid"].startswith("GPU-") for g in env["gpus"])
    assert env["versions"] == {"gpudoctor": __version__, "driver": "550.90.07", "cuda": "12.4", "torch": "2.4.1+cu121"}


def test_check_and_gate_reports_carry_the_same_envelope():
    facts = probed("pcie-degraded")
    check = json_report.to_dict(Report(findings=run_rules(RULES, facts)), facts)
    gate = gate_json.report_json(judge(facts, ruleset(), Policy()))
    assert check["envelope"] == gate["envelope"] == envelope(facts)
    assert validate("report", check) is None and validate("gate-report", gate) is None


def test_the_check_report_names_host_time_and_gpus_like_the_gate_report():
    # a dashboard reading either report finds the hostname, the time and each GPU's row in one place
    facts = probed("nvlink-down-8gpu")
    check = json_report.to_dict(Report(findings=run_rules(RULES, facts), generated_epoch=1796126400.0), facts)
    gate = gate_json.report_json(judge(facts, ruleset(), Policy()))
    assert check["hostname"] == gate["hostname"] == facts["host"]["hostname"]
    assert check["generated_at"] == "2026-12-01T12:00:00Z"
    assert [g["bus_id"] for g in check["gpus"]] == [g["bus_id"] for g in gate["gpus"]]
    assert len(check["gpus"]) == 8 and all(set(g) == set(gate["gpus"][0]) for g in check["gpus"])
    blocked = [g for g in check["gpus"] if g["blocking"]]
    assert blocked and all("nvlink-links-below-spec" in g["failed_checks"] for g in blocked)
    assert validate("report", check) is None


def test_without_nvml_the_gpus_on_pci_are_listed_unnamed():
    env = envelope(probed("no-driver"))
    assert env["gpus"] == [{"index": None, "name": None, "bus_id": "0000:01:00.0", "uuid": None}]
    assert env["versions"]["driver"] is None and env["versions"]["cuda"] is None


def test_unknown_or_odd_values_are_null():
    facts = probed("healthy-2gpu")
    facts["host"]["hostname"] = Unavailable("error", "no hostname")
    facts["host"]["os_name"] = 42
    facts["torch"]["installed"] = False
    facts["meta"]["collected_at"] = "yesterday"
    env = envelope(facts)
    assert env["host"]["hostname"] is None and env["host"]["os"] is None
    assert env["versions"]["torch"] is None and env["collected_at"] is None
    del facts["meta"]
    assert envelope(facts)["collected_at"] is None


@pytest.mark.parametrize(
    "text, stamp",
    [
        ("2026-11-30T15:16:37+00:00", "2026-11-30T15:16:37Z"),
        ("2026-12-01T12:00:00Z", "2026-12-01T12:00:00Z"),
        ("2026-12-01T13:30:00.500+01:30", "2026-12-01T12:00:00Z"),
        ("2026-12-01T12:00:00", None),  # no zone: not comparable with the others
        ("9" * 100_000, None),
        (None, None),
    ],
)
def test_collected_at_is_utc_or_null(text, stamp):
    assert utc_stamp(text) == stamp


def test_a_snapshot_with_more_gpus_than_any_machine_gives_a_bounded_list():
    facts = probed("healthy-2gpu")
    facts["pci"]["devices"] = [
        {"bus_id": f"0001:{i // 256:02x}:{i % 256 // 8:02x}.{i % 8}", "kind": "gpu", "vendor": "nvidia"}
        for i in range(MAX_GPUS + 10)
    ]
    facts["nvml"]["gpus"] = []
    assert len(envelope(facts)["gpus"]) == MAX_GPUS


def test_the_check_command_writes_the_envelope(capsys):
    code, out, _ = cli(capsys, "check", "--facts", str(SNAPSHOTS / "h200-x2.json"), "--format", "json")
    env = json.loads(out)["envelope"]
    assert env["host"]["hostname"] == "gpu-host" and env["collected_at"] == "2026-11-30T15:16:37Z"
    assert [g["name"] for g in env["gpus"]] == ["NVIDIA H200", "NVIDIA H200"]
    assert env["versions"]["driver"] == "580.159.04" and env["versions"]["torch"] == "2.11.0+cu130"
