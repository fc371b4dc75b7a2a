"""Machine outputs of the gate, each checked by its own schema or parser, and written atomically."""

from __future__ import annotations

import copy
import json
import re
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone

import jsonschema
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpudoctor.facts import Unavailable
from gpudoctor.findings import Finding, Severity, Status, Subject
from gpudoctor.preflight.policy import Policy
from gpudoctor.preflight.verdict import judge
from gpudoctor.render import junit, markdown, nfd, prometheus
from gpudoctor.render.gate_json import report_json
from gpudoctor.schemas import load_schema
from tests.preflight.helpers import DEGRADED, HEALTHY, cli, facts, ruleset


def report_of(name: str, **policy):
    return judge(facts(name), ruleset(), Policy(**policy))


def unknown_report(fail_closed: bool):
    data = copy.deepcopy(facts("healthy-2gpu"))
    data["nvml"]["gpus"][1]["pcie_width"] = Unavailable("error", "nvmlDeviceGetCurrPcieLinkWidth: Unknown Error")
    return judge(data, ruleset(), Policy(fail_closed=fail_closed))


# --- JSON -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["healthy-2gpu", "pcie-degraded", "no-driver", "thermal-slowdown"])
def test_json_report_validates_against_its_schema(name):
    data = report_json(report_of(name, expect_gpus=2, min_free_memory_gib=1))
    jsonschema.validate(data, load_schema("gate-report"))
    assert data["verdict"] == ("go" if data["exit_code"] == 0 else "no-go")
    assert data["summary"]["blocking"] == sum(b["count"] for b in data["blocking"])
    assert not any(f["status"] == "skip" for f in data["findings"])


def test_json_report_says_which_gpu_blocks(capsys, tmp_path):
    path = tmp_path / "gate.json"
    code, out, _ = cli(capsys, "gate", "--root", DEGRADED, "--json", str(path))
    assert code == 1 and out.startswith("NO-GO  pcie-width-degraded")
    data = json.loads(path.read_text())
    jsonschema.validate(data, load_schema("gate-report"))
    by_bus = {g["bus_id"]: g for g in data["gpus"]}
    assert by_bus["0000:9a:00.0"]["blocking"] and by_bus["0000:9a:00.0"]["failed_checks"] == ["pcie-width-degraded"]
    assert not by_bus["0000:18:00.0"]["blocking"]
    assert data["hostname"] == "gpu-node-01" and data["kind"] == "gate"


# --- JUnit ------------------------------------------------------------------------------------


def test_junit_parses_and_counts_agree_with_the_verdict():
    report = report_of("pcie-degraded")
    root = ET.fromstring(junit.render(report).encode())
    suite = root.find("testsuite")
    assert suite is not None
    cases = suite.findall("testcase")
    assert len(cases) == len([f for f in report.findings if f.status is not Status.SKIP])
    failed = [c for c in cases if c.find("failure") is not None]
    assert [c.get("name") for c in failed] == ["pcie-width-degraded [GPU 1 (0000:9a:00.0)]"]
    assert suite.get("failures") == "1" and suite.get("errors") == "0"
    assert "Reseat" in (failed[0].find("failure").text or "")
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["verdict"] == "no-go"


def test_junit_unknowns_are_errors_fail_closed_and_skipped_fail_open():
    closed = ET.fromstring(junit.render(unknown_report(True)).encode()).find("testsuite")
    opened = ET.fromstring(junit.render(unknown_report(False)).encode()).find("testsuite")
    assert closed.get("errors") == "1" and closed.get("skipped") == "0"
    assert opened.get("errors") == "0" and opened.get("skipped") == "1" and opened.get("failures") == "0"


def test_junit_warning_below_fail_on_passes_with_output():
    report = report_of("thermal-slowdown", ignore=("hw-slowdown-active",))
    suite = ET.fromstring(junit.render(report).encode()).find("testsuite")
    assert suite.get("failures") == "0"
    warned = [c for c in suite.findall("testcase") if c.find("system-out") is not None]
    assert len(warned) == 2


def test_junit_survives_control_characters_in_messages():
    report = report_of("pcie-degraded")
    report.findings[0].message = "bell\x07 and nul\x00 and ok"
    ET.fromstring(junit.render(report).encode())


# --- Prometheus -------------------------------------------------------------------------------

SAMPLE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*",?)*\})? -?[0-9.e+]+$')


def parse(text: str) -> dict[str, list]:
    assert text.endswith("\n")
    for line in text.splitlines():
        assert line.startswith("# HELP ") or line.startswith("# TYPE ") or SAMPLE.match(line), line
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_prometheus_textfile_parses_and_says_what_failed_where():
    families = parse(prometheus.render(report_of("pcie-degraded")))
    assert families["gpudoctor_gate_go"][0].value == 0
    assert families["gpudoctor_gate_blocking"][0].value == 1
    failed = [s for s in families["gpudoctor_check_failed"] if s.value == 1]
    assert len(failed) == 1
    assert failed[0].labels == {
        "check": "pcie-width-degraded",
        "area": "pcie",
        "severity": "error",
        "subject": "GPU 1 (0000:9a:00.0)",
        "gpu": "1",
        "pci_bus_id": "00000000:9A:00.0",
    }
    healthy = {s.labels["pci_bus_id"]: s.value for s in families["gpudoctor_gpu_healthy"]}
    assert healthy == {"00000000:18:00.0": 1, "00000000:9A:00.0": 0}
    assert {s.labels["status"]: s.value for s in families["gpudoctor_gate_checks"]}["fail"] == 1
    memory = families["gpudoctor_gpu_memory_total_bytes"]
    assert len(memory) == 2 and memory[0].value > 70 * (1 << 30)


def test_prometheus_gpu_labels_are_dcgm_exporters_so_dashboards_join():
    # dcgm-exporter labels a GPU gpu="1",UUID="GPU-...",pci_bus_id="00000000:9A:00.0",
    # device="nvidia1",modelName="<NVML name>": the same names and forms here, on every GPU metric
    families = parse(prometheus.render(report_of("pcie-degraded")))
    want = {
        "gpu": "1",
        "UUID": "GPU-00000000-0000-0000-0000-000000000001",
        "pci_bus_id": "00000000:9A:00.0",
        "device": "nvidia1",
    }
    for name in ("gpudoctor_gpu_healthy", "gpudoctor_gpu_failed_checks", "gpudoctor_gpu_memory_total_bytes"):
        (sample,) = [s for s in families[name] if s.labels["gpu"] == "1"]
        assert {k: sample.labels[k] for k in want} == want, name
        assert sample.labels["modelName"].startswith("NVIDIA "), name
    assert {s.labels["pci_bus_id"] for s in families["gpudoctor_check_failed"]} >= {"", "00000000:18:00.0"}


def test_prometheus_unjudged_checks_fail_closed():
    families = parse(prometheus.render(unknown_report(True)))
    unjudged = [s for s in families["gpudoctor_check_unjudged"] if s.value == 1]
    assert [s.labels["check"] for s in unjudged] == ["pcie-width-degraded"]
    assert families["gpudoctor_gate_go"][0].value == 0


def test_prometheus_escapes_label_values():
    report = report_of("healthy-2gpu")
    odd = 'NIC "x"\\y\nz'
    report.findings.append(Finding("site-odd", "odd", "env", Severity.INFO, Status.PASS, Subject("nic", odd), "fine"))
    families = parse(prometheus.render(report))
    labels = [s.labels["subject"] for s in families["gpudoctor_check_failed"] if s.labels["check"] == "site-odd"]
    assert labels == [odd]


# --- Markdown ---------------------------------------------------------------------------------


def test_markdown_for_bug_reports(capsys):
    code, out, err = cli(capsys, "gate", "--root", DEGRADED, "--format", "markdown")
    assert code == 1
    assert out.startswith("## gpudoctor gate: NO-GO")
    assert "### Blocking (1)" in out and "| `pcie-width-degraded` | GPU 1 (0000:9a:00.0) |" in out
    assert "### GPUs" in out and "<details>" in out
    assert err.startswith("NO-GO  pcie-width-degraded")  # the one-liners go to stderr


def test_markdown_escapes_pipes_in_cells():
    report = report_of("pcie-degraded")
    # the first finding the report shows (rules/ascend.yaml's come first and do not apply here)
    next(f for f in report.findings if f.status.value != "skip").message = "a | b"
    text = markdown.render(report)
    assert "a \\| b" in text


# --- NFD feature file -------------------------------------------------------------------------

LABEL = re.compile(
    r"^feature\.node\.kubernetes\.io/[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?=([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$"
)


def test_nfd_feature_file_follows_the_local_source_format():
    report = report_of("pcie-degraded")
    text = nfd.render(report, ttl_s=900)
    assert len(text.encode()) < 64 * 1024
    labels = {}
    expiry = None
    for line in text.splitlines():
        if line.startswith("# +expiry-time="):
            expiry = datetime.strptime(line.split("=", 1)[1], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
        elif line.startswith("#"):
            continue
        else:
            assert LABEL.match(line), line
            key, _, value = line.partition("=")
            labels[key] = value
    made = datetime.fromtimestamp(int(report.generated_epoch), timezone.utc)
    assert expiry == made + timedelta(seconds=900)
    assert labels == {
        "feature.node.kubernetes.io/gpudoctor.gate": "no-go",
        "feature.node.kubernetes.io/gpudoctor.gpus": "2",
        "feature.node.kubernetes.io/gpudoctor.healthy-gpus": "1",
        "feature.node.kubernetes.io/gpudoctor.blocking": "pcie-width-degraded",
    }
    assert "gpudoctor.blocking" not in nfd.render(report_of("healthy-2gpu"), ttl_s=900)


def test_nfd_label_values_are_made_valid():
    assert nfd.label_value("a b/c:d") == "a-b-c-d"
    assert len(nfd.label_value("x" * 100)) == 63
    assert nfd.label_value("--") == "unknown"


# --- files: written atomically, or not at all -------------------------------------------------


def test_all_outputs_in_one_run_and_no_temporary_files_left(capsys, tmp_path):
    paths = {name: tmp_path / name for name in ("g.json", "g.xml", "g.prom", "gpudoctor")}
    for p in paths.values():
        p.write_text("old content")
    code, _, _ = cli(
        capsys,
        "gate",
        "--root",
        HEALTHY,
        "--json",
        str(paths["g.json"]),
        "--junit",
        str(paths["g.xml"]),
        "--prometheus",
        str(paths["g.prom"]),
        "--nfd-features",
        str(paths["gpudoctor"]),
    )
    assert code == 0
    assert json.loads(paths["g.json"].read_text())["verdict"] == "go"
    ET.parse(paths["g.xml"])
    parse(paths["g.prom"].read_text())
    assert "gpudoctor.gate=go" in paths["gpudoctor"].read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(paths)


def test_unwritable_output_exits_2_and_names_it(capsys, tmp_path):
    target = tmp_path / "missing-dir" / "gate.json"
    code, _, err = cli(capsys, "gate", "--root", HEALTHY, "--json", str(target))
    assert code == 2 and str(target) in err and not target.exists()
