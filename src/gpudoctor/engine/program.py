"""The programs rule expressions run as: one step (a closure) per node of a checked tree.

engine.evaluator turns an expression's checked tree into a program on its first evaluation
(:func:`compile_tree`) and runs it on an evaluation's state (evaluator._Evaluator: the names, the
run, the sizes measured, the deadline's ticks). Each step evaluates its node as simpleeval's
handler for the node type did (with gpudoctor's narrowing), in the same order, with the same
checks and the same exceptions, calling its children's steps directly instead of dispatching on
the node's type at every evaluation. No text is generated and nothing is compiled by Python (no
eval, exec or compile): docs/architecture.md, "Rule expressions", says why this is safe.
"""

from __future__ import annotations

import ast
from typing import Any, Callable, Sequence

from simpleeval import (
    DEFAULT_OPERATORS,
    MAX_STRING_LENGTH,
    FeatureNotAvailable,
    InvalidExpression,
    IterableTooLong,
    OperatorNotDefined,
)

from .bounds import MAX_VALUE_CELLS, check_int, too_big
from .views import PLAIN_TYPES, FactUnavailable, FactView, UnavailableSection

_SEQUENCES = (str, bytes, list, tuple)

# Only values this large are remembered by an evaluation (see evaluator._Evaluator.cells).
REMEMBER_FROM = 64


def _safe_mod(a: Any, b: Any) -> Any:
    if isinstance(a, (str, bytes)):
        # "%0999999999d" % 1 builds a gigabyte; messages use {placeholders} instead
        raise InvalidExpression("%-formatting of strings is not allowed in rule expressions")
    return a % b


# simpleeval's operator functions for the operators the checked language has (engine.expressions'
# ALLOWED_NODES): not **, <<, >>, ^ or ~, which the checker refuses, so a tree built by hand meets
# none of them either.
OPERATORS: dict[Any, Any] = {
    op: DEFAULT_OPERATORS[op]
    for op in (
        ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.BitAnd, ast.BitOr, ast.USub, ast.UAdd, ast.Not,
        ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn, ast.Is, ast.IsNot,
    )
    if op in DEFAULT_OPERATORS
}

OPERATORS[ast.Mod] = _safe_mod


_HASHABLE = frozenset({bool, int, float, str, type(None)})


def call_key(name: str, args: Sequence[Any], run: Any) -> tuple[Any, ...] | None:
    """Key of a helper call over a run-wide list with plain other arguments (``run``: the
    evaluator.RunCache that shares the list); None for other calls."""
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


# Results with nothing in them to measure or check (see evaluator._Evaluator._check_disallowed_items).
NOTHING_TO_CHECK: frozenset[Any] = frozenset({bool, float, type(None), FactView, UnavailableSection})

# Values whose type alone says they pass the check of a node that reads them (a fact, a name, a
# comparison, a constant): _check_disallowed_items returns at once for them when the node did not
# build them.
QUIET: frozenset[Any] = NOTHING_TO_CHECK | PLAIN_TYPES


# One evaluation step: a node's value, worked out on an evaluation's state (an evaluator._Evaluator).
Step = Callable[[Any], Any]


def compile_tree(node: ast.AST, free: frozenset[int]) -> Step:
    """The program of a checked tree: one step (a closure) per node, made once, which evaluates
    the node as simpleeval's handler for it would, in the same order, with the same checks and
    the same exceptions, without simpleeval's dispatch per node. Nothing is generated as text
    and nothing is compiled by Python: each step calls the steps of its children, the operator
    functions of OPERATORS and the helpers of the function table. ``free``: the ids of the nodes
    to remember in the run (RunCache); a node type outside the checked language (which
    compile_expression refuses) is a step that raises FeatureNotAvailable."""
    make = MAKERS.get(type(node))
    step = make(node, free) if make is not None else _unavailable(type(node).__name__)
    if id(node) in free:

        def remembered(ev: Any, node: ast.AST = node, body: Step = step) -> Any:
            return ev._remembered(node, body)

        return remembered
    return step


# Each step below begins with the same three lines, the deadline's tick (ev._ticks counted down,
# ev._tick() at zero), written out rather than called: a call per node is what the programs exist
# to save. Steps of one or two operands are kept apart from the general ones for the same reason.


def _unavailable(what: str) -> Step:
    def step(ev: Any) -> Any:
        raise FeatureNotAvailable(f"Sorry, {what} is not available in this evaluator")

    return step


# Each maker below returns the step of one node type; each step first counts the node (the
# deadline's ticks), then works out its value as the handler of the old simpleeval-based
# evaluator did, then checks it: a value the node read with _checked(v, False) unless its type
# is in QUIET, a value it built (an operator's, a list or tuple display's, a helper call's:
# measured, see _Evaluator.cells) with check_int or _checked(v, True) unless it is in
# NOTHING_TO_CHECK, exactly as _check_disallowed_items would have decided.


def _make_constant(node: ast.Constant, free: frozenset[int]) -> Step:
    value: Any = node.value
    if hasattr(value, "__len__") and len(value) > MAX_STRING_LENGTH:  # (the loader allows 500)
        message = f"Literal in statement is too long! ({len(value)}, when {MAX_STRING_LENGTH} is max)"

        def too_long(ev: Any) -> Any:
            raise IterableTooLong(message)

        return too_long
    if type(value) in QUIET:

        def constant(ev: Any) -> Any:
            t = ev._ticks - 1
            ev._ticks = t
            if t <= 0:
                ev._tick()
            return value

        return constant

    def checked_constant(ev: Any) -> Any:
        t = ev._ticks - 1
        ev._ticks = t
        if t <= 0:
            ev._tick()
        ev._checked(value, False)
        return value

    return checked_constant


def _make_name(node: ast.Name, free: frozenset[int]) -> Step:
    name = node.id

    def name_step(ev: Any) -> Any:
        t = ev._ticks - 1
        ev._ticks = t
        if t <= 0:
            ev._tick()
        try:
            value = ev.names[name]
        except KeyError:
            return ev._read_name(node)
        if type(value) in QUIET:
            return value
        return ev._read_name(node)  # a let: name, the gpus list, ...: read and checked there

    return name_step


def _not_facts(attr: str) -> InvalidExpression:
    return InvalidExpression(f"attribute .{attr} is only allowed on facts")


def _make_attribute(node: ast.Attribute, free: frozenset[int]) -> Step:
    attr = node.attr
    inner = node.value
    if type(inner) is ast.Name and id(inner) not in free:  # (a Name never is: only MEMO_NODES are)
        # gpu.pcie_width: the name's step and the attribute's in one
        name = inner.id

        def fact(ev: Any) -> Any:
            t = ev._ticks - 2
            ev._ticks = t
            if t <= 0:
                ev._tick()
            base = ev.names.get(name)
            kind = type(base)
            if kind is not FactView and kind is not UnavailableSection:
                base = ev._read_name(inner)  # (as the name's own step: looked up, a let: worked out, checked)
            if isinstance(base, FactView):
                value = base.child(attr)
            else:
                raise _not_facts(attr)
            if type(value) not in QUIET:
                ev._checked(value, False)
            return value

        return fact
    base_step = compile_tree(inner, free)

    def attribute(ev: Any) -> Any:
        t = ev._ticks - 1
        ev._ticks = t
        if t <= 0:
            ev._tick()
        base = base_step(ev)
        if isinstance(base, FactView):
            value = base.child(attr)
        else:
            raise _not_facts(attr)
        if type(value) not in QUIET:
            ev._checked(value, False)
        return value

    return attribute


def _make_subscript(node: ast.Subscript, free: frozenset[int]) -> Step:
    container_step = compile_tree(node.value, free)
    key_step = compile_tree(node.slice, free)

    def subscript(ev: Any) -> Any:
        t = ev._ticks - 1
        ev._ticks = t
        if t <= 0:
            ev._tick()
        container = container_step(ev)
        value = container[key_step(ev)]
        if type(value) not in QUIET:
            ev._checked(value, False)
        return value

    return subscript


def _make_compare(node: ast.Compare, free: frozenset[int]) -> Step:
    first = compile_tree(node.left, free)
    pairs = [(_compare_operator(op), compile_tree(comp, free)) for op, comp in zip(node.ops, node.comparators)]
    if len(pairs) == 1:
        ((operator, second),) = pairs

        def compare(ev: Any) -> Any:
            t = ev._ticks - 1
            ev._ticks = t
            if t <= 0:
                ev._tick()
            left = first(ev)
            value = operator(left, second(ev))
            if type(value) not in QUIET:
                ev._checked(value, False)
            return value

        return compare

    def chained(ev: Any) -> Any:
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
        if type(value) not in QUIET:
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


def _make_boolop(node: ast.BoolOp, free: frozenset[int]) -> Step:
    steps = tuple(compile_tree(value, free) for value in node.values)
    is_and = isinstance(node.op, ast.And)
    if not is_and and not isinstance(node.op, ast.Or):
        return _unavailable(type(node.op).__name__)

    if len(steps) == 2:  # most: a and b, a or b
        first, second = steps

        def boolop2(ev: Any) -> Any:
            t = ev._ticks - 1
            ev._ticks = t
            if t <= 0:
                ev._tick()
            value = first(ev)
            if (value if is_and else not value):
                value = second(ev)
            if type(value) not in QUIET:
                ev._checked(value, False)
            return value

        return boolop2

    def boolop(ev: Any) -> Any:
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
        if type(value) not in QUIET:
            ev._checked(value, False)
        return value

    return boolop


def _make_ifexp(node: ast.IfExp, free: frozenset[int]) -> Step:
    test, body, orelse = compile_tree(node.test, free), compile_tree(node.body, free), compile_tree(node.orelse, free)

    def ifexp(ev: Any) -> Any:
        t = ev._ticks - 1
        ev._ticks = t
        if t <= 0:
            ev._tick()
        value = body(ev) if test(ev) else orelse(ev)
        if type(value) not in QUIET:
            ev._checked(value, False)
        return value

    return ifexp


def _built(ev: Any, value: Any) -> None:
    """The check of a value a node built (an operator's, a display's, a helper call's)."""
    kind = type(value)
    if kind is int:
        check_int(value)
    elif kind not in NOTHING_TO_CHECK:
        ev._checked(value, True)


def _make_unaryop(node: ast.UnaryOp, free: frozenset[int]) -> Step:
    operand = compile_tree(node.operand, free)
    op = node.op
    operator = OPERATORS.get(type(op))

    def unaryop(ev: Any) -> Any:
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


def _make_binop(node: ast.BinOp, free: frozenset[int]) -> Step:
    left_step, right_step = compile_tree(node.left, free), compile_tree(node.right, free)
    op = type(node.op)
    operator = OPERATORS.get(op)
    repeats, adds = op is ast.Mult, op is ast.Add

    def binop(ev: Any) -> Any:
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
            if size >= REMEMBER_FROM:
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


def _make_list(node: ast.List, free: frozenset[int]) -> Step:
    if any(isinstance(item, ast.Starred) for item in node.elts):  # (refused at load)
        return _unavailable("Starred")
    steps = tuple(compile_tree(item, free) for item in node.elts)

    def list_display(ev: Any) -> Any:
        t = ev._ticks - 1
        ev._ticks = t
        if t <= 0:
            ev._tick()
        value = [step(ev) for step in steps]
        ev._checked(value, True)
        return value

    return list_display


def _make_tuple(node: ast.Tuple, free: frozenset[int]) -> Step:
    steps = tuple(compile_tree(item, free) for item in node.elts)

    def tuple_display(ev: Any) -> Any:
        t = ev._ticks - 1
        ev._ticks = t
        if t <= 0:
            ev._tick()
        value = tuple([step(ev) for step in steps])
        ev._checked(value, True)
        return value

    return tuple_display


def _make_call(node: ast.Call, free: frozenset[int]) -> Step:
    func = node.func
    if not isinstance(func, ast.Name) or node.keywords:  # (refused at load)
        return _unavailable("a call of anything but a helper with plain arguments")
    name = func.id
    if name in ("available", "supported"):
        # available(fact): is the fact known? supported(fact): is it anything but "not supported
        # here" (so a feature a GPU lacks, e.g. ECC on a GeForce card, is skipped, not unknown)?
        # Both must see the fact unevaluated.
        fact = compile_tree(node.args[0], free) if node.args else _unavailable("a call without its fact")
        available = name == "available"

        def known(ev: Any) -> Any:
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
    args = tuple(compile_tree(arg, free) for arg in node.args)
    # Arguments that can never be the run's gpus list itself (a constant, a fact, what an operator
    # or a display makes): a call with only those is never remembered by call_key, so it is not asked.
    private = all(isinstance(arg, _NEVER_SHARED) for arg in node.args)
    count = len(args)
    # (the steps of the first two arguments; placeholders that are never called where there are fewer)
    first = args[0] if count > 0 else _unavailable("a missing argument")
    second = args[1] if count > 1 else _unavailable("a missing argument")

    def call(ev: Any) -> Any:
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
            key = call_key(name, values, run)
            value = helper(*values) if key is None else ev._shared_call(key, helper, values, run)
        kind = type(value)
        if kind is int:
            check_int(value)
        elif kind not in NOTHING_TO_CHECK:
            ev._checked(value, True)
        return value

    return call


# Nodes whose value is never the run's gpus list (a new value, or one read from the facts): see
# _make_call. A name, a helper's result, a subscript or a choice (if/else, and/or) may be it.
_NEVER_SHARED = (ast.Constant, ast.Attribute, ast.Compare, ast.BinOp, ast.UnaryOp, ast.List, ast.Tuple)


MAKERS: dict[type, Callable[[Any, frozenset[int]], Step]] = {
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
