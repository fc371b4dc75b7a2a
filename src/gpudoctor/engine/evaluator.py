"""Evaluating checked rule expressions: narrowed and bounded, with work shared in a run.

Expressions are parsed by the standard library's ``ast`` and checked at load (engine.expressions);
here the checked tree is run by an interpreter of gpudoctor's own, in the way simpleeval's
evaluator ran it (same order, same operator functions, same checks, same exceptions), with
attribute access only on fact views and every value built bounded (engine.bounds). Its dispatch
is done once per expression instead of once per node evaluated: the first evaluation turns the
tree into a program (:func:`_compile`), one Python closure per node that calls its children's
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
    DEFAULT_OPERATORS,
    DISALLOW_FUNCTIONS,
    MAX_STRING_LENGTH,
    EvalWithCompoundTypes,
    FeatureNotAvailable,
    FunctionNotDefined,
    InvalidExpression,
    IterableTooLong,
    OperatorNotDefined,
    SimpleEval,
)

from .bounds import MAX_VALUE_CELLS, check_int, too_big, value_cells
from .views import PLAIN_TYPES, FactUnavailable, FactView, UnavailableSection

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

_SEQUENCES = (str, bytes, list, tuple)

# Only values this large are remembered by an evaluation (see _Evaluator.cells).
_REMEMBER_FROM = 64


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
    if kind in PLAIN_TYPES or kind is Version:
        return True
    if kind is list or kind is tuple:
        hit = run.known.get(id(value))
        if hit is not None and hit[0] is value:
            return True
        return set(map(type, value)) <= PLAIN_TYPES
    return False


# Results with nothing in them to measure or check (see _Evaluator._check_disallowed_items).
_NOTHING_TO_CHECK: frozenset[Any] = frozenset({bool, float, type(None), FactView, UnavailableSection})

# Values whose type alone says they pass the check of a node that reads them (a fact, a name, a
# comparison, a constant): _check_disallowed_items returns at once for them when the node did not
# build them.
_QUIET: frozenset[Any] = _NOTHING_TO_CHECK | PLAIN_TYPES


class _Evaluator(EvalWithCompoundTypes):  # type: ignore[misc]
    """The state of one evaluation, which the expression's program (see :func:`_compile`) runs on:
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
        if isinstance(item, (list, tuple)) and len(item) >= _REMEMBER_FROM and set(map(type, item)) <= PLAIN_TYPES:
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
            program = _compile(node, self._free)
        return program(self)

    def _remembered(self, node: ast.AST, body: _Step) -> Any:
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

    def _plain_call(self, name: str, args: Sequence[_Step]) -> Any:
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


# One evaluation step: a node's value, worked out on an evaluation's state.
_Step = Callable[[_Evaluator], Any]

def _compile(node: ast.AST, free: frozenset[int]) -> _Step:
    """The program of a checked tree: one step (a closure) per node, made once, which evaluates
    the node as simpleeval's handler for it would, in the same order, with the same checks and
    the same exceptions, without simpleeval's dispatch per node. Nothing is generated as text
    and nothing is compiled by Python: each step calls the steps of its children, the operator
    functions of OPERATORS and the helpers of the function table. ``free``: the ids of the nodes
    to remember in the run (RunCache); a node type outside the checked language (which
    compile_expression refuses) is a step that raises FeatureNotAvailable."""
    make = _MAKERS.get(type(node))
    step = make(node, free) if make is not None else _unavailable(type(node).__name__)
    if id(node) in free:

        def remembered(ev: _Evaluator, node: ast.AST = node, body: _Step = step) -> Any:
            return ev._remembered(node, body)

        return remembered
    return step


def _unavailable(what: str) -> _Step:
    def step(ev: _Evaluator) -> Any:
        raise FeatureNotAvailable(f"Sorry, {what} is not available in this evaluator")

    return step


# Each maker below returns the step of one node type; each step first counts the node (the
# deadline's ticks), then works out its value as the handler of the old simpleeval-based
# evaluator did, then checks it: a value the node read with _checked(v, False) unless its type
# is in _QUIET, a value it built (an operator's, a list or tuple display's, a helper call's:
# measured, see _Evaluator.cells) with check_int or _checked(v, True) unless it is in
# _NOTHING_TO_CHECK, exactly as _check_disallowed_items would have decided.


def _make_constant(node: ast.Constant, free: frozenset[int]) -> _Step:
    value: Any = node.value
    if hasattr(value, "__len__") and len(value) > MAX_STRING_LENGTH:  # (the loader allows 500)
        message = f"Literal in statement is too long! ({len(value)}, when {MAX_STRING_LENGTH} is max)"

        def too_long(ev: _Evaluator) -> Any:
            raise IterableTooLong(message)

        return too_long
    if type(value) in _QUIET:

        def constant(ev: _Evaluator) -> Any:
            t = ev._ticks - 1
            ev._ticks = t
            if t <= 0:
                ev._tick()
            return value

        return constant

    def checked_constant(ev: _Evaluator) -> Any:
        t = ev._ticks - 1
        ev._ticks = t
        if t <= 0:
            ev._tick()
        ev._checked(value, False)
        return value

    return checked_constant


def _read_name(ev: _Evaluator, node: ast.Name, name: str) -> Any:
    """A name's value (a let: name's worked out on its first read), checked."""
    try:
        value = ev.names[name]
    except KeyError:
        value = SimpleEval._eval_name(ev, node)  # simpleeval's: a function's name, or NameNotDefined
    else:
        if type(value) is LetValue:
            ev._let = value.expression
            value = value.get(ev)
    if type(value) not in _QUIET:
        ev._checked(value, False)
    return value


def _make_name(node: ast.Name, free: frozenset[int]) -> _Step:
    name = node.id

    def name_step(ev: _Evaluator) -> Any:
        t = ev._ticks - 1
        ev._ticks = t
        if t <= 0:
            ev._tick()
        try:
            value = ev.names[name]
        except KeyError:
            return _read_name(ev, node, name)
        if type(value) in _QUIET:
            return value
        if type(value) is LetValue:
            return _read_name(ev, node, name)
        ev._checked(value, False)
        return value

    return name_step


def _not_facts(attr: str) -> InvalidExpression:
    return InvalidExpression(f"attribute .{attr} is only allowed on facts")


def _make_attribute(node: ast.Attribute, free: frozenset[int]) -> _Step:
    attr = node.attr
    inner = node.value
    if type(inner) is ast.Name and id(inner) not in free:  # (a Name never is: only MEMO_NODES are)
        # gpu.pcie_width: the name's step and the attribute's in one
        name = inner.id

        def fact(ev: _Evaluator) -> Any:
            t = ev._ticks - 2
            ev._ticks = t
            if t <= 0:
                ev._tick()
            try:
                base = ev.names[name]
            except KeyError:
                base = _read_name(ev, inner, name)
            else:
                kind = type(base)
                if kind is not FactView and kind is not UnavailableSection:
                    if kind is LetValue:
                        base = _read_name(ev, inner, name)
                    elif kind not in _QUIET:
                        ev._checked(base, False)
            if isinstance(base, FactView):
                value = base.child(attr)
            else:
                raise _not_facts(attr)
            if type(value) not in _QUIET:
                ev._checked(value, False)
            return value

        return fact
    base_step = _compile(inner, free)

    def attribute(ev: _Evaluator) -> Any:
        t = ev._ticks - 1
        ev._ticks = t
        if t <= 0:
            ev._tick()
        base = base_step(ev)
        if isinstance(base, FactView):
            value = base.child(attr)
        else:
            raise _not_facts(attr)
        if type(value) not in _QUIET:
            ev._checked(value, False)
        return value

    return attribute


def _make_subscript(node: ast.Subscript, free: frozenset[int]) -> _Step:
    container_step = _compile(node.value, free)
    key_step = _compile(node.slice, free)

    def subscript(ev: _Evaluator) -> Any:
        t = ev._ticks - 1
        ev._ticks = t
        if t <= 0:
            ev._tick()
        container = container_step(ev)
        value = container[key_step(ev)]
        if type(value) not in _QUIET:
            ev._checked(value, False)
        return value

    return subscript


def _make_compare(node: ast.Compare, free: frozenset[int]) -> _Step:
    first = _compile(node.left, free)
    pairs = [(_compare_operator(op), _compile(comp, free)) for op, comp in zip(node.ops, node.comparators)]
    if len(pairs) == 1:
        ((operator, second),) = pairs

        def compare(ev: _Evaluator) -> Any:
            t = ev._ticks - 1
            ev._ticks = t
            if t <= 0:
                ev._tick()
            left = first(ev)
            value = operator(left, second(ev))
            if type(value) not in _QUIET:
                ev._checked(value, False)
            return value

        return compare

    def chained(ev: _Evaluator) -> Any:
        t = ev._ticks - 1
        ev._ticks = t
        if t <= 0:
            ev._tick()
        right = first(ev)
        value: Any = True
        for operator, step in pairs:
            if not value:
                break
            left = right
            right = step(ev)
            value = operator(left, right)
        if type(value) not in _QUIET:
            ev._checked(value, False)
        return value

    return chained


def _compare_operator(op: ast.cmpop) -> Callable[[Any, Any], Any]:
    kind = type(op)
    operator = OPERATORS.get(kind)
    if operator is not None:
        return operator  # type: ignore[no-any-return]

    def missing(left: Any, right: Any) -> Any:
        raise KeyError(kind)  # as simpleeval's self.operators[type(operation)] would

    return missing


def _make_boolop(node: ast.BoolOp, free: frozenset[int]) -> _Step:
    steps = tuple(_compile(value, free) for value in node.values)
    is_and = isinstance(node.op, ast.And)
    if not is_and and not isinstance(node.op, ast.Or):
        return _unavailable(type(node.op).__name__)

    if len(steps) == 2:  # most: a and b, a or b
        first, second = steps

        def boolop2(ev: _Evaluator) -> Any:
            t = ev._ticks - 1
            ev._ticks = t
            if t <= 0:
                ev._tick()
            value = first(ev)
            if (value if is_and else not value):
                value = second(ev)
            if type(value) not in _QUIET:
                ev._checked(value, False)
            return value

        return boolop2

    def boolop(ev: _Evaluator) -> Any:
        t = ev._ticks - 1
        ev._ticks = t
        if t <= 0:
            ev._tick()
        value: Any = False
        if is_and:
            for step in steps:
                value = step(ev)
                if not value:
                    break
        else:
            for step in steps:
                value = step(ev)
                if value:
                    break
        if type(value) not in _QUIET:
            ev._checked(value, False)
        return value

    return boolop


def _make_ifexp(node: ast.IfExp, free: frozenset[int]) -> _Step:
    test, body, orelse = _compile(node.test, free), _compile(node.body, free), _compile(node.orelse, free)

    def ifexp(ev: _Evaluator) -> Any:
        t = ev._ticks - 1
        ev._ticks = t
        if t <= 0:
            ev._tick()
        value = body(ev) if test(ev) else orelse(ev)
        if type(value) not in _QUIET:
            ev._checked(value, False)
        return value

    return ifexp


def _built(ev: _Evaluator, value: Any) -> None:
    """The check of a value a node built (an operator's, a display's, a helper call's)."""
    kind = type(value)
    if kind is int:
        check_int(value)
    elif kind not in _NOTHING_TO_CHECK:
        ev._checked(value, True)


def _make_unaryop(node: ast.UnaryOp, free: frozenset[int]) -> _Step:
    operand = _compile(node.operand, free)
    op = node.op
    operator = OPERATORS.get(type(op))

    def unaryop(ev: _Evaluator) -> Any:
        t = ev._ticks - 1
        ev._ticks = t
        if t <= 0:
            ev._tick()
        if operator is None:  # (before the operand, as simpleeval)
            raise OperatorNotDefined(op, ev.expr)
        value = operator(operand(ev))
        kind = type(value)
        if kind is not bool:
            _built(ev, value)
        return value

    return unaryop


def _make_binop(node: ast.BinOp, free: frozenset[int]) -> _Step:
    left_step, right_step = _compile(node.left, free), _compile(node.right, free)
    op = type(node.op)
    operator = OPERATORS.get(op)
    repeats, adds = op is ast.Mult, op is ast.Add

    def binop(ev: _Evaluator) -> Any:
        t = ev._ticks - 1
        ev._ticks = t
        if t <= 0:
            ev._tick()
        left = left_step(ev)
        right = right_step(ev)
        if operator is None:
            raise InvalidExpression(f"operator {op.__name__} is not allowed")
        size = None
        if repeats and isinstance(left, _SEQUENCES) != isinstance(right, _SEQUENCES):
            # A repetition is sized from its parts before it is built.
            seq, count = (left, right) if isinstance(left, _SEQUENCES) else (right, left)
            if isinstance(count, int):
                size = 1 + (ev.cells(seq) - 1) * max(count, 0)  # one container, its items n times
        elif adds and isinstance(left, _SEQUENCES) and isinstance(right, _SEQUENCES):
            size = ev.cells(left) + ev.cells(right) - 1
        if size is not None and size > MAX_VALUE_CELLS:
            raise too_big(MAX_VALUE_CELLS)
        result = operator(left, right)
        kind = type(result)
        if size is not None:
            if size >= _REMEMBER_FROM:
                ev._sizes[id(result)] = (result, size)
        elif kind is int:
            check_int(result)
            return result  # (the node's check of an int is this same check_int)
        elif isinstance(result, int) and not isinstance(result, bool):
            check_int(result)
        elif isinstance(result, _SEQUENCES):
            ev.cells(result)
        if kind is not float:
            _built(ev, result)
        return result

    return binop


def _make_list(node: ast.List, free: frozenset[int]) -> _Step:
    if any(isinstance(item, ast.Starred) for item in node.elts):  # (refused at load)
        return _unavailable("Starred")
    steps = tuple(_compile(item, free) for item in node.elts)

    def list_display(ev: _Evaluator) -> Any:
        t = ev._ticks - 1
        ev._ticks = t
        if t <= 0:
            ev._tick()
        value = [step(ev) for step in steps]
        ev._checked(value, True)
        return value

    return list_display


def _make_tuple(node: ast.Tuple, free: frozenset[int]) -> _Step:
    steps = tuple(_compile(item, free) for item in node.elts)

    def tuple_display(ev: _Evaluator) -> Any:
        t = ev._ticks - 1
        ev._ticks = t
        if t <= 0:
            ev._tick()
        value = tuple([step(ev) for step in steps])
        ev._checked(value, True)
        return value

    return tuple_display


def _make_call(node: ast.Call, free: frozenset[int]) -> _Step:
    func = node.func
    if not isinstance(func, ast.Name) or node.keywords:  # (refused at load)
        return _unavailable("a call of anything but a helper with plain arguments")
    name = func.id
    if name in ("available", "supported"):
        # available(fact): is the fact known? supported(fact): is it anything but "not supported
        # here" (so a feature a GPU lacks, e.g. ECC on a GeForce card, is skipped, not unknown)?
        # Both must see the fact unevaluated.
        fact = _compile(node.args[0], free) if node.args else _unavailable("a call without its fact")
        available = name == "available"

        def known(ev: _Evaluator) -> Any:
            t = ev._ticks - 1
            ev._ticks = t
            if t <= 0:
                ev._tick()
            try:
                fact(ev)
            except FactUnavailable as exc:
                if available:
                    return False
                return exc.unavailable.reason != "not_supported"
            return True

        return known
    args = tuple(_compile(arg, free) for arg in node.args)
    # Arguments that can never be the run's gpus list itself (a constant, a fact, what an operator
    # or a display makes): a call with only those is never remembered by _call_key, so it is not asked.
    private = all(isinstance(arg, _NEVER_SHARED) for arg in node.args)
    count = len(args)
    # (the steps of the first two arguments; placeholders that are never called where there are fewer)
    first = args[0] if count > 0 else _unavailable("a missing argument")
    second = args[1] if count > 1 else _unavailable("a missing argument")

    def call(ev: _Evaluator) -> Any:
        t = ev._ticks - 1
        ev._ticks = t
        if t <= 0:
            ev._tick()
        run = ev._run
        helper = ev.functions.get(name)
        if run is None or helper is None:
            value = ev._plain_call(name, args)
        elif private:
            if count == 1:
                value = helper(first(ev))
            elif count == 2:
                value = helper(first(ev), second(ev))
            else:
                value = helper(*[arg(ev) for arg in args])
        else:
            values = [first(ev)] if count == 1 else [arg(ev) for arg in args]
            key = _call_key(name, values, run)
            value = helper(*values) if key is None else ev._shared_call(key, helper, values, run)
        kind = type(value)
        if kind is int:
            check_int(value)
        elif kind not in _NOTHING_TO_CHECK:
            ev._checked(value, True)
        return value

    return call


# Nodes whose value is never the run's gpus list (a new value, or one read from the facts): see
# _make_call. A name, a helper's result, a subscript or a choice (if/else, and/or) may be it.
_NEVER_SHARED = (ast.Constant, ast.Attribute, ast.Compare, ast.BinOp, ast.UnaryOp, ast.List, ast.Tuple)


_MAKERS: dict[type, Callable[[Any, frozenset[int]], _Step]] = {
    ast.Constant: _make_constant,
    ast.Name: _make_name,
    ast.Attribute: _make_attribute,
    ast.Subscript: _make_subscript,
    ast.Compare: _make_compare,
    ast.BoolOp: _make_boolop,
    ast.IfExp: _make_ifexp,
    ast.UnaryOp: _make_unaryop,
    ast.BinOp: _make_binop,
    ast.List: _make_list,
    ast.Tuple: _make_tuple,
    ast.Call: _make_call,
}


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
    # Its tree's programs (see _compile), made on first use: without remembering (outside a run,
    # or in a rule judged once) and remembering its free nodes in the run.
    plain: _Step | None = dataclasses.field(default=None, init=False, compare=False, repr=False)
    remembering: _Step | None = dataclasses.field(default=None, init=False, compare=False, repr=False)

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

    def program(self, free: frozenset[int]) -> _Step:
        """The program of its tree that remembers the nodes in ``free`` (_NOTHING or free_nodes())."""
        if not free:
            step = self.plain
            if step is None:
                step = _compile(self.tree, _NOTHING)
                object.__setattr__(self, "plain", step)
            return step
        if free is self.free:
            step = self.remembering
            if step is None:
                step = _compile(self.tree, free)
                object.__setattr__(self, "remembering", step)
            return step
        return _compile(self.tree, free)  # (nothing asks for another set)

    def evaluate(
        self, names: Mapping[str, Any], functions: Mapping[str, Callable[..., Any]], run: RunCache | None = None
    ) -> Any:
        """The expression's value; ``run``: what this run of the rules shares (see RunCache)."""
        evaluator = _evaluator_for(functions)
        if evaluator is None:  # in use further up this thread's stack: a fresh one
            evaluator = _Evaluator(operators=OPERATORS, names={}, functions=dict(functions))
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
        program = self.program(free)
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

