"""Worker scripts: programs gpudoctor runs with another interpreter (the target Python of
``bench``, the job's venv), which report to gpudoctor on stdout in the one line protocol of
gpudoctor.children (``@@GPUDOCTOR@@ {"event": ...}`` lines, flushed at once).

What a worker may import: the standard library at import time, torch and pynvml only inside the
functions that need them, and never gpudoctor (the target interpreter may have none). A worker
runs as a script, where its directory is not on sys.path under ``python -I`` or PYTHONSAFEPATH,
and tests import it as ``gpudoctor.workers.<name>``; so it imports no sibling either: each
carries its own three-line emit function writing the marker line, and a worker in two files
(bench.py, bench_method.py) loads its other file by path.

gpudoctor runs a worker by path (:func:`path`); apart from tests of a worker's arithmetic,
nothing imports a worker module.
"""

from __future__ import annotations

from pathlib import Path


def path(name: str) -> str:
    """The file of the worker `name` (e.g. "bench"), for another interpreter to run."""
    return str(Path(__file__).with_name(f"{name}.py"))
