"""The console script's prestart: one child started before the command line is parsed, adopted
only when the probe would have started the same one."""

from __future__ import annotations

import time
from typing import Any

import psutil
import pytest

from gpudoctor.context import make_context
from gpudoctor.probes import nvml
from tests.probes.nvml.answers import (
    HEALTHY,
    HOSTS,
)

# --- the console script's prestart ----------------------------------------------------------

def _wait_children_gone(seconds: float = 2.0) -> list[Any]:
    end = time.monotonic() + seconds
    while psutil.Process().children() and time.monotonic() < end:
        time.sleep(0.01)  # a killed child is reaped by gpudoctor.children's reaper thread
    return psutil.Process().children()


def test_prestart_starts_one_child_and_discard_stops_it(no_prestart_left: Any) -> None:
    assert nvml.prestart() is True
    assert nvml.prestart() is False  # one is waiting already
    assert len(nvml._PRESTARTED) == 1
    nvml.discard_prestarted()
    assert not nvml._PRESTARTED
    assert _wait_children_gone() == []


def identities(section: dict[str, Any]) -> Any:
    gpus = section["gpus"]
    if not isinstance(gpus, list):
        return gpus  # unavailable: the same reason both times
    return [(g["index"], g.get("uuid"), g.get("bus_id"), g.get("name"), sorted(g)) for g in gpus]


def test_prestarted_child_is_adopted_by_a_live_probe(no_prestart_left: Any) -> None:
    fresh = nvml.collect(make_context())
    assert nvml.prestart()
    prestarted = nvml._PRESTARTED[0][1]
    pending = nvml.start(make_context())
    assert pending.child is prestarted and not nvml._PRESTARTED
    section = pending.result()
    assert (section["status"], section["error"]) == (fresh["status"], fresh["error"])
    # on a real GPU, temperature and memory in use move between two reads: compare what does not
    assert identities(section) == identities(fresh)
    assert _wait_children_gone() == []


@pytest.mark.parametrize("how", ["shorter deadline", "longer deadline", "fixture root"])
def test_prestarted_child_is_not_adopted_when_it_would_differ(how: str, no_prestart_left: Any) -> None:
    assert nvml.prestart()
    prestarted = nvml._PRESTARTED[0][1]
    if how == "fixture root":
        ctx = make_context(root=str(HOSTS / "healthy-2gpu"))
    else:
        ctx = make_context(nvml_timeout=1.0 if how == "shorter deadline" else 20.0)
    pending = nvml.start(ctx)
    assert pending.child is not prestarted and prestarted.waited and not nvml._PRESTARTED
    section = pending.result()
    if how == "fixture root":
        assert section == HEALTHY
    assert _wait_children_gone() == []
