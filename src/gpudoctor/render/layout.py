"""Fitting text to a width: prose wraps, commands and other tokens never break.

The renderers take a `width` (columns) from the CLI (cli/output.output_width) and lay their text
out with these helpers, so nothing is ever cut mid-token: textwrap's word and hyphen breaking is
off (a long path or a flag stays whole and the line runs long instead), and a command line is
never wrapped at all (whoever copies it must get it in one piece).

Commands in a rule's fix text (`fix_lines`) and message, the convention rules/*.yaml follow:
- a fix line that is a command (indented but not a "- " list item, or starting with a command
  word, COMMAND_WORDS) is printed as it is, however long;
- in prose, a `backticked` span and an inline command (`units` has the one rule for where one
  starts and ends) are single pieces: moved to the next line whole when they do not fit, never
  split; a piece longer than the width runs long on a line of its own.

Widths are measured by `visible_len`: colour codes take no column.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..escaping import printable_flow
from ..lazy_re import LazyPattern

# The colour codes (SGR sequences) a style puts into a line: they take no column on the terminal.
_SGR = LazyPattern("\x1b\\[[0-9;]*m")


def visible_len(text: str) -> int:
    """The columns `text` takes on a terminal: its length without colour codes. Every measure of
    a line against the width goes through this, so a coloured report is laid out as a plain one."""
    return len(_SGR.sub("", text)) if "\x1b" in text else len(text)


def wrap(text: str, width: int, first: str = "", rest: str | None = None) -> list[str]:
    """`text` (escaped with printable_flow) wrapped to `width` columns, the first line starting
    with `first` and the others with `rest` (default: spaces as wide as `first`). Words are never
    broken, nor hyphenated names (rule ids, flags, package names); an empty text gives `first`."""
    import textwrap  # here: a report whose findings all pass never wraps prose (1 ms of import)

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


def pack(items: list[str], width: int, first: str = "", rest: str | None = None, sep: str = " ") -> list[str]:
    """`items` joined by `sep` on lines of `width`, the first line starting with `first`, the
    others with `rest` (default: spaces as wide as `first`); an item is never split (one longer
    than a line runs long on a line of its own); empty items are left out. Items are taken as
    they are: escaping (and colour) is the caller's."""
    rest = " " * len(first) if rest is None else rest
    out: list[str] = []
    line, fresh = first, True
    mark = sep.rstrip()  # a broken line ends with the separator's mark (",", "·"): room is kept for it
    kept = [x for x in items if x]
    for k, item in enumerate(kept):
        room = width - (len(mark) if k < len(kept) - 1 else 0)
        if not fresh and visible_len(line) + len(sep) + visible_len(item) > room:
            out.append(line + mark)
            line, fresh = rest, True
        line = line + item if fresh else f"{line}{sep}{item}"
        fresh = False
    out.append(line)
    return out


def flow(text: str, width: int, first: str = "", rest: str | None = None) -> list[str]:
    """Already escaped text (or text with colour codes) wrapped at spaces, never inside a word."""
    return pack(text.split(" "), width, first, rest, " ")


# A command in a rule's fix text starts with one of these words (the rules in rules/*.yaml use no
# other); they are how `fix_lines` tells a command from prose.
_WORDS = (
    "sudo pip pip3 python python3 apt apt-get apt-cache apt-mark dnf yum numactl nvidia-smi nvidia-ctk "
    "nvidia-modprobe modprobe rmmod echo printf export unset setpci systemctl journalctl dmesg ls docker "
    "kubectl mokutil ldconfig update-initramfs update-grub dracut grub2-mkconfig rocm-smi dcgmi gpudoctor "
    "ulimit mount torchrun cat grep ip ibstat dkms"
)
COMMAND_WORDS = frozenset(_WORDS.split())
# Where an inline command ends: the first of these outside quotes, or the end of the line.
_COMMAND_ENDS = (" (", "; ", ", ", ". ", " — ", "  ")
# ... or the first of these words: prose joining the command to its sentence ("sudo update-grub
# and reboot", "nvidia-smi -q -d ECC shows the counters"); no inline command in rules/*.yaml
# has one of them as an argument.
_JOINING = "and or then to for in if when while shows lists prints restores resets fails from again must"
_PROSE_WORDS = frozenset(_JOINING.split())


# Command words that are never a name in the rules' prose: wherever they stand, a command starts.
_TOOLS = "sudo systemctl journalctl modprobe rmmod setpci update-grub update-initramfs mokutil"
_ALWAYS_COMMANDS = frozenset(_TOOLS.split())


def is_command(line: str) -> bool:
    """Whether a fix line is a command as a whole: indented (but not a "- " list item, which is
    prose), or starting with a command word."""
    stripped = line.strip()
    if not stripped or stripped.startswith("- "):
        return False
    return line[:1].isspace() or stripped.split()[0] in COMMAND_WORDS


def _starts_command(text: str, i: int, word: str) -> bool:
    """Whether the command word `word` at `i` starts an inline command (see `units`)."""
    if word in _ALWAYS_COMMANDS or text[:i].endswith(": ") or text[i - 1 : i] == "(":
        return True
    following = text[i + len(word) :].split()[:2]
    return any(w == "|" or (w.startswith("-") and len(w) > 1) for w in following)


def _command_end(text: str, start: int) -> int:
    quote, depth = "", 0
    i = start
    while i < len(text):
        ch = text[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            if depth == 0:
                break  # the prose's parenthesis that the command sat in
            depth -= 1
        elif any(text.startswith(end, i) for end in _COMMAND_ENDS) or (
            ch == " " and text[i + 1 :].split(" ", 1)[0].rstrip(".,;:)") in _PROSE_WORDS
        ):
            break
        i += 1
    end = i
    while end > start and text[end - 1] in ".,;":
        end -= 1  # a sentence's full stop is not part of the command
    return end


def units(text: str) -> list[str]:
    """`text` cut into the pieces that `wrap_units` never breaks: words, a `backticked` span, and
    an inline command. The one rule for an inline command: a command word (COMMAND_WORDS) that
    follows ": " or "(", is one of _ALWAYS_COMMANDS (sudo, systemctl...), or has an option ("-x")
    or a pipe among its next two words starts one ("then sudo modprobe nvidia", "nvidia-smi -q
    -d ECC shows"; not "gpudoctor never changes it"); it runs to the first of _COMMAND_ENDS, a
    closing parenthesis it did not open or one of _PROSE_WORDS, outside quotes, else to the end
    of the line."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] == " ":
            i += 1
            continue
        tick = i + 1 if text.startswith("(`", i) else i  # a span may open inside a parenthesis
        if text[tick] == "`" and "`" in text[tick + 1 :]:
            end = text.index("`", tick + 1) + 1
        else:
            end = text.find(" ", i)
            end = n if end < 0 else end
            start = i + 1 if text[i] == "(" else i
            word = text[start:end]
            if word in COMMAND_WORDS and _starts_command(text, start, word):
                end = _command_end(text, start)
        # punctuation right after a span stays with it, so no line starts with ',' or ')'
        while end < n and text[end] in ".,;:)":
            end += 1
        out.append(text[i:end])
        i = end
    return out


def commands(text: str) -> list[str]:
    """The commands in a fix text, as `fix_lines` keeps them whole: each command line, each
    backticked span and each inline command (see `units`)."""
    out: list[str] = []
    for line in text.strip("\n").splitlines():
        if is_command(line):
            out.append(line.strip())
            continue
        for unit in units(line):
            core = unit.rstrip(".,;:)").lstrip("(")
            if core.startswith("`") or (" " in core and core.split()[0] in COMMAND_WORDS):
                out.append(core)
    return out


def wrap_units(text: str, width: int, first: str = "", rest: str | None = None) -> list[str]:
    """Like `wrap`, but the pieces of `units` are never broken: one that does not fit where the
    line is goes on the next line; one longer than the width runs long on a line of its own."""
    pieces = units(printable_flow(text))
    return pack(pieces, width, first, rest) if pieces else [first.rstrip()]


def fix_lines(fix: str, width: int, first: str, rest: str) -> list[str]:
    """A rule's fix text laid out to `width`. The convention the rules follow: a line that is a
    command (`is_command`: indented, or starting with a command word) is printed as it is, never
    wrapped; a prose line wraps, its backticked spans and inline commands kept whole (`units`),
    a "- " list item under its own text."""
    out: list[str] = []
    for i, para in enumerate(fix.strip("\n").splitlines()):
        lead = first if i == 0 else rest
        if is_command(para):
            out.append(lead + printable_flow(para.rstrip()))
        elif para.lstrip().startswith("- "):  # a list item: wrapped under its own text
            bullet = para[: len(para) - len(para.lstrip()) + 2]
            out.extend(wrap_units(para[len(bullet) :], width, lead + bullet, rest + " " * len(bullet)))
        else:
            out.extend(wrap_units(para, width, lead, rest) if para.strip() else [lead.rstrip()])
    return out


# --- tables -----------------------------------------------------------------------------------------


def fit_columns(
    columns: Sequence[tuple[Any, ...]], width: int, drop_order: Sequence[str], keep: str = "", indent: int = 0
) -> list[int]:
    """Indices of the table columns shown at `width`. `columns` are (header, width, ...), two
    spaces between them, the rows indented by `indent`: the columns named in `drop_order` go
    one by one, first to last (never `keep`), until a row of the rest fits."""
    shown = list(range(len(columns)))
    for header in drop_order:
        if indent + sum(columns[i][1] for i in shown) + 2 * (len(shown) - 1) <= width:
            break
        if header != keep:
            shown = [i for i in shown if columns[i][0] != header]
    return shown


def left_out_note(headers: Sequence[str], width: int, hint: str) -> list[str]:
    """The line a table that left columns out to fit ends with (none when it left none out)."""
    if not headers:
        return []
    return wrap(f"Columns left out to fit {width} columns: {', '.join(headers)} ({hint}).", width)
