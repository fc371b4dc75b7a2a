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

from gpudoctor.engine import loader, rule_cache
from gpudoctor.engine.expressions import Expression, Template
from gpudoctor.engine.loader import Rule, RuleSet, load_rules

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
    names = [*rule.__dataclass_fields__, "names_used", "facts_used"]
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
