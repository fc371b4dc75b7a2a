"""The rule engine stays bounded in time and memory on hostile snapshots and rule packs.

- Work per GPU subject does not grow with the number of GPUs (a 4000-GPU snapshot took minutes
  when every GPU rule rebuilt and walked the whole ``gpus`` list for every GPU).
- ``run_rules(deadline=...)`` stops judging at the deadline: what is left is "unknown" (timeout).
- A rendered message, a fix, a detail and evidence are bounded however a rule file or a fact
  tries to amplify them, and so is a whole run's findings.
- Huge digit strings in facts never reach int() (Python refuses past 4300 digits): rules give
  a clear error or judge them, and nothing that breaks in a rule ends the run.
"""

from __future__ import annotations

import copy
import json
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpudoctor import findings as findings_module
from gpudoctor.engine import runner as runner_module
from gpudoctor.engine.expressions import compile_expression
from gpudoctor.engine.helpers import common, devices, registry, values, versions
from gpudoctor.engine.loader import RuleSet, load_rule_file, load_rules
from gpudoctor.engine.runner import evaluate_rule, run_rules
from gpudoctor.engine.subjects import gpu_subjects, subjects_for
from gpudoctor.engine.templates import Template, format_value
from gpudoctor.engine.views import FactView
from gpudoctor.facts import parse_snapshot
from gpudoctor.findings import MAX_TEXT_CHARS, Cause, Status
from gpudoctor.tables import builtin_rules_dir, load_tables
from tests.conftest import SNAPSHOTS, probed

RULES = load_rules(include_plugins=False)
TABLES = load_tables(builtin_rules_dir() / "data")
# What a cut text may add to its MAX_TEXT_CHARS characters: " … [cut: N more characters]".
MARKER_ROOM = 64
MAX_SUBJECTS_PER_RULE = 16384  # findings.MAX_SUBJECTS_PER_RULE
MAX_EVIDENCE_ITEMS = 64  # findings.MAX_EVIDENCE_ITEMS


def many_gpus(count: int) -> dict[str, Any]:
    """The h200-x2 snapshot with its two GPUs replicated to ``count``, each with its own index,
    bus id and uuid (in NVML and on the PCI bus)."""
    data = json.loads((SNAPSHOTS / "h200-x2.json").read_text(encoding="utf-8"))
    nvml_gpus = data["nvml"]["gpus"]
    pci_gpus = [d for d in data["pci"]["devices"] if d.get("kind") == "gpu"]
    others = [d for d in data["pci"]["devices"] if d.get("kind") != "gpu"]
    new_nvml, new_pci = [], []
    for i in range(count):
        gpu = copy.deepcopy(nvml_gpus[i % len(nvml_gpus)])
        dev = copy.deepcopy(pci_gpus[i % len(pci_gpus)])
        bus = f"{i >> 16:04x}:{(i >> 8) & 0xFF:02x}:{(i & 0xFF) >> 3:02x}.{i & 7}"
        gpu.update(index=i, bus_id=bus, uuid=f"GPU-{i:08x}-0000-0000-0000-000000000000", nvlink_peers=[])
        dev["bus_id"] = bus
        new_nvml.append(gpu)
        new_pci.append(dev)
    data["nvml"]["gpus"] = new_nvml
    data["nvml"]["device_count"] = count
    data["pci"]["devices"] = others + new_pci
    return parse_snapshot(json.dumps(data), f"<{count} GPUs>")


def rule_pack(directory: Path, rules: list[dict[str, Any]]) -> RuleSet:
    defaults = {"title": "bounds", "area": "env", "severity": "error", "why": "w", "refs": ["r"], "fix": "f"}
    path = directory / "bounds.yaml"
    text = yaml.safe_dump([{**defaults, **r} for r in rules], allow_unicode=True, width=1 << 20)
    path.write_text(text, encoding="utf-8")
    return RuleSet(rules=load_rule_file(path, TABLES), tables=TABLES, sources=[str(path)])


# --- 1. linear in the number of GPUs, and a deadline ------------------------------------------


def _work(monkeypatch: pytest.MonkeyPatch, facts: dict[str, Any]) -> dict[str, int]:
    """How many fact views the built-in rules make and how many GPU fields the helpers read."""
    counts = {"views": 0, "reads": 0}
    real_get, real_init = common.field_or_none, FactView.__init__

    def counting_get(view: Any, name: str) -> Any:
        counts["reads"] += 1
        return real_get(view, name)

    def counting_init(self: FactView, *args: Any) -> None:
        counts["views"] += 1
        real_init(self, *args)

    with monkeypatch.context() as m:
        for module in (devices, registry, values):  # each reads fields through common.field_or_none
            m.setattr(module, "field_or_none", counting_get)
        m.setattr(FactView, "__init__", counting_init)
        run_rules(RULES, facts)
    return counts


def test_work_per_gpu_does_not_grow_with_the_gpu_count(monkeypatch: pytest.MonkeyPatch) -> None:
    small, large = _work(monkeypatch, many_gpus(100)), _work(monkeypatch, many_gpus(400))
    for what in ("views", "reads"):
        # linear: 4x the GPUs is about 4x the work; rebuilding the gpus list per GPU made it 16x
        assert large[what] <= 5 * small[what], (what, small[what], large[what])


def test_thousands_of_gpus_take_linear_time() -> None:
    def took(count: int) -> float:
        facts = many_gpus(count)
        started = time.perf_counter()
        found = run_rules(RULES, facts)
        elapsed = time.perf_counter() - started
        assert sum(1 for f in found if f.subject.kind == "gpu") == count * sum(r.subject == "gpu" for r in RULES.rules)
        assert not [f for f in found if f.status is Status.ERROR]
        return elapsed

    took(50)  # warm up: imports, the evaluator, the schema
    small, large = took(250), took(1000)
    assert large < 8 * small + 0.5, (small, large)  # linear: 4x; quadratic: 16x


def test_findings_and_evidence_are_those_of_one_rule_at_a_time(tmp_path: Path) -> None:
    """What is worked out once per run (sub-expressions not naming the subject) reads the same
    facts as evidence into every finding as evaluating each subject on its own does."""
    facts = many_gpus(6)
    ruleset = rule_pack(
        tmp_path,
        [
            {
                "id": "shared-parts",
                "subject": "gpu",
                "applies": 'count_where(pci.devices, "kind", "gpu") > 0 and len(gpus) > 1',
                "fail_if": 'gpu.nvlink_active < max(values_of(gpus, "nvlink_active") + [0]) + gpu.index % 2'
                ' or count_where(gpus, "index", gpu.index) != 1 or host.kernel_release == ""',
                "message": "{gpu.label}: {max(values_of(gpus, 'nvlink_active'))} of {len(gpus)}",
            },
            {
                "id": "shared-unknown",
                "subject": "gpu",
                "fail_if": "toolkit.nvcc_version == gpu.name",
                "message": "m",
            },
        ],
    )
    together = run_rules(ruleset, facts)
    functions = registry.bind(TABLES)
    gpus = gpu_subjects(facts)
    alone = [
        evaluate_rule(rule, subject, data, facts, gpus, functions)
        for rule in ruleset.rules
        for subject, data in subjects_for(rule.subject, facts, gpus)
    ]
    assert [(f.rule_id, f.subject, f.status, f.message, f.evidence, f.detail) for f in together] == [
        (f.rule_id, f.subject, f.status, f.message, f.evidence, f.detail) for f in alone
    ]
    assert {f.status for f in together} >= {Status.FAIL, Status.PASS}


def test_a_run_past_its_deadline_is_unknown_with_reason_timeout() -> None:
    facts = probed("healthy-2gpu")
    found = run_rules(RULES, facts, deadline=time.monotonic() - 1)
    assert len(found) == len(run_rules(RULES, facts))
    assert {f.status for f in found} == {Status.UNKNOWN}
    assert {f.cause for f in found} == {Cause("engine", "timeout")}
    assert all("timeout" in f.message for f in found)


def test_the_deadline_cuts_a_slow_run_short(tmp_path: Path) -> None:
    # a rule that walks all GPUs for each GPU (n**2 reads): seconds for 1000 GPUs (the schema's most)
    ruleset = rule_pack(
        tmp_path,
        [
            {
                "id": "slow",
                "subject": "gpu",
                "fail_if": 'count_where(gpus, "index", gpu.index) + count_where(gpus, "uuid", gpu.uuid) > 2',
                "message": "m",
            }
        ],
    )
    facts = many_gpus(1000)
    started = time.monotonic()
    found = run_rules(ruleset, facts, deadline=started + 0.2)
    assert time.monotonic() - started < 1.5
    assert len(found) == 1000
    judged = [f for f in found if f.status is Status.PASS]
    timed_out = [f for f in found if f.status is Status.UNKNOWN and f.cause == Cause("engine", "timeout")]
    assert judged and timed_out and len(judged) + len(timed_out) == 1000


def test_without_a_deadline_the_run_never_looks_at_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """No deadline: no time.monotonic() per rule, subject or node; one far off: a look per
    subject and every few hundred nodes, not one per node."""
    facts = many_gpus(8)
    calls = {"n": 0}
    real = time.monotonic

    def counting() -> float:
        calls["n"] += 1
        return real()

    deadline = real() + 3600
    monkeypatch.setattr(time, "monotonic", counting)
    found = run_rules(RULES, facts)
    assert calls["n"] == 0
    assert [(f.rule_id, f.status, f.message, f.evidence) for f in run_rules(RULES, facts, deadline=deadline)] == [
        (f.rule_id, f.status, f.message, f.evidence) for f in found
    ]
    assert 0 < calls["n"] <= 2 * len(found)


def test_a_rule_judged_once_remembers_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sub-expressions are remembered only for a rule with several subjects (a GPU rule on a
    host with more than one GPU): a host rule never asks for them again."""
    caches: list[Any] = []

    class Recorded(runner_module.RunCache):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            caches.append(self)

    monkeypatch.setattr(runner_module, "RunCache", Recorded)
    shared = 'max(values_of(gpus, "nvlink_active")) > 99 or len(gpus) > 4096'
    host = rule_pack(tmp_path, [{"id": "host-only", "subject": "host", "fail_if": shared, "message": "m"}])
    gpu = rule_pack(tmp_path, [{"id": "per-gpu", "subject": "gpu", "fail_if": shared, "message": "m"}])
    facts = many_gpus(4)
    assert [f.status for f in run_rules(host, facts)] == [Status.PASS]
    assert not caches[-1].nodes
    assert [f.status for f in run_rules(gpu, facts)] == [Status.PASS] * 4
    assert caches[-1].nodes


# --- 2. bounded messages, evidence and reports ------------------------------------------------


def _peak_during(func: Any) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        result = func()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


def test_templates_cannot_amplify_a_huge_fact(tmp_path: Path) -> None:
    facts = probed("healthy-2gpu")
    facts["host"]["hostname"] = "h" * 1_000_000  # 1 MB fact
    big = "{host.hostname}" * 12
    ruleset = rule_pack(
        tmp_path,
        [
            {
                "id": f"amplify-{i}",
                "subject": "gpu",
                "fail_if": "len(host.hostname) > 0",
                "message": big + " {'x' * 99999} " * 20,
                "fix": "{host.hostname:>99} " + big,
            }
            for i in range(3)
        ],
    )
    found, peak = _peak_during(lambda: run_rules(ruleset, facts))
    assert len(found) == 6 and {f.status for f in found} == {Status.FAIL}
    for f in found:
        for text in (f.message, f.fix):
            assert len(text) <= MAX_TEXT_CHARS + MARKER_ROOM
            assert text.startswith("h" * 100) and "[cut: " in text
        # the marker counts what was left out: 12 copies of the fact and 20 of 99999 x's and spaces
        assert f.message.endswith(f"[cut: {12_000_000 + 20 * 100_001 - MAX_TEXT_CHARS} more characters]")
        value = dict(f.evidence)["host.hostname"]
        assert len(value) <= MAX_TEXT_CHARS + MARKER_ROOM
    assert peak < 8 << 20, f"peak {peak >> 20} MiB while rendering"


def test_a_format_spec_cannot_repeat_a_value_past_the_bound() -> None:
    expr = compile_expression("host.hostname", {"host": {"type": "object", "properties": {"hostname": {}}}})
    names = {"host": FactView({"hostname": "abc"}, "host", [])}
    # the loader refuses these specs; a Template made another way must not obey them either
    for spec in (">99999999", "^99999999", "<99999999.99999999", "099999999"):
        template = Template(source="x", parts=(("a", expr, spec),))
        text, peak = _peak_during(lambda t=template: t.render(names, registry.bind(TABLES)))
        assert len(text) <= MAX_TEXT_CHARS + MARKER_ROOM and peak < 4 << 20, spec
    # allowed specs work as format() does
    for spec, value, shown in (
        (">6", "abc", "   abc"),
        (".2", "abc", "ab"),
        ("<5.2", "abc", "ab   "),
        (".1f", 2.25, "2.2"),
    ):
        assert format_value(value, spec) == shown


def test_format_value_writes_no_more_than_the_bound() -> None:
    huge = ["y" * 1_000_000] * 50
    text, peak = _peak_during(lambda: format_value(huge))
    assert len(text) <= MAX_TEXT_CHARS + MARKER_ROOM
    assert text.endswith(f"[cut: {50 * 1_000_000 + 49 * 2 - MAX_TEXT_CHARS} more characters]")
    assert peak < 4 << 20
    row = {"key": "z" * 1_000_000, "list": list(range(100_000))}
    text, peak = _peak_during(lambda: format_value(row))
    assert text.startswith("{'key': 'zzz") and len(text) <= MAX_TEXT_CHARS + MARKER_ROOM and peak < 4 << 20
    assert format_value({"a": [1, 2], "b": None}) == str({"a": [1, 2], "b": None})


def test_format_value_of_an_int_too_long_to_print() -> None:
    assert format_value(10**5000) == f"<a {(10**5000).bit_length()}-bit integer>"


def test_error_details_are_bounded(tmp_path: Path) -> None:
    facts = probed("healthy-2gpu")
    facts["host"]["hostname"] = "k" * 1_000_000
    ruleset = rule_pack(
        tmp_path,
        [
            {
                "id": "huge-key",
                "subject": "gpu",
                "fail_if": 'lookup("cuda_driver", host.hostname) != None',
                "message": "m",
            }
        ],
    )
    found = run_rules(ruleset, facts)
    for f in found:
        assert f.status is Status.ERROR and len(f.detail) <= MAX_TEXT_CHARS + MARKER_ROOM
        assert "is not in table 'cuda_driver'" in f.detail and str(ruleset.sources[0]) in f.detail


def test_a_run_holds_a_bounded_amount_of_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(findings_module, "MAX_REPORT_CHARS", 200_000, raising=False)
    facts = many_gpus(64)
    facts["host"]["hostname"] = "q" * 100_000
    ruleset = rule_pack(
        tmp_path,
        [
            {"id": f"wordy-{i}", "subject": "gpu", "fail_if": "gpu.index >= 0", "message": "{host.hostname}" * 2}
            for i in range(4)
        ],
    )
    found = run_rules(ruleset, facts)
    assert len(found) == 4 * 64 and {f.status for f in found} == {Status.FAIL}  # every status is kept
    text = sum(len(f.message) + len(f.fix) + len(f.detail) + len(f.docs) for f in found)
    assert text < 200_000 + len(found) * 200
    assert "reached their limit" in found[-1].message


def test_subjects_per_rule_are_bounded(tmp_path: Path) -> None:
    facts = probed("healthy-2gpu")
    extra = MAX_SUBJECTS_PER_RULE + 10
    facts["pci"]["devices"] = list(facts["pci"]["devices"]) + [
        {"bus_id": f"{i >> 16:04x}:{(i >> 8) & 0xFF:02x}:{(i & 0xFF) >> 3:02x}.{i & 7}", "kind": "nic"}
        for i in range(extra)
    ]
    nics = sum(1 for d in facts["pci"]["devices"] if d.get("kind") == "nic")
    ruleset = rule_pack(tmp_path, [{"id": "per-nic", "subject": "nic", "fail_if": "False", "message": "m"}])
    found = run_rules(ruleset, facts)
    assert len(found) == MAX_SUBJECTS_PER_RULE + 1
    assert {f.status for f in found[:-1]} == {Status.PASS}
    last = found[-1]
    assert last.status is Status.UNKNOWN and last.cause == Cause("engine", "limit")
    assert f"cannot check: {nics - MAX_SUBJECTS_PER_RULE} more subjects" in last.message
    assert findings_module.MAX_SUBJECTS_PER_RULE == MAX_SUBJECTS_PER_RULE


def test_evidence_is_bounded(tmp_path: Path) -> None:
    facts = probed("healthy-2gpu")
    facts["host"]["env"] = {f"V{i}": "e" * 10_000 for i in range(80)}
    condition = " or ".join(f'host.env.V{i} == ""' for i in range(80))
    ruleset = rule_pack(tmp_path, [{"id": "many-reads", "subject": "host", "fail_if": condition, "message": "m"}])
    (found,) = run_rules(ruleset, facts)
    assert found.status is Status.PASS
    assert len(found.evidence) == MAX_EVIDENCE_ITEMS + 1
    assert found.evidence[-1] == ("…", "[cut: 16 more facts read]")
    assert all(len(v) <= MAX_TEXT_CHARS + MARKER_ROOM for _, v in found.evidence)
    assert findings_module.MAX_EVIDENCE_ITEMS == MAX_EVIDENCE_ITEMS


# --- 3. huge digit strings and rules that break -----------------------------------------------


def test_huge_digit_strings_in_facts_give_clear_errors(tmp_path: Path) -> None:
    facts = probed("healthy-2gpu")
    facts["host"]["kernel_release"] = "6." + "9" * 5000
    for gpu in facts["nvml"]["gpus"]:
        gpu["compute_capability"] = "9" * 5000 + ".0"
    ruleset = rule_pack(
        tmp_path,
        [
            {"id": "kernel-version", "fail_if": 'version(host.kernel_release) < version("5.4")', "message": "m"},
            {"id": "kernel-major", "fail_if": "major(host.kernel_release) < 5", "message": "m"},
            {"id": "cc", "subject": "gpu", "fail_if": 'sm(gpu.compute_capability) == "sm_90"', "message": "m"},
            {"id": "int", "fail_if": "int(host.kernel_release) > 0", "message": "m"},
        ],
    )
    found = run_rules(ruleset, facts)
    by_rule = {f.rule_id: f for f in found}
    for rule in ("kernel-version", "kernel-major", "cc"):
        f = by_rule[rule]
        assert f.status is Status.ERROR, (rule, f.status, f.message)
        assert "set_int_max_str_digits" not in f.detail and "digits" in f.detail, f.detail
        assert len(f.detail) < 1000
    assert by_rule["int"].status is Status.ERROR and "set_int_max_str_digits" not in by_rule["int"].detail


@pytest.mark.parametrize("variable", ["CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"])
def test_a_huge_device_index_is_judged_not_a_crash(variable: str) -> None:
    facts = probed("healthy-2gpu")
    facts["host"]["env"] = {**facts["host"]["env"], variable: "9" * 5000}
    found = run_rules(RULES, facts)
    assert [f.rule_id for f in found if f.status is Status.ERROR] == []
    assert devices.cuda_visible_count("9" * 5000, []) == 0
    problem = devices.visible_devices_problem("9" * 5000, [])
    assert problem.startswith("index 999") and "does not exist" in problem and len(problem) < 200
    problem = devices.amd_visible_devices_problem("-" + "9" * 5000, [])
    assert "is negative" in problem and len(problem) < 200


def test_number_helpers_refuse_huge_digit_strings_clearly() -> None:
    for call in (
        lambda: versions.version("1." + "2" * 5000),
        lambda: values.has_bits("7" * 5000, 1),
        lambda: versions.sm("9" * 5000),
        lambda: registry.bind(TABLES)["flag_names"]("5" * 5000, "clock_event_reasons"),
    ):
        with pytest.raises(ValueError, match="digits") as info:
            call()
        assert "set_int_max_str_digits" not in str(info.value) and len(str(info.value)) < 300
    assert versions.arch_supported(["sm_" + "9" * 5000, "sm_90"], "9.0") is True


def test_a_rule_breaking_anywhere_never_ends_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Even outside its expressions (here: evaluate_rule itself), a rule that raises is an error
    finding for that rule, and every other rule is still judged."""
    facts = probed("healthy-2gpu")
    broken = RULES.rules[3]
    real_evaluate = runner_module.evaluate_rule

    def explode(*args: Any, **kwargs: Any) -> Any:
        if args[0] is broken:
            raise ValueError("Exceeds the limit (4300 digits) for integer string conversion")
        return real_evaluate(*args, **kwargs)

    monkeypatch.setattr(runner_module, "evaluate_rule", explode)
    found = run_rules(RULES, facts)
    others = run_rules(RULES, facts, [r for r in RULES.rules if r is not broken])
    mine = [f for f in found if f.rule_id == broken.id]
    assert len(mine) == len(subjects_for(broken.subject, facts, gpu_subjects(facts)))
    assert [f for f in found if f.rule_id != broken.id] == others
    assert all(f.status is Status.ERROR and "broke" in f.message for f in mine)
    assert "4300 digits" in mine[0].detail and broken.source in mine[0].detail
