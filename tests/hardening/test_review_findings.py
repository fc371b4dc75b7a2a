"""Regression tests for holes a review found.

1. JUnit, Prometheus and NFD files (written as rendered, without the output writer's escaping
   pass) hold no control character from a snapshot, and still parse.
2. Recorded answers under --root (torch.json) are read as strict JSON: a probe never writes a
   snapshot that check --facts then refuses.
3. What the NUMA planner says about CUDA_VISIBLE_DEVICES is bounded, however long the value.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpudoctor.cli.root import run
from tests.conftest import HOSTS, SNAPSHOTS
from tests.hardening.roots import light_copy

SNAPSHOT = SNAPSHOTS / "h200-x2.json"
EVIL = "\x1b]0;T\x07\x1b[2J\x9b\x7f\u202e"
# C0 but tab and newline, DEL, C1, bidirectional embedding/override/isolate characters
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def snapshot_with(tmp_path: Path, edit) -> str:
    data = json.loads(SNAPSHOT.read_text())
    edit(data)
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(data))
    return str(path)


# --- 1. machine outputs of the gate -------------------------------------------------------------


def _evil(data: dict) -> None:
    data["host"]["hostname"] = "host" + EVIL
    data["nvml"]["gpus"][0]["name"] = "NVIDIA H200 " + EVIL
    data["nvml"]["gpus"][1]["name"] = EVIL


def _gate_file(capsys, tmp_path: Path, option: str) -> str:
    path = tmp_path / "out"
    code, _, err = cli(capsys, "gate", "--facts", snapshot_with(tmp_path, _evil), option, str(path))
    assert code in (0, 1), err
    text = path.read_text()
    assert CONTROL.search(text) is None, CONTROL.findall(text)[:5]
    return text


SHOWN = "\\x1b]0;T\\x07\\x1b[2J\\u009b\\u007f\\u202e"  # EVIL as visible escapes


def test_gate_prometheus_holds_no_control_characters_and_parses(capsys, tmp_path):
    text = _gate_file(capsys, tmp_path, "--prometheus")
    families = {f.name: f.samples for f in text_string_to_metric_families(text)}
    names = {s.labels["modelName"] for s in families["gpudoctor_gpu_healthy"]}
    assert names == {"NVIDIA H200 " + SHOWN, SHOWN}  # visible, not dropped


def test_gate_junit_holds_no_control_characters_and_parses(capsys, tmp_path):
    root = ET.fromstring(_gate_file(capsys, tmp_path, "--junit").encode())
    suite = root.find("testsuite")
    assert suite is not None and suite.get("hostname") == "host" + SHOWN
    # the third file gate writes as rendered (its labels were already reduced to [A-Za-z0-9_.-])
    nfd = _gate_file(capsys, tmp_path, "--nfd-features")
    assert all(line.startswith(("#", "feature.node.kubernetes.io/")) for line in nfd.splitlines())


# --- 2. strict JSON for recorded answers under --root -------------------------------------------


def test_a_torch_json_that_is_not_strict_json_makes_torch_unavailable(capsys, tmp_path):
    root, sysfs = light_copy("healthy-2gpu", tmp_path / "root")
    recorded = json.loads((HOSTS / "healthy-2gpu" / "torch.json").read_text())
    recorded.pop("device_count", None)
    text = json.dumps(recorded)
    text = text[:-1] + ', "device_count": ' + "9" * 4200 + ', "cuda_available": NaN}'
    (root / "torch.json").write_text(text)
    snapshot = tmp_path / "probed.json"
    code, _, err = cli(capsys, "probe", "--root", str(root), "--sysfs-root", str(sysfs), "-o", str(snapshot))
    assert code == 0, err
    torch = json.loads(snapshot.read_text())["torch"]
    assert isinstance(torch, dict) and torch.get("unavailable") == "error", torch
    assert len(torch.get("detail", "")) < 300
    code, _, err = cli(capsys, "check", "--facts", str(snapshot))
    assert code in (0, 1), err


# --- 3. CUDA_VISIBLE_DEVICES messages are bounded ----------------------------------------------

LONG_VALUES = {
    "duplicates": "0," * 50_000,
    "long entry": "x" * 100_000,
    "long uuid": "GPU-" + "a" * 100_000,
    "long index": "0," + "7" * 100_000,
}


def _visible(value: str):
    def edit(data: dict) -> None:
        data["host"]["env"]["CUDA_VISIBLE_DEVICES"] = value

    return edit


@pytest.mark.parametrize("fmt", ["shell", "json"])
@pytest.mark.parametrize("value", list(LONG_VALUES.values()), ids=list(LONG_VALUES))
def test_fix_numa_says_little_about_a_long_cuda_visible_devices(capsys, tmp_path, value, fmt):
    facts = snapshot_with(tmp_path, _visible(value))
    code, out, err = cli(capsys, "fix", "--numa", "--format", fmt, "--facts", facts)
    assert code in (0, 1, 2), err
    if fmt == "json":
        data = json.loads(out)
        out = json.dumps({k: v for k, v in data.items() if k != "cuda_visible_devices"})  # the value, as given
    assert len(out) + len(err) < 10_000, (len(out), len(err))


@pytest.mark.parametrize("value", list(LONG_VALUES.values()), ids=list(LONG_VALUES))
def test_run_numa_says_little_about_a_long_cuda_visible_devices(capsys, monkeypatch, value):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    for name in ("LOCAL_RANK", "SLURM_LOCALID"):
        monkeypatch.delenv(name, raising=False)
    code, out, err = cli(capsys, "run", "--numa", "--dry-run", "--root", str(HOSTS / "healthy-2gpu"), "--", "true")
    assert code in (0, 2), err[:500]
    assert len(out) + len(err) < 10_000, (len(out), len(err))


@pytest.mark.parametrize("value", list(LONG_VALUES.values()), ids=list(LONG_VALUES))
def test_select_says_little_about_a_long_cuda_visible_devices(capsys, tmp_path, value):
    facts = snapshot_with(tmp_path, _visible(value))
    code, out, err = cli(capsys, "select", "-n", "1", "-v", "--facts", facts)
    assert len(out) + len(err) < 10_000, (code, len(out), len(err))


def test_duplicates_are_said_once(capsys, tmp_path):
    facts = snapshot_with(tmp_path, _visible("0,1,0,1,0"))
    code, out, err = cli(capsys, "fix", "--numa", "--format", "json", "--facts", facts)
    assert code in (0, 1), err
    warnings = [w for w in json.loads(out)["warnings"] if "more than once" in w or "twice" in w]
    assert len(warnings) == 1, warnings
    assert "(3 repeated entries)" in warnings[0]
