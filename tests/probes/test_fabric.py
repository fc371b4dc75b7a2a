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
    assert (facts["fabric_manager_running"], facts["fabric_manager_pid"]) == (True, 1402)
    assert set(facts) == set(fabric.KEYS)


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


# --- the installed version (dpkg) and the command port (proc/net/tcp) ------------------------------

def paragraph(name: str, version: str, status: str = "install ok installed") -> str:
    return f"Package: {name}\nStatus: {status}\nVersion: {version}\nDescription: x\n more text: here\n"


def version_of(root: Path, status: str | None, files: dict[str, str] | None = None) -> tuple[object, object]:
    tree = dict(files or {})
    if status is not None:
        tree["var/lib/dpkg/status"] = status
    tree.setdefault("etc/hostname", "x\n")
    write_tree(root, tree)
    return fabric.installed_version(ProbeContext(root=root, env={}))


def test_dpkg_version_is_the_upstream_part(tmp_path: Path) -> None:
    status = "\n".join([paragraph("libc6", "2.35-0ubuntu3"), paragraph("nvidia-fabricmanager-550", "1:550.90.07-1")])
    assert version_of(tmp_path, status) == ("nvidia-fabricmanager-550", "550.90.07")


def test_removed_packages_do_not_count_and_the_newest_branch_wins(tmp_path: Path) -> None:
    status = "\n".join([
        paragraph("nvidia-fabricmanager-535", "535.183.01-1", status="deinstall ok config-files"),
        paragraph("nvidia-fabricmanager-550", "550.90.07-1"),
        paragraph("nvidia-fabricmanager", "580.95.05-1"),  # the name from the 580 branch on
        paragraph("nvidia-fabricmanager-dev-550", "550.90.07-1"),  # not the daemon's package
    ])
    assert version_of(tmp_path, status) == ("nvidia-fabricmanager", "580.95.05")


def test_no_package_is_not_found_and_an_rpm_host_is_not_supported(tmp_path: Path) -> None:
    package, version = version_of(tmp_path / "deb", paragraph("libc6", "2.35-0ubuntu3"))
    assert reason(package) == reason(version) == "not_found"
    package, _ = version_of(tmp_path / "rpm", None, {"var/lib/rpm/rpmdb.sqlite": "SQLite format 3\x00"})
    assert reason(package) == "not_supported" and "RPM" in package.detail  # type: ignore[union-attr]
    package, _ = version_of(tmp_path / "none", None)
    assert reason(package) == "not_found"


def test_a_status_file_past_the_cap_is_not_called_absent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fabric, "MAX_DPKG_STATUS", 200)
    status = paragraph("libc6", "2.35") * 10 + "\n" + paragraph("nvidia-fabricmanager-550", "550.90.07-1")
    package, _ = version_of(tmp_path, status)
    assert reason(package) == "not_supported" and "longer than 200 bytes" in package.detail  # type: ignore[union-attr]


def test_unreadable_status_is_no_permission(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(tmp_path, {"var/lib/dpkg/status": paragraph("nvidia-fabricmanager-550", "550.90.07-1")})
    deny(monkeypatch, [tmp_path / "var/lib/dpkg/status"])
    package, version = fabric.installed_version(ProbeContext(root=tmp_path, env={}))
    assert reason(package) == reason(version) == "no_permission"


HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


def row(local: str, state: str) -> str:
    return f"   0: {local} 00000000:0000 {state} 00000000:00000000 00:00000000 00000000     0        0 4242 1\n"


@pytest.mark.parametrize("tables, listening", [
    ({"proc/net/tcp": HEADER + row("0100007F:1A0A", "0A")}, True),  # 127.0.0.1:6666 LISTEN
    ({"proc/net/tcp": HEADER + row("0100007F:1A0A", "01"), "proc/net/tcp6": HEADER}, False),  # ESTABLISHED
    ({"proc/net/tcp": HEADER + row("0100007F:1A0B", "0A")}, False),  # port 6667
    ({"proc/net/tcp6": HEADER + row("00000000000000000000000001000000:1A0A", "0A")}, True),  # ::1
])
def test_the_command_port_listening(tmp_path: Path, tables: dict[str, str], listening: bool) -> None:
    write_tree(tmp_path, tables)
    assert fabric.listening(ProbeContext(root=tmp_path, env={})) is listening


def test_no_tcp_table_is_unavailable(tmp_path: Path) -> None:
    write_tree(tmp_path, {"proc/1/comm": "systemd\n"})
    assert reason(fabric.listening(ProbeContext(root=tmp_path, env={}))) == "not_found"


@pytest.mark.parametrize(
    "junk", ["\x00\xff\xfe" * 50, "Package\nStatus:\n\n:::\nVersion: -\n", "Package: nvidia-fabricmanager\n"]
)
def test_garbage_is_read_without_a_traceback(tmp_path: Path, junk: str) -> None:
    write_tree(tmp_path, {"var/lib/dpkg/status": junk, "proc/net/tcp": junk, "proc/1/comm": "systemd\n"})
    facts = fabric.fabric_manager(ProbeContext(root=tmp_path, env={}))
    assert reason(facts["fabric_manager_package"]) == "not_found"
    assert facts["fabric_manager_listening"] is False
