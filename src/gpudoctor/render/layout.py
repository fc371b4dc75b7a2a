"""Fitting text to a width: prose wraps, commands and other tokens never break.

The renderers take a `width` (columns) from the CLI (cli/output.output_width) and lay their text
out with these helpers, so nothing is ever cut mid-token: textwrap's word and hyphen breaking is
off (a long path or a flag stays whole and the line runs long instead), and a command line is
never wrapped at all (whoever copies it must get it in one piece).
"""

from __future__ import annotations

import textwrap

from ..escaping import printable_flow


def wrap(text: str, width: int, first: str = "", rest: str | None = None) -> list[str]:
    """`text` (escaped with printable_flow) wrapped to `width` columns, the first line starting
    with `first` and the others with `rest` (default: spaces as wide as `first`). Words are never
    broken, nor hyphenated names (rule ids, flags, package names); an empty text gives `first`."""
    rest = " " * len(first) if rest is None else rest
    lines = textwrap.wrap(
        printable_flow(text),
        max(width, len(first) + 10),
        initial_indent=first,
        subsequent_indent=rest,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return lines or [first.rstrip()]


def fits(lines: list[str], width: int) -> bool:
    """Whether every line is at most `width` columns."""
    return all(len(line) <= width for line in lines)
