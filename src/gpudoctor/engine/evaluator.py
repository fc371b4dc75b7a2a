"""Evaluating checked rule expressions: narrowed and bounded, with work shared in a run.

Expressions are parsed by the standard library's ``ast`` and checked at load (engine.expressions);
here the checked tree is run by an interpreter of gpudoctor's own, in the way simpleeval's
evaluator ran it (same order, same operator functions, same checks, same exceptions), with
attribute access only on fact views and every value built bounded (engine.bounds). Its dispatch
is done once per expression instead of once per node evaluated: the first evaluation turns the
tree into a program (engine.program), one Python closure per node that calls its children's
closures directly. No text is generated and nothing is compiled by Python: no eval, exec or
compile anywhere (docs/architecture.md, "Rule expressions", says why this is as safe as before).
simpleeval still provides the operator functions, the function table and its check of every
value for modules and forbidden functions.

Within one run of the rules (a :class:`RunCache`), what does not depend on the subject is worked
out once: a sub-expression that does not name the subject variable (``gpu``, ``node``, ``nic``),
e.g. ``max(values_of(gpus, "nvlink_active"))`` in a GPU rule, is remembered with the facts it
read (replayed as evidence on each later use), and a helper call over the run's ``gpus`` list
with otherwise plain arguments is remembered by the list's identity and the arguments. So the
work per GPU subject does not grow with the number of GPUs. The run's deadline is checked every
few hundred nodes evaluated (:class:`DeadlineExceeded`).
"""

from __future__ import annotations

import ast
import dataclasses
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from packaging.version import Version
from simpleeval import (
    DISALLOW_FUNCTIONS,
    EvalWithCompoundTypes,
    FeatureNotAvailable,
    FunctionNotDefined,
    InvalidExpression,
    SimpleEval,
)

from .bounds import MAX_VALUE_CELLS, check_int, too_big, value_cells
from .program import NOTHING_TO_CHECK, OPERATORS, QUIET, REMEMBER_FROM, Step, compile_tree
from .views import PLAIN_TYPES

# The names a rule's subject is bound to: a sub-expression naming none of them is the same for
# every subject of a run (see RunCache).
SUBJECT_NAMES = frozenset({"gpu", "node", "nic", "port", "bridge"})

# Nodes worth remembering; names, attributes and constants are cheaper to read again.
MEMO_NODES = (ast.Call, ast.BinOp, ast.Compare, ast.BoolOp, ast.UnaryOp, ast.IfExp, ast.Subscript)

# How many nodes are evaluated between two looks at the clock.
_DEADLINE_TICKS = 256


class DeadlineExceeded(Exception):
    """The run's deadline passed while a rule was evaluated: the runner reports it as unknown (timeout)."""

# Not remembered when a sub-expression raises them: they depend on the moment, not on the facts.
_NOT_REMEMBERED = (DeadlineExceeded, RecursionError, MemoryError)

def _no_check(evaluator: Any, item: Any) -> None:
    pass

# simpleeval's check of a value for modules and forbidden functions (1.0.5 and later; before,
# it had none). _Evaluator calls it for every value a node gives (see _Evaluator._eval).
_simpleeval_check: Callable[[Any, Any], None] = getattr(EvalWithCompoundTypes, "_check_disallowed_items", _no_check)

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
    _visit_free(tree, out)
    return frozenset(out)


def _visit_free(node: ast.AST, out: set[int]) -> bool:
    """Does ``node`` depend on the subject? Adds the ids of its free nodes to ``out``. (A module
    function, not a closure that calls itself: that is a reference cycle the collector must free.)"""
    dependent = isinstance(node, ast.Name) and node.id in SUBJECT_NAMES
    for child in ast.iter_child_nodes(node):
        dependent = _visit_free(child, out) or dependent
    if not dependent and isinstance(node, MEMO_NODES):
        out.add(id(node))
    return dependent

def _detached(value: Any, run: RunCache) -> bool:
    """Can the value be handed to another rule's evaluation (it holds no fact view of this one)?"""
    kind = type(value)
    if kind in PLAIN_TYPES or kind is Version:
        return True
    if kind is list or kind is tuple:
        hit = run.known.get(id(value))
        if hit is not None and hit[0] is value:
            return True
        return set(map(type, value)) <= PLAIN_TYPES
    return False


class _Evaluator(EvalWithCompoundTypes):  # type: ignore[misc]
    """The state of one evaluation, which the expression's program (engine.program) runs on:
    the names, the run, the sizes measured so far, the deadline's ticks. It keeps simpleeval's
    function table (and simpleeval's construction-time check of it) and simpleeval's check of
    every value for modules and forbidden functions, narrowed and bounded: attribute access only
    on FactView objects, and every value built (by an operator, a list or tuple display, a helper
    call) bounded by MAX_VALUE_CELLS."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # id -> (value, size) of the large values built so far, so nothing is measured twice
        self._sizes: dict[int, tuple[Any, int]] = {}
        # Whether the node whose value is being checked built it (facts and constants are not
        # measured: they are bounded by the snapshot and the rule file they come from); read by
        # _check_disallowed_items, also where simpleeval's check calls it for each item.
        self._builds = False
        self.busy = False  # an evaluation is running (see _evaluator_for)
        self._run: RunCache | None = None  # the run this evaluation belongs to, if any
        self._free: frozenset[int] = _NOTHING  # nodes of the expression worth remembering
        self._ticks = _NEVER
        # The let: expression whose tree LetValue.get asks _eval for next (set by the Name step
        # that found the LetValue; _eval checks that the tree is that expression's).
        self._let: Expression | None = None

    def cells(self, value: Any) -> int:
        run = self._run
        if run is not None:
            hit = run.known.get(id(value))
            if hit is not None and hit[0] is value:
                if hit[1] > MAX_VALUE_CELLS:
                    raise too_big(MAX_VALUE_CELLS)
                return int(hit[1])
        size = value_cells(value, MAX_VALUE_CELLS, self._sizes)
        if size >= REMEMBER_FROM:
            self._sizes[id(value)] = (value, size)
        return size

    def _check_disallowed_items(self, item: Any) -> None:
        # simpleeval (>= 1.0.5) walks every result in full, shared items once per place they
        # appear: a YAML alias bomb in a data table is 10**9 items to it. Measuring first stops early.
        kind = type(item)
        if kind in NOTHING_TO_CHECK:  # most results: a bool, a fact view (nothing to measure either)
            return
        if self._builds:
            if kind is int:
                check_int(item)
                return
            self.cells(item)
        if kind in PLAIN_TYPES:
            return
        run = self._run
        if run is not None and (kind is list or kind is tuple):
            hit = run.known.get(id(item))
            if hit is not None and hit[0] is item:
                return  # checked when the run first made it (the gpus list, a remembered result)
        if isinstance(item, (list, tuple)) and len(item) >= REMEMBER_FROM and set(map(type, item)) <= PLAIN_TYPES:
            return  # nothing in a flat list of plain values can be a module or a function
        _simpleeval_check(self, item)

    def _checked(self, item: Any, builds: bool) -> None:
        """The check of a node's value (the steps skip it where its type alone says it passes)."""
        outer = self._builds
        self._builds = builds
        try:
            self._check_disallowed_items(item)
        finally:
            self._builds = outer

    def _read_name(self, node: ast.Name) -> Any:
        """A name's value (a let: name's worked out where first read), checked: the Name step's
        slow way, for what is not a fact view or a plain value."""
        try:
            value = self.names[node.id]
        except KeyError:
            value = SimpleEval._eval_name(self, node)  # simpleeval's: a function's name, or NameNotDefined
        else:
            if type(value) is LetValue:
                self._let = value.expression
                value = value.get(self)
        if type(value) not in QUIET:
            self._checked(value, False)
        return value

    def _tick(self) -> None:
        """_DEADLINE_TICKS more nodes were evaluated: a look at the clock."""
        self._ticks = _DEADLINE_TICKS
        run = self._run
        if run is not None:
            run.check_deadline()

    def _eval(self, node: ast.AST) -> Any:
        """The value of a checked tree: LetValue.get asks it for its let: expression's."""
        let, self._let = self._let, None
        if let is not None and let.tree is node:
            program = let.program(self._free)
        else:  # not a let: expression's tree (nothing asks for one): its program, made for this once
            program = compile_tree(node, self._free)
        return program(self)

    def _remembered(self, node: ast.AST, body: Step) -> Any:
        """A node that names no subject variable: evaluated once per run, then replayed."""
        run = self._run
        if run is None:
            return body(self)
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
            value = body(self)
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

    def _plain_call(self, name: str, args: Sequence[Step]) -> Any:
        """A helper call outside a run, or of a name the table lacks: simpleeval's way."""
        try:
            func = self.functions[name]
        except KeyError:
            raise FunctionNotDefined(name, self.expr) from None
        if func in DISALLOW_FUNCTIONS:
            raise FeatureNotAvailable("This function is forbidden")
        return func(*[arg(self) for arg in args])

    def _shared_call(self, key: tuple[Any, ...], func: Callable[..., Any], args: list[Any], run: RunCache) -> Any:
        """A helper call over the run's gpus list with otherwise plain arguments: once per run."""
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
                outer, self._builds = self._builds, True
                try:
                    _simpleeval_check(self, value)
                finally:
                    self._builds = outer
                run.known[id(value)] = (value, size)
        except _NOT_REMEMBERED:
            raise
        except Exception as exc:
            run.calls[key] = (True, exc)
            raise
        run.calls[key] = (False, value)
        return value


class LetValue:
    """The value of one of a rule's ``let:`` names for one subject: worked out where it is first
    read (so a name only a message uses costs nothing on a pass, and one whose facts are
    unavailable makes unknown only what reads it, as the expression written out in place would),
    then remembered for the other reads of that subject, an exception included."""

    __slots__ = ("expression", "state", "value")

    _UNREAD, _KNOWN, _RAISED, _BUSY = range(4)

    def __init__(self, expression: Expression) -> None:
        self.expression = expression
        self.state = self._UNREAD
        self.value: Any = None

    def get(self, evaluator: _Evaluator) -> Any:
        state = self.state
        if state == self._KNOWN:
            return self.value
        if state == self._RAISED:
            raise self.value.with_traceback(None)
        if state == self._BUSY:  # the loader refuses a name that reads itself or a later one
            raise InvalidExpression("a let: name reads itself")
        self.state = self._BUSY
        run, outer = evaluator._run, evaluator._free
        evaluator._free = self.expression.free_nodes() if run is not None and run.remember else _NOTHING
        try:
            value = evaluator._eval(self.expression.tree)
        except _NOT_REMEMBERED:
            self.state = self._UNREAD
            raise
        except Exception as exc:
            self.state, self.value = self._RAISED, exc
            raise
        finally:
            evaluator._free = outer
        self.state, self.value = self._KNOWN, value
        return value


@dataclass(frozen=True)
class Expression:
    """A checked, parsed expression."""

    source: str
    tree: ast.AST
    # The fact paths it reads, in the order they appear, with those of the let: names it uses
    # where it uses them.
    paths: tuple[str, ...]
    # ids of the nodes of ``tree`` worth remembering in a run (see RunCache) that name no subject
    # variable and no let: name; found while the expression is checked (None: found on first use).
    free: frozenset[int] | None = dataclasses.field(default=None, compare=False, repr=False)
    # The names it reads (facts sections, the subject variable, gpus and, through the rule's
    # let: names it uses, what they read; not the helpers it calls), also found while it is
    # checked (None: found on first use).
    names: frozenset[str] | None = dataclasses.field(default=None, compare=False, repr=False)
    # How deeply its tree nests, with the let: names it reads written out in place.
    depth: int = dataclasses.field(default=0, compare=False, repr=False)
    # Its tree's programs (program.compile_tree), made on first use: without remembering (outside a run,
    # or in a rule judged once) and remembering its free nodes in the run.
    plain: Step | None = dataclasses.field(default=None, init=False, compare=False, repr=False)
    remembering: Step | None = dataclasses.field(default=None, init=False, compare=False, repr=False)

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

    def program(self, free: frozenset[int]) -> Step:
        """The program of its tree that remembers the nodes in ``free`` (_NOTHING or free_nodes())."""
        if not free:
            step = self.plain
            if step is None:
                step = compile_tree(self.tree, _NOTHING)
                object.__setattr__(self, "plain", step)
            return step
        if free is self.free:
            step = self.remembering
            if step is None:
                step = compile_tree(self.tree, free)
                object.__setattr__(self, "remembering", step)
            return step
        return compile_tree(self.tree, free)  # (nothing asks for another set)

    def evaluate(
        self, names: Mapping[str, Any], functions: Mapping[str, Callable[..., Any]], run: RunCache | None = None
    ) -> Any:
        """The expression's value; ``run``: what this run of the rules shares (see RunCache)."""
        cached = getattr(_LOCAL, "evaluator", None)  # (= _evaluator_for(functions), without the call)
        if cached is not None and cached[0] is functions and not cached[1].busy:
            evaluator: _Evaluator = cached[1]
        else:
            evaluator = _evaluator_for(functions) or _Evaluator(  # in use further up: a fresh one
                operators=OPERATORS, names={}, functions=dict(functions)
            )
        # (read, never written: the caller's dict is not copied)
        evaluator.names = names if type(names) is dict else dict(names)
        evaluator.expr = self.source  # what simpleeval's errors quote
        evaluator._sizes = {}
        evaluator._builds = False
        evaluator._run = run
        if run is not None:
            free = self.free_nodes() if run.remember else _NOTHING
            evaluator._ticks = run.ticks
        else:
            free = _NOTHING
            evaluator._ticks = _NEVER
        evaluator._free = free
        program = (self.remembering if free else self.plain) or self.program(free)
        evaluator.busy = True
        try:
            return program(evaluator)
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

