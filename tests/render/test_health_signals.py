"""Health signals for schedulers: the per-GPU gpudoctor_gpu_health gauge and the Node Problem
Detector custom plugin answer of `gate --npd`."""

from __future__ import annotations

import copy
import json

from gpudoctor.findings import Status
from gpudoctor.preflight.policy import Policy
from gpudoctor.preflight.verdict import judge
from gpudoctor.render import npd, prometheus
from tests.preflight.helpers import DEGRADED, HEALTHY, NO_DRIVER, cli, facts, ruleset, write_policy
from tests.render.test_gate_outputs import parse, report_of, unknown_report

# --- gpudoctor_gpu_health -------------------------------------------------------------------------


def _health(report) -> dict[str, dict]:
    samples = parse(prometheus.render(report))["gpudoctor_gpu_health"]
    return {s.labels["gpu"]: {**s.labels, "value": s.value} for s in samples}


def test_gpu_health_names_the_blocking_check_and_its_action():
    health = _health(report_of("pcie-degraded"))
    assert health["0"]["value"] == 1 and health["0"]["check"] == "" and health["0"]["action"] == ""
    assert health["1"]["value"] == 0
    assert health["1"]["check"] == "pcie-width-degraded" and health["1"]["action"] == "drain-and-inspect-hardware"
    # the GPU labels are dcgm-exporter's, as on the other per-GPU metrics
    assert health["1"]["UUID"] == "GPU-00000000-0000-0000-0000-000000000001"
    assert health["1"]["pci_bus_id"] == "00000000:9A:00.0" and health["1"]["device"] == "nvidia1"


def test_gpu_health_of_a_gpu_with_several_blocking_checks_names_the_most_drastic():
    data = copy.deepcopy(facts("pcie-degraded"))
    data["nvml"]["gpus"][1]["remapped_rows_pending"] = True  # reset-gpu, beside the x8 link (hardware)
    data["nvml"]["gpus"][0]["remapped_rows_pending"] = True
    report = judge(data, ruleset(), Policy())
    health = _health(report)
    assert health["1"]["check"] == "pcie-width-degraded" and health["1"]["action"] == "drain-and-inspect-hardware"
    assert health["0"]["value"] == 0
    assert health["0"]["check"] == "remapped-rows-pending" and health["0"]["action"] == "reset-gpu"


def test_gpu_health_of_a_check_that_could_not_be_judged_has_no_action():
    health = _health(unknown_report(fail_closed=True))
    assert health["1"]["value"] == 0 and health["1"]["check"] == "pcie-width-degraded" and health["1"]["action"] == ""
    assert _health(unknown_report(fail_closed=False))["1"]["value"] == 1  # fail-open: it does not block


# --- the NPD answer ---------------------------------------------------------------------------------


def test_npd_go_problem_and_unknown():
    assert npd.render(report_of("healthy-2gpu"))[0] == npd.NPD_OK
    status, line = npd.render(report_of("pcie-degraded"))
    assert status == npd.NPD_PROBLEM
    # what NPD's default max_output_length (80) keeps says the check and the action
    assert line[:80].startswith("no-go: pcie-width-degraded, action drain-and-inspect-hardware: GPU 1")
    status, line = npd.render(unknown_report(fail_closed=True))
    assert status == npd.NPD_UNKNOWN and line.startswith("cannot judge: ")
    assert npd.render(unknown_report(fail_closed=False))[0] == npd.NPD_OK


def test_npd_line_is_one_bounded_ascii_line():
    line = npd.one_line("GPU 0\n\x1b[31mfell off\tthe bus \u2194 " + "x" * 1000)
    assert "\n" not in line and "\x1b" not in line and line.isascii()
    assert len(line) == npd.MAX_REASON_CHARS and line.endswith("...")
    assert line.startswith("GPU 0 \\x1b[31mfell off the bus \\u2194 x")


def test_gate_npd_prints_only_the_line_and_exits_with_the_npd_status(capsys, tmp_path):
    code, out, err = cli(capsys, "gate", "--root", HEALTHY, "--npd")
    assert code == 0 and out.startswith("go: ") and out.count("\n") == 1
    code, out, err = cli(capsys, "gate", "--root", DEGRADED, "--npd")
    assert code == 1 and out.startswith("no-go: pcie-width-degraded") and out.count("\n") == 1
    assert err.startswith("NO-GO  pcie-width-degraded")  # the full lines, for NPD's log
    code, out, _ = cli(capsys, "gate", "--root", NO_DRIVER, "--npd")
    assert code == 1 and out.startswith("no-go: nvidia-driver-not-loaded on host, action fix-software (+")


def test_gate_npd_that_cannot_run_is_unknown_with_its_reason_on_stdout(capsys, tmp_path):
    bad = write_policy(tmp_path, "fail_on: sometimes\n")
    code, out, err = cli(capsys, "gate", "--root", HEALTHY, "--npd", "--policy", bad)
    assert code == npd.NPD_UNKNOWN and out.startswith("could not run: ") and out.count("\n") == 1 and not err
    code, out, _ = cli(capsys, "gate", "--root", HEALTHY, "--npd", "--format", "json")
    assert code == npd.NPD_UNKNOWN and "--npd" in out


def test_gate_npd_still_writes_the_files_asked_for(capsys, tmp_path):
    path = tmp_path / "gate.json"
    code, out, _ = cli(capsys, "gate", "--root", DEGRADED, "--npd", "--json", str(path))
    assert code == 1 and out.startswith("no-go: ")
    data = json.loads(path.read_text())
    failed = [f for f in data["findings"] if f["status"] == Status.FAIL.value]
    assert [(f["rule"], f["recommended_action"]) for f in failed] == [
        ("pcie-width-degraded", "drain-and-inspect-hardware")
    ]


# --- the sample Node Problem Detector configuration ----------------------------------------------

# The fields of NPD's custom plugin monitor configuration (kubernetes/node-problem-detector,
# pkg/custompluginmonitor/types/config.go CustomPluginConfig and pluginGlobalConfig, types.go
# CustomRule, pkg/types Condition): a key NPD does not know would be silently ignored.
NPD_TOP = {"plugin", "pluginConfig", "source", "conditions", "rules", "metricsReporting"}
NPD_PLUGIN_CONFIG = {
    "invoke_interval",
    "timeout",
    "max_output_length",
    "concurrency",
    "enable_message_change_based_condition_update",
    "skip_initial_status",
}
NPD_RULE = {"type", "condition", "reason", "path", "args", "timeout", "invoke_interval"}


def _seconds(duration: str) -> int:
    assert duration.endswith("s") and duration[:-1].isdigit(), duration
    return int(duration[:-1])


def test_sample_npd_config_is_in_npds_format_and_runs_the_gate(capsys):
    from pathlib import Path

    config = json.loads((Path(__file__).parents[2] / "scripts/k8s/npd-gpudoctor-monitor.json").read_text())
    assert set(config) <= NPD_TOP and config["plugin"] == "custom"
    assert set(config["pluginConfig"]) <= NPD_PLUGIN_CONFIG
    # NPD keeps max_output_length bytes of the line: all of it here
    assert config["pluginConfig"]["max_output_length"] >= npd.MAX_REASON_CHARS
    (rule,) = config["rules"]
    assert set(rule) <= NPD_RULE and rule["type"] == "permanent"
    # NPD refuses a rule timeout above the global one; a permanent rule needs its default condition
    assert _seconds(rule["timeout"]) <= _seconds(config["pluginConfig"]["timeout"])
    assert rule["condition"] in {c["type"] for c in config["conditions"]}
    args = rule["args"]
    assert args[:2] == ["gate", "--npd"] and rule["path"].endswith("/gpudoctor")
    # the gate's own deadline ends it before NPD kills it, so NPD gets the gate's answer
    assert float(args[args.index("--timeout") + 1]) < _seconds(rule["timeout"])
    code, out, _ = cli(capsys, *args, "--root", HEALTHY)
    assert code == npd.NPD_OK and out.startswith("go: ")
