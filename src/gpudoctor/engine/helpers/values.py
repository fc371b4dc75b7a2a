"""Helpers over plain values, strings and lists of facts: has_bits(), count_where(), ...; and the
few Python built-ins rules may call (len, any, min, ...), each bounded where the built-in is not."""

from __future__ import annotations

from typing import Any, Iterable

from .common import as_int, field_or_none, shown


def has_bits(value: Any, mask: Any) -> bool:
    """True when any bit of mask is set in value."""
    return bool(as_int(value, "has_bits() value") & as_int(mask, "has_bits() mask"))


def intersect(a: Iterable[Any], b: Iterable[Any]) -> list[Any]:
    """Items of a that are also in b, in a's order."""
    other = set(b)
    return [x for x in a if x in other]


def difference(a: Iterable[Any], b: Iterable[Any]) -> list[Any]:
    other = set(b)
    return [x for x in a if x not in other]


def cpulist(cpus: Iterable[int]) -> str:
    """CPU ids as a kernel-style list: [0,1,2,3,8] → "0-3,8"."""
    from ...probes.files import format_cpulist

    return format_cpulist(list(cpus))


def gib(value: float) -> float:
    """Bytes to GiB."""
    if isinstance(value, str) and len(value.strip()) > 100:
        raise ValueError(f"gib() of {shown(value)}: not a number of bytes")
    return float(value) / (1 << 30)


def startswith(text: str, prefix: str) -> bool:
    return str(text).startswith(prefix)


def contains(container: Any, item: Any) -> bool:
    """Substring test for strings, membership for lists."""
    return item in container


def lower(text: str) -> str:
    return str(text).lower()


def filter_by(items: Iterable[Any], field: str, value: Any) -> list[Any]:
    """The items whose field equals value (items whose field is unavailable are left out)."""
    return [item for item in items if field_or_none(item, field) == value]


def count_where(items: Iterable[Any], field: str, value: Any) -> int:
    """How many items have field == value (items whose field is unavailable do not count)."""
    return sum(1 for item in items if field_or_none(item, field) == value)


def values_of(items: Iterable[Any], field: str) -> list[Any]:
    """The known values of field across items."""
    out = []
    for item in items:
        v = field_or_none(item, field)
        if v is not None:
            out.append(v)
    return out


def env_set(env: Any, names: Iterable[str]) -> list[str]:
    """ "NAME=value" for each of names that is set in env (host.env), in the order given."""
    out = []
    for name in names:
        value = field_or_none(env, str(name))
        if value is not None:
            out.append(f"{name}={value}")
    return out


def bounded_round(number: Any, ndigits: Any = None) -> Any:
    """round(), with ndigits kept small: round(5, -10**12) would compute 10**(10**12)."""
    if ndigits is None:
        return round(number)
    if not isinstance(ndigits, int) or abs(ndigits) > 30:
        raise ValueError("round() takes at most 30 digits")
    return round(number, ndigits)


def bounded_sum(items: Iterable[Any], start: Any = 0) -> Any:
    """sum() of numbers only: summing lists copies them again at every step."""
    values = list(items)
    for value in [start, *values]:
        if not isinstance(value, (int, float)):
            raise TypeError(f"sum() adds numbers, not {type(value).__name__}")
    return sum(values, start)


def bounded_int(value: Any, *base: Any) -> int:
    """int(), refusing long digit strings (converting them is quadratic on Pythons without
    the int_max_str_digits limit)."""
    if isinstance(value, str) and len(value.strip()) > 100:
        raise ValueError(f"int() of a string longer than 100 characters ({len(value.strip())}): {shown(value)}")
    try:
        return int(value, *base)
    except ValueError as exc:
        raise ValueError(f"int() of {shown(value)}: {str(exc).split(':', 1)[0]}") from None
