"""gpudoctor.pyz (scripts/build_pyz.py): built from this checkout and the test venv's installed
dependencies, run by a Python that sees no site-packages at all (-I -S) from a directory outside
the checkout, as on a machine where nothing could be installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO, SNAPSHOTS

SNAPSHOT = SNAPSHOTS / "h200-x2.json"


@pytest.fixture(scope="module")
def pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pyz") / "gpudoctor.pyz"
    subprocess.run([sys.executable, str(REPO / "scripts" / "build_pyz.py"), "-o", str(out)], check=True, timeout=120)
    return out


def _run(pyz: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "GPUDOCTOR_"))}
    env.update(TMPDIR=str(tmp_path), HOME=str(tmp_path), GPUDOCTOR_NO_CACHE="1")
    return subprocess.run(
        [sys.executable, "-I", "-S", str(pyz), *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )


def test_archive_holds_the_pure_python_dependencies_rules_and_licences(pyz: Path) -> None:
    names = set(zipfile.ZipFile(pyz).namelist())
    for needed in ("__main__.py", "LICENSE", "gpudoctor/__main__.py", "gpudoctor/rules/pcie.yaml",
                   "gpudoctor/rules/data/cuda_driver.yaml", "gpudoctor/schemas/facts.schema.json",
                   "click/__init__.py", "yaml/__init__.py", "pynvml.py", "packaging/version.py",
                   "simpleeval.py", "fastjsonschema/__init__.py", "licenses/click/METADATA"):
        assert needed in names, needed
    assert not [n for n in names if n.endswith((".so", ".pyc"))]
    assert zipfile.ZipFile(pyz).read("LICENSE") == (REPO / "LICENSE").read_bytes()


def test_probe_check_and_fix_run_without_any_installed_package(pyz: Path, tmp_path: Path) -> None:
    probe = _run(pyz, tmp_path, "probe", "-o", "host.json")
    assert probe.returncode == 0, probe.stderr
    assert json.loads((tmp_path / "host.json").read_text())["schema_version"] == 1
    check = _run(pyz, tmp_path, "check", "--facts", str(SNAPSHOT))
    assert check.returncode == 0, check.stderr
    assert "Verdict: OK" in check.stdout
    fix = _run(pyz, tmp_path, "fix", "--torch", "--facts", str(SNAPSHOT))
    assert fix.returncode == 0, fix.stderr
    assert "pip install torch" in fix.stdout
    # it ran from its own unpacked copy, owned by this user and private, not from the checkout
    unpacked = [p for p in tmp_path.iterdir() if p.name.startswith("gpudoctor-pyz-")]
    assert len(unpacked) == 1 and (unpacked[0].stat().st_mode & 0o777) == 0o700
    assert (unpacked[0] / "gpudoctor" / "rules" / "pcie.yaml").is_file()


def test_a_removed_file_is_unpacked_again(pyz: Path, tmp_path: Path) -> None:
    assert _run(pyz, tmp_path, "rules", "list").returncode == 0
    (unpacked,) = [p for p in tmp_path.iterdir() if p.name.startswith("gpudoctor-pyz-")]
    (unpacked / "gpudoctor" / "rules" / "pcie.yaml").unlink()  # as a /tmp cleaner would
    again = _run(pyz, tmp_path, "rules", "show", "pcie-width-degraded")
    assert again.returncode == 0, again.stderr
    assert (unpacked / "gpudoctor" / "rules" / "pcie.yaml").is_file()


def test_a_temporary_directory_others_can_write_is_refused(pyz: Path, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # writable by everyone, not sticky: another user could swap what we unpack
    env = dict(os.environ, TMPDIR=str(shared))
    result = subprocess.run([sys.executable, "-I", "-S", str(pyz), "rules", "list"], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.startswith("gpudoctor.pyz: the temporary directory") and "Traceback" not in result.stderr
    assert list(shared.iterdir()) == []
