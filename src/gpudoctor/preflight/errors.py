"""The gate's exceptions: it could not run (GateError, PolicyError), or it said no-go (GateFailed)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .verdict import GateReport


class GateError(Exception):
    """The gate could not run: a bad policy, a missing root, an unreadable snapshot (exit status 2)."""


class PolicyError(GateError):
    """A policy file or value that cannot be used; the message names the file and line."""


class GateFailed(Exception):
    """The gate said no-go. ``findings`` are the blocking findings, ``report`` the whole report."""

    def __init__(self, report: GateReport) -> None:
        self.report = report
        self.findings = list(report.blocking)
        lines = [line.text for line in report.lines]
        super().__init__("gpudoctor gate: no-go: " + "; ".join(lines))
