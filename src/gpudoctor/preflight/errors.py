"""The gate's exceptions for a gate that could not run (GateError, PolicyError); a gate that said
no-go raises verdict.GateFailed, which carries its report."""

from __future__ import annotations


class GateError(Exception):
    """The gate could not run: a bad policy, a missing root, an unreadable snapshot (exit status 2)."""


class PolicyError(GateError):
    """A policy file or value that cannot be used; the message names the file and line."""
