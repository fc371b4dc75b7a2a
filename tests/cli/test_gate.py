"""`gpudoctor gate` as job scripts drive it: exit statuses, the first lines of a no-go, the deadline."""

from __future__ import annotations

import json
import time

import pytest

from tests.preflight.helpers import DEGRADED, HEALTHY, NO_DRIVER, THERMAL, cli, hung_nvml_root


@pytest.mark.parametrize("root, status", [(HEALTHY, 0), (DEGRADED, 1), (THERMAL, 1), (NO_DRIVER, 1)])
def test_exit_status_is_the_verdict(capsys, root, status):
    code, out, _ = cli(capsys, "gate", "--root", root)
    assert code == status
    assert out.rstrip().splitlines()[-1].startswith("Verdict: GO" if status == 0 else "Verdict: NO-GO")


def test_no_go_prints_one_line_per_blocking_finding_before_anything_else(capsys):
    code, out, _ = cli(capsys, "gate", "--root", NO_DRIVER)
    lines = out.splitlines()
    blocking = [line for line in lines if line.startswith("NO-GO  ")]
    assert code == 1 and lines[: len(blocking)] == blocking and len(blocking) == 4
    assert blocking[0].startswith("NO-GO  nvidia-driver-not-loaded: ") and "— fix: Load the driver" in blocking[0]
    assert "checks could not be judged" in blocking[-1]


def test_go_prints_no_blocking_line(capsys):
    code, out, _ = cli(capsys, "gate", "--root", HEALTHY, "--expect-gpus", "2", "--expect-model", "H100")
    assert code == 0 and "NO-GO" not in out and "expect 2 GPU(s), model H100" in out


def test_json_on_stdout_stays_json_and_the_lines_go_to_stderr(capsys):
    code, out, err = cli(capsys, "gate", "--root", DEGRADED, "--format", "json")
    data = json.loads(out)
    assert code == 1 and data["exit_code"] == 1 and data["blocking"][0]["rule"] == "pcie-width-degraded"
    assert err.startswith("NO-GO  pcie-width-degraded")


def test_hung_nvml_never_holds_the_gate_past_its_deadline(capsys, tmp_path):
    root = hung_nvml_root(tmp_path)
    started = time.monotonic()
    code, out, _ = cli(capsys, "gate", "--root", root, "--nvml-timeout", "1")
    elapsed = time.monotonic() - started
    assert code == 1 and elapsed < 3.0, elapsed
    first = out.splitlines()[0]
    assert first.startswith("NO-GO  nvml-not-responding: NVML did not answer") and "nvmlInit" in first
    assert "checks could not be judged" in out.splitlines()[1]


def test_hung_nvml_is_go_only_under_an_explicit_fail_open_policy(capsys, tmp_path):
    root = hung_nvml_root(tmp_path)
    policy = tmp_path / "open.yaml"
    policy.write_text("on_cannot_check: fail-open\n")
    started = time.monotonic()
    code, out, _ = cli(capsys, "gate", "--root", root, "--nvml-timeout", "1", "--policy", str(policy))
    assert code == 0 and time.monotonic() - started < 3.0
    assert "Verdict: GO — " in out and "could not be judged (fail-open)" in out
    assert "nvml-not-responding" in out  # still reported


def test_the_whole_run_deadline_caps_nvml(capsys, tmp_path):
    root = hung_nvml_root(tmp_path)
    started = time.monotonic()
    code, out, _ = cli(capsys, "gate", "--root", root, "--nvml-timeout", "10", "--timeout", "1.5")
    # well under NVML's own 10 s: the 1.5 s run deadline cut it (the margin is for a loaded CI machine
    # running tests in parallel, where this took 6.4 s once)
    assert code == 1 and time.monotonic() - started < 8.0
    assert "NVML did not answer" in out


def test_could_not_run_is_exit_2(capsys, tmp_path):
    for args in (
        ["--root", str(tmp_path / "missing")],
        ["--facts", str(tmp_path / "missing.json")],
        ["--root", HEALTHY, "--facts", "x.json"],
        ["--root", HEALTHY, "--fail-on", "info"],
        ["--root", HEALTHY, "--python", str(tmp_path / "no-python")],
        ["--root", HEALTHY, "--rules", str(tmp_path / "no-rules")],
    ):
        code, out, err = cli(capsys, "gate", *args)
        assert code == 2, args
        assert "Traceback" not in out + err


def test_snapshot_is_judged_like_the_root(capsys, tmp_path):
    snap = tmp_path / "host.json"
    cli(capsys, "probe", "--root", DEGRADED, "-o", str(snap))
    code, out, _ = cli(capsys, "gate", "--facts", str(snap))
    assert code == 1 and out.startswith("NO-GO  pcie-width-degraded")


def test_help_documents_what_blocks_and_the_exit_statuses(capsys):
    code, out, _ = cli(capsys, "gate", "--help")
    assert code == 0
    needles = ("fail-closed", "--fail-open", "required", "could not be judged", "no_permission", "not_supported")
    for needle in (*needles, "0  go", "1  no-go", "2  the gate"):
        assert needle in out, needle


def test_verbose_lists_passes(capsys):
    code, out, _ = cli(capsys, "gate", "--root", HEALTHY, "-v")
    assert code == 0 and "pcie-width-degraded" in out and "pass" in out
