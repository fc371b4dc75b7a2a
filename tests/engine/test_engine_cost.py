"""What the engine's speed rests on, asserted as counts (never times): the gpus list is viewed
once per run whatever the number of GPUs, compiling rules leaves no reference cycles behind,
and the garbage collector, paused while rules are loaded and run, is on again after, however
they end."""

from __future__ import annotations

import copy
import gc
import json
from pathlib import Path

import pytest

from gpudoctor.engine import loader, runner
from gpudoctor.engine.loader import load_rules
from gpudoctor.engine.runner import run_rules

SNAPSHOT = Path(__file__).resolve().parents[1] / "fixtures" / "snapshots" / "h200-x2.json"


def _facts(gpus: int) -> dict:
    facts = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    first = facts["nvml"]["gpus"][0]
    pci_gpu = next(d for d in facts["pci"]["devices"] if d["kind"] == "gpu")
    facts["nvml"]["gpus"], facts["pci"]["devices"] = [], [d for d in facts["pci"]["devices"] if d["kind"] != "gpu"]
    for i in range(gpus):
        bus = f"0000:{1 + i:02x}:00.0"
        facts["nvml"]["gpus"].append({**copy.deepcopy(first), "index": i, "bus_id": bus, "uuid": f"GPU-{i}"})
        facts["pci"]["devices"].append({**copy.deepcopy(pci_gpu), "bus_id": bus})
    facts["nvml"]["device_count"] = gpus
    return facts


@pytest.mark.parametrize("gpus", [2, 16])
def test_the_gpus_list_is_viewed_once_per_run(monkeypatch, gpus):
    ruleset = load_rules()
    readers = [r for r in ruleset.rules if r.subject == "gpu" and "gpus" in r.names_used]
    assert readers, "a built-in GPU rule reads the whole gpus list"
    made = []
    real_wrap = runner.wrap

    def counting_wrap(value, path, reads):
        if path.startswith("gpus["):
            made.append(path)
        return real_wrap(value, path, reads)

    monkeypatch.setattr(runner, "wrap", counting_wrap)
    findings = run_rules(ruleset, _facts(gpus))
    # every GPU rule judged each GPU, and the list they all read was viewed once: one view per GPU
    assert sum(1 for f in findings if f.subject.kind == "gpu") >= len(readers) * gpus
    assert sorted(made) == sorted(f"gpus[{i}]" for i in range(gpus))


def test_compiling_the_rules_leaves_no_reference_cycles(monkeypatch):
    monkeypatch.setenv("GPUDOCTOR_NO_CACHE", "1")
    gc.collect()
    gc.disable()
    try:
        ruleset = load_rules()
        # what compiling made and dropped was freed by reference counting; the collector finds
        # at most a few leftovers of the run-once machinery (file readers), not one per expression
        assert gc.collect() < len(ruleset.rules)
    finally:
        gc.enable()


def test_the_collector_is_on_again_after_loading_and_running(monkeypatch):
    assert gc.isenabled()
    ruleset = load_rules()
    assert gc.isenabled()
    run_rules(ruleset, _facts(2))
    assert gc.isenabled()

    def broken(*args, **kwargs):
        assert not gc.isenabled()  # paused while the rules are loaded
        raise RuntimeError("a rule file that cannot be read")

    monkeypatch.setattr(loader, "_load_uncached", broken)
    monkeypatch.setenv("GPUDOCTOR_NO_CACHE", "1")
    with pytest.raises(RuntimeError):
        load_rules()
    assert gc.isenabled()


def test_a_collector_the_caller_turned_off_stays_off():
    gc.disable()
    try:
        run_rules(load_rules(), _facts(1))
        assert not gc.isenabled()
    finally:
        gc.enable()
