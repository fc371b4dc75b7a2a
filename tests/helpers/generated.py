"""The generated fixtures: written on first use, not kept in git.

The fixture hosts under tests/fixtures/hosts (all but the captured real trees), the counter-rate
snapshot pairs under tests/fixtures/snapshots/rates and the 16-node fleet of reports under
tests/fixtures/fleet are made by the generators in tests/fixtures
(make_*.py). Kept in git they were some 35 000 small files; now a test session writes them before
it starts, when they are missing or older than their generators: a stamp beside them holds a hash
of every generator, every test helper and the gpudoctor probes the rate pairs are made with,
so an unchanged tree costs one hash (a few ms) and a change regenerates all (about 2 s).

    python -m tests.helpers.generated     # write them now (scripts that read a fixture host)
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from tests.helpers.hosts import fixture_module

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REPO = FIXTURES.parents[1]
HOSTS = FIXTURES / "hosts"
RATES = FIXTURES / "snapshots" / "rates"
FLEET = FIXTURES / "fleet"
STAMP = HOSTS / ".generated"
# Host trees captured from real machines: kept in git, never written here.
CAPTURED = frozenset({"h200-x2-real"})
# In this order: the host trees, then the files the later generators add to them (software, NVML
# answers), then the snapshot pairs probed from the finished hosts.
GENERATORS = (
    "make_hosts", "make_numa_hosts", "make_kernel_hosts", "make_ascend_hosts", "make_amd_hosts", "make_software",
    "make_nvml", "make_rate_snapshots", "make_fleet_reports",
)


def _inputs() -> list[Path]:
    """The generators, the test helpers, and the parts of gpudoctor the rate pairs are probed with
    (the probes, the typed views and the base modules beside them)."""
    src = REPO / "src" / "gpudoctor"
    files = sorted(FIXTURES.glob("*.py")) + sorted((FIXTURES.parent / "helpers").glob("*.py"))
    files += sorted(src.glob("*.py")) + sorted((src / "probes").rglob("*.py")) + sorted((src / "model").rglob("*.py"))
    # the fleet reports are judged and rendered: the engine, the rules and the report's renderer
    files += sorted((src / "engine").rglob("*.py")) + sorted((REPO / "rules").rglob("*.yaml"))
    files += [src / "render" / "json_report.py", src / "render" / "envelope.py"]
    # and rank 0's gate --distributed report among them: the gate's verdict and its JSON
    files += sorted((src / "preflight").rglob("*.py"))
    files += [src / "render" / name for name in ("gate_json.py", "gate_distributed.py")]
    return files


def stamp() -> str:
    digest = hashlib.sha256()
    for path in _inputs():
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _clear() -> None:
    """Remove what an earlier generation wrote (a renamed or dropped scenario leaves nothing behind)."""
    if HOSTS.is_dir():
        for entry in HOSTS.iterdir():
            if entry.name in CAPTURED:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    shutil.rmtree(RATES, ignore_errors=True)
    shutil.rmtree(FLEET, ignore_errors=True)


def generate() -> None:
    """Write every generated fixture afresh, then the stamp."""
    import contextlib
    import io

    _clear()
    HOSTS.mkdir(parents=True, exist_ok=True)
    for name in GENERATORS:
        with contextlib.redirect_stdout(io.StringIO()):
            status = fixture_module(name).main([])
        if status:
            raise RuntimeError(f"tests/fixtures/{name}.py failed (exit {status})")
    STAMP.write_text(stamp() + "\n", encoding="utf-8")


def ensure() -> None:
    """Generate the fixtures unless the stamp says they are those of the current generators."""
    current = stamp()
    try:
        if STAMP.read_text(encoding="utf-8").strip() == current:
            return
    except OSError:
        pass
    generate()


if __name__ == "__main__":
    generate()
    print(f"wrote the generated fixtures under {HOSTS}, {RATES} and {FLEET}")
