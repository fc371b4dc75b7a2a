"""The compiled-rule cache: used when nothing changed, invalidated by any edit, ignored when unsafe."""

from __future__ import annotations

import os
import textwrap

from gpudoctor.engine import rule_cache
from gpudoctor.engine.loader import load_rules

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


def test_second_load_comes_from_the_cache_and_edits_invalidate_it(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "r.yaml").write_text(RULE)
    first = load_rules([pack], include_plugins=False)
    assert list((tmp_path / "cache").glob("rules-*.pickle"))
    assert oct((tmp_path / "cache").stat().st_mode & 0o777) == "0o700"

    calls = []
    monkeypatch.setattr("gpudoctor.engine.loader._load_uncached", lambda dirs: calls.append(dirs))
    second = load_rules([pack], include_plugins=False)
    assert calls == [] and [r.id for r in second.rules] == [r.id for r in first.rules]
    assert second.by_id("cached-check").fail_if.evaluate  # compiled, usable

    monkeypatch.undo()
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    (pack / "r.yaml").write_text(RULE.replace("cached-check", "edited-check"))
    os.utime(pack / "r.yaml", ns=(1, 1))  # a different mtime even on a coarse clock
    third = load_rules([pack], include_plugins=False)
    assert third.by_id("edited-check") is not None and third.by_id("cached-check") is None


def test_a_directory_others_can_write_is_not_trusted(tmp_path, monkeypatch):
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(0o777)
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(cache))
    rule_cache.store("k", {"x": 1})
    assert rule_cache.load("k") is None
    assert not list(cache.glob("rules-*.pickle"))


def test_a_corrupt_cache_entry_falls_back_to_the_files(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "r.yaml").write_text(textwrap.dedent(RULE))
    load_rules([pack], include_plugins=False)
    for entry in (tmp_path / "cache").glob("rules-*.pickle"):
        entry.write_bytes(b"not a pickle")
    again = load_rules([pack], include_plugins=False)
    assert again.by_id("cached-check") is not None


def test_no_cache_when_disabled(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GPUDOCTOR_NO_CACHE", "1")
    load_rules(include_plugins=False)
    assert not (tmp_path / "cache").exists()
