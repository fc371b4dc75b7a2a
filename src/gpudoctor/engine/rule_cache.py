"""A per-user cache of compiled rule sets, so `check` skips YAML parsing, schema validation and
expression compilation (about 30 ms on a GPU host) when no rule file changed.

The key covers the gpudoctor and Python versions and the path, size and mtime of every rule
and table file, so any edit invalidates it. Only rule sets that loaded without error are
cached. The cache holds pickles, which run code when loaded — the same trust as Python's
own __pycache__ — so it lives in a directory of the user's own (mode 0700, owned by this
user, not writable by others) and is ignored otherwise. GPUDOCTOR_NO_CACHE=1 disables it;
GPUDOCTOR_CACHE_DIR moves it. Any cache problem silently falls back to loading the files.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable

from .. import __version__

# Bumped when what is pickled changes shape (2: rules carry names_used), so no older pickle is read.
FORMAT = 2


def cache_dir() -> Path | None:
    if os.environ.get("GPUDOCTOR_NO_CACHE"):
        return None
    explicit = os.environ.get("GPUDOCTOR_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpudoctor"


def key(files: Iterable[Path]) -> str | None:
    h = hashlib.sha256(f"{__version__}|{FORMAT}|{sys.version}".encode())
    for path in files:
        try:
            st = os.stat(path)
        except OSError:
            return None
        h.update(f"|{os.path.abspath(path)}|{st.st_size}|{st.st_mtime_ns}".encode())
    return h.hexdigest()[:32]


def _trusted(directory: Path) -> bool:
    try:
        st = os.stat(directory)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def load(cache_key: str | None) -> Any | None:
    directory = cache_dir()
    if cache_key is None or directory is None or not _trusted(directory):
        return None
    try:
        with open(directory / f"rules-{cache_key}.pickle", "rb") as fh:
            return pickle.load(fh)  # noqa: S301 - our own file in a private directory (see module docstring)
    except Exception:  # missing, truncated, from another layout: load the files instead
        return None


def store(cache_key: str | None, value: Any) -> None:
    directory = cache_dir()
    if cache_key is None or directory is None:
        return
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _trusted(directory):
            return
        for old in directory.glob("rules-*.pickle"):  # one entry per rule set is plenty
            if old.stat().st_mtime < _now() - 7 * 86400:
                old.unlink()
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".rules-", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(value, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, directory / f"rules-{cache_key}.pickle")
    except Exception:
        return


def _now() -> float:
    import time

    return time.time()
