"""Writing a command's output: the one writer for stdout and output files, colour, stderr lines."""

from __future__ import annotations

import os
from typing import Any

import click

from .errors import UserError


def wants_colour(stream: Any, colour: bool | None, to_file: bool = False) -> bool:
    """Whether text output is coloured, first rule that decides:
    --color / --no-color (`colour`); NO_COLOR set and not empty: no (no-color.org); FORCE_COLOR
    set and not empty: yes (force-color.org); an output file (-o): no; TERM=dumb: no; else
    whether `stream` is a terminal."""
    if colour is not None:
        return colour
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    if to_file or os.environ.get("TERM") == "dumb":
        return False
    return _isatty(stream)


def style_for(stream: Any, colour: bool | None, to_file: bool = False) -> Any:
    """click.style where wants_colour() says so; else render.text.plain (no escape sequences)."""
    if wants_colour(stream, colour, to_file):
        return click.style
    from ..render.text import plain

    return plain


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (OSError, ValueError, AttributeError):
        return False


def coloured(style: Any) -> bool:
    """Whether a style from style_for() colours (its SGR sequences then pass the output writer)."""
    return style is click.style


def write_output(text: str | bytes, output: str | None, *, colour: bool = False, raw: bool = False) -> None:
    """Write a command's output to the file `output` (see gpudoctor.outputs.write_file for what a
    path may be), or to stdout when it is None or "-"; exit status 2 with one line if that fails.

    Text passes gpudoctor.escaping.terminal_safe first (every control character but newline
    and tab escaped; with `colour`, the renderer's SGR sequences kept), JSON included: it stays
    valid. `raw` skips that, for formats that escape on their own (JUnit XML, Prometheus, NFD)."""
    from ..outputs import OutputError, write_file, write_stdout

    if isinstance(text, str) and not raw:
        from ..escaping import terminal_safe

        text = terminal_safe(text, colour)
    try:
        if output and output != "-":
            write_file(output, text)
        elif isinstance(text, str):
            write_stdout(text)
        else:
            raise UserError("internal error: binary output for standard output")
    except OutputError as exc:
        raise UserError(str(exc)) from None


def say(line: str) -> None:
    """One line to stderr (the caller escapes what it quotes); nothing if stderr cannot take it."""
    try:
        click.echo(line, err=True)
    except (OSError, ValueError):
        pass


DEFAULT_WIDTH = 100
MIN_WIDTH, MAX_WIDTH = 40, 250


def output_width(stream: Any, to_file: bool = False) -> int:
    """Columns a text output may use: COLUMNS when it is a whole number (clamped to 40..250),
    else the terminal's width when `stream` is a terminal, else 100 (a pipe or an -o file: a
    stable width, so saved reports and goldens do not depend on the window they came from)."""
    raw = os.environ.get("COLUMNS", "").strip()
    if raw.isdigit() and len(raw) < 6:
        return max(MIN_WIDTH, min(MAX_WIDTH, int(raw)))
    if not to_file and _isatty(stream):
        try:
            columns = os.get_terminal_size(stream.fileno()).columns
        except (OSError, ValueError, AttributeError):
            columns = 0
        if columns > 0:
            return max(MIN_WIDTH, min(MAX_WIDTH, columns))
    return DEFAULT_WIDTH
