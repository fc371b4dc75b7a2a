"""Shared pieces of the gate tests: the CLI runner, rule set, fixture facts and fake interpreters."""

from __future__ import annotations

import copy
import json
import stat
from pathlib import Path
from typing import Any

from gpudoctor.cli.root import run
from tests.conftest import HOSTS, probed

HEALTHY = str(HOSTS / "healthy-2gpu")
DEGRADED = str(HOSTS / "pcie-degraded")
THERMAL = str(HOSTS / "thermal-slowdown")
NO_DRIVER = str(HOSTS / "no-driver")

_RULESET: Any = None


def cli(capsys: Any, *args: str) -> tuple[int, str, str]:
    code = run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def ruleset() -> Any:
    global _RULESET
    if _RULESET is None:
        from gpudoctor.engine.loader import load_rules

        _RULESET = load_rules(gate=True)
    return _RULESET


def facts(name: str) -> dict[str, Any]:
    return probed(name)


def device_findings(result: Any, data: dict[str, Any]) -> list[Any]:
    """The gate's device test checks (gate-deep-*) over a DeepResult and a host's facts."""
    from gpudoctor.preflight.policy import Policy
    from gpudoctor.preflight.verdict import judge

    report = judge(data, ruleset(), Policy(deep=True), deep_result=result)
    return [f for f in report.findings if f.rule_id.startswith("gate-deep-")]


def write_policy(tmp_path: Path, text: str, name: str = "policy.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def hung_nvml_root(tmp_path: Path, base: str = "healthy-2gpu") -> str:
    """A copy of a fixture host whose NVML never returns from nvmlInit."""
    import shutil

    root = tmp_path / "hung-host"
    shutil.copytree(HOSTS / base, root, symlinks=True)
    (root / "nvml.json").write_text(json.dumps({"format": 1, "init": {"hang": True}, "system": {}, "devices": []}))
    return str(root)


MARK = "@@GPUDOCTOR@@ "


def fake_python(tmp_path: Path, events: list[dict[str, Any]], tail: str = "", name: str = "fakepy") -> str:
    """An executable standing in for the target interpreter: prints the events, then runs `tail` (sh)."""
    lines = ["#!/bin/sh", "# ignores its arguments (-c <worker source> ...), like a stand-in should"]
    for event in events:
        lines.append("cat <<'EOF'\n" + MARK + json.dumps(event, separators=(",", ":")) + "\nEOF")
    if tail:
        lines.append(tail)
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


def device_events(n: int = 2, bus_ids: tuple[str, ...] = ("0000:18:00.0", "0000:9a:00.0")) -> list[dict[str, Any]]:
    """Worker events up to the device list, for the healthy-2gpu / pcie-degraded fixtures."""
    out: list[dict[str, Any]] = [
        {"event": "hello", "python": "3.12.3", "pid": 1, "t": 0},
        {"event": "torch", "version": "2.11.0+cu130", "cuda": "13.0", "import_s": 1.5, "t": 1.5},
        {"event": "cuda", "available": True, "count": n, "t": 1.6},
    ]
    for i in range(n):
        out.append(
            {
                "event": "device",
                "gpu": i,
                "name": "NVIDIA H100 80GB HBM3",
                "uuid": None,
                "bus_id": bus_ids[i],
                "cc": "9.0",
            }
        )
    return out


def step_events(gpu: Any, step: str, ok: Any = True, peer: Any = None, **extra: Any) -> list[dict[str, Any]]:
    begin = {"event": "begin", "gpu": gpu, "step": step, "peer": peer}
    if ok == "hang":
        return [begin]
    return [begin, {"event": "end", "gpu": gpu, "step": step, "peer": peer, "ok": ok, "s": 0.1, **extra}]


def passing_gpu(gpu: int) -> list[dict[str, Any]]:
    return (
        step_events(gpu, "context")
        + step_events(gpu, "memory", mib=256)
        + step_events(gpu, "matmul", low_dtype="bfloat16")
    )


def four_gpu_facts() -> dict[str, Any]:
    """healthy-2gpu's facts with two more GPUs: indices 0, 1 on NUMA node 0 and 2, 3 on node 1,
    all four in one NVLink island."""
    data = copy.deepcopy(facts("healthy-2gpu"))
    gpus = data["nvml"]["gpus"]
    devices = data["pci"]["devices"]
    template_gpu = gpus[0]
    template_dev = next(d for d in devices if d.get("bus_id") == template_gpu["bus_id"])
    bus_ids = ["0000:18:00.0", "0000:19:00.0", "0000:9a:00.0", "0000:9b:00.0"]
    new_gpus, new_devs = [], [d for d in devices if d.get("kind") != "gpu"]
    for i, bus in enumerate(bus_ids):
        g = copy.deepcopy(template_gpu)
        g.update(index=i, bus_id=bus, uuid=f"GPU-00000000-0000-0000-0000-00000000000{i}")
        g["memory_affinity"] = [0 if i < 2 else 1]
        g["nvlink_peers"] = [j for j in range(len(bus_ids)) if j != i]  # one NVLink island
        new_gpus.append(g)
        d = copy.deepcopy(template_dev)
        d.update(bus_id=bus, numa_node=0 if i < 2 else 1)
        new_devs.append(d)
    data["nvml"]["gpus"] = new_gpus
    data["nvml"]["device_count"] = 4
    data["pci"]["devices"] = new_devs
    return data
