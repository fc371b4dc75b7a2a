"""Shared test setup: the gpu marker, fixture host roots, and snapshots probed from them."""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
HOSTS = HERE / "fixtures" / "hosts"
SNAPSHOTS = HERE / "fixtures" / "snapshots"


def pytest_configure(config: pytest.Config) -> None:
    # Tests never read or write the user's rule cache.
    import tempfile

    from tests.helpers import generated

    os.environ.setdefault("GPUDOCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="gpudoctor-test-cache-"))
    # Output is compared as plain text at the width of a pipe (100 columns): a FORCE_COLOR or a
    # COLUMNS of the caller's shell (pytest-xdist's workers set COLUMNS=80) must not change it.
    for name in ("FORCE_COLOR", "NO_COLOR", "COLUMNS", "LINES"):
        os.environ.pop(name, None)
    # The fixture hosts and rate snapshots are generated, not kept in git: write them if missing or stale.
    generated.ensure()


def _has_gpu() -> bool:
    if os.environ.get("GPUDOCTOR_TEST_NO_GPU"):
        return False
    return Path("/dev/nvidiactl").exists() and shutil.which("nvidia-smi") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a real NVIDIA GPU (none here)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def host_root(name: str) -> Path:
    path = HOSTS / name
    assert path.is_dir(), f"no fixture host {name}"
    return path


_PROBED: dict[str, dict[str, Any]] = {}


def probed(name: str) -> dict[str, Any]:
    """The facts snapshot of a fixture host root (probed once per session; a deep copy each call)."""
    if name not in _PROBED:
        from gpudoctor.context import make_context
        from gpudoctor.probes import collect_all

        ctx = make_context(root=str(host_root(name)), timeout=20.0, nvml_timeout=5.0)
        _PROBED[name] = collect_all(ctx)
        # A fixture host does not change, nor does when it was read: reports made from it (their
        # envelope's collected_at) are the same every run, and golden files can hold them.
        _PROBED[name]["meta"]["collected_at"] = "2026-12-01T12:00:00+00:00"
    return copy.deepcopy(_PROBED[name])


@pytest.fixture
def snapshot_of():
    return probed
