"""The NVIDIA kernel module as installed on disk: for the running kernel, for the other installed
kernels, in DKMS, and the kernel headers a rebuild needs: the ``kernel_modules`` facts.

Reads (all through the context root; no subprocess, no modinfo, no dkms):

- ``/proc/sys/kernel/osrelease`` (live: ``os.uname().release``): the running kernel's release
- ``/lib/modules/<release>/{updates/dkms,updates,extra,kernel/drivers/video}`` and Ubuntu's
  ``kernel/nvidia-<branch>`` directories, walked at most MAX_DEPTH levels and MAX_ENTRIES entries
  per kernel, no symlinked directory followed: ``nvidia.ko``, ``.ko.xz``, ``.ko.zst``, ``.ko.gz``
- the same for at most MAX_KERNELS other releases under ``/lib/modules``
- ``/lib/modules/<release>/build``: the headers, present when it resolves (inside the root) to a
  directory holding a ``Makefile``
- ``/var/lib/dkms/nvidia/<version>/<release>/<arch>/module/nvidia.ko*`` (built for a kernel) and
  the tail (last MAX_LOG_TAIL bytes) of ``/var/lib/dkms/nvidia/<version>/build/make.log``
- the installed module's version: the DKMS directory name, else the ``version=`` entry of the
  ``.modinfo`` section of the running kernel's ``nvidia.ko`` (else another kernel's), read from
  the ELF section headers with bounded positioned reads; ``.ko.xz`` / ``.ko.gz`` are streamed
  through lzma / zlib with an output cap and the run's deadline; ``.ko.zst`` is not_supported
  (no zstd in this Python's standard library). The ELF file is only parsed while the nvidia module
  is not loaded (no ``/sys/module/nvidia``): loaded, its version is known from sysfs.

A host with no ``/lib/modules`` at all (many containers, some VMs) has every module fact
unavailable (not_found): nothing says whether a module was ever installed.
"""

from __future__ import annotations

import os
import re
import stat
import struct
import sys
import time
from typing import Any, Callable

from ..context import ProbeContext, excerpt
from ..escaping import printable
from ..facts import Unavailable
from ..lazy_re import LazyPattern
from .files import exists, is_dir, is_file, list_dir, open_fd, resolve_path, stat_path, unavailable_from_oserror

MODULE_NAMES = ("nvidia.ko", "nvidia.ko.xz", "nvidia.ko.zst", "nvidia.ko.gz")
# Where distributions and installers put nvidia.ko under /lib/modules/<release>: DKMS (updates/dkms
# on Debian/Ubuntu, extra on RHEL/SUSE), precompiled kmod packages (extra), the .run installer
# (kernel/drivers/video), Ubuntu's signed linux-modules-nvidia packages (kernel/nvidia-<branch>).
MODULE_DIRS = ("updates/dkms", "updates", "extra", "kernel/drivers/video")
MAX_DEPTH = 3
MAX_ENTRIES = 2048  # directory entries looked at per kernel
MAX_KERNELS = 32  # other releases under /lib/modules looked at
MAX_DKMS_VERSIONS = 16
MAX_NAME = 255
MAX_LOG_TAIL = 64 * 1024
MAX_LOG_LINE = 300
# ELF: section headers, the section-name table and .modinfo are read only within these sizes.
MAX_SECTIONS = 65535
MAX_SHSTRTAB = 4 << 20
MAX_MODINFO = 1 << 20
# Decompressed bytes a compressed module may cost, over every pass through it.
MAX_DECOMPRESSED = 512 << 20
_CHUNK = 1 << 16

_RELEASE = LazyPattern(r"^[A-Za-z0-9._+~-]{1,128}$")
_VERSION = LazyPattern(r"^\d{1,4}\.\d{1,4}(?:\.\d{1,4})?$")
_ERROR_WORD = LazyPattern(r"\berror\b", re.IGNORECASE)


class ModuleReadError(Exception):
    """The module file is not one whose version can be read (truncated, not ELF, too big)."""


# --- reading the version out of an ELF module -------------------------------------------------------

Reader = Callable[[int, int], bytes]


def elf_modinfo_version(read_at: Reader) -> str | None:
    """The ``version=`` of the ``.modinfo`` section of an ELF kernel module, or None when it has
    none; ModuleReadError when the file is not a readable ELF object. ``read_at(offset, size)``
    returns up to ``size`` bytes at ``offset``; every size asked for is bounded above."""
    ident = read_at(0, 64)
    if len(ident) < 52 or ident[:4] != b"\x7fELF":
        raise ModuleReadError("not an ELF file")
    klass, data = ident[4], ident[5]
    if klass not in (1, 2) or data not in (1, 2):
        raise ModuleReadError("unknown ELF class or byte order")
    end = "<" if data == 1 else ">"
    if klass == 2:
        if len(ident) < 64:
            raise ModuleReadError("truncated ELF header")
        shoff, = struct.unpack_from(end + "Q", ident, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", ident, 0x3A)
        want_entsize, entry = 64, end + "IIQQQQIIQQ"
    else:
        shoff, = struct.unpack_from(end + "I", ident, 0x20)
        shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", ident, 0x2E)
        want_entsize, entry = 40, end + "IIIIIIIIII"
    if shentsize != want_entsize or not 0 < shnum <= MAX_SECTIONS or shstrndx >= shnum:
        raise ModuleReadError("no usable section header table")
    table = read_at(shoff, shnum * shentsize)
    if len(table) < shnum * shentsize:
        raise ModuleReadError("truncated: the section headers are cut off")
    sections = []
    for i in range(shnum):
        fields = struct.unpack_from(entry, table, i * shentsize)
        # name, type, flags, addr, offset, size
        sections.append((fields[0], fields[1], fields[4], fields[5]))
    _, _, str_off, str_size = sections[shstrndx]
    if str_size > MAX_SHSTRTAB:
        raise ModuleReadError("section name table too large")
    names = read_at(str_off, str_size)
    if len(names) < str_size:
        raise ModuleReadError("truncated: the section names are cut off")
    for name_off, kind, offset, size in sections:
        if names[name_off:name_off + 9] != b".modinfo\0" or kind == 8:  # SHT_NOBITS holds no bytes
            continue
        if size > MAX_MODINFO:
            raise ModuleReadError(".modinfo section too large")
        info = read_at(offset, size)
        if len(info) < size:
            raise ModuleReadError("truncated: .modinfo is cut off")
        for item in info.split(b"\0"):
            if item.startswith(b"version="):
                value = item[8:].decode("ascii", "replace")
                return value if _VERSION.match(value) else None
        return None
    return None


def _plain_reader(fd: int) -> Reader:
    size = os.fstat(fd).st_size

    def read_at(offset: int, count: int) -> bytes:
        if offset < 0 or offset >= size:
            return b""
        return os.pread(fd, min(count, size - offset), offset)

    return read_at


class _StreamReader:
    """Positioned reads of a compressed file by decompressing it from the start (again for a read
    behind the current position), within MAX_DECOMPRESSED bytes of output and a deadline."""

    def __init__(self, fd: int, kind: str, deadline: float) -> None:
        self.fd, self.kind, self.deadline = fd, kind, deadline
        self.spent = 0
        self._restart()

    def _restart(self) -> None:
        # imported here: most modules are plain .ko (or .ko.zst), and lzma with zlib is 1 ms of import
        import lzma
        import zlib

        os.lseek(self.fd, 0, os.SEEK_SET)
        self.codec: Any = lzma.LZMADecompressor() if self.kind == "xz" else zlib.decompressobj(16 + zlib.MAX_WBITS)
        self.pos = 0  # decompressed bytes produced so far in this pass

    def _more(self, limit: int) -> bytes:
        """Up to ``limit`` more decompressed bytes; b"" at the end of the stream (or of the file)."""
        while not self.codec.eof:
            if time.monotonic() > self.deadline:
                raise TimeoutError("the deadline passed while decompressing the module")
            if self.kind == "xz":
                data = os.read(self.fd, _CHUNK) if self.codec.needs_input else b""
                if self.codec.needs_input and not data:
                    return b""  # cut short
            else:
                data = self.codec.unconsumed_tail or os.read(self.fd, _CHUNK)
                if not data:
                    return b""
            out = self.codec.decompress(data, limit)
            if out:
                self.spent += len(out)
                if self.spent > MAX_DECOMPRESSED:
                    raise ModuleReadError(f"more than {MAX_DECOMPRESSED} bytes decompressed")
                return bytes(out)
        return b""

    def read_at(self, offset: int, count: int) -> bytes:
        if offset < self.pos:
            self._restart()
        while self.pos < offset:  # skip to offset, keeping nothing
            chunk = self._more(min(_CHUNK, offset - self.pos))
            if not chunk:
                return b""
            self.pos += len(chunk)
        parts: list[bytes] = []
        got = 0
        while got < count:
            chunk = self._more(min(_CHUNK, count - got))
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
            self.pos += len(chunk)
        return b"".join(parts)


def _codec_errors() -> tuple[type[Exception], ...]:
    """lzma's and zlib's errors, of those imported (only a compressed module imports them, and
    only they raise them)."""
    lzma, zlib = sys.modules.get("lzma"), sys.modules.get("zlib")
    return ((lzma.LZMAError,) if lzma is not None else ()) + ((zlib.error,) if zlib is not None else ())


def module_version(ctx: ProbeContext, path: str) -> str | Unavailable:
    """The version= of a module file's .modinfo (a system path under the root)."""
    if path.endswith(".zst"):
        return Unavailable("not_supported", f"{ctx.path(path)}: zstd-compressed, which this Python cannot read")
    try:
        fd = open_fd(ctx, path)
    except (OSError, ValueError) as exc:
        return unavailable_from_oserror(ctx.path(path), exc)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return Unavailable("not_supported", f"{ctx.path(path)}: not a regular file")
        kind = path.rsplit(".", 1)[-1]
        reader = _StreamReader(fd, kind, ctx.work_deadline()).read_at if kind in ("xz", "gz") else _plain_reader(fd)
        version = elf_modinfo_version(reader)
    except TimeoutError as exc:
        return Unavailable("timeout", f"{ctx.path(path)}: {exc}")
    except (ModuleReadError, EOFError) as exc:
        return Unavailable("error", f"{ctx.path(path)}: {exc}")
    except Exception as exc:  # garbage: not an ELF file, or a stream that lzma or zlib refuses
        if not isinstance(exc, (OSError, ValueError, struct.error, *_codec_errors())):
            raise
        return Unavailable("error", f"{ctx.path(path)}: not a readable module ({type(exc).__name__})")
    finally:
        os.close(fd)
    if version is None:
        return Unavailable("not_found", f"{ctx.path(path)}: no version= in its .modinfo")
    return version


# --- the module files of one kernel ---------------------------------------------------------------


def _is_real_dir(ctx: ProbeContext, path: str) -> bool:
    try:
        return stat.S_ISDIR(stat_path(ctx, path, follow=False).st_mode)
    except (OSError, ValueError):
        return False


def find_module(ctx: ProbeContext, release: str, stop: float) -> str | None | Unavailable:
    """The system path of nvidia.ko* for one kernel release, None when it has none, Unavailable
    when the walk was cut short (entry cap, deadline) before finding one."""
    base = f"/lib/modules/{release}"
    starts = [f"{base}/{d}" for d in MODULE_DIRS]
    kernel = list_dir(ctx, f"{base}/kernel")
    if isinstance(kernel, list):
        starts += [f"{base}/kernel/{n}" for n in kernel if n.startswith("nvidia") and len(n) <= MAX_NAME][:8]
    seen: set[str] = set()
    budget = MAX_ENTRIES
    pending = [(p, 0) for p in reversed(starts)]
    while pending:
        directory, depth = pending.pop()
        if directory in seen or not _is_real_dir(ctx, directory):
            continue
        seen.add(directory)
        names = list_dir(ctx, directory)
        if isinstance(names, Unavailable):
            continue
        for name in MODULE_NAMES:
            if name in names and is_file(ctx, f"{directory}/{name}"):
                return f"{directory}/{name}"
        budget -= len(names)
        if budget < 0 or time.monotonic() > stop:
            why = "the deadline passed" if budget >= 0 else f"more than {MAX_ENTRIES} entries"
            return Unavailable("timeout" if budget >= 0 else "not_supported",
                               f"{ctx.path(base)}: not every module directory was looked at ({why})")
        if depth < MAX_DEPTH:
            pending.extend((f"{directory}/{n}", depth + 1) for n in reversed(names)
                           if len(n) <= MAX_NAME and n not in (".", ".."))
    return None


def _headers(ctx: ProbeContext, release: str) -> bool | Unavailable:
    build = f"/lib/modules/{release}/build"
    if not exists(ctx, build):
        return False
    real = resolve_path(ctx, build)
    if isinstance(real, Unavailable):
        if real.reason == "not_found":
            return False  # a dangling link: the headers package was removed
        return real  # a link out of the root, a loop
    return is_dir(ctx, real) and is_file(ctx, f"{real}/Makefile")


# --- DKMS -----------------------------------------------------------------------------------------


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def last_error_line(text: str) -> str | None:
    """The last line of a build log that names an error (a compiler ``error:`` first, else make's
    ``Error N``), shortened and printable; None when no line does."""
    lines = text.splitlines()
    for want in (lambda s: ": error:" in s or ": fatal error:" in s, lambda s: bool(_ERROR_WORD.search(s))):
        for line in reversed(lines):
            if want(line):
                line = printable(line.strip())
                return line if len(line) <= MAX_LOG_LINE else line[: MAX_LOG_LINE - 3] + "..."
    return None


def _log_tail(ctx: ProbeContext, path: str) -> str | Unavailable:
    try:
        fd = open_fd(ctx, path)
    except (OSError, ValueError) as exc:
        return unavailable_from_oserror(ctx.path(path), exc)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return Unavailable("not_supported", f"{ctx.path(path)}: not a regular file")
        start = max(0, info.st_size - MAX_LOG_TAIL)
        raw = os.pread(fd, MAX_LOG_TAIL, start)
    except OSError as exc:
        return unavailable_from_oserror(ctx.path(path), exc)
    finally:
        os.close(fd)
    text = raw.decode("utf-8", "replace")
    if start:
        text = text.split("\n", 1)[-1]  # the first line may be cut
    found = last_error_line(text)
    if found is None:
        return Unavailable("not_found", f"{ctx.path(path)}: no error line in its last {MAX_LOG_TAIL >> 10} KiB")
    return found


def _dkms(ctx: ProbeContext, release: str | Unavailable, stop: float) -> dict[str, Any]:
    root = "/var/lib/dkms/nvidia"
    names = list_dir(ctx, root)
    keys = ("dkms_versions", "dkms_version", "dkms_built_for_running", "dkms_built_kernels", "dkms_make_log_error")
    if isinstance(names, Unavailable):
        if names.reason == "not_found":
            names = Unavailable("not_found", "no /var/lib/dkms/nvidia: the driver is not registered with DKMS")
        return dict.fromkeys(keys, names)
    versions = sorted((n for n in names if _VERSION.match(n) and _is_real_dir(ctx, f"{root}/{n}")),
                      key=_version_key, reverse=True)[:MAX_DKMS_VERSIONS]
    if not versions:
        none = Unavailable("not_found", f"{ctx.path(root)} holds no version directory")
        return dict.fromkeys(keys, none)
    out: dict[str, Any] = {"dkms_versions": versions}
    built_for: dict[str, list[str]] = {}
    for version in versions:
        kernels = list_dir(ctx, f"{root}/{version}")
        built_for[version] = []
        if isinstance(kernels, Unavailable):
            continue
        for kernel in kernels[:MAX_KERNELS + 2]:
            if kernel in ("build", "source") or not _RELEASE.match(kernel) or time.monotonic() > stop:
                continue
            arches = list_dir(ctx, f"{root}/{version}/{kernel}")
            if isinstance(arches, Unavailable):
                continue
            for arch in arches[:4]:
                module = list_dir(ctx, f"{root}/{version}/{kernel}/{arch}/module")
                if isinstance(module, list) and any(n in module for n in MODULE_NAMES):
                    built_for[version].append(kernel)
                    break
    chosen = versions[0]
    if isinstance(release, str):
        for version in versions:
            if release in built_for[version]:
                chosen = version
                break
        out["dkms_built_for_running"] = release in built_for[chosen]
    else:
        out["dkms_built_for_running"] = release
    out["dkms_version"] = chosen
    out["dkms_built_kernels"] = sorted(built_for[chosen])
    out["dkms_make_log_error"] = _log_tail(ctx, f"{root}/{chosen}/build/make.log")
    return out


# --- the section ----------------------------------------------------------------------------------


def _release(ctx: ProbeContext) -> str | Unavailable:
    if ctx.live:
        value = os.uname().release
    else:
        from .files import read_text

        read = read_text(ctx, "/proc/sys/kernel/osrelease", limit=256)
        if isinstance(read, Unavailable):
            return read
        value = read
    if not _RELEASE.match(value):
        return Unavailable("error", f"not a kernel release: {excerpt(value, 60)}")
    return value


def collect(ctx: ProbeContext) -> dict[str, Any]:
    stop = ctx.work_deadline()
    release = _release(ctx)
    out: dict[str, Any] = {"release": release}
    other_modules: dict[str, str] = {}
    kernels = list_dir(ctx, "/lib/modules")
    module_keys = ("running_has_module", "running_module", "other_kernels_with_module", "headers_present")
    if isinstance(kernels, Unavailable):
        if kernels.reason == "not_found":
            kernels = Unavailable(
                "not_found", "no /lib/modules here (a container, or a VM image without the kernel's modules)"
            )
        out.update(dict.fromkeys(module_keys, kernels))
    elif isinstance(release, Unavailable):
        out.update(dict.fromkeys(module_keys, release))
    else:
        found = find_module(ctx, release, stop) if release in kernels else None
        if isinstance(found, Unavailable):
            out["running_has_module"] = out["running_module"] = found
        else:
            out["running_has_module"] = found is not None
            out["running_module"] = found if found else Unavailable(
                "not_found", f"no nvidia.ko, .ko.xz, .ko.zst or .ko.gz under {ctx.path('/lib/modules/' + release)}"
            )
        others: list[str] = []
        for name in [k for k in kernels if k != release and _RELEASE.match(k)][-MAX_KERNELS:]:
            if time.monotonic() > stop:
                break
            other = find_module(ctx, name, stop)
            if isinstance(other, str):
                others.append(name)
                other_modules[name] = other
        out["other_kernels_with_module"] = others
        out["headers_present"] = _headers(ctx, release) if release in kernels else False
    out.update(_dkms(ctx, release, stop))
    out.update(_installed_version(ctx, out, other_modules))
    return out


def _installed_version(ctx: ProbeContext, facts: dict[str, Any], other_modules: dict[str, str]) -> dict[str, Any]:
    version = facts.get("dkms_version")
    if isinstance(version, str):
        return {"nvidia_installed_version": version, "nvidia_installed_version_source": "dkms"}
    candidates = []
    if isinstance(facts.get("running_module"), str):
        candidates.append(facts["running_module"])
    candidates += [other_modules[k] for k in sorted(other_modules, reverse=True)]
    if not candidates:
        unread = [f for f in (version, facts.get("running_has_module"))
                  if isinstance(f, Unavailable) and f.reason != "not_found"]
        # what could not be read says why (no_permission, timeout); only a clean look finds nothing
        missing = unread[0] if unread else Unavailable(
            "not_found", "no nvidia module registered with DKMS or installed under /lib/modules"
        )
        return {"nvidia_installed_version": missing, "nvidia_installed_version_source": missing}
    if exists(ctx, "/sys/module/nvidia"):
        loaded = Unavailable("not_supported", "the nvidia module is loaded: its version is modules.nvidia_version")
        return {"nvidia_installed_version": loaded, "nvidia_installed_version_source": loaded}
    found = module_version(ctx, candidates[0])
    if isinstance(found, Unavailable):
        return {"nvidia_installed_version": found, "nvidia_installed_version_source": found}
    return {"nvidia_installed_version": found, "nvidia_installed_version_source": f"modinfo of {candidates[0]}"}
