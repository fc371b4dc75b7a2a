"""Collection.finish(meanwhile=...): the caller's work runs after the other probes and before
NVML's child is waited for, and what it raises is not a probe's failure."""

from __future__ import annotations

from typing import Any

import pytest

from gpudoctor.context import make_context
from gpudoctor.probes import nvml, start_collection
from tests.conftest import REPO

ROOT = REPO / "tests" / "fixtures" / "hosts" / "h200-x2-real"


def _context() -> Any:
    return make_context(root=str(ROOT), timeout=20.0, nvml_timeout=5.0)


def test_meanwhile_runs_before_nvml_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    real = nvml.PendingNvml.result

    def result(self: Any) -> Any:
        order.append("nvml waited for")
        return real(self)

    monkeypatch.setattr(nvml.PendingNvml, "result", result)
    steps: list[str] = []
    collection = start_collection(_context())
    facts = collection.finish(on_step=steps.append, meanwhile=lambda: order.append(f"meanwhile after {steps[-1]}"))
    assert order == ["meanwhile after torch", "nvml waited for"]
    assert steps[-1] == "nvml" and facts["nvml"]["status"] == "ok"


def test_what_meanwhile_raises_is_ignored() -> None:
    def broken() -> None:
        raise RuntimeError("the caller's bug")

    plain = start_collection(_context()).finish()
    facts = start_collection(_context()).finish(meanwhile=broken)
    assert facts["meta"]["probes"].keys() == plain["meta"]["probes"].keys()
    assert all(p["status"] == "ok" for p in facts["meta"]["probes"].values())
    assert facts["nvml"] == plain["nvml"] and facts["pci"] == plain["pci"]

