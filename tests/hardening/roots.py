"""Writable copies of fixture host roots, cheap enough to make per test."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import HOSTS


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
