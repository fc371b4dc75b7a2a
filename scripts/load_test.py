#!/usr/bin/env python3
"""Many gpudoctor processes at once, as 8 ranks x 8 nodes start it on a shared filesystem.

    python scripts/load_test.py [-n 64] [--root DIR] [--dir OUT] [--shared] [--warm] [-- EXTRA CHECK ARGS]

Starts N `gpudoctor check --root ROOT --format json -o DIR/report-K.json` processes together
(default: 64 over the healthy-2gpu fixture host, so it runs on any machine; --root / for the live
machine), waits for all, and checks that every one exited 0 or 1, that every report is there and
is complete JSON naming its verdict, and that no temporary file was left in DIR. With --shared,
half of the processes write one and the same file while a reader keeps opening it: it must never
see a half-written report (writes are atomic renames). Prints the total wall time beside the time
of one run measured just before in the same session, and per-process latency.

The rule cache starts cold (a fresh GPUDOCTOR_CACHE_DIR), the worst case: every process compiles
the rules and races to store them. --warm primes it first. Exit status 0 when all is well, 1 when
anything was lost, half-written or failed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_ROOT = REPO / "tests" / "fixtures" / "hosts" / "healthy-2gpu"


def command(root: str, output: Path, extra: list[str]) -> list[str]:
    argv = [sys.executable, "-m", "gpudoctor", "check", "--format", "json", "-o", str(output)]
    if root != "/":
        argv += ["--root", root]
    return argv + extra


def environment(cache: Path) -> dict[str, str]:
    env = dict(os.environ, GPUDOCTOR_CACHE_DIR=str(cache))
    src = str(REPO / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


class SharedReader(threading.Thread):
    """Opens the shared report again and again while the writers run; every read must parse."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.stop = threading.Event()
        self.reads = 0
        self.bad: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                text = self.path.read_text(encoding="utf-8")
            except FileNotFoundError:
                time.sleep(0.001)
                continue
            self.reads += 1
            try:
                json.loads(text)["verdict"]
            except (ValueError, KeyError, TypeError) as exc:
                self.bad.append(f"read {self.reads}: {len(text)} bytes, {type(exc).__name__}")


def run_load(
    count: int, root: str, out: Path, shared: bool, extra: list[str], env: dict[str, str]
) -> dict[str, object]:
    out.mkdir(parents=True, exist_ok=True)
    shared_path = out / "report-shared.json"
    targets = [shared_path if shared and k % 2 else out / f"report-{k}.json" for k in range(count)]
    reader = SharedReader(shared_path) if shared else None
    if reader:
        reader.start()
    started = time.monotonic()
    procs = []
    for target in targets:  # as fast as they can be started, none waits for another
        procs.append((subprocess.Popen(command(root, target, extra), env=env, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE, stdin=subprocess.DEVNULL), time.monotonic()))
    codes, latencies, errors = [], [], []
    for proc, launched in procs:
        _, err = proc.communicate(timeout=600)
        latencies.append(time.monotonic() - launched)
        codes.append(proc.returncode)
        if proc.returncode not in (0, 1):
            errors.append(err.decode("utf-8", "replace").strip()[-300:])
    total = time.monotonic() - started
    if reader:
        reader.stop.set()
        reader.join(timeout=5)
    return {"total": total, "codes": codes, "latencies": latencies, "errors": errors, "targets": targets,
            "reader": reader}


def verify(result: dict[str, object], out: Path) -> list[str]:
    problems: list[str] = []
    codes = result["codes"]
    assert isinstance(codes, list)
    bad_codes = [c for c in codes if c not in (0, 1)]
    if bad_codes:
        problems.append(f"{len(bad_codes)} process(es) could not run (exit {sorted(set(bad_codes))}): "
                        f"{result['errors'][:1]}")
    targets = result["targets"]
    assert isinstance(targets, list)
    for target in sorted(set(targets)):
        try:
            report = json.loads(target.read_text(encoding="utf-8"))
            if report.get("verdict") not in ("pass", "fail"):
                problems.append(f"{target.name}: no verdict")
        except FileNotFoundError:
            problems.append(f"{target.name}: missing (a report was lost)")
        except ValueError as exc:
            problems.append(f"{target.name}: not complete JSON ({exc})")
    leftovers = [p.name for p in out.iterdir() if p.name.startswith(".")]
    if leftovers:
        problems.append(f"temporary files left behind: {leftovers[:5]}")
    reader = result["reader"]
    if isinstance(reader, SharedReader):
        if reader.bad:
            problems.append(f"the shared report was seen half-written {len(reader.bad)} time(s): {reader.bad[:3]}")
        if reader.reads == 0:
            problems.append("the reader never saw the shared report")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", "--count", type=int, default=64, help="processes to start at once (default 64)")
    parser.add_argument("--root", default=str(DEFAULT_ROOT), help="host root to check ('/' for this machine)")
    parser.add_argument("--dir", help="directory for the reports (default: a new temporary one)")
    parser.add_argument("--shared", action="store_true", help="half of the processes write one shared file")
    parser.add_argument("--warm", action="store_true", help="prime the rule cache before the load")
    parser.add_argument("extra", nargs="*", help="more `gpudoctor check` arguments (after --)")
    args = parser.parse_args(argv)
    if Path(args.root).resolve() == DEFAULT_ROOT.resolve():
        sys.path.insert(0, str(REPO))
        from tests.helpers import generated

        generated.ensure()  # the fixture hosts are generated, not kept in git

    work = Path(tempfile.mkdtemp(prefix="gpudoctor-load-"))
    out = Path(args.dir) if args.dir else work / "reports"
    env = environment(work / "cache")
    if args.warm:
        subprocess.run(command(args.root, work / "warm.json", args.extra), env=env, check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # One run on its own first, from the same cache state as the load, as the reference.
    env_single = env if args.warm else environment(work / "cache-single")
    t0 = time.monotonic()
    single = subprocess.run(command(args.root, work / "single.json", args.extra), env=env_single,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    one = time.monotonic() - t0
    if single.returncode not in (0, 1):
        print(f"a single run failed (exit {single.returncode}): {single.stderr.decode()[-500:]}", file=sys.stderr)
        return 1

    result = run_load(args.count, args.root, out, args.shared, args.extra, env)
    problems = verify(result, out)
    latencies = sorted(result["latencies"])  # type: ignore[arg-type]
    total = result["total"]
    assert isinstance(total, float)
    cpus = os.cpu_count() or 1
    print(f"gpudoctor load test: {args.count} processes at once on {cpus} CPU(s), root {args.root}, "
          f"rule cache {'warm' if args.warm else 'cold'}{', half writing one shared file' if args.shared else ''}")
    print(f"  {'one run alone':<34} {one:8.2f} s")
    print(f"  {f'{args.count} at once, all finished':<34} {total:8.2f} s   "
          f"({total / one:.1f}x one run; {args.count} runs back to back would be about {args.count * one:.1f} s)")
    print(f"  {'per-process latency':<34} p50 {statistics.median(latencies):.2f} s   "
          f"p95 {latencies[int(0.95 * (len(latencies) - 1))]:.2f} s   max {latencies[-1]:.2f} s")
    codes = result["codes"]
    assert isinstance(codes, list)
    print(f"  {'exit statuses':<34} " + ", ".join(f"{c}: {codes.count(c)}" for c in sorted(set(codes))))
    reader = result["reader"]
    if isinstance(reader, SharedReader):
        print(f"  {'shared report reads':<34} {reader.reads} (all complete: {'yes' if not reader.bad else 'NO'})")
    print(f"  reports in {out}")
    if problems:
        print("PROBLEMS:", file=sys.stderr)
        for problem in problems:
            print(f"  - {problem}", file=sys.stderr)
        return 1
    print(f"  all {len(set(result['targets']))} report file(s) complete, none lost, no temporary file left")  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
