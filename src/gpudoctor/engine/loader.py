"""Loading rule files and data tables: YAML → schema check → compiled rules.

Rules come from the built-in ``rules/`` folder shipped in the wheel, from
``--rules DIR`` (repeatable) and from packages that register a directory
under the ``gpudoctor.rules`` entry-point group; all go through the same
path here. Any problem (YAML syntax, duplicate key, unknown field, wrong
type, bad expression, unknown fact, duplicate id, unknown table) raises
:class:`RuleLoadError` naming the file and line.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..schemas import validate
from ..tables import builtin_rules_dir, load_tables
from . import collector
from .rule import COMPILED_FIELDS, Memo, Rule, RuleLoadError, RuleSet, _Parts, _rule, compile_rule

__all__ = [
    "COMPILED_FIELDS", "Rule", "RuleLoadError", "RuleSet", "RulesUnusable",
    "compile_rule", "load_asked_rules", "load_rules",
]

ENTRY_POINT_GROUP = "gpudoctor.rules"


def read_yaml(path: Path, what: str = "rule file") -> Any:
    """A rule file, data table or policy: read and parsed as every untrusted input is
    (gpudoctor.inputs: a bounded regular file, safe YAML, aliases and numbers bounded)."""
    from ..inputs import InputError, load_yaml_file

    try:
        return load_yaml_file(path, what)
    except InputError as exc:
        raise RuleLoadError(exc.path, exc.line, exc.message) from None


def entry_point_dirs() -> list[tuple[str, Path]]:
    """Rule directories registered by installed packages (group gpudoctor.rules).

    An entry point names a module (its directory holds the rule files) or a
    callable returning a directory path.
    """
    if os.environ.get("GPUDOCTOR_NO_PLUGINS") or not _any_distribution_declares_rule_packs():
        return []
    from importlib.metadata import entry_points

    try:
        eps = entry_points(group=ENTRY_POINT_GROUP)  # type: ignore[call-arg]
    except TypeError:  # Python 3.9: entry_points() returns a dict
        eps = entry_points().get(ENTRY_POINT_GROUP, [])  # type: ignore[attr-defined, arg-type]
    out: list[tuple[str, Path]] = []
    for ep in eps:
        try:
            target = ep.load()
        except Exception as exc:
            raise RuleLoadError(f"entry point {ep.name}", None, f"cannot load rule pack: {exc}") from None
        if callable(target):
            target = target()
        if hasattr(target, "__file__") and target.__file__:
            out.append((ep.name, Path(target.__file__).parent))
        else:
            out.append((ep.name, Path(str(target))))
    return out


def _any_distribution_declares_rule_packs() -> bool:
    """Cheap pre-check: does any installed distribution's entry_points.txt name our group?

    importlib.metadata costs tens of milliseconds to import and scan on a machine with
    hundreds of packages; most machines have no rule packs, so look for the group
    header in the metadata files first and only then ask importlib.metadata.
    """
    import sys

    header = f"[{ENTRY_POINT_GROUP}]"
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith((".dist-info", ".egg-info")):
                try:
                    with open(os.path.join(entry or ".", name, "entry_points.txt"), encoding="utf-8") as fh:
                        if header in fh.read():
                            return True
                except OSError:
                    continue
    return False


def _rule_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise RuleLoadError(str(directory), None, "not a directory of rule files")
    return sorted(p for p in directory.glob("*.y*ml") if p.suffix in (".yaml", ".yml"))


def _tables(directory: Path) -> dict[str, Any]:
    """The data tables in ``directory`` (gpudoctor.tables), a problem reported as a rule file's is."""
    from ..inputs import InputError

    try:
        return load_tables(directory)
    except InputError as exc:
        raise RuleLoadError(exc.path, exc.line, exc.message) from None


def _item_line(data: Any, problem: str) -> int | None:
    """Best line for a schema problem such as 'data[3].fail_if: ...'."""
    import re

    m = re.match(r"(?:top level|data)?\[(\d+)\]", problem)
    if m and isinstance(data, list):
        idx = int(m.group(1))
        if 0 <= idx < len(data):
            line = getattr(data[idx], "line", None)
            item_lines = getattr(data, "item_lines", ())
            if line is None and idx < len(item_lines):
                line = item_lines[idx]
            return line
    return None


def load_rule_file(path: Path, tables: dict[str, Any], memo: Memo | None = None) -> list[Rule]:
    return [compile_rule(raw, str(path), tables, memo) for raw in _rule_mappings(path)]


def _rule_mappings(path: Path) -> list[Any]:
    """A rule file's rules as it holds them, checked against rules.schema.json."""
    data = read_yaml(path)
    if data is None:
        return []
    problem = validate("rules", data)
    if problem:
        raise RuleLoadError(str(path), _item_line(data, problem), problem)
    return list(data)


GATE_RULES = "gate"  # the folder of built-in rules that only the gate loads (its checks, ids gate-...)


@collector.paused()  # every compiled rule lives on: collections would only walk them (collector.py)
def load_rules(
    extra_dirs: Iterable[str | os.PathLike[str]] = (),
    include_builtin: bool = True,
    include_plugins: bool = True,
    gate: bool = False,
) -> RuleSet:
    """Load built-in, plugin and --rules rule files into one validated RuleSet.

    ``gate``: add the gate's own rules (rules/gate/, area gate), which judge what only `gpudoctor
    gate` adds to the facts (its policy, the device test, the distributed all-reduce); `check`
    and the other commands leave them out. They come with the gate even without the built-in rules."""
    dirs: list[Path] = []
    if include_builtin:
        dirs.append(builtin_rules_dir())
    if gate:
        dirs.append(builtin_rules_dir() / GATE_RULES)
    if include_plugins:
        dirs.extend(d for _, d in entry_point_dirs())
    dirs.extend(Path(d) for d in extra_dirs)
    from . import cached_rules, rule_cache

    files = [p for d in dirs for p in (sorted((d / "data").glob("*.yaml")) if (d / "data").is_dir() else [])]
    files += [p for d in dirs if d.is_dir() for p in _rule_files(d)]
    cache_key = rule_cache.key(dirs, files)  # a hash of the files' bytes; None: no caching
    cached = _compiled(cached_rules.load_rules(cache_key), cache_key)
    if cached is not None:
        return cached
    ruleset = _load_uncached(dirs)
    loaded = {*ruleset.sources, *(table["path"] for table in ruleset.tables.values())}
    if cache_key is not None and loaded == {str(p) for p in files} and rule_cache.key(dirs, files) == cache_key:
        # only if no file changed, came or went meanwhile
        rules = [(rule.raw, rule.source, rule.line) for rule in ruleset.rules]
        cached_rules.store_rules(cache_key, cached_rules.Entry(ruleset.tables, rules, ruleset.sources))
    return ruleset


class RulesUnusable(Exception):
    """The rules a command was asked for cannot be loaded: a --rules folder that is not there, or
    a bad rule file. The message is the one line the user sees."""


def load_asked_rules(rule_dirs: Sequence[str], builtin: bool = True, gate: bool = False) -> RuleSet:
    """load_rules for what a command line or the gate API names (--rules DIR, the built-in rules
    or not, the gate's own); every problem is a RulesUnusable saying what to fix."""
    for d in rule_dirs:
        if not Path(d).is_dir():
            raise RulesUnusable(f"--rules {d}: no such directory")
    try:
        return load_rules(rule_dirs, include_builtin=builtin, gate=gate)
    except RuleLoadError as exc:
        raise RulesUnusable(f"bad rule file: {exc}") from None


def _compiled(entry: Any, cache_key: str | None = None) -> RuleSet | None:
    """The rule set a cache entry (cached_rules.Entry) holds, each rule's expressions and
    templates compiled, and so checked, where first read (see _Parts); None when its rules are
    not a rule set (one id twice)."""
    if entry is None:
        return None
    rules: list[Rule] = []
    seen: set[str] = set()
    memo: Memo = {}
    try:
        for raw, source, _line in entry.rules:
            if raw["id"] in seen:
                return None
            seen.add(raw["id"])
            fallback = functools.partial(_from_file, raw["id"], source, entry.tables, cache_key)
            rules.append(_rule(raw, source, _Parts(raw, source, entry.tables, memo, fallback)))
    except Exception:  # noqa: BLE001 - a wrong type deep inside: load the files instead
        return None
    return RuleSet(rules=rules, tables=entry.tables, sources=list(entry.sources))


def _from_file(rule_id: str, source: str, tables: dict[str, Any], cache_key: str | None) -> _Parts:
    """A cached rule's fields as its file defines them (read, checked and compiled afresh): what a
    cached rule uses once the checks refused one of its cached fields. That entry is then removed,
    so the next load reads the files and caches them again."""
    from . import rule_cache

    rule_cache.forget(cache_key)
    for raw in _rule_mappings(Path(source)):
        if isinstance(raw, dict) and raw.get("id") == rule_id:
            return _Parts(raw, source, tables, None).compile_all()
    raise RuleLoadError(source, None, f"rule {rule_id} is no longer defined here")


def _load_uncached(dirs: list[Path]) -> RuleSet:
    tables: dict[str, Any] = {}
    for directory in dirs:
        for name, table in _tables(directory / "data").items():
            if name in tables:
                raise RuleLoadError(table["path"], None, f"data table {name!r} also defined in {tables[name]['path']}")
            tables[name] = table
    rules: list[Rule] = []
    seen: dict[str, Rule] = {}
    sources: list[str] = []
    memo: Memo = {}
    for directory in dirs:
        for path in _rule_files(directory):
            sources.append(str(path))
            for rule in load_rule_file(path, tables, memo):
                if rule.id in seen:
                    first = seen[rule.id]
                    raise RuleLoadError(
                        rule.source,
                        rule.line,
                        f"duplicate rule id {rule.id!r} (first defined at {first.source}:{first.line})",
                    )
                seen[rule.id] = rule
                rules.append(rule)
    return RuleSet(rules=rules, tables=tables, sources=sources)


def validate_paths(paths: Iterable[str]) -> tuple[int, list[str]]:
    """Validate rule files or directories (for `gpudoctor rules validate`). Returns (rule count, errors)."""
    errors: list[str] = []
    count = 0
    builtin_tables = _tables(builtin_rules_dir() / "data")
    for raw_path in paths:
        path = Path(raw_path)
        files = _rule_files(path) if path.is_dir() else [path]
        tables = dict(builtin_tables)
        if path.is_dir():
            try:
                tables.update(_tables(path / "data"))
            except RuleLoadError as exc:
                errors.append(str(exc))
                continue
        ids: dict[str, str] = {}
        for file in files:
            if not file.exists():
                errors.append(f"{file}: no such file")
                continue
            try:
                for rule in load_rule_file(file, tables):
                    if rule.id in ids:
                        raise RuleLoadError(
                            rule.source, rule.line, f"duplicate rule id {rule.id!r} (also in {ids[rule.id]})"
                        )
                    ids[rule.id] = f"{rule.source}:{rule.line}"
                    count += 1
            except RuleLoadError as exc:
                errors.append(str(exc))
    return count, errors

