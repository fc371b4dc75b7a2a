"""Loading rule files and data tables: YAML → schema check → compiled rules.

Rules come from the built-in ``rules/`` folder shipped in the wheel, from
``--rules DIR`` (repeatable) and from packages that register a directory
under the ``gpudoctor.rules`` entry-point group; all go through the same
path here. Any problem (YAML syntax, duplicate key, unknown field, wrong
type, bad expression, unknown fact, duplicate id, unknown table) raises
:class:`RuleLoadError` naming the file and line.
"""

from __future__ import annotations

import ast
import functools
import keyword
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Collection, Generic, Iterable, Mapping, Optional, Sequence, Tuple, TypeVar

from ..findings import NONE_ACTION, Severity
from ..schemas import validate
from ..tables import builtin_rules_dir, load_tables
from . import collector, factpaths
from .evaluator import SUBJECT_NAMES, Expression
from .expressions import MAX_EXPRESSION_LENGTH, ExpressionError, compile_expression
from .helpers.registry import FUNCTIONS
from .subjects import SUBJECT_VARIABLE
from .templates import Template, compile_template

ENTRY_POINT_GROUP = "gpudoctor.rules"


class RuleLoadError(Exception):
    def __init__(self, path: str, line: int | None, message: str) -> None:
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {message}")
        self.path = path
        self.line = line
        self.message = message


def read_yaml(path: Path, what: str = "rule file") -> Any:
    """A rule file, data table or policy: read and parsed as every untrusted input is
    (gpudoctor.inputs: a bounded regular file, safe YAML, aliases and numbers bounded)."""
    from ..inputs import InputError, load_yaml_file

    try:
        return load_yaml_file(path, what)
    except InputError as exc:
        raise RuleLoadError(exc.path, exc.line, exc.message) from None


_T = TypeVar("_T")


class _Compiled(Generic[_T]):
    """A rule's expression or template field (``rule.fail_if``, ``rule.message``, ``rule.let``):
    compiled by the rule's _Parts where first read, then an attribute of the rule like any other
    (a non-data descriptor: the value it stores in the instance is found before it)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, rule: Any, owner: type | None = None) -> _T:
        if rule is None:
            return self  # type: ignore[return-value]
        value: _T = rule.parts.get(self.name)
        rule.__dict__[self.name] = value  # a frozen dataclass refuses setattr, not its own __dict__
        return value


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    area: str
    severity: Severity
    subject: str
    why: str
    refs: tuple[str, ...]
    tags: tuple[str, ...] = ()
    docs: str = ""
    # rules whose failure on the same subject says this rule's more precisely (runner._supersede)
    superseded_by: tuple[str, ...] = ()
    # what failed findings recommend (findings.ACTIONS); a rule pack's rule may leave it out
    action: str = NONE_ACTION
    source: str = ""
    line: int = 0
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # compiles the fields below (see _Parts): at load for a rule file's rule, where first read
    # for a rule from the rule cache
    parts: _Parts = field(default=None, compare=False, repr=False)  # type: ignore[assignment]

    # The compiled fields (COMPILED_FIELDS), each a checked Expression or Template; not
    # annotated, so not dataclass fields:
    fail_if = _Compiled[Expression]()
    applies = _Compiled[Optional[Expression]]()
    message = _Compiled[Template]()
    fix = _Compiled[Template]()
    pass_message = _Compiled[Optional[Template]]()
    unknown_message = _Compiled[Optional[Template]]()
    # let: names in the order they are defined, each read by the expressions and templates
    # (and the names below it) as if written out where it is read
    let = _Compiled[Tuple[Tuple[str, Expression], ...]]()

    @functools.cached_property
    def names_used(self) -> frozenset[str]:
        """Every name the rule's expressions and templates refer to (sections, subject, helpers)."""
        trees = [e.tree for e in (self.applies, self.fail_if) if e is not None]
        trees += [expr.tree for _, expr in self.let]
        for template in self.templates:
            if template is not None:
                trees += [expr.tree for _, expr, _ in template.parts if expr is not None]
        return frozenset(node.id for tree in trees for node in ast.walk(tree) if isinstance(node, ast.Name))

    @property
    def templates(self) -> tuple[Template, ...]:
        """The rule's templates that are set: message, fix, pass and unknown messages."""
        return tuple(t for t in (self.message, self.fix, self.pass_message, self.unknown_message) if t is not None)

    @property
    def facts_used(self) -> list[str]:
        used = list(self.fail_if.paths)
        if self.applies:
            used = list(self.applies.paths) + used
        return list(dict.fromkeys(used))

    @property
    def let_names(self) -> tuple[str, ...]:
        """The rule's let: names, in order, without compiling them."""
        return self.parts.let_names


# The fields a rule compiles, in the order a rule file's rule is checked (its let: names first).
COMPILED_FIELDS = ("let", "fail_if", "applies", "message", "pass_message", "unknown_message", "fix")
_TEMPLATE_FIELDS = frozenset({"message", "pass_message", "unknown_message", "fix"})

@dataclass
class RuleSet:
    rules: list[Rule]
    tables: dict[str, Any]
    sources: list[str]

    def by_id(self, rule_id: str) -> Rule | None:
        for rule in self.rules:
            if rule.id == rule_id:
                return rule
        return None


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


@functools.cache
def _roots(subject: str) -> Mapping[str, Any]:
    """The names a rule of ``subject`` may use, with their schema nodes: made once per subject
    kind (read-only: every rule compiled in the process shares it)."""
    roots: dict[str, Any] = dict(factpaths.section_roots())
    roots["gpus"] = {"type": "array"}
    variable = SUBJECT_VARIABLE[subject]
    if variable:
        roots[variable] = factpaths.subject_schema(subject)
    return MappingProxyType(roots)


# Expressions and templates compiled so far in one load, by what decides what compiling gives:
# (kind, subject, text, the rule's let: names in scope with their texts). See _memoised.
Memo = dict[tuple[Any, ...], Any]


def _memoised(memo: Memo | None, key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
    """``make()``, or what it gave for the same key earlier in this load.

    Rule sets repeat themselves (the same condition in many rules, the same placeholder in many
    messages): an expression's check and parse depend only on its text, the names its subject
    kind may read (fixed per subject: _roots) and the let: names in scope (named here with their
    texts, which decide their compiled forms in turn), so a text seen before with the same
    subject and let: names is compiled, and checked, exactly as the first time; it is not done
    again, and the rules share the one compiled expression (immutable; what a run remembers of
    its sub-expressions depends on the facts only: evaluator.RunCache). Only what compiled is
    remembered: a refused text is compiled again, so its error names each rule. Each rule's
    tables are still checked per rule (_check_tables)."""
    if memo is None or type(key[2]) is not str:
        return make()
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = make()
    return hit


def _memo_key(
    kind: str, subject: str, source: Any, let_names: Collection[str], scope: tuple[Any, ...]
) -> tuple[Any, ...]:
    """The memo key of compiling ``source`` (see _memoised), shared as widely as is exact.

    An expression reads a let: name or a subject variable only by spelling it out, and an ASCII
    text is parsed to the very names it spells (only non-ASCII names are normalised): an ASCII
    text in which no let: name occurs compiles the same whatever the let: names in scope, and
    one in which no subject variable occurs the same for every subject kind (the other names a
    rule may read, the facts sections and gpus, are the same for all). Such texts (most
    placeholders: {gpu_count}, {nvml.driver_version}) are then compiled once per load."""
    if type(source) is str and source.isascii():
        if scope and not _mentions(source, let_names):
            scope = ()
        if not _mentions(source, SUBJECT_NAMES):
            subject = "*"
    return (kind, subject, source, scope)


def _mentions(source: str, names: Collection[str]) -> bool:
    return any(name in source for name in names)


def compile_rule(raw: Any, path: str, tables: dict[str, Any], memo: Memo | None = None) -> Rule:
    """A rule file's rule, every expression and template checked now (a problem is a
    RuleLoadError naming the file and line); ``memo``: what this load has compiled so far (see
    _memoised), None to compile everything afresh."""
    parts = _Parts(raw, path, tables, memo)
    for name in COMPILED_FIELDS:
        parts.get(name)
    return _rule(raw, path, parts)


def _rule(raw: Any, path: str, parts: _Parts) -> Rule:
    return Rule(
        id=raw["id"],
        title=raw["title"],
        area=raw["area"],
        severity=Severity(raw["severity"]),
        subject=raw.get("subject", "host"),
        why=raw["why"].strip(),
        refs=tuple(raw["refs"]),
        tags=tuple(raw.get("tags", ())),
        docs=raw.get("docs", ""),
        superseded_by=tuple(raw.get("superseded_by", ())),
        action=raw.get("action", NONE_ACTION),
        source=path,
        line=getattr(raw, "line", 0),
        raw=dict(raw),
        parts=parts,
    )


class _Parts:
    """A rule's expressions and templates (COMPILED_FIELDS), compiled from its mapping with the
    checks of compile_expression and compile_template (syntax and node types, fact paths, helper
    calls only, limits, tables): each field once, when first asked for (get).

    A rule file's rule is asked for every field at load (compile_rule), so every problem is found
    there. A rule from the rule cache (an entry made from files that loaded, keyed on their bytes;
    engine.rule_cache) is compiled, and so checked, field by field where the run first reads it:
    a rule that does not apply compiles its `applies` only, a rule that passes neither its message
    nor its fix. Nothing is evaluated that was not checked first. A field of a cache entry that
    the checks refuse (an entry someone edited) is never used: ``fallback`` then gives the rule as
    its file defines it (read and checked afresh), and from then on that rule's fields are the
    file's.

    Compiled where first read, a field's text in which no let: name occurs (an ASCII text: see
    _memo_key) is compiled without the let: names, which are compiled only for a text that reads
    them (and for ``let``): what that gives is what compiling it with them gives (the let: names
    only change what an error says, and a cached text compiled once without error)."""

    __slots__ = ("raw", "path", "tables", "memo", "subject", "roots", "let_names", "scope", "lets", "done", "fallback")

    def __init__(
        self,
        raw: Any,
        path: str,
        tables: dict[str, Any],
        memo: Memo | None,
        fallback: Callable[[], _Parts] | None = None,
    ) -> None:
        self.raw = raw
        self.path = path
        self.tables = tables
        self.memo = memo
        self.subject: str = raw.get("subject", "host")
        self.roots = _roots(self.subject)
        declared = raw.get("let") or {}
        self.let_names: tuple[str, ...] = tuple(declared)
        # the let: names in scope with their texts, as the memo keys name them (see _memoised)
        self.scope = tuple((name, source.strip()) for name, source in declared.items()) if declared else ()
        self.lets: dict[str, Expression] | None = None  # compiled by _lets
        self.done: dict[str, Any] = {}
        self.fallback = fallback

    def get(self, name: str) -> Any:
        """The compiled field (None for an optional field the rule does not set)."""
        done = self.done
        if name in done:
            return done[name]
        try:
            value = self._compile(name)
        except RuleLoadError:
            if self.fallback is None:
                raise
            self._adopt(self.fallback())
            return self.get(name)
        done[name] = value
        return value

    def _adopt(self, other: _Parts) -> None:
        """Take every field from ``other`` (the rule compiled from its file), all compiled."""
        for name in COMPILED_FIELDS:
            other.get(name)
        self.lets, self.done, self.fallback = other.lets, other.done, None
        self.raw, self.tables, self.memo = other.raw, other.tables, None

    def _compile(self, name: str) -> Any:
        if name == "let":
            return tuple(self._lets().items())
        source = self.raw.get(name)
        if source is None:
            if name in ("fail_if", "message", "fix"):  # the schema requires them
                raise RuleLoadError(self.path, self.line, f"rule {self.raw['id']}: no {name}")
            return None
        if name in _TEMPLATE_FIELDS:
            return self._template(name, source)
        return self._expression(name, source)

    @property
    def line(self) -> int:
        return getattr(self.raw, "line", 0)

    def _lets_for(self, source: Any) -> dict[str, Expression]:
        """The let: names a text may read: where first read, none for an ASCII text that names none
        of them; at load, all (an error then suggests a let: name for a misspelt one)."""
        if not self.let_names:
            return {}
        lazy = self.fallback is not None
        if lazy and type(source) is str and source.isascii() and not _mentions(source, self.let_names):
            return {}
        return self._lets()

    def _field(self, source: str, lets: Mapping[str, Expression]) -> Expression:
        key = _memo_key("e", self.subject, source, self.let_names, self.scope)
        compiled: Expression = _memoised(self.memo, key, lambda: compile_expression(source, self.roots, lets))
        return compiled

    def _seen(self, kind: str, source: Any) -> tuple[Any, Any]:
        """(key, what this load gave for it): a field of the same kind, subject, text and let:
        names (with their texts) as one compiled, and checked against the same tables, earlier in
        this load gives what that one gave; (None, None) without a memo."""
        if self.memo is None or type(source) is not str:
            return None, None
        key = (kind, self.subject, source, self.scope)
        return key, self.memo.get(key)

    def _expression(self, name: str, source: str) -> Expression:
        key, hit = self._seen("field e", source)
        if hit is not None:
            return hit  # type: ignore[no-any-return]
        try:
            compiled = self._field(source, self._lets_for(source))
        except ExpressionError as exc:
            raise RuleLoadError(self.path, self.line, f"rule {self.raw['id']}: {name}: {exc}") from None
        _check_tables(compiled, self.tables, self.path, self.line, self.raw["id"], name)
        if key is not None:
            self.memo[key] = compiled  # type: ignore[index]
        return compiled

    def _template(self, name: str, source: str) -> Template:
        key, hit = self._seen("field t", source)
        if hit is not None:
            return hit  # type: ignore[no-any-return]
        compiled = self._new_template(name, source)
        if key is not None:
            self.memo[key] = compiled  # type: ignore[index]
        return compiled

    def _new_template(self, name: str, source: str) -> Template:
        lets = self._lets_for(source)
        try:
            # a placeholder is an expression: one seen before (in a condition, or another
            # message) is not compiled again either (a third of compiling the built-in rules)
            memo_key = _memo_key("t", self.subject, source, self.let_names, self.scope)
            compiled: Template = _memoised(
                self.memo,
                memo_key,
                lambda: compile_template(source, self.roots, lets, lambda text: self._field(text, lets)),
            )
        except ExpressionError as exc:
            raise RuleLoadError(self.path, self.line, f"rule {self.raw['id']}: {name}: {exc}") from None
        for _, part, _spec in compiled.parts:
            if part is not None:
                _check_tables(part, self.tables, self.path, self.line, self.raw["id"], name)
        return compiled

    def _lets(self) -> dict[str, Expression]:
        if self.lets is None:
            key, hit = self._seen("lets", "")
            if hit is not None:
                self.lets = hit  # the same names and texts compiled in another rule (never changed)
            else:
                self.lets = _compile_lets(self.raw, self.roots, self.tables, self.path, self.line, self.memo)
                if key is not None:
                    self.memo[key] = self.lets  # type: ignore[index]
        return self.lets


def _compile_lets(
    raw: Any, roots: Mapping[str, Any], tables: dict[str, Any], path: str, line: int, memo: Memo | None = None
) -> dict[str, Expression]:
    """A rule's let: names, compiled in order: each may read the facts, the helpers and the names
    above it; none may take the name of a fact root, a subject variable or a helper."""
    rule_id = raw["id"]
    declared = list((raw.get("let") or {}).items())
    lets: dict[str, Expression] = {}
    for position, (name, source) in enumerate(declared):
        where = f"rule {rule_id}: let {name}"
        if name in roots or name in SUBJECT_NAMES:
            raise RuleLoadError(path, line, f"{where}: {name} is the name of facts; choose another name")
        if name in FUNCTIONS:
            raise RuleLoadError(path, line, f"{where}: {name} is a helper function; choose another name")
        if keyword.iskeyword(name):
            raise RuleLoadError(path, line, f"{where}: {name} is a Python keyword; choose another name")
        scope = tuple((known, let.source) for known, let in lets.items())
        key = _memo_key("e", raw.get("subject", "host"), source, lets, scope)
        try:
            compiled: Expression = _memoised(memo, key, functools.partial(compile_expression, source, roots, lets))
        except ExpressionError as exc:
            # A name not defined yet is unknown to compile_expression: say which order is wrong.
            read = _names_in(source)
            if name in read:
                raise RuleLoadError(path, line, f"{where}: reads itself") from None
            later = [other for other, _ in declared[position + 1 :] if other in read]
            if later:
                raise RuleLoadError(
                    path, line, f"{where}: reads {later[0]}, which is defined below it (a name reads only those above)"
                ) from None
            raise RuleLoadError(path, line, f"{where}: {exc}") from None
        _check_tables(compiled, tables, path, line, rule_id, f"let {name}")
        lets[name] = compiled
    return lets


def _names_in(source: Any) -> set[str]:
    """The bare names an expression's text reads; none when it does not parse or is too long
    (compile_expression then says why)."""
    if not isinstance(source, str) or len(source) > MAX_EXPRESSION_LENGTH:
        return set()
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return set()
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


_TABLE_HELPERS = ("lookup", "flag_names")


def _check_tables(expr: Expression, tables: dict[str, Any], path: str, line: int, rule_id: str, key: str) -> None:
    """lookup()/flag_names() must name a table that exists (checked at load, not at 2 a.m.)."""
    source = expr.source
    if source.isascii() and not any(name in source for name in _TABLE_HELPERS):
        # No call of them in the tree, whose every name is spelled out in the text it was parsed
        # from (only non-ASCII names are normalised): no walk (a fifth of compiling a rule set).
        return
    for node in ast.walk(expr.tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("lookup", "flag_names"):
            arg_index = 0 if node.func.id == "lookup" else 1
            if len(node.args) <= arg_index:
                raise RuleLoadError(path, line, f"rule {rule_id}: {key}: {node.func.id}() needs a table name")
            arg = node.args[arg_index]
            if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                raise RuleLoadError(path, line, f"rule {rule_id}: {key}: the table name must be a string constant")
            if arg.value not in tables:
                raise RuleLoadError(
                    path,
                    line,
                    f"rule {rule_id}: {key}: no data table {arg.value!r}; "
                    f"tables: {', '.join(sorted(tables)) or 'none'}",
                )


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
            parts = _Parts(raw, source, tables, None)
            for name in COMPILED_FIELDS:
                parts.get(name)
            return parts
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

