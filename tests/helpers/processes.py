"""Waiting for a process that gpudoctor was meant to kill."""

from __future__ import annotations

import os
import time


def gone_within(pid: int, seconds: float) -> bool:
    """Whether process ``pid`` no longer exists within ``seconds`` (polled every 50 ms)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
