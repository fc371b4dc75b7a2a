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
from gpudoctor.engine import rule as rule_module
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


def _rule(rule_id: str, fail_if: str, subject: str = "gpu", **more: object) -> dict:
    return {
        "id": rule_id, "title": "A shared condition", "area": "env", "severity": "warning", "subject": subject,
        "fail_if": fail_if, "message": "{gpu.index} is hot" if subject == "gpu" else "hot", "fix": "cool it",
        "why": "tested", "refs": ["tests"], **more,
    }


def _load(tmp_path: Path, rules: list[dict], monkeypatch) -> dict:
    import yaml

    (tmp_path / "shared.yaml").write_text(yaml.safe_dump(rules, sort_keys=False), encoding="utf-8")
    monkeypatch.setenv("GPUDOCTOR_NO_CACHE", "1")
    loaded = load_rules([tmp_path], include_builtin=False, include_plugins=False)
    return {rule.id: rule for rule in loaded.rules}


def test_rules_with_the_same_text_share_one_compiled_expression(tmp_path, monkeypatch):
    compiled = []
    real = rule_module.compile_expression

    def counting(source, roots, lets=None):
        compiled.append(source)
        return real(source, roots, lets)

    monkeypatch.setattr(rule_module, "compile_expression", counting)
    rules = _load(
        tmp_path,
        [
            _rule("a", "gpu.temperature_c > 80"),
            _rule("b", "gpu.temperature_c > 80"),
            # with a let: name in scope that the text does not read: the same compiled expression
            _rule("c", "gpu.temperature_c > 80", let={"hot": "gpu.temperature_c > 90"}),
            _rule("d", "gpu.temperature_c > 80", let={"hot": "gpu.temperature_c > 90"}),
            _rule("e", "host.cpu_count > 80", subject="host"),
            _rule("f", "host.cpu_count > 80", subject="host"),
            # a text that names no subject variable is the same for every subject kind
            _rule("i", "host.cpu_count > 80"),
            # a text that reads a let: name is compiled per let: texts (they decide what it reads)
            _rule("g", "hot", let={"hot": "gpu.temperature_c > 80"}),
            _rule("h", "hot", let={"hot": "gpu.temperature_c > 90"}),
        ],
        monkeypatch,
    )
    assert rules["a"].fail_if is rules["b"].fail_if is rules["c"].fail_if is rules["d"].fail_if
    assert rules["a"].message is rules["b"].message
    # c's message spells "hot" (its let: name): compiled for its scope, its placeholder shared
    assert rules["c"].message is not rules["a"].message
    assert rules["c"].message.parts[0][1] is rules["a"].message.parts[0][1]
    assert rules["e"].fail_if is rules["f"].fail_if is rules["i"].fail_if
    assert rules["g"].fail_if is not rules["h"].fail_if
    assert rules["g"].fail_if.paths == rules["h"].fail_if.paths == ("gpu.temperature_c",)
    assert compiled.count("gpu.temperature_c > 80") == 1  # a's condition, g's let: name
    assert compiled.count("gpu.temperature_c > 90") == 1  # the let: names of c, d and h
    assert compiled.count("hot") == 2
    assert compiled.count("host.cpu_count > 80") == 1
    facts = _facts(2)
    facts["nvml"]["gpus"][1]["temperature_c"] = 85
    findings = run_rules(loader.RuleSet(list(rules.values()), {}, []), facts)
    # each rule still judges each of its subjects, with that subject's evidence and message
    judged = {(f.rule_id, f.subject.index): f for f in findings if f.rule_id in "abcdgh"}
    assert sorted(judged) == [(r, i) for r in "abcdgh" for i in (0, 1)]
    for rule_id in "abcdg":
        assert judged[rule_id, 0].status.value == "pass"
        assert judged[rule_id, 1].status.value == "fail"
        assert judged[rule_id, 1].message == "1 is hot"
        assert [v for p, v in judged[rule_id, 1].evidence if p.endswith("temperature_c")] == [85]
    assert judged["h", 1].status.value == "pass"  # its hot: above 90


def test_a_text_refused_in_two_rules_names_the_first_rule_it_is_in(tmp_path, monkeypatch):
    from gpudoctor.engine.loader import RuleLoadError

    with pytest.raises(RuleLoadError, match="rule b: fail_if: unknown fact gpu.temprature"):
        _load(tmp_path, [_rule("a", "gpu.temperature_c > 1"), _rule("b", "gpu.temprature > 1")], monkeypatch)


def test_a_large_step_leaves_its_objects_frozen_and_a_small_one_does_not(monkeypatch):
    from gpudoctor.engine import collector

    gc.unfreeze()
    try:
        gc.collect()
        # what is frozen already (not always 0: on the H200 host's Python 3.12 a few hundred objects
        # stayed in the permanent generation after unfreeze) is the baseline
        before = gc.get_freeze_count()
        with collector.paused():
            small = [[i] for i in range(collector.FREEZE_FROM // 10)]
        assert gc.isenabled() and gc.get_freeze_count() == before
        gc.collect()
        with collector.paused():
            large = [[i] for i in range(2 * collector.FREEZE_FROM)]
        assert gc.isenabled()
        assert gc.get_freeze_count() > before + len(large) + len(small)  # never walked by a collection again
    finally:
        gc.unfreeze()
