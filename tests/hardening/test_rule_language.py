"""The rule language cannot reach Python internals or the system, nor be made to eat the machine.

Every attack in corpus/unsafe_expressions.txt is put into a rule file and loaded by the real
loader; it must be refused there (naming the file), or, when it loads, running the rule must
stop with an error finding within a second and leave no trace.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import psutil
import pytest
import yaml

from gpudoctor.engine.bounds import MAX_VALUE_CELLS, LimitExceeded, value_cells
from gpudoctor.engine.expressions import ExpressionError, compile_expression
from gpudoctor.engine.loader import RuleLoadError, RuleSet, load_rule_file
from gpudoctor.engine.runner import run_rules
from gpudoctor.findings import Status
from gpudoctor.tables import builtin_rules_dir, load_tables
from tests.conftest import probed

CORPUS = Path(__file__).resolve().parent / "corpus" / "unsafe_expressions.txt"
FIELDS = ("fail_if", "applies", "message", "fix", "pass_message")
TABLES = load_tables(builtin_rules_dir() / "data")


def corpus() -> list[tuple[str, str]]:
    entries = []
    for number, line in enumerate(CORPUS.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        field, sep, text = line.partition(": ")
        assert sep and field in FIELDS, f"{CORPUS.name}:{number}: not '<field>: <text>'"
        entries.append((field, text))
    return entries


ENTRIES = corpus()


def rule_file(directory: Path, field: str, text: str) -> Path:
    rule: dict[str, Any] = {
        "id": "attack",
        "title": "attack",
        "area": "env",
        "severity": "error",
        "subject": "gpu",
        # message and fix are rendered when the rule fails, pass_message when it passes
        "fail_if": "False" if field == "pass_message" else "True",
        "message": "m",
        "fix": "f",
        "why": "w",
        "refs": ["r"],
    }
    rule[field] = text
    path = directory / "attack.yaml"
    path.write_text(yaml.safe_dump([rule], allow_unicode=True, width=1 << 20), encoding="utf-8")
    return path


@pytest.fixture
def watchdog() -> Iterator[None]:
    """Turn an attack that gets through and loops in Python into a failure instead of a stuck run."""

    def expired(signum: int, frame: Any) -> None:
        raise TimeoutError("the attack was not stopped within 10 s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(10)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_corpus_is_large_and_unique() -> None:
    assert len(ENTRIES) >= 150
    assert len(set(ENTRIES)) == len(ENTRIES)


@pytest.mark.parametrize(("field", "text"), ENTRIES, ids=[f"{f}:{t[:60]}" for f, t in ENTRIES])
def test_attack_is_refused_or_stopped(tmp_path: Path, watchdog: None, field: str, text: str) -> None:
    sentinel = tmp_path / "pwned"
    text = text.replace("SENTINEL", str(sentinel))
    path = rule_file(tmp_path, field, text)
    environ, cwd, threads = dict(os.environ), os.getcwd(), threading.active_count()

    started = time.monotonic()
    try:
        rules = load_rule_file(path, TABLES)
    except RuleLoadError as exc:
        assert exc.path == str(path) and exc.line == 1, str(exc)
        assert f"{field}:" in exc.message, str(exc)
        rules = None
    assert time.monotonic() - started < 1.0

    if rules is not None:
        facts = probed("healthy-2gpu")
        started = time.monotonic()
        findings = run_rules(RuleSet(rules=rules, tables=TABLES, sources=[str(path)]), facts)
        took = time.monotonic() - started
        assert took < 1.0, f"took {took:.2f} s"
        assert len(findings) == 2  # one per GPU of the fixture host
        for finding in findings:
            assert finding.status is Status.ERROR, (finding.status, finding.message[:200])
            assert "broke" in finding.message and str(path) in finding.detail

    assert not sentinel.exists()
    assert dict(os.environ) == environ and os.getcwd() == cwd
    assert threading.active_count() == threads
    assert psutil.Process().children() == []


def test_nul_byte_in_an_expression_is_refused() -> None:
    with pytest.raises(ExpressionError, match="invalid"):
        compile_expression('gpu.name == "a\x00"', {"gpu": {}})


def test_legitimate_sizes_still_work() -> None:
    """The bounds leave room for what rules do: CPU lists of big hosts, long version strings."""
    roots = {"host": {"type": "object", "properties": {}}}
    cpus = list(range(4096))
    assert value_cells(cpus) < 5000
    assert compile_expression('len([1] * 99990) + len("a" * 99990)', roots).evaluate({}, {"len": len}) == 199980
    with pytest.raises(LimitExceeded):
        compile_expression("[[1] * 99990] * 2", roots).evaluate({}, {})
    with pytest.raises(LimitExceeded):
        value_cells([list(range(MAX_VALUE_CELLS))])
