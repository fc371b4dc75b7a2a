#!/usr/bin/env python3
"""Time `gpudoctor gate` and `gpudoctor gate --deep` beside torch's own CUDA start-up, in one run.

    python scripts/bench_gate.py [--runs 5] [--python /path/to/job/python] [-- extra gate args]

Reference: `<python> -c "import torch; torch.zeros(1, device='cuda')"` (importing torch and
creating one CUDA context: the least any job pays before its first step). `--python` is the
interpreter whose torch the device test uses (default: this one). Commands are interleaved run by
run, so a slow moment on the machine hits all of them alike. Prints median / min / max wall
seconds, each command's exit status, and the deep gate's cost over the reference: the goal is
"little more than torch's own start-up".
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def once(cmd: list[str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--python", default=sys.executable, help="the job's interpreter (has torch with CUDA)")
    parser.add_argument("extra", nargs="*", help="extra arguments for gpudoctor gate")
    args = parser.parse_args()

    gate = [sys.executable, "-m", "gpudoctor", "gate", *args.extra]
    commands: list[tuple[str, list[str]]] = [
        ("torch + 1 CUDA context", [args.python, "-c", "import torch; torch.zeros(1, device='cuda')"]),
        ("gpudoctor gate", gate),
        ("gpudoctor gate --deep", [*gate, "--deep", "--python", args.python]),
    ]
    for _, cmd in commands:  # warm-up: page cache, .pyc files, the rule cache
        once(cmd)
    times: dict[str, list[float]] = {name: [] for name, _ in commands}
    codes: dict[str, set[int]] = {name: set() for name, _ in commands}
    for _ in range(args.runs):
        for name, cmd in commands:
            seconds, code = once(cmd)
            times[name].append(seconds)
            codes[name].add(code)
    print(f"{'command':<24} {'median s':>9} {'min s':>7} {'max s':>7}  exit  runs")
    for name, values in times.items():
        exits = ",".join(str(c) for c in sorted(codes[name]))
        print(
            f"{name:<24} {statistics.median(values):>9.3f} {min(values):>7.3f} {max(values):>7.3f}  "
            f"{exits:>4}  {len(values)}"
        )
    reference = statistics.median(times["torch + 1 CUDA context"])
    deep = statistics.median(times["gpudoctor gate --deep"])
    print(f"gate --deep - reference = {deep - reference:+.3f} s ({deep / reference:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
