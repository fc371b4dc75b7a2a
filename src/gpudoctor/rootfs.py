"""Path lookups that stay inside a root: a --root tree, a mounted image, a snapshot's tree.

Under a root that is not the live machine, every path a probe opens goes through :class:`RootFS`
(``ProbeContext.contained()``), which resolves it component by component inside the root:
absolute link targets are taken from the root, ``..`` stops at the root, at most
:data:`MAX_LINK_HOPS` links are followed, and only regular files and directories are opened (a
device node in an image is this machine's device; a FIFO would wait). Linux 5.6+ does the same
lookup in one call (openat2 with RESOLVE_IN_ROOT); elsewhere the walk below does it.

Base layer: imports gpudoctor.inputs only.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import weakref
from pathlib import Path
from typing import Any, Callable

from .inputs import file_kind
from .inputs import shown_excerpt as excerpt

# --- lookups inside a root ------------------------------------------------------------------------

# The kernel gives up after 40 links in one lookup; so do we.
MAX_LINK_HOPS = 40
# Path components one lookup may walk, its links' targets included: a sysfs device path has about
# a dozen; a tree whose links expand to thousands of components is built to make lookups slow.
MAX_LOOKUP_STEPS = 1024

_O_PATH = getattr(os, "O_PATH", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
# A handle on a file that opens nothing (no device is opened, no FIFO waited on): O_PATH on Linux.
_HANDLE = (_O_PATH or (os.O_RDONLY | _O_NONBLOCK)) | _O_CLOEXEC
# One directory of a walk, never through a link.
_WALK = _HANDLE | _O_DIRECTORY | _O_NOFOLLOW

# Use openat2(RESOLVE_IN_ROOT) where the kernel has it (Linux 5.6+): the same lookup as the walk
# below in one system call. Tests turn it off to exercise the walk.
USE_OPENAT2 = True
_OPENAT2_NR = {"x86_64": 437, "aarch64": 437, "arm64": 437, "ppc64le": 437, "s390x": 437, "riscv64": 437}
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_IN_ROOT = 0x10



class RootedError(OSError):
    """A lookup inside a root that failed. ``where`` is the system path at which it failed;
    ``detail``, when not None, says what the links did (the reader's message uses it)."""

    def __init__(self, code: int, where: str, detail: str | None = None) -> None:
        super().__init__(code, os.strerror(code))
        self.where = where
        self.detail = detail


def _load_openat2() -> Callable[[int, bytes, int], int] | None:
    """openat2(dirfd, path, flags) with RESOLVE_IN_ROOT, or None where the kernel (before 5.6), a
    seccomp filter (older container runtimes) or the platform does not give it."""
    number = _OPENAT2_NR.get(os.uname().machine)
    if number is None:
        return None
    try:
        import ctypes

        syscall = ctypes.CDLL(None, use_errno=True).syscall
    except (ImportError, OSError, AttributeError):
        return None
    syscall.restype = ctypes.c_long
    syscall.argtypes = (ctypes.c_long, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t)

    class OpenHow(ctypes.Structure):
        _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]

    hows: dict[int, Any] = {}
    size = ctypes.sizeof(OpenHow)

    def openat2(dirfd: int, path: bytes, flags: int) -> int:
        how = hows.get(flags)
        if how is None:
            how = hows[flags] = OpenHow(flags, 0, _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS)
        fd = int(syscall(number, dirfd, path, ctypes.byref(how), size))
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return fd

    try:
        top = os.open("/", _WALK)
    except OSError:
        return None
    try:
        os.close(openat2(top, b".", _WALK))
    except OSError:  # ENOSYS, EPERM from a filter, E2BIG/EINVAL from an odd kernel
        return None
    finally:
        os.close(top)
    return openat2


_openat2_state: list[Callable[[int, bytes, int], int] | None] = []
_openat2_lock = threading.Lock()


def _openat2() -> Callable[[int, bytes, int], int] | None:
    with _openat2_lock:
        if not _openat2_state:
            _openat2_state.append(_load_openat2())
        return _openat2_state[0]


def _close_all(fds: dict[str, int]) -> None:
    for fd in fds.values():
        try:
            os.close(fd)
        except OSError:
            pass
    fds.clear()


class RootFS:
    """System paths (/sys/..., /proc/..., /etc/...) looked up inside a directory tree, never outside it.

    The system path space is the probe's: ``/sys`` is ``sysfs_root`` when one is given, ``/proc``
    ``procfs_root``, everything else ``root``; a link's target is a path in that space (absolute
    from its top, relative from the link's directory) and so is ``..``, which never climbs above
    the top. Each directory is opened with O_NOFOLLOW relative to the one before, so the kernel
    never follows a link on the way; links are read and walked here. A single-root tree on a kernel
    with openat2 is looked up by the kernel with RESOLVE_IN_ROOT, which is the same lookup in one
    call; when that fails the walk runs anyway, so what a failure says never depends on the kernel.

    Every method raises OSError (a :class:`RootedError` from the walk, which says where and how it
    failed) or ValueError (a NUL byte in the path), as ``os`` does.
    """

    def __init__(self, root: Path, sysfs_root: Path | None = None, procfs_root: Path | None = None) -> None:
        self.root = root
        self.sysfs_root = sysfs_root
        self.procfs_root = procfs_root
        self._tops = {"": root}
        for name, top in (("sys", sysfs_root), ("proc", procfs_root)):
            if top is not None:
                self._tops[name] = top
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()
        self._openat2 = _openat2() if USE_OPENAT2 and len(self._tops) == 1 else None
        weakref.finalize(self, _close_all, self._fds)

    # -- the walk ----------------------------------------------------------------------------------

    def _top(self, name: str) -> int:
        """A handle on the directory that system path /<name> (or / for "") stands for."""
        fd = self._fds.get(name)
        if fd is not None:
            return fd
        with self._lock:
            if name not in self._fds:
                # The roots themselves are the caller's choice and followed as given.
                self._fds[name] = os.open(self._tops[name], _HANDLE | _O_DIRECTORY)
            return self._fds[name]

    def _walk(self, absolute: str, follow: bool) -> tuple[int, bool, str, list[str]]:
        """(directory handle, whether it is the caller's to close, the name of the path's last
        component in it ("." when the path is that directory), the directory's system path as
        components). With ``follow`` the last component has been checked not to be a link."""
        if "\0" in absolute:
            raise ValueError("embedded null byte")
        # (component, the link whose target it comes from: (link's system path, target), or None)
        pending: list[tuple[str, tuple[str, str] | None]] = [
            (part, None) for part in reversed(absolute.split("/")) if part and part != "."
        ]
        names: list[str] = []
        # fds[i] is the handle of the directory names[:i] (None: the root, opened when first
        # needed, so that a missing root does not stop a lookup under a separate sysfs root)
        fds: list[int | None] = [None]
        owned = [False]
        hops = steps = 0
        try:
            while pending:
                part, origin = pending.pop()
                steps += 1
                if steps > MAX_LOOKUP_STEPS:
                    raise self._fail(errno.ENAMETOOLONG, names, part, origin)
                if part == "..":
                    if names:  # at the top, .. is the top
                        names.pop()
                        fd = fds.pop()
                        if owned.pop() and fd is not None:
                            os.close(fd)
                    continue
                if not names and part in self._tops:
                    names.append(part)
                    fds.append(self._top(part))
                    owned.append(False)
                    continue
                here = fds[-1]
                if here is None:
                    here = fds[-1] = self._top("")
                if not pending:  # the last component
                    if not follow:
                        fds.pop()
                        return here, owned.pop(), part, names
                    try:
                        target = os.readlink(part, dir_fd=here)
                    except OSError as exc:
                        if exc.errno == errno.EINVAL:  # there, and not a link
                            fds.pop()
                            return here, owned.pop(), part, names
                        raise self._fail(exc.errno or errno.EIO, names, part, origin) from None
                else:
                    try:
                        fd = os.open(part, _WALK, dir_fd=here)
                    except OSError as exc:
                        if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                            raise self._fail(exc.errno or errno.EIO, names, part, origin) from None
                        try:
                            target = os.readlink(part, dir_fd=here)
                        except OSError as again:
                            code = errno.ENOTDIR if again.errno == errno.EINVAL else again.errno or errno.EIO
                            raise self._fail(code, names, part, origin) from None
                    else:
                        names.append(part)
                        fds.append(fd)
                        owned.append(True)
                        continue
                hops += 1
                if hops > MAX_LINK_HOPS:
                    raise self._fail(errno.ELOOP, names, part, origin)
                link = ("/" + "/".join([*names, part]), target)
                if target.startswith("/"):
                    for fd, mine in zip(fds, owned):
                        if mine and fd is not None:
                            os.close(fd)
                    names, fds, owned = [], [None], [False]
                pending.extend((p, link) for p in reversed(target.split("/")) if p and p != ".")
            last = fds.pop()
            return self._top("") if last is None else last, owned.pop(), ".", names
        finally:
            for fd, mine in zip(fds, owned):
                if mine and fd is not None:
                    os.close(fd)

    @staticmethod
    def _fail(code: int, names: list[str], part: str, origin: tuple[str, str] | None) -> RootedError:
        where = "/" + "/".join([*names, part])
        if code == errno.ELOOP:
            return RootedError(code, where, f"symlink loop (more than {MAX_LINK_HOPS} links)")
        if code == errno.ENAMETOOLONG:
            return RootedError(code, where, f"more than {MAX_LOOKUP_STEPS} path components through its links")
        if origin is None:
            return RootedError(code, where)  # not a link's doing: the usual message says it all
        link, target = origin
        what = {
            errno.ENOENT: "does not exist",
            errno.ENOTDIR: "is not a directory",
            errno.EACCES: "may not be read",
            errno.EPERM: "may not be read",
        }.get(code, os.strerror(code))
        return RootedError(
            code,
            where,
            f"symlink {excerpt(link, 100)} points to {excerpt(target, 100)}, taken inside the root, "
            f"where {excerpt(where, 100)} {what}",
        )

    def _locate(self, absolute: str, follow: bool) -> tuple[int, bool, str, os.stat_result]:
        """(directory handle, whether it is the caller's to close, the last component's name in it,
        that component's lstat). With ``follow`` the last component is not a link."""
        if self._openat2 is not None and "\0" not in absolute:
            head, _, leaf = absolute.rpartition("/")
            if leaf not in ("", ".", ".."):
                # the kernel looks the directory up inside the root; the last component is looked at here
                try:
                    dirfd = self._openat2(self._top(""), os.fsencode(head.lstrip("/") or "."), _HANDLE | _O_DIRECTORY)
                except OSError:
                    pass  # the walk says why, the same on every kernel
                else:
                    try:
                        found = os.stat(leaf, dir_fd=dirfd, follow_symlinks=False)
                    except OSError as exc:
                        os.close(dirfd)
                        if exc.errno == errno.ENOENT:  # the walk would say just this: no link's doing
                            raise RootedError(errno.ENOENT, absolute) from None
                    else:
                        if not (follow and stat.S_ISLNK(found.st_mode)):
                            return dirfd, True, leaf, found
                        os.close(dirfd)
        dirfd, mine, leaf, names = self._walk(absolute, follow)
        try:
            return dirfd, mine, leaf, os.stat(leaf, dir_fd=dirfd, follow_symlinks=False)
        except OSError as exc:  # gone since the walk looked
            if mine:
                os.close(dirfd)
            raise RootedError(exc.errno or errno.EIO, "/" + "/".join([*names, leaf])) from None

    # -- what the readers use -----------------------------------------------------------------------

    def open(self, absolute: str, flags: int) -> int:
        """A file descriptor of the regular file or directory a system path names, opened with
        ``flags`` (os.O_RDONLY, O_DIRECTORY ...; always non-blocking). Anything else (a FIFO, a
        socket, a device node) is refused before it is opened: EOPNOTSUPP, with a detail saying
        what it is."""
        dirfd, mine, leaf, found = self._locate(absolute, True)
        try:
            kind = stat.S_IFMT(found.st_mode)
            if kind not in (stat.S_IFREG, stat.S_IFDIR):
                raise RootedError(
                    errno.EOPNOTSUPP,
                    absolute,
                    f"is {file_kind(kind)}: under a root only regular files are read",
                )
            if kind == stat.S_IFDIR and not (flags & _O_DIRECTORY):  # reading a directory as a file
                raise RootedError(errno.EISDIR, absolute)
            fd = os.open(leaf, flags | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC, dir_fd=dirfd)
        finally:
            if mine:
                os.close(dirfd)
        got = os.fstat(fd)
        if (got.st_dev, got.st_ino) != (found.st_dev, found.st_ino):  # swapped since it was looked at
            os.close(fd)
            raise RootedError(errno.EAGAIN, absolute, "changed while it was being opened")
        return fd

    def stat(self, absolute: str, follow: bool = True) -> os.stat_result:
        """stat (or, without ``follow``, lstat) of a system path inside the root."""
        dirfd, mine, _, found = self._locate(absolute, follow)
        if mine:
            os.close(dirfd)
        return found

    def listdir(self, absolute: str) -> list[str]:
        fd = self.open(absolute, os.O_RDONLY | _O_DIRECTORY)
        try:
            return os.listdir(fd)
        finally:
            os.close(fd)

    def readlink(self, absolute: str) -> str:
        """The target of the symlink a system path names (its own directories resolved inside the root)."""
        dirfd, mine, leaf, found = self._locate(absolute, False)
        try:
            if not stat.S_ISLNK(found.st_mode):
                raise RootedError(errno.EINVAL, absolute)
            return os.readlink(leaf, dir_fd=dirfd)
        finally:
            if mine:
                os.close(dirfd)

    def resolve(self, absolute: str) -> str:
        """The system path with every link resolved inside the root (realpath under chroot);
        every component must exist."""
        dirfd, mine, leaf, names = self._walk(absolute, True)
        if mine:
            os.close(dirfd)
        if leaf != ".":
            names = [*names, leaf]
        return "/" + "/".join(names)
