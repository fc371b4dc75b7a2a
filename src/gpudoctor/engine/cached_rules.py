"""What a rule-cache entry holds (rule_cache stores and finds it): the parsed rules and tables a
rule set is made from, and the checks an entry read back must pass before the loader compiles it.

The checks are by hand (_plain_rule, _plain_table): as strict as rules.schema.json and
table.schema.json, without importing and running the JSON-schema validators (3 of the 23 ms a
cached load took); tests/engine/test_rule_cache.py checks that they agree with the schemas.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from ..findings import ACTIONS, NONE_ACTION
from .rule_cache import load, store


class _Raw(dict):  # type: ignore[type-arg]
    """A cached rule mapping with the line it was defined at, as compile_rule reads it."""

    line: int = 0


class Entry(NamedTuple):
    """What a rule set is made from, as the cache holds it: the parsed tables; every rule's
    mapping, the file it came from and the line it was defined at (a mapping read back carries
    that line as compile_rule reads it); the rule files."""

    tables: dict[str, Any]
    rules: list[tuple[dict[str, Any], str, int]]
    sources: list[str]


def store_rules(cache_key: str | None, entry: Entry) -> None:
    """Cache what a rule set was made from (plain data; the loader compiles it again on a hit)."""
    if cache_key is None:
        return
    data = {
        "tables": entry.tables,
        "rules": [{"raw": raw, "source": source, "line": line} for raw, source, line in entry.rules],
        "sources": list(entry.sources),
    }
    store(cache_key, data)


def load_rules(cache_key: str | None) -> Entry | None:
    """The rules and tables cached under ``cache_key``, each checked as its schema allows (see
    _decode); None on any problem. The loader compiles (and so checks) every rule again."""
    data = load(cache_key)
    if data is None:
        return None
    try:
        return _decode(data)
    except Exception:  # a wrong type deep inside: load the files instead
        return None


def _is_str_list(value: Any) -> bool:
    return type(value) is list and all(type(item) is str for item in value)


def _member(value: Any, allowed: frozenset[str]) -> bool:
    return type(value) is str and value in allowed


# What rules.schema.json allows a rule to hold, checked by _plain_rule (tests/engine/
# test_rule_cache.py checks that these agree with the schema and refuse what it refuses).
_RULE_REQUIRED = frozenset({"id", "title", "area", "severity", "fail_if", "message", "fix", "why", "refs"})
_RULE_TEXTS = frozenset({"applies", "fail_if", "message", "pass_message", "unknown_message", "fix", "why", "docs"})
_RULE_FIELDS = _RULE_REQUIRED | _RULE_TEXTS | {"subject", "tags", "let", "superseded_by", "action"}
_SUPERSEDED_MAX = 16
_LET_NAME = re.compile(r"[a-z][a-z0-9_]*")
_LET_NAME_MAX = 40
_LET_MAX = 32
_RULE_ID = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_RULE_ID_MAX = 64
_TITLE_MIN, _TITLE_MAX = 3, 120
_AREAS = frozenset({"driver", "torch", "kernel", "rocm", "numa", "pcie", "thermal", "health", "env", "gate", "rdma"})
_SEVERITIES = frozenset({"error", "warning", "info"})
_ACTIONS = frozenset(ACTIONS)
_SUBJECTS = frozenset({"host", "gpu", "numa_node", "nic", "pci_port", "rdma_port"})
_TAG = re.compile(r"[a-z0-9-]+")
# What table.schema.json allows a table to hold (the loader adds "path"), checked by _plain_table.
_TABLE_REQUIRED = frozenset({"name", "description", "source", "retrieved", "rows"})
_TABLE_FIELDS = _TABLE_REQUIRED | {"notes"}
_TABLE_NAME = re.compile(r"[a-z0-9_]+")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")  # the schema's \d also takes other scripts' digits


def _plain_rule(raw: Any) -> bool:
    """Is ``raw`` a rule as rules.schema.json allows one (no other field, every field of its type,
    pattern, length and values)? What compile_rule then makes of it is checked there."""
    if type(raw) is not dict:
        return False
    fields = raw.keys()
    if not fields >= _RULE_REQUIRED or not fields <= _RULE_FIELDS:
        return False
    if not all(type(raw[name]) is str for name in _RULE_TEXTS & fields):
        return False
    rule_id, title, tags, refs = raw["id"], raw["title"], raw.get("tags", []), raw["refs"]
    return (
        type(rule_id) is str
        and len(rule_id) <= _RULE_ID_MAX
        and _RULE_ID.fullmatch(rule_id) is not None
        and type(title) is str
        and _TITLE_MIN <= len(title) <= _TITLE_MAX
        and _member(raw["area"], _AREAS)
        and _member(raw["severity"], _SEVERITIES)
        and _member(raw.get("subject", "host"), _SUBJECTS)
        and _member(raw.get("action", NONE_ACTION), _ACTIONS)
        and _is_str_list(tags)
        and len(set(tags)) == len(tags)
        and all(_TAG.fullmatch(tag) for tag in tags)
        and _is_str_list(refs)
        and len(refs) >= 1
        and _plain_let(raw.get("let", {}))
        and _plain_superseded_by(raw.get("superseded_by", []))
    )


def _plain_superseded_by(ids: Any) -> bool:
    """A rule's superseded_by: as the schema allows it: at most _SUPERSEDED_MAX distinct rule ids."""
    return (
        _is_str_list(ids)
        and len(ids) <= _SUPERSEDED_MAX
        and len(set(ids)) == len(ids)
        and all(len(i) <= _RULE_ID_MAX and _RULE_ID.fullmatch(i) is not None for i in ids)
    )


def _plain_let(let: Any) -> bool:
    """A rule's let: as the schema allows it: at most _LET_MAX names of the pattern, each an expression's text."""
    return (
        type(let) is dict
        and len(let) <= _LET_MAX
        and all(
            type(name) is str
            and len(name) <= _LET_NAME_MAX
            and _LET_NAME.fullmatch(name) is not None
            and type(source) is str
            for name, source in let.items()
        )
    )


def _plain_table(name: str, table: Any) -> bool:
    """Is ``table`` a data table named ``name`` as table.schema.json allows one, with its path?"""
    if type(table) is not dict or type(table.get("path")) is not str:
        return False
    fields = table.keys() - {"path"}
    if not fields >= _TABLE_REQUIRED or not fields <= _TABLE_FIELDS:
        return False
    source, rows, retrieved = table["source"], table["rows"], table["retrieved"]
    return (
        table["name"] == name
        and type(name) is str
        and _TABLE_NAME.fullmatch(name) is not None
        and type(table["description"]) is str
        and type(table.get("notes", "")) is str
        and type(retrieved) is str
        and _DATE.fullmatch(retrieved) is not None
        and (type(source) is str or (_is_str_list(source) and len(source) >= 1))
        and type(rows) is dict
        and len(rows) >= 1
    )


def _decode(data: Any) -> Entry | None:
    """The rules and tables an entry holds, or None. The rules and tables were schema-checked when
    the files were loaded and the entry is private to this user (see the module docstring), so they
    are checked here by hand (_plain_rule, _plain_table), as strictly and at a fraction of the
    cost; the loader compiles, and so checks, every expression and template again."""
    if type(data) is not dict or data.keys() != {"tables", "rules", "sources"}:
        return None
    tables, entries, sources = data["tables"], data["rules"], data["sources"]
    if type(tables) is not dict or type(entries) is not list or not _is_str_list(sources):
        return None
    if not all(_plain_table(name, table) for name, table in tables.items()):
        return None
    known_sources = set(sources)
    rules: list[tuple[dict[str, Any], str, int]] = []
    for entry in entries:
        if type(entry) is not dict or entry.keys() != {"raw", "source", "line"}:
            return None
        source, line = entry["source"], entry["line"]
        if type(source) is not str or source not in known_sources or type(line) is not int or line < 0:
            return None
        if not _plain_rule(entry["raw"]):
            return None
        raw = _Raw(entry["raw"])
        raw.line = line
        rules.append((raw, source, line))
    return Entry(tables=tables, rules=rules, sources=list(sources))
