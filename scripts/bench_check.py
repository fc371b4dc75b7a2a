#!/usr/bin/env python3
"""Time `gpudoctor check` whole-process beside reference commands measured in the same run.

    python scripts/bench_check.py [--runs 15] [-- extra gpudoctor check args]

References: `nvidia-smi -q` (where present: the driver's own full query), `python -c pass`
(the interpreter's start-up floor) and, with --torch, `python -c "import torch"`.
Target: gpudoctor check under 0.25 s on a 2-GPU host and on a machine without GPUs.
Prints a table of median / min / max wall seconds and the gpudoctor/nvidia-smi ratio.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time


def timed(cmd: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - t0)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--torch", action="store_true", help="also time `import torch` (slow)")
    parser.add_argument("extra", nargs="*", help="extra arguments for gpudoctor check")
    args = parser.parse_args()

    commands: list[tuple[str, list[str]]] = [
        ("python -c pass", [sys.executable, "-c", "pass"]),
        ("gpudoctor check", [sys.executable, "-m", "gpudoctor", "check", *args.extra]),
        ("gpudoctor probe", [sys.executable, "-m", "gpudoctor", "probe", "-o", "/dev/null"]),
    ]
    if shutil.which("nvidia-smi"):
        commands.append(("nvidia-smi -q", ["nvidia-smi", "-q"]))
    if args.torch:
        commands.append(("import torch", [sys.executable, "-c", "import torch"]))
    # one warm-up of each (page cache, pyc files), then interleave is not needed: medians suffice
    for _, cmd in commands:
        timed(cmd, 1)
    results = {name: timed(cmd, args.runs if name != "import torch" else min(3, args.runs)) for name, cmd in commands}
    print(f"{'command':<18} {'median s':>9} {'min s':>7} {'max s':>7}  runs")
    for name, times in results.items():
        print(f"{name:<18} {statistics.median(times):>9.3f} {min(times):>7.3f} {max(times):>7.3f}  {len(times)}")
    check = statistics.median(results["gpudoctor check"])
    if "nvidia-smi -q" in results:
        print(f"gpudoctor check / nvidia-smi -q = {check / statistics.median(results['nvidia-smi -q']):.2f}")
    verdict = "meets" if check < 0.25 else "MISSES"
    print(f"target 0.25 s: {verdict} ({check:.3f} s median)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
