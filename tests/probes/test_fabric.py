"""probes/fabric.py: whether nv-fabricmanager runs, from proc/<pid>/comm, bounded, never guessed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpudoctor.context import ProbeContext
from gpudoctor.facts import Unavailable
from gpudoctor.probes import fabric
from tests.helpers.tree import deny, write_tree


def search(root: Path, processes: dict[int, str]) -> dict[str, Any]:
    write_tree(root, {f"proc/{pid}/comm": f"{comm}\n" for pid, comm in processes.items()})
    return fabric.fabric_manager(ProbeContext(root=root, env={}))


def reason(value: object) -> str | None:
    return value.reason if isinstance(value, Unavailable) else None


def test_running_as_the_kernel_names_it(tmp_path: Path) -> None:
    # comm holds 15 characters: the kernel shows nv-fabricmanager as "nv-fabricmanage"
    facts = search(tmp_path, {1: "systemd", 77: "sshd", 1402: "nv-fabricmanage"})
    assert facts == {"fabric_manager_running": True, "fabric_manager_pid": 1402}


def test_not_running(tmp_path: Path) -> None:
    facts = search(tmp_path, {1: "systemd", 77: "sshd", 90: "nv-fabric"})
    assert facts["fabric_manager_running"] is False
    assert reason(facts["fabric_manager_pid"]) == "not_found"


def test_a_tree_without_processes_is_not_found_not_stopped(tmp_path: Path) -> None:
    facts = search(tmp_path, {})
    assert reason(facts["fabric_manager_running"]) == "not_found"


def test_hidepid_on_the_live_machine_is_no_permission(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under hidepid a non-root reader does not see pid 1: that is no_permission, not 'not running'."""
    write_tree(tmp_path, {"proc/4242/comm": "gpudoctor\n"})
    ctx = ProbeContext(root=tmp_path, env={})
    monkeypatch.setattr(ProbeContext, "live", property(lambda self: True))
    facts = fabric.fabric_manager(ctx)
    assert reason(facts["fabric_manager_running"]) == "no_permission"


def test_unlistable_proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(tmp_path, {"proc/1/comm": "systemd\n"})
    deny(monkeypatch, [tmp_path / "proc"])
    facts = fabric.fabric_manager(ProbeContext(root=tmp_path, env={}))
    assert reason(facts["fabric_manager_running"]) == "no_permission"


def test_search_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fabric, "MAX_PIDS", 2)
    facts = search(tmp_path, {1: "systemd", 2: "kthreadd", 3: "bash", 9: "nv-fabricmanage"})
    assert reason(facts["fabric_manager_running"]) == "not_supported"
    assert "2 of 4 processes" in facts["fabric_manager_running"].detail


@pytest.mark.parametrize("host, switches", [("healthy-2gpu", 0), ("nvswitch-8gpu", 4)])
def test_the_pci_probe_looks_for_it_only_where_there_are_nvswitches(
    host: str, switches: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # reading every process's comm costs ~14 us a process: not on every check of a busy node
    from gpudoctor.context import make_context
    from gpudoctor.probes import pci
    from tests.conftest import HOSTS

    looked: list[bool] = []
    real = fabric.fabric_manager
    monkeypatch.setattr(fabric, "fabric_manager", lambda ctx: looked.append(True) or real(ctx))
    section = pci.collect(make_context(root=str(HOSTS / host)))
    assert section["nvswitch_count"] == switches
    assert looked == ([True] if switches else [])
    if switches:
        assert section["fabric_manager_running"] is True
    else:
        assert reason(section["fabric_manager_running"]) == "not_supported"
