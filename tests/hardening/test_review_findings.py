"""Regression tests for holes a review found.

1. JUnit, Prometheus and NFD files (written as rendered, without the output writer's escaping
   pass) hold no control character from a snapshot, and still parse.
2. Recorded answers under --root (torch.json) are read as strict JSON: a probe never writes a
   snapshot that check --facts then refuses.
3. What the NUMA planner says about CUDA_VISIBLE_DEVICES is bounded, however long the value.
4. The distributed gate's test-only all-reduce delay, set on every rank, cannot hide a slow node:
   a localisation that a delayed rank measured in is never "even" (wave 7 review).
"""

from __future__ import annotations

import json
import re
import threading
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpudoctor.cli.root import run
from gpudoctor.preflight.distributed import localisation_blocks
from gpudoctor.preflight.policy import Policy
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


# --- 4. the localisation's test-only delay cannot make a gate go -----------------------------------


class _Job:
    """Four ranks, one per node, as threads: the collectives the localisation makes (the MAX
    agreement, the all-gather of each rank's measurement) meet at a barrier; each group's
    all-reduce takes a made-up time, slow for every group node 2 is in, plus the delay."""

    def __init__(self, ranks: int) -> None:
        self.barrier = threading.Barrier(ranks, timeout=20)
        self.slots: list[Any] = [None] * ranks

    def exchange(self, rank: int, value: Any) -> list[Any]:
        self.slots[rank] = value
        self.barrier.wait()
        seen = list(self.slots)
        self.barrier.wait()  # nobody writes the next round's value before all have read this one
        return seen


def _localise_job(delay: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    from gpudoctor.preflight.localize import TEST_DELAY, TEST_SWITCH, Exchange, analyse, node_layout, run_rounds

    if delay:  # as a job whose environment carries it to every rank would have it
        monkeypatch.setenv(TEST_SWITCH, "1")
        monkeypatch.setenv(TEST_DELAY, "10")
    job = _Job(4)
    nodes = node_layout([{"rank": r, "node": f"n{r}", "node_rank": r} for r in range(4)])

    class Rank(Exchange):
        def any_rank(self, flag: bool) -> bool:
            return any(job.exchange(self.rank, flag))

        def time_group(self, group: Any, delay_s: float, deadline: float) -> tuple[float, int]:
            per_call = 0.1 if 2 in group else 0.01  # node 2's link is ten times slower
            return delay_s + per_call, self.iterations  # the delay is inside the timed part

    class Dist:
        @staticmethod
        def new_group(ranks: list[int], timeout: Any) -> list[int]:
            return ranks

    results: dict[int, Any] = {}

    def rank_main(rank: int) -> None:
        ex = Rank(None, Dist(), None, rank, None, 1, 3)
        results[rank] = run_rounds(ex, nodes, 30.0, lambda mine: [dict(r) for r in job.exchange(rank, mine)])

    threads = [threading.Thread(target=rank_main, args=(rank,)) for rank in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(results) == [0, 1, 2, 3]
    measured, stopped = results[0]
    assert all(results[rank] == results[0] for rank in range(4))  # every rank comes to the same
    return analyse(nodes, measured, 0.8, stopped)


def test_the_slow_node_is_named_without_the_delay(monkeypatch):
    from gpudoctor.preflight.localize import TEST_SWITCH

    monkeypatch.delenv(TEST_SWITCH, raising=False)
    result = _localise_job(False, monkeypatch)
    assert result["status"] == "slow" and result["slow_nodes"] == ["n2"] and result["test_delay"] is False
    assert localisation_blocks(result, Policy())


def test_the_test_only_delay_on_every_rank_cannot_hide_a_slow_node(monkeypatch):
    # 10 s of delay in each 0.01-0.1 s figure makes node 2's pairs look like the others'; the
    # localisation must not call that even (a gate with --localize would go)
    result = _localise_job(True, monkeypatch)
    assert result["status"] == "unknown" and result["slow_nodes"] == []
    assert "test-only delay" in result["unknown_because"] and result["test_delay"] is True
    assert localisation_blocks(result, Policy()) and localisation_blocks(result, Policy(fail_closed=False))
    from gpudoctor.render.gate_distributed import render_table

    rank = {"local_rank": 0, "gpu": "GPU 0", "verdict": "go", "blocking": []}
    rows = [{**rank, "rank": r, "node": f"n{r}"} for r in range(4)]
    result.update(why="--localize", mib=1, iterations=3, seconds=0.5)
    text = render_table(rows, "gloo", None, lambda s, **_: s, Policy(fail_closed=False), 100, result)
    assert "Verdict: NO-GO — localisation unknown (the test-only delay was set)" in " ".join(text.split())
