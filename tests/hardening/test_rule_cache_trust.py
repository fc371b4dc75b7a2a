"""The rule cache never runs code and is never read from or written to a place someone else
controls: gpudoctor runs as root, often with HOME somewhere another user can write
(`sudo --preserve-env=HOME`).

Each test plants what an attacker (or a full disk, or an editor) would leave and checks what a
user sees: the rules that load, whether the planted entry was used, what is left on disk.
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpudoctor.engine import loader
from gpudoctor.engine.loader import RuleSet, load_rules
from tests.conftest import REPO
from tests.engine.test_rule_cache import RULE  # the one cached rule both files test with

OTHER_UID = 12345
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make files owned by another user")


def make_pack(tmp_path: Path, text: str = RULE) -> Path:
    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "r.yaml").write_text(text)
    return pack


def load(pack: Path) -> RuleSet:
    return load_rules([pack], include_builtin=False, include_plugins=False)


def use_cache(monkeypatch: pytest.MonkeyPatch, directory: Path) -> None:
    monkeypatch.delenv("GPUDOCTOR_NO_CACHE", raising=False)
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(directory))


def entries(directory: Path) -> list[Path]:
    """What the cache wrote in ``directory`` (whatever its format)."""
    return sorted(p for p in directory.iterdir() if p.name.startswith("rules-"))


def populate(monkeypatch: pytest.MonkeyPatch, cache: Path, pack: Path) -> list[Path]:
    """Load once so that ``cache`` holds the entry for ``pack``; the entry files."""
    use_cache(monkeypatch, cache)
    load(pack)
    written = entries(cache)
    assert written, "the first load stores an entry"
    return written


class LoadCounter:
    """Counts the loads that read the rule files (a cache miss) rather than the cache."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.misses = 0
        real = loader._load_uncached

        def counted(dirs: list[Path]) -> RuleSet:
            self.misses += 1
            return real(dirs)

        monkeypatch.setattr(loader, "_load_uncached", counted)


def assert_cache_is_used(monkeypatch: pytest.MonkeyPatch, pack: Path) -> None:
    counter = LoadCounter(monkeypatch)
    ruleset = load(pack)
    assert ruleset.by_id("cached-check") is not None
    assert counter.misses == 0, "the cache was not used"


def assert_cache_is_not_used(monkeypatch: pytest.MonkeyPatch, pack: Path) -> RuleSet:
    counter = LoadCounter(monkeypatch)
    ruleset = load(pack)
    assert ruleset.by_id("cached-check") is not None, "the rules still load, from the files"
    assert counter.misses == 1, "the cache was used"
    return ruleset


# ---------------------------------------------------------------------------
# Nothing in the cache runs code


def mkdir_when_unpickled(path: Path) -> bytes:
    class Payload:
        def __reduce__(self) -> tuple[Any, ...]:
            return (os.mkdir, (str(path),))

    return pickle.dumps(Payload())


def test_a_pickle_planted_in_the_cache_never_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    pack = make_pack(tmp_path)
    planted = populate(monkeypatch, cache, pack)

    probe = tmp_path / "payload-works"
    pickle.loads(mkdir_when_unpickled(probe))  # noqa: S301 - the payload is real: unpickling it runs os.mkdir
    assert probe.is_dir()

    marker = tmp_path / "payload-ran"
    for entry in planted:  # in place of every entry the cache wrote, under its own name
        entry.write_bytes(mkdir_when_unpickled(marker))
    ruleset = assert_cache_is_not_used(monkeypatch, pack)
    assert not marker.exists(), "loading the rules ran code from the cache"
    assert [r.id for r in ruleset.rules] == ["cached-check"]
    assert_cache_is_used(monkeypatch, pack)  # and the planted entry was replaced by a good one
    assert not marker.exists()


# ---------------------------------------------------------------------------
# The cache directory and entry are reached without following anyone's symlinks


def test_a_symlinked_cache_directory_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = tmp_path / "real"
    pack = make_pack(tmp_path)
    populate(monkeypatch, real, pack)
    before = {p.name: p.read_bytes() for p in real.iterdir()}

    link = tmp_path / "link"
    link.symlink_to(real)
    use_cache(monkeypatch, link)
    assert_cache_is_not_used(monkeypatch, pack)
    assert {p.name: p.read_bytes() for p in real.iterdir()} == before, "nothing is written through the link"


@as_root
def test_a_symlink_another_user_placed_on_the_way_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # HOME=/home/alice, root runs gpudoctor: alice points ~/.cache at a directory of her choice
    target = tmp_path / "target"
    pack = make_pack(tmp_path)
    populate(monkeypatch, target / "gpudoctor", pack)
    home = tmp_path / "home"
    home.mkdir()
    (home / ".cache").symlink_to(target)
    os.lchown(home / ".cache", OTHER_UID, OTHER_UID)
    use_cache(monkeypatch, home / ".cache" / "gpudoctor")
    assert_cache_is_not_used(monkeypatch, pack)

    # the same link made by root (as /home -> /data/home is) is followed
    os.lchown(home / ".cache", 0, 0)
    assert_cache_is_used(monkeypatch, pack)


def test_a_symlinked_cache_entry_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    pack = make_pack(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for entry in populate(monkeypatch, cache, pack):
        moved = elsewhere / entry.name
        shutil.move(str(entry), moved)
        entry.symlink_to(moved)
    assert_cache_is_not_used(monkeypatch, pack)


# ---------------------------------------------------------------------------
# Only a directory and entry nobody else can write are trusted


def test_a_cache_directory_others_can_swap_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "shared"  # e.g. a HOME another user can write
    shared.mkdir()
    cache = shared / "gpudoctor"
    pack = make_pack(tmp_path)
    populate(monkeypatch, cache, pack)

    shared.chmod(0o777)  # the cache directory is still ours and 0700, but anyone can replace it
    assert_cache_is_not_used(monkeypatch, pack)
    assert not [p for p in cache.iterdir() if p.name.endswith(".tmp")]

    shared.chmod(0o1777)  # sticky, as /tmp: only its owner (us) can rename our directory
    assert_cache_is_used(monkeypatch, pack)

    shared.chmod(0o755)
    cache.chmod(0o770)  # the cache directory itself group-writable
    assert_cache_is_not_used(monkeypatch, pack)


@as_root
def test_a_cache_entry_owned_by_another_user_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    pack = make_pack(tmp_path)
    for entry in populate(monkeypatch, cache, pack):
        os.chown(entry, OTHER_UID, OTHER_UID)
    assert_cache_is_not_used(monkeypatch, pack)
    assert_cache_is_used(monkeypatch, pack)  # replaced by an entry of our own


# ---------------------------------------------------------------------------
# The key is the content


def test_an_edit_that_keeps_size_and_mtime_invalidates_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    pack = make_pack(tmp_path)
    rule_file = pack / "r.yaml"
    populate(monkeypatch, cache, pack)
    st = rule_file.stat()

    edited = RULE.replace("cached-check", "edited-check")
    assert len(edited) == len(RULE)
    rule_file.write_text(edited)
    os.utime(rule_file, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert rule_file.stat().st_size == st.st_size and rule_file.stat().st_mtime_ns == st.st_mtime_ns

    ruleset = load(pack)
    assert [r.id for r in ruleset.rules] == ["edited-check"], "the old rules ran after an edit"


# ---------------------------------------------------------------------------
# A failing write leaves nothing behind


FULL_DISK_CHILD = """
import resource, signal, sys
from gpudoctor.engine.loader import load_rules
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
ruleset = load_rules([sys.argv[1]], include_plugins=False)  # the built-in rules too: a 200 KB entry
print(ruleset.by_id("cached-check") is not None and len(ruleset.rules) > 1)
"""


def test_a_write_that_fails_part_way_leaves_no_temporary_file(tmp_path: Path) -> None:
    pack = make_pack(tmp_path)
    cache = tmp_path / "cache"
    env = dict(os.environ, GPUDOCTOR_CACHE_DIR=str(cache))
    env.pop("GPUDOCTOR_NO_CACHE", None)
    env["PYTHONPATH"] = str(REPO / "src") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for _ in range(3):  # each run on a full disk
        done = subprocess.run(
            [sys.executable, "-c", FULL_DISK_CHILD, str(pack)],
            env=env,
            cwd=str(tmp_path),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr
    assert sorted(p.name for p in cache.iterdir()) == [], "a partly written file was left in the cache"


def test_a_full_disk_leaves_nothing_in_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    use_cache(monkeypatch, cache)
    pack = make_pack(tmp_path)
    real_write = os.write

    def full(fd: int, data: Any) -> int:
        real_write(fd, bytes(data[: len(data) // 2]))  # a first part goes through, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    for _ in range(3):
        ruleset = load(pack)
        assert ruleset.by_id("cached-check") is not None
    assert sorted(p.name for p in cache.iterdir()) == [], "a partly written file was left in the cache"

    monkeypatch.setattr(os, "write", real_write)  # space again: the next run stores, the one after hits
    load(pack)
    assert_cache_is_used(monkeypatch, pack)


# ---------------------------------------------------------------------------
# An odd entry is a miss, never an error and never a wait


class Hang(BaseException):  # not an Exception: no `except Exception` in the cache may swallow it
    pass


def test_odd_cache_entries_fall_back_to_the_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    pack = make_pack(tmp_path)
    planted = populate(monkeypatch, cache, pack)
    good = planted[0].read_bytes()

    def fifo(path: Path) -> None:
        os.mkfifo(path)  # nobody will ever open it for writing

    def huge(path: Path) -> None:
        with open(path, "wb") as fh:
            fh.truncate(1 << 40)  # sparse: a terabyte to read

    text = good.decode("utf-8", "replace")
    odd: dict[str, Any] = {
        "a FIFO": fifo,
        "a directory": lambda path: path.mkdir(),
        "a huge file": huge,
        "truncated": good[: len(good) // 2],
        "empty": b"",
        "garbage": b"\x80\x04\x95garbage\x00\xff" * 100,
        "JSON of another shape": b'["rules"]',
        "NaN": re.sub(r'"line":\d+', '"line":NaN', text, count=1).encode(),
        "a rule of the wrong type": text.replace('"severity":"warning"', '"severity":7', 1).encode(),
        "another format": re.sub(r'"format":\d+', '"format":99', text, count=1).encode(),
    }
    previous = signal.signal(signal.SIGALRM, _raise_hang)
    try:
        for what, content in odd.items():
            for entry in entries(cache):
                if entry.is_dir() and not entry.is_symlink():
                    entry.rmdir()
                else:
                    entry.unlink()
            for entry in planted:
                if callable(content):
                    content(entry)
                else:
                    entry.write_bytes(content)
            counter = LoadCounter(monkeypatch)
            started = time.monotonic()
            signal.setitimer(signal.ITIMER_REAL, 5.0)
            try:
                ruleset = load(pack)
            except Hang:
                pytest.fail(f"{what}: loading the rules waited on the cache entry")
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            assert time.monotonic() - started < 5.0, f"{what}: loading the rules waited on the cache entry"
            assert [r.id for r in ruleset.rules] == ["cached-check"], what
            assert counter.misses == 1, f"{what}: the odd entry was used"
            monkeypatch.undo()
            use_cache(monkeypatch, cache)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _raise_hang(signum: int, frame: Any) -> None:
    raise Hang()


# ---------------------------------------------------------------------------
# What an entry says is checked again: a tampered rule or table is a miss, never run


TABLE = """\
name: flags
description: a test table
source: test
retrieved: "2026-01-02"
rows:
  "1": {name: one, big: 12345}
"""
TABLE_RULE = (
    RULE
    + """\
- id: table-check
  title: A table check
  area: env
  severity: info
  fail_if: lookup("flags", 1, "name") == "two"
  message: "{lookup('flags', 1, 'name')}"
  fix: nothing
  why: because it is a test
  refs: [test]
"""
)


def _rule(data: dict[str, Any], rule_id: str = "cached-check") -> dict[str, Any]:
    for entry in data["rules"]:
        if entry["raw"]["id"] == rule_id:
            raw: dict[str, Any] = entry["raw"]
            return raw
    raise AssertionError(rule_id)


def _set(field: str, value: Any, rule_id: str = "cached-check") -> Any:
    def edit(data: dict[str, Any]) -> None:
        _rule(data, rule_id)[field] = value

    return edit


def _table(edit: Any) -> Any:
    def wrapped(data: dict[str, Any]) -> None:
        edit(data["tables"]["flags"])

    return wrapped


# What compile_expression or compile_template refuses, wherever in the rule it is: a cached rule's
# fields are compiled where the run first reads them, so such an entry is used, but never the
# refused text: the rule is read from its file instead, and the entry is removed.
REFUSED_TEXTS: dict[str, Any] = {
    "a dunder in fail_if": _set("fail_if", "host.__class__.__base__ == 1"),
    "a dunder in applies": _set("applies", "host.env.__class__ != None"),
    "a dunder in a message placeholder": _set("message", "{host.__class__.__subclasses__()}"),
    "a dunder in a fix placeholder": _set("fix", "run {host.env.__dict__}"),
    "a dunder in pass_message": _set("pass_message", "{host.env.FLAG.__class__}"),
    "a dunder in unknown_message": _set("unknown_message", "{host.env.__dict__}"),
    "a dunder in a let: name": _set("let", {"flag": "host.env.__class__"}),
    "a call of __import__": _set("fail_if", "__import__('os').system('touch PWNED') == 0"),
    "a call of open": _set("fail_if", "open('/etc/shadow') != None"),
    "an attribute of a constant": _set("fail_if", "''.__class__ == 1"),
    "a lambda": _set("fail_if", "(lambda: 1)() == 1"),
    "a comprehension": _set("fail_if", "[x for x in gpus] == []"),
    "a keyword argument": _set("fail_if", "len(gpus, x=1) == 0"),
    "an unknown fact": _set("fail_if", "host.no_such_fact == 1"),
    "a subject variable the subject lacks": _set("fail_if", "gpu.index == 0"),
    "a %-format": _set("message", "{'%999999999d' % 1}"),
    "a conversion in a template": _set("message", "{host.env.FLAG!r}"),
    "a huge format width": _set("message", "{host.env.FLAG:>999999}"),
    "a table that does not exist": _set("fail_if", "lookup('nope', 1) == 1", "table-check"),
    "a table helper in other characters": _set("fail_if", "ｌookup('nope', 1) == 1", "table-check"),
}

# What the schema refuses, checked by hand when the entry is read: the entry is a miss.
TAMPERED: dict[str, Any] = {
    "an unknown field": _set("run", "rm -rf /"),
    "a subject that does not exist": _set("subject", "root"),
    "a severity that does not exist": _set("severity", "fatal"),
    "an area that does not exist": _set("area", "kernel\x1b[2J"),
    "an id with escapes": _set("id", "cached-check\x1b[31m"),
    "a title too long": _set("title", "t" * 121),
    "a list for a text": _set("why", ["because"]),
    "an empty refs": _set("refs", []),
    "a tag twice": _set("tags", ["a", "a"]),
    "a field missing": lambda data: _rule(data).pop("fix"),
    "a let: text that is not a text": _set("let", {"flag": 1}),
    "a rule twice": lambda data: data["rules"].append(data["rules"][0]),
    "a rule from a file not loaded": lambda data: data["rules"][0].update(source="/etc/passwd"),
    "a negative line": lambda data: data["rules"][0].update(line=-1),
    "a line that is not a number": lambda data: data["rules"][0].update(line="1"),
    "a table under another name": lambda data: data["tables"].update(other=data["tables"]["flags"]),
    "a table without its path": _table(lambda table: table.pop("path")),
    "a table with an unknown field": _table(lambda table: table.update(code="os.system")),
    "a table with no rows": _table(lambda table: table.update(rows={})),
    "a table date in other digits": _table(lambda table: table.update(retrieved="\u0662\u0660\u0662\u0666-01-02")),
}


def _tamper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit: Any) -> tuple[Path, Path, Path]:
    """A pack of two rules and a table, its cache entry edited by ``edit``: (cache, pack, entry)."""
    cache = tmp_path / "cache"
    pack = make_pack(tmp_path, TABLE_RULE)
    (pack / "data").mkdir()
    (pack / "data" / "flags.yaml").write_text(TABLE)
    (entry,) = populate(monkeypatch, cache, pack)
    document = json.loads(entry.read_text())
    edit(document["data"])
    entry.write_text(json.dumps(document, ensure_ascii=False))
    return cache, pack, entry


def _is_the_files_rule_set(ruleset: RuleSet) -> None:
    assert [r.id for r in ruleset.rules] == ["cached-check", "table-check"]
    rule = ruleset.by_id("cached-check")
    assert rule is not None
    assert rule.fail_if.source == 'host.env.FLAG == "1"' and rule.message.source == "FLAG is {host.env.FLAG}"
    assert rule.applies is None and rule.pass_message is None and rule.unknown_message is None and rule.let == ()
    table_rule = ruleset.by_id("table-check")
    assert table_rule is not None and table_rule.fail_if.source == 'lookup("flags", 1, "name") == "two"'
    assert ruleset.tables["flags"]["rows"] == {"1": {"name": "one", "big": 12345}}


@pytest.mark.parametrize("what", sorted(TAMPERED))
def test_a_tampered_entry_is_checked_again_and_missed(
    what: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, pack, _ = _tamper(tmp_path, monkeypatch, TAMPERED[what])
    _is_the_files_rule_set(assert_cache_is_not_used(monkeypatch, pack))
    assert_cache_is_used(monkeypatch, pack)  # and the tampered entry was replaced by a good one


@pytest.mark.parametrize("what", sorted(REFUSED_TEXTS))
def test_a_refused_text_in_an_entry_is_never_evaluated(
    what: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpudoctor.engine.runner import run_rules
    from gpudoctor.findings import Status

    monkeypatch.chdir(tmp_path)  # where the planted os.system would leave its file
    _, pack, entry = _tamper(tmp_path, monkeypatch, REFUSED_TEXTS[what])
    counter = LoadCounter(monkeypatch)
    ruleset = load(pack)
    assert counter.misses == 0, "the entry's shape and fields are sound: it is used"
    facts = {"host": {"env": {"FLAG": "1"}}}
    findings = run_rules(ruleset, facts)
    assert [(f.rule_id, f.status, f.message) for f in findings] == [
        ("cached-check", Status.FAIL, "FLAG is 1"),
        ("table-check", Status.PASS, "A table check"),
    ], what
    _is_the_files_rule_set(ruleset)  # every field now as the file defines it
    assert not (tmp_path / "PWNED").exists()
    assert not entry.exists(), "the entry is removed"
    assert_cache_is_not_used(monkeypatch, pack)  # so the next load reads the files
    assert_cache_is_used(monkeypatch, pack)  # and caches them again


def test_a_refused_text_is_never_evaluated_even_when_its_file_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the entry is found for the files' bytes; were the file removed meanwhile, the rule breaks
    # (an error finding naming the rule), and the others still run
    from gpudoctor.engine.runner import run_rules
    from gpudoctor.findings import Status

    _, pack, _ = _tamper(tmp_path, monkeypatch, _set("fail_if", "host.__class__ == 1"))
    ruleset = load(pack)
    (pack / "r.yaml").unlink()
    findings = run_rules(ruleset, {"host": {"env": {"FLAG": "1"}}})
    assert [(f.rule_id, f.status) for f in findings] == [("cached-check", Status.ERROR), ("table-check", Status.PASS)]
    assert "RuleLoadError" in findings[0].message and "r.yaml" in findings[0].detail


def test_a_table_number_no_rule_file_can_hold_is_a_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the YAML reader refuses integers of more than 40 digits: so does reading an entry
    cache = tmp_path / "cache"
    pack = make_pack(tmp_path, TABLE_RULE)
    (pack / "data").mkdir()
    (pack / "data" / "flags.yaml").write_text(TABLE)
    (entry,) = populate(monkeypatch, cache, pack)
    text = entry.read_text()
    assert '"big":12345' in text
    entry.write_text(text.replace('"big":12345', '"big":' + "9" * 41))
    assert_cache_is_not_used(monkeypatch, pack)
    entry.write_text(text.replace('"big":12345', '"big":-' + "9" * 40))  # as long as a rule file may have
    assert_cache_is_used(monkeypatch, pack)


LET_RULE = """\
- id: {id}
  title: A let check
  area: env
  severity: warning
  let:
    flag: host.env.FLAG
  fail_if: flag == "1"
  message: "FLAG is {{flag}}"
  fix: unset FLAG
  why: because it is a test
  refs: [test]
"""
LET_RULES = LET_RULE.format(id="let-one") + LET_RULE.format(id="let-two")  # the same texts in two rules


def test_cached_rules_sharing_a_text_that_reads_a_let_name_each_bind_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the second rule's fail_if and message are the first's, compiled once: its let: names must
    # still be compiled and bound for it
    from gpudoctor.engine.runner import run_rules

    pack = make_pack(tmp_path, LET_RULES)
    use_cache(monkeypatch, tmp_path / "cache")
    facts = {"host": {"env": {"FLAG": "1"}}}
    from_files = [(f.rule_id, f.status, f.message) for f in run_rules(load(pack), facts)]
    cached = load(pack)
    assert all(rule.parts.done == {} for rule in cached.rules), "the second load came from the cache"
    assert [(f.rule_id, f.status, f.message) for f in run_rules(cached, facts)] == from_files
    assert [status.value for _, status, _ in from_files] == ["fail", "fail"]


def test_after_a_refused_field_every_field_is_the_file_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a field read from the entry before another is refused is not kept: from then on the rule's
    # fields are the file's, the one read first included
    from gpudoctor.engine.runner import run_rules
    from gpudoctor.findings import Status

    def edit(data: dict[str, Any]) -> None:
        _set("fail_if", 'host.env.OTHER == "1"')(data)  # a text the checks accept
        _set("message", "{host.__class__}")(data)  # one they refuse

    _, pack, _ = _tamper(tmp_path, monkeypatch, edit)
    ruleset = load(pack)
    facts = {"host": {"env": {"FLAG": "0", "OTHER": "1"}}}
    run_rules(ruleset, facts)  # the entry's fail_if fails, its message is refused: the file's rule
    rule = ruleset.by_id("cached-check")
    assert rule is not None and rule.fail_if.source == 'host.env.FLAG == "1"'
    findings = run_rules(ruleset, facts)
    assert [(f.rule_id, f.status) for f in findings] == [("cached-check", Status.PASS), ("table-check", Status.PASS)]


def test_rules_show_of_a_cached_rule_its_file_no_longer_defines_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    pack = make_pack(tmp_path)
    env = {**os.environ, "GPUDOCTOR_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO / "src")}
    env.pop("GPUDOCTOR_NO_CACHE", None)

    def show(rule_id: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gpudoctor", "rules", "show", rule_id, "--rules", str(pack)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )

    assert show("cached-check").returncode == 0  # fills the cache (the built-in rules and the pack)
    (entry,) = entries(cache)
    document = json.loads(entry.read_text())
    _set("fail_if", "host.__class__ == 1")(document["data"])
    _set("id", "other-id")(document["data"])
    entry.write_text(json.dumps(document))
    done = show("other-id")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "bad rule file" in done.stderr and "other-id" in done.stderr
