"""ProbeContext: where probes read from and how long they may take.

Every path a probe opens goes through :meth:`ProbeContext.path`, so a probe
run against a fixture tree (``--root tests/fixtures/hosts/x``) reads that
tree and nothing of the machine it runs on. Sources that are not files
(NVML, the torch interpreter, tools on PATH) are replaced under a fixture
root by recorded answers in that root (``nvml.json``, ``torch.json``,
``tools.json``); see the probes for details.

The context is passed in, never global.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping


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

    @property
    def live(self) -> bool:
        """True when probing the machine gpudoctor runs on."""
        return self.root == Path("/") and self.sysfs_root is None and self.procfs_root is None

    def path(self, absolute: str) -> Path:
        """Map an absolute system path (/sys/..., /proc/..., /etc/...) into the root."""
        if not absolute.startswith("/"):
            raise ValueError(f"probe paths must be absolute: {absolute!r}")
        for prefix, root in (("/sys", self.sysfs_root), ("/proc", self.procfs_root)):
            if root is not None and (absolute == prefix or absolute.startswith(prefix + "/")):
                return root / absolute[len(prefix) + 1 :]
        return self.root / absolute.lstrip("/")

    def recorded(self, name: str) -> Path | None:
        """Path of a recorded-answers file in a fixture root, or None when live."""
        if self.live:
            return None
        return self.root / name

    def remaining(self) -> float:
        """Seconds left before the whole-run deadline (never negative)."""
        return max(0.0, self.deadline - time.monotonic())

    def budget(self, wanted: float) -> float:
        """A per-step timeout: what the step wants, capped by the run deadline."""
        return max(0.05, min(wanted, self.remaining()))


def read_environ(path: Path) -> dict[str, str] | None:
    """Parse a NUL-separated environ file (proc/<pid>/environ)."""
    try:
        # O_NONBLOCK: a FIFO in a fixture or mounted tree must not hang start-up
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        try:
            raw = os.read(fd, 1 << 20)
        finally:
            os.close(fd)
    except OSError:
        return None
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        if not item or b"=" not in item:
            continue
        key, _, value = item.partition(b"=")
        env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


def make_context(
    root: str | None = None,
    sysfs_root: str | None = None,
    procfs_root: str | None = None,
    python: str | None = None,
    timeout: float = 30.0,
    nvml_timeout: float = 5.0,
    nvml_replay: str | None = None,
    torch_import: bool = False,
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
    )
    if not ctx.live:
        ctx.env = read_environ(ctx.path("/proc/self/environ")) or {}
        if ctx.nvml_replay is None:
            candidate = ctx.root / "nvml.json"
            ctx.nvml_replay = candidate
    return ctx
