"""`gpudoctor report merge`: one summary from many nodes' reports."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest

from gpudoctor.preflight.policy import Policy
from gpudoctor.preflight.verdict import judge
from gpudoctor.render.gate_json import render
from tests.conftest import HOSTS, SNAPSHOTS
from tests.preflight.helpers import cli, facts, ruleset


def gate_json(tmp_path: Path, fixture: str, hostname: str, epoch: float = 1_800_000_000.0, **policy) -> str:
    data = copy.deepcopy(facts(fixture))
    data["host"]["hostname"] = hostname
    report = judge(data, ruleset(), Policy(**policy))
    report.generated_epoch = epoch
    path = tmp_path / f"{hostname}-{int(epoch)}.json"
    path.write_text(render(report))
    return str(path)


@pytest.fixture
def fleet(tmp_path):
    return [
        gate_json(tmp_path, "healthy-2gpu", "node-a"),
        gate_json(tmp_path, "pcie-degraded", "node-b"),
        gate_json(tmp_path, "thermal-slowdown", "node-c"),
        gate_json(tmp_path, "no-driver", "node-d"),
    ]


def test_merge_counts_nodes_checks_and_models(capsys, fleet):
    code, out, _ = cli(capsys, "report", "merge", "--format", "json", *fleet)
    assert code == 1
    data = json.loads(out)
    assert data["totals"] == {"nodes": 4, "go": 1, "no_go": 3}
    assert data["no_go_nodes"] == ["node-b", "node-c", "node-d"]
    checks = data["checks"]
    assert checks["pcie-width-degraded"]["failed_nodes"] == ["node-b"]
    assert checks["pcie-width-degraded"]["failed_subjects"] == 1
    assert checks["pcie-width-degraded"]["unjudged_nodes"] == ["node-d"]
    assert checks["hw-slowdown-active"]["failed_nodes"] == ["node-c"]
    models = data["gpu_models"]
    assert models["NVIDIA H100 80GB HBM3"] == {"nodes": 3, "gpus": 6, "no_go_nodes": 2, "failed_gpus": 2}
    nodes = {n["node"]: n for n in data["nodes"]}
    assert nodes["node-b"]["blocking"][0].startswith("pcie-width-degraded: GPU 1 (0000:9a:00.0)")


def test_merge_text_summary(capsys, fleet):
    code, out, _ = cli(capsys, "report", "merge", *fleet)
    assert code == 1
    assert out.startswith("gpudoctor fleet: 4 node(s) · 1 go · 3 no-go")
    assert "No-go nodes" in out and "node-b" in out and "pcie-width-degraded" in out
    assert "NVIDIA H100 80GB HBM3" in out


def test_all_go_exits_0_and_directories_are_read(capsys, tmp_path):
    gate_json(tmp_path, "healthy-2gpu", "node-a")
    gate_json(tmp_path, "healthy-2gpu", "node-b")
    code, out, _ = cli(capsys, "report", "merge", str(tmp_path))
    assert code == 0 and "2 node(s) · 2 go · 0 no-go" in out


def test_the_newest_report_of_a_node_counts(capsys, tmp_path):
    old = gate_json(tmp_path, "pcie-degraded", "node-a", epoch=1_800_000_000)
    new = gate_json(tmp_path, "healthy-2gpu", "node-a", epoch=1_800_000_600)
    for order in ([old, new], [new, old]):
        code, out, _ = cli(capsys, "report", "merge", "--format", "json", *order)
        data = json.loads(out)
        assert code == 0 and data["totals"]["nodes"] == 1 and data["totals"]["go"] == 1
        assert data["replaced_reports"] == [{"node": "node-a", "source": old}]


def test_check_reports_merge_too(capsys, tmp_path, fleet):
    check = tmp_path / "h200-check.json"
    code, out, _ = cli(capsys, "check", "--facts", str(SNAPSHOTS / "h200-x2.json"), "--format", "json")
    check.write_text(out)
    code, out, _ = cli(capsys, "report", "merge", "--format", "json", str(check), *fleet)
    data = json.loads(out)
    nodes = {n["node"]: n for n in data["nodes"]}
    assert nodes["gpu-host"]["kind"] == "check" and nodes["gpu-host"]["gpu_models"] == {"NVIDIA H200": 2}
    assert data["gpu_models"]["NVIDIA H200"]["gpus"] == 2


@pytest.mark.parametrize(
    "content, needle",
    [
        ("not json", "invalid JSON"),
        ('{"schema_version": 1}', "not a gpudoctor report"),
        ('{"report_schema_version": 1, "kind": "gate"}', "not a valid gpudoctor gate report"),
    ],
)
def test_bad_reports_exit_2_naming_the_file(capsys, tmp_path, fleet, content, needle):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    code, _, err = cli(capsys, "report", "merge", *fleet, str(bad))
    assert code == 2 and str(bad) in err and needle in err and "Traceback" not in err
    code, _, err = cli(capsys, "report", "merge", str(tmp_path / "missing.json"))
    assert code == 2 and "no such file" in err


def _check_json(capsys, tmp_path: Path, name: str, edit=None) -> str:
    code, out, _ = cli(capsys, "check", "--facts", str(SNAPSHOTS / "h200-x2.json"), "--format", "json")
    data = json.loads(out)
    if edit is not None:
        edit(data)
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_a_check_report_is_named_by_its_envelope_not_its_header_line(capsys, tmp_path):
    def edit(data):
        data["host"] = "something else entirely · 7× Other GPU"
        data["envelope"]["host"]["hostname"] = "node-7"
        data["envelope"]["gpus"][1]["name"] = "NVIDIA H100"

    path = _check_json(capsys, tmp_path, "node-7.json", edit)
    code, out, _ = cli(capsys, "report", "merge", "--format", "json", path)
    node = json.loads(out)["nodes"][0]
    assert node["node"] == "node-7" and node["gpu_models"] == {"NVIDIA H200": 1, "NVIDIA H100": 1}
    assert node["generated_at"] == "2026-11-30T15:16:37Z"  # when its facts were read


def test_failing_gpus_of_a_check_report_are_counted_per_model(capsys, tmp_path):
    code, out, _ = cli(capsys, "check", "--root", str(HOSTS / "pcie-degraded"), "--format", "json")
    data = json.loads(out)
    data["envelope"]["gpus"][0]["name"] = "NVIDIA H100 PCIe"  # two models: the envelope says which failed
    path = tmp_path / "degraded.json"
    path.write_text(json.dumps(data))
    code, out, _ = cli(capsys, "report", "merge", "--format", "json", str(path))
    models = json.loads(out)["gpu_models"]
    assert models["NVIDIA H100 80GB HBM3"]["failed_gpus"] == 1 and models["NVIDIA H100 PCIe"]["failed_gpus"] == 0


def test_reports_of_older_versions_without_an_envelope_still_merge(capsys, tmp_path):
    check = _check_json(capsys, tmp_path, "old-check.json", lambda data: data.pop("envelope"))
    gate = json.loads(Path(gate_json(tmp_path, "pcie-degraded", "node-b")).read_text())
    del gate["envelope"]
    for finding in gate["findings"]:
        finding.pop("cause")
    old_gate = tmp_path / "old-gate.json"
    old_gate.write_text(json.dumps(gate))
    code, out, _ = cli(capsys, "report", "merge", "--format", "json", check, str(old_gate))
    nodes = {n["node"]: n for n in json.loads(out)["nodes"]}
    assert nodes["gpu-host"]["gpu_models"] == {"NVIDIA H200": 2} and nodes["gpu-host"]["generated_at"] == ""
    assert nodes["node-b"]["gpu_models"] == {"NVIDIA H100 80GB HBM3": 2}
    assert json.loads(out)["gpu_models"]["NVIDIA H100 80GB HBM3"]["failed_gpus"] == 1


@pytest.mark.parametrize(
    "edit, needle",
    [
        (lambda env: env["host"].update(hostname=12345), "hostname"),
        (lambda env: env["host"].update(hostname=["node-a"]), "hostname"),
        (lambda env: env.update(gpus=env["gpus"] * 2049), "gpus"),  # 4098: more than any machine has
        (lambda env: env["gpus"][0].update(name={"x": 1}), "name"),
        (lambda env: env.pop("versions"), "versions"),
    ],
)
def test_a_hostile_envelope_is_refused_naming_the_file(capsys, tmp_path, edit, needle):
    path = _check_json(capsys, tmp_path, "hostile.json", lambda data: edit(data["envelope"]))
    started = time.monotonic()
    code, _, err = cli(capsys, "report", "merge", path)
    assert code == 2 and path in err and "not a valid gpudoctor check report" in err and needle in err
    assert "Traceback" not in err and time.monotonic() - started < 5


def test_a_null_hostname_is_an_unknown_node(capsys, tmp_path):
    path = _check_json(capsys, tmp_path, "nameless.json", lambda data: data["envelope"]["host"].update(hostname=None))
    code, out, _ = cli(capsys, "report", "merge", "--format", "json", path)
    assert json.loads(out)["nodes"][0]["node"] == "unknown"


def test_a_report_with_the_most_gpus_an_envelope_holds_merges_quickly(capsys, tmp_path):
    def edit(data):
        row = {"bus_id": None, "uuid": None}
        data["envelope"]["gpus"] = [{**row, "index": i, "name": f"GPU model {i % 7}"} for i in range(4096)]

    path = _check_json(capsys, tmp_path, "many.json", edit)
    started = time.monotonic()
    code, out, _ = cli(capsys, "report", "merge", "--format", "json", path)
    assert code == 0 and sum(json.loads(out)["nodes"][0]["gpu_models"].values()) == 4096
    assert time.monotonic() - started < 5


def _gpu_findings_failed(data: dict, gpu: dict, how: str) -> None:
    """Three findings of one GPU made failures, naming it by bus id, by UUID only and by label only."""
    mine = [
        f for f in data["findings"] if f["subject"]["kind"] == "gpu" and f["subject"].get("bus_id") == gpu["bus_id"]
    ]
    assert len(mine) >= 3
    for finding, name in zip(mine, ("bus", "uuid", how)):
        finding["status"] = "fail"
        if name != "bus":
            finding["subject"].pop("bus_id")
        if name == "label":
            finding["subject"].pop("uuid")


@pytest.mark.parametrize("envelope", [True, False])
def test_failed_gpus_counts_gpus_not_findings(capsys, tmp_path, envelope):
    def edit(data):
        _gpu_findings_failed(data, data["envelope"]["gpus"][0], "uuid" if envelope else "label")
        data["verdict"] = "fail"
        if not envelope:
            data.pop("envelope")

    path = _check_json(capsys, tmp_path, "one-host.json", edit)
    code, out, _ = cli(capsys, "report", "merge", "--format", "json", path)
    model = json.loads(out)["gpu_models"]["NVIDIA H200"]
    assert code == 1 and model["gpus"] == 2
    # with the envelope the GPU is known under both names: one GPU; without, never more than there are
    assert model["failed_gpus"] == (1 if envelope else 2)
    code, text, _ = cli(capsys, "report", "merge", path)
    row = next(line for line in text.splitlines() if line.lstrip().startswith("NVIDIA H200"))
    assert row.split()[-4:] == ["1", "2", "1", str(model["failed_gpus"])]


def test_the_newest_report_is_the_newest_instant_not_the_last_argument(capsys, tmp_path):
    # 16:00 at +02:00 is 14:00 UTC: earlier than 15:00Z though its text sorts after it
    def at(stamp, healthy):
        def edit(data):
            data["envelope"]["collected_at"] = stamp
            if not healthy:
                _gpu_findings_failed(data, data["envelope"]["gpus"][0], "uuid")
                data["verdict"] = "fail"

        return edit

    earlier = _check_json(capsys, tmp_path, "earlier.json", at("2026-11-30T16:00:00+02:00", False))
    later = _check_json(capsys, tmp_path, "later.json", at("2026-11-30T15:00:00Z", True))
    for order in ([earlier, later], [later, earlier]):
        code, out, _ = cli(capsys, "report", "merge", "--format", "json", *order)
        data = json.loads(out)
        assert code == 0 and data["replaced_reports"] == [{"node": "gpu-host", "source": earlier}]
        code, text, _ = cli(capsys, "report", "merge", *order)
        assert f"(an older report for gpu-host was left out: {earlier})" in text


def test_without_a_time_the_later_argument_counts_and_the_summary_says_why(capsys, tmp_path):
    def untimed(data):
        data["envelope"]["collected_at"] = None
        data.pop("generated_at", None)

    first = _check_json(capsys, tmp_path, "first.json", untimed)
    second = _check_json(capsys, tmp_path, "second.json")
    code, text, _ = cli(capsys, "report", "merge", first, second)
    assert f"(an earlier report on the command line (no time to compare) for gpu-host was left out: {first})" in text
