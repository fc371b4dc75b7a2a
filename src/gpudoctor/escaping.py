"""Making outside text safe to show: control characters become visible escapes.

Hostnames, GPU names, paths, environment values, rule-pack titles and merged reports come from
outside gpudoctor (a snapshot, a --root tree, a report file, a rule pack). gpudoctor runs as root
and its reports are read in terminals and job logs, so such a value must not be able to send the
terminal a control sequence (an OSC title or clipboard write, ``ESC [ 2 J``, an 8-bit CSI
``\\x9b``) nor start a line of its own (a forged ``Verdict: OK`` after ``\\n`` or ``\\r``).

Two layers, because either alone falls short:

- :func:`printable`, applied by every text renderer to each value it interpolates: every C0
  control (newline, carriage return and tab included), DEL, C1 control, lone UTF-16 surrogate and
  bidirectional embedding/override/isolate character becomes a visible escape (``\\x1b``, ``\\n``,
  ``\\u009b``, ``\\ud800``). Only this layer can tell a value's newline from the renderer's own, so
  only it stops a value from forging a line or a column.
- :func:`terminal_safe`, applied once by the output writer to the whole of every text and JSON
  output: escapes whatever control characters are still there except the newline and tab the
  renderer writes, and, when colour is on, the SGR colour sequences (``ESC [ digits ; ... m``) its
  ``style`` emitted; no other escape sequence survives. It is the net for renderers that
  interpolate without :func:`printable` (a missed spot, a module outside render/) and keeps JSON
  valid (``\\u009b`` is the same JSON string as the raw character). It cannot tell a value's
  newline from the renderer's; that is what the first layer is for.

For normal input both are the identity (a regular expression search that finds nothing).
"""

from __future__ import annotations

import re
from typing import Any

from .lazy_re import LazyPattern

# C0 controls, DEL, C1 controls, lone surrogates, the bidirectional marks, embeddings, overrides
# and isolates (U+061C, U+200E-U+200F, U+202A-U+202E, U+2066-U+2069: they reorder what follows
# them on the line) and the Unicode line and paragraph separators (U+2028-U+2029: a line break
# to some readers).
_OTHER = "\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff"
# Every character the patterns below match is one that str.isprintable() calls unprintable
# (categories Cc, Cf, Cs, Zl, Zp; tests/test_lazy_re.py checks each), so text that isprintable()
# holds nothing to escape; only other text is searched. The patterns are compiled when first
# needed (gpudoctor.lazy_re; the wide character classes take a millisecond to compile): normal
# text, and a report whose only unprintable characters are its newlines and tabs, never compile
# them.
_UNSAFE_BUT_WHITESPACE = LazyPattern(f"[\x00-\x08\x0b-\x1f{_OTHER}]")
_UNSAFE = LazyPattern(f"[\x00-\x1f{_OTHER}]")
_UNSAFE_KEEPING_SGR = LazyPattern(f"(\x1b\\[[0-9;]*m)|[\x00-\x08\x0b-\x1f{_OTHER}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_FLOW = {ord(c): " " for c in "\n\x0b\x0c\r"}


def _unsafe(text: str) -> bool:
    return not text.isprintable() and _UNSAFE.search(text) is not None


def _escape(ch: str) -> str:
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x20 else f"\\u{code:04x}"


def _escape_match(match: re.Match[str]) -> str:
    return _escape(match.group())


def printable(value: Any) -> str:
    """``str(value)`` with every control character (newline and tab included) as a visible escape:
    one line, nothing a terminal acts on."""
    text = value if isinstance(value, str) else str(value)
    if not _unsafe(text):
        return text
    return _UNSAFE.sub(_escape_match, text)


def printable_flow(text: str) -> str:
    """:func:`printable` for text that is then wrapped with textwrap: tabs expanded and line breaks
    made spaces first, as textwrap itself would, so normal text wraps exactly as before."""
    if not _unsafe(text):
        return text
    return printable(text.expandtabs().translate(_FLOW))


def printable_lines(text: str) -> str:
    """:func:`printable` for each line of a multi-line value whose lines are meant (a rule's
    expression or why text): its newlines stay, everything else is escaped."""
    if not _unsafe(text):
        return text
    return "\n".join(printable(line) for line in text.split("\n"))


def _escape_unless_sgr(match: re.Match[str]) -> str:
    sgr = match.group(1)
    return sgr if sgr is not None else _escape(match.group())


def terminal_safe(text: str, colour: bool = False) -> str:
    """The whole output with every control character but newline and tab escaped; with ``colour``
    also SGR sequences (``ESC [ ... m``) kept. JSON stays valid and means the same."""
    if text.replace("\n", "").replace("\t", "").isprintable() or _UNSAFE_BUT_WHITESPACE.search(text) is None:
        return text
    if colour:
        return _UNSAFE_KEEPING_SGR.sub(_escape_unless_sgr, text)
    return _UNSAFE_BUT_WHITESPACE.sub(_escape_match, text)


def printable_tree(value: Any) -> Any:
    """A copy of a facts tree with every string (keys included) through :func:`printable`, for
    renderers that interpolate facts without escaping them (the fix advice's text and shell
    output, the fleet summary). Values without control characters are unchanged, so the result
    judges the same."""
    from .facts import Unavailable

    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable(k) if isinstance(k, str) else k: printable_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [printable_tree(v) for v in value]
    if isinstance(value, tuple):
        return tuple(printable_tree(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return type(value)(printable_tree(v) for v in value)
    if isinstance(value, Unavailable):
        return Unavailable(value.reason, printable(value.detail))
    return value
