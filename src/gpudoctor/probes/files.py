"""Reading sysfs/procfs/etc files through the context root, never raising.

Every probe reads files with these helpers, so a missing file, an empty
file, garbage bytes, a permission error or a symlink loop becomes an
:class:`~gpudoctor.facts.Unavailable` with a reason instead of an exception.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

from ..context import ProbeContext
from ..facts import Unavailable

T = TypeVar("T")

# sysfs attribute files are small; anything larger is not what we expect.
MAX_READ = 1 << 20


def unavailable_from_oserror(path: Path, exc: OSError | ValueError) -> Unavailable:
    if not isinstance(exc, OSError):  # the os module's answer to a path with a NUL byte
        return Unavailable("error", f"{str(path)!r} is not a usable path ({exc})")
    if isinstance(exc, FileNotFoundError) or exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return Unavailable("not_found", f"{path} does not exist")
    if isinstance(exc, PermissionError) or exc.errno in (errno.EACCES, errno.EPERM):
        return Unavailable("no_permission", f"{path}: permission denied")
    if exc.errno == errno.ELOOP:
        return Unavailable("error", f"{path}: symlink loop")
    if exc.errno == errno.EFBIG:
        return Unavailable("error", f"{path}: {exc.strerror}")
    if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENODEV, errno.ENXIO):
        return Unavailable("not_supported", f"{path}: {exc.strerror}")
    return Unavailable("error", f"{path}: {exc.strerror or exc}")


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
    fd = os.open(path, _OPEN_FLAGS)
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


def read_text(ctx: ProbeContext, absolute: str, *, strip: bool = True, whole: bool = True) -> str | Unavailable:
    """Read a text file under the root. Empty files are unavailable (not_found); so are files
    longer than MAX_READ unless ``whole`` is false (then their first MAX_READ bytes)."""
    path = ctx.path(absolute)
    try:
        raw = _read_bytes(path, whole=whole)
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
        shown = text if len(text) <= 60 else text[:57] + "..."
        return Unavailable("error", f"{ctx.path(absolute)}: unexpected content {shown!r} ({exc})")


def parse_int(text: str, base: int = 10) -> int:
    """An integer as sysfs and procfs print one; raises ValueError. The kernel prints at most
    64-bit numbers: a longer string of digits is garbage, not a fact."""
    value = int(text, base)
    if not -(1 << 64) < value < (1 << 64):
        raise ValueError("outside the 64-bit range")
    return value


def read_int(ctx: ProbeContext, absolute: str, base: int = 10) -> int | Unavailable:
    return read_parsed(ctx, absolute, lambda s: parse_int(s, base))


# Highest CPU (or memory node) id believed: Linux builds for at most 8192 CPUs (x86 MAXSMP);
# anything far above is garbage, and a mask sized from it would be huge.
MAX_CPU_ID = (1 << 16) - 1
_CPULIST_PART = re.compile(r"([0-9]+)(?:-([0-9]+))?")


def parse_cpulist(text: str) -> list[int]:
    """Parse a kernel cpulist ("0-3,8,10-11"; "" is empty). Raises ValueError."""
    out: list[int] = []
    text = text.strip()
    if not text:
        return out
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if ":" in part:  # "0-15:2/4" style is not used by sysfs cpulists; refuse clearly
            raise ValueError(f"unsupported cpulist range {part!r}")
        # ASCII digits only: int() would also take "+3", "1_0" and other scripts' digits
        match = _CPULIST_PART.fullmatch(part)
        if match is None:
            raise ValueError(f"bad cpulist entry {part!r}")
        lo = int(match.group(1))
        hi = int(match.group(2)) if match.group(2) is not None else lo
        if hi < lo or hi > MAX_CPU_ID:
            raise ValueError(f"bad cpulist range {part!r}")
        out.extend(range(lo, hi + 1))
    return sorted(set(out))


def format_cpulist(cpus: list[int]) -> str:
    """Format CPU ids as a compact kernel-style list ("0-3,8")."""
    ids = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)


def read_cpulist(ctx: ProbeContext, absolute: str) -> list[int] | Unavailable:
    path = ctx.path(absolute)
    try:
        raw = _read_bytes(path, whole=True)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        return unavailable_from_oserror(path, exc)
    try:
        return parse_cpulist(raw.decode("ascii"))
    except (ValueError, UnicodeDecodeError) as exc:
        return Unavailable("error", f"{path}: not a cpulist ({exc})")


def list_dir(ctx: ProbeContext, absolute: str) -> list[str] | Unavailable:
    path = ctx.path(absolute)
    try:
        return sorted(os.listdir(path))
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        return unavailable_from_oserror(path, exc)


def resolve_link(ctx: ProbeContext, absolute: str) -> Path | Unavailable:
    """realpath of a path under the root, kept inside the root."""
    path = ctx.path(absolute)
    try:
        os.stat(path)  # raises for missing targets and symlink loops
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        return unavailable_from_oserror(path, exc)
    return Path(os.path.realpath(path))


def link_name(ctx: ProbeContext, absolute: str) -> str | Unavailable:
    """Basename of a symlink's target (e.g. the driver a PCI device is bound to)."""
    path = ctx.path(absolute)
    try:
        return os.path.basename(os.readlink(path))
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        return unavailable_from_oserror(path, exc)


# The kernel gives up after 40 links in one lookup; so do we.
_MAX_LINK_HOPS = 40


def resolve_path(ctx: ProbeContext, absolute: str) -> str | Unavailable:
    """Resolve the symlinks of a system path inside the root, like realpath under chroot.

    Returns the resolved *system* path ("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"),
    which callers map with ``ctx.path`` again. Absolute link targets are taken relative to
    the root, so a captured tree with absolute links never leads back into the machine's
    own /sys. Every component must exist; a loop is unavailable (error).

    The plain readers above follow links as the OS does (resolving every read this way would
    cost a readlink per path component); fixture trees therefore keep links relative, as the
    kernel's own and capture_fixture's are, and probes resolve with this function where a
    link is the fact (PCI device paths, class links, os-release).
    """
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
        if hops > _MAX_LINK_HOPS:
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
    return os.path.lexists(ctx.path(absolute))


def read_bytes(ctx: ProbeContext, absolute: str, limit: int = MAX_READ) -> bytes | Unavailable:
    """Read up to ``limit`` raw bytes of a file under the root (efivars, binary attributes)."""
    path = ctx.path(absolute)
    try:
        return _read_bytes(path, limit)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        return unavailable_from_oserror(path, exc)


@dataclass(frozen=True)
class CommandResult:
    """What a bounded child process left behind: exit status and decoded output."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False


def kill_and_forget(proc: Any, name: str) -> None:
    """SIGKILL a child started with start_new_session=True (its whole group) and never wait for it.

    A child stuck in the kernel (uninterruptible sleep after a GPU fault) may not die at once;
    a daemon thread reaps it whenever it does, so no caller blocks and no zombie is left.
    ``proc`` is a subprocess.Popen.
    """
    import signal
    import threading

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        try:
            proc.kill()
        except OSError:
            pass
    for stream in (proc.stdout, proc.stderr):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass
    threading.Thread(target=proc.wait, name=f"reap-{name}", daemon=True).start()


def run_bounded(
    argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None, *, partial: bool = False
) -> CommandResult | Unavailable:
    """Run ``argv`` (never through a shell) with a hard wall-clock limit; never raise, never hang.

    The child gets its own session, so on timeout the whole process group is killed
    (a ``python`` wrapper script and its grandchildren too). A child stuck in the
    kernel (uninterruptible sleep after a GPU fault) may not die at once: it is
    reaped by a daemon thread, never waited for here. A missing program is
    not_found, an unexecutable one no_permission, a timeout is timeout; with
    ``partial=True`` a timeout returns what the child printed so far instead,
    marked ``timed_out``.
    """
    import subprocess

    name = os.path.basename(argv[0]) if argv else "?"
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            start_new_session=True,
            close_fds=True,
        )
    except FileNotFoundError:
        return Unavailable("not_found", f"{argv[0]}: no such program")
    except PermissionError:
        return Unavailable("no_permission", f"{argv[0]}: not executable")
    except (OSError, ValueError) as exc:
        return Unavailable("error", f"{argv[0]}: cannot start: {exc}")
    try:
        out, err = proc.communicate(timeout=max(0.01, timeout))
    except subprocess.TimeoutExpired as expired:
        kill_and_forget(proc, name)
        if partial:
            so_far = expired.output if isinstance(expired.output, bytes) else b""
            errs = expired.stderr if isinstance(expired.stderr, bytes) else b""
            return CommandResult(-9, so_far.decode("utf-8", "replace"), errs.decode("utf-8", "replace"), True)
        # the full path: "python did not finish" would not say which of a host's interpreters hung
        return Unavailable("timeout", f"{argv[0]} did not finish within {timeout:.1f} s and was killed")
    return CommandResult(
        proc.returncode,
        out.decode("utf-8", "replace") if out else "",
        err.decode("utf-8", "replace") if err else "",
    )


def is_dir(ctx: ProbeContext, absolute: str) -> bool:
    """Whether a path is a directory under the root, following its links inside the root."""
    real = resolve_path(ctx, absolute)
    return isinstance(real, str) and os.path.isdir(ctx.path(real))


def is_file(ctx: ProbeContext, absolute: str) -> bool:
    """Whether a path is a regular file under the root, following its links inside the root."""
    real = resolve_path(ctx, absolute)
    return isinstance(real, str) and os.path.isfile(ctx.path(real))
