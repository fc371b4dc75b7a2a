"""The torch build advice as text, JSON and a script: what `fix --torch` prints."""

from __future__ import annotations

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
