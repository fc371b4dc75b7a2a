"""What the helper modules share: reading a field of a fact view or table row, numbers in
strings converted only when short, and values quoted in error messages cut to a bound.

Numbers in strings: facts are untrusted, and Python refuses to convert a decimal string of
more than 4300 digits to an int (and takes quadratic time below that). No helper hands such a
string to int(): a version component, a compute capability or an architecture number longer
than MAX_NUMBER_DIGITS digits is a ValueError saying so, an index in CUDA_VISIBLE_DEVICES or
HIP_VISIBLE_DEVICES that long is simply out of range, and values quoted in error messages are
cut (see shown), so an error's text does not grow with the fact.
"""

from __future__ import annotations

from typing import Any

from ...inputs import MAX_INT_DIGITS
from ..views import FactUnavailable

# Digits a number in a fact string may have for a helper to convert it (2**64 has 20).
MAX_NUMBER_DIGITS = MAX_INT_DIGITS


def shown(value: Any, limit: int = 80) -> str:
    """repr() of a value for an error message, cut to about ``limit`` characters."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]!r}… ({len(value)} characters)"
    try:
        text = repr(value)
    except ValueError:  # an int past int_max_str_digits
        return f"<{type(value).__name__}>"
    return text if len(text) <= 2 * limit else text[: 2 * limit] + "…"


def small_int(text: str, what: str, base: int = 10) -> int:
    """int(text, base), refusing more than MAX_NUMBER_DIGITS digits with a clear ValueError."""
    digits = text.strip().lstrip("+-")
    if len(digits) > MAX_NUMBER_DIGITS:
        raise ValueError(f"{what} {shown(text)} has {len(digits)} digits, more than {MAX_NUMBER_DIGITS}")
    try:
        return int(text, base)
    except ValueError:
        raise ValueError(f"{what} {shown(text)} is not a number") from None


def as_int(value: Any, what: str) -> int:
    """int(value) of a number or a number's string, refusing a string too long to convert."""
    if isinstance(value, str):
        return small_int(value, what)
    return int(value)


def cut(text: str, limit: int = 80) -> str:
    """A fact's text for a message, cut to ``limit`` characters (the rest counted)."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def field_or_none(view: Any, name: str) -> Any:
    try:
        return view.get(name) if hasattr(view, "get") else view[name]
    except (FactUnavailable, KeyError):
        return None


def required_field(view: Any, name: str) -> Any:
    """Like field_or_none, but an unavailable fact raises FactUnavailable, which makes the rule unknown."""
    return view.get(name) if hasattr(view, "get") else view[name]
