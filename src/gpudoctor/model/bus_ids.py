"""PCI bus ids in one form: "0000:9a:00.0" (domain:bus:device.function, lower-case hex).

Every source writes them differently: NVML "00000000:9A:00.0" (an 8-digit domain, upper case),
sysfs "0000:9a:00.0", torch's numbers, an old driver's Xid line "9a:00" (no domain). Facts,
subjects, plans and reports compare and show them in the one form made here, so that the same GPU
is the same key wherever it was read.

The rule:
- ``[domain:]bus:device.function`` with hex fields, any case, surrounding whitespace ignored, is
  written ``DDDD:BB:DD.F``: the domain with at least four digits (a VMD domain such as 0x10000 keeps
  all five, so it never collides with domain 0), bus and device with two, function with one. A
  missing domain is domain 0, as Linux numbers a machine's only PCI segment.
- Field values beyond what PCI allows (bus > 0xff, device > 0x1f, function > 7, domain > 32 bits),
  and anything else, are not a bus id: ``parse_bus_id`` raises ValueError, and
  ``normalise_bus_id`` keeps such text as written, only trimmed and lower-cased, so it still names
  (and matches) the same thing every time and nothing is invented from it.
"""

from __future__ import annotations

from ..context import excerpt
from ..lazy_re import LazyPattern

_BUS_ID = LazyPattern(
    r"(?:(?P<domain>[0-9a-f]{1,8}):)?(?P<bus>[0-9a-f]{1,2}):(?P<device>[0-9a-f]{1,2})\.(?P<function>[0-7])"
)


def parse_bus_id(text: str) -> str:
    """The canonical form of a PCI bus id; ValueError when the text is not one."""
    stripped = text.strip().lower()
    # fullmatch on a short string: an id has at most 16 characters, so a long text is refused unread
    match = _BUS_ID.fullmatch(stripped) if len(stripped) <= 16 else None
    if match is None or int(match.group("device"), 16) > 0x1F:
        raise ValueError(f"not a PCI bus id: {excerpt(text, 40)!r}")
    domain = int(match.group("domain") or "0", 16)
    bus, device, function = (int(match.group(k), 16) for k in ("bus", "device", "function"))
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function}"


def normalise_bus_id(text: str) -> str:
    """The canonical form of a PCI bus id, or text that is not one trimmed and lower-cased."""
    try:
        return parse_bus_id(text)
    except ValueError:
        return text.strip().lower()
