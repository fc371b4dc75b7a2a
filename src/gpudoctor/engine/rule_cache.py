"""A per-user cache of parsed rule files and data tables, so `check` skips reading YAML (about
two thirds of loading the rules) when no rule file changed.

What is cached is plain data: for every rule, the mapping its rule file held (after schema
validation), with the file and line it came from; every data table; the list of rule files. It
is stored as JSON, which cannot run code when read (and whose integers are bounded as the YAML
reader bounds them). This module stores and finds entries; engine.cached_rules says what an
entry holds and checks its shape and every field of every rule and table against what their
schemas allow when it is read back (anything odd there is a miss). Nothing compiled is stored:
the loader compiles every expression and template again from its text, with the checks a rule
file's get (syntax and node types, fact paths, no dunders, helper calls only, limits, tables),
once per distinct text, subject kind and let: names in a load (rule._memoised), where the run
first reads it (rule._Parts: a rule that does not apply compiles only its `applies`). So an
entry can make gpudoctor evaluate nothing that a rule file could not: a text the checks refuse
is never evaluated; that rule is read from its file instead, and the entry is removed (forget).

The key is a hash of the bytes of every rule and table file (and their paths), the gpudoctor
version, this cache's FORMAT, the Python version, the facts schema (the fact paths a rule may
read) and the helper names, so any edit invalidates it, even one that
keeps a file's size and mtime. Files are read for it as the loader reads them: regular files
only, at most MAX_SOURCE_BYTES each (anything else: no caching, the loader reports it).

gpudoctor runs as root, often with HOME or XDG_CACHE_HOME pointing somewhere another user
controls, so the directory is reached one component at a time without trusting a path:

- each component is opened with O_NOFOLLOW relative to the one before; a directory on the way
  must be owned by root or this user and not writable by others (unless sticky, like /tmp, and
  then what is in it must be owned by root or this user); a symlink on the way is followed only
  if it is owned by root or this user; the last component must be a real directory (never a
  symlink), owned by this (effective) user, not group- or other-writable — checked with fstat on
  the open descriptor, never by path. Missing directories are created 0700. (So root run with
  HOME=/home/alice has no cache there: only slower.)
- an entry is opened relative to that descriptor with O_NOFOLLOW|O_NONBLOCK and must be a
  regular file owned by this user, not writable by others, at most MAX_ENTRY_BYTES.
- an entry is written to a temporary file created in that directory (O_EXCL, 0600) and renamed
  into place (both relative to the descriptor); on any failure (a full disk) the temporary file
  is removed.

GPUDOCTOR_NO_CACHE=1 disables the cache; GPUDOCTOR_CACHE_DIR moves it (default
$XDG_CACHE_HOME/gpudoctor, else ~/.cache/gpudoctor). Any cache problem silently falls back to
loading the files.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import sys
import time
from pathlib import Path
from typing import Any, Iterable

from .. import __version__
from ..inputs import STRICT_JSON

# Bumped when what is stored changes shape, or what reading a rule file gives changes, so no
# older entry is read (3: JSON of the parsed rules and tables, not a pickle of compiled rules;
# 4: a rule may hold let:).
FORMAT = 4
# The built-in rules and tables come to about 220 KB of JSON.
MAX_ENTRY_BYTES = 32 << 20
# A rule or table file larger than this is not hashed (the loader refuses it: 4 MiB).
MAX_SOURCE_BYTES = 4 << 20
MAX_AGE_S = 7 * 86400  # entries not rewritten for this long are removed
MAX_TMP_AGE_S = 3600  # temporary files of writers that died
_MAX_SYMLINKS = 40

_PREFIX = "rules-"
_SUFFIX = ".json"
_KEY = re.compile(r"[0-9a-f]{64}")
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | _CLOEXEC
_SOURCE_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | _CLOEXEC
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def cache_dir() -> Path | None:
    if os.environ.get("GPUDOCTOR_NO_CACHE"):
        return None
    explicit = os.environ.get("GPUDOCTOR_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpudoctor"


# ---------------------------------------------------------------------------
# The key


def key(dirs: Iterable[Path], files: Iterable[Path]) -> str | None:
    """A hash of what the rule set is made from; None (do not cache) where a file cannot be read."""
    if cache_dir() is None:
        return None
    h = _sha256()
    for part in (f"gpudoctor {__version__}", f"format {FORMAT}", sys.version):
        _feed(h, part.encode())
    # what decides whether a text compiles besides the text: the fact paths and the helpers
    from ..schemas import HERE
    from .helpers.registry import FUNCTIONS

    schema = _source_digest(HERE / "facts.schema.json")
    if schema is None:
        return None
    _feed(h, b"facts schema", schema, b"helpers", " ".join(sorted(FUNCTIONS)).encode())
    for directory in dirs:
        _feed(h, b"dir", os.fsencode(directory))
    for path in files:
        digest = _source_digest(path)
        if digest is None:
            return None
        _feed(h, b"file", os.fsencode(path), digest)
    return h.hexdigest()


def _sha256(data: bytes = b"") -> Any:
    """hashlib.sha256, or, while little has been hashed and hashlib is not imported yet, the same
    hash built into Python (as the random module does): importing hashlib loads OpenSSL, about 2
    ms of every `check`, more than hashing the built-in rules with the built-in code (0.6 ms for
    220 KB). Past BUILTIN_HASH_BYTES hashed in this process OpenSSL's is used, which is several
    times faster where the CPU has SHA instructions (17 MB of rule files: 53 ms built in, 15 ms
    with OpenSSL on the development VM): the two are the same SHA-256, the digests identical."""
    global _SHA256, _hashed, _openssl
    _hashed += len(data)
    if not _openssl and _hashed > BUILTIN_HASH_BYTES:
        _SHA256, _openssl = _openssl_sha256(), True
    elif _SHA256 is None:
        _SHA256 = _builtin_sha256()
    return _SHA256(data)


def _builtin_sha256() -> Any:
    if "hashlib" not in sys.modules:
        for module in ("_sha2", "_sha256"):  # Python 3.12+, 3.9-3.11; absent where built without them
            try:
                return __import__(module).sha256
            except (ImportError, AttributeError):
                continue
    return _openssl_sha256()


def _openssl_sha256() -> Any:
    import hashlib

    return hashlib.sha256


# Bytes hashed (rule and table files, the schema) before OpenSSL's SHA-256 is worth its import.
BUILTIN_HASH_BYTES = 1 << 20
_SHA256: Any = None
_hashed = 0
_openssl = False  # _SHA256 is hashlib's (OpenSSL's) for the rest of the process


def _feed(h: Any, *parts: bytes) -> None:
    for part in parts:  # length-prefixed, so no two different lists of parts hash alike
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)


def _source_digest(path: Path) -> bytes | None:
    """SHA-256 of a rule or table file: a regular file (a FIFO or device is never waited on or
    read without end) of at most MAX_SOURCE_BYTES."""
    try:
        fd = os.open(path, _SOURCE_FLAGS)
    except (OSError, ValueError):
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SOURCE_BYTES:
            return None
        data = _read_bounded(fd, MAX_SOURCE_BYTES)
        return None if data is None else _sha256(data).digest()
    except OSError:
        return None
    finally:
        os.close(fd)


def _read_bounded(fd: int, limit: int) -> bytes | None:
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = os.read(fd, min(1 << 20, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:  # grew while being read
            return None


# ---------------------------------------------------------------------------
# The directory


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


def _open_dir(create: bool) -> int | None:
    """A descriptor of the cache directory, reached safely (see the module docstring), or None."""
    directory = cache_dir()
    if directory is None:
        return None
    try:
        return _open_private_dir(os.path.abspath(directory), create)
    except (OSError, ValueError):  # ValueError: a NUL byte in the path
        return None


def _open_private_dir(path: str, create: bool) -> int | None:
    euid = os.geteuid()
    pending = _parts(path)[::-1]  # popped from the end
    if not pending:
        return None
    fd = os.open("/", _DIR_FLAGS)
    try:
        st = os.fstat(fd)
        hops = 0
        while pending:
            # Whoever may write this directory may swap what is in it: nobody but root or us,
            # or, in a sticky directory such as /tmp, only for entries we check the owner of.
            if st.st_uid not in (0, euid) or (st.st_mode & _OTHERS_WRITE and not st.st_mode & stat.S_ISVTX):
                return None
            name = pending.pop()
            last = not pending
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    return None
                try:
                    os.mkdir(name, 0o700, dir_fd=fd)
                except FileExistsError:  # another process made it meanwhile
                    pass
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR) or last:
                    return None  # the cache directory itself is never reached through a symlink
                link = os.stat(name, dir_fd=fd, follow_symlinks=False)
                hops += 1
                if not stat.S_ISLNK(link.st_mode) or link.st_uid not in (0, euid) or hops > _MAX_SYMLINKS:
                    return None
                target = os.readlink(name, dir_fd=fd)
                pending.extend(_parts(target)[::-1])  # resolved from here, or from / if absolute
                if target.startswith("/"):
                    os.close(fd)
                    fd = -1
                    fd = os.open("/", _DIR_FLAGS)
                    st = os.fstat(fd)
                continue
            os.close(fd)
            fd = child
            st = os.fstat(fd)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid not in (0, euid):
                return None
        if st.st_uid != euid or st.st_mode & _OTHERS_WRITE:
            return None
        result, fd = fd, -1
        return result
    finally:
        if fd >= 0:
            os.close(fd)


# ---------------------------------------------------------------------------
# Entries: JSON objects {"format": FORMAT, "key": KEY, "data": ...}


def _entry_name(cache_key: str) -> str:
    return f"{_PREFIX}{cache_key}{_SUFFIX}"


def load(cache_key: str | None) -> Any | None:
    """The data stored under ``cache_key``, or None (missing, unsafe, malformed, another format)."""
    if cache_key is None or not _KEY.fullmatch(cache_key):
        return None
    dir_fd = _open_dir(create=False)
    if dir_fd is None:
        return None
    try:
        blob = _read_entry(dir_fd, _entry_name(cache_key))
    finally:
        os.close(dir_fd)
    if blob is None:
        return None
    try:
        entry = json.loads(
            blob.decode("utf-8"), **STRICT_JSON
        )
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None
    if not isinstance(entry, dict) or set(entry) != {"format", "key", "data"}:
        return None
    if entry["format"] != FORMAT or type(entry["format"]) is not int or entry["key"] != cache_key:
        return None
    return entry["data"]


def forget(cache_key: str | None) -> None:
    """Remove the entry stored under ``cache_key`` (one whose rule the loader's checks refused),
    reached as load reaches it; any problem: nothing is removed."""
    if cache_key is None or not _KEY.fullmatch(cache_key):
        return
    dir_fd = _open_dir(create=False)
    if dir_fd is None:
        return
    try:
        os.unlink(_entry_name(cache_key), dir_fd=dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def _read_entry(dir_fd: int, name: str) -> bytes | None:
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (
            not stat.S_ISREG(st.st_mode)
            or st.st_uid != os.geteuid()
            or st.st_mode & _OTHERS_WRITE
            or st.st_size > MAX_ENTRY_BYTES
        ):
            return None
        return _read_bounded(fd, MAX_ENTRY_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)


def store(cache_key: str | None, data: Any) -> None:
    """Store plain data (dicts with string keys, lists, strings, numbers, booleans, None) that
    JSON gives back unchanged; anything else, or any problem writing, and nothing is stored."""
    if cache_key is None or not _KEY.fullmatch(cache_key):
        return
    dir_fd = _open_dir(create=True)
    if dir_fd is None:
        return
    try:
        blob = _encode({"format": FORMAT, "key": cache_key, "data": data})
        if blob is not None:
            _prune(dir_fd)
            _write_atomically(dir_fd, _entry_name(cache_key), blob)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def _encode(entry: dict[str, Any]) -> bytes | None:
    try:
        text = json.dumps(entry, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
        # JSON would quietly turn a tuple into a list or an int key into a string: store only
        # what reads back equal, so a hit gives exactly what loading the files gave.
        if json.loads(text) != entry:
            return None
        blob = text.encode("utf-8")
    except (TypeError, ValueError, RecursionError):
        return None
    return blob if len(blob) <= MAX_ENTRY_BYTES else None


def _write_atomically(dir_fd: int, name: str, blob: bytes) -> None:
    tmp = f".{_PREFIX}{os.urandom(8).hex()}.tmp"
    fd = os.open(tmp, _WRITE_FLAGS, 0o600, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(blob)
            while view:
                written = os.write(fd, view)
                if written <= 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                view = view[written:]
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:  # a full disk, an interrupt: never leave the temporary file behind
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def _prune(dir_fd: int) -> None:
    """Remove entries not rewritten for a week, temporary files of writers that died, and the
    pickles older versions wrote (never read again)."""
    now = time.time()
    for name in os.listdir(dir_fd):
        if name.startswith(_PREFIX) and name.endswith(".pickle"):
            max_age = -1.0
        elif name.startswith(_PREFIX) and name.endswith(_SUFFIX):
            max_age = MAX_AGE_S
        elif name.startswith(f".{_PREFIX}") and name.endswith(".tmp"):
            max_age = MAX_TMP_AGE_S
        else:
            continue
        try:
            if now - os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mtime > max_age:
                os.unlink(name, dir_fd=dir_fd)
        except OSError:
            continue
