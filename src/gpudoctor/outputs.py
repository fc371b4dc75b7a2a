"""Writing what gpudoctor produces: the one writer behind every output option, and stdout.

gpudoctor runs as root (a Slurm prolog, a Kubernetes DaemonSet, sudo), so an output path is
not trusted to name a plain file: every output option of every command (``-o/--output``,
``--json``, ``--junit``, ``--prometheus``, ``--nfd-features``, ``--plot``, ``probe -o``,
``report merge -o``, ...) goes through :func:`write_file`, which looks at what the path is
(``lstat``, the last component not followed) before touching it:

- the directories on the way are opened one at a time without following links; a symbolic
  link among them is followed only when root or this user owns it (``/var/run -> /run``), never
  another user's, so a link planted in /tmp or a shared directory cannot send the output into
  /etc. The rest is done relative to the directory's descriptor.
- missing, or a regular file: replaced atomically. A new file (random name, ``O_EXCL``,
  ``O_NOFOLLOW``, mode 0666 less the umask) in the same directory, written, fsynced and renamed
  over the path; readers never see half a file, a hard link to the old file is not written
  through, and on any failure the new file is removed.
- a character device or a FIFO (``/dev/null``, ``/dev/tty``, a named pipe): opened and written
  in place, never created or truncated. The open is non-blocking, so a FIFO that nobody has
  open is an error at once instead of a hang, and a reader that holds it open without reading
  is an error after WRITE_TIMEOUT_S without progress.
- a directory, a socket, a block device (a typo for a disk must not overwrite it) or anything
  else: refused.
- a symbolic link as the last component: followed only where that is what the caller meant and
  cannot clobber a file. A link that leads to one of this process's own descriptors
  (``/dev/stdout`` -> ``/proc/self/fd/1``, ``/dev/fd/N``, bash's ``>(cmd)``) is written through
  that descriptor, whatever it is: the caller's shell opened it. A link owned by root or this
  user to a character device or a FIFO is written as that device or FIFO. Any other link, to a
  regular file or to nothing, is refused with "it is a symbolic link; give the file it points
  to": as root, writing through a link that someone planted in /tmp would overwrite the file it
  names, e.g. one in /etc.

Every failure is an :class:`OutputError` whose text is one line, ``cannot write PATH: why``
(``No space left on device`` for /dev/full, ``Broken pipe``, ``Read-only file system``, ...).

:func:`write_stdout` writes the main output to standard output and turns a closed stdout, a
full disk or a reader that went away into the same kind of error. :func:`use_ascii_fallback`
makes stdout and stderr write what their encoding cannot (``✓`` on a latin-1 or ASCII stream, a
lone surrogate on a UTF-8 one) as the nearest ASCII (``->`` for ``→``) or ``?``, instead of
raising UnicodeEncodeError.

Text is written as UTF-8 (a lone surrogate as ``?``); the escaping of control characters is the
caller's (gpudoctor.cli.output.write_output applies gpudoctor.escaping.terminal_safe).
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from typing import Any

from .inputs import file_kind, os_reason


class OutputError(Exception):
    """An output that could not be written; ``str()`` is one line naming the path."""

    def __init__(self, shown: str, why: str) -> None:
        super().__init__(f"cannot write {shown}: {why}")
        self.shown = shown
        self.why = why


STDOUT = "standard output"

_DIRECT_FLAGS = os.O_WRONLY | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
# A path that names one of this process's open descriptors.
_OWN_FD = r"/(?:dev|proc/(?:self|thread-self|(?P<pid>\d+))(?:/task/\d+)?)/fd/(?P<fd>\d+)"


def _shown(path: str | os.PathLike[str]) -> str:
    from .escaping import printable

    return printable(os.fspath(path))


def _encode(data: str | bytes) -> bytes:
    return data.encode("utf-8", "replace") if isinstance(data, str) else bytes(data)


def write_file(path: str | os.PathLike[str], data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` as the module docstring says;
    OutputError on any refusal or failure."""
    shown = _shown(path)
    raw = _encode(data)
    try:
        text = os.fspath(path)
        if "\0" in text:
            raise ValueError("a NUL byte in the name")
        own = _own_descriptor(text) if os.path.islink(text) else None
    except (OSError, ValueError) as exc:
        raise OutputError(shown, os_reason(exc)) from None
    if own is not None:  # /dev/stdout, /dev/fd/N: the caller's shell opened it
        _write_own_descriptor(own, raw, shown)
        return
    dir_fd, name = _open_parent(text, shown)
    try:
        try:
            st: os.stat_result | None = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            raise OutputError(shown, os_reason(exc)) from None
        if st is None or stat.S_ISREG(st.st_mode):
            _replace(dir_fd, name, raw, shown)
        elif stat.S_ISLNK(st.st_mode):
            _through_link(dir_fd, name, st, raw, shown)
        elif stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
            _write_in_place(dir_fd, name, raw, shown, follow=False)
        else:
            raise OutputError(shown, f"it is {file_kind(st.st_mode)}; give a file name")
    finally:
        os.close(dir_fd)


_MAX_LINKS = 40  # the kernel's own limit in one lookup


def _trusted_link(st: os.stat_result) -> bool:
    """A symbolic link gpudoctor follows on the way to an output: one that root or this user
    made. Another user's link (planted in /tmp or a shared directory) is never followed: as root,
    writing through it would write wherever that user chose."""
    return st.st_uid in (0, os.geteuid())


def _open_parent(path: str, shown: str) -> tuple[int, str]:
    """A descriptor of the directory the output goes into, and the output's name in it.

    The directory is reached one component at a time, each opened relative to the one before
    without following a link (O_NOFOLLOW); a link on the way is followed only when root or this
    user owns it, so nobody else's link can redirect the output into /etc. Everything after
    this is done relative to the descriptor, so the directory cannot be swapped meanwhile."""
    absolute = os.path.abspath(path)
    parent, name = os.path.split(absolute)
    if not name or name in (".", ".."):
        raise OutputError(shown, "it names a directory; give a file name")
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    pending = [part for part in reversed(parent.split("/")) if part]
    links = 0
    fd = os.open("/", flags)
    try:
        while pending:
            part = pending.pop()
            if part == ".":
                continue
            try:
                next_fd = os.open(part, flags, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                st = os.stat(part, dir_fd=fd, follow_symlinks=False)
                if not stat.S_ISLNK(st.st_mode):
                    raise
                links += 1
                if links > _MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP)) from None
                if not _trusted_link(st):
                    raise OutputError(
                        shown, f"{_shown(part)} on the way is a symbolic link owned by uid {st.st_uid}, not followed"
                    ) from None
                target = os.readlink(part, dir_fd=fd)
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", flags)
                pending.extend(p for p in reversed(target.split("/")) if p)
                continue
            os.close(fd)
            fd = next_fd
        return fd, name
    except OSError as exc:
        os.close(fd)
        raise OutputError(shown, os_reason(exc)) from None
    except BaseException:
        os.close(fd)
        raise


def _replace(dir_fd: int, name: str, raw: bytes, shown: str) -> None:
    tmp = ""
    fd = -1
    try:
        for _ in range(100):
            candidate = f".{name}.{os.urandom(6).hex()}.tmp"
            try:
                fd = os.open(candidate, _CREATE_FLAGS, 0o666, dir_fd=dir_fd)  # the umask applies, as for open()
            except FileExistsError:
                continue
            tmp = candidate  # ours from here: removed on any failure below
            break
        else:
            raise FileExistsError(errno.EEXIST, "no free temporary file name")
        _write_all(fd, raw)
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        tmp = ""
        try:  # make the rename durable; best effort (some file systems cannot fsync a directory)
            os.fsync(dir_fd)
        except OSError:
            pass
    except OSError as exc:
        raise OutputError(shown, os_reason(exc)) from None
    finally:
        if fd >= 0:
            os.close(fd)
        if tmp:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass


def _through_link(dir_fd: int, name: str, link: os.stat_result, raw: bytes, shown: str) -> None:
    """The output's own name is a link (not one to this process's descriptors): written through
    only to a character device or FIFO, and only when root or this user made the link."""
    try:
        target: os.stat_result | None = os.stat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        target = None
    except OSError as exc:
        raise OutputError(shown, os_reason(exc)) from None
    device = target is not None and (stat.S_ISCHR(target.st_mode) or stat.S_ISFIFO(target.st_mode))
    if device and _trusted_link(link):
        _write_in_place(dir_fd, name, raw, shown, follow=True)
        return
    what = "which does not exist" if target is None else file_kind(target.st_mode)
    try:
        where = f" (to {_shown(os.readlink(name, dir_fd=dir_fd))}, {what})"
    except OSError:
        where = f" ({what})"
    if device:
        raise OutputError(shown, f"it is a symbolic link{where} owned by uid {link.st_uid}, not followed")
    raise OutputError(shown, f"it is a symbolic link{where}; give the file it points to")


def _own_descriptor(path: str) -> int | None:
    """The descriptor of this process that ``path`` leads to through its links, if any."""
    import re

    current = os.path.abspath(path)
    for _ in range(40):
        match = re.fullmatch(_OWN_FD, current)
        if match is not None:
            pid = match.group("pid")
            if pid is None or int(pid) == os.getpid():
                return int(match.group("fd"))
            return None
        try:
            link = os.readlink(current)
        except OSError:
            return None
        current = os.path.normpath(os.path.join(os.path.dirname(current), link))
    return None


def _write_own_descriptor(fd: int, raw: bytes, shown: str) -> None:
    if fd in (0, 1, 2):
        stream = (sys.stdin, sys.stdout, sys.stderr)[fd]
        if stream is None or isinstance(stream, ClosedStream):
            # closed when gpudoctor started: the number may since name a pipe of its own
            raise OutputError(shown, f"descriptor {fd} was closed when gpudoctor started")
    try:
        st = os.fstat(fd)
    except OSError as exc:
        raise OutputError(shown, f"descriptor {fd} is not open ({os_reason(exc)})") from None
    if stat.S_ISDIR(st.st_mode):
        raise OutputError(shown, "it is a directory; give a file name")
    if fd in (1, 2):  # what gpudoctor already printed there comes first
        stream = sys.stdout if fd == 1 else sys.stderr
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    try:
        _write_all(fd, raw)
    except OSError as exc:
        raise OutputError(shown, os_reason(exc)) from None


def _write_in_place(dir_fd: int, name: str, raw: bytes, shown: str, *, follow: bool) -> None:
    """A character device or FIFO: opened (never created or truncated) and written, within
    WRITE_TIMEOUT_S: a reader that holds a FIFO open and never reads must not hang gpudoctor."""
    flags = _DIRECT_FLAGS | (0 if follow else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise OutputError(shown, "a FIFO that no process is reading (or a device that is not there)") from None
        raise OutputError(shown, os_reason(exc)) from None
    try:
        st = os.fstat(fd)
        if not (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):  # replaced since lstat
            raise OutputError(shown, f"it changed to {file_kind(st.st_mode)} while being opened; not written")
        _write_all(fd, raw, timeout=WRITE_TIMEOUT_S)
    except TimeoutError:
        raise OutputError(shown, f"its reader took nothing for {WRITE_TIMEOUT_S:g} s") from None
    except OSError as exc:
        raise OutputError(shown, os_reason(exc)) from None
    finally:
        os.close(fd)


# How long a device or FIFO may go without taking any of the output.
WRITE_TIMEOUT_S = 30.0


def _write_all(fd: int, raw: bytes, timeout: float | None = None) -> None:
    """All of ``raw`` to ``fd``. On a non-blocking descriptor, wait for room; with ``timeout``,
    at most that long at a time (TimeoutError), else as long as it takes."""
    view = memoryview(raw)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            import select

            poller = select.poll()
            poller.register(fd, select.POLLOUT)
            if not poller.poll(None if timeout is None else int(timeout * 1000)):
                raise TimeoutError from None
            continue
        if written <= 0:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        view = view[written:]


# --- standard output --------------------------------------------------------------------------


class ClosedStream:
    """Stands in for sys.stdout or sys.stderr when the descriptor was closed before start (Python
    then sets them to None): writing to a closed stdout is an error, to a closed stderr nothing."""

    encoding = "utf-8"
    errors = "strict"

    def __init__(self, fails: bool) -> None:
        self.fails = fails

    def write(self, text: Any) -> int:
        if self.fails:
            raise OSError(errno.EBADF, "it is closed")
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise OSError(errno.EBADF, "it is closed")


def write_stdout(text: str) -> None:
    """Write the main output to sys.stdout and flush it; OutputError if that fails."""
    stream = sys.stdout
    if stream is None or (isinstance(stream, ClosedStream) and stream.fails):
        raise OutputError(STDOUT, "it is closed")
    try:
        stream.write(text)
        stream.flush()
    except OSError as exc:
        raise OutputError(STDOUT, os_reason(exc)) from None


def failed_standard_stream(exc: OSError) -> int | None:
    """1 or 2 when ``exc`` came from writing to stdout or stderr (click's echo writing --help,
    say), else None: the innermost frame wrote to a stream on that descriptor, or the stream
    still cannot be flushed."""
    tb = exc.__traceback__
    frame = None
    while tb is not None:
        frame, tb = tb.tb_frame, tb.tb_next
    stream = frame.f_locals.get("file") if frame is not None else None  # click.echo's stream
    if stream is not None:
        try:
            fd = stream.fileno()
        except (OSError, ValueError, AttributeError):
            fd = None
        if fd in (1, 2):
            return int(fd)
    for fd, std in ((1, sys.stdout), (2, sys.stderr)):
        if _stream_broken(std):
            return fd
    return None


def _stream_broken(stream: Any) -> bool:
    if stream is None or (isinstance(stream, ClosedStream) and stream.fails):
        return True
    try:
        stream.flush()
    except (OSError, ValueError):
        return True
    return False


# --- encoding fallback ------------------------------------------------------------------------

FALLBACK_ERRORS = "gpudoctor-ascii-fallback"

# The non-ASCII characters gpudoctor's renderers, rules and tables use, as ASCII.
_ASCII = {
    "✓": "ok",
    "✗": "x",
    "→": "->",
    "←": "<-",
    "↔": "<->",
    "—": "--",
    "–": "-",
    "−": "-",
    "…": "...",
    "×": "x",
    "≥": ">=",
    "≤": "<=",
    "≈": "~",
    "∩": "&",
    "•": "*",
    "·": "-",
    "◀": "<",
    "▶": ">",
    "°": " deg",
    "³": "^3",
    "²": "^2",
    "½": "1/2",
    "¼": "1/4",
    "¾": "3/4",
    "⅛": "1/8",
    "µ": "u",
    "±": "+/-",
    "\u00a0": " ",
    "‘": "'",
    "’": "'",
    "“": '"',
    "”": '"',
    "─": "-",
    "━": "-",
    "│": "|",
    "┃": "|",
    "├": "|",
    "└": "`",
    "┌": "+",
    "┐": "+",
    "┘": "+",
    "┬": "+",
    "┴": "+",
    "┼": "+",
    "┤": "|",
}


def _fallback(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    utf = exc.encoding.replace("-", "").replace("_", "").lower().startswith("utf")
    out = []
    for ch in exc.object[exc.start : exc.end]:
        if "\ud800" <= ch <= "\udfff":
            out.append("\ufffd" if utf else "?")
            continue
        ascii_text = _ASCII.get(ch)
        if ascii_text is None:
            import unicodedata

            decomposed = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode("ascii")
            ascii_text = decomposed if decomposed.isprintable() and decomposed else "?"
        out.append(ascii_text)
    return "".join(out), exc.end


def use_ascii_fallback() -> None:
    """Register the fallback and install it on sys.stdout and sys.stderr; closed standard
    streams are replaced by :class:`ClosedStream` so that later writes fail (stdout) or vanish
    (stderr) instead of raising AttributeError."""
    import codecs

    try:
        codecs.lookup_error(FALLBACK_ERRORS)
    except LookupError:
        codecs.register_error(FALLBACK_ERRORS, _fallback)
    if sys.stdout is None:
        sys.stdout = ClosedStream(fails=True)  # type: ignore[assignment]
    if sys.stderr is None:
        sys.stderr = ClosedStream(fails=False)  # type: ignore[assignment]
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is None or getattr(stream, "errors", None) == FALLBACK_ERRORS:
            continue
        try:
            reconfigure(errors=FALLBACK_ERRORS)
        except (OSError, ValueError, TypeError, AttributeError):
            pass
