"""The README's first quick-start command, run as written on a Python that is externally managed
(PEP 668: the EXTERNALLY-MANAGED file in its stdlib directory, as on Debian 12 and Ubuntu 24.04),
where plain `pip install .` is refused. Marked `install`: it downloads the build backend and the
dependencies (network) and builds and installs gpudoctor (tens of seconds), so the default run
leaves it out and .ci/run runs it as a step of its own (`pytest -m install`).

The externally managed Python is a throwaway prefix: a copy of this interpreter's binary with a
stdlib directory of symlinks to the real one, the marker beside them and pip in its
site-packages, so `sysconfig.get_path("stdlib")` of that interpreter is where the marker is, as
on those systems. Other tests here need nothing installed: the README's other install lines and
the Containerfile's sources."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")
DEPENDENCIES = ["hatchling", "click", "nvidia-ml-py", "packaging", "pyyaml", "simpleeval", "fastjsonschema"]


def quick_start(n: int) -> str:
    """The n-th shell block of the README's Quick start section."""
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)\n```", section, re.S)[n]


def _managed_python(prefix: Path) -> Path:
    real = Path(sys._base_executable if hasattr(sys, "_base_executable") else sys.executable).resolve()
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    stdlib = Path(sysconfig.get_paths(vars={"base": sys.base_prefix, "installed_base": sys.base_prefix})["stdlib"])
    (prefix / "bin").mkdir(parents=True)
    python = prefix / "bin" / version
    shutil.copy2(real, python)
    (prefix / "bin" / "python3").symlink_to(version)
    lib = prefix / "lib" / version
    lib.mkdir(parents=True)
    for entry in stdlib.iterdir():
        if entry.name not in ("site-packages", "dist-packages", "EXTERNALLY-MANAGED"):
            (lib / entry.name).symlink_to(entry)
    (lib / "site-packages").mkdir()
    pip = Path(__import__("pip").__file__).parent
    (lib / "site-packages" / "pip").symlink_to(pip)
    (lib / "EXTERNALLY-MANAGED").write_text("[externally-managed]\nError=this Python is managed by the system\n")
    return python


@pytest.mark.install
def test_readme_first_command_works_where_the_system_python_is_externally_managed(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "-d", str(wheels),
                    *DEPENDENCIES], check=True, timeout=300)
    prefix = tmp_path / "prefix"
    python = _managed_python(prefix)
    marker = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert (Path(marker) / "EXTERNALLY-MANAGED").is_file()
    home = tmp_path / "home"
    home.mkdir()
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO, checkout, ignore=shutil.ignore_patterns(".git", ".ci-venv", ".venv", "__pycache__",
                                                                   "fixtures", "golden", "*.pyz"))
    env = {"PATH": f"{prefix / 'bin'}{os.pathsep}/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
           "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels), "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "GPUDOCTOR_NO_CACHE": "1"}
    plain = subprocess.run(["python3", "-m", "pip", "install", "."], cwd=checkout, env=env,
                           capture_output=True, text=True, timeout=120)
    assert plain.returncode != 0 and "externally-managed-environment" in plain.stdout + plain.stderr
    command = quick_start(0)
    result = subprocess.run(["/bin/sh", "-c", command], cwd=checkout, env=env, capture_output=True, text=True,
                            timeout=300)
    assert "Verdict:" in result.stdout, result.stdout[-2000:] + result.stderr[-2000:]
    assert result.returncode in (0, 1)  # check ran: its verdict on this machine is the exit status
    assert (home / ".venvs" / "gpudoctor" / "bin" / "gpudoctor").is_file()


def test_readme_quick_starts_use_a_virtual_environment_and_match_ci() -> None:
    first, tests = quick_start(0), quick_start(1)
    assert first.startswith("python3 -m venv ") and "pip install ." in first and "gpudoctor check" in first
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    for step in ("python -m pip install -e '.[dev]'", "python -m pytest -q -n auto"):
        assert step in tests and step in ci, step
    assert "apt install python3-venv python3-pip" in README and "dnf install python3-pip" in README


def test_containerfile_copies_what_exists_and_installs_the_checkout() -> None:
    text = (REPO / "Containerfile").read_text(encoding="utf-8")
    sources = [s for line in text.splitlines() if line.startswith("COPY ") for s in line.split()[1:-1]]
    assert {"pyproject.toml", "LICENSE", "src", "rules"} <= set(sources)
    for source in sources:
        assert (REPO / source).exists(), source
    assert "pip install ." in text and "NVIDIA_DRIVER_CAPABILITIES=utility" in text
    image = re.search(r"image: (\S+)", (REPO / "scripts" / "k8s" / "daemonset.yaml").read_text()).group(1)
    assert f"build -t {image} -f Containerfile ." in README


def test_no_hint_names_a_package_index_name_that_does_not_exist() -> None:
    offenders = []
    for base in ("src", "docs", "scripts", "README.md"):
        for path in [REPO / base] if base.endswith(".md") else (REPO / base).rglob("*"):
            if path.is_file() and path.suffix in (".py", ".md", ".yaml", ".sh"):
                text = path.read_text(encoding="utf-8", errors="replace")
                if re.search(r"pip install ['\"]?gpudoctor\b", text):
                    offenders.append(str(path.relative_to(REPO)))
    assert offenders == []
