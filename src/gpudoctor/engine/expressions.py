"""Rule expressions: the checked language, refused at load when outside it.

Conditions and message placeholders are Python-syntax expressions parsed by the standard
library's ``ast`` and evaluated by gpudoctor's own interpreter of the checked tree (engine.evaluator
and engine.program, with simpleeval's operators and value checks). The language is narrowed at
load time:

- only a small set of node types (no lambdas, comprehensions, walrus,
  ``**``, f-strings, keyword arguments, slices);
- attribute access only along fact paths (``gpu.pcie_width``), each checked
  against the facts schema, so ``x.__class__`` or a typo in a fact name is
  refused when the rule file loads, naming the fact;
- calls only of the whitelisted helper functions (engine.helpers);
- limits on length, nesting depth and constant sizes.
"""

from __future__ import annotations

import ast
import difflib
from typing import Any, Mapping

from . import factpaths
from .evaluator import MEMO_NODES, SUBJECT_NAMES, Expression
from .helpers.registry import FUNCTIONS

MAX_EXPRESSION_LENGTH = 2000

MAX_DEPTH = 24

MAX_CONSTANT_LENGTH = 500

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


class ExpressionError(ValueError):
    """An expression refused at load: bad syntax, unknown fact, forbidden construct."""


def _dotted(node: ast.AST) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


class _Checker:
    """One expression's check (compile_expression): what it found while it walked the tree. A class,
    not a closure that calls itself: such a closure is a reference cycle per expression that only
    the garbage collector frees (40 000 for 10 000 rules, while the engine pauses it: collector.py)."""

    __slots__ = ("roots", "lets", "paths", "free", "names", "deepest")

    def __init__(self, roots: Mapping[str, Any], lets: Mapping[str, Expression]) -> None:
        self.roots = roots
        self.lets = lets
        self.paths: list[str] = []
        self.free: set[int] = set()  # see Expression.free
        self.names: set[str] = set()  # see Expression.names
        self.deepest = 0  # see Expression.depth

    def visit(self, node: ast.AST, depth: int) -> bool:
        """Check the node; True when it names the subject variable (is not the same for every subject)."""
        if depth > MAX_DEPTH:
            raise ExpressionError(f"expression nested deeper than {MAX_DEPTH} levels")
        if depth > self.deepest:
            self.deepest = depth
        kind = type(node)
        # the exact node types (ast.parse makes no subclass of them): stricter than isinstance
        if kind not in _ALLOWED:
            raise ExpressionError(f"{kind.__name__} is not allowed in rule expressions")
        if kind is ast.Constant:
            value = node.value  # type: ignore[attr-defined]
            if isinstance(value, (str, bytes)) and len(value) > MAX_CONSTANT_LENGTH:
                raise ExpressionError("string constant too long")
            if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**64:
                raise ExpressionError("integer constant too large")
            if isinstance(value, bytes) or value is Ellipsis:
                raise ExpressionError("bytes and ... are not allowed")
            return False
        if kind is ast.Attribute or kind is ast.Name:
            return self._name(node, depth)  # type: ignore[arg-type]
        dependent = False
        if kind is ast.Call:
            call: ast.Call = node  # type: ignore[assignment]
            if not isinstance(call.func, ast.Name) or call.func.id not in FUNCTIONS:
                name = getattr(call.func, "id", None) or ast.unparse(call.func)
                known = ", ".join(sorted(FUNCTIONS))
                raise ExpressionError(f"call of {name!r} is not allowed; functions: {known}")
            if call.keywords:
                raise ExpressionError("keyword arguments are not allowed")
            if call.func.id in ("available", "supported") and len(call.args) != 1:
                raise ExpressionError(f"{call.func.id}() takes exactly one fact")
            for arg in call.args:
                if isinstance(arg, ast.Starred):
                    raise ExpressionError("*args is not allowed")
                dependent = self.visit(arg, depth + 1) or dependent
        elif (
            kind is ast.BinOp
            and isinstance(node.op, ast.Mod)  # type: ignore[attr-defined]
            and isinstance(node.left, ast.Constant)  # type: ignore[attr-defined]
            and isinstance(node.left.value, str)  # type: ignore[attr-defined]
        ):
            raise ExpressionError("%-formatting is not allowed; use {placeholders} in messages")
        elif kind is ast.Subscript:
            index = node.slice  # type: ignore[attr-defined]
            if not (isinstance(index, ast.Constant) and isinstance(index.value, (int, str))):
                raise ExpressionError("subscripts must be a constant index or key")
            dependent = self.visit(node.value, depth + 1)  # type: ignore[attr-defined]
        else:
            # every child, as ast.iter_child_nodes gives them (without its generator); a leaf
            # (an operator, a Load) is checked here, as visit would check it
            below = depth + 1
            for field in kind._fields:
                value = getattr(node, field, None)
                for child in value if type(value) is list else (value,):
                    if not isinstance(child, ast.AST):
                        continue
                    if type(child) in _LEAVES:
                        if below > MAX_DEPTH:
                            raise ExpressionError(f"expression nested deeper than {MAX_DEPTH} levels")
                        if below > self.deepest:
                            self.deepest = below
                        continue
                    dependent = self.visit(child, below) or dependent
        if not dependent and kind in _MEMO:
            self.free.add(id(node))
        return dependent

    def _name(self, node: ast.Attribute | ast.Name, depth: int) -> bool:
        """A fact path or a let: name; True when it names the subject variable or a let: name."""
        dotted = _dotted(node)
        if dotted is None:
            raise ExpressionError("attributes may only be read from facts (e.g. gpu.pcie_width)")
        head = dotted.partition(".")[0]
        if head in self.lets:
            if "." in dotted:
                raise ExpressionError(f"{head} is a let: name, not a fact: {dotted} is not allowed")
            reach = depth + self.lets[head].depth  # as deep as the name's expression written out here
            if reach > MAX_DEPTH:
                raise ExpressionError(
                    f"expression nested deeper than {MAX_DEPTH} levels with the let: names it reads written out"
                )
            self.deepest = max(self.deepest, reach)
            self.paths.extend(self.lets[head].paths)
            self.names.update(self.lets[head].names_read())
            return True  # a let: name is worked out per subject
        check_path(dotted, self.roots, self.lets)
        if "." in dotted:
            self.paths.append(dotted)
        self.names.add(head)
        return head in SUBJECT_NAMES


_ALLOWED = frozenset(ALLOWED_NODES)
# Allowed nodes without children (operators, the Load context): checked in place, not visited.
_LEAVES = frozenset(kind for kind in ALLOWED_NODES if not getattr(kind, "_fields", ()))
_MEMO = frozenset(MEMO_NODES)


def compile_expression(
    source: str, roots: Mapping[str, Any], lets: Mapping[str, Expression] | None = None
) -> Expression:
    """Parse and check an expression. ``roots`` maps each name to its schema node; ``lets`` maps
    the rule's let: names it may read to their compiled expressions."""
    lets = lets or {}
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
    checker = _Checker(roots, lets)
    checker.visit(tree, 0)
    return Expression(
        source=source.strip(),
        tree=tree.body,
        paths=tuple(dict.fromkeys(checker.paths)),
        free=frozenset(checker.free),
        names=frozenset(checker.names),
        depth=checker.deepest,
    )


def check_path(dotted: str, roots: Mapping[str, Any], lets: Mapping[str, Any] | None = None) -> None:
    parts = dotted.split(".")
    head = parts[0]
    if head not in roots:
        if head in FUNCTIONS:
            raise ExpressionError(f"{head} is a function; call it as {head}(...)")
        known = [*roots, *(lets or ())]
        suggestion = difflib.get_close_matches(head, known, n=1)
        hint = f" (did you mean {suggestion[0]}?)" if suggestion else ""
        raise ExpressionError(f"unknown name {head!r}{hint}; names: {', '.join(sorted(known))}")
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
