"""scripts/refresh_torch_releases.py against recorded copies of the pages it reads (never the network).

tests/scripts/data/torch_releases/ holds PyPI's project pages of torch, torchvision and torchaudio
as served on 2026-12-01, trimmed (each says so in its "_recorded" key), a PEP 503 page recorded from
pypi.org/simple/torch/, and the cu124 wheel index's torch 2.5.1 links as quoted in an issue (that
file says why: PyTorch's wheel index cannot be reached from here, so the index part is untested
against a live copy). The synthetic pages below are made up in this file and named so.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import re
import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from gpudoctor.tables import read_table
from tests.conftest import REPO

DATA = Path(__file__).parent / "data" / "torch_releases"
TODAY = dt.date(2026, 12, 1)


def _load():
    spec = importlib.util.spec_from_file_location(
        "refresh_torch_releases", REPO / "scripts" / "refresh_torch_releases.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


R = _load()


@pytest.fixture
def pages_dir(tmp_path):
    """The recorded pages, with the PEP 503 page from pypi.org standing in for the cpu index."""
    d = tmp_path / "pages"
    shutil.copytree(DATA, d)
    shutil.copy(DATA / "pypi.org_simple_torch", d / "download.pytorch.org_whl_cpu_torch")
    return d


@pytest.fixture
def table(tmp_path):
    """The built-in table as it was before its refresh of 2026-12-01: 2.15 without companion pins."""
    text = (REPO / "rules" / "data" / "torch_releases.yaml").read_text()
    pins = '    torchvision: "0.29.2"\n    torchaudio: "2.11.1"\n'
    assert pins in text
    text = text.replace(pins, "    torchvision: null\n    torchaudio: null\n")
    text = re.sub(r'(?m)^retrieved: "[0-9-]+"$', 'retrieved: "2026-11-30"', text)
    path = tmp_path / "torch_releases.yaml"
    path.write_text(text)
    return path


# ---------------------------------------------------------------------------- parsers


def test_the_pypi_project_page_gives_pythons_upload_times_and_the_newest_requires_dist():
    releases, newest = R.parse_project((DATA / "pypi.org_pypi_torch_json").read_bytes())
    assert newest == "2.15.0" and set(releases) == {"2.13.0", "2.14.0", "2.14.1", "2.15.0"}
    r = releases["2.15.0"]
    assert sorted(r.pythons, key=float) == ["3.11", "3.12", "3.13", "3.14", "3.15"]  # cp314t/cp315t are not counted
    assert r.uploaded.date() == dt.date(2026, 10, 28)
    assert R.cuda_variant_of(r.requires) == "cu132"  # cuda-toolkit[...]==13.2.2; platform_system == "Linux"
    assert releases["2.14.1"].requires is None  # only the newest release's Requires-Dist is on the page


def test_a_pep503_page_gives_the_file_names_and_the_cpu_wheels_per_release():
    names = R.parse_simple_index((DATA / "pypi.org_simple_torch").read_bytes())
    assert len(names) == 28 and "torch-2.15.0-cp312-cp312-manylinux_2_28_x86_64.whl" in names
    assert R.index_releases(names, "cpu") == {"2.15.0": {"3.11", "3.12", "3.13", "3.14", "3.15"}}
    assert R.index_releases(names, "cu130") == {}


def test_the_wheel_index_names_carry_the_variant_as_local_version():
    names = R.parse_simple_index((DATA / "download.pytorch.org_whl_cu124_torch").read_bytes())
    assert R.index_releases(names, "cu124") == {"2.5.1": {"3.9", "3.10", "3.11", "3.12", "3.13"}}
    assert R.index_releases(names, "cpu") == {}  # the plain 2.5.1 wheels there are aarch64


@pytest.mark.parametrize(
    "requires, variant",
    [
        (['cuda-toolkit[cublas,cudart]==13.0.2; platform_system == "Linux"'], "cu130"),
        (['nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux" and platform_machine == "x86_64"'], "cu128"),
        (['nvidia-cuda-runtime-cu12==12.1.105; platform_system == "Windows"'], None),
        (["filelock", "sympy>=1.13"], None),
        (None, None),
    ],
)
def test_the_pypi_default_build_is_read_from_the_linux_cuda_pin(requires, variant):
    assert R.cuda_variant_of(requires) == variant


def test_the_companion_torch_pin():
    assert str(R.torch_spec(["numpy", "torch>=2.14.0", "pillow"])) == ">=2.14.0"
    assert str(R.torch_spec(["torch==2.13.0"])) == "==2.13.0"
    assert R.torch_spec(["torchvision"]) is None and R.torch_spec(None) is None


# ---------------------------------------------------------------------------- the refresh


def test_refresh_from_the_recorded_pages_fills_the_pins_and_keeps_every_hand_written_line(table, pages_dir):
    old, new, plan, pages = R.refresh(table, R.dir_fetch(pages_dir), TODAY)
    data = yaml.safe_load(new)
    row = data["rows"]["2.15"]
    assert (row["torchvision"], row["torchaudio"], row["uploaded"]) == ("0.29.2", "2.11.1", "2026-10-28")
    assert data["rows"]["2.14"]["torchvision"] == "0.29.1"  # hand-written pins are kept
    assert data["retrieved"] == "2026-12-01"
    # cu130 of 2.15 stays a lead: its index was not read (not recorded: a 404 here)
    assert row["variants"]["cu130"]["lead"] is True and "whl/cu130" in pages.unreached
    assert "torch 2.14.1" in pages.unreached and "not found" in pages.unreached["torch 2.14.1"]
    # every line of the old text that no change names is still there, comments and anchors included
    changed = {(c.row, c.key) for c in plan.changes}
    assert ("2.15", "torchvision") in changed
    lost = Counter(old.splitlines()) - Counter(new.splitlines())
    assert sorted(lost.elements()) == ["    torchaudio: null", "    torchvision: null", 'retrieved: "2026-11-30"']
    assert "# Release Compatibility Matrix" in new and "&gfx_rocm60" in new
    table.write_text(new)
    assert read_table(table)["rows"]["2.15"]["torchvision"] == "0.29.2"  # gpudoctor reads it


def test_an_index_host_that_does_not_answer_changes_nothing_and_is_tried_once(table, tmp_path):
    d = tmp_path / "pypi-only"
    d.mkdir()
    for f in DATA.glob("pypi.org_*"):
        shutil.copy(f, d / f.name)
    _, _, _, pages = R.refresh(table, R.dir_fetch(d), TODAY)
    tried = [k for k, v in pages.unreached.items() if k.startswith("whl/") and "not reached" in v]
    assert len(tried) == 1 and all(
        "not tried" in v for k, v in pages.unreached.items() if k.startswith("whl/") and k not in tried
    )
    assert pages.index == {}


SYNTHETIC_TABLE = """\
# made up for this test
name: torch_releases
description: d
source: s
retrieved: "2026-01-01"
notes: |
  hand-written notes
rows:
  "2.5":
    latest: "2.5.0"
    released: "2024-10"
    python: ["3.9"]
    pypi_default: cu124
    torchvision: "0.20.0"
    torchaudio: null
    variants:
      cpu: {}
      cu124: {arch: "9.0", lead: true, source: "a user's install line"}
      cu121: {arch: "9.0", source: "hand"}
      rocm6.2: {gfx: &g [gfx942], source: "x"}
    source: "hand"
"""


def _synthetic_pages(d: Path) -> None:
    """Made-up PyPI pages: torch 2.5.0 and 2.6.0 (a release the table lacks), torchvision 0.21.0."""

    def files(version, day):
        return [
            {
                "filename": f"torch-{version}-cp{p}-cp{p}-manylinux1_x86_64.whl",
                "upload_time_iso_8601": f"{day}T10:00:00Z",
            }
            for p in ("39", "312")
        ]

    torch = {
        "info": {
            "version": "2.6.0",
            "requires_dist": ['nvidia-cuda-runtime-cu12==12.4.127; platform_system == "Linux"'],
        },
        "releases": {"2.5.0": files("2.5.0", "2024-10-17"), "2.6.0": files("2.6.0", "2025-01-29"), "2.6.0rc1": []},
    }
    vision = {
        "info": {"version": "0.21.0", "requires_dist": ["torch==2.6.0"]},
        "releases": {
            "0.21.0": [{"filename": "torchvision-0.21.0.tar.gz", "upload_time_iso_8601": "2025-01-29T11:00:00Z"}]
        },
    }
    (d / "pypi.org_pypi_torch_json").write_text(json.dumps(torch))
    (d / "pypi.org_pypi_torchvision_json").write_text(json.dumps(vision))
    (d / "pypi.org_pypi_torchaudio_json").write_text('{"releases": {}}')
    shutil.copy(DATA / "download.pytorch.org_whl_cu124_torch", d / "download.pytorch.org_whl_cu124_torch")


def test_a_lead_listed_on_its_index_is_verified_and_a_new_release_gets_a_row_without_arch_lists(tmp_path):
    d = tmp_path / "pages"
    d.mkdir()
    _synthetic_pages(d)
    path = tmp_path / "t.yaml"
    path.write_text(SYNTHETIC_TABLE)
    _, new, plan, pages = R.refresh(path, R.dir_fetch(d), TODAY, variants=["cu124", "cu121"])
    data = yaml.safe_load(new)
    # The index was the quoted cu124 page, which lists 2.5.1 only: 2.5.0's table row is about 2.5.x.
    cu124 = data["rows"]["2.5"]["variants"]["cu124"]
    assert "lead" not in cu124 and "verified: whl/cu124 lists torch 2.5.1 (2026-12-01)" in cu124["source"]
    assert data["rows"]["2.5"]["python"] == ["3.9", "3.12"]
    assert data["rows"]["2.5"]["variants"]["rocm6.2"]["gfx"] == ["gfx942"]  # the anchored line is untouched
    new_row = data["rows"]["2.6"]
    assert new_row["latest"] == "2.6.0" and new_row["torchvision"] == "0.21.0" and new_row["torchaudio"] is None
    assert new_row["variants"] == {
        "cu124": {"arch": None, "source": "the PyPI wheel of torch 2.6.0 (2026-12-01); arch list not read"}
    }
    assert "hand-written notes" in new and "# made up for this test" in new
    assert pages.unreached["whl/cu121"].endswith("not found")


def test_dry_run_prints_the_diff_and_writes_nothing_then_write_writes(table, pages_dir, capsys):
    before = table.read_text()
    assert R.main(["--table", str(table), "--from", str(pages_dir), "--today", "2026-12-01"]) == 0
    out = capsys.readouterr().out
    assert '+    torchvision: "0.29.2"' in out and "not read:" in out and table.read_text() == before
    assert R.main(["--table", str(table), "--from", str(pages_dir), "--today", "2026-12-01", "--write"]) == 0
    assert 'torchvision: "0.29.2"' in table.read_text()


def test_a_garbage_page_is_an_error_line_not_a_traceback(table, tmp_path, capsys):
    d = tmp_path / "garbage"
    d.mkdir()
    (d / "pypi.org_pypi_torch_json").write_bytes(b"\x00<html>not json")
    assert R.main(["--table", str(table), "--from", str(d)]) == 2
    assert capsys.readouterr().err.startswith("refresh_torch_releases: ")


def test_reads_are_bounded(tmp_path):
    (tmp_path / "pypi.org_big").write_bytes(b"x" * 100)
    with pytest.raises(R.FetchError, match="larger than"):
        R.dir_fetch(tmp_path)("https://pypi.org/big", 99)
    fetch = R.http_fetch(timeout=1, max_requests=0)
    with pytest.raises(R.FetchError, match="only https"):
        fetch("http://pypi.org/pypi/torch/json", 10)
    with pytest.raises(R.FetchError, match="more than 0 requests"):
        fetch("https://pypi.org/pypi/torch/json", 10)


def test_an_anchored_variant_line_is_left_for_a_person():
    lines = SYNTHETIC_TABLE.splitlines()
    with pytest.raises(ValueError, match="anchor"):
        R._set_variant(lines, "2.5", "rocm6.2", {"gfx": None})
