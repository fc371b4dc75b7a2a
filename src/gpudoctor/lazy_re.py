"""Regular expressions compiled when first used, not when their module is imported (issue 16).

Compiling a pattern is most of what it costs, and Python's compiler is slow (3.12 more than
3.11: a character class with wide ranges takes a millisecond, a short anchored pattern about
0.1 ms). A module imported on every run whose pattern serves only one branch (an AMD or Ascend
host, a malformed file, a tool's output that is not there) holds a :class:`LazyPattern` instead
of ``re.compile(...)``: the same source and flags, the same methods, compiled by the first call
that needs it. A pattern that every run uses gains nothing from this and may stay
``re.compile``.

Compiling twice from two threads is harmless: both get an equal pattern (``re`` caches it too).
"""

from __future__ import annotations

import re
import sys
from typing import AnyStr, Callable, Generic, Iterator


class LazyPattern(Generic[AnyStr]):
    """``re.compile(source, flags)`` on first use; :attr:`compiled` is the pattern itself."""

    __slots__ = ("source", "flags", "_compiled")

    def __init__(self, source: AnyStr, flags: int = 0) -> None:
        self.source: AnyStr = source
        self.flags = flags
        self._compiled: re.Pattern[AnyStr] | None = None

    @property
    def compiled(self) -> re.Pattern[AnyStr]:
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = re.compile(self.source, self.flags)
        return compiled

    @property
    def pattern(self) -> AnyStr:
        """The source, as ``re.Pattern.pattern`` (without compiling it)."""
        return self.source

    def __repr__(self) -> str:
        return f"LazyPattern({self.source!r}, {self.flags!r})"

    def match(self, string: AnyStr, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[AnyStr] | None:
        return self.compiled.match(string, pos, endpos)

    def fullmatch(self, string: AnyStr, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[AnyStr] | None:
        return self.compiled.fullmatch(string, pos, endpos)

    def search(self, string: AnyStr, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[AnyStr] | None:
        return self.compiled.search(string, pos, endpos)

    def finditer(self, string: AnyStr, pos: int = 0, endpos: int = sys.maxsize) -> Iterator[re.Match[AnyStr]]:
        return self.compiled.finditer(string, pos, endpos)

    def findall(self, string: AnyStr, pos: int = 0, endpos: int = sys.maxsize) -> list[AnyStr]:
        return self.compiled.findall(string, pos, endpos)

    def split(self, string: AnyStr, maxsplit: int = 0) -> list[AnyStr | None]:
        return self.compiled.split(string, maxsplit)

    def sub(self, repl: AnyStr | Callable[[re.Match[AnyStr]], AnyStr], string: AnyStr, count: int = 0) -> AnyStr:
        return self.compiled.sub(repl, string, count)
