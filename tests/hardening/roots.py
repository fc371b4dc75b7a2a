"""Writable copies of fixture host roots, cheap enough to make per test."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.conftest import HOSTS


def host_copy(source: Path, dest: Path) -> Path:
    """A fixture host as hard links: each file changed below is replaced, never written."""
    shutil.copytree(source, dest, symlinks=True, copy_function=os.link)
    return dest


def replace_with_link(path: Path, target: str | Path) -> None:
    """Put a symbolic link to ``target`` where ``path`` was (a file, a directory or a link)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def climbing(frm: Path, to: Path) -> str:
    """A relative link target from directory ``frm`` that climbs out of every root to ``to``."""
    return "../" * (len(frm.parts) + 4) + str(to).lstrip("/")


def light_copy(name: str, dest: Path) -> tuple[Path, Path]:
    """(root, sysfs root): a copy of fixture host `name` in which every file but sys/ is writable;
    sys/ (about 900 entries, the slow part to copy) is the fixture's own, to be passed as
    --sysfs-root and never written."""
    source = HOSTS / name
    dest.mkdir(parents=True)
    for entry in source.iterdir():
        if entry.name == "sys":
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.copytree(entry, dest / entry.name, symlinks=True)
        else:
            shutil.copy2(entry, dest / entry.name, follow_symlinks=False)
    return dest, source / "sys"
