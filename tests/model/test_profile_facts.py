"""model/profile_facts.py: the facts a node profile fixes, from a snapshot."""

from __future__ import annotations

import json

from gpudoctor.facts import parse_snapshot
from gpudoctor.model.profile_facts import FACTS, profile_facts
from gpudoctor.schemas import load_schema, validate
from tests.conftest import SNAPSHOTS, probed


def _h200() -> dict:
    return json.loads((SNAPSHOTS / "h200-x2.json").read_text())


def test_the_real_h200():
    pf = profile_facts(parse_snapshot(json.dumps(_h200())))
    assert pf["host"] == {
        "gpu_count": 2,
        "gpu_model": "NVIDIA H200",
        "driver": "580.159.04",
        "cuda": "13.0",
        "torch": "2.11.0+cu130",
        "kernel": "6.18.44-fc-v657-gpu",
        "nvlink_islands": "0-1",
        "rdma_nics": None,  # the snapshot predates the rdma section: unknown, not 0
    }
    assert [(g["index"], g["pcie_gen"], g["pcie_width"], g["nvlink_links"]) for g in pf["gpus"]] == [
        (0, 5, 16, 18),
        (1, 5, 16, 18),
    ]


def test_gpu_to_nic_map_and_islands_of_an_8_gpu_host():
    pf = profile_facts(probed("rdma-8nic"))
    assert pf["host"]["nvlink_islands"] == "0-7" and pf["host"]["rdma_nics"] == 9
    assert {g["nic"] for g in pf["gpus"]} <= {n["name"] for n in pf["nics"]}


def test_out_of_bounds_values_are_unknown_and_the_shape_matches_the_schema():
    data = _h200()
    data["nvml"]["gpus"][0]["pcie_width"] = 10**30
    data["nvml"]["gpus"][1]["name"] = "H" * 5000
    data["host"]["kernel_release"] = ""
    pf = profile_facts(parse_snapshot(json.dumps(data)))
    assert pf["gpus"][0]["pcie_width"] == 16  # NVML's width is out of bounds: sysfs' is taken
    assert pf["host"]["gpu_model"] is None and pf["host"]["kernel"] is None
    assert validate("report", _report_with(pf)) is None


def test_every_fact_is_in_the_report_schema():
    props = load_schema("report")["properties"]["envelope"]["properties"]["profile"]["properties"]
    for fact in FACTS:
        schema = props[fact.scope] if fact.scope == "host" else props[fact.scope]["items"]
        assert fact.key in schema["properties"], fact
        assert fact.key in load_schema("profile")["properties"][fact.scope].get("properties", {}) or fact.key in (
            load_schema("profile")["properties"][fact.scope]["items"]["properties"]
        )


def _report_with(pf: dict) -> dict:
    return {
        "report_schema_version": 1,
        "gpudoctor_version": "0",
        "host": "h",
        "facts_origin": "x",
        "verdict": "pass",
        "exit_code": 0,
        "fail_on": "error",
        "summary": {"pass": 0, "fail": 0, "unknown": 0, "error": 0, "skip": 0},
        "findings": [],
        "envelope": {
            "host": {"hostname": None, "os": None, "kernel": None},
            "collected_at": None,
            "gpus": [],
            "versions": {"gpudoctor": "0", "driver": None, "cuda": None, "torch": None},
            "profile": pf,
        },
    }
