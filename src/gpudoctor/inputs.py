"""Reading the files gpudoctor is handed: snapshots, reports, rule files, data tables, policies.

None of them is trusted (gpudoctor runs as root on every node; any of these may come from
someone else), so every one is read the same way:

- :func:`read_input` opens without following a FIFO's or device's blocking open (O_NONBLOCK),
  reads only a regular file, and at most a size cap, so a FIFO, /dev/zero or a 10 GB file is
  refused at once with a message naming the file;
- :func:`parse_json` is strict JSON: no NaN/Infinity (and no float that overflows to one), no
  integer longer than :data:`MAX_INT_DIGITS` digits, no nesting deeper than a bound, and lone
  UTF-16 surrogates (valid JSON escapes, invalid text) become U+FFFD so no renderer meets one;
- :func:`parse_yaml` is PyYAML's safe loader (libyaml when present) that also records the line
  of every mapping and list, refuses duplicate, non-scalar (``? [a, b]``) keys, over-long
  integers and non-finite floats, and refuses a document whose aliases expand past a bound
  (an alias bomb is a few hundred bytes that unfold into gigabytes when walked).

Every refusal is an :class:`InputError` with one line of text naming the file and, where it
has one, the line.
"""

from __future__ import annotations

import errno
import math
import os
import stat
from typing import Any

from .lazy_re import LazyPattern

# Caps on what gpudoctor reads of a file it is given. A real 8-GPU snapshot is about 200 KB (a
# 1000-CPU host's adds about 400 KB) and a report a few hundred KB; the largest shipped rule file
# or table is under 100 KB. The facts schema bounds its lists too (1024 GPUs, 4096 PCI devices).
MAX_SNAPSHOT_BYTES = 16 << 20
MAX_REPORT_BYTES = 16 << 20
MAX_YAML_BYTES = 4 << 20
# A number in any of these files is a count, a size or an id: 40 digits is far past 2**64
# and far short of the 4300 digits at which Python refuses to convert.
MAX_INT_DIGITS = 40
# Nesting deeper than this in a snapshot, report or rule file is not something gpudoctor wrote.
MAX_DEPTH = 64
# Values a YAML document may unfold into through its aliases (each list item, mapping entry and
# scalar counts one, each character of a string one per 64): far above any real rule file or
# table (the torch release table unfolds into about 6000) and far below what hurts.
MAX_YAML_EXPANDED = 2_000_000

_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)


class InputError(ValueError):
    """A file gpudoctor was given cannot be used. ``str()`` is one line naming the file and,
    where known, the line ("rules/x.yaml:12: YAML error: ..."), as compilers write it."""

    def __init__(self, path: str, message: str, line: int | None = None) -> None:
        super().__init__(f"{path}:{line}: {message}" if line else f"{path}: {message}")
        self.path = path
        self.line = line
        self.message = message


def read_input(path: str | os.PathLike[str], limit: int, what: str = "file", *, follow: bool = True) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; InputError for anything else.
    ``follow=False``: a symbolic link as the last component is refused, not followed."""
    shown = os.fspath(path)
    try:
        fd = os.open(path, _OPEN_FLAGS | (0 if follow else getattr(os, "O_NOFOLLOW", 0)))
    except FileNotFoundError:
        raise InputError(shown, "no such file") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        if not follow and isinstance(exc, OSError) and exc.errno == errno.ELOOP:
            raise InputError(shown, f"a symbolic link, not a regular file; give a {what} path") from None
        raise InputError(shown, f"cannot open {what}: {os_reason(exc)}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(shown, f"{file_kind(st.st_mode)}, not a regular file; give a {what} path")
        if st.st_size > limit:
            raise InputError(shown, f"{st.st_size} bytes, larger than a {what} can be ({limit} bytes)")
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # grew while being read
                raise InputError(shown, f"larger than a {what} can be ({limit} bytes)")
        return b"".join(chunks)
    except OSError as exc:
        raise InputError(shown, f"cannot read {what}: {os_reason(exc)}") from None
    finally:
        os.close(fd)


def read_text_input(path: str | os.PathLike[str], limit: int, what: str = "file", *, follow: bool = True) -> str:
    """A regular file's text (UTF-8, a leading BOM dropped); InputError for anything else."""
    raw = read_input(path, limit, what, follow=follow)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise InputError(os.fspath(path), f"not UTF-8 text (byte 0x{raw[exc.start]:02x})", line) from None
    return text[1:] if text.startswith("\ufeff") else text


# ---------------------------------------------------------------------------
# Strings and numbers


# Compiled when first needed: ASCII text (str.isascii() is a flag, not a scan) holds no surrogate.
_SURROGATE = LazyPattern("[\ud800-\udfff]")


def clean_string(text: str) -> str:
    """``text`` with lone UTF-16 surrogates replaced by U+FFFD (no encoder accepts them)."""
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


def parse_int(text: str, what: str = "number", max_digits: int = MAX_INT_DIGITS) -> int:
    """A decimal integer as a person or a config file writes one (ASCII digits, an optional sign,
    surrounding blanks); ValueError with a short message otherwise, never the interpreter's
    'exceeds the limit (4300 digits)'."""
    stripped = text.strip()
    digits = stripped[1:] if stripped[:1] in "+-" else stripped
    if not digits or not digits.isascii() or not digits.isdigit():
        raise ValueError(f"{what} {shown_excerpt(text)} is not a whole number")
    if len(digits) > max_digits:
        raise ValueError(f"{what} has {len(digits)} digits, more than {max_digits}")
    return int(stripped)


def shown_excerpt(text: str, limit: int = 60) -> str:
    """Outside text (file content, a link target, an option's value) as a message may quote it:
    at most ``limit`` characters, escaped and quoted as repr() does, so no control character or
    megabyte of garbage lands in a report or on a terminal."""
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def file_kind(mode: int) -> str:
    """What an st_mode is, in words for a message ("a FIFO")."""
    for test, name in (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "a special file"


def os_reason(exc: BaseException) -> str:
    """The system's words for an OSError ("No space left on device"), else the exception's text."""
    if isinstance(exc, OSError):
        return exc.strerror or errno.errorcode.get(exc.errno or 0, "") or str(exc)
    return str(exc)


# ---------------------------------------------------------------------------
# JSON


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(f"an integer with {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _json_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"the number {shown_excerpt(text)} is too large to be a float")
    return value


def _json_constant(name: str) -> float:
    raise _Refused(f"{name} is not JSON (a number must be finite)")


class _Refused(ValueError):
    pass


# json.loads keywords that make it strict JSON as gpudoctor reads it (also for the rule cache).
STRICT_JSON: dict[str, Any] = {"parse_int": _json_int, "parse_float": _json_float, "parse_constant": _json_constant}


def parse_json(text: str, origin: str, what: str = "JSON file", max_depth: int = MAX_DEPTH) -> Any:
    """Strict JSON; InputError naming ``origin`` (and the line where the parser knows it)."""
    import json

    try:
        data = json.loads(text, **STRICT_JSON)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise InputError(origin, f"not a {what}: invalid JSON at {where}: {exc.msg}") from None
    except _Refused as exc:
        raise InputError(origin, f"not a {what}: {exc}") from None
    except RecursionError:
        raise InputError(origin, f"not a {what}: nested too deeply to read") from None
    problem = _walk_check(data, max_depth, text)
    if problem:
        raise InputError(origin, f"not a {what}: {problem}")
    return data


def _walk_check(data: Any, max_depth: int, text: str) -> str | None:
    """Refuse nesting past ``max_depth``; replace lone surrogates in place (only walked for when
    the raw text has a surrogate escape at all, which real files never do)."""
    if "\\ud" in text or "\\uD" in text:  # JSON spells \u escapes only so (no lowered copy of the text)
        return _walk_fixing(data, max_depth)
    # One level of containers at a time, gathered by a comprehension per container: a report of
    # 100 KB holds some 80 000 values, and this walk was a third of reading one (report merge).
    level = [data] if isinstance(data, (dict, list)) else []
    depth = 0
    while level:
        if depth > max_depth:
            return f"nested too deeply (more than {max_depth} levels)"
        below: list[Any] = []
        for item in level:
            children = item.values() if type(item) is dict else item
            below += [child for child in children if isinstance(child, (dict, list))]
        level = below
        depth += 1
    return None


def _walk_fixing(data: Any, max_depth: int) -> str | None:
    """_walk_check for a text with a surrogate escape: each string is cleaned as it is passed."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            return f"nested too deeply (more than {max_depth} levels)"
        if isinstance(item, dict):
            for key in [k for k in item if not k.isascii() and _SURROGATE.search(k)]:
                item[clean_string(key)] = item.pop(key)
            for key, value in item.items():
                if isinstance(value, str):
                    item[key] = clean_string(value)
            stack.extend((child, depth + 1) for child in item.values() if isinstance(child, (dict, list)))
        elif isinstance(item, list):
            for i, value in enumerate(item):
                if isinstance(value, str):
                    item[i] = clean_string(value)
            stack.extend((child, depth + 1) for child in item if isinstance(child, (dict, list)))
    return None


def load_json_file(path: str | os.PathLike[str], limit: int, what: str, *, follow: bool = True) -> Any:
    """read_text_input + parse_json."""
    return parse_json(read_text_input(path, limit, what, follow=follow), os.fspath(path), what)


# ---------------------------------------------------------------------------
# YAML


class LineDict(dict):  # type: ignore[type-arg]
    """A YAML mapping that knows the line it starts on."""

    line: int = 0


class LineList(list):  # type: ignore[type-arg]
    """A YAML list that knows where it and each of its items start, so that a problem with any
    item (even a scalar or a nested list, which cannot carry a line themselves) has a line."""

    line: int = 0
    item_lines: tuple[int, ...] = ()


def _loader_class() -> type:
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    refuse = yaml.constructor.ConstructorError

    class LineLoader(base):  # type: ignore[misc, valid-type]
        def construct_mapping(self, node: Any, deep: bool = False) -> LineDict:
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    raise refuse(None, None, "a key must be a plain value, not a list or mapping", key_node.start_mark)
                key = self.construct_object(key_node, deep=True)
                if key in seen:
                    first = seen[key] + 1
                    raise refuse(None, None, f"duplicate key {key!r} (first at line {first})", key_node.start_mark)
                seen[key] = key_node.start_mark.line
            mapping = LineDict(super().construct_mapping(node, deep=True))
            mapping.line = node.start_mark.line + 1
            return mapping

        def construct_sequence(self, node: Any, deep: bool = False) -> LineList:
            sequence = LineList(super().construct_sequence(node, deep=True))
            sequence.line = node.start_mark.line + 1
            sequence.item_lines = tuple(item.start_mark.line + 1 for item in node.value)
            return sequence

        def construct_yaml_int(self, node: Any) -> int:
            digits = str(node.value).replace("_", "").lstrip("+-")
            if len(digits) > MAX_INT_DIGITS:
                problem = f"an integer with {len(digits)} digits (at most {MAX_INT_DIGITS})"
                raise refuse(None, None, problem, node.start_mark)
            value: int = super().construct_yaml_int(node)
            return value

        def construct_yaml_float(self, node: Any) -> float:
            value: float = super().construct_yaml_float(node)
            if not math.isfinite(value):
                raise refuse(None, None, f"{node.value!r} is not a finite number", node.start_mark)
            return value

        def construct_yaml_str(self, node: Any) -> str:
            return clean_string(super().construct_yaml_str(node))

    for tag, method in (
        ("map", LineLoader.construct_mapping),
        ("seq", LineLoader.construct_sequence),
        ("int", LineLoader.construct_yaml_int),
        ("float", LineLoader.construct_yaml_float),
        ("str", LineLoader.construct_yaml_str),
    ):
        LineLoader.add_constructor(f"tag:yaml.org,2002:{tag}", method)
    return LineLoader


_LOADER: type | None = None


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


_FLOW_BRACKETS = LazyPattern(r"[\[\]{}]")


def _flow_nesting_line(text: str, max_depth: int) -> int | None:
    """The line where flow brackets ([ {) first nest deeper than ``max_depth``, else None.

    Counted before the parser sees the text: libyaml builds without a nesting limit (the H200
    host's PyYAML) recurse once per level, and 100 000 "[" crashed the interpreter outright
    instead of raising. Brackets inside quoted strings count too, which can only refuse early
    (no rule, policy or profile nests anything near 64 deep)."""
    depth = 0
    for match in _FLOW_BRACKETS.finditer(text):
        if match.group() in "[{":
            depth += 1
            if depth > max_depth:
                return text.count("\n", 0, match.start()) + 1
        elif depth:
            depth -= 1
    return None


def parse_yaml(text: str, origin: str) -> Any:
    """One YAML document, safely; InputError "<origin>: line N: <problem>" on any problem."""
    import yaml

    deep = _flow_nesting_line(text, MAX_DEPTH)
    if deep is not None:
        raise InputError(origin, f"YAML error: nesting deeper than {MAX_DEPTH} levels", deep)

    global _LOADER
    if _LOADER is None:
        _LOADER = _loader_class()
    try:
        from . import yaml_tree

        loader = _LOADER(text)  # what yaml.load does, with gpudoctor.yaml_tree's builder first
        try:
            node = loader.get_single_node()
            data = None if node is None else _built(node, loader)
            if data is not yaml_tree.SLOW:
                return data  # within the size and depth limits: yaml_tree checked them
            data = loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or str(exc)
        raise InputError(origin, f"YAML error: {_one_line(problem)}", mark.line + 1 if mark else None) from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow; has no mark, only a position
        line = text.count("\n", 0, exc.position) + 1 if isinstance(exc.position, int) else None
        char = chr(exc.character) if isinstance(exc.character, int) else exc.character
        problem = f"character {char!r} is not allowed in YAML" if char is not None else exc.reason
        raise InputError(origin, f"YAML error: {_one_line(str(problem))}", line) from None
    except yaml.YAMLError as exc:
        raise InputError(origin, f"YAML error: {_one_line(str(exc))}") from None
    except RecursionError:
        raise InputError(origin, "YAML error: nested too deeply to read") from None
    except (ValueError, TypeError, LookupError, AttributeError):
        # PyYAML's constructors on a value an explicit tag does not fit ("!!bool maybe", "!!int ''",
        # "!!set [1]", "!!timestamp x") raise these, not a YAMLError
        problem = "a value does not fit its explicit tag (!!int, !!bool, !!set, ...)"
        raise InputError(origin, f"YAML error: {problem}") from None
    too_big = _expansion_problem(data, MAX_YAML_EXPANDED, MAX_DEPTH)
    if too_big:
        raise InputError(origin, too_big)
    return data


def _built(node: Any, loader: Any) -> Any:
    """The document's value made by yaml_tree.Builder, or yaml_tree.SLOW (PyYAML's constructor must)."""
    import yaml

    from .yaml_tree import Builder

    kinds = (yaml.ScalarNode, yaml.SequenceNode, yaml.MappingNode)
    return Builder(loader, kinds, (LineDict, LineList), clean_string, MAX_YAML_EXPANDED, MAX_DEPTH).document(node)


def _expansion_problem(data: Any, limit: int, max_depth: int) -> str | None:
    """What is wrong with the size or depth of a constructed YAML document, if anything.

    The loader builds an alias as a second reference to the same object, so the document is
    small in memory however its aliases nest; every consumer that walks it (validation,
    rendering, JSON output) pays for the full unfolding. That unfolded size is computed here
    without unfolding, once per distinct list or mapping (post-order, memoised by identity)."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    containers = (dict, list)
    # (container, depth, expanded?) — visited twice: once to push children, once to sum them
    stack: list[tuple[Any, int, bool]] = [(data, 0, False)] if isinstance(data, containers) else []
    while stack:
        item, depth, expanded = stack.pop()
        key = id(item)
        children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
        if expanded:
            on_path.discard(key)
            total = 1
            for child in children:
                if isinstance(child, containers):
                    total += sizes[id(child)]
                elif isinstance(child, str):
                    total += 1 + len(child) // 64
                else:
                    total += 1
            if total > limit:
                return f"the document unfolds into more than {limit} values through its aliases; refused"
            sizes[key] = total
            continue
        if key in sizes:
            continue
        if key in on_path:  # a recursive alias ("&a [*a]"): infinite when unfolded
            return "the document refers to itself through an alias; refused"
        if depth > max_depth:
            return f"nested too deeply (more than {max_depth} levels)"
        on_path.add(key)
        stack.append((item, depth, True))
        below = depth + 1
        for child in children:
            if isinstance(child, containers):
                stack.append((child, below, False))
    return None


def load_yaml_file(path: str | os.PathLike[str], what: str, limit: int = MAX_YAML_BYTES) -> Any:
    """read_text_input + parse_yaml."""
    return parse_yaml(read_text_input(path, limit, what), os.fspath(path))


def type_name(value: Any) -> str:
    """The kind of a parsed value in the words of a file's author (never an internal class)."""
    for kind, name in ((bool, "a boolean"), (dict, "a mapping"), (list, "a list"), (str, "a string")):
        if isinstance(value, kind):
            return name
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    return "null" if value is None else type(value).__name__


__all__: list[str] = [
    "InputError",
    "LineDict",
    "LineList",
    "MAX_INT_DIGITS",
    "clean_string",
    "load_json_file",
    "load_yaml_file",
    "parse_int",
    "parse_json",
    "parse_yaml",
    "read_input",
    "read_text_input",
    "shown_excerpt",
    "STRICT_JSON",
    "file_kind",
    "os_reason",
    "type_name",
    "yaml_line",
]


def yaml_line(data: Any, where: str) -> int | None:
    """Line of the innermost mapping or list on a dotted schema path ('expect.gpus', 'gpus[1].nic')
    in YAML read with lines (a policy, a profile)."""
    line = getattr(data, "line", None)
    node = data
    for part in where.replace("[", ".").replace("]", "").split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            break
        line = getattr(node, "line", line)
    return line
