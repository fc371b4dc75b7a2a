"""Checking that a text output fits a width (issue 15 item 2), shared by the width tests: a line may
run past the width only where it is one piece that cannot be broken, or a command line."""

from __future__ import annotations

from typing import Any

from gpudoctor.render.layout import is_command
from tests.preflight.helpers import cli


def too_wide(text: str, width: int, code_prefixes: tuple[str, ...] = ()) -> list[str]:
    """The lines longer than `width` that could have been broken: more than one token, and not a
    command line or a line of code (`code_prefixes`: rules show's expressions)."""
    bad = []
    for line in text.splitlines():
        if len(line) <= width or is_command(line.strip()) or line.startswith(code_prefixes):
            continue
        indent = len(line) - len(line.lstrip())
        words = line.split()
        if indent + len(words[0]) + 1 + len(words[1] if len(words) > 1 else "") <= width:
            bad.append(line)
    return bad


def run_at(capsys: Any, monkeypatch: Any, width: int, *args: str) -> str:
    """The stdout of `gpudoctor ARGS` with COLUMNS=`width`; exit status 0 or 1 (a verdict)."""
    monkeypatch.setenv("COLUMNS", str(width))
    code, out, err = cli(capsys, *args)
    assert code in (0, 1), err
    return out
