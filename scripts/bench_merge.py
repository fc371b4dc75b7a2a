#!/usr/bin/env python3
"""Time `gpudoctor report merge` of many node reports, beside `python -c pass` in the same run.

    python scripts/bench_merge.py [--reports 10000] [--repeat 3] [--profile] [--keep DIR] [--src OLD/src ...]

The reports are made from the fleet fixtures (tests/fixtures/fleet/node-*.json: check reports of
the real H200 snapshot, two of them drifted) and the gate goldens (tests/golden/gate/*.json that
are gate reports), copied in turn until there are --reports of them, each under its own hostname
(node-000001 ...) so every one counts. The command runs in a fresh interpreter each time, as a
user runs it (`report merge --format json`, output to /dev/null); --profile adds a cProfile of
one merge in this process (read in it alone), the 25 costliest functions by their own time.
Each run's CPU time (user and system, its reading processes' too) is shown beside its wall
time: on a loaded machine it moves far less. --src (repeatable)
times the gpudoctor under each source tree instead of this checkout's, on the same reports, the
trees in turn in each of the --repeat rounds. A tree of this version reads the reports in one
process per CPU (report merge --jobs, its default). The floor beside it: the same files read
and parsed by json.loads alone, in as many processes (at most 16, as merge's default), which
no merge that reads every report can go under. Not a test: timings on a shared machine
vary; compare the trees of one run, and ratios to the reference.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
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
    """The reports copied: every fleet check report and every gate golden that is a gate report.
    The fleet reports are generated fixtures (not in git): written first where they are missing or
    stale, as a test session would."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tests.helpers.generated import ensure

    ensure()
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


def write_reports(directory: Path, count: int, base: list[dict[str, Any]] | None = None) -> list[str]:
    """``count`` reports under ``directory``, copies of ``base`` (default: templates()) in turn,
    written as gpudoctor writes them (indented JSON)."""
    base = templates() if base is None else base
    paths = []
    for number in range(count):
        report = json.loads(json.dumps(base[number % len(base)]))
        name = f"node-{number + 1:06d}"
        _rename(report, name)
        path = directory / f"{name}.json"
        path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        paths.append(str(path))
    return paths


# The floor: read every *.json file of a directory and json.loads it, in one process per CPU (at
# most 16, as report merge's default), nothing else. argv: the directory.
FLOOR = """
import json, multiprocessing, os, sys
def load(paths):
    for path in paths:
        with open(path, "rb") as f:
            json.loads(f.read())
    return len(paths)
paths = sorted(os.path.join(sys.argv[1], n) for n in os.listdir(sys.argv[1]) if n.endswith(".json"))
try:
    cpus = len(os.sched_getaffinity(0))
except (AttributeError, OSError):
    cpus = os.cpu_count() or 1
jobs = max(1, min(cpus, 16))
try:
    if jobs == 1:
        raise OSError("one CPU")
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        read = sum(pool.map(load, [paths[i::jobs] for i in range(jobs)]))
except OSError:  # as report merge: where no worker can be started, in this process
    read = load(paths)
assert read == len(paths)
"""


# report merge's exit statuses that mean it merged: 0, and 1 (a node is no-go)
MERGED = (0, 1)


def timed(
    cmd: list[str], repeat: int, env: dict[str, str], cpu: list[float] | None = None, ok: tuple[int, ...] = (0,)
) -> list[float]:
    """Wall seconds of each of ``repeat`` runs; with ``cpu``, each run's CPU seconds (user and
    system, its reading processes included) are added to it. A run that exits with a status not
    in ``ok`` stops the script, with its error output: a run that failed has no time worth showing."""
    times = []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False, env=env)
        times.append(time.perf_counter() - start)
        if done.returncode not in ok:
            raise SystemExit(f"exit {done.returncode}: {cmd[:4]}...\n{done.stderr.decode(errors='replace')[-2000:]}")
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if cpu is not None:
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
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
    base = templates()
    paths = write_reports(directory, args.reports, base)
    size = sum(os.path.getsize(p) for p in paths)
    kinds = [t.get("kind") == "gate" for t in base]
    print(f"copies of {kinds.count(False)} check and {kinds.count(True)} gate reports", end=": ")
    # the directory, not the paths: a command line may not hold 10 000 of them
    cmd = [sys.executable, "-m", "gpudoctor", "report", "merge", "--format", "json", str(directory)]
    print(f"{args.reports} reports, {size / 1e6:.0f} MB of JSON")
    floor = statistics.median(timed([sys.executable, "-c", "pass"], 5, dict(os.environ)))
    print(f"python -c pass     {floor:8.3f} s")
    parsed = statistics.median(timed([sys.executable, "-c", FLOOR, str(directory)], args.repeat, dict(os.environ)))
    print(f"json.loads alone   {parsed:8.3f} s (every report read and parsed, one process per CPU up to 16)")
    trees = args.src or [str(REPO / "src")]
    envs = []
    for src in trees:
        env = dict(os.environ, PYTHONPATH=src)
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # timed as installed: compiled modules cached
        timed(cmd, 1, env, ok=MERGED)  # warm-up: page cache, pyc files
        envs.append(env)
    merge: list[list[float]] = [[] for _ in trees]
    cpu: list[list[float]] = [[] for _ in trees]
    for _ in range(args.repeat):  # the trees in turn, so a change in the machine's load hits each
        for number, env in enumerate(envs):
            merge[number] += timed(cmd, 1, env, cpu[number], ok=MERGED)
    for src, times, cpus in zip(trees, merge, cpu):
        median = statistics.median(times)
        print(f"report merge       {median:8.3f} s median of {len(times)} (min {min(times):.3f})  {src}")
        print(f"per report         {1000 * (median - floor) / args.reports:8.3f} ms")
        used = statistics.median(cpus)
        print(f"CPU, all processes {used:8.3f} s median ({1000 * used / args.reports:.3f} ms a report)")
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
