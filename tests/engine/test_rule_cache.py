"""The rule cache: used when nothing changed, invalidated by any edit, ignored when unsafe.

Attacks on it (planted pickles, symlinks, other users' files, full disks) are in
tests/hardening/test_rule_cache_trust.py.
"""

from __future__ import annotations

import ast
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from gpudoctor.engine import cached_rules, loader, rule_cache
from gpudoctor.engine.evaluator import Expression
from gpudoctor.engine.loader import Rule, RuleSet, load_rules
from gpudoctor.engine.templates import Template

RULE = """\
- id: cached-check
  title: A cached check
  area: env
  severity: warning
  fail_if: host.env.FLAG == "1"
  message: "FLAG is {host.env.FLAG}"
  fix: unset FLAG
  why: because it is a test
  refs: [test]
"""
KEY = "0123456789abcdef" * 4


def test_second_load_comes_from_the_cache_and_edits_invalidate_it(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "r.yaml").write_text(RULE)
    first = load_rules([pack], include_plugins=False)
    assert list((tmp_path / "cache").glob("rules-*.json"))
    assert oct((tmp_path / "cache").stat().st_mode & 0o777) == "0o700"

    calls = []
    monkeypatch.setattr("gpudoctor.engine.loader._load_uncached", lambda dirs: calls.append(dirs))
    second = load_rules([pack], include_plugins=False)
    assert calls == [] and [r.id for r in second.rules] == [r.id for r in first.rules]
    assert second.by_id("cached-check").fail_if.evaluate  # compiled, usable

    monkeypatch.undo()
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    (pack / "r.yaml").write_text(RULE.replace("cached-check", "edited-check"))
    third = load_rules([pack], include_plugins=False)
    assert third.by_id("edited-check") is not None and third.by_id("cached-check") is None


def test_the_entry_is_plain_json_private_to_the_user(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    load_rules(include_plugins=False)
    (entry,) = (tmp_path / "cache").iterdir()
    assert entry.name.startswith("rules-") and entry.suffix == ".json"
    assert oct(entry.stat().st_mode & 0o777) == "0o600"
    data = json.loads(entry.read_text())
    assert data["format"] == rule_cache.FORMAT and set(data["data"]) == {"tables", "rules", "sources"}
    assert "fail_if" in data["data"]["rules"][0]["raw"]  # the rule as its file holds it, compiled on load


def _plain(value: Any) -> Any:
    """A rule's fields as comparable data (expression trees as their dumps)."""
    if isinstance(value, Expression):
        return ("expr", value.source, ast.dump(value.tree), value.paths)
    if isinstance(value, Template):
        return ("template", value.source, tuple(_plain(part) for part in value.parts))
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return value


def _fields(rule: Rule) -> dict[str, Any]:
    names = [f for f in rule.__dataclass_fields__ if f != "parts"]
    names += [*loader.COMPILED_FIELDS, "names_used", "facts_used"]
    return {name: _plain(getattr(rule, name)) for name in names}


def test_a_cached_rule_set_is_the_rule_set_the_files_give(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    uncached = load_rules(include_plugins=False)
    calls = []
    real = loader._load_uncached

    def counted(dirs):
        calls.append(dirs)
        return real(dirs)

    monkeypatch.setattr(loader, "_load_uncached", counted)
    cached = load_rules(include_plugins=False)
    assert calls == [] and isinstance(cached, RuleSet)
    assert [_fields(r) for r in cached.rules] == [_fields(r) for r in uncached.rules]
    assert cached.tables == uncached.tables and cached.sources == uncached.sources


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
def test_a_directory_others_can_write_is_not_trusted(tmp_path, monkeypatch, mode):
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(mode)
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(cache))
    rule_cache.store(KEY, {"x": 1})
    assert rule_cache.load(KEY) is None
    assert not list(cache.iterdir())

    cache.chmod(0o700)
    rule_cache.store(KEY, {"x": 1})
    assert rule_cache.load(KEY) == {"x": 1}


def test_only_what_json_gives_back_unchanged_is_stored(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    for value in ({1: "int key"}, {"t": (1, 2)}, {"nan": float("nan")}, {"set": {1}}, {"obj": object()}):
        rule_cache.store(KEY, value)
        assert rule_cache.load(KEY) is None, value
    rule_cache.store(KEY, {"ok": [1, 2.5, "s", None, True, {"n": {}}]})
    assert rule_cache.load(KEY) == {"ok": [1, 2.5, "s", None, True, {"n": {}}]}
    assert rule_cache.load("1" * 64) is None  # another key
    entry = tmp_path / "cache" / f"rules-{KEY}.json"
    entry.write_text(entry.read_text().replace("2.5", "1e999"))  # JSON, but infinite
    assert rule_cache.load(KEY) is None
    assert rule_cache.load("../../etc/passwd") is None  # not a key at all


def test_a_corrupt_cache_entry_falls_back_to_the_files(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "r.yaml").write_text(RULE)
    load_rules([pack], include_plugins=False)
    for entry in (tmp_path / "cache").glob("rules-*.json"):
        entry.write_bytes(b"not JSON")
    again = load_rules([pack], include_plugins=False)
    assert again.by_id("cached-check") is not None


def test_an_unreadable_rule_file_is_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "r.yaml").write_text(RULE)
    os.mkfifo(pack / "fifo.yaml")  # never opened for writing: a blocking read would wait forever
    assert rule_cache.key([pack], [pack / "r.yaml", pack / "fifo.yaml"]) is None
    assert rule_cache.key([pack], [pack / "r.yaml", pack / "missing.yaml"]) is None
    assert rule_cache.key([pack], [pack / "r.yaml"]) is not None


def test_storing_removes_stale_entries_and_old_pickles(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(cache))
    week_old = time.time() - rule_cache.MAX_AGE_S - 60
    stale = {"rules-" + "a" * 64 + ".json": week_old, ".rules-dead.tmp": time.time() - 7200}
    for name, mtime in stale.items():
        (cache / name).write_text("{}")
        os.utime(cache / name, (mtime, mtime))
    (cache / "rules-0123.pickle").write_bytes(b"\x80\x04N.")  # what older versions wrote
    (cache / ".rules-busy.tmp").write_text("")  # another process writing right now
    (cache / "notes.txt").write_text("not ours")
    rule_cache.store(KEY, {"x": 1})
    assert sorted(p.name for p in cache.iterdir()) == [".rules-busy.tmp", "notes.txt", f"rules-{KEY}.json"]


def test_no_cache_when_disabled(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GPUDOCTOR_NO_CACHE", "1")
    load_rules(include_plugins=False)
    assert not (tmp_path / "cache").exists()
    assert rule_cache.key([], [Path(__file__)]) is None  # and no rule file is even read for a key


# ---------------------------------------------------------------------------
# A cached load checks rules and tables by hand (no JSON-schema validator), as strictly


def _schema_props(name: str) -> dict[str, Any]:
    from gpudoctor.schemas import load_schema

    schema = load_schema(name)
    return schema["items"] if name == "rules" else schema


def test_the_hand_checks_know_every_constraint_of_the_schemas():
    # If this fails, a schema changed: make _plain_rule / _plain_table check the same (and
    # bump rule_cache.FORMAT if what an entry holds changes), then update the expectations here.
    rules = _schema_props("rules")
    assert rules["additionalProperties"] is False
    assert set(rules["properties"]) == cached_rules._RULE_FIELDS
    assert set(rules["required"]) == cached_rules._RULE_REQUIRED
    props = rules["properties"]
    constraints = {
        name: {k: v for k, v in spec.items() if k not in ("description", "default")} for name, spec in props.items()
    }
    assert constraints == {
        "id": {"type": "string", "pattern": "^[a-z0-9]+(-[a-z0-9]+)*$", "maxLength": cached_rules._RULE_ID_MAX},
        "title": {"type": "string", "minLength": cached_rules._TITLE_MIN, "maxLength": cached_rules._TITLE_MAX},
        "area": {"enum": sorted(cached_rules._AREAS, key=props["area"]["enum"].index)},
        "severity": {"enum": sorted(cached_rules._SEVERITIES, key=props["severity"]["enum"].index)},
        "subject": {"enum": sorted(cached_rules._SUBJECTS, key=props["subject"]["enum"].index)},
        "action": {"enum": sorted(cached_rules._ACTIONS, key=props["action"]["enum"].index)},
        "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z0-9-]+$"}, "uniqueItems": True},
        **{name: {"type": "string"} for name in cached_rules._RULE_TEXTS},
        "refs": {"type": "array", "minItems": 1, "items": {"type": "string"}},
        "let": {
            "type": "object",
            "maxProperties": cached_rules._LET_MAX,
            "propertyNames": {
                "pattern": f"^{cached_rules._LET_NAME.pattern}$",
                "maxLength": cached_rules._LET_NAME_MAX,
            },
            "additionalProperties": {"type": "string"},
        },
        "superseded_by": {
            "type": "array",
            "maxItems": cached_rules._SUPERSEDED_MAX,
            "uniqueItems": True,
            "items": {"type": "string", "pattern": "^[a-z0-9]+(-[a-z0-9]+)*$", "maxLength": cached_rules._RULE_ID_MAX},
        },
    }
    assert cached_rules._RULE_ID.pattern == "[a-z0-9]+(?:-[a-z0-9]+)*" and cached_rules._TAG.pattern == "[a-z0-9-]+"

    table = _schema_props("table")
    assert table["additionalProperties"] is False
    assert set(table["properties"]) == cached_rules._TABLE_FIELDS
    assert set(table["required"]) == cached_rules._TABLE_REQUIRED
    assert {
        name: {k: v for k, v in spec.items() if k != "description"} for name, spec in table["properties"].items()
    } == {
        "name": {"type": "string", "pattern": "^[a-z0-9_]+$"},
        "description": {"type": "string"},
        "source": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}]},
        "retrieved": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"},
        "notes": {"type": "string"},
        "rows": {"type": "object", "minProperties": 1},
    }


GOOD_RULE: dict[str, Any] = {
    "id": "a-rule",
    "title": "A rule",
    "area": "env",
    "severity": "info",
    "action": "reset-gpu",
    "subject": "gpu",
    "tags": ["x", "y-1"],
    "applies": "True",
    "fail_if": "False",
    "message": "m",
    "pass_message": "p",
    "unknown_message": "u",
    "fix": "f",
    "why": "w",
    "refs": ["r"],
    "docs": "d",
    "let": {"a": "1", "b_2": "a + 1"},
}
GOOD_TABLE: dict[str, Any] = {
    "name": "t_1",
    "description": "d",
    "source": ["s"],
    "retrieved": "2026-01-02",
    "notes": "n",
    "rows": {"k": {"v": [1, 2.5, None, True]}},
}
ODD_VALUES: list[Any] = [None, True, 0, 7, 1.5, "", "x" * 200, [], ["x", "x"], ["UPPER"], [1], {}, {"a": 1}, "ERROR"]


def _rule_variants() -> list[dict[str, Any]]:
    out = [dict(GOOD_RULE), {k: v for k, v in GOOD_RULE.items() if k in cached_rules._RULE_REQUIRED}]
    for name in GOOD_RULE:
        out.append({k: v for k, v in GOOD_RULE.items() if k != name})  # a field missing
        for value in ODD_VALUES:
            out.append({**GOOD_RULE, name: value})
    for rule_id in ("a", "a-b-c", "A-rule", "a--b", "-a", "a-", "a_b", "é", "a" * 64, "a" * 65, "a\n"):
        out.append({**GOOD_RULE, "id": rule_id})
    for title in ("ab", "abc", "x" * 120, "x" * 121):
        out.append({**GOOD_RULE, "title": title})
    out.append({**GOOD_RULE, "extra": "field"})
    out.append({**GOOD_RULE, "tags": ["a", "b", "a"]})
    out.append({**GOOD_RULE, "tags": ["a b"]})
    for name in ("a", "a_1", "A", "1a", "_a", "a-b", "a" * 40, "a" * 41, "é"):
        out.append({**GOOD_RULE, "let": {name: "1"}})
    out.append({**GOOD_RULE, "let": {"a": 1}})
    out.append({**GOOD_RULE, "let": {f"n{i}": "1" for i in range(32)}})
    out.append({**GOOD_RULE, "let": {f"n{i}": "1" for i in range(33)}})
    return out


def _table_variants() -> list[dict[str, Any]]:
    out = [dict(GOOD_TABLE), {k: v for k, v in GOOD_TABLE.items() if k != "notes"}, {**GOOD_TABLE, "source": "s"}]
    for name in GOOD_TABLE:
        out.append({k: v for k, v in GOOD_TABLE.items() if k != name})
        for value in ODD_VALUES:
            out.append({**GOOD_TABLE, name: value})
    for date in ("2026-1-02", "20260102", "2026-01-02x", "\u0662\u0660\u0662\u0666-01-02"):
        out.append({**GOOD_TABLE, "retrieved": date})
    out.append({**GOOD_TABLE, "name": "T"})
    out.append({**GOOD_TABLE, "extra": 1})
    return out


def test_what_the_hand_checks_accept_the_schemas_accept():
    from gpudoctor.schemas import validate

    accepted = 0
    for raw in _rule_variants():
        ok = validate("rules", [raw]) is None
        if cached_rules._plain_rule(raw):
            accepted += 1
            assert ok, f"the cache accepts a rule the schema refuses: {raw}"
        else:
            assert not ok, f"the cache refuses a rule the schema accepts (every load would miss): {raw}"
    for table in _table_variants():
        ok = validate("table", table) is None
        if cached_rules._plain_table(table.get("name"), {**table, "path": "/p"}):
            accepted += 1
            assert ok, f"the cache accepts a table the schema refuses: {table}"
        elif "\u0662" not in str(table.get("retrieved")):  # the schema's \d takes Arabic-Indic digits
            assert not ok, f"the cache refuses a table the schema accepts: {table}"
    assert accepted > 20
    assert not cached_rules._plain_table("t_1", dict(GOOD_TABLE)), "a table without its path"
    assert not cached_rules._plain_table("other", {**GOOD_TABLE, "path": "/p"}), "a table under another name"


def test_every_built_in_rule_and_table_passes_the_hand_checks(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    ruleset = load_rules(include_plugins=False)
    stored = json.loads(json.dumps({"rules": [r.raw for r in ruleset.rules], "tables": ruleset.tables}))
    assert all(cached_rules._plain_rule(raw) for raw in stored["rules"])
    assert all(cached_rules._plain_table(name, table) for name, table in stored["tables"].items())


WARM_LOAD = """
import sys
from gpudoctor.engine.loader import load_rules
from gpudoctor.engine import loader
loader._load_uncached = None  # a miss would fail
load_rules(include_plugins=False)
print(sorted(m for m in ("fastjsonschema", "yaml", "hashlib", "_hashlib") if m in sys.modules))
"""


def test_a_cached_load_imports_no_schema_validator_yaml_or_openssl(tmp_path, monkeypatch):
    import subprocess
    import sys

    from tests.conftest import REPO

    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    load_rules(include_plugins=False)
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    done = subprocess.run([sys.executable, "-c", WARM_LOAD], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    builtin_sha = any(_importable(name) for name in ("_sha2", "_sha256"))
    assert done.stdout.strip() == ("[]" if builtin_sha else "['_hashlib', 'hashlib']")


def _importable(name: str) -> bool:
    try:
        return hasattr(__import__(name), "sha256")
    except ImportError:
        return False


def test_the_key_hash_is_sha256():
    import hashlib

    assert rule_cache._sha256(b"abc").hexdigest() == hashlib.sha256(b"abc").hexdigest()
    h = rule_cache._sha256()
    h.update(b"a")
    h.update(b"bc")
    assert h.digest() == hashlib.sha256(b"abc").digest()


SWITCH = """
import sys
from gpudoctor.engine import rule_cache
small = rule_cache._sha256(b"abc")
before = type(small).__module__, "hashlib" in sys.modules
early = rule_cache._sha256()  # a hash made before the switch, fed after it
big = b"x" * (rule_cache.BUILTIN_HASH_BYTES + 1)
large = rule_cache._sha256(big).hexdigest()
early.update(b"abc")
import hashlib
print(before, "hashlib" in sys.modules, rule_cache._SHA256 is hashlib.sha256)
abc = hashlib.sha256(b"abc").hexdigest()
print(large == hashlib.sha256(big).hexdigest(), small.hexdigest() == early.hexdigest() == abc)
print(rule_cache._sha256(b"abc").hexdigest() == hashlib.sha256(b"abc").hexdigest())
"""


def test_past_a_mebibyte_hashed_the_key_hash_is_openssls_and_still_sha256():
    import subprocess
    import sys

    from tests.conftest import REPO

    if not any(_importable(name) for name in ("_sha2", "_sha256")):
        pytest.skip("this Python has no built-in SHA-256: hashlib's is used from the start")
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    done = subprocess.run([sys.executable, "-c", SWITCH], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    first, digests, after = done.stdout.splitlines()
    # a little hashed: the built-in hash, no OpenSSL; past a mebibyte: OpenSSL's, the same digests
    assert first.endswith(", False) True True") and "hashlib" not in first.split(",")[0]
    assert digests == "True True" and after == "True"


def test_a_table_helper_spelled_with_other_characters_is_still_checked():
    # The table check skips expressions whose text names no table helper; Python reads the
    # fullwidth "ｌookup" as lookup, so a text that is not ASCII is always walked.
    raw = {
        **{k: v for k, v in GOOD_RULE.items() if k in cached_rules._RULE_REQUIRED},
        "fail_if": "ｌookup('nope', 1) == 1",
    }
    with pytest.raises(loader.RuleLoadError, match="no data table 'nope'"):
        loader.compile_rule(raw, "r.yaml", {})
    raw["fail_if"] = "flag_names(1, 'nope') == []"
    with pytest.raises(loader.RuleLoadError, match="no data table 'nope'"):
        loader.compile_rule(raw, "r.yaml", {})
    raw["fail_if"] = "'lookup' == 'flag_names'"  # named, not called: walked, nothing to refuse
    assert loader.compile_rule(raw, "r.yaml", {}).fail_if.source == "'lookup' == 'flag_names'"


def test_an_entry_holds_no_integer_a_rule_file_could_not(tmp_path, monkeypatch):
    # the bound is gpudoctor.inputs.MAX_INT_DIGITS (40), the YAML reader's: strict JSON as it reads it
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    for value in (10**40 - 1, -(10**40 - 1), 0):
        rule_cache.store(KEY, {"n": value})
        assert rule_cache.load(KEY) == {"n": value}
    rule_cache.store(KEY, {"n": 10**40})
    assert rule_cache.load(KEY) is None


def test_a_cached_rule_compiles_only_what_the_run_reads(tmp_path, monkeypatch):
    # A rule from the cache is compiled, and checked, field by field where the run first reads
    # it: one that does not apply compiles its applies only; one that passes, not its message or fix.
    from gpudoctor.engine.runner import run_rules
    from gpudoctor.findings import Status

    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "r.yaml").write_text(
        RULE
        + """\
- id: skipped-check
  title: A skipped check
  area: env
  severity: info
  let:
    flag: host.env.FLAG
  applies: host.env.OTHER == "1"
  fail_if: flag == "1"
  message: "{flag}"
  fix: nothing
  why: because it is a test
  refs: [test]
"""
    )
    load_rules([pack], include_builtin=False, include_plugins=False)  # fills the cache
    ruleset = load_rules([pack], include_builtin=False, include_plugins=False)
    done = {rule.id: rule.parts.done for rule in ruleset.rules}
    assert done == {"cached-check": {}, "skipped-check": {}}
    findings = run_rules(ruleset, {"host": {"env": {"FLAG": "0", "OTHER": "0"}}})
    assert [(f.rule_id, f.status) for f in findings] == [("cached-check", Status.PASS), ("skipped-check", Status.SKIP)]
    assert set(done["cached-check"]) == {"applies", "fail_if", "pass_message"}
    assert set(done["skipped-check"]) == {"applies"}  # not its let: names, fail_if, message or fix
    assert ruleset.by_id("skipped-check").parts.lets is None
    findings = run_rules(ruleset, {"host": {"env": {"FLAG": "1", "OTHER": "1"}}})
    assert [(f.rule_id, f.status, f.message) for f in findings] == [
        ("cached-check", Status.FAIL, "FLAG is 1"),
        ("skipped-check", Status.FAIL, "1"),
    ]
    assert set(done["skipped-check"]) == {"applies", "fail_if", "message", "fix"}


def test_a_rule_file_s_rule_is_compiled_whole_at_load(tmp_path):
    # every problem of a rule file is found when it loads, not when a run first reads the field
    good = {k: v for k, v in GOOD_RULE.items() if k in cached_rules._RULE_REQUIRED}
    raw = {**good, "fix": "{host.__class__}"}
    with pytest.raises(loader.RuleLoadError, match="fix"):
        loader.compile_rule(raw, "r.yaml", {})
    raw = dict(good)
    rule = loader.compile_rule(raw, "r.yaml", {})
    assert set(rule.parts.done) == set(loader.COMPILED_FIELDS)


def test_prepare_compiles_what_every_run_reads_first(tmp_path, monkeypatch):
    # check compiles, while NVML's child may still be answering, each cached rule's applies (else
    # its fail_if): what the run reads for every subject anyway; nothing else
    from gpudoctor.engine.runner import prepare

    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    load_rules(include_plugins=False)
    ruleset = load_rules(include_plugins=False)
    assert all(rule.parts.done == {} for rule in ruleset.rules)
    assert prepare(ruleset.rules) == len(ruleset.rules)
    for rule in ruleset.rules:
        first = "applies" if "applies" in rule.raw else "fail_if"
        assert set(rule.parts.done) == ({"applies"} if first == "applies" else {"applies", "fail_if"}), rule.id
    assert prepare(ruleset.rules, deadline=0.0) == 0  # past its deadline: nothing


def test_prepare_leaves_a_refused_text_to_the_run(tmp_path, monkeypatch):
    from gpudoctor.engine.runner import prepare
    from gpudoctor.findings import Severity

    broken = Rule(
        id="r", title="A rule", area="env", severity=Severity.INFO, subject="host", why="w", refs=("x",),
        parts=_Refusing(),
    )
    assert prepare([broken]) == 1  # no exception: the run reports the rule when it reads the field


class _Refusing:
    """A rule's parts whose every field the checks refuse (and whose file is gone)."""

    def get(self, name):
        raise loader.RuleLoadError("r.yaml", 1, f"refused {name}")
