"""The fix list: every failed check's fix, grouped by what applying it takes.

Built from findings (the same rules `gpudoctor check` runs) and the rules' tags: each rule carries
at most one of the FIX_TAGS, which says whether its fix is a configuration change or reinstall a
user can make, needs root, needs a reboot, or needs BIOS / hardware work; a rule without one is
"other". A rule that failed for several subjects with the same fix is one item naming them all.
Each item says what to check afterwards. Nothing here runs a fix: it only formats them.
"""

from __future__ import annotations

import json
import shlex
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from ..findings import AREAS, Finding, Severity, Status

# ---------------------------------------------------------------------------- generated scripts
#
# Every script gpudoctor prints (`fix --format shell`, `fix --numa`, `fix --torch --format shell`)
# is built from two kinds of line: comments, which may carry anything the facts hold (hostnames,
# GPU names, rule fix text rendered from facts...), and commands, whose words gpudoctor made or
# validated. A snapshot or --root tree is input from whoever wrote it, so each of its values goes
# through one of the two helpers below and nothing else.

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


# Group tag → heading, in the order a person would work through them (cheapest first).
FIX_GROUPS: dict[str, str] = {
    "fix-config": "Configuration and reinstalls (as your user)",
    "fix-root": "Needs root",
    "fix-reboot": "Needs a reboot",
    "fix-hardware": "BIOS, cabling or hardware",
    "other": "Other fixes",
}
FIX_TAGS = tuple(t for t in FIX_GROUPS if t != "other")

_AREA_ORDER = {area: i for i, area in enumerate(AREAS)}


def fix_group(tags: Iterable[str]) -> str:
    """The group of a rule from its tags: the first fix-* tag in FIX_GROUPS order, else "other"."""
    present = set(tags)
    for tag in FIX_TAGS:
        if tag in present:
            return tag
    return "other"


@dataclass
class FixItem:
    group: str
    rule_id: str
    title: str
    area: str
    severity: Severity
    fix: str
    verify: str
    subjects: list[dict[str, Any]] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    verify_argv: list[str] = field(default_factory=list)  # verify as words; empty: only the text is known

    @property
    def subject_labels(self) -> list[str]:
        return [str(s.get("label")) for s in self.subjects]

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "rule": self.rule_id,
            "title": self.title,
            "area": self.area,
            "severity": self.severity.value,
            "subjects": self.subjects,
            "messages": self.messages,
            "fix": self.fix,
            "verify": self.verify,
        }


@dataclass
class FixList:
    items: list[FixItem]
    unknown: int = 0  # checks that could not be judged
    errors: int = 0  # rules that broke
    origin: str = "live"

    def by_group(self) -> list[tuple[str, list[FixItem]]]:
        return [
            (g, [i for i in self.items if i.group == g]) for g in FIX_GROUPS if any(i.group == g for i in self.items)
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": 1,
            "facts_origin": self.origin,
            "fixes": len(self.items),
            "groups": [
                {"group": g, "heading": FIX_GROUPS[g], "items": [i.to_json() for i in items]}
                for g, items in self.by_group()
            ],
            "unknown_checks": self.unknown,
            "rule_errors": self.errors,
        }


def verify_argv(rule_id: str, rule_dirs: Sequence[str] = ()) -> list[str]:
    """The check to run after a fix, as words."""
    argv = ["gpudoctor", "check", "--only", rule_id]
    for d in rule_dirs:
        argv += ["--rules", d]
    return argv


def verify_command(rule_id: str, rule_dirs: Sequence[str] = ()) -> str:
    return shlex.join(verify_argv(rule_id, rule_dirs))


def collect(
    findings: Sequence[Finding],
    rule_tags: Mapping[str, Sequence[str]],
    rule_dirs: Sequence[str] = (),
    origin: str = "live",
) -> FixList:
    """Fix items for the failed findings; rule_tags maps a rule id to its tags."""
    items: dict[tuple[str, str], FixItem] = {}
    for f in findings:
        if f.status is not Status.FAIL:
            continue
        fix = f.fix.strip() or f"No fix text in the rule; see `gpudoctor rules show {f.rule_id}`."
        key = (f.rule_id, fix)
        item = items.get(key)
        if item is None:
            item = FixItem(
                group=fix_group(rule_tags.get(f.rule_id, ())),
                rule_id=f.rule_id,
                title=f.title,
                area=f.area,
                severity=f.severity,
                fix=fix,
                verify=verify_command(f.rule_id, rule_dirs),
                verify_argv=verify_argv(f.rule_id, rule_dirs),
            )
            items[key] = item
        item.subjects.append(f.subject.to_json())
        item.messages.append(f.message)
    ordered = sorted(
        items.values(),
        key=lambda i: (-i.severity.rank, _AREA_ORDER.get(i.area, len(_AREA_ORDER)), i.rule_id),
    )
    return FixList(
        items=ordered,
        unknown=sum(1 for f in findings if f.status is Status.UNKNOWN),
        errors=sum(1 for f in findings if f.status is Status.ERROR),
        origin=origin,
    )


# ---------------------------------------------------------------------------- rendering (formatting only)

WIDTH = 100


def _indent(text: str, prefix: str) -> list[str]:
    return [f"{prefix}{line}".rstrip() for line in text.strip().splitlines()]


def _subjects_line(item: FixItem) -> str:
    labels = item.subject_labels
    if len(labels) > 4:
        return f"{', '.join(labels[:3])} and {len(labels) - 3} more"
    return ", ".join(labels)


def render_text(fixes: FixList, header: str = "", style: Any = None) -> str:
    def s(text: str, **kw: Any) -> str:
        return style(text, **kw) if style else text

    lines = [f"gpudoctor fix · {header}" if header else "gpudoctor fix", ""]
    if not fixes.items:
        lines.append("Nothing to fix: no check failed.")
    for group, items in fixes.by_group():
        lines.append(s(f"{FIX_GROUPS[group]} ({len(items)})", bold=True))
        for n, item in enumerate(items, 1):
            sev = {"error": "FAIL", "warning": "warn", "info": "info"}[item.severity.value]
            lines.append(f"  {n}. [{sev}] {item.rule_id} — {_subjects_line(item)}")
            for message in dict.fromkeys(item.messages):  # the same message for many subjects once
                lines.extend(_indent(message, "       "))
            lines.append("     fix:")
            lines.extend(_indent(item.fix, "       "))
            lines.append(f"     then: {item.verify}")
            lines.append("")
    tail = []
    if fixes.unknown:
        tail.append(f"{fixes.unknown} check(s) could not be judged (inputs unavailable); `gpudoctor check` says why.")
    if fixes.errors:
        tail.append(f"{fixes.errors} rule(s) broke; `gpudoctor check` shows them.")
    tail.append("gpudoctor prints fixes and never runs them.")
    lines.extend(tail)
    return "\n".join(lines).rstrip() + "\n"


def render_json(fixes: FixList) -> str:
    return json.dumps(fixes.to_json(), indent=2) + "\n"


def _verify_line(item: FixItem) -> str:
    """The re-check as a live command; as a comment when its words cannot be one (a --rules
    directory with a line break in its name) or are not known apart from the text."""
    if item.verify_argv:
        try:
            return shell_command(item.verify_argv)
        except ValueError:
            pass
    return shell_comment(item.verify, "#    then: ")


def render_shell(fixes: FixList, header: str = "") -> str:
    """A script of comments: every fix as text to read, and the checks to run after each one.

    Fix texts are prose with commands in them, rendered from rule templates that interpolate facts,
    so none of it is made runnable: every line of a fix is a comment (shell_comment), whatever it
    holds. The only live lines are the `gpudoctor check` calls that confirm a fix worked, made of
    the rule id (kebab-case, checked when the rule is loaded) and the --rules directories, each
    shell-quoted (shell_word). Everything from the facts (the header's hostname, OS, kernel and GPU
    names, subject labels with bus ids) is on comment lines."""
    lines = ["#!/bin/sh", shell_comment("gpudoctor fix" + (f" · {header}" if header else ""))]
    lines.append("# Apply each fix by hand (nothing below changes the machine); the uncommented lines re-check.")
    if not fixes.items:
        lines.append("# Nothing to fix: no check failed.")
    for group, items in fixes.by_group():
        lines.append("")
        lines.append(shell_comment(f"== {FIX_GROUPS[group]}"))
        for item in items:
            lines.append(shell_comment(f"-- {item.rule_id} ({item.severity.value}): {_subjects_line(item)}"))
            # Split on newlines only (the template's own lines, and any a fact brought): each
            # becomes a comment line, and any other line break or control character is escaped.
            lines.extend(shell_comment(line.rstrip(), "#    ") for line in item.fix.strip().split("\n"))
            lines.append(_verify_line(item))
    return "\n".join(lines) + "\n"
