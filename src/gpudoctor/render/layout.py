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


# First words of a line that is a command to copy (a rule's fix puts a command on a line of its
# own, often indented): such a line is printed whole, however long.
_COMMAND_WORDS = frozenset(
    {
        "sudo",
        "pip",
        "pip3",
        "python",
        "python3",
        "printf",
        "echo",
        "unset",
        "export",
        "systemctl",
        "nvidia-smi",
        "modprobe",
        "docker",
        "kubectl",
        "apt",
        "apt-get",
        "dnf",
        "yum",
        "journalctl",
        "dmesg",
        "ip",
        "ibstat",
        "cat",
        "grep",
        "ls",
        "mokutil",
        "dkms",
        "gpudoctor",
    }
)


def is_command_line(line: str) -> bool:
    """Whether a line of fix text is a command (indented, or starting with a command's name)."""
    if line[:1].isspace() and line.strip():
        return True
    first = line.split(" ", 1)[0]
    return first in _COMMAND_WORDS


def wrap_unless_command(text: str, width: int, first: str = "", rest: str | None = None) -> list[str]:
    """wrap(), except that a command line (is_command_line) is kept on one line, escaped, after
    `first`: whoever copies it gets it in one piece."""
    if is_command_line(text):
        return [first + printable_flow(text.rstrip())]
    return wrap(text, width, first, rest)
