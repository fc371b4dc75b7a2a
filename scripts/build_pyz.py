"""Build gpudoctor.pyz: one file that runs with python3 alone, nothing installed.

    python scripts/build_pyz.py [-o gpudoctor.pyz] [--download | --wheels DIR]

Inside: gpudoctor (src/gpudoctor, the built-in rules/ as gpudoctor/rules, LICENSE) and the
pure-Python part of every core dependency (click, pyyaml without its libyaml extension, so yaml
uses its pure-Python loader, nvidia-ml-py's pynvml, packaging, simpleeval, fastjsonschema), each
with its licence files under licenses/NAME/. Compiled extensions and bytecode are left out.

Where the dependencies come from:
- by default, the distributions installed in the Python running this script (their files as
  importlib.metadata lists them): works offline, in the venv the tests run in;
- with --download (network), wheels pip downloads for Python 3.9, the oldest gpudoctor supports,
  within pyproject.toml's version bounds: the archive then runs on every Python from 3.9 on;
- with --wheels DIR, the wheels in DIR (downloaded as --download does, on another machine).

The .pyz needs the newest of the bundled packages' Requires-Python floors (click 8.2 and later
need 3.10, for instance) and says so in one line on an older Python; the build prints it. At run
time it unpacks itself once into a private directory and runs from there (scripts/pyz_bootstrap.py
says why and how safely). The archive is reproducible: sorted members, fixed timestamps.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as md
import re
import subprocess
import sys
import tempfile
import zipfile
from email.parser import Parser
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent
# distribution name -> the top-level modules it provides that gpudoctor imports
DEPENDENCIES = {
    "click": ("click",),
    "PyYAML": ("yaml",),
    "nvidia-ml-py": ("pynvml.py",),
    "packaging": ("packaging",),
    "simpleeval": ("simpleeval.py",),
    "fastjsonschema": ("fastjsonschema",),
}
_SKIP_SUFFIXES = (".so", ".pyd", ".dll", ".dylib", ".pyc", ".pyo", ".c", ".pyx")
_LICENCE = re.compile(r"(LICEN[CS]E|COPYING|NOTICE|AUTHORS)", re.I)
_FIXED_TIME = (2020, 2, 2, 0, 0, 0)


def _wanted(path: PurePosixPath, tops: tuple[str, ...]) -> bool:
    if path.parts[0] not in tops or "__pycache__" in path.parts:
        return False
    return not path.name.endswith(_SKIP_SUFFIXES)


def _licence_files(name: str, members: dict[str, bytes], dist_files: dict[PurePosixPath, bytes]) -> None:
    for path, data in dist_files.items():
        if path.parts[0].endswith(".dist-info") and (_LICENCE.search(path.name) or path.name == "METADATA"):
            members[f"licenses/{name}/{path.name}"] = data


def _floor(metadata_text: str) -> tuple[int, int]:
    spec = Parser().parsestr(metadata_text).get("Requires-Python") or ""
    found = re.search(r">=\s*(\d+)\.(\d+)", spec)
    return (int(found.group(1)), int(found.group(2))) if found else (3, 0)


def from_environment(members: dict[str, bytes]) -> tuple[int, int]:
    floor = (3, 9)
    for name, tops in DEPENDENCIES.items():
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            where = sys.executable
            raise SystemExit(f"build_pyz: {name} is not installed in {where}; install it or use --wheels") from None
        files: dict[PurePosixPath, bytes] = {}
        for entry in dist.files or ():
            path = PurePosixPath(str(entry))
            if _wanted(path, tops) or path.parts[0].endswith(".dist-info"):
                files[path] = Path(str(dist.locate_file(entry))).read_bytes()
        _add(name, tops, files, members)
        floor = max(floor, _floor(dist.read_text("METADATA") or ""))
    return floor


def from_wheels(directory: Path, members: dict[str, bytes]) -> tuple[int, int]:
    floor = (3, 9)
    wheels = sorted(directory.glob("*.whl"))
    for name, tops in DEPENDENCIES.items():
        stem = re.sub(r"[-_.]+", "_", name).lower()
        match = [w for w in wheels if w.name.lower().startswith(stem + "-")]
        if not match:
            raise SystemExit(f"build_pyz: no wheel of {name} in {directory}")
        with zipfile.ZipFile(match[-1]) as wheel:
            files = {PurePosixPath(n): wheel.read(n) for n in wheel.namelist() if not n.endswith("/")}
        _add(name, tops, files, members)
        meta = next((d for p, d in files.items() if p.parts[0].endswith(".dist-info") and p.name == "METADATA"), b"")
        floor = max(floor, _floor(meta.decode("utf-8", "replace")))
    return floor


def _add(name: str, tops: tuple[str, ...], files: dict[PurePosixPath, bytes], members: dict[str, bytes]) -> None:
    code = {str(p): d for p, d in files.items() if _wanted(p, tops)}
    if not code:
        raise SystemExit(f"build_pyz: {name} has none of {', '.join(tops)}")
    members.update(code)
    _licence_files(name, members, files)


def gpudoctor_members(members: dict[str, bytes]) -> None:
    for base, prefix in ((ROOT / "src" / "gpudoctor", "gpudoctor"), (ROOT / "rules", "gpudoctor/rules")):
        for path in sorted(base.rglob("*")):
            rel = path.relative_to(base)
            if path.is_file() and "__pycache__" not in rel.parts and not path.name.endswith(_SKIP_SUFFIXES):
                members[f"{prefix}/{rel.as_posix()}"] = path.read_bytes()
    members["LICENSE"] = (ROOT / "LICENSE").read_bytes()


def build(output: Path, wheels: Path | None = None) -> tuple[int, int]:
    """Write the archive; returns the oldest Python it runs on."""
    members: dict[str, bytes] = {}
    gpudoctor_members(members)
    floor = from_wheels(wheels, members) if wheels else from_environment(members)
    digest = hashlib.sha256()
    for name in sorted(members):
        digest.update(name.encode() + b"\0" + hashlib.sha256(members[name]).digest())
    boot = (ROOT / "scripts" / "pyz_bootstrap.py").read_text(encoding="utf-8")
    boot = boot.replace('PAYLOAD = "@PAYLOAD@"', f'PAYLOAD = "{digest.hexdigest()}"', 1)
    boot = boot.replace("FLOOR = (3, 9)", f"FLOOR = {floor!r}", 1)
    members["__main__.py"] = boot.encode()
    tmp = output.with_name(output.name + ".tmp")
    with tmp.open("wb") as fh:
        fh.write(b"#!/usr/bin/env python3\n")
        with zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED) as archive:
            for name in sorted(members):
                info = zipfile.ZipInfo(name, _FIXED_TIME)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                archive.writestr(info, members[name])
    tmp.chmod(0o755)
    tmp.replace(output)
    return floor


def download(directory: Path) -> None:
    """pip download the dependencies' wheels for Python 3.9 (pure-Python ones, and pyyaml's, whose
    pure-Python part is the same in every wheel) within the bounds pyproject.toml sets."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M)
    specs = re.findall(r'"([^"]+)"', block.group(1)) if block else []
    if len(specs) != len(DEPENDENCIES):
        raise SystemExit("build_pyz: could not read the dependencies of pyproject.toml")
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--no-deps"]
    subprocess.run([*argv, "--python-version", "3.9", "-d", str(directory), *specs], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", type=Path, default=ROOT / "gpudoctor.pyz")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--wheels", type=Path, help="take the dependencies from the wheels in this directory")
    source.add_argument("--download", action="store_true", help="pip download them for Python 3.9 (network)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpudoctor-pyz-wheels-") as tmp:
        if args.download:
            download(Path(tmp))
        floor = build(args.output, Path(tmp) if args.download else args.wheels)
    size = args.output.stat().st_size
    print(f"wrote {args.output} ({size // 1024} KiB); runs with Python {floor[0]}.{floor[1]} or newer")


if __name__ == "__main__":
    main()
