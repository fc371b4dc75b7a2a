"""Rule expressions: checked at load, evaluated safely over the facts.

Conditions and message placeholders are Python-syntax expressions parsed by
the standard library's ``ast`` and evaluated by the ``simpleeval`` library
(no eval/exec anywhere). On top of simpleeval, gpudoctor narrows the
language at load time:

- only a small set of node types (no lambdas, comprehensions, walrus,
  ``**``, f-strings, keyword arguments, slices);
- attribute access only along fact paths (``gpu.pcie_width``), each checked
  against the facts schema, so ``x.__class__`` or a typo in a fact name is
  refused when the rule file loads, naming the fact;
- calls only of the whitelisted helper functions below;
- limits on length, nesting depth and constant sizes.

At run time a fact path that resolves to an unavailable fact raises
:class:`FactUnavailable`; the runner turns that into an "unknown" result.
Every leaf read is recorded as evidence.

Within one run of the rules (a :class:`RunCache`), what does not depend on the subject is worked
out once: a sub-expression that does not name the subject variable (``gpu``, ``node``, ``nic``),
e.g. ``max(values_of(gpus, "nvlink_active"))`` in a GPU rule, is remembered with the facts it
read (replayed as evidence on each later use), and a helper call over the run's ``gpus`` list
with otherwise plain arguments is remembered by the list's identity and the arguments. So the
work per GPU subject does not grow with the number of GPUs. The run's deadline is checked every
few hundred nodes evaluated (:class:`DeadlineExceeded`).

Rendered templates are bounded while they render (``Template.render``: at most
findings.MAX_TEXT_CHARS characters, then a ``' … [cut: N more characters]'`` marker): each
interpolated value is written only as far as there is room and the rest is only counted, and a
format spec's width and precision are at most two digits, checked at load and again at render.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import re
import string
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from packaging.version import Version
from simpleeval import (
    DEFAULT_OPERATORS,
    EvalWithCompoundTypes,
    FeatureNotAvailable,
    InvalidExpression,
    IterableTooLong,
)

from ..facts import Unavailable
from ..findings import MAX_TEXT_CHARS, cut_marker
from . import factpaths
from .helpers import FUNCTIONS

MAX_EXPRESSION_LENGTH = 2000
MAX_DEPTH = 24
MAX_CONSTANT_LENGTH = 500
# What one evaluation may build. simpleeval caps the length of a string or list made by one
# `*` or `+` (100000) but not what nesting multiplies: [[1]*99999]*99999 is cheap to build
# and 10**10 items to compare, print or sort. So every value an operator, a list or tuple
# display or a helper call produces is measured with its nested items and string lengths
# (see value_cells), and integers stay small enough that printing one is cheap.
MAX_VALUE_CELLS = 100_000
MAX_INT_BITS = 256

ALLOWED_NODES: tuple[type, ...] = (
    ast.Expression,
    ast.BoolOp,
    ast.And,
    ast.Or,
    ast.UnaryOp,
    ast.Not,
    ast.USub,
    ast.UAdd,
    ast.BinOp,
    ast.Add,
    ast.Sub,
    ast.Mult,
    ast.Div,
    ast.FloorDiv,
    ast.Mod,
    ast.BitAnd,
    ast.BitOr,
    ast.Compare,
    ast.Eq,
    ast.NotEq,
    ast.Lt,
    ast.LtE,
    ast.Gt,
    ast.GtE,
    ast.In,
    ast.NotIn,
    ast.Is,
    ast.IsNot,
    ast.Call,
    ast.Name,
    ast.Load,
    ast.Attribute,
    ast.Constant,
    ast.List,
    ast.Tuple,
    ast.IfExp,
    ast.Subscript,
)

# Format specs allowed in message placeholders: alignment, a small width, precision, a type.
FORMAT_SPEC = re.compile(r"^[<>^]?\d{0,2}(\.\d{1,2})?[dfsx%]?$")
_SPEC_PARTS = re.compile(r"^([<>^]?)(\d{0,2})(?:\.(\d{1,2}))?([dfsx%]?)$")

# The names a rule's subject is bound to: a sub-expression naming none of them is the same for
# every subject of a run (see RunCache).
SUBJECT_NAMES = frozenset({"gpu", "node", "nic"})
# Nodes worth remembering; names, attributes and constants are cheaper to read again.
_MEMO_NODES = (ast.Call, ast.BinOp, ast.Compare, ast.BoolOp, ast.UnaryOp, ast.IfExp, ast.Subscript)
# How many nodes are evaluated between two looks at the clock.
_DEADLINE_TICKS = 256
# Nodes whose value is built by the evaluation, so measured (see _Evaluator.cells).
_BUILDING = frozenset({ast.BinOp, ast.UnaryOp, ast.List, ast.Tuple, ast.Call})


class ExpressionError(ValueError):
    """An expression refused at load: bad syntax, unknown fact, forbidden construct."""


class LimitExceeded(IterableTooLong):  # type: ignore[misc]
    """An evaluation that would build something too large; the runner reports the rule as broken."""


class DeadlineExceeded(Exception):
    """The run's deadline passed while a rule was evaluated: the runner reports it as unknown (timeout)."""


# Not remembered when a sub-expression raises them: they depend on the moment, not on the facts.
_NOT_REMEMBERED = (DeadlineExceeded, RecursionError, MemoryError)


_FLAT_KINDS = frozenset({bool, float, type(None)})
_PLAIN = frozenset({bool, int, float, str, bytes, type(None)})
_SEQUENCES = (str, bytes, list, tuple)
# Only values this large are remembered by an evaluation (see _Evaluator.cells).
_REMEMBER_FROM = 64


def _too_big(limit: int) -> LimitExceeded:
    return LimitExceeded(f"the expression builds a value larger than {limit} items")


def _check_int(value: int) -> None:
    if value.bit_length() > MAX_INT_BITS:
        raise LimitExceeded(f"the expression builds an integer larger than {MAX_INT_BITS} bits")


def value_cells(value: Any, limit: int = MAX_VALUE_CELLS, known: Mapping[int, tuple[Any, int]] | None = None) -> int:
    """Size of a value with every nested item counted (a shared item once per place it appears)
    and a string as its length; raises LimitExceeded past ``limit`` without measuring further.
    ``known`` maps id() to (value, size) of values already measured."""
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if known is not None:
            hit = known.get(id(item))
            if hit is not None and hit[0] is item:
                total += hit[1]
                if total > limit:
                    raise _too_big(limit)
                continue
        if isinstance(item, (str, bytes)):
            total += 1 + len(item)
        elif isinstance(item, int) and not isinstance(item, bool):
            _check_int(item)
            total += 1 + (item.bit_length() >> 6)  # printing a big number costs more
        elif isinstance(item, (list, tuple, set, frozenset)):
            total += 1 + len(item)
            if total > limit:
                raise _too_big(limit)
            kinds = set(map(type, item))  # at C speed: most values are flat lists of numbers
            if kinds <= _FLAT_KINDS:
                continue
            if kinds <= {int, bool}:
                bits = list(map(int.bit_length, item))
                if max(bits) > MAX_INT_BITS:
                    raise LimitExceeded(f"the expression builds an integer larger than {MAX_INT_BITS} bits")
                total += sum(bits) >> 6
                continue
            if kinds == {str}:
                total += sum(map(len, item))
            else:
                total -= len(item)  # each item is counted when it is taken from the stack
                stack.extend(item)
        elif isinstance(item, Mapping) and not isinstance(item, FactView):
            total += 1
            stack.extend(item.keys())
            stack.extend(item.values())
        else:  # a fact view, a version, a float: small
            total += 1
        if total > limit:
            raise _too_big(limit)
    return total


def _safe_mod(a: Any, b: Any) -> Any:
    if isinstance(a, (str, bytes)):
        # "%0999999999d" % 1 builds a gigabyte; messages use {placeholders} instead
        raise InvalidExpression("%-formatting of strings is not allowed in rule expressions")
    return a % b


def _no_check(evaluator: Any, item: Any) -> None:
    pass


# simpleeval's check of a value for modules and forbidden functions (1.0.5 and later; before,
# it had none). _Evaluator calls it for every value a node gives (see _Evaluator._eval).
_simpleeval_check: Callable[[Any, Any], None] = getattr(EvalWithCompoundTypes, "_check_disallowed_items", _no_check)

OPERATORS: dict[Any, Any] = dict(DEFAULT_OPERATORS)
OPERATORS[ast.Mod] = _safe_mod


class _Discard(list):  # type: ignore[type-arg]
    """A reads list that keeps nothing: reads through the run's gpus list are no rule's evidence."""

    def append(self, item: Any) -> None:
        pass

    def extend(self, items: Any) -> None:
        pass


class RunCache:
    """What the evaluations of one run of the rules share (see the module docstring).

    The runner makes one per run, registers the run's gpus list with :meth:`share` and sets
    :attr:`reads` to the evidence list of each rule and subject before evaluating it: the facts
    a remembered sub-expression read are added to it again on each use. It sets
    :attr:`remember` to whether the rule it evaluates has more than one subject: sub-expressions
    of a rule judged once (a host rule) are never asked for again, so they are not remembered.
    """

    def __init__(self, deadline: float | None = None) -> None:
        self.deadline = deadline  # a time.monotonic() value, or None
        self.reads: list[tuple[str, Any]] = []
        self.remember = True
        # Nodes evaluated until the next look at the clock (carried from one evaluation to the
        # next; without a deadline, never).
        self.ticks = _DEADLINE_TICKS if deadline is not None else _NEVER
        # id(node) -> (node, raised?, value or exception, reads made while evaluating it)
        self.nodes: dict[int, tuple[ast.AST, bool, Any, tuple[tuple[str, Any], ...]]] = {}
        # (function, arguments) -> (raised?, value or exception)
        self.calls: dict[tuple[Any, ...], tuple[bool, Any]] = {}
        # id -> (value, size) of run-wide values already measured and checked
        self.known: dict[int, tuple[Any, int]] = {}
        self.shared: dict[int, Any] = {}  # id -> list whose identity keys remembered calls

    def share(self, value: list[Any]) -> list[Any]:
        self.shared[id(value)] = value
        self.known[id(value)] = (value, value_cells(value, 1 << 62))
        return value

    def discard(self) -> list[tuple[str, Any]]:
        """A reads list that records nothing."""
        return _Discard()

    def check_deadline(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise DeadlineExceeded("the run's deadline passed")


_NEVER = 1 << 62
_NOTHING: frozenset[int] = frozenset()


def free_nodes(tree: ast.AST) -> frozenset[int]:
    """ids of the nodes of ``tree`` worth remembering that name no subject variable (what
    compile_expression finds while it checks an expression)."""
    out: set[int] = set()

    def visit(node: ast.AST) -> bool:  # does it depend on the subject?
        dependent = isinstance(node, ast.Name) and node.id in SUBJECT_NAMES
        for child in ast.iter_child_nodes(node):
            dependent = visit(child) or dependent
        if not dependent and isinstance(node, _MEMO_NODES):
            out.add(id(node))
        return dependent

    visit(tree)
    return frozenset(out)


_HASHABLE = frozenset({bool, int, float, str, type(None)})


def _call_key(name: str, args: Sequence[Any], run: RunCache) -> tuple[Any, ...] | None:
    """Key of a helper call over a run-wide list with plain other arguments; None for other calls."""
    key: list[Any] = [name]
    shared = False
    for arg in args:
        kind = type(arg)
        if kind in _HASHABLE:
            key.append((kind, arg))
        elif id(arg) in run.shared and run.shared[id(arg)] is arg:
            key.append(("shared", id(arg)))
            shared = True
        else:
            return None
    return tuple(key) if shared else None


def _detached(value: Any, run: RunCache) -> bool:
    """Can the value be handed to another rule's evaluation (it holds no fact view of this one)?"""
    kind = type(value)
    if kind in _PLAIN or kind is Version:
        return True
    if kind is list or kind is tuple:
        hit = run.known.get(id(value))
        if hit is not None and hit[0] is value:
            return True
        return set(map(type, value)) <= _PLAIN
    return False


class FactUnavailable(Exception):
    def __init__(self, path: str, unavailable: Unavailable) -> None:
        super().__init__(f"{path}: {unavailable}")
        self.path = path
        self.unavailable = unavailable


class FactView:
    """Read-only view of a facts dict that records what it hands out."""

    __slots__ = ("_data", "_path", "_reads")

    # Maps whose absent keys are a known "not set" (None), not a missing fact.
    OPEN_MAPS = frozenset({"host.env"})

    def __init__(self, data: Mapping[str, Any], path: str, reads: list[tuple[str, Any]]) -> None:
        self._data = data
        self._path = path
        self._reads = reads

    def child(self, name: str) -> Any:
        path = f"{self._path}.{name}" if self._path else name
        if name not in self._data and self._path in self.OPEN_MAPS:
            self._reads.append((path, None))
            return None
        if name not in self._data:
            missing = Unavailable("not_found", "not in the facts (older snapshot or probe did not report it)")
            self._reads.append((path, missing))
            raise FactUnavailable(path, missing)
        return wrap(self._data[name], path, self._reads)

    def get(self, name: str) -> Any:
        """For helper functions: like attribute access in an expression."""
        return self.child(name)

    def __repr__(self) -> str:
        return f"<facts {self._path}>"


def wrap(value: Any, path: str, reads: list[tuple[str, Any]]) -> Any:
    if type(value) in _PLAIN:  # most facts: no slower abstract-class checks
        reads.append((path, value))
        return value
    if isinstance(value, Unavailable):
        reads.append((path, value))
        raise FactUnavailable(path, value)
    if isinstance(value, (dict, Mapping)):  # dict first: the common case, without the ABC machinery
        return FactView(value, path, reads)
    if isinstance(value, list) and value and isinstance(value[0], Mapping):
        return [FactView(v, f"{path}[{i}]", reads) for i, v in enumerate(value)]
    reads.append((path, value))
    return value


class _Evaluator(EvalWithCompoundTypes):  # type: ignore[misc]
    """simpleeval with attribute access limited to FactView objects, and every value it builds
    (by an operator, a list or tuple display, a helper call) bounded by MAX_VALUE_CELLS."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # id -> (value, size) of the large values built so far, so nothing is measured twice
        self._sizes: dict[int, tuple[Any, int]] = {}
        # Whether the node being evaluated builds its value (facts and constants are not
        # measured: they are bounded by the snapshot and the rule file they come from).
        self._builds = False
        self.busy = False  # an evaluation is running (see _evaluator_for)
        self._run: RunCache | None = None  # the run this evaluation belongs to, if any
        self._free: frozenset[int] = frozenset()  # nodes of the expression worth remembering
        self._ticks = _DEADLINE_TICKS

    def cells(self, value: Any) -> int:
        run = self._run
        if run is not None:
            hit = run.known.get(id(value))
            if hit is not None and hit[0] is value:
                if hit[1] > MAX_VALUE_CELLS:
                    raise _too_big(MAX_VALUE_CELLS)
                return int(hit[1])
        size = value_cells(value, MAX_VALUE_CELLS, self._sizes)
        if size >= _REMEMBER_FROM:
            self._sizes[id(value)] = (value, size)
        return size

    def _check_disallowed_items(self, item: Any) -> None:
        # simpleeval (>= 1.0.5) walks every result in full, shared items once per place they
        # appear: a YAML alias bomb in a data table is 10**9 items to it. Measuring first stops early.
        kind = type(item)
        if kind in _NOTHING_TO_CHECK:  # most results: a bool, a fact view (nothing to measure either)
            return
        if self._builds:
            if kind is int:
                _check_int(item)
                return
            self.cells(item)
        if kind in _PLAIN:
            return
        run = self._run
        if run is not None and (kind is list or kind is tuple):
            hit = run.known.get(id(item))
            if hit is not None and hit[0] is item:
                return  # checked when the run first made it (the gpus list, a remembered result)
        if isinstance(item, (list, tuple)) and len(item) >= _REMEMBER_FROM and set(map(type, item)) <= _PLAIN:
            return  # nothing in a flat list of plain values can be a module or a function
        _simpleeval_check(self, item)

    def _eval(self, node: ast.AST) -> Any:
        run = self._run
        if run is not None:
            self._ticks -= 1
            if self._ticks <= 0:
                self._ticks = _DEADLINE_TICKS
                run.check_deadline()
            if id(node) in self._free:
                return self._eval_remembered(node, run)
        # = self._eval_node(node), without the call: this runs for every node evaluated
        kind = type(node)
        outer = self._builds
        self._builds = kind in _BUILDING  # (children set and restore the flag before this node's check)
        try:
            handler = self.nodes.get(kind)
            if handler is None:
                raise FeatureNotAvailable(f"Sorry, {kind.__name__} is not available in this evaluator")
            value = handler(node)
            self._check_disallowed_items(value)  # measures what the node built (see cells)
        finally:
            self._builds = outer
        return value

    def _eval_remembered(self, node: ast.AST, run: RunCache) -> Any:
        """A node that names no subject variable: evaluated once per run, then replayed."""
        hit = run.nodes.get(id(node))
        if hit is not None and hit[0] is node:
            _, raised, value, reads = hit
            if reads:
                run.reads.extend(reads)
            if raised:
                raise value.with_traceback(None)
            return value
        start = len(run.reads)
        try:
            value = self._eval_node(node)
        except _NOT_REMEMBERED:
            raise
        except Exception as exc:
            run.nodes[id(node)] = (node, True, exc, tuple(run.reads[start:]))
            raise
        if _detached(value, run):
            run.nodes[id(node)] = (node, False, value, tuple(run.reads[start:]))
            if type(value) in (list, tuple) and id(value) not in run.known:
                run.known[id(value)] = (value, self.cells(value))
        return value

    def _eval_node(self, node: ast.AST) -> Any:
        kind = type(node)
        outer = self._builds
        self._builds = kind in _BUILDING
        try:
            handler = self.nodes.get(kind)
            if handler is None:
                raise FeatureNotAvailable(f"Sorry, {kind.__name__} is not available in this evaluator")
            value = handler(node)
            self._check_disallowed_items(value)
        finally:
            self._builds = outer
        return value

    def _eval_binop(self, node: ast.BinOp) -> Any:
        left = self._eval(node.left)
        right = self._eval(node.right)
        op = type(node.op)
        operator = self.operators.get(op)
        if operator is None:
            raise InvalidExpression(f"operator {op.__name__} is not allowed")
        size = None
        if op is ast.Mult and isinstance(left, _SEQUENCES) != isinstance(right, _SEQUENCES):
            # A repetition is sized from its parts before it is built.
            seq, count = (left, right) if isinstance(left, _SEQUENCES) else (right, left)
            if isinstance(count, int):
                size = 1 + (self.cells(seq) - 1) * max(count, 0)  # one container, its items n times
        elif op is ast.Add and isinstance(left, _SEQUENCES) and isinstance(right, _SEQUENCES):
            size = self.cells(left) + self.cells(right) - 1
        if size is not None and size > MAX_VALUE_CELLS:
            raise _too_big(MAX_VALUE_CELLS)
        result = operator(left, right)
        if size is not None:
            if size >= _REMEMBER_FROM:
                self._sizes[id(result)] = (result, size)
        elif isinstance(result, int) and not isinstance(result, bool):
            _check_int(result)
        elif isinstance(result, _SEQUENCES):
            self.cells(result)
        return result

    def _eval_call(self, node: ast.Call) -> Any:
        # available(fact): is the fact known? supported(fact): is it anything but "not supported
        # here" (so a feature a GPU lacks, e.g. ECC on a GeForce card, is skipped, not unknown)?
        # Both must see the fact unevaluated.
        if isinstance(node.func, ast.Name) and node.func.id in ("available", "supported"):
            try:
                self._eval(node.args[0])
            except FactUnavailable as exc:
                if node.func.id == "available":
                    return False
                return exc.unavailable.reason != "not_supported"
            return True
        run = self._run
        name = node.func.id if isinstance(node.func, ast.Name) else ""
        func = self.functions.get(name) if name else None
        if run is None or func is None or node.keywords:
            return super()._eval_call(node)
        args = [self._eval(arg) for arg in node.args]
        key = _call_key(name, args, run)
        if key is None:
            return func(*args)
        hit = run.calls.get(key)
        if hit is not None:
            raised, value = hit
            if raised:
                raise value.with_traceback(None)
            return value
        try:
            value = func(*args)
            if type(value) in (list, tuple):
                # measured and checked once, here (a value too large is an error each time after)
                size = self.cells(value)
                _simpleeval_check(self, value)
                run.known[id(value)] = (value, size)
        except _NOT_REMEMBERED:
            raise
        except Exception as exc:
            run.calls[key] = (True, exc)
            raise
        run.calls[key] = (False, value)
        return value

    def _eval_attribute(self, node: ast.Attribute) -> Any:
        base = self._eval(node.value)
        if isinstance(base, FactView):
            return base.child(node.attr)
        raise InvalidExpression(f"attribute .{node.attr} is only allowed on facts")


@dataclass(frozen=True)
class Expression:
    """A checked, parsed expression."""

    source: str
    tree: ast.AST
    paths: tuple[str, ...]
    # ids of the nodes of ``tree`` worth remembering in a run (see RunCache) that name no subject
    # variable; found while the expression is checked (None: found on first use).
    free: frozenset[int] | None = dataclasses.field(default=None, compare=False, repr=False)
    # The names it reads (facts sections, the subject variable, gpus; not the helpers it calls),
    # also found while it is checked (None: found on first use).
    names: frozenset[str] | None = dataclasses.field(default=None, compare=False, repr=False)

    def free_nodes(self) -> frozenset[int]:
        free = self.free
        if free is None:
            free = free_nodes(self.tree)
            object.__setattr__(self, "free", free)
        return free

    def names_read(self) -> frozenset[str]:
        names = self.names
        if names is None:
            called = {id(n.func) for n in ast.walk(self.tree) if isinstance(n, ast.Call)}
            names = frozenset(n.id for n in ast.walk(self.tree) if isinstance(n, ast.Name) and id(n) not in called)
            object.__setattr__(self, "names", names)
        return names

    def evaluate(
        self, names: Mapping[str, Any], functions: Mapping[str, Callable[..., Any]], run: RunCache | None = None
    ) -> Any:
        """The expression's value; ``run``: what this run of the rules shares (see RunCache)."""
        evaluator = _evaluator_for(functions)
        if evaluator is None:  # in use further up this thread's stack: a fresh one
            evaluator = _Evaluator(operators=OPERATORS, names={}, functions=dict(functions))
        evaluator.names = dict(names)
        evaluator._sizes = {}
        evaluator._builds = False
        evaluator._run = run
        if run is not None:
            evaluator._free = self.free_nodes() if run.remember else _NOTHING
            evaluator._ticks = run.ticks
        evaluator.busy = True
        try:
            return evaluator.eval(self.source, previously_parsed=self.tree)
        finally:
            evaluator.busy = False
            if run is not None:
                run.ticks = evaluator._ticks
                evaluator._run = None


# One evaluator per thread and function table, reused from one evaluation to the next: building
# one (simpleeval's node table, the function checks) cost more than evaluating most rules.
_LOCAL = threading.local()


def _evaluator_for(functions: Mapping[str, Callable[..., Any]]) -> _Evaluator | None:
    cached = getattr(_LOCAL, "evaluator", None)
    if cached is None or cached[0] is not functions:
        cached = (functions, _Evaluator(operators=OPERATORS, names={}, functions=dict(functions)))
        _LOCAL.evaluator = cached
    evaluator: _Evaluator = cached[1]
    return None if evaluator.busy else evaluator


def _dotted(node: ast.AST) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def compile_expression(source: str, roots: Mapping[str, Any]) -> Expression:
    """Parse and check an expression. ``roots`` maps each name to its schema node."""
    if not isinstance(source, str) or not source.strip():
        raise ExpressionError("empty expression")
    if len(source) > MAX_EXPRESSION_LENGTH:
        raise ExpressionError(f"expression longer than {MAX_EXPRESSION_LENGTH} characters")
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as exc:
        where = f" at column {exc.offset}" if exc.offset else ""
        raise ExpressionError(f"invalid syntax{where}: {exc.msg}") from None
    except (ValueError, MemoryError, RecursionError) as exc:  # Python < 3.12: NUL bytes are a ValueError
        raise ExpressionError(f"invalid expression: {exc}") from None
    paths: list[str] = []
    free: set[int] = set()  # see Expression.free
    names: set[str] = set()  # see Expression.names

    def visit(node: ast.AST, depth: int) -> bool:
        """Check the node; True when it names the subject variable (is not the same for every subject)."""
        if depth > MAX_DEPTH:
            raise ExpressionError(f"expression nested deeper than {MAX_DEPTH} levels")
        if not isinstance(node, ALLOWED_NODES):
            raise ExpressionError(f"{type(node).__name__} is not allowed in rule expressions")
        if isinstance(node, ast.Constant):
            if isinstance(node.value, (str, bytes)) and len(node.value) > MAX_CONSTANT_LENGTH:
                raise ExpressionError("string constant too long")
            if isinstance(node.value, int) and not isinstance(node.value, bool) and abs(node.value) > 2**64:
                raise ExpressionError("integer constant too large")
            if isinstance(node.value, bytes) or node.value is Ellipsis:
                raise ExpressionError("bytes and ... are not allowed")
            return False
        dependent = False
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                name = getattr(node.func, "id", None) or ast.unparse(node.func)
                known = ", ".join(sorted(FUNCTIONS))
                raise ExpressionError(f"call of {name!r} is not allowed; functions: {known}")
            if node.keywords:
                raise ExpressionError("keyword arguments are not allowed")
            if node.func.id in ("available", "supported") and len(node.args) != 1:
                raise ExpressionError(f"{node.func.id}() takes exactly one fact")
            for arg in node.args:
                if isinstance(arg, ast.Starred):
                    raise ExpressionError("*args is not allowed")
                dependent = visit(arg, depth + 1) or dependent
        elif (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Mod)
            and isinstance(node.left, ast.Constant)
            and isinstance(node.left.value, str)
        ):
            raise ExpressionError("%-formatting is not allowed; use {placeholders} in messages")
        elif isinstance(node, ast.Subscript):
            index = node.slice
            if not (isinstance(index, ast.Constant) and isinstance(index.value, (int, str))):
                raise ExpressionError("subscripts must be a constant index or key")
            dependent = visit(node.value, depth + 1)
        elif isinstance(node, (ast.Attribute, ast.Name)):
            dotted = _dotted(node)
            if dotted is None:
                raise ExpressionError("attributes may only be read from facts (e.g. gpu.pcie_width)")
            check_path(dotted, roots)
            if "." in dotted:
                paths.append(dotted)
            head = dotted.partition(".")[0]
            names.add(head)
            return head in SUBJECT_NAMES
        else:
            for child in ast.iter_child_nodes(node):
                dependent = visit(child, depth + 1) or dependent
        if not dependent and isinstance(node, _MEMO_NODES):
            free.add(id(node))
        return dependent

    visit(tree, 0)
    return Expression(
        source=source.strip(),
        tree=tree.body,
        paths=tuple(dict.fromkeys(paths)),
        free=frozenset(free),
        names=frozenset(names),
    )


def check_path(dotted: str, roots: Mapping[str, Any]) -> None:
    parts = dotted.split(".")
    head = parts[0]
    if head not in roots:
        if head in FUNCTIONS:
            raise ExpressionError(f"{head} is a function; call it as {head}(...)")
        suggestion = difflib.get_close_matches(head, list(roots), n=1)
        hint = f" (did you mean {suggestion[0]}?)" if suggestion else ""
        raise ExpressionError(f"unknown name {head!r}{hint}; names: {', '.join(sorted(roots))}")
    node = roots[head]
    walked = head
    for part in parts[1:]:
        if part.startswith("_"):
            raise ExpressionError(f"attribute {part!r} is not allowed")
        child = factpaths.child(node, part)
        if child is None:
            options = factpaths.children(node)
            suggestion = difflib.get_close_matches(part, options, n=1)
            hint = f" (did you mean {walked}.{suggestion[0]}?)" if suggestion else ""
            raise ExpressionError(f"unknown fact {walked}.{part}{hint}")
        node = child
        walked = f"{walked}.{part}"


@dataclass(frozen=True)
class Template:
    """A message/fix template: literal text with {expression[:spec]} placeholders."""

    source: str
    parts: tuple[tuple[str, Expression | None, str], ...]

    def render(
        self,
        names: Mapping[str, Any],
        functions: Mapping[str, Callable[..., Any]],
        run: RunCache | None = None,
        limit: int = MAX_TEXT_CHARS,
    ) -> str:
        """The text, at most ``limit`` characters and a cut marker saying how many more there were.

        Nothing longer is built on the way: each literal and value is written only as far as
        there is room, and past that only its length is counted."""
        out = _Writer(limit)
        for literal, expr, spec in self.parts:
            out.write(literal)
            if expr is None:
                continue
            try:
                value = expr.evaluate(names, functions, run)
            except FactUnavailable:
                out.write("unknown")
                continue
            _format_into(out, value, spec, 0)
        return out.text()


class _Writer:
    """Text written up to a limit; past it, only counted."""

    __slots__ = ("parts", "room", "over")

    def __init__(self, limit: int) -> None:
        self.parts: list[str] = []
        self.room = max(limit, 0)
        self.over = 0

    def write(self, text: str) -> None:
        size = len(text)
        if size <= self.room:
            self.parts.append(text)
            self.room -= size
        else:
            if self.room:
                self.parts.append(text[: self.room])
            self.over += size - self.room
            self.room = 0

    def text(self) -> str:
        body = "".join(self.parts)
        return body + cut_marker(self.over) if self.over else body


# Deeper than this, a nested list in a message is shown as "…" (facts and tables are at most
# 64 levels deep, so only a value built through the Python API gets there).
_MAX_FORMAT_DEPTH = 100


def format_value(value: Any, spec: str = "", limit: int = MAX_TEXT_CHARS) -> str:
    """A value as a message shows it (lists joined by ", ", yes/no, none), at most ``limit``
    characters and a cut marker. A spec outside FORMAT_SPEC's grammar is ignored."""
    out = _Writer(limit)
    _format_into(out, value, spec, 0)
    return out.text()


def _format_into(out: _Writer, value: Any, spec: str, depth: int) -> None:
    if isinstance(value, bool):
        out.write("yes" if value else "no")
    elif value is None:
        out.write("none")
    elif isinstance(value, (list, tuple)):
        if depth >= _MAX_FORMAT_DEPTH:
            out.write("…")
            return
        for i, item in enumerate(value):
            if i:
                out.write(", ")
            _format_into(out, item, "", depth + 1)
    elif isinstance(value, str):
        _format_str(out, value, spec)
    elif isinstance(value, (int, float)):
        if spec and _SPEC_PARTS.match(spec):
            try:
                out.write(format(value, spec))  # width and precision < 100: a short text
                return
            except (ValueError, TypeError):
                pass
        out.write(_number_text(value))
    elif isinstance(value, Mapping) and not isinstance(value, FactView):
        _repr_into(out, value, depth)
    else:
        out.write(str(value))


def _number_text(value: int | float) -> str:
    try:
        return str(value)
    except ValueError:  # an int past Python's int_max_str_digits
        return f"<a {value.bit_length()}-bit integer>" if isinstance(value, int) else "<a number>"


def _format_str(out: _Writer, text: str, spec: str) -> None:
    """format(text, spec), written without building more than the spec's width or precision."""
    parts = _SPEC_PARTS.match(spec) if spec else None
    if parts is None:
        out.write(text)
        return
    try:
        format("", spec)  # the same spec error a longer text would give
    except (ValueError, TypeError):
        out.write(text)
        return
    width, precision = parts.group(2), parts.group(3)
    if precision:
        out.write(format(text[: int(precision)], spec))
    elif width and len(text) < int(width):
        out.write(format(text, spec))
    else:
        out.write(text)


def _repr_into(out: _Writer, value: Any, depth: int) -> None:
    """repr() of a table row (a dict of lists, strings, numbers), written as far as there is room."""
    if depth >= _MAX_FORMAT_DEPTH:
        out.write("…")
    elif isinstance(value, Mapping):
        out.write("{")
        for i, (key, item) in enumerate(value.items()):
            if i:
                out.write(", ")
            _repr_into(out, key, depth + 1)
            out.write(": ")
            _repr_into(out, item, depth + 1)
        out.write("}")
    elif isinstance(value, list):
        out.write("[")
        for i, item in enumerate(value):
            if i:
                out.write(", ")
            _repr_into(out, item, depth + 1)
        out.write("]")
    elif isinstance(value, str) and len(value) > out.room + 2:
        # repr() of the part that fits; the rest is counted as it is (escapes not counted)
        room = out.room
        out.write(repr(value[:room])[:room])
        out.over += len(value) + 2 - room
    elif isinstance(value, int) and not isinstance(value, bool):
        out.write(_number_text(value))
    else:
        out.write(repr(value))


def compile_template(source: str, roots: Mapping[str, Any]) -> Template:
    if len(source) > 4 * MAX_EXPRESSION_LENGTH:
        raise ExpressionError("template too long")
    parts: list[tuple[str, Expression | None, str]] = []
    try:
        parsed = list(string.Formatter().parse(source))
    except ValueError as exc:
        raise ExpressionError(f"bad template: {exc} (write {{{{ and }}}} for literal braces)") from None
    for literal, field, spec, conversion in parsed:
        if field is None:
            parts.append((literal, None, ""))
            continue
        if conversion:
            raise ExpressionError(f"conversion !{conversion} is not allowed in templates")
        if spec and not FORMAT_SPEC.match(spec):
            raise ExpressionError(f"format spec {spec!r} is not allowed (e.g. use .1f or >4)")
        if not field.strip():
            raise ExpressionError("empty {} placeholder")
        try:
            expr = compile_expression(field, roots)
        except ExpressionError as exc:
            raise ExpressionError(f"in placeholder {{{field}}}: {exc}") from None
        parts.append((literal, expr, spec or ""))
    return Template(source=source, parts=tuple(parts))


def section_views(facts: Mapping[str, Any], sections: Sequence[str], reads: list[tuple[str, Any]]) -> dict[str, Any]:
    """Each facts section as a view; an unavailable section makes every path into it unavailable."""
    names: dict[str, Any] = {}
    for section in sections:
        value = facts.get(section, Unavailable("not_found", f"no {section} section in the facts"))
        if isinstance(value, Unavailable):
            names[section] = _UnavailableSection(section, value, reads)
        else:
            names[section] = wrap(value, section, reads)
    return names


class _UnavailableSection(FactView):
    """A whole section that could not be read: any path into it is unavailable."""

    __slots__ = ("_unavailable",)

    def __init__(self, section: str, unavailable: Unavailable, reads: list[tuple[str, Any]]) -> None:
        super().__init__({}, section, reads)
        self._unavailable = unavailable

    def child(self, name: str) -> Any:
        path = f"{self._path}.{name}"
        self._reads.append((path, self._unavailable))
        raise FactUnavailable(path, self._unavailable)


# Results with nothing in them to measure or check (see _Evaluator._check_disallowed_items).
_NOTHING_TO_CHECK = frozenset({bool, float, type(None), FactView, _UnavailableSection})
