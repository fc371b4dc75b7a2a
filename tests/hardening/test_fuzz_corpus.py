"""Replay the committed fuzz regression corpus (fuzz_corpus/, see its README): every input that
once broke gpudoctor goes through the same checker as the property-based tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hardening.fuzzing import CHECKERS

CORPUS = Path(__file__).resolve().parent / "fuzz_corpus"
CASES = sorted(p for p in CORPUS.rglob("*") if p.is_file() and p.parent != CORPUS)


def test_corpus_is_laid_out_by_checker() -> None:
    assert len(CASES) >= 20
    unknown = {p.parent.name for p in CASES} - set(CHECKERS)
    assert not unknown, f"directories without a checker: {unknown}"


@pytest.mark.parametrize("path", CASES, ids=[f"{p.parent.name}/{p.name}" for p in CASES])
def test_replay(path: Path) -> None:
    CHECKERS[path.parent.name](path.read_bytes())
