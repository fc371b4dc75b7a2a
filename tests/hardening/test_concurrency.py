"""Many gpudoctor processes at once writing their reports into one directory (scripts/load_test.py
at a size a test run affords): all finish, no report is lost or half-written, and a report that
several processes write in turn is never seen half-written by a reader."""

from __future__ import annotations

import importlib.util
import json
import os
import stat
from pathlib import Path
from typing import Any

from tests.conftest import HOSTS, REPO


def load_test_module() -> Any:
    spec = importlib.util.spec_from_file_location("gpudoctor_load_test", REPO / "scripts" / "load_test.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sixteen_processes_at_once(tmp_path: Path) -> None:
    load = load_test_module()
    out = tmp_path / "reports"
    env = load.environment(tmp_path / "cache")  # cold rule cache: every process races to store it
    result = load.run_load(16, str(HOSTS / "healthy-2gpu"), out, True, [], env)
    assert load.verify(result, out) == []
    assert result["codes"] == [0] * 16
    reports = sorted(out.iterdir())
    assert [p.name for p in reports] == sorted([f"report-{k}.json" for k in range(0, 16, 2)] + ["report-shared.json"])
    for path in reports:
        report = json.loads(path.read_text())
        assert report["verdict"] == "pass" and report["exit_code"] == 0
        # readable by whoever collects the reports, as a plain write would leave it
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~current_umask()
    assert result["reader"].reads > 0 and result["reader"].bad == []


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_the_script_reports_and_exits_0(tmp_path: Path, capsys: Any) -> None:
    load = load_test_module()
    assert load.main(["-n", "4", "--dir", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "4 at once, all finished" in out and "one run alone" in out and "none lost" in out

