"""The torch build advice as text, JSON and a script: what `fix --torch` prints."""

from __future__ import annotations

import datetime
import json

from gpudoctor.advice.torch_build import recommend
from gpudoctor.facts import load_snapshot
from gpudoctor.render.torch_build import render_json, render_shell, render_text
from tests.conftest import SNAPSHOTS

H200 = load_snapshot(SNAPSHOTS / "h200-x2.json")


def test_renderers():
    rec = recommend(H200)
    text = render_text(rec, "snapshot")
    assert "Recommended: torch 2.14.1 · cu130 (CUDA 13.0)" in text
    assert "pip install torch==2.14.1 torchvision==0.29.1 --index-url https://download.pytorch.org/whl/cu130" in text
    assert "uv pip install torch==2.14.1 torchvision==0.29.1 --torch-backend=cu130" in text
    shell = render_shell(rec).splitlines()
    live = [line for line in shell if not line.startswith("#")]
    assert live == ["pip install torch==2.14.1 torchvision==0.29.1 --index-url https://download.pytorch.org/whl/cu130"]
    data = json.loads(render_json(rec))
    assert data["variant"] == "cu130" and data["index_url"] == "https://download.pytorch.org/whl/cu130"
    assert data["exit_code"] == 0 and data["installed"]["ok"] is True


def test_every_form_says_how_old_the_release_data_is():
    rec = recommend(H200, today=datetime.date(2026, 12, 11))
    line = "torch releases up to 2.15.0, retrieved 2026-12-01 (10 days ago)"
    assert f"  data:    {line}\n" in render_text(rec)
    assert render_shell(rec).splitlines()[1] == f"# release data: {line}"
    data = json.loads(render_json(rec))
    assert data["release_data"] == {"retrieved": "2026-12-01", "age_days": 10, "newest_release": "2.15.0"}
