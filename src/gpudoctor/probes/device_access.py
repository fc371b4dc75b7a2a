"""Whether the NVIDIA device files really open, and the NVIDIA container toolkit's settings.

Reads (called from the modules probe; facts under ``modules``):

- ``/dev/nvidiactl`` and the lowest-numbered ``/dev/nvidia<N>``, on the live machine only: each is
  lstat'ed first and only a character device is opened (never a link, a regular file or a FIFO),
  with ``O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | O_NOFOLLOW``, and closed at once: no
  ioctl, no read, no write. The answer is ``ok`` or the errno name (``EPERM``, ``EACCES``, ...;
  ``ENOENT`` when the file, or any ``/dev/nvidia<N>``, is not there).
  ``os.access`` (the modules probe's ``*_accessible`` facts) checks only the mode bits; a device
  cgroup that refuses the device (the container toolkit's lost-access case after ``systemctl
  daemon-reload``) shows only in a real open, as EPERM. Under ``--root`` or ``--facts`` the check
  is not_supported: a device node in a tree is this machine's device, not the tree's.
- ``/etc/nvidia-container-runtime/config.toml`` (at most MAX_CONFIG bytes), where present: the few
  settings that decide how devices reach a container (``no-cgroups`` and ``ldconfig`` of
  ``[nvidia-container-cli]``, ``mode`` of ``[nvidia-container-runtime]``, the two top-level
  ``accept-nvidia-visible-devices-*``), by a small line reader of ``key = value`` lines (Python
  3.9 has no tomllib; nothing else of TOML is needed). A setting the file does not set is null:
  the toolkit's own default applies (internal/config/config.go, GetDefault: mode "auto",
  accept-nvidia-visible-devices-envvar-when-unprivileged true, the others false / "@/sbin/ldconfig").
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Any, Callable

from ..context import ProbeContext, shown
from ..facts import Unavailable
from ..lazy_re import LazyPattern
from .files import exists, list_dir, read_text

CONFIG_PATH = "/etc/nvidia-container-runtime/config.toml"
MAX_CONFIG = 1 << 16  # the shipped file is about 1.5 KB
MAX_CONFIG_LINES = 2048
MAX_VALUE = 256  # characters of a setting's value kept

# (table, key) in the file -> facts field
CONFIG_KEYS = {
    ("", "accept-nvidia-visible-devices-envvar-when-unprivileged"): "accept_envvar_when_unprivileged",
    ("", "accept-nvidia-visible-devices-as-volume-mounts"): "accept_volume_mounts",
    ("nvidia-container-cli", "no-cgroups"): "no_cgroups",
    ("nvidia-container-cli", "ldconfig"): "ldconfig",
    ("nvidia-container-runtime", "mode"): "mode",
}
_BOOL_FIELDS = frozenset({"accept_envvar_when_unprivileged", "accept_volume_mounts", "no_cgroups"})
_STRING_FIELDS = frozenset({"ldconfig", "mode"})

OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_NOFOLLOW", 0)
)

# Opens one device path (as ctx.path gives it) and closes it; raises OSError on refusal,
# NotADevice when the path is not a character device. Tests pass their own.
Opener = Callable[[str], None]


class NotADevice(Exception):
    """The path is there but is not a character device (a link, a regular file, a FIFO)."""


def open_device(path: str) -> None:
    """lstat, then open read-only and close: raises OSError or NotADevice, returns None when it opened."""
    st = os.lstat(path)
    if not stat.S_ISCHR(st.st_mode):
        raise NotADevice(_kind(st.st_mode))
    fd = os.open(path, OPEN_FLAGS)
    try:
        if not stat.S_ISCHR(os.fstat(fd).st_mode):  # swapped between the lstat and the open
            raise NotADevice("no longer a character device")
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "not a character device"


def _open_result(path: str, opener: Opener) -> str | Unavailable:
    try:
        opener(path)
    except NotADevice as exc:
        return Unavailable("not_supported", f"{shown(path)} is {exc}: not opened")
    except OSError as exc:
        code = exc.errno
        if code is None:
            return Unavailable("error", f"open({shown(path)}): {exc}")
        return errno.errorcode.get(code, f"errno {code}")
    except ValueError as exc:  # a NUL byte in a path
        return Unavailable("error", f"open({shown(path)}): {exc}")
    return "ok"


_GPU_NODE = LazyPattern(r"^nvidia(\d{1,6})$")


def _first_gpu_node(ctx: ProbeContext) -> str | Unavailable:
    names = list_dir(ctx, "/dev")
    if isinstance(names, Unavailable):
        return names
    numbers = sorted(int(m.group(1)) for m in map(_GPU_NODE.match, names) if m)
    if not numbers:
        return Unavailable("not_found", "no /dev/nvidia<N> file")
    return f"/dev/nvidia{numbers[0]}"


def device_open_facts(ctx: ProbeContext, opener: Opener | None = None) -> dict[str, Any]:
    """modules.nvidiactl_open, nvidia_gpu_open and nvidia_gpu_open_path. With no opener the real
    check runs on the live machine only; a test passes an opener to check a fixture root."""
    gpu_path = _first_gpu_node(ctx)
    if opener is None:
        if not ctx.live:
            why = Unavailable("not_supported", "the device files are opened on the live machine only")
            return {"nvidiactl_open": why, "nvidia_gpu_open": why, "nvidia_gpu_open_path": gpu_path}
        opener = open_device
    # A file that is not there is the answer ENOENT (what open would say), not a fact unknown:
    # a container given no NVIDIA device files at all is a known state.
    out: dict[str, Any] = {
        "nvidiactl_open": _open_result(str(ctx.path("/dev/nvidiactl")), opener)
        if exists(ctx, "/dev/nvidiactl")
        else "ENOENT"
    }
    if isinstance(gpu_path, Unavailable):
        out["nvidia_gpu_open"] = "ENOENT" if gpu_path.reason == "not_found" else gpu_path
    else:
        out["nvidia_gpu_open"] = _open_result(str(ctx.path(gpu_path)), opener)
    out["nvidia_gpu_open_path"] = gpu_path
    return out


# --- config.toml ------------------------------------------------------------------------------

_TABLE = LazyPattern(r"^\[\s*([A-Za-z0-9_.-]{1,128})\s*\]$")
_KEY_VALUE = LazyPattern(r"^([A-Za-z0-9_-]{1,128})\s*=\s*(.*)$")


def _strip_comment(value: str) -> str:
    """The value with a trailing '# comment' removed, a '#' inside quotes kept."""
    quote = ""
    for i, char in enumerate(value):
        if quote:
            if char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char == "#":
            return value[:i].strip()
    return value.strip()


def _value(field: str, raw: str) -> Any:
    text = _strip_comment(raw)
    if field in _BOOL_FIELDS:
        if text in ("true", "false"):
            return text == "true"
        return Unavailable("error", f"{field.replace('_', '-')} = {shown(text, 60)}: not true or false")
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        inner = text[1:-1]
        if len(inner) <= MAX_VALUE and inner.isprintable() and "\\" not in inner:
            return inner
    return Unavailable("error", f"{field} = {shown(text, 60)}: not a plain quoted string")


def parse_config(text: str) -> dict[str, Any]:
    """The settings of CONFIG_KEYS found in a config.toml text; a setting not in it is None.
    Commented-out lines (the shipped file lists its defaults that way) set nothing."""
    found: dict[str, Any] = {field: None for field in CONFIG_KEYS.values()}
    table = ""
    for n, line in enumerate(text.splitlines()):
        if n >= MAX_CONFIG_LINES:
            break
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        header = _TABLE.match(line[:160])
        if header:
            table = header.group(1)
            continue
        if line.startswith("["):
            table = "?"  # an array of tables or a header this reader does not know: none of ours
            continue
        pair = _KEY_VALUE.match(line[: MAX_VALUE + 200])
        if not pair:
            continue
        field = CONFIG_KEYS.get((table, pair.group(1)))
        if field is not None:
            found[field] = _value(field, pair.group(2))
    return found


def toolkit_config(ctx: ProbeContext) -> dict[str, Any] | Unavailable:
    text = read_text(ctx, CONFIG_PATH, whole=True, limit=MAX_CONFIG)
    if isinstance(text, Unavailable):
        return text
    out: dict[str, Any] = {"path": CONFIG_PATH}
    out.update(parse_config(text))
    return out


def collect(ctx: ProbeContext, opener: Opener | None = None) -> dict[str, Any]:
    """The facts this module adds to the modules section."""
    out = device_open_facts(ctx, opener)
    out["container_toolkit_config"] = toolkit_config(ctx)
    return out
