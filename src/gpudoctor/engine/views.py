"""Read-only views of the facts for rule expressions, recording every leaf they hand out.

A fact path that resolves to an unavailable fact raises :class:`FactUnavailable`; the runner
turns that into an "unknown" result. Every leaf read is recorded as evidence.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..facts import Unavailable

# Values handed out as they are (no view needed).
PLAIN_TYPES = frozenset({bool, int, float, str, bytes, type(None)})


class FactUnavailable(Exception):
    def __init__(self, path: str, unavailable: Unavailable) -> None:
        super().__init__(f"{path}: {unavailable}")
        self.path = path
        self.unavailable = unavailable


class FactView:
    """Read-only view of a facts dict that records what it hands out."""

    __slots__ = ("_data", "_path", "_reads")

    # Maps whose absent keys are a known "not set" (None), not a missing fact.
    OPEN_MAPS = frozenset({"host.env"})

    def __init__(self, data: Mapping[str, Any], path: str, reads: list[tuple[str, Any]]) -> None:
        self._data = data
        self._path = path
        self._reads = reads

    def child(self, name: str) -> Any:
        path = f"{self._path}.{name}" if self._path else name
        data = self._data
        if name in data:
            value = data[name]
            if type(value) in PLAIN_TYPES:  # most facts (wrap's first case, without the call)
                self._reads.append((path, value))
                return value
            return wrap(value, path, self._reads)
        if self._path in self.OPEN_MAPS:
            self._reads.append((path, None))
            return None
        missing = Unavailable("not_found", "not in the facts (older snapshot or probe did not report it)")
        self._reads.append((path, missing))
        raise FactUnavailable(path, missing)

    def get(self, name: str) -> Any:
        """For helper functions: like attribute access in an expression."""
        return self.child(name)

    def __repr__(self) -> str:
        return f"<facts {self._path}>"


def unrecorded(value: Any) -> Any:
    """The data behind a view, for a helper that scans many entries to pick a few: what it reads
    this way is not evidence; it reads the entries it picks through the view, so they are."""
    return value._data if isinstance(value, FactView) else value


def wrap(value: Any, path: str, reads: list[tuple[str, Any]]) -> Any:
    kind = type(value)
    if kind in PLAIN_TYPES:  # most facts: no slower abstract-class checks
        reads.append((path, value))
        return value
    if kind is dict:  # a section, a subject, a nested group (what the isinstance below would find)
        return FactView(value, path, reads)
    if isinstance(value, Unavailable):
        reads.append((path, value))
        raise FactUnavailable(path, value)
    if isinstance(value, (dict, Mapping)):  # dict first: the common case, without the ABC machinery
        return FactView(value, path, reads)
    if isinstance(value, list) and value and isinstance(value[0], Mapping):
        return [FactView(v, f"{path}[{i}]", reads) for i, v in enumerate(value)]
    reads.append((path, value))
    return value


def section_views(facts: Mapping[str, Any], sections: Sequence[str], reads: list[tuple[str, Any]]) -> dict[str, Any]:
    """Each facts section as a view; an unavailable section makes every path into it unavailable."""
    names: dict[str, Any] = {}
    for section in sections:
        value = facts.get(section, Unavailable("not_found", f"no {section} section in the facts"))
        if isinstance(value, Unavailable):
            names[section] = UnavailableSection(section, value, reads)
        else:
            names[section] = wrap(value, section, reads)
    return names


class UnavailableSection(FactView):
    """A whole section that could not be read: any path into it is unavailable."""

    __slots__ = ("_unavailable",)

    def __init__(self, section: str, unavailable: Unavailable, reads: list[tuple[str, Any]]) -> None:
        super().__init__({}, section, reads)
        self._unavailable = unavailable

    def child(self, name: str) -> Any:
        path = f"{self._path}.{name}"
        self._reads.append((path, self._unavailable))
        raise FactUnavailable(path, self._unavailable)
