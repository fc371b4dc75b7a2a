"""What a command works on: the facts (a saved snapshot, a tree, or this machine) and the rules,
with what can go wrong in them as UserError."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from .errors import UserError
from .options import ProbeOptions


def start_collect(probe: ProbeOptions, sample_s: float | None = None) -> Any:
    """Validate the probe options and start probing (NVML is forked at once); `.finish()` gives the facts."""
    for label, path in (
        ("--root", probe.root),
        ("--sysfs-root", probe.sysfs_root),
        ("--procfs-root", probe.procfs_root),
    ):
        if path is not None and not Path(path).is_dir():
            raise UserError(f"{label} {path}: no such directory")
    if probe.python is not None and not (os.path.isfile(probe.python) and os.access(probe.python, os.X_OK)):
        raise UserError(f"--python {probe.python}: not an executable file")
    from ..context import make_context
    from ..probes import start_collection

    ctx = make_context(
        root=probe.root,
        sysfs_root=probe.sysfs_root,
        procfs_root=probe.procfs_root,
        python=probe.python,
        timeout=probe.timeout,
        nvml_timeout=probe.nvml_timeout,
        torch_import=probe.torch_import,
        sample_s=sample_s or 0.0,
    )
    return start_collection(ctx)


def obtain_facts(facts_file: str | None, probe: ProbeOptions) -> tuple[dict[str, Any], str]:
    """The facts and where they came from: a snapshot file, a fixture root, or the live machine.

    For commands other than `check` that take `--facts FILE` plus @root_options."""
    if facts_file:
        refuse_probe_options_with_facts(probe)
        return load_facts_file(facts_file), facts_file
    from .progress import finish_collection

    return finish_collection(start_collect(probe), probe.python, probe.torch_import), probe.origin


def refuse_probe_options_with_facts(probe: ProbeOptions) -> None:
    if probe.elsewhere or probe.python or probe.torch_import:
        raise UserError(
            "--facts reads a saved snapshot; it cannot be combined with the probe options (--root, --python, ...)"
        )


def load_facts_file(path: str) -> dict[str, Any]:
    from ..facts import SnapshotError, load_snapshot

    try:
        return load_snapshot(path)
    except SnapshotError as exc:
        raise UserError(str(exc)) from None


def load_profile_file(path: str | None) -> Any:
    """The --profile file (None when not given), read and validated before anything is probed; a
    bad one is a UserError (exit 2) naming the file and line."""
    if not path:
        return None
    from ..fleet.profile import ProfileError, load_profile

    try:
        return load_profile(path)
    except ProfileError as exc:
        raise UserError(str(exc)) from None


def load_previous_file(previous_file: str | None) -> dict[str, Any] | None:
    """The --previous snapshot (None when not given), read before anything is probed; a file that
    is no snapshot is a UserError (exit 2)."""
    if not previous_file:
        return None
    from ..facts import SnapshotError
    from ..model.counter_rates import load_previous

    try:
        return load_previous(previous_file)
    except SnapshotError as exc:
        raise UserError(str(exc)) from None


def with_previous(facts: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, Any]:
    """The facts with counter_rates against the previous snapshot, when one was given. Snapshots
    that cannot be compared (another boot, an older gpudoctor) give rates that are unavailable,
    with the reason; never an error."""
    if previous is None:
        return facts
    from ..model.counter_rates import from_previous

    return {**facts, "counter_rates": from_previous(previous, facts)}


def load_ruleset(rule_dirs: Sequence[str], builtin: bool = True, gate: bool = False) -> Any:
    from ..engine.loader import RulesUnusable, load_asked_rules

    try:
        return load_asked_rules(rule_dirs, builtin, gate)
    except RulesUnusable as exc:
        raise UserError(str(exc)) from None
