"""Fixtures of the NVML probe's tests: the children it forks, the prestarted child."""

from __future__ import annotations

import os
from typing import Any

import pytest

from gpudoctor.probes import nvml


@pytest.fixture
def forked_pids(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """PIDs of the children the probe forks (the child itself sees 0 and records nothing)."""
    pids: list[int] = []
    real_fork = os.fork

    def spy() -> int:
        pid = real_fork()
        if pid:
            pids.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", spy)
    return pids


@pytest.fixture
def no_prestart_left() -> Any:
    yield
    nvml.discard_prestarted()
