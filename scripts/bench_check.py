#!/usr/bin/env python3
"""Time `gpudoctor check` whole-process beside reference commands measured in the same run.

    python scripts/bench_check.py [--runs 15] [--facts FILE] [--src OLD/src --src NEW/src] [--torch]
                                  [-- extra gpudoctor check args]

References: `nvidia-smi -q` (where present: the driver's own full query), `python -c pass`
(the interpreter's start-up floor), `python -c "import click"` (that and the CLI framework
gpudoctor is built on: a floor no click command can go under), where NVML answers `python -c
"<NVML started, each GPU's handle and name read>"` (a floor for any Python that asks NVML: `check`
needs its answers before it judges the GPUs) and, with --torch, `python -c "import torch"`.
Timed for each tree: `gpudoctor check` (this machine: probes and rules), `gpudoctor probe -o
/dev/null` (the probes alone) and, with --facts FILE, `gpudoctor check --facts FILE` (a saved
snapshot judged: no probe; the mode to use on a machine without GPUs).

Every command runs through `python -m gpudoctor` with PYTHONPATH set to the tree measured (its
src/ folder, with the tree's rules/ beside it; default this checkout's); one that exits 2 (could
not run) in the warm-up stops the script. With `--src` twice the two trees (A, B) are measured in
the same run and the B/A ratio of each median is printed. Commands are interleaved: each round
runs every command once, so a load that comes and goes on a shared machine falls on all of them
alike. Each tree gets a rule cache of its own (filled by a warm-up run of each command first),
as on a node that ran check before. Bytecode: the warm-up also writes the trees' .pyc files
unless PYTHONDONTWRITEBYTECODE is set, which would time the byte-compiler instead (a warning
says so).

Targets (issue 16): `check` within 1.15x of `nvidia-smi -q` on a 1 x H200 host; `check --facts
FILE` at most 0.07 s on the development machine. Prints a table of median / min / max wall
seconds and median CPU seconds (user + system, children included: less swayed by other load
than wall time) per command and tree, the B/A ratios of the median, the minimum and the CPU
median, the gpudoctor/nvidia-smi ratio and the targets' verdicts. Not a
test: timings on a shared machine vary; compare medians of one run, and ratios to the
references timed with them.
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


# The least a Python program asking NVML does: start it, then read each GPU's handle and name.
NVML_FLOOR = (
    "import pynvml as n; n.nvmlInit(); "
    "[n.nvmlDeviceGetName(n.nvmlDeviceGetHandleByIndex(i)) for i in range(n.nvmlDeviceGetCount())]; "
    "n.nvmlShutdown()"
)


def timed_once(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system of the command and the children it waited for)
    and the exit status of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode


def tree_env(src: Path, cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(src)  # only the tree measured
    env["GPUDOCTOR_CACHE_DIR"] = str(cache)
    return env


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="rounds (each runs every command once)")
    parser.add_argument("--torch", action="store_true", help="also time `import torch` (slow; at most 3 runs)")
    parser.add_argument("--facts", type=Path, help="also time `check --facts FILE` (no probe)")
    parser.add_argument(
        "--src",
        type=Path,
        action="append",
        help="a gpudoctor source tree (its src/ folder); twice: A and B interleaved, with B/A ratios "
        "(default: this checkout's src/)",
    )
    parser.add_argument("extra", nargs="*", help="extra arguments for gpudoctor check")
    args = parser.parse_args()
    srcs = [p.resolve() for p in (args.src or [REPO / "src"])]
    if len(srcs) > 2:
        parser.error("--src: at most two trees")
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print("warning: PYTHONDONTWRITEBYTECODE is set: a tree without .pyc files times the compiler", file=sys.stderr)
    labels = ["A", "B"] if len(srcs) == 2 else [""]

    with tempfile.TemporaryDirectory(prefix="bench-check-") as work:
        envs = [tree_env(src, Path(work) / f"cache-{i}") for i, src in enumerate(srcs)]
        commands: list[tuple[str, list[str], dict[str, str] | None]] = [
            ("python -c pass", [sys.executable, "-c", "pass"], None),
            ("import click", [sys.executable, "-c", "import click"], None),
        ]
        gpudoctor = [sys.executable, "-m", "gpudoctor"]
        for label, env in zip(labels, envs):
            tag = f" {label}" if label else ""
            commands.append((f"check{tag}", [*gpudoctor, "check", *args.extra], env))
            if args.facts is not None:
                facts = [*gpudoctor, "check", "--facts", str(args.facts), *args.extra]
                commands.append((f"check --facts{tag}", facts, env))
            commands.append((f"probe{tag}", [*gpudoctor, "probe", "-o", os.devnull], env))
        if shutil.which("nvidia-smi"):
            commands.append(("nvidia-smi -q", ["nvidia-smi", "-q"], None))
            nvml = [sys.executable, "-c", NVML_FLOOR]
            if subprocess.run(nvml, capture_output=True, check=False).returncode == 0:  # pynvml and a GPU
                commands.append(("python + NVML", nvml, None))
        for name, cmd, env in commands:  # warm-up: page cache, .pyc files, rule caches
            _, _, code = timed_once(cmd, env)
            if code >= 2 and name != "nvidia-smi -q" and not (name.startswith("check") and code == 3):
                # 2: gpudoctor could not run (a tree without its rules/ beside src/, a bad FILE):
                # timing how fast it fails would say nothing
                print(f"error: {name} exits {code}: {shlex.join(cmd)}", file=sys.stderr)
                return 2
        results: dict[str, list[float]] = {name: [] for name, _, _ in commands}
        cpus: dict[str, list[float]] = {name: [] for name, _, _ in commands}
        for _ in range(args.runs):
            for name, cmd, env in commands:
                wall, cpu, _ = timed_once(cmd, env)
                results[name].append(wall)
                cpus[name].append(cpu)
        if args.torch:
            torch = [sys.executable, "-c", "import torch"]
            runs = [timed_once(torch) for _ in range(min(3, args.runs))]
            results["import torch"], cpus["import torch"] = [r[0] for r in runs], [r[1] for r in runs]

    for label, src in zip(labels, srcs):
        print(f"tree {label} {src}".replace("  ", " "))
    print(f"{'command':<20} {'median s':>9} {'min s':>7} {'max s':>7} {'cpu s':>7}  runs")
    medians = {name: statistics.median(times) for name, times in results.items()}
    cpu_medians = {name: statistics.median(times) for name, times in cpus.items()}
    for name, times in results.items():
        row = f"{medians[name]:>9.3f} {min(times):>7.3f} {max(times):>7.3f} {cpu_medians[name]:>7.3f}"
        print(f"{name:<20} {row}  {len(times)}")
    if len(srcs) == 2:
        for name in ("check", "check --facts", "probe"):
            if f"{name} A" in medians:
                wall = medians[f"{name} B"] / medians[f"{name} A"]
                least = min(results[f"{name} B"]) / min(results[f"{name} A"])
                cpu = cpu_medians[f"{name} B"] / cpu_medians[f"{name} A"]
                print(f"{name + ' B/A':<20} {wall:>9.2f} {least:>7.2f} {'':>7} {cpu:>7.2f}")
    last = f" {labels[-1]}" if labels[-1] else ""
    check = medians[f"check{last}"]
    floor = medians["import click"]
    if "nvidia-smi -q" in medians:
        smi = medians["nvidia-smi -q"]
        ratio = check / smi
        print(f"check{last} / nvidia-smi -q = {ratio:.2f} (target 1.15: {'meets' if ratio <= 1.15 else 'MISSES'})")
        above = check - floor
        print(f"floor: python + import click = {floor / smi:.2f} x nvidia-smi -q; check{last} above it: {above:.3f} s")
        if "python + NVML" in medians:
            print(f"floor: python + NVML started = {medians['python + NVML'] / smi:.2f} x nvidia-smi -q")
    if f"check --facts{last}" in medians:
        facts = medians[f"check --facts{last}"]
        print(f"check --facts{last}: {facts:.3f} s median (target 0.07 s: {'meets' if facts <= 0.07 else 'MISSES'})")
        print(f"check --facts{last} - python -c pass = {facts - medians['python -c pass']:.3f} s")
        print(f"check --facts{last} - import click = {facts - floor:.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
