"""The two kinds of line in a generated script: comments that may carry anything, commands of quoted words.

Every script gpudoctor prints (`fix --format shell`, `fix --numa`, `fix --torch --format shell`)
is built from two kinds of line: comments, which may carry anything the facts hold (hostnames,
GPU names, rule fix text rendered from facts...), and commands, whose words gpudoctor made or
validated. A snapshot or --root tree is input from whoever wrote it, so each of its values goes
through one of the helpers below and nothing else. Advice carries commands as argv lists; this
module is where they become shell text.
"""

from __future__ import annotations

import shlex
import unicodedata
from typing import Sequence

# Characters written as escapes on a comment line: control characters (C0, DEL, C1: newline,
# carriage return, NUL, ESC...), format characters (bidi overrides, zero-width marks), the Unicode
# line and paragraph separators, and lone surrogates (which cannot even be written as UTF-8).
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\0": "\\0"}


def _escape_controls(text: str) -> str:
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if unicodedata.category(ch) not in _ESCAPED_CATEGORIES:
            out.append(ch)
        elif ch in _NAMED_ESCAPES:
            out.append(_NAMED_ESCAPES[ch])
        elif ord(ch) < 0x100:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return "".join(out)


def shell_comment(text: object, prefix: str = "# ") -> str:
    """One comment line of a generated script: ``prefix`` (which starts with "#") and ``text``.

    ``text`` may hold anything a snapshot holds: every line break, control, format or separator
    character in it is written as an escape (``\\n``, ``\\r``, ``\\x1b``, ``\\u2028``...), so the
    line stays one comment line for any shell and shows the same on a terminal. Never returns a
    line break. Text with legitimate line breaks is split by the caller, one call per line."""
    if not prefix.startswith("#") or _escape_controls(prefix) != prefix:
        raise ValueError(f"a comment prefix starts with '#' and holds no control character, not {prefix!r}")
    return (prefix + _escape_controls(str(text))).rstrip()


def shell_word(value: object) -> str:
    """``value`` as one word of a command line in a generated script: shell-quoted (shlex.quote),
    so that ``$()``, backticks, ``;``, globs and spaces in it are literal.

    A value holding a line break or other control character is refused (ValueError): quoted it
    would still be one word, but would spread the command over lines that read like others and
    carry bytes no argument of a command gpudoctor prints needs. Values from facts are validated
    before they get here; one that may hold anything belongs on a comment (shell_comment)."""
    text = str(value)
    if _escape_controls(text) != text:
        raise ValueError(f"not a shell word: {_escape_controls(text)!r} holds control characters")
    return shlex.quote(text)


def shell_command(argv: Sequence[object]) -> str:
    """A command line of shell_word words (shlex.join, with shell_word's refusal of control characters)."""
    return " ".join(shell_word(a) for a in argv)
