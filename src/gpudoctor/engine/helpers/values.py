"""Helpers over plain values, strings and lists of facts: has_bits(), count_where(), ...; and the
few Python built-ins rules may call (len, any, min, ...), each bounded where the built-in is not."""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from .common import as_int, field_or_none, shown


def has_bits(value: Any, mask: Any) -> bool:
    """True when any bit of mask is set in value (a number, or a number's text).

    Example: has_bits(96, 64) → True
    """
    return bool(as_int(value, "has_bits() value") & as_int(mask, "has_bits() mask"))


def intersect(a: Iterable[Any], b: Iterable[Any]) -> list[Any]:
    """The items of a that are also in b, in a's order.

    Example: intersect([0, 1, 2, 3], [2, 3, 4]) → [2, 3]
    """
    other = set(b)
    return [x for x in a if x in other]


def difference(a: Iterable[Any], b: Iterable[Any]) -> list[Any]:
    """The items of a that are not in b, in a's order.

    Example: difference([0, 1, 2, 3], [2, 3, 4]) → [0, 1]
    """
    other = set(b)
    return [x for x in a if x not in other]


def cpulist(cpus: Iterable[int]) -> str:
    """CPU ids as a kernel-style list, as numactl and taskset take them.

    Example: cpulist([0, 1, 2, 3, 8]) → "0-3,8"
    Example: cpulist(gpu.local_cpus) → "0-15,32-47"
    """
    from ...model.cpus import format_cpulist

    return format_cpulist(list(cpus))


def gib(value: float) -> float:
    """A number of bytes in GiB.

    Example: gib(85899345920) → 80.0
    """
    if isinstance(value, str) and len(value.strip()) > 100:
        raise ValueError(f"gib() of {shown(value)}: not a number of bytes")
    return float(value) / (1 << 30)


def startswith(text: str, prefix: str) -> bool:
    """True when the text (a value shown as text) begins with prefix.

    Example: startswith("2.4.1+cu121", "2.4") → True
    """
    return str(text).startswith(prefix)


def contains(container: Any, item: Any) -> bool:
    """Substring test for a string, membership test for a list.

    Example: contains("2.6.0.dev20250101", ".dev") → True
    Example: contains([1, 2], 2) → True
    """
    return item in container


def lower(text: str) -> str:
    """The text in lower case.

    Example: lower("NVIDIA H100") → "nvidia h100"
    """
    return str(text).lower()


def filter_by(items: Iterable[Any], field: str, value: Any) -> list[Any]:
    """The items whose field equals value (items whose field is unavailable are left out).

    Example: len(filter_by(gpus, "numa_node", 1)) → 1
    """
    return [item for item in items if field_or_none(item, field) == value]


def count_where(items: Iterable[Any], field: str, value: Any) -> int:
    """How many items have field == value (items whose field is unavailable do not count).

    Example: count_where(gpus, "vendor", "nvidia") → 2
    """
    return sum(1 for item in items if field_or_none(item, field) == value)


def values_of(items: Iterable[Any], field: str) -> list[Any]:
    """The known values of field across items, in order (unavailable ones left out).

    Example: values_of(gpus, "numa_node") → [0, 1]
    """
    out = []
    for item in items:
        v = field_or_none(item, field)
        if v is not None:
            out.append(v)
    return out


def env_set(env: Any, names: Iterable[str]) -> list[str]:
    """"NAME=value" for each of names that is set in env (host.env), in the order given.

    Example: env_set(host.env, ["CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS"]) → ["OMP_NUM_THREADS=8"]
    """
    return [f"{name}={value}" for name, value in _set_in(env, names)]


def env_names(env: Any, names: Iterable[str]) -> list[str]:
    """The names of those that are set in env (host.env), in the order given.

    Example: env_names(host.env, ["CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS"]) → ["OMP_NUM_THREADS"]
    """
    return [name for name, _ in _set_in(env, names)]


def _set_in(env: Any, names: Iterable[str]) -> Iterator[tuple[str, Any]]:
    """(name, value) of each of names that is set in env, in the order given."""
    for name in names:
        value = field_or_none(env, str(name))
        if value is not None:
            yield str(name), value


def shell_words(items: Iterable[Any]) -> str:
    """The items as the words of one shell command line, joined by spaces, each quoted where a
    shell would read it otherwise (a fix names only what the facts hold, ready to paste).

    Example: shell_words(["unset", "CUDA_PROFILE"]) → "unset CUDA_PROFILE"
    Example: shell_words(["echo", "a b"]) → "echo 'a b'"
    """
    import shlex

    return " ".join(shlex.quote(item if isinstance(item, str) else str(item)) for item in items)


def bounded_round(number: Any, ndigits: Any = None) -> Any:
    """A number rounded to ndigits decimals (at most 30), or to a whole number without them.

    The bound: round(5, -10**12) would compute 10**(10**12).

    Example: round(3.14159, 2) → 3.14
    """
    if ndigits is None:
        return round(number)
    if not isinstance(ndigits, int) or abs(ndigits) > 30:
        raise ValueError("round() takes at most 30 digits")
    return round(number, ndigits)


def bounded_sum(items: Iterable[Any], start: Any = 0) -> Any:
    """The sum of a list of numbers (and start).

    Numbers only: summing lists copies them again at every step.

    Example: sum([1, 2, 3]) → 6
    """
    values = list(items)
    for value in [start, *values]:
        if not isinstance(value, (int, float)):
            raise TypeError(f"sum() adds numbers, not {type(value).__name__}")
    return sum(values, start)


def bounded_int(value: Any, *base: Any) -> int:
    """A number or a number's text (in base, when given) as a whole number.

    Text longer than 100 characters is refused: converting it is quadratic on Pythons without the
    int_max_str_digits limit.

    Example: int("42") → 42
    """
    if isinstance(value, str) and len(value.strip()) > 100:
        raise ValueError(f"int() of a string longer than 100 characters ({len(value.strip())}): {shown(value)}")
    try:
        return int(value, *base)
    except ValueError as exc:
        raise ValueError(f"int() of {shown(value)}: {str(exc).split(':', 1)[0]}") from None


# The Python built-ins a rule may call, under their own names (registry.STATIC), each documented
# here for the helpers reference (docs/rules-helpers.md).


def length(items: Any) -> int:
    """The number of items in a list, or of characters in a string.

    Example: len([1, 2, 3]) → 3
    Example: len(gpus) → 2
    """
    return len(items)


def any_true(items: Iterable[Any]) -> bool:
    """True when any item of the list is true.

    Example: any([False, True]) → True
    """
    return any(items)


def all_true(items: Iterable[Any]) -> bool:
    """True when every item of the list is true (and for an empty list).

    Example: all([True, False]) → False
    """
    return all(items)


def smallest(*values: Any) -> Any:
    """The smallest of the arguments, or of the items of one list argument.

    Example: min(3, 1, 2) → 1
    """
    return min(*values)


def largest(*values: Any) -> Any:
    """The largest of the arguments, or of the items of one list argument.

    Example: max([3, 1, 2]) → 3
    """
    return max(*values)


def absolute(number: Any) -> Any:
    """A number without its sign.

    Example: abs(-4) → 4
    """
    return abs(number)


def as_text(value: Any) -> str:
    """A value as text.

    Example: str(12) → "12"
    """
    return str(value)


def in_order(items: Iterable[Any]) -> list[Any]:
    """The items of a list in ascending order.

    Example: sorted([3, 1, 2]) → [1, 2, 3]
    """
    return sorted(items)
