"""Compare an output with its golden file, byte for byte (GPUDOCTOR_UPDATE_GOLDEN=1 rewrites it)."""

from __future__ import annotations

import os
from pathlib import Path

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
# 2026-12-01T12:00:00Z: a fixed clock for every golden report, so that timestamps (generated_at)
# and the NFD expiry are the same every run
EPOCH = 1796126400.0


def check(path: Path, actual: str) -> None:
    if os.environ.get("GPUDOCTOR_UPDATE_GOLDEN"):
        path.write_text(actual, encoding="utf-8")
        return
    assert path.exists(), f"no golden file {path.name}; run with GPUDOCTOR_UPDATE_GOLDEN=1"
    expected = path.read_text(encoding="utf-8")
    assert actual == expected, f"{path.name} differs from the golden output (GPUDOCTOR_UPDATE_GOLDEN=1 to update)"
