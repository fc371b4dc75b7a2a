"""The __main__ of gpudoctor.pyz (scripts/build_pyz.py writes it into the zip with the two
constants below filled in). Standard library only: nothing else is importable yet.

gpudoctor reads its rules, tables and schemas as files, runs its workers (bench, the device test)
by path with another interpreter and keys its rule cache on the rule files' bytes: all of that
needs real files, which a zip is not. So the zip unpacks itself once into a directory of this
user's own and runs from there, instead of from inside the zip:

- where: the system temporary directory, which must be owned by root or this user and either
  sticky (like /tmp: nobody else can rename or replace what we create in it) or writable by
  nobody else; anything else (TMPDIR pointing into another user's home while running as root)
  is refused in one line, exit status 2, rather than running code others could swap.
- the name, gpudoctor-pyz-UID-HASH, carries the hash of the zip's contents, so another build gets
  its own directory and a directory is never reused for other contents. Only a real directory
  (not a symlink), owned by this user and with mode 0700 is used; a name someone else took is
  passed over for a fresh private directory of this run (mkdtemp), removed when the run ends.
- it is unpacked into a fresh mkdtemp directory and renamed into place when complete, so a run
  never sees half of it; each run checks that every file is still there with its size (a /tmp
  cleaner may have removed some) and unpacks it again where not.
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import sys
import tempfile
import zipfile

PAYLOAD = "@PAYLOAD@"  # sha256 of the zip's contents, filled in by scripts/build_pyz.py
FLOOR = (3, 9)  # the oldest Python every bundled package supports, filled in likewise


def _fail(line: str) -> None:
    sys.stderr.write(f"gpudoctor.pyz: {line}\n")
    raise SystemExit(2)


def _safe_parent(path: str) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid not in (0, os.geteuid()):
        return False
    return bool(st.st_mode & stat.S_ISVTX) or not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _ours(path: str) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o700


def _members(archive: zipfile.ZipFile) -> list[zipfile.ZipInfo]:
    out = []
    for info in archive.infolist():
        name = info.filename
        if name == "__main__.py" or name.endswith("/"):
            continue
        if name.startswith("/") or ".." in name.split("/"):
            _fail(f"refusing a member outside the archive: {name!r}")
        out.append(info)
    return out


def _complete(root: str, members: list[zipfile.ZipInfo]) -> bool:
    for info in members:
        try:
            if os.lstat(os.path.join(root, info.filename)).st_size != info.file_size:
                return False
        except OSError:
            return False
    return True


def _unpack(archive: zipfile.ZipFile, members: list[zipfile.ZipInfo], parent: str, prefix: str) -> str:
    staging = tempfile.mkdtemp(prefix=prefix + ".", dir=parent)  # 0700, a name nobody can guess
    for info in members:
        archive.extract(info, staging)
    return staging


def unpacked(zip_path: str) -> str:
    """The directory to run from: this build's contents, complete, in a directory only we own."""
    parent = tempfile.gettempdir()
    if not _safe_parent(parent):
        _fail(f"the temporary directory {parent} is writable by another user; set TMPDIR to a directory of yours")
    name = f"gpudoctor-pyz-{os.geteuid()}-{PAYLOAD[:16]}"
    final = os.path.join(parent, name)
    with zipfile.ZipFile(zip_path) as archive:
        members = _members(archive)
        if _ours(final) and _complete(final, members):
            return final
        staging = _unpack(archive, members, parent, name)
    if os.path.lexists(final):
        if not _ours(final):
            atexit.register(shutil.rmtree, staging, True)  # the name is taken: a private copy for this run
            return staging
        shutil.rmtree(final, ignore_errors=True)  # ours but incomplete
    try:
        os.rename(staging, final)
    except OSError:  # another run renamed its copy into place first
        shutil.rmtree(staging, ignore_errors=True)
        if not (_ours(final) and _complete(final, members)):
            _fail(f"could not unpack into {final}")
    return final


def main() -> None:
    if sys.version_info[:2] < FLOOR:
        wanted = ".".join(map(str, FLOOR))
        this = sys.version.split()[0]
        _fail(f"needs Python {wanted} or newer (this is {this}); build it for older ones with --wheels")
    zip_path = os.path.dirname(os.path.abspath(__file__))
    root = unpacked(zip_path)
    # run from the unpacked files only: nothing of gpudoctor's may come from the zip itself
    sys.path[:] = [root] + [p for p in sys.path if os.path.abspath(p) != zip_path]
    from gpudoctor.__main__ import main as gpudoctor_main

    gpudoctor_main()


if __name__ == "__main__":
    main()
