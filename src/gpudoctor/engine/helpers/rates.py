"""Helpers over counter rates (counter_rates entries: gpu.nvlink_rates, port.rates): which ones
rise faster than a rule's limit, and how to say them."""

from __future__ import annotations

import math
from typing import Any, Iterable

from ..views import unrecorded
from .common import field_or_none


def _word(value: Any) -> str:
    return str(value)[:40]


# Entries named in one message, at most: the rest are counted.
MAX_SHOWN = 6


def rising(entries: Iterable[Any], counters: Iterable[Any], per_hour: Any) -> list[Any]:
    """The entries of the counters named whose rate per hour is above per_hour (reset counters and
    unknown rates are left out).

    Example: rising([], ["replay", "recovery"], 0) → []
    """
    if isinstance(per_hour, bool) or not isinstance(per_hour, (int, float)) or not math.isfinite(per_hour):
        raise TypeError("rising() per_hour must be a number")
    names = {str(c) for c in counters}
    out = []
    for entry in entries:
        # scanned without recording (a GPU has 72 link counters); the entries picked are read
        # through the view below, so the evidence names them and only them
        data = unrecorded(entry)
        if not hasattr(data, "get"):
            continue
        rate = data.get("per_hour")
        if data.get("counter") not in names or data.get("reset") is True:
            continue
        if isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate > per_hour:
            for name in ("link", "counter", "delta", "per_hour"):
                if name in data:
                    field_or_none(entry, name)
            out.append(entry)
    return out


def resets(entries: Iterable[Any]) -> list[Any]:
    """The entries of counters that went down between the two reads (reset: the driver reloaded or
    the counters were cleared), which give no rate.

    Example: resets([]) → []
    """
    out = []
    for entry in entries:
        data = unrecorded(entry)
        if hasattr(data, "get") and data.get("reset") is True:
            for name in ("link", "counter", "before", "after"):
                if name in data:
                    field_or_none(entry, name)
            out.append(entry)
    return out


def rates_text(entries: Iterable[Any]) -> str:
    """Counter rate entries in words: link (NVLink), counter, growth and rate per hour.

    An NVLink entry reads "link 3 crc_flit +120 (720/h)", an RDMA one "symbol_error +40 (240/h)",
    a counter that was reset "symbol_error reset (40 then 0)".

    Example: rates_text([]) → ""
    """
    parts = []
    items = list(entries)
    for entry in items[:MAX_SHOWN]:
        link = field_or_none(entry, "link")
        rate = field_or_none(entry, "per_hour")
        counter = _word(field_or_none(entry, "counter"))
        if field_or_none(entry, "reset") is True:
            before, after = field_or_none(entry, "before"), field_or_none(entry, "after")
            words = f"{counter} reset ({_word(before)} then {_word(after)})"
        else:
            known = isinstance(rate, (int, float)) and not isinstance(rate, bool)
            rate_text = f"{rate:.0f}/h" if known else "rate unknown"
            words = f"{counter} +{_word(field_or_none(entry, 'delta'))} ({rate_text})"
        parts.append(f"link {_word(link)} {words}" if link is not None else words)
    if len(items) > MAX_SHOWN:
        parts.append(f"and {len(items) - MAX_SHOWN} more")
    return ", ".join(parts)
