"""ProbeContext: where probes read from and how long they may take.

Every path a probe opens goes through :meth:`ProbeContext.path`, so a probe
run against a fixture tree (``--root tests/fixtures/hosts/x``) reads that
tree and nothing of the machine it runs on. Sources that are not files
(NVML, the torch interpreter, tools on PATH) are replaced under a fixture
root by recorded answers in that root (``nvml.json``, ``torch.json``,
``tools.json``); see the probes for details.

A root that is not the live machine is hostile: a mounted image or a tree someone sent may hold
``proc/sys/kernel/hostname -> /etc/shadow``. Under such a root every lookup goes through
:class:`RootFS` (``ctx.contained()``), which resolves each path component by component inside the
root: absolute link targets are taken from the root, ``..`` stops at the root, at most 40 links are
followed, and only regular files and directories are ever opened (a device node in an image is
this machine's device; a FIFO would wait). Nothing outside the root is read, listed or stat'ed
through a link. The live machine (root ``/`` and no separate sysfs/procfs root) is trusted as the
kernel resolves it: ``contained()`` is None and the probes open paths as they always did.

The context is passed in, never global.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .inputs import shown_excerpt as excerpt
from .rootfs import RootedError, RootFS


def shown(text: str, limit: int = 200) -> str:
    """Outside text for a message, as it is when it is short and printable, else as excerpt()
    has it (quoted and escaped), so the usual names read as before and odd ones stay harmless."""
    return text if len(text) <= limit and text.isprintable() else excerpt(text, limit)


# --- the context ----------------------------------------------------------------------------------

_UNSET: Any = object()
_ROOT_FIELDS = frozenset({"root", "sysfs_root", "procfs_root"})


@dataclass
class ProbeContext:
    root: Path = Path("/")
    sysfs_root: Path | None = None
    procfs_root: Path | None = None
    # Environment of the process being diagnosed. Live: os.environ. Under a
    # fixture root: proc/self/environ of that root, when present.
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    # Interpreter whose torch is inspected.
    python: str = sys.executable
    # Absolute time.monotonic() by which the whole run must be done.
    deadline: float = field(default_factory=lambda: time.monotonic() + 30.0)
    # Seconds NVML (in its child process) may take at most.
    nvml_timeout: float = 5.0
    # Recorded NVML answers to serve instead of the real library.
    nvml_replay: Path | None = None
    # Import torch in a child process (slow) to read runtime facts.
    torch_import: bool = False
    # --sample SECONDS: read the NVLink and RDMA error counters a second time this long after the
    # first read (0: once only); the NVML child's deadline grows by as much.
    sample_s: float = 0.0
    # The RootFS of these roots, None when live, _UNSET until asked for (and when a root changes).
    _fs: Any = field(default=_UNSET, init=False, repr=False, compare=False)
    # When the file-only probes' time after the deadline ends (see work_deadline).
    _grace_until: float | None = field(default=None, init=False, repr=False, compare=False)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name in _ROOT_FIELDS:
            object.__setattr__(self, "_fs", _UNSET)  # looked up again for the new roots

    @property
    def live(self) -> bool:
        """True when probing the machine gpudoctor runs on."""
        return self.root == Path("/") and self.sysfs_root is None and self.procfs_root is None

    def contained(self) -> RootFS | None:
        """How paths under this context's root are looked up: None on the live machine (the
        kernel's own lookup, nothing added to it), else the RootFS that keeps them inside the root."""
        fs = self._fs
        if fs is _UNSET:
            fs = None if self.live else RootFS(self.root, self.sysfs_root, self.procfs_root)
            object.__setattr__(self, "_fs", fs)
        return fs  # type: ignore[no-any-return]

    def path(self, absolute: str) -> Path:
        """Map an absolute system path (/sys/..., /proc/..., /etc/...) into the root.

        The result names the place for messages and for live reads; under a root that is not the
        live machine, open it only through ``contained()`` (the files helpers do): the kernel
        would follow the tree's links out of it."""
        if not absolute.startswith("/"):
            raise ValueError(f"probe paths must be absolute: {absolute!r}")
        for prefix, root in (("/sys", self.sysfs_root), ("/proc", self.procfs_root)):
            if root is not None and (absolute == prefix or absolute.startswith(prefix + "/")):
                return root / absolute[len(prefix) + 1 :]
        return self.root / absolute.lstrip("/")

    def recorded(self, name: str) -> Path | None:
        """Path of a recorded-answers file in a fixture root, or None when live.

        The name is looked up inside the root, and the path returned holds no link, so whoever
        opens it reads inside the root: the file itself, or, when the name leads nowhere, the place
        where it does not exist. Anything else (a link loop, a FIFO, a device node) gives the
        name's own path in the root, which the reader opens without following a link and
        refuses unless it is a regular file (gpudoctor.inputs.read_input, follow=False)."""
        if self.live:
            return None
        fs = self.contained()
        assert fs is not None
        absolute = "/" + name
        try:
            real = fs.resolve(absolute)
            if stat.S_ISREG(fs.stat(real).st_mode):
                return self.path(real)
        except RootedError as exc:
            if exc.errno == errno.ENOENT:
                return self.path(exc.where)
        except (OSError, ValueError):
            pass
        return self.root / name

    def remaining(self) -> float:
        """Seconds left before the whole-run deadline (never negative)."""
        return max(0.0, self.deadline - time.monotonic())

    def budget(self, wanted: float) -> float:
        """A per-step timeout: what the step wants, capped by the run deadline."""
        return max(0.05, min(wanted, self.remaining()))

    def work_deadline(self, grace: float = 0.5) -> float:
        """The time.monotonic() by which a file-only probe stops reading more items (devices, CPUs,
        directory entries) and reports the rest as timeout. Before the run's deadline, that
        deadline. The file-only probes still run after it has passed (see
        gpudoctor.probes.FILE_ONLY): from the first call after it, all of them share ``grace``
        more seconds, so a hostile tree costs at most that much past ``--timeout``."""
        now = time.monotonic()
        if now < self.deadline:
            return self.deadline
        if self._grace_until is None:
            self._grace_until = now + grace
        return self._grace_until


def parse_environ(raw: bytes) -> dict[str, str]:
    """A NUL-separated environ block as a dict."""
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        if not item or b"=" not in item:
            continue
        key, _, value = item.partition(b"=")
        env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


_ENVIRON_MAX = 1 << 20
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def _read_fd(fd: int, limit: int) -> bytes:
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


def read_environ(path: Path) -> dict[str, str] | None:
    """Parse a NUL-separated environ file (proc/<pid>/environ) at a real path."""
    try:
        # O_NONBLOCK: a FIFO in a fixture or mounted tree must not hang start-up
        raw = _read_fd(os.open(path, _READ_FLAGS), _ENVIRON_MAX)
    except (OSError, ValueError):
        return None
    return parse_environ(raw)


def root_environ(ctx: ProbeContext) -> dict[str, str] | None:
    """proc/self/environ of the context's root, read inside the root (None when it cannot be read)."""
    fs = ctx.contained()
    if fs is None:
        return read_environ(ctx.path("/proc/self/environ"))
    try:
        raw = _read_fd(fs.open("/proc/self/environ", _READ_FLAGS), _ENVIRON_MAX)
    except (OSError, ValueError):
        return None
    return parse_environ(raw)


def make_context(
    root: str | None = None,
    sysfs_root: str | None = None,
    procfs_root: str | None = None,
    python: str | None = None,
    timeout: float = 30.0,
    nvml_timeout: float = 5.0,
    nvml_replay: str | None = None,
    torch_import: bool = False,
    sample_s: float = 0.0,
) -> ProbeContext:
    """Build a context from CLI-style options; roots must exist (caller checks)."""
    ctx = ProbeContext(
        root=Path(root) if root else Path("/"),
        sysfs_root=Path(sysfs_root) if sysfs_root else None,
        procfs_root=Path(procfs_root) if procfs_root else None,
        python=python or sys.executable,
        deadline=time.monotonic() + timeout,
        nvml_timeout=min(nvml_timeout, timeout),
        nvml_replay=Path(nvml_replay) if nvml_replay else None,
        torch_import=torch_import,
        sample_s=sample_s,
    )
    if not ctx.live:
        ctx.env = root_environ(ctx) or {}
        if ctx.nvml_replay is None:
            # the NVML child opens this path itself: it must hold no link out of the root
            ctx.nvml_replay = ctx.recorded("nvml.json")
    return ctx
