"""A rule and its compiling: the checked expressions and templates of one rule, each compiled from
the rule's mapping (a rule file's, or the rule cache's) with the checks of engine.expressions and
engine.templates, at load for a rule file's rule, where first read for a cached one (_Parts).
engine.loader reads the files and the cache and makes rule sets of these."""

from __future__ import annotations

import ast
import functools
import keyword
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Collection, Generic, Mapping, Optional, Tuple, TypeVar

from ..findings import NONE_ACTION, Severity
from . import factpaths
from .evaluator import SUBJECT_NAMES, Expression
from .expressions import MAX_EXPRESSION_LENGTH, ExpressionError, compile_expression
from .helpers.registry import FUNCTIONS
from .subjects import SUBJECT_VARIABLE
from .templates import Template, compile_template


class RuleLoadError(Exception):
    def __init__(self, path: str, line: int | None, message: str) -> None:
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {message}")
        self.path = path
        self.line = line
        self.message = message


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
        parts = rule.parts
        value: _T = parts.get(self.name)
        if parts.fallback is None:  # final: no refused field can make the file's replace it
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
    return _rule(raw, path, _Parts(raw, path, tables, memo).compile_all())


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


def _refuse(exc: RuleLoadError) -> _Parts:
    raise exc


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
    file's (a rule keeps no field of its own while that may happen: _Compiled; a let: name already
    bound for the subject being judged stays bound for that subject, checked like the rest).

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
            fallback = self.fallback
            if fallback is None:
                raise
            try:
                other = fallback()
            except RuleLoadError as exc:
                self.fallback = functools.partial(_refuse, exc)  # said again, the file not read again
                raise
            self._adopt(other)
            return self.get(name)
        done[name] = value
        return value

    def compile_all(self) -> _Parts:
        """Every field compiled now (a rule file's rule: each problem found at load)."""
        for name in COMPILED_FIELDS:
            self.get(name)
        return self

    def _adopt(self, other: _Parts) -> None:
        """Take every field from ``other`` (the rule compiled from its file)."""
        other.compile_all()
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
            self._lets_for(source)  # the let: names it reads, bound by the run (runner.bind)
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
            self._lets_for(source)  # as for an expression
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
