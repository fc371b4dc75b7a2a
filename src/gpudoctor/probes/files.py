"""Reading sysfs/procfs/etc files through the context root, never raising.

Every probe reads files with these helpers, so a missing file, an empty
file, garbage bytes, a permission error or a symlink loop becomes an
:class:`~gpudoctor.facts.Unavailable` with a reason instead of an exception.

They are also the one way a probe touches its root. On the live machine they open
``ctx.path(...)`` as the kernel resolves it; under any other root they go through
``ctx.contained()`` (:class:`gpudoctor.rootfs.RootFS`), so a link in the tree never leads out
of it and a device node or FIFO in it is never opened. A probe that needs a raw descriptor, a
link target or a stat uses :func:`open_fd`, :func:`read_link` or :func:`stat_path`, never
``os.open(ctx.path(...))``.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable, TypeVar

from ..context import ProbeContext, excerpt
from ..facts import Unavailable
from ..model.cpus import parse_cpulist
from ..rootfs import MAX_LINK_HOPS, RootedError

T = TypeVar("T")

# sysfs attribute files are small; anything larger is not what we expect.
MAX_READ = 1 << 20


def _shown_path(path: Path) -> str:
    """A path for a message: as it is, or escaped when a name in it (from a directory listing, a
    link, a file's content) holds control characters."""
    text = str(path)
    return text if text.isprintable() else ascii(text)


def unavailable_from_oserror(path: Path, exc: OSError | ValueError) -> Unavailable:
    if not isinstance(exc, OSError):  # the os module's answer to a path with a NUL byte
        return Unavailable("error", f"{excerpt(str(path), 200)} is not a usable path ({exc})")
    shown = _shown_path(path)
    code = exc.errno
    detail = getattr(exc, "detail", None)  # a lookup inside a root: what its links did
    if detail:
        if code in (errno.ENOENT, errno.ENOTDIR):
            return Unavailable("not_found", f"{shown}: {detail}")
        if code in (errno.EACCES, errno.EPERM):
            return Unavailable("no_permission", f"{shown}: {detail}")
        if code in (errno.EOPNOTSUPP, errno.ENODEV, errno.ENXIO):
            return Unavailable("not_supported", f"{shown}: {detail}")
        return Unavailable("error", f"{shown}: {detail}")
    if isinstance(exc, FileNotFoundError) or code in (errno.ENOENT, errno.ENOTDIR):
        return Unavailable("not_found", f"{shown} does not exist")
    if isinstance(exc, PermissionError) or code in (errno.EACCES, errno.EPERM):
        return Unavailable("no_permission", f"{shown}: permission denied")
    if code == errno.ELOOP:
        return Unavailable("error", f"{shown}: symlink loop")
    if code == errno.EFBIG:
        return Unavailable("error", f"{shown}: {exc.strerror}")
    if code in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENODEV, errno.ENXIO):
        return Unavailable("not_supported", f"{shown}: {exc.strerror}")
    return Unavailable("error", f"{shown}: {exc.strerror or exc}")


# Read size per call. A read buffer of MAX_READ costs a fresh 1 MiB allocation per file, which
# made a small sysfs attribute four times slower to read than the open/read/close itself.
_CHUNK = 1 << 16
# O_NONBLOCK: a FIFO planted in a fixture tree must not hang the probe (regular, sysfs and
# procfs files ignore the flag).
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)


def _read_bytes(path: Path, limit: int = MAX_READ, whole: bool = False) -> bytes:
    """Up to ``limit`` bytes of a file, never waiting on a FIFO or device; raises OSError.
    With ``whole``, a file longer than ``limit`` raises OSError(EFBIG): parsing the first
    megabyte of a list would report what happens to fit as the whole list."""
    return _read_fd(os.open(path, _OPEN_FLAGS), path, limit, whole)


def open_fd(ctx: ProbeContext, absolute: str, flags: int = _OPEN_FLAGS) -> int:
    """os.open of a system path under the context root; raises OSError or ValueError (a NUL byte).
    Under a root that is not the live machine the lookup stays inside the root and only a regular
    file or directory is opened (anything else is OSError(EOPNOTSUPP) with a detail)."""
    fs = ctx.contained()
    if fs is None:
        return os.open(ctx.path(absolute), flags)
    return fs.open(absolute, flags)


def read_link(ctx: ProbeContext, absolute: str) -> str:
    """os.readlink of a system path under the context root (its directories resolved inside it)."""
    fs = ctx.contained()
    if fs is None:
        return os.readlink(ctx.path(absolute))
    return fs.readlink(absolute)


def stat_path(ctx: ProbeContext, absolute: str, follow: bool = True) -> os.stat_result:
    """os.stat (lstat without ``follow``) of a system path under the context root."""
    fs = ctx.contained()
    if fs is None:
        return os.stat(ctx.path(absolute), follow_symlinks=follow)
    return fs.stat(absolute, follow)


def _read_at(ctx: ProbeContext, absolute: str, path: Path, limit: int = MAX_READ, whole: bool = False) -> bytes:
    fs = ctx.contained()
    if fs is None:
        return _read_fd(os.open(path, _OPEN_FLAGS), path, limit, whole)
    return _read_fd(fs.open(absolute, _OPEN_FLAGS), path, limit, whole)


def _read_fd(fd: int, path: Path, limit: int, whole: bool) -> bytes:
    """Read and close ``fd``: see _read_bytes."""
    try:
        chunks: list[bytes] = []
        total = 0
        while total < limit:
            chunk = os.read(fd, min(_CHUNK, limit - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if whole and total >= limit and os.read(fd, 1):
            raise OSError(errno.EFBIG, f"longer than {limit} bytes, more than such a file holds", str(path))
    finally:
        os.close(fd)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def read_file_bytes(path: str | os.PathLike[str], limit: int = MAX_READ) -> bytes:
    """Up to ``limit`` bytes of a file at a real path (a recorded-answers file, a package's
    version.py), never waiting on a FIFO planted there; raises OSError."""
    return _read_bytes(Path(path), limit)


def read_text(
    ctx: ProbeContext, absolute: str, *, strip: bool = True, whole: bool = True, limit: int = MAX_READ
) -> str | Unavailable:
    """Read a text file under the root. Empty files are unavailable (not_found); so are files
    longer than ``limit`` (MAX_READ) unless ``whole`` is false (then their first ``limit`` bytes)."""
    path = ctx.path(absolute)
    fs = ctx.contained()
    try:
        fd = os.open(path, _OPEN_FLAGS) if fs is None else fs.open(absolute, _OPEN_FLAGS)
        raw = _read_fd(fd, path, limit, whole)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        return unavailable_from_oserror(path, exc)
    text = raw.decode("utf-8", "replace")
    if strip:
        text = text.strip()
    if not text:
        return Unavailable("not_found", f"{path} is empty")
    return text


def read_parsed(ctx: ProbeContext, absolute: str, parse: Callable[[str], T]) -> T | Unavailable:
    """Read a file and parse it; a parse failure is unavailable (error) naming the text."""
    text = read_text(ctx, absolute)
    if isinstance(text, Unavailable):
        return text
    try:
        return parse(text)
    except (ValueError, IndexError, KeyError) as exc:
        # the exception's own text may quote the content too (int() does): bound it as well
        return Unavailable("error", f"{ctx.path(absolute)}: unexpected content {excerpt(text)} ({str(exc)[:120]})")


def parse_int(text: str, base: int = 10) -> int:
    """An integer as sysfs and procfs print one; raises ValueError. The kernel prints at most
    64-bit numbers: a longer string of digits is garbage, not a fact."""
    value = int(text, base)
    if not -(1 << 64) < value < (1 << 64):
        raise ValueError("outside the 64-bit range")
    return value


def read_int(ctx: ProbeContext, absolute: str, base: int = 10) -> int | Unavailable:
    return read_parsed(ctx, absolute, lambda s: parse_int(s, base))


def read_cpulist(ctx: ProbeContext, absolute: str) -> list[int] | Unavailable:
    path = ctx.path(absolute)
    fs = ctx.contained()
    try:
        fd = os.open(path, _OPEN_FLAGS) if fs is None else fs.open(absolute, _OPEN_FLAGS)
        raw = _read_fd(fd, path, MAX_READ, True)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        return unavailable_from_oserror(path, exc)
    try:
        return parse_cpulist(raw.decode("ascii"))
    except (ValueError, UnicodeDecodeError) as exc:
        return Unavailable("error", f"{path}: not a cpulist ({exc})")


def list_dir(ctx: ProbeContext, absolute: str) -> list[str] | Unavailable:
    path = ctx.path(absolute)
    fs = ctx.contained()
    try:
        return sorted(os.listdir(path) if fs is None else fs.listdir(absolute))
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        return unavailable_from_oserror(path, exc)


def resolve_link(ctx: ProbeContext, absolute: str) -> Path | Unavailable:
    """realpath of a path under the root, kept inside the root."""
    path = ctx.path(absolute)
    fs = ctx.contained()
    try:
        if fs is not None:
            return ctx.path(fs.resolve(absolute))
        os.stat(path)  # raises for missing targets and symlink loops
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        return unavailable_from_oserror(path, exc)
    return Path(os.path.realpath(path))


def link_name(ctx: ProbeContext, absolute: str) -> str | Unavailable:
    """Basename of a symlink's target (e.g. the driver a PCI device is bound to)."""
    path = ctx.path(absolute)
    try:
        return os.path.basename(read_link(ctx, absolute))
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        return unavailable_from_oserror(path, exc)




def resolve_path(ctx: ProbeContext, absolute: str) -> str | Unavailable:
    """Resolve the symlinks of a system path inside the root, like realpath under chroot.

    Returns the resolved *system* path ("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"),
    which callers map with ``ctx.path`` again. Absolute link targets are taken relative to
    the root, so a captured tree with absolute links never leads back into the machine's
    own /sys. Every component must exist; a loop is unavailable (error).

    Under a root that is not the live machine every reader resolves this way (through
    ``ctx.contained()``); probes call this function where the resolved path is itself the fact
    (PCI device paths, class links, library versions in file names).
    """
    fs = ctx.contained()
    if fs is not None:
        try:
            return fs.resolve(absolute)
        except RootedError as exc:
            return unavailable_from_oserror(ctx.path(exc.where), exc)
        except (OSError, ValueError) as exc:  # the root itself; a NUL byte in the path
            return unavailable_from_oserror(ctx.path(absolute), exc)
    pending = [p for p in absolute.split("/") if p]
    pending.reverse()
    done: list[str] = []
    hops = 0
    while pending:
        part = pending.pop()
        if part == ".":
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        done.append(part)
        real = ctx.path("/" + "/".join(done))
        try:
            target = os.readlink(real)
        except ValueError as exc:  # a NUL byte in a path taken from a file's content
            return unavailable_from_oserror(real, exc)
        except OSError as exc:
            if exc.errno == errno.EINVAL:  # exists and is not a symlink
                continue
            return unavailable_from_oserror(real, exc)
        hops += 1
        if hops > MAX_LINK_HOPS:
            return Unavailable("error", f"{ctx.path(absolute)}: symlink loop")
        done.pop()
        if target.startswith("/"):
            done = []
        pending.extend(reversed([p for p in target.split("/") if p]))
    return "/" + "/".join(done)


def read_lines(ctx: ProbeContext, absolute: str) -> list[str] | Unavailable:
    """Read a text file as lines (for /proc tables such as status, limits, mounts). Each line
    stands alone, so a table longer than MAX_READ gives its complete lines within that."""
    text = read_text(ctx, absolute, strip=False, whole=False)
    if isinstance(text, Unavailable):
        return text
    lines = text.splitlines()
    if len(text.encode("utf-8", "replace")) >= MAX_READ and lines:
        lines.pop()  # cut short: the last line may be partial
    return lines


def exists(ctx: ProbeContext, absolute: str) -> bool:
    """Whether a path exists under the root (a dangling symlink counts: it was put there)."""
    fs = ctx.contained()
    if fs is None:
        return os.path.lexists(ctx.path(absolute))
    try:
        fs.stat(absolute, follow=False)
    except (OSError, ValueError):
        return False
    return True


def read_bytes(ctx: ProbeContext, absolute: str, limit: int = MAX_READ) -> bytes | Unavailable:
    """Read up to ``limit`` raw bytes of a file under the root (efivars, binary attributes)."""
    path = ctx.path(absolute)
    try:
        return _read_at(ctx, absolute, path, limit)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        return unavailable_from_oserror(path, exc)


def _mode(ctx: ProbeContext, absolute: str) -> int:
    """st_mode of a path under the root, its links followed inside the root; 0 when it cannot be stat'ed."""
    fs = ctx.contained()
    try:
        if fs is not None:
            return fs.stat(absolute).st_mode
        real = resolve_path(ctx, absolute)
        return os.stat(ctx.path(real)).st_mode if isinstance(real, str) else 0
    except (OSError, ValueError):
        return 0


def is_dir(ctx: ProbeContext, absolute: str) -> bool:
    """Whether a path is a directory under the root, following its links inside the root."""
    return stat.S_ISDIR(_mode(ctx, absolute))


def is_file(ctx: ProbeContext, absolute: str) -> bool:
    """Whether a path is a regular file under the root, following its links inside the root."""
    return stat.S_ISREG(_mode(ctx, absolute))


# Directories of a PATH-style variable looked at, at most: under a root the environment is a file of
# the tree, and a megabyte of "/a:/b:..." would otherwise cost a lookup per entry per program.
MAX_SEARCH_DIRS = 256


def search_dirs(value: str, extra: Sequence[str] = (), *, empty_is_root: bool = False) -> list[str]:
    """The absolute directories of a PATH-style list (trailing slashes dropped), each once and in
    order, at most MAX_SEARCH_DIRS of them, then those of ``extra`` not already there. With
    ``empty_is_root`` an entry that is only slashes (or empty) stands for "/"."""
    seen: dict[str, None] = {}
    for entry in value.split(":"):
        entry = entry.rstrip("/") or ("/" if empty_is_root else "")
        if entry.startswith("/"):
            seen[entry] = None
            if len(seen) >= MAX_SEARCH_DIRS:
                break
    for entry in extra:
        seen.setdefault(entry, None)
    return list(seen)


def read_recorded(ctx: ProbeContext, name: str, limit: int = MAX_READ) -> bytes | Unavailable:
    """The bytes of a recorded-answers file (torch.json) in a fixture root, read inside the root;
    not_found when the root has none (and on the live machine, which has no recordings)."""
    if ctx.live:
        return Unavailable("not_found", f"no recorded {name} on the live machine")
    return read_bytes(ctx, "/" + name, limit)


def parse_recorded_json(raw: bytes, path: str) -> Any:
    """The bytes of a recorded-answers file (torch.json) as strict JSON (gpudoctor.inputs.parse_json:
    no NaN, bounded integers and nesting), or Unavailable('error', why): what json.loads takes
    beyond it would go into a snapshot that check --facts refuses."""
    from ..inputs import InputError, parse_json

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Unavailable("error", f"{path}: not readable JSON: not UTF-8 text (byte 0x{raw[exc.start]:02x})")
    try:
        return parse_json(text[1:] if text.startswith("\ufeff") else text, path)
    except InputError as exc:
        return Unavailable("error", f"{path}: not readable JSON: {exc.message}")
