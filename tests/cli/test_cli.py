"""The command line as users and job scripts drive it: exit statuses, formats, snapshots, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from gpudoctor.cli.root import run
from gpudoctor.schemas import load_schema
from tests.conftest import HOSTS

HEALTHY = str(HOSTS / "healthy-2gpu")
DEGRADED = str(HOSTS / "pcie-degraded")


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_healthy_host_exits_0_and_reports_every_area(capsys):
    code, out, err = cli(capsys, "check", "--root", HEALTHY)
    assert code == 0, out + err
    for heading in (
        "Driver & CUDA",
        "Torch build",
        "Kernel & OS",
        "NUMA",
        "PCIe",
        "Thermal & clocks",
        "GPU health",
        "Environment",
    ):
        assert heading in out
    assert "Verdict: OK" in out
    assert "\x1b[" not in out  # no colour when not a terminal


def test_failed_check_exits_1_and_names_gpu_and_fix(capsys):
    code, out, _ = cli(capsys, "check", "--root", DEGRADED)
    assert code == 1
    assert "FAIL" in out and "pcie-width-degraded" in out and "0000:9a:00.0" in out
    assert "fix:" in out and "Reseat" in out
    assert "Verdict: FAIL" in out


def test_fail_on_warning_turns_warnings_into_exit_1(capsys):
    base = HOSTS / "healthy-2gpu"
    code, _, _ = cli(capsys, "check", "--root", str(base), "--fail-on", "warning")
    assert code == 0
    code, out, _ = cli(
        capsys,
        "check",
        "--root",
        str(HOSTS / "thermal-slowdown"),
        "--skip",
        "hw-slowdown-active",
        "--fail-on",
        "warning",
    )
    assert code == 1 and "sw-thermal-slowdown" in out
    code, _, _ = cli(capsys, "check", "--root", str(HOSTS / "thermal-slowdown"), "--skip", "hw-slowdown-active")
    assert code == 0


def test_only_and_skip_filter_by_area_tag_and_id(capsys):
    code, out, _ = cli(capsys, "check", "--root", DEGRADED, "--only", "pcie", "--format", "json")
    report = json.loads(out)
    assert {f["area"] for f in report["findings"]} == {"pcie"}
    code, out, _ = cli(capsys, "check", "--root", DEGRADED, "--skip", "pcie-width-degraded")
    assert code == 0
    code, _, err = cli(capsys, "check", "--root", DEGRADED, "--only", "no-such-thing")
    assert code == 2 and "no-such-thing" in err


def test_json_report_validates_against_its_schema(capsys):
    code, out, _ = cli(capsys, "check", "--root", DEGRADED, "--format", "json")
    report = json.loads(out)
    jsonschema.validate(report, load_schema("report"))
    assert report["verdict"] == "fail" and report["exit_code"] == code == 1
    failed = [f for f in report["findings"] if f["status"] == "fail"]
    assert failed[0]["subject"]["bus_id"] == "0000:9a:00.0"
    assert {"fact": "gpu.pcie_width", "value": 8} in failed[0]["evidence"]


def test_probe_snapshot_roundtrip_gives_the_same_verdict(capsys, tmp_path):
    snap = tmp_path / "host.json"
    code, _, _ = cli(capsys, "probe", "--root", DEGRADED, "-o", str(snap))
    assert code == 0
    data = json.loads(snap.read_text())
    jsonschema.validate(data, load_schema("facts"))
    assert data["schema_version"] == 1 and data["gpudoctor_version"]
    _, live, _ = cli(capsys, "check", "--root", DEGRADED, "--format", "json")
    code, offline, _ = cli(capsys, "check", "--facts", str(snap), "--format", "json")
    assert code == 1
    live_report, offline_report = json.loads(live), json.loads(offline)
    # when the facts were read differs (the snapshot was taken first), and says so; all else agrees
    assert offline_report["envelope"].pop("collected_at") == data["meta"]["collected_at"].replace("+00:00", "Z")
    live_report["envelope"].pop("collected_at")
    # as does when each report was made (the two runs may fall in different seconds)
    strip = lambda r: {k: v for k, v in r.items() if k not in ("facts_origin", "generated_at")}  # noqa: E731
    assert strip(live_report) == strip(offline_report)


@pytest.mark.parametrize(
    "content, needle",
    [
        ("", "invalid JSON"),
        ('{"schema_version": 1, "host": ', "invalid JSON"),
        ("[1, 2]", "top level is a list"),
        ('{"hello": 1}', "no schema_version"),
        ('{"schema_version": 99, "gpudoctor_version": "9.0"}', "newer than this gpudoctor"),
        ('{"schema_version": "1"}', "must be an integer"),
        ('{"schema_version": 1, "gpudoctor_version": "0.1.0"}', "facts schema"),
    ],
)
def test_bad_snapshot_exits_2_with_a_clear_message(capsys, tmp_path, content, needle):
    snap = tmp_path / "bad.json"
    snap.write_text(content)
    code, out, err = cli(capsys, "check", "--facts", str(snap))
    assert code == 2
    assert needle in err and "Traceback" not in err + out


def test_wrong_type_in_snapshot_is_refused(capsys, tmp_path):
    snap = tmp_path / "host.json"
    cli(capsys, "probe", "--root", HEALTHY, "-o", str(snap))
    data = json.loads(snap.read_text())
    data["nvml"]["gpus"][0]["pcie_width"] = "sixteen"
    snap.write_text(json.dumps(data))
    code, _, err = cli(capsys, "check", "--facts", str(snap))
    assert code == 2 and "pcie_width" in err


def test_missing_root_and_missing_snapshot_exit_2(capsys, tmp_path):
    code, _, err = cli(capsys, "check", "--root", str(tmp_path / "nope"))
    assert code == 2 and "no such directory" in err
    code, _, err = cli(capsys, "check", "--facts", str(tmp_path / "nope.json"))
    assert code == 2 and "no such file" in err
    code, _, err = cli(capsys, "check", "--bogus-flag")
    assert code == 2


def test_bad_rules_dir_exits_2_naming_file_and_line(capsys, tmp_path):
    (tmp_path / "r.yaml").write_text(
        "- id: x\n  title: title\n  area: pcie\n  severity: error\n  fail_if: gpu.nope\n"
        "  subject: gpu\n  message: m\n  fix: f\n  why: w\n  refs: [r]\n"
    )
    code, _, err = cli(capsys, "check", "--root", HEALTHY, "--rules", str(tmp_path))
    assert code == 2
    assert f"{tmp_path / 'r.yaml'}:1" in err and "unknown fact gpu.nope" in err


def test_rules_list_show_validate(capsys, tmp_path):
    code, out, _ = cli(capsys, "rules", "list", "--format", "json")
    rules = json.loads(out)
    assert code == 0 and len(rules) >= 18
    assert {"id", "area", "severity", "fix", "why", "refs"} <= set(rules[0])
    code, out, _ = cli(capsys, "rules", "show", "pcie-width-degraded")
    assert code == 0 and "Why it matters" in out and "gpu.pcie_width" in out
    code, _, err = cli(capsys, "rules", "show", "pcie-width-degradd")
    assert code == 2 and "did you mean pcie-width-degraded" in err
    code, out, _ = cli(capsys, "rules", "validate", "rules")
    assert code == 0 and "OK" in out
    (tmp_path / "bad.yaml").write_text("- id: x\n")
    code, _, err = cli(capsys, "rules", "validate", str(tmp_path / "bad.yaml"))
    assert code == 2 and "bad.yaml" in err


def test_output_file_is_written_and_exit_status_kept(capsys, tmp_path):
    out_file = tmp_path / "report.json"
    code, out, _ = cli(capsys, "check", "--root", DEGRADED, "--format", "json", "-o", str(out_file))
    assert code == 1 and out == ""
    assert json.loads(out_file.read_text())["verdict"] == "fail"


def test_python_m_gpudoctor_works_in_a_subprocess():
    proc = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "check", "--root", HEALTHY, "--only", "pcie"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "PCIe" in proc.stdout


def test_probe_scrub_replaces_identifying_values(capsys, tmp_path):
    snap = tmp_path / "host.json"
    code, _, _ = cli(capsys, "probe", "--root", HEALTHY, "--scrub", "-o", str(snap))
    assert code == 0
    data = json.loads(snap.read_text())
    assert data["host"]["hostname"] == "gpu-host"
    uuids = [g["uuid"] for g in data["nvml"]["gpus"]]
    assert uuids == ["GPU-00000000-0000-0000-0000-000000000000", "GPU-00000000-0000-0000-0000-000000000001"]
    assert all(g["serial"].startswith("SCRUBBED") for g in data["nvml"]["gpus"])
    code, _, _ = cli(capsys, "check", "--facts", str(snap))
    assert code == 0


def test_real_h200_snapshot_judged_offline_has_no_failures(capsys):
    """The snapshot taken by `gpudoctor probe --scrub` on a healthy 2 x H200 host."""
    snap = Path(__file__).resolve().parents[1] / "fixtures" / "snapshots" / "h200-x2.json"
    code, out, _ = cli(capsys, "check", "--facts", str(snap), "--format", "json")
    report = json.loads(out)
    assert code == 0 and report["summary"]["fail"] == 0
    unknown = [f for f in report["findings"] if f["status"] == "unknown"]
    assert unknown == []
    gpus = {f["subject"]["bus_id"] for f in report["findings"] if f["subject"]["kind"] == "gpu"}
    assert gpus == {"0000:00:06.0", "0000:00:07.0"}


def test_hung_nvml_is_reported_on_time_and_fails_the_check(capsys, tmp_path):
    """An NVML that never returns (a GPU fallen off the bus) must not hold gpudoctor past its deadline."""
    import shutil
    import time

    root = tmp_path / "host"
    shutil.copytree(HOSTS / "healthy-2gpu", root, symlinks=True)
    (root / "nvml.json").write_text(json.dumps({"format": 1, "init": {"hang": True}, "system": {}, "devices": []}))
    started = time.monotonic()
    code, out, _ = cli(capsys, "check", "--root", str(root), "--nvml-timeout", "1", "--timeout", "5")
    elapsed = time.monotonic() - started
    assert elapsed < 3.0, elapsed
    assert code == 1
    assert "nvml-not-responding" in out and "did not answer" in out


def test_rule_pack_from_an_entry_point_loads_like_rules_dir(tmp_path, monkeypatch):
    from gpudoctor.engine.loader import load_rules

    pkg = tmp_path / "site" / "acme_rules"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "acme.yaml").write_text(
        "- id: acme-flag\n  title: ACME flag set\n  area: env\n  severity: info\n"
        '  fail_if: host.env.ACME == "1"\n  message: ACME is set\n  fix: unset ACME\n'
        "  why: ACME clusters need it off\n  refs: [internal]\n"
    )
    dist = tmp_path / "site" / "acme_rules-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-rules\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[gpudoctor.rules]\nacme = acme_rules\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    ruleset = load_rules()
    rule = ruleset.by_id("acme-flag")
    assert rule is not None and rule.source.endswith("acme.yaml")


def test_console_entry_probes_the_live_machine_with_nvml_started_before_parsing():
    # `python -m gpudoctor check` forks NVML's child before click parses the command line; the
    # live probe adopts it: the report is complete and NVML's section is the one a probe reads.
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "probe"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout)
    assert facts["meta"]["probes"]["nvml"]["status"] == "ok"
    assert facts["nvml"]["status"] in ("ok", "library_not_found", "driver_not_loaded", "error")
    # a command that stops before probing leaves no NVML child behind and says why in one line
    proc = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "check", "--only", "no-such-check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("gpudoctor: error: --only/--skip")


def test_a_finding_says_where_its_rule_is_explained(capsys, tmp_path):
    code, out, _ = cli(capsys, "check", "--root", DEGRADED, "--format", "json")
    finding = next(f for f in json.loads(out)["findings"] if f["rule"] == "pcie-width-degraded")
    assert finding["docs"] == "docs/rules.md#pcie-width-degraded"
    assert "### pcie-width-degraded" in (Path(__file__).parents[2] / "docs/rules.md").read_text(encoding="utf-8")
    from gpudoctor.engine.loader import load_rules

    assert finding["refs"] == list(load_rules().by_id("pcie-width-degraded").refs)
    code, out, _ = cli(capsys, "check", "--root", DEGRADED)
    assert (
        out.rstrip().splitlines()[-1]
        == "More on a check: gpudoctor rules show pcie-width-degraded; every check: docs/rules.md"
    )
    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "mine.yaml").write_text(
        "- id: my-check\n  title: A check of mine\n  area: env\n  severity: error\n  fail_if: 'True'\n"
        "  message: mine\n  fix: nothing\n  why: tested\n  refs: [here]\n",
        encoding="utf-8",
    )
    code, out, _ = cli(
        capsys, "check", "--root", DEGRADED, "--rules", str(pack), "--only", "my-check", "--format", "json"
    )
    mine = json.loads(out)["findings"][0]
    assert (mine["docs"], mine["refs"]) == ("", ["here"])  # not in docs/rules.md: no link there
