"""A base for small immutable value classes, cheaper to define than a frozen dataclass (issue 16).

``@dataclass(frozen=True)`` writes its methods as source and compiles each with ``exec`` when the
class is created: about a millisecond a class on Python 3.12, paid by every run that imports the
module (check imports a dozen such classes). A subclass of :class:`Frozen` names its fields in
``__slots__`` (in the order of its ``__init__`` arguments) and sets them with
``object.__setattr__`` in its own ``__init__``; this base gives it what the dataclass gave:

- equality with an instance of the very same class, field by field in order (``NotImplemented``
  for anything else), and a hash of the fields, so equal values hash alike;
- ``ClassName(field=value, ...)`` as its repr;
- no assignment or deletion of an attribute once built (AttributeError, as the dataclass's
  FrozenInstanceError is one);
- copy, deepcopy and pickle, through its ``__init__``.
"""

from __future__ import annotations

from typing import Any


class Frozen:
    """Immutable value with the fields named by the subclass's ``__slots__``."""

    __slots__: tuple[str, ...] = ()

    def _values(self) -> tuple[Any, ...]:
        return tuple([getattr(self, name) for name in self.__slots__])

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._values() == other._values()  # type: ignore[attr-defined]
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{self.__class__.__qualname__}({fields})"

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, self._values())
