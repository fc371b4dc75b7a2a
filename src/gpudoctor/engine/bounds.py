"""How large a value a rule expression may build.

simpleeval caps the length of a string or list made by one `*` or `+` (100000) but not what
nesting multiplies: [[1]*99999]*99999 is cheap to build and 10**10 items to compare, print or
sort. So every value an operator, a list or tuple display or a helper call produces is measured
with its nested items and string lengths (value_cells), and integers stay small enough that
printing one is cheap.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simpleeval import IterableTooLong

from .views import FactView

# What one evaluation may build (see the module docstring).
MAX_VALUE_CELLS = 100_000
MAX_INT_BITS = 256


class LimitExceeded(IterableTooLong):  # type: ignore[misc]
    """An evaluation that would build something too large; the runner reports the rule as broken."""

_FLAT_KINDS = frozenset({bool, float, type(None)})


def too_big(limit: int) -> LimitExceeded:
    return LimitExceeded(f"the expression builds a value larger than {limit} items")


def check_int(value: int) -> None:
    if value.bit_length() > MAX_INT_BITS:
        raise LimitExceeded(f"the expression builds an integer larger than {MAX_INT_BITS} bits")


def value_cells(value: Any, limit: int = MAX_VALUE_CELLS, known: Mapping[int, tuple[Any, int]] | None = None) -> int:
    """Size of a value with every nested item counted (a shared item once per place it appears)
    and a string as its length; raises LimitExceeded past ``limit`` without measuring further.
    ``known`` maps id() to (value, size) of values already measured."""
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if known is not None:
            hit = known.get(id(item))
            if hit is not None and hit[0] is item:
                total += hit[1]
                if total > limit:
                    raise too_big(limit)
                continue
        if isinstance(item, (str, bytes)):
            total += 1 + len(item)
        elif isinstance(item, int) and not isinstance(item, bool):
            check_int(item)
            total += 1 + (item.bit_length() >> 6)  # printing a big number costs more
        elif isinstance(item, (list, tuple, set, frozenset)):
            total += 1 + len(item)
            if total > limit:
                raise too_big(limit)
            kinds = set(map(type, item))  # at C speed: most values are flat lists of numbers
            if kinds <= _FLAT_KINDS:
                continue
            if kinds <= {int, bool}:
                bits = list(map(int.bit_length, item))
                if max(bits) > MAX_INT_BITS:
                    raise LimitExceeded(f"the expression builds an integer larger than {MAX_INT_BITS} bits")
                total += sum(bits) >> 6
                continue
            if kinds == {str}:
                total += sum(map(len, item))
            else:
                total -= len(item)  # each item is counted when it is taken from the stack
                stack.extend(item)
        elif type(item) is dict or (isinstance(item, Mapping) and not isinstance(item, FactView)):
            total += 1
            stack.extend(item.keys())
            stack.extend(item.values())
        else:  # a fact view, a version, a float: small
            total += 1
        if total > limit:
            raise too_big(limit)
    return total
