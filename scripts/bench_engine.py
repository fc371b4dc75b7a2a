#!/usr/bin/env python3
"""Time the rule engine on synthetic rule sets and snapshots, beside `python -c pass` in the same run.

    python scripts/bench_engine.py [--quick] [--repeat 3] [--rules 100,1000] [--gpus 1,8] [--max-evals N]
                                   [--clock cpu] [--src OLD/src --src NEW/src]

Rule sets: the built-in rules (rules/*.yaml, not the gate's), taken in order and copied until there
are 100, 1 000 or 10 000 of them, each copy's ids made unique (superseded_by names the same copy's
rules), with the built-in data tables. Snapshots: tests/fixtures/snapshots/h200-x2.json with its
GPUs copied to 1, 8, 64 or 512 (each with its own index, bus id, UUID and PCI device).

Each cell runs in a fresh interpreter (so its peak memory is its own), which loads the rules
(cold: GPUDOCTOR_NO_CACHE=1, every file parsed and checked; warm: from a rule cache the script
filled before), reads the snapshot and runs every rule on every subject: the time of each step,
the child's peak resident memory and its whole wall time are printed, with `python -c pass` timed
in the same run as the floor every child pays. The last lines fit run time = a + b x evaluations
(one evaluation: one rule on one subject, so one finding) over the cells, and say how far each
cell is from that line: a cell far above it is work that grows faster than rules x subjects.

`--quick` (about a minute): rules 100 and 1 000 on 1, 8 and 64 GPUs. Not a test: timings on a
shared machine vary; compare runs made one after the other, and ratios to the reference.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SNAPSHOT = REPO / "tests" / "fixtures" / "snapshots" / "h200-x2.json"
RULES = REPO / "rules"


def _yaml() -> Any:
    import yaml

    return yaml


def real_rules(rules: Path = RULES) -> list[dict[str, Any]]:
    """The built-in rules `check` runs (those in ``rules``), in file order."""
    out: list[dict[str, Any]] = []
    for path in sorted(rules.glob("*.yaml")):
        out.extend(_yaml().safe_load(path.read_text(encoding="utf-8")) or [])
    return out


def write_ruleset(directory: Path, count: int, rules: Path = RULES) -> None:
    """``count`` rules made from the real ones in ``rules`` (copy k's ids end in -sK) and its data tables."""
    base = real_rules(rules)
    shutil.copytree(rules / "data", directory / "data")
    made = 0
    k = 0
    while made < count:
        chunk = base[: count - made]
        ids = {r["id"] for r in chunk}
        suffix = f"-s{k}" if k else ""
        rules = []
        for raw in chunk:
            rule = copy.deepcopy(raw)
            rule["id"] = raw["id"] + suffix
            if "superseded_by" in rule:
                kept = [i + suffix for i in raw["superseded_by"] if i in ids]
                if kept:
                    rule["superseded_by"] = kept
                else:
                    del rule["superseded_by"]
            rules.append(rule)
        text = _yaml().safe_dump(rules, sort_keys=False, allow_unicode=True)
        (directory / f"copy-{k:04d}.yaml").write_text(text, encoding="utf-8")
        made += len(chunk)
        k += 1


def _bus_id(i: int) -> str:
    return f"0000:{1 + i // 32:02x}:{i % 32:02x}.0"


def write_snapshot(path: Path, gpus: int) -> None:
    """The H200 snapshot with ``gpus`` GPUs: NVML's and sysfs's record of GPU 0 copied, each copy
    with its own index, bus id, serial and UUID."""
    facts = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    nvml_gpu = facts["nvml"]["gpus"][0]
    pci = facts["pci"]["devices"]
    pci_gpu = next(d for d in pci if d.get("kind") == "gpu")
    others = [d for d in pci if d.get("kind") != "gpu"]
    nvml_gpus, pci_gpus = [], []
    for i in range(gpus):
        bus = _bus_id(i)
        g = copy.deepcopy(nvml_gpu)
        g.update(index=i, bus_id=bus, uuid=f"GPU-{i:08x}-0000-0000-0000-000000000000", serial=f"SCRUBBED{i}")
        g["nvlink_peers"] = [j for j in range(min(gpus, 8)) if j != i] if gpus > 1 else []
        nvml_gpus.append(g)
        d = copy.deepcopy(pci_gpu)
        d.update(bus_id=bus, path=f"/sys/devices/pci0000:00/{bus}")
        pci_gpus.append(d)
    facts["nvml"]["gpus"] = nvml_gpus
    facts["nvml"]["device_count"] = gpus
    facts["pci"]["devices"] = pci_gpus + others
    facts["modules"]["nvidia_device_nodes"] = gpus
    facts["modules"]["nvidia_device_nodes_accessible"] = gpus
    facts["host"]["env"]["NVIDIA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(gpus))
    path.write_text(json.dumps(facts), encoding="utf-8")


# What each cell's fresh interpreter runs: argv is rules dir, snapshot; prints one JSON line.
CHILD = """
import json, resource, sys, time
clock = time.process_time if sys.argv[3] == "cpu" else time.perf_counter
t0 = clock()
from gpudoctor.engine.loader import load_rules
from gpudoctor.engine.runner import run_rules
from gpudoctor.facts import load_snapshot
t1 = clock()
ruleset = load_rules([sys.argv[1]], include_builtin=False, include_plugins=False)
t2 = clock()
facts = load_snapshot(sys.argv[2])
t3 = clock()
findings = run_rules(ruleset, facts)
t4 = clock()
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "snapshot": t3 - t2, "run": t4 - t3,
                  "rules": len(ruleset.rules), "findings": len(findings),
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def child_env(cache: Path | None, src: Path = REPO / "src") -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(src)  # only the tree measured
    env.pop("GPUDOCTOR_NO_CACHE", None)
    if cache is None:
        env["GPUDOCTOR_NO_CACHE"] = "1"
    else:
        env["GPUDOCTOR_CACHE_DIR"] = str(cache)
    env["GPUDOCTOR_NO_PLUGINS"] = "1"
    # bytecode cached, as after `pip install` (some images set PYTHONDONTWRITEBYTECODE=1)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run_cell(rules_dir: Path, snapshot: Path, cache: Path | None, src: Path, clock: str = "wall") -> dict[str, Any]:
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(rules_dir), str(snapshot), clock],
        env=child_env(cache, src),
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"cell failed:\n{done.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    out["wall"] = wall
    return out


def floor(repeat: int) -> float:
    times = []
    for _ in range(max(repeat, 3)):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], env=child_env(None), check=False)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares a + b x."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return my, 0.0
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - b * mx, b


STEPS = ("import", "load", "snapshot", "run", "wall", "rss_mb")


def measure(
    args: argparse.Namespace, srcs: list[Path], rule_counts: list[int], gpu_counts: list[int], repeat: int
) -> Any:
    """Every cell's medians for each source tree (interleaved: tree A's run of a cell, then tree
    B's, and again), and `python -c pass` before and after them."""
    modes = ("warm",) if args.no_cold else ("warm", "cold")
    work = Path(tempfile.mkdtemp(prefix="gpudoctor-bench-"))
    rows = []
    try:
        snapshots = {}
        for n in gpu_counts:
            snapshots[n] = work / f"h200-x{n}.json"
            write_snapshot(snapshots[n], n)
        reference = floor(repeat)
        for count in rule_counts:
            # one rule set for every tree, or (--own-rules) each tree's made from its own rules/
            rules_dirs = [work / f"rules-{count}-{i}" for i in range(len(srcs) if args.own_rules else 1)]
            for i, rules_dir in enumerate(rules_dirs):
                rules_dir.mkdir()
                write_ruleset(rules_dir, count, srcs[i].parent / "rules" if args.own_rules else RULES)
            rules_of = [rules_dirs[i if args.own_rules else 0] for i in range(len(srcs))]
            caches = [work / f"cache-{count}-{i}" for i in range(len(srcs))]
            for src, cache, rules_dir in zip(srcs, caches, rules_of):
                cache.mkdir(mode=0o700)
                run_cell(rules_dir, snapshots[gpu_counts[0]], cache, src, args.clock)  # fills the cache
            for n in gpu_counts:
                # about half the built-in rules judge each GPU: about rules x (GPUs / 2 + 1) evaluations
                if count * (n / 2 + 1) > args.max_evals:
                    print(f"skipped {count} rules x {n} GPUs (over --max-evals)", file=sys.stderr)
                    continue
                for mode in modes:
                    results: list[list[dict[str, Any]]] = [[] for _ in srcs]
                    for _ in range(repeat):
                        for i, src in enumerate(srcs):
                            where = caches[i] if mode == "warm" else None
                            results[i].append(run_cell(rules_of[i], snapshots[n], where, src, args.clock))
                    for i in range(len(srcs)):
                        best = {k: statistics.median(r[k] for r in results[i]) for k in STEPS}
                        best["findings"] = results[i][0]["findings"]
                        rows.append((count, n, mode, i, best))
                    print(f"  {count} x {n} {mode}: run {best['run']:.3f} s", file=sys.stderr)
        reference_after = floor(repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows, reference, reference_after, modes


def report(
    rows: list[Any], srcs: list[Path], reference: float, reference_after: float, modes: tuple[str, ...], repeat: int
) -> None:
    print(f"python -c pass: {reference:.3f} s before the cells, {reference_after:.3f} s after (median)")
    print(f"runs per cell: {repeat} (median); cold: GPUDOCTOR_NO_CACHE=1; warm: from the rule cache")
    for i, src in enumerate(srcs):
        print()
        print(f"tree {'AB'[i] if len(srcs) > 1 else ''} {src}".replace("  ", " "))
        table(rows, i, reference, modes)
    if len(srcs) > 1:
        print()
        print("B / A (each cell's median of B over A's, same run):")
        print(" ".join(f"{c:>9}" for c in ("rules", "GPUs", "cache", "load", "run", "load+run", "wall", "peak MB")))
        a_rows = {(c, n, m): r for c, n, m, i, r in rows if i == 0}
        for count, n, mode, i, r in rows:
            a = a_rows.get((count, n, mode))
            if i != 1 or a is None:
                continue
            ratios = [r[k] / a[k] if a[k] else 0.0 for k in ("load", "run")]
            ratios.append((r["load"] + r["run"]) / (a["load"] + a["run"]))
            ratios += [r["wall"] / a["wall"], r["rss_mb"] / a["rss_mb"]]
            print(" ".join(f"{c:>9}" for c in (f"{count}", f"{n}", mode, *(f"{x:.2f}" for x in ratios))))


def table(rows: list[Any], which: int, reference: float, modes: tuple[str, ...]) -> None:
    columns = ("rules", "GPUs", "cache", "findings", "import s", "load s", "run s", "load+run", "wall s", "/ pass")
    print(" ".join(f"{c:>9}" for c in (*columns, "peak MB", "us/eval")))
    mine = [(count, n, mode, r) for count, n, mode, i, r in rows if i == which]
    for count, n, mode, r in mine:
        per = r["run"] / r["findings"] * 1e6 if r["findings"] else 0.0
        cells = [f"{count}", f"{n}", mode, f"{r['findings']}"]
        cells += [f"{r[k]:.3f}" for k in ("import", "load", "run")]
        cells += [f"{r['load'] + r['run']:.3f}", f"{r['wall']:.3f}", f"{r['wall'] / reference:.1f}"]
        cells += [f"{r['rss_mb']:.0f}", f"{per:.1f}"]
        print(" ".join(f"{c:>9}" for c in cells))
    warm = [(float(r["findings"]), r["run"], count, n) for count, n, mode, r in mine if mode == "warm"]
    if len(warm) >= 2:
        a, b = fit([(x, y) for x, y, _, _ in warm])
        print(f"fit over the warm cells: run s = {a:.4f} + {b * 1e6:.2f} us x evaluations (rule x subject)")
        excess, count, n = max(((y - (a + b * x)) / max(y, 1e-9), count, n) for x, y, count, n in warm)
        print(f"largest excess over the fit: {excess * 100:.0f}% of the run ({count} rules x {n} GPUs)")
    for mode in modes:
        pts = [(float(count), r["load"]) for count, _, m, r in mine if m == mode]
        if len({x for x, _ in pts}) >= 2:
            a, b = fit(pts)
            print(f"fit over the {mode} loads: load s = {a:.4f} + {b * 1e3:.3f} ms x rules")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="rules 100,1000 x GPUs 1,8,64 (about a minute)")
    parser.add_argument("--rules", default=None, help="rule counts, comma-separated (default 100,1000,10000)")
    parser.add_argument("--gpus", default=None, help="GPU counts, comma-separated (default 1,8,64,512)")
    parser.add_argument("--repeat", type=int, default=None, help="runs per cell, the median kept (default 3, quick 1)")
    parser.add_argument(
        "--max-evals", type=int, default=600_000, help="skip cells with more rule x subject evaluations than this"
    )
    parser.add_argument("--no-cold", action="store_true", help="warm cells only")
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="what the steps are timed by: wall (default) or the child's CPU time (on a busy "
        "machine a wall time includes waiting for a core)",
    )
    parser.add_argument(
        "--src",
        action="append",
        type=Path,
        help="a gpudoctor source tree (its src/ folder) to measure; twice: A and B interleaved, with B/A ratios "
        "(default: this checkout's src/)",
    )
    parser.add_argument(
        "--own-rules",
        action="store_true",
        help="make each tree's rule sets from the rules/ beside its src/ (a tree older than today's rules "
        "cannot load them); B/A then compares the same cell as each tree defines it",
    )
    args = parser.parse_args()
    srcs = args.src or [REPO / "src"]
    if args.own_rules and not all((s.parent / "rules").is_dir() for s in srcs):
        parser.error("--own-rules: each --src tree needs a rules/ folder beside its src/")
    if len(srcs) > 2:
        parser.error("--src: at most two trees")
    rule_counts = _ints(args.rules or ("100,1000" if args.quick else "100,1000,10000"))
    gpu_counts = _ints(args.gpus or ("1,8,64" if args.quick else "1,8,64,512"))
    repeat = args.repeat or (1 if args.quick else 3)
    rows, reference, reference_after, modes = measure(args, srcs, rule_counts, gpu_counts, repeat)
    report(rows, srcs, reference, reference_after, modes, repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
