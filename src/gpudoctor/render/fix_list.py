"""The fix list (advice/fix_list.py) for people (text), programs (JSON, ``format: 1``) and shells.

Formatting only. The re-check after each fix is carried as argv words; here it becomes the text
shown (shlex.join) or, in a script, a live command line of shell-quoted words (render/shell.py).
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from ..advice.fix_list import FIX_GROUPS, FixItem, FixList
from .layout import fix_lines, wrap, wrap_units
from .shell import shell_command, shell_comment

WIDTH = 100  # pipes and files; the command passes the terminal's
BODY = " " * 7  # a fix item's message and fix text sit under its rule id


def _verify(item: FixItem) -> str:
    return shlex.join(item.verify_argv)


def _subjects_line(item: FixItem) -> str:
    labels = item.subject_labels
    if len(labels) > 4:
        return f"{', '.join(labels[:3])} and {len(labels) - 3} more"
    return ", ".join(labels)


def render_text(fixes: FixList, header: str = "", style: Any = None, width: int = WIDTH) -> str:
    """The fix list for people, fitted to `width`: prose wraps, a fix's command lines and the
    re-check command are printed whole (layout.fix_lines), however long."""

    def s(text: str, **kw: Any) -> str:
        return style(text, **kw) if style else text

    lines = [*(wrap(f"gpudoctor fix · {header}", width, "", "  ") if header else ["gpudoctor fix"]), ""]
    if not fixes.items:
        lines.append("Nothing to fix: no check failed.")
    for group, items in fixes.by_group():
        lines.append(s(f"{FIX_GROUPS[group]} ({len(items)})", bold=True))
        for n, item in enumerate(items, 1):
            sev = {"error": "FAIL", "warning": "warn", "info": "info"}[item.severity.value]
            lines.extend(wrap(f"{n}. [{sev}] {item.rule_id} — {_subjects_line(item)}", width, "  ", BODY))
            for message in dict.fromkeys(item.messages):  # the same message for many subjects once
                for line in message.strip().splitlines():
                    lines.extend(wrap_units(line, width, BODY) if line.strip() else [""])
            lines.append("     fix:")
            lines.extend(fix_lines(item.fix.strip(), width, BODY, BODY))
            lines.append(f"     then: {_verify(item)}")
            lines.append("")
    tail = []
    if fixes.unknown:
        tail.append(f"{fixes.unknown} check(s) could not be judged (inputs unavailable); `gpudoctor check` says why.")
    if fixes.errors:
        tail.append(f"{fixes.errors} rule(s) broke; `gpudoctor check` shows them.")
    tail.append("gpudoctor prints fixes and never runs them.")
    for line in tail:
        lines.extend(wrap_units(line, width))
    return "\n".join(lines).rstrip() + "\n"


def _item_json(item: FixItem) -> dict[str, Any]:
    return {
        "group": item.group,
        "rule": item.rule_id,
        "title": item.title,
        "area": item.area,
        "severity": item.severity.value,
        "subjects": item.subjects,
        "messages": item.messages,
        "fix": item.fix,
        "verify": _verify(item),
    }


def _fix_list_json(fixes: FixList) -> dict[str, Any]:
    return {
        "format": 1,
        "facts_origin": fixes.origin,
        "fixes": len(fixes.items),
        "groups": [
            {"group": g, "heading": FIX_GROUPS[g], "items": [_item_json(i) for i in items]}
            for g, items in fixes.by_group()
        ],
        "unknown_checks": fixes.unknown,
        "rule_errors": fixes.errors,
    }


def render_json(fixes: FixList) -> str:
    return json.dumps(_fix_list_json(fixes), indent=2) + "\n"


def _verify_line(item: FixItem) -> str:
    """The re-check as a live command; as a comment when its words cannot be one (a --rules
    directory with a line break in its name)."""
    try:
        return shell_command(item.verify_argv)
    except ValueError:
        return shell_comment(_verify(item), "#    then: ")


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
