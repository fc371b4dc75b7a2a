"""A rule's unknown_message: its own words for a check it cannot judge, used only where they can
be said with what is there."""

from __future__ import annotations

from gpudoctor.engine.runner import run_rules
from gpudoctor.facts import Unavailable
from gpudoctor.findings import Cause, Status
from tests.engine.test_let import ruleset


def host(**values):
    return {"host": {"env": {}, **values}}


def test_the_rule_says_why_it_cannot_judge_and_the_fact_keeps_its_detail(tmp_path):
    rules = ruleset(
        tmp_path,
        fail_if="host.memory_total_bytes < 1",
        message="no memory",
        unknown_message="cannot weigh the memory of {host.hostname}",
    )
    missing = Unavailable("no_permission", "meminfo: permission denied")
    (found,) = run_rules(rules, host(hostname="node7", memory_total_bytes=missing))
    assert found.status is Status.UNKNOWN
    assert found.message == "cannot weigh the memory of node7"
    assert found.detail == "meminfo: permission denied"
    assert found.cause == Cause("host", "no_permission")
    # the evidence is what the condition read, not what the words read
    assert [path for path, _ in found.evidence] == ["host.memory_total_bytes"]


def test_words_that_read_an_unavailable_fact_give_way_to_the_engines(tmp_path):
    rules = ruleset(
        tmp_path,
        fail_if="host.memory_total_bytes < 1",
        message="no memory",
        unknown_message="cannot weigh {host.memory_total_bytes} bytes",
    )
    (found,) = run_rules(rules, host(memory_total_bytes=Unavailable("timeout", "slow")))
    assert found.message == "cannot check: host.memory_total_bytes is unavailable (timeout)"
    assert found.cause == Cause("host", "timeout")


def test_without_unknown_message_the_engine_names_the_fact(tmp_path):
    rules = ruleset(tmp_path, fail_if="host.memory_total_bytes < 1", message="no memory")
    (found,) = run_rules(rules, host(memory_total_bytes=Unavailable("error", "garbage")))
    assert found.message == "cannot check: host.memory_total_bytes is unavailable (error)"


def test_unknown_message_is_not_used_when_the_rule_can_judge(tmp_path):
    rules = ruleset(
        tmp_path,
        fail_if="host.memory_total_bytes < 1",
        message="no memory",
        pass_message="{host.memory_total_bytes} bytes",
        unknown_message="cannot weigh it",
    )
    (passed,) = run_rules(rules, host(memory_total_bytes=4096))
    (failed,) = run_rules(rules, host(memory_total_bytes=0))
    assert (passed.status, passed.message) == (Status.PASS, "4096 bytes")
    assert (failed.status, failed.message) == (Status.FAIL, "no memory")
