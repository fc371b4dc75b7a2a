"""Writing what gpudoctor produces: the one writer behind every output option, and stdout.

gpudoctor runs as root (a Slurm prolog, a Kubernetes DaemonSet, sudo), so an output path is
not trusted to name a plain file: every output option of every command (``-o/--output``,
``--json``, ``--junit``, ``--prometheus``, ``--nfd-features``, ``--plot``, ``probe -o``,
``report merge -o``, ...) goes through :func:`write_file`, which looks at what the path is
(``lstat``, the last component not followed) before touching it:

- missing, or a regular file: replaced atomically. A new file (random name, ``O_EXCL``,
  ``O_NOFOLLOW``, mode 0666 less the umask) in the same directory, written, fsynced and renamed
  over the path; readers never see half a file, a hard link to the old file is not written
  through, and on any failure the new file is removed.
- a character device or a FIFO (``/dev/null``, ``/dev/tty``, a named pipe): opened and written
  in place, never created or truncated. The open is non-blocking, so a FIFO that nobody reads
  is an error at once instead of a hang; the descriptor is made blocking for the write.
- a Unix socket: connected to and written.
- a directory, a block device (a typo for a disk must not overwrite it) or anything else:
  refused.
- a symbolic link: followed only where that is what the caller meant and cannot clobber a
  file. A link that leads to one of this process's own descriptors (``/dev/stdout`` ->
  ``/proc/self/fd/1``, ``/dev/fd/N``, bash's ``>(cmd)``) is written through that descriptor,
  whatever it is: the caller's shell opened it. A link to a character device or a FIFO is written
  as that device or FIFO. Any other link, to a regular file or to nothing, is refused with
  "it is a symbolic link; give the file it points to": as root, writing through a link that
  someone planted in /tmp would overwrite the file it names, e.g. one in /etc.

Every failure is an :class:`OutputError` whose text is one line, ``cannot write PATH: why``
(``No space left on device`` for /dev/full, ``Broken pipe``, ``Read-only file system``, ...).

:func:`write_stdout` writes the main output to standard output and turns a closed stdout, a
full disk or a reader that went away into the same kind of error. :func:`use_ascii_fallback`
makes stdout and stderr write what their encoding cannot (``✓`` on a latin-1 or ASCII stream, a
lone surrogate on a UTF-8 one) as the nearest ASCII (``->`` for ``→``) or ``?``, instead of
raising UnicodeEncodeError.

Text is written as UTF-8 (a lone surrogate as ``?``); the escaping of control characters is the
caller's (gpudoctor.cli.write_output applies gpudoctor.render.safe.terminal_safe).
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from typing import Any


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
    from .render.safe import printable

    return printable(os.fspath(path))


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or errno.errorcode.get(exc.errno or 0, "") or str(exc)
    return str(exc)


def _encode(data: str | bytes) -> bytes:
    return data.encode("utf-8", "replace") if isinstance(data, str) else bytes(data)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISREG, "a regular file"),
    ):
        if test(mode):
            return name
    return "not a file gpudoctor writes"


def write_file(path: str | os.PathLike[str], data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` as the module docstring says;
    OutputError on any refusal or failure."""
    shown = _shown(path)
    raw = _encode(data)
    try:
        st: os.stat_result | None = os.lstat(path)
    except FileNotFoundError:
        st = None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        raise OutputError(shown, _why(exc)) from None
    if st is None or stat.S_ISREG(st.st_mode):
        _replace(os.fspath(path), raw, shown)
    elif stat.S_ISLNK(st.st_mode):
        _through_link(os.fspath(path), raw, shown)
    elif stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
        _write_in_place(os.fspath(path), raw, shown)
    elif stat.S_ISSOCK(st.st_mode):
        _write_socket(os.fspath(path), raw, shown)
    else:
        raise OutputError(shown, f"it is {_kind(st.st_mode)}; give a file name")


def _replace(path: str, raw: bytes, shown: str) -> None:
    directory, name = os.path.split(path)
    if not name:
        raise OutputError(shown, "it names a directory; give a file name")
    tmp = ""
    fd = -1
    try:
        for _ in range(100):
            candidate = os.path.join(directory, f".{name}.{os.urandom(6).hex()}.tmp")
            try:
                fd = os.open(candidate, _CREATE_FLAGS, 0o666)  # the umask applies, as for a plain open()
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
        os.replace(tmp, path)
        tmp = ""
        _sync_directory(directory)
    except OSError as exc:
        raise OutputError(shown, _why(exc)) from None
    finally:
        if fd >= 0:
            os.close(fd)
        if tmp:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _sync_directory(directory: str) -> None:
    """Make the rename durable; best effort (some file systems cannot fsync a directory)."""
    try:
        fd = os.open(directory or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _through_link(path: str, raw: bytes, shown: str) -> None:
    own = _own_descriptor(path)
    if own is not None:
        _write_own_descriptor(own, raw, shown)
        return
    try:
        target = os.stat(path)
    except FileNotFoundError:
        target = None
    except OSError as exc:
        raise OutputError(shown, _why(exc)) from None
    if target is not None and (stat.S_ISCHR(target.st_mode) or stat.S_ISFIFO(target.st_mode)):
        _write_in_place(path, raw, shown)
        return
    what = "which does not exist" if target is None else _kind(target.st_mode)
    try:
        where = f" (to {_shown(os.readlink(path))}, {what})"
    except OSError:
        where = f" ({what})"
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
        raise OutputError(shown, f"descriptor {fd} is not open ({_why(exc)})") from None
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
        raise OutputError(shown, _why(exc)) from None


def _write_in_place(path: str, raw: bytes, shown: str) -> None:
    """A character device or FIFO: opened (never created or truncated) and written."""
    try:
        fd = os.open(path, _DIRECT_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise OutputError(shown, "a FIFO that no process is reading (or a device that is not there)") from None
        raise OutputError(shown, _why(exc)) from None
    try:
        st = os.fstat(fd)
        if not (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):  # replaced since lstat
            raise OutputError(shown, f"it changed to {_kind(st.st_mode)} while being opened; not written")
        import fcntl

        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        _write_all(fd, raw)
    except OSError as exc:
        raise OutputError(shown, _why(exc)) from None
    finally:
        os.close(fd)


def _write_socket(path: str, raw: bytes, shown: str) -> None:
    import socket

    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            try:
                sock.connect(path)
            except OSError as exc:
                if exc.errno != errno.EPROTOTYPE:
                    raise
                sock.close()
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                sock.connect(path)
                sock.send(raw)
                return
            sock.sendall(raw)
        finally:
            sock.close()
    except OSError as exc:
        raise OutputError(shown, _why(exc)) from None


def _write_all(fd: int, raw: bytes) -> None:
    view = memoryview(raw)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:  # an inherited non-blocking descriptor: wait until it takes more
            import select

            select.select([], [fd], [])
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
        raise OutputError(STDOUT, _why(exc)) from None


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
