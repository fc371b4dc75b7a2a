"""`gpudoctor report merge --drift`: the fleet's majority value of each profile fact, and who differs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.helpers.golden import GOLDEN, check
from tests.preflight.helpers import cli

FLEET = Path(__file__).resolve().parent / "fixtures" / "fleet"
OUT = GOLDEN / "drift"


def reports() -> list[str]:
    return sorted(str(p) for p in FLEET.glob("node-*.json"))


def test_the_two_drifting_nodes_are_named(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    code, text, err = cli(capsys, "report", "merge", "--drift", str(FLEET))
    assert code == 1 and err == ""
    check(OUT / "fleet-16.txt", text)
    code, out, _ = cli(capsys, "report", "merge", "--drift", "--format", "json", *reports())
    assert code == 1
    check(OUT / "fleet-16.json", out)
    data = json.loads(out)
    assert len(data["nodes"]) == 16
    drifting = {f["fact"]: f for f in data["facts"] if f["differs"]}
    assert set(drifting) == {"driver", "GPU 1 pcie_width"}
    assert drifting["driver"]["majority"] == "580.159.04" and drifting["driver"]["majority_nodes"] == 15
    assert drifting["driver"]["differs"] == [{"node": "node-07", "value": "580.126.09"}]
    assert drifting["GPU 1 pcie_width"]["differs"] == [{"node": "node-12", "value": 8}]
    assert data["blocking_drift"] == ["driver", "GPU 1 pcie_width"]


def test_no_blocking_drift_exits_0_and_the_order_of_files_does_not_matter(tmp_path, capsys):
    good = [r for r in reports() if not r.endswith(("node-07.json", "node-12.json"))]
    code, out, _ = cli(capsys, "report", "merge", "--drift", "--format", "json", *good)
    assert code == 0 and json.loads(out)["blocking_drift"] == []
    forward = cli(capsys, "report", "merge", "--drift", "--format", "json", *reports())[1]
    backward = cli(capsys, "report", "merge", "--drift", "--format", "json", *reversed(reports()))[1]
    assert forward == backward


def test_a_kernel_difference_is_shown_but_does_not_block(tmp_path, capsys):
    for name in ("node-01.json", "node-02.json", "node-03.json"):
        shutil.copy(FLEET / name, tmp_path / name)
    data = json.loads((tmp_path / "node-03.json").read_text())
    data["envelope"]["profile"]["host"]["kernel"] = "6.8.0-\x1b[31mevil"
    (tmp_path / "node-03.json").write_text(json.dumps(data))
    code, text, _ = cli(capsys, "report", "merge", "--drift", str(tmp_path))
    assert code == 0
    assert "kernel: 6.18.44-fc-v657-gpu on 2 of 3 node(s)" in text
    assert "node-03  6.8.0-\\x1b[31mevil" in text and "\x1b" not in text


def test_reports_without_profile_facts_are_named_not_counted(tmp_path, capsys):
    for name in ("node-01.json", "node-02.json"):
        shutil.copy(FLEET / name, tmp_path / name)
    old = json.loads((tmp_path / "node-02.json").read_text())
    del old["envelope"]["profile"]  # a report of a gpudoctor before profile facts
    (tmp_path / "node-02.json").write_text(json.dumps(old))
    code, out, _ = cli(capsys, "report", "merge", "--drift", "--format", "json", str(tmp_path))
    data = json.loads(out)
    assert code == 0 and data["nodes"] == ["node-01"] and data["nodes_without_profile_facts"] == ["node-02"]


def test_a_malformed_profile_in_a_report_is_refused(tmp_path, capsys):
    bad = json.loads((FLEET / "node-01.json").read_text())
    bad["envelope"]["profile"]["gpus"][0]["pcie_width"] = "x" * 5000
    (tmp_path / "node-01.json").write_text(json.dumps(bad))
    code, out, err = cli(capsys, "report", "merge", "--drift", str(tmp_path))
    assert code == 2 and out == "" and "not a valid gpudoctor check report" in err


def test_merge_names_the_slow_node_of_the_distributed_gate(capsys, monkeypatch):
    # the fleet holds rank 0's gate --distributed report (node-01, newer than its check report):
    # its localisation named node-05, which the summary and the drift both show
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.chdir(FLEET.parent)  # the golden names the reports by a relative path
    code, text, _ = cli(capsys, "report", "merge", "fleet")
    assert code == 1
    check(OUT / "fleet-merge.txt", text)
    assert "  node-01  gate --distributed over 8 nodes is no-go; named slow: node-05" in text
    code, out, _ = cli(capsys, "report", "merge", "--format", "json", str(FLEET))
    found = json.loads(out)["localized"]
    assert [(f["reported_by"], f["slow_nodes"], f["status"]) for f in found] == [("node-01", ["node-05"], "slow")]
    assert found[0]["slow_node_pairs"] == {"node-05": [10.8, 10.8]} and found[0]["best_pair_busbw_gbps"] == 44.0
    code, out, _ = cli(capsys, "report", "merge", "--drift", "--format", "json", str(FLEET))
    assert [f["slow_nodes"] for f in json.loads(out)["localized"]] == [["node-05"]]
    # without the distributed report nothing is named
    code, out, _ = cli(capsys, "report", "merge", "--drift", "--format", "json", *reports())
    assert json.loads(out)["localized"] == []


def test_a_slow_node_that_also_drifts_says_so_and_names_are_escaped(tmp_path, capsys):
    for name in ("node-01.json", "node-12.json"):
        shutil.copy(FLEET / name, tmp_path / name)
    data = json.loads((FLEET / "gate-distributed.json").read_text())
    found = data["distributed"]["localize"]
    found["slow_nodes"] = ["node-12"]
    found["nodes"][4]["node"] = "node-12"
    found["slow_pairs"] = [["node-02", "node-\x1b[2Jx"]]
    (tmp_path / "gate-distributed.json").write_text(json.dumps(data))
    code, text, _ = cli(capsys, "report", "merge", "--drift", str(tmp_path))
    assert "node-12  slow in the gate --distributed of node-01" in text
    assert "it also differs on GPU 1 pcie_width" in " ".join(text.split())
    assert "node-02 – node-\\x1b[2Jx  slow pair (the link between them)" in text and "\x1b" not in text


def test_numa_memory_within_its_tolerance_is_not_drift_and_beyond_it_is(tmp_path, capsys, monkeypatch):
    # memory per NUMA node is whole GiB rounded down: two readings a few MiB apart can be a GiB
    # apart, which check --profile passes (the larger of 2 % and 1 GiB); drift judges it the same way
    monkeypatch.setenv("COLUMNS", "100")
    for number in range(1, 6):
        shutil.copy(FLEET / f"node-0{number}.json", tmp_path / f"node-0{number}.json")

    def set_memory(name: str, gib: int) -> None:
        data = json.loads((tmp_path / name).read_text())
        data["envelope"]["profile"]["numa_nodes"][0]["memory_gib"] = gib
        (tmp_path / name).write_text(json.dumps(data))

    set_memory("node-03.json", 6)  # the fleet's 7 GiB, a GiB lower: rounding
    code, out, _ = cli(capsys, "report", "merge", "--drift", "--format", "json", str(tmp_path))
    fact = next(f for f in json.loads(out)["facts"] if f["fact"] == "NUMA node 0 memory_gib")
    assert code == 0 and fact["differs"] == [] and fact["majority"] == 7 and fact["majority_nodes"] == 4
    assert fact["within_tolerance"] == [{"node": "node-03", "value": 6}]
    code, text, _ = cli(capsys, "report", "merge", "--drift", str(tmp_path))
    assert "0 fact(s) differ" in text and "agree on every node; 1 within a tolerance." in text
    assert "NUMA node 0 memory_gib: 7 GiB on 4 of 5 node(s); within the tolerance (give or take 2 % of" in text
    assert "node-03 6 GiB" in text

    set_memory("node-04.json", 3)  # a DIMM gone: beyond the tolerance, shown (memory never blocks)
    code, out, _ = cli(capsys, "report", "merge", "--drift", "--format", "json", str(tmp_path))
    fact = next(f for f in json.loads(out)["facts"] if f["fact"] == "NUMA node 0 memory_gib")
    assert code == 0 and fact["differs"] == [{"node": "node-04", "value": 3}]
    assert fact["within_tolerance"] == [{"node": "node-03", "value": 6}]
    code, text, _ = cli(capsys, "report", "merge", "--drift", str(tmp_path))
    assert "1 fact(s) differ" in text and "NUMA node 0 memory_gib: 7 GiB on 3 of 5 node(s)" in text
    assert "node-04  3 GiB" in text and "so not drift: node-03 6 GiB" in " ".join(text.split())
