"""Message and fix templates: literal text with ``{expression[:spec]}`` placeholders.

Rendered templates are bounded while they render (``Template.render``: at most
findings.MAX_TEXT_CHARS characters, then a ``' … [cut: N more characters]'`` marker): each
interpolated value is written only as far as there is room and the rest is only counted, and a
format spec's width and precision are at most two digits, checked at load and again at render.
"""

from __future__ import annotations

import ast
import re
import string
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..findings import MAX_TEXT_CHARS, cut_marker
from .evaluator import Expression, RunCache
from .expressions import MAX_EXPRESSION_LENGTH, ExpressionError, compile_expression
from .views import FactUnavailable, FactView

# Format specs allowed in message placeholders: alignment, a small width, precision, a type.
FORMAT_SPEC = re.compile(r"^[<>^]?\d{0,2}(\.\d{1,2})?[dfsx%]?$")

_SPEC_PARTS = re.compile(r"^([<>^]?)(\d{0,2})(?:\.(\d{1,2}))?([dfsx%]?)$")


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
        strict: bool = False,
    ) -> str:
        """The text, at most ``limit`` characters and a cut marker saying how many more there were.
        A placeholder whose fact is unavailable reads "unknown", or, ``strict``, raises
        FactUnavailable (a rule's unknown_message is said only with what is there).

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
                if strict:
                    raise
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


def compile_template(
    source: str,
    roots: Mapping[str, Any],
    lets: Mapping[str, Expression] | None = None,
    compile_field: Callable[[str], Expression] | None = None,
) -> Template:
    """Parse and check a template; each placeholder is an expression (see compile_expression)
    without a conditional: a value chosen by if/else is named under the rule's let: instead,
    so the message reads as text. ``compile_field``: compile_expression of a placeholder's text
    with these roots and lets, or what it gave for the same text before (the loader's memo)."""
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
            expr = compile_field(field) if compile_field is not None else compile_expression(field, roots, lets)
        except ExpressionError as exc:
            raise ExpressionError(f"in placeholder {{{_shown_field(field)}}}: {exc}") from None
        # (no walk where the text has no "if": most placeholders, and the keyword is always ASCII)
        if "if" in field and any(isinstance(node, ast.IfExp) for node in ast.walk(expr.tree)):
            raise ExpressionError(
                f"in placeholder {{{_shown_field(field)}}}: no if/else in a template; "
                "name the value under let: and write {name}"
            )
        parts.append((literal, expr, spec or ""))
    return Template(source=source, parts=tuple(parts))


def _shown_field(field: str) -> str:
    """A placeholder as an error message quotes it: on one line, cut to 60 characters."""
    text = " ".join(field.split())
    return text if len(text) <= 60 else text[:57] + "..."
