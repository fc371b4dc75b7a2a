"""gpudoctor.lazy_re: a pattern compiled on first use behaves as re.compile's; and the fast paths
that let escaping and inputs skip their patterns skip only text the patterns would not change."""

from __future__ import annotations

import re
import sys

import pytest

from gpudoctor import escaping, inputs
from gpudoctor.lazy_re import LazyPattern


def test_compiled_only_when_first_used():
    lazy = LazyPattern(r"^a(\d+)$", re.MULTILINE)
    assert lazy._compiled is None
    assert lazy.pattern == r"^a(\d+)$" and lazy._compiled is None
    assert lazy.compiled is lazy.compiled
    assert lazy.compiled == re.compile(r"^a(\d+)$", re.MULTILINE)


@pytest.mark.parametrize(
    "method, args",
    [
        ("match", ("a12\nb",)),
        ("match", ("xa12", 1)),
        ("fullmatch", ("a12",)),
        ("search", ("x\na7",)),
        ("search", ("x\na7", 0, 3)),
        ("findall", ("a1\na2\nb3",)),
        ("split", ("a1\nb\na2",)),
        ("split", ("a1\nb\na2", 1)),
        ("sub", ("z", "a1\na2")),
        ("sub", (lambda m: m.group(1), "a1\na2", 1)),
    ],
)
def test_methods_as_re_compile(method, args):
    lazy = LazyPattern(r"^a(\d+)$", re.MULTILINE)
    eager = re.compile(r"^a(\d+)$", re.MULTILINE)
    got, want = getattr(lazy, method)(*args), getattr(eager, method)(*args)
    if isinstance(want, re.Match):
        assert (got.span(), got.groups()) == (want.span(), want.groups())
    else:
        assert got == want


def test_finditer_and_bytes():
    lazy = LazyPattern(rb"(\d)")
    assert [m.group() for m in lazy.finditer(b"a1b2")] == [b"1", b"2"]


def _class_members(pattern: str) -> list[str]:
    compiled = re.compile(pattern)
    return [chr(c) for c in range(sys.maxunicode + 1) if compiled.fullmatch(chr(c))]


def test_every_escaped_character_is_unprintable():
    # what lets escaping skip its search for text that str.isprintable() holds
    members = _class_members(escaping._UNSAFE.pattern)
    assert len(members) > 2048  # the C0 and C1 controls, the marks, the surrogates
    assert not [c for c in members if c.isprintable()]
    assert set(_class_members(escaping._UNSAFE_BUT_WHITESPACE.pattern)) == set(members) - {"\n", "\t"}


@pytest.mark.parametrize(
    "text",
    ["plain", "tab\there", "line\nbreak", "nbsp\u00a0x", "esc\x1b[2J", "bidi\u202e", "lone\ud800", "\x9b", "ok ·×—"],
)
def test_escaping_the_same_with_and_without_the_fast_path(text):
    slow_unsafe = re.compile(escaping._UNSAFE.pattern)
    slow_whitespace = re.compile(escaping._UNSAFE_BUT_WHITESPACE.pattern)
    expected = slow_unsafe.sub(lambda m: escaping._escape(m.group()), text)
    assert escaping.printable(text) == expected
    expected_output = slow_whitespace.sub(lambda m: escaping._escape(m.group()), text)
    assert escaping.terminal_safe(text) == expected_output


@pytest.mark.parametrize("text", ["ascii", "caf\u00e9", "lone\ud800x", "\udfff", ""])
def test_clean_string_replaces_surrogates_only(text):
    assert inputs.clean_string(text) == re.sub("[\ud800-\udfff]", "\ufffd", text)
