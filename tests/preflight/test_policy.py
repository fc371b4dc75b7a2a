"""Policy files: validation with file and line, defaults, and command line over file over defaults."""

from __future__ import annotations

import json

import pytest

from gpudoctor.findings import Severity
from gpudoctor.preflight.checks import check_selectors
from gpudoctor.preflight.errors import PolicyError
from gpudoctor.preflight.policy import Policy, load_policy, policy_from_mapping
from tests.preflight.helpers import HEALTHY, cli, ruleset, write_policy

FULL = """\
version: 1
expect:
  gpus: 8
  model: H100
  min_free_memory_gib: 70.5
  nics: 8
  nic_rate_gbps: 400
  nvlink_links: 18
fail_on: warning
on_cannot_check: fail-open
required: [pcie-width-degraded, health]
ignore: [persistence-mode-off]
deadline_s: 45
deep:
  enabled: true
  memory_mib: 512
distributed:
  min_busbw_gbps: 100
  allreduce_mib: 128
  iterations: 10
"""


def test_every_key_of_a_policy_file_is_read(tmp_path):
    p = load_policy(write_policy(tmp_path, FULL))
    assert (p.expect_gpus, p.expect_model, p.min_free_memory_gib) == (8, "H100", 70.5)
    assert (p.expect_nics, p.nic_rate_gbps, p.nvlink_links) == (8, 400.0, 18)
    assert p.fail_on is Severity.WARNING and not p.fail_closed and p.on_cannot_check == "fail-open"
    assert p.required == ("pcie-width-degraded", "health") and p.ignore == ("persistence-mode-off",)
    assert p.deadline_s == 45 and p.deep and p.deep_memory_mib == 512
    assert (p.min_busbw_gbps, p.allreduce_mib, p.allreduce_iterations) == (100, 128, 10)
    assert p.source.endswith("policy.yaml")


def test_empty_policy_file_means_the_defaults(tmp_path):
    p = load_policy(write_policy(tmp_path, "# nothing yet\n"))
    assert p.fail_on is Severity.ERROR and p.fail_closed and p.deadline_s == 30 and p.expect_gpus is None
    assert Policy().on_cannot_check == "fail-closed"


@pytest.mark.parametrize(
    "text, line, needle",
    [
        ("version: 1\nexpect:\n  gpu: 8\n", 3, "gpu"),  # typo in a key
        ("expect:\n  gpus: eight\n", None, "gpus"),
        ("fail_on: info\n", None, "fail_on"),
        ("on_cannot_check: maybe\n", None, "on_cannot_check"),
        ("deadline_s: 0\n", None, "deadline_s"),
        ("version: 2\n", None, "version"),
        ("required: pcie\n", None, "required"),
        ("expect:\n  gpus: 2\n  gpus: 3\n", 3, "duplicate key"),
        ("version: 1\nexpect:\n  gpus: 8\n  nics: -1\n", 3, "expect.nics"),  # the line of its mapping
        ("expect:\n  nic_rate_gbps: 0\n", 2, "nic_rate_gbps"),
        ("expect:\n  nvlink_links: eighteen\n", 2, "nvlink_links"),
        ("expect:\n  nic: 8\n", 2, "nic"),
        ("expect: [1, 2\n", None, "YAML error"),
        ("- just\n- a list\n", None, "mapping"),
    ],
)
def test_bad_policy_is_refused_naming_the_file_and_problem(tmp_path, text, line, needle):
    path = write_policy(tmp_path, text)
    with pytest.raises(PolicyError) as exc:
        load_policy(path)
    message = str(exc.value)
    assert message.startswith(path) and needle in message
    if line is not None:
        assert f"{path}:{line}:" in message


def test_bad_policy_on_the_command_line_exits_2_without_traceback(capsys, tmp_path):
    path = write_policy(tmp_path, "expect:\n  gpu: 8\n")
    code, out, err = cli(capsys, "gate", "--root", HEALTHY, "--policy", path)
    assert code == 2 and path in err and "gpu" in err and "Traceback" not in out + err
    code, _, err = cli(capsys, "gate", "--root", HEALTHY, "--policy", str(tmp_path / "missing.yaml"))
    assert code == 2 and "missing.yaml: no such file" in err


def test_selectors_must_name_a_rule_area_tag_or_gate_check():
    check_selectors(Policy(required=("pcie", "hardware", "gpu-lost"), ignore=("gate-deep-p2p",)), ruleset())
    with pytest.raises(PolicyError, match="did you mean pcie-width-degraded"):
        check_selectors(Policy(ignore=("pcie-width-degradd",)), ruleset())
    with pytest.raises(PolicyError, match="needs expect.gpus"):
        check_selectors(Policy(required=("gate-gpu-count",)), ruleset())
    for check, setting in (
        ("gate-nic-count", "expect.nics"),
        ("gate-nic-rate", "expect.nic_rate_gbps"),
        ("gate-nvlink-links", "expect.nvlink_links"),
    ):
        with pytest.raises(PolicyError, match=f"needs {setting}"):
            check_selectors(Policy(required=(check,)), ruleset())
    check_selectors(Policy(required=("gate-nic-rate",), nic_rate_gbps=400.0), ruleset())
    with pytest.raises(PolicyError, match="needs the device test"):
        check_selectors(Policy(required=("deep",)), ruleset())
    check_selectors(Policy(required=("gate-gpu-count",), expect_gpus=2), ruleset())


def test_override_keeps_unset_values_and_merges_lists():
    base = policy_from_mapping({"expect": {"gpus": 8}, "required": ["pcie"], "fail_on": "warning"}, "p.yaml")
    p = base.override(expect_gpus=None, expect_model="H200", required=("health",), fail_on=None)
    assert p.expect_gpus == 8 and p.expect_model == "H200" and p.fail_on is Severity.WARNING
    assert p.required == ("pcie", "health")
    assert base.override(fail_closed=False).on_cannot_check == "fail-open"


def _policy_of(capsys, *args: str) -> dict:
    code, out, _ = cli(capsys, "gate", "--root", HEALTHY, "--format", "json", *args)
    assert code in (0, 1)
    return json.loads(out)


def test_command_line_flags_override_the_policy_file(capsys, tmp_path):
    path = write_policy(tmp_path, "expect:\n  gpus: 4\nfail_on: warning\ndeadline_s: 12\non_cannot_check: fail-open\n")
    from_file = _policy_of(capsys, "--policy", path)
    assert from_file["verdict"] == "no-go"  # the file expects 4 GPUs; the host has 2
    assert from_file["policy"]["expect"]["gpus"] == 4 and from_file["policy"]["deadline_s"] == 12
    assert from_file["policy"]["fail_on"] == "warning" and from_file["policy"]["on_cannot_check"] == "fail-open"
    flags = _policy_of(
        capsys, "--policy", path, "--expect-gpus", "2", "--fail-on", "error", "--timeout", "20", "--fail-closed"
    )
    assert flags["verdict"] == "go" and flags["policy"]["expect"]["gpus"] == 2
    assert flags["policy"]["fail_on"] == "error" and flags["policy"]["deadline_s"] == 20
    assert flags["policy"]["on_cannot_check"] == "fail-closed"


def test_nic_and_nvlink_flags_override_the_policy_file(capsys, tmp_path):
    path = write_policy(tmp_path, "expect:\n  nics: 4\n  nic_rate_gbps: 400\n  nvlink_links: 12\n")
    from_file = _policy_of(capsys, "--policy", path)["policy"]["expect"]
    assert (from_file["nics"], from_file["nic_rate_gbps"], from_file["nvlink_links"]) == (4, 400, 12)
    flags = _policy_of(
        capsys, "--policy", path, "--expect-nics", "1", "--min-nic-rate", "200", "--min-nvlink-links", "18"
    )
    assert flags["verdict"] == "go"  # healthy-2gpu: one ConnectX-6 port at 200 Gb/s, 18 links per GPU
    assert (flags["policy"]["expect"]["nics"], flags["policy"]["expect"]["nvlink_links"]) == (1, 18)
    gate = {f["rule"]: f["status"] for f in flags["findings"] if f["area"] == "gate"}
    assert gate == {"gate-nic-count": "pass", "gate-nic-rate": "pass", "gate-nvlink-links": "pass"}
    for bad in (("--min-nic-rate", "nan"), ("--min-nic-rate", "0"), ("--expect-nics", "-1"),
                ("--min-nvlink-links", "65")):
        code, _, err = cli(capsys, "gate", "--root", HEALTHY, *bad)
        assert code == 2 and bad[0] in err


def test_default_timeout_does_not_override_the_policy_deadline(capsys, tmp_path):
    path = write_policy(tmp_path, "deadline_s: 12\n")
    assert _policy_of(capsys, "--policy", path)["policy"]["deadline_s"] == 12
    assert _policy_of(capsys)["policy"]["deadline_s"] == 30


def test_require_and_ignore_on_the_command_line(capsys):
    report = _policy_of(capsys, "--ignore", "pcie", "--require", "gpu-lost")
    assert not [f for f in report["findings"] if f["area"] == "pcie"]
    assert report["policy"]["required"] == ["gpu-lost"] and report["policy"]["ignore"] == ["pcie"]
    code, _, err = cli(capsys, "gate", "--root", HEALTHY, "--ignore", "no-such-check")
    assert code == 2 and "no-such-check" in err
