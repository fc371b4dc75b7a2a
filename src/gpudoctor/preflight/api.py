"""The gate's entry points: :func:`run` (one gate run, for the CLI) and :func:`gate` (the Python API
for job scripts)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..findings import Cause, Severity
from .checks import check_selectors
from .errors import GateError, PolicyError
from .policy import Policy, load_policy, policy_from_mapping
from .verdict import GateFailed, GateReport, judge


def run(
    policy: Policy,
    *,
    facts_file: str | None = None,
    root: str | None = None,
    sysfs_root: str | None = None,
    procfs_root: str | None = None,
    python: str | None = None,
    torch_import: bool = False,
    nvml_timeout: float = 5.0,
    rule_dirs: Sequence[str] = (),
    builtin_rules: bool = True,
    deep_devices: Sequence[int] | None = None,
    previous_file: str | None = None,
    sample_s: float | None = None,
    on_step: Callable[[str], None] | None = None,
) -> GateReport:
    """Gate this machine (or a snapshot) under the policy's deadline. Raises GateError when it cannot run.

    ``on_step(name)`` is told each step as it starts: the probes' (gpudoctor.probes.Collection.finish),
    then "deep" while the device test is awaited.

    ``previous_file`` (a snapshot of the same boot) or ``sample_s`` (two reads of this machine, that
    many seconds apart) add the error counters' rates (the counter_rates section) for the rules."""
    import os

    started = time.monotonic()
    deadline = started + policy.deadline_s
    probing = root or sysfs_root or procfs_root or python or torch_import
    if facts_file and probing:
        raise GateError("--facts judges a saved snapshot; it cannot be combined with --root/--python/--torch-import")
    if facts_file and policy.deep:
        raise GateError("--deep tests this machine's GPUs; it cannot be combined with --facts")
    for label, path in (("--root", root), ("--sysfs-root", sysfs_root), ("--procfs-root", procfs_root)):
        if path is not None and not Path(path).is_dir():
            raise GateError(f"{label} {path}: no such directory")
    if python is not None and not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise GateError(f"--python {python}: not an executable file")
    if sample_s is not None and (facts_file or previous_file or not 0 < sample_s < policy.deadline_s):
        raise GateError(
            "--sample reads this machine's counters twice, for less than the deadline; not with --facts or --previous"
        )
    previous = None
    if previous_file:
        from ..facts import SnapshotError
        from ..model.counter_rates import load_previous

        try:
            previous = load_previous(previous_file)
        except SnapshotError as exc:
            raise GateError(str(exc)) from None

    deep_run = None
    collection = None
    try:
        ignored = set(policy.ignore)
        if policy.deep and not ignored & {"gate", "deep"}:
            from .device_test import start_deep

            # Steps the policy ignores are not run at all: NCCL's set-up is the costliest part.
            skip = [step for step in ("p2p", "allreduce") if f"gate-deep-{step}" in ignored]
            # Started first: its torch import overlaps the probes.
            deep_run = start_deep(
                python or sys.executable,
                deadline=deadline,
                memory_mib=policy.deep_memory_mib,
                devices=deep_devices,
                extra_args=["--skip", ",".join(skip)] if skip else (),
            )
        if not facts_file:
            from ..context import make_context
            from ..probes import start_collection

            ctx = make_context(
                root=root,
                sysfs_root=sysfs_root,
                procfs_root=procfs_root,
                python=python,
                timeout=policy.deadline_s,
                nvml_timeout=nvml_timeout,
                torch_import=torch_import,
                sample_s=sample_s or 0.0,
            )
            collection = start_collection(ctx)
        ruleset = load_gate_rules(rule_dirs, builtin_rules)
        check_selectors(policy, ruleset)
        if facts_file:
            from ..facts import SnapshotError, load_snapshot

            try:
                facts = load_snapshot(facts_file)
            except SnapshotError as exc:
                raise GateError(str(exc)) from None
            origin = facts_file
        else:
            assert collection is not None
            from ..engine.runner import prepare

            # while NVML's child may still be answering, compile what every run of the rules
            # reads first (as check does)
            rules = ruleset.rules
            facts = collection.finish(on_step=on_step, meanwhile=lambda: prepare(rules, deadline))
            collection = None
            origin = "live" if not (root or sysfs_root or procfs_root) else f"root {root or '/'}"
    except BaseException:
        if collection is not None:
            collection.abort()
        if deep_run is not None:
            deep_run.cancel("the gate stopped before the device test finished")
        raise

    if previous is not None:
        from ..model.counter_rates import from_previous

        facts = {**facts, "counter_rates": from_previous(previous, facts)}
    deep_result = None
    if deep_run is not None:
        nvml = facts.get("nvml")
        if isinstance(nvml, Mapping) and nvml.get("status") == "timeout":
            # The driver did not answer NVML; the device test would only hang until the deadline.
            deep_result = deep_run.cancel(
                "NVML did not answer, so the driver is not responding", Cause("nvml", "timeout")
            )
        else:
            if on_step is not None:
                on_step("deep")
            deep_result = deep_run.result()
    from ..engine.runner import judging_deadline

    return judge(
        facts,
        ruleset,
        policy,
        deep_result=deep_result,
        facts_origin=origin,
        duration_s=time.monotonic() - started,
        deadline=judging_deadline(deadline),
    )


def load_gate_rules(rule_dirs: Sequence[str] = (), builtin: bool = True) -> Any:
    """The rules the gate runs: the built-in ones (unless not ``builtin``), the gate's own
    (rules/gate/) and those in ``rule_dirs``. GateError names a bad directory or rule file."""
    from ..engine.loader import RulesUnusable, load_asked_rules

    try:
        return load_asked_rules(rule_dirs, builtin, gate=True)
    except RulesUnusable as exc:
        raise GateError(str(exc)) from None


def gate(
    *,
    policy: str | Path | Mapping[str, Any] | Policy | None = None,
    expect_gpus: int | None = None,
    expect_model: str | None = None,
    min_free_memory_gib: float | None = None,
    expect_nics: int | None = None,
    nic_rate_gbps: float | None = None,
    nvlink_links: int | None = None,
    fail_on: str | None = None,
    fail_open: bool | None = None,
    required: Sequence[str] | None = None,
    ignore: Sequence[str] | None = None,
    deep: bool | None = None,
    timeout: float | None = None,
    nvml_timeout: float = 5.0,
    facts: str | None = None,
    root: str | None = None,
    python: str | None = None,
    rules: Sequence[str] = (),
    previous: str | None = None,
    sample: float | None = None,
    raise_on_no_go: bool = True,
) -> GateReport:
    """Gate this machine from Python (a job script) and return the report.

    ``policy`` is a policy file, a mapping with the file's keys, or a Policy; the keyword
    arguments override it, as the command-line flags do. On no-go raises :class:`GateFailed`
    (``.findings``, ``.report``) unless ``raise_on_no_go=False``; raises :class:`GateError`
    when the gate cannot run (bad policy, bad snapshot). Never hangs past ``timeout``.
    ``previous`` (an earlier snapshot of this boot) or ``sample`` (seconds between two reads of
    this machine) also judge how fast the NVLink and RDMA error counters rise.
    """
    if policy is None:
        base = Policy()
    elif isinstance(policy, Policy):
        base = policy
    elif isinstance(policy, Mapping):
        base = policy_from_mapping(dict(policy), "<policy>")
    else:
        base = load_policy(policy)
    effective = base.override(
        expect_gpus=expect_gpus,
        expect_model=expect_model,
        min_free_memory_gib=min_free_memory_gib,
        expect_nics=expect_nics,
        nic_rate_gbps=nic_rate_gbps,
        nvlink_links=nvlink_links,
        fail_on=fail_on,
        fail_closed=None if fail_open is None else not fail_open,
        required=tuple(required) if required else None,
        ignore=tuple(ignore) if ignore else None,
        deep=deep,
        deadline_s=timeout,
    )
    if effective.fail_on not in (Severity.ERROR, Severity.WARNING):
        raise PolicyError("fail_on must be error or warning")
    report = run(
        effective,
        facts_file=facts,
        root=root,
        python=python,
        nvml_timeout=nvml_timeout,
        rule_dirs=rules,
        previous_file=previous,
        sample_s=sample,
    )
    if raise_on_no_go and not report.go:
        raise GateFailed(report)
    return report
