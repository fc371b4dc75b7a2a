"""The one PCI bus id form: every source's spelling of the same GPU gives the same key."""

from __future__ import annotations

import pytest

from gpudoctor.model.bus_ids import normalise_bus_id, parse_bus_id

CANONICAL = [
    ("0000:9a:00.0", "0000:9a:00.0"),  # sysfs, already canonical
    ("00000000:9A:00.0", "0000:9a:00.0"),  # NVML: an 8-digit domain, upper case
    ("0000:9A:00.0", "0000:9a:00.0"),
    ("  0000:18:00.0\n", "0000:18:00.0"),  # whitespace around is ignored
    ("9a:00.0", "0000:9a:00.0"),  # no domain: the machine's only segment, 0
    ("0:9a:0.0", "0000:9a:00.0"),  # short fields are padded
    ("10000:c1:1f.7", "10000:c1:1f.7"),  # a VMD domain keeps all five digits ...
    ("00010000:C1:1F.7", "10000:c1:1f.7"),  # ... whichever source wrote it
    ("ffffffff:ff:1f.7", "ffffffff:ff:1f.7"),  # the largest of each field
]

NOT_BUS_IDS = [
    "",
    "   ",
    "garbage",
    "0000:9a:00",  # no function
    "0000:9a:00.8",  # function > 7
    "0000:9a:20.0",  # device > 0x1f
    "0000:100:00.0",  # bus > 0xff
    "100000000:9a:00.0",  # domain wider than 32 bits
    "0000:9a:00.0.0",
    "0000:9g:00.0",
    "+000:9a:00.0",
    "0000:9a:00.0 junk",
    "0000:9a:00.0" * 1000,
]


@pytest.mark.parametrize(("text", "want"), CANONICAL)
def test_every_spelling_of_a_bus_id_gives_the_canonical_form(text: str, want: str) -> None:
    assert parse_bus_id(text) == want
    assert normalise_bus_id(text) == want
    assert parse_bus_id(want) == want  # canonical is a fixed point


@pytest.mark.parametrize("text", NOT_BUS_IDS)
def test_what_is_not_a_bus_id_is_refused_or_kept_as_written(text: str) -> None:
    with pytest.raises(ValueError, match="not a PCI bus id"):
        parse_bus_id(text)
    assert normalise_bus_id(text) == text.strip().lower()


def test_the_refusal_quotes_a_long_text_only_in_part() -> None:
    with pytest.raises(ValueError) as info:
        parse_bus_id("x" * 100_000)
    assert len(str(info.value)) < 200
