#!/usr/bin/env python3
"""Time `gpudoctor report merge` of many node reports, beside `python -c pass` in the same run.

    python scripts/bench_merge.py [--reports 10000] [--repeat 3] [--profile] [--keep DIR] [--src OLD/src ...]

The reports are made from the fleet fixtures (tests/fixtures/fleet/node-*.json: check reports of
the real H200 snapshot, two of them drifted) and the gate goldens (tests/golden/gate/*.json that
are gate reports), copied in turn until there are --reports of them, each under its own hostname
(node-000001 ...) so every one counts. The command runs in a fresh interpreter each time, as a
user runs it (`report merge --format json`, output to /dev/null); --profile adds a cProfile of
one merge in this process, the 25 costliest functions by their own time. --src (repeatable)
times the gpudoctor under each source tree instead of this checkout's, one after the other on
the same reports. Not a test: timings on
a shared machine vary; compare runs made one after the other, and ratios to the reference.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
FLEET = REPO / "tests" / "fixtures" / "fleet"
GATE = REPO / "tests" / "golden" / "gate"


def templates() -> list[dict[str, Any]]:
    """The reports copied: every fleet check report and every gate golden that is a gate report."""
    out = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(FLEET.glob("node-*.json"))]
    for path in sorted(GATE.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and data.get("kind") == "gate" and "report_schema_version" in data:
            out.append(data)
    return out


def _rename(report: dict[str, Any], name: str) -> None:
    env = report.get("envelope")
    if isinstance(env, dict) and isinstance(env.get("host"), dict):
        env["host"]["hostname"] = name
    if "hostname" in report:
        report["hostname"] = name


def write_reports(directory: Path, count: int) -> list[str]:
    """``count`` reports under ``directory``, written as gpudoctor writes them (indented JSON)."""
    base = templates()
    paths = []
    for number in range(count):
        report = json.loads(json.dumps(base[number % len(base)]))
        name = f"node-{number + 1:06d}"
        _rename(report, name)
        path = directory / f"{name}.json"
        path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        paths.append(str(path))
    return paths


def timed(cmd: list[str], repeat: int, env: dict[str, str]) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=env)
        times.append(time.perf_counter() - start)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="also profile one merge in this process")
    parser.add_argument("--keep", default=None, help="write the reports here and keep them")
    parser.add_argument("--src", action="append", default=None, help="a gpudoctor source tree to time (repeatable)")
    args = parser.parse_args()

    directory = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gpudoctor-merge-"))
    directory.mkdir(parents=True, exist_ok=True)
    paths = write_reports(directory, args.reports)
    size = sum(os.path.getsize(p) for p in paths)
    # the directory, not the paths: a command line may not hold 10 000 of them
    cmd = [sys.executable, "-m", "gpudoctor", "report", "merge", "--format", "json", str(directory)]
    print(f"{args.reports} reports, {size / 1e6:.0f} MB of JSON")
    floor = statistics.median(timed([sys.executable, "-c", "pass"], 5, dict(os.environ)))
    print(f"python -c pass     {floor:8.3f} s")
    for src in args.src or [str(REPO / "src")]:
        env = dict(os.environ, PYTHONPATH=src)
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # timed as installed: compiled modules cached
        timed(cmd, 1, env)  # warm-up: page cache, pyc files
        merge = timed(cmd, args.repeat, env)
        median = statistics.median(merge)
        print(f"report merge       {median:8.3f} s median of {len(merge)} (min {min(merge):.3f})  {src}")
        print(f"per report         {1000 * (median - floor) / args.reports:8.3f} ms")
    if args.profile:
        sys.path.insert(0, str(REPO / "src"))
        from gpudoctor.fleet.merge import merge as merge_reports

        profile = cProfile.Profile()
        profile.runcall(merge_reports, paths)
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    if not args.keep:
        for path in paths:
            os.unlink(path)
        directory.rmdir()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
