#!/usr/bin/env python3
"""Time the numa, pci and host probes on generated and fixture trees, beside a reference.

    python scripts/bench_topology_probes.py [--repeat N]

The reference, measured in the same run on the same tree, is the bare cost of opening and
reading every per-CPU topology and L3 file once (what a probe without per-core/per-cache
de-duplication would at least pay). Output is a table of median and best times in ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Callable, List

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

from tests.helpers.hosts import make_hosts  # noqa: E402
from tests.helpers.tree import write_tree  # noqa: E402

from gpudoctor.context import ProbeContext  # noqa: E402
from gpudoctor.probes import host, numa, pci  # noqa: E402


def timed(func: Callable[[], object], repeat: int) -> List[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        func()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def read_all(paths: List[Path]) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.read(fd, 4096)
        finally:
            os.close(fd)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    rows: list[tuple[str, list[float], list[float] | None, int]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for sockets, cores, smt in ((2, 64, True), (2, 32, True), (1, 8, False)):
            root = Path(tmp) / f"{sockets}x{cores}{'smt' if smt else ''}"
            spec = make_hosts().synthetic_topology(sockets, cores, smt, with_l1=True)
            write_tree(root, spec)
            ctx = ProbeContext(root=root, env={})
            per_cpu = [root / rel for rel in spec if "/cpu/cpu" in rel and ("/topology/" in rel or "/index3/" in rel)]
            ncpu = sockets * cores * (2 if smt else 1)
            rows.append((f"numa {ncpu} cpus", timed(partial(numa.collect, ctx), args.repeat),
                         timed(partial(read_all, per_cpu), args.repeat), len(per_cpu)))
    sys.path.insert(0, str(REPO))
    from tests.helpers import generated

    generated.ensure()  # the fixture hosts are generated, not kept in git
    for name in ("healthy-2gpu", "no-driver"):
        root = REPO / "tests" / "fixtures" / "hosts" / name
        if not root.is_dir():
            continue
        ctx = ProbeContext(root=root, env={})
        for label, probe in (("host", host.collect), ("pci", pci.collect), ("numa", numa.collect)):
            rows.append((f"{label} {name}", timed(partial(probe, ctx), args.repeat), None, 0))
    print(f"{'case':<26}{'median ms':>11}{'best ms':>10}{'reference ms':>14}{'ref files':>11}")
    for label, times, ref, nfiles in rows:
        ref_text = f"{statistics.median(ref):>14.2f}{nfiles:>11}" if ref else f"{'-':>14}{'-':>11}"
        print(f"{label:<26}{statistics.median(times):>11.2f}{min(times):>10.2f}{ref_text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
