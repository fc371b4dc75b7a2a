"""Tests for probes/kmsg.py (Xid events in the kernel log), plus the probe fields added with it:
the NVIDIA device files in the modules section and the uptime in the host section."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from gpudoctor.context import ProbeContext
from gpudoctor.facts import Unavailable
from gpudoctor.probes import host, kmsg, modules
from tests.helpers.sections import section_keys, validate_section
from tests.helpers.tree import write_tree

XID_79 = "NVRM: Xid (PCI:0000:9a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
XID_13 = "NVRM: Xid (PCI:0000:18:00): 13, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address"

KMSG_RECORDS = "\n".join(
    [
        "5,0,0,-;Linux version 6.8.0-45-generic (buildd@lcy02-amd64-115) #45-Ubuntu SMP",
        "6,812,812000000,-;" + XID_13,
        " SUBSYSTEM=pci",  # continuation line of the record above
        "6,813,812500000,-;" + XID_13,
        "4,900,5321400000,-;" + XID_79,
        "6,901,5322000000,-;NVRM: GPU at PCI:0000:9a:00: GPU-5b1c5a3e-8f6d-4e1c-9d3a-2f7e9c0b1a44",
    ]
)


def collect(root: Path) -> dict[str, Any]:
    out = kmsg.collect(ProbeContext(root=root, env={}))
    validate_section("kernel_log", out)
    assert set(out) == section_keys("kernel_log")
    return out


def test_kmsg_records_are_counted_per_gpu_and_code(tmp_path: Path) -> None:
    write_tree(tmp_path, {"dev/kmsg": KMSG_RECORDS + "\n"})
    out = collect(tmp_path)
    assert out["source"] == "/dev/kmsg"
    assert out["xids"] == [
        {
            "bus_id": "0000:18:00.0",
            "code": 13,
            "count": 2,
            "message": "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address",
            "seconds_after_boot": 812.5,
        },
        {
            "bus_id": "0000:9a:00.0",
            "code": 79,
            "count": 1,
            "message": "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
            "seconds_after_boot": 5321.4,
        },
    ]


def test_syslog_counts_only_the_current_boot(tmp_path: Path) -> None:
    log = "\n".join(
        [
            "Nov 20 08:00:01 node kernel: [    0.000000] Linux version 6.8.0-45-generic (buildd@lcy02) #45",
            "Nov 20 09:12:44 node kernel: [ 4363.2] " + XID_79,  # the previous boot: not reported
            "Nov 21 07:00:00 node systemd[1]: Starting Daily apt upgrade...",
            "Nov 21 07:30:02 node kernel: [    0.000000] Linux version 6.8.0-45-generic (buildd@lcy02) #45",
            "Nov 21 08:01:10 node kernel: [ 1868.4] " + XID_13,
            "Nov 21 08:01:11 node kernel: NVRM: Xid (0000:18:00): 13, older driver without PCI: prefix",
        ]
    )
    write_tree(tmp_path, {"var/log/kern.log": log + "\n"})
    out = collect(tmp_path)
    assert out["source"] == "/var/log/kern.log"
    assert [(x["bus_id"], x["code"], x["count"]) for x in out["xids"]] == [("0000:18:00.0", 13, 2)]
    assert out["xids"][0]["message"] == "older driver without PCI: prefix"


def test_a_log_without_kernel_lines_is_no_source(tmp_path: Path) -> None:
    write_tree(tmp_path, {"var/log/syslog": "Nov 21 07:00:00 box cron[12]: job done\n"})
    out = collect(tmp_path)
    assert isinstance(out["xids"], Unavailable) and out["xids"].reason == "not_supported"


def test_no_log_at_all_is_not_supported(tmp_path: Path) -> None:
    # A container: neither /dev/kmsg nor syslog files. Rules skip (nothing to read) rather than
    # report unknown on every GPU.
    write_tree(tmp_path, {"etc/hostname": "box\n"})
    out = collect(tmp_path)
    assert out["source"] == out["xids"]
    assert isinstance(out["xids"], Unavailable) and out["xids"].reason == "not_supported"
    assert "no kernel log here" in out["xids"].detail


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads mode-000 files")
def test_unreadable_log_is_no_permission(tmp_path: Path) -> None:
    write_tree(tmp_path, {"dev/kmsg": KMSG_RECORDS})
    os.chmod(tmp_path / "dev" / "kmsg", 0)
    out = collect(tmp_path)
    assert isinstance(out["xids"], Unavailable) and out["xids"].reason == "no_permission"


def test_a_fifo_cannot_hang_the_probe(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    os.mkfifo(tmp_path / "dev" / "kmsg")  # nobody writes: a blocking open or read would wait forever
    out = collect(tmp_path)
    # Under a root only regular files are read: a FIFO (or an image's dev/kmsg device node, which
    # is this machine's kernel log) is refused before it is opened.
    assert isinstance(out["xids"], Unavailable) and out["xids"].reason == "not_supported"
    assert "FIFO" in out["xids"].detail


def test_parse_syslog_keeps_garbage_out() -> None:
    assert kmsg.parse_syslog("") is None
    text = "Jan 1 00:00:00 h kernel: NVRM: Xid (PCI:0000:zz:00): 79, nonsense\nJan 1 00:00:01 h kernel: hello\n"
    assert kmsg.parse_syslog(text) == []


def test_live_kmsg_read_is_bounded() -> None:
    # On the machine running the tests: either the log answers (as a list) or it says why not;
    # it never raises and never blocks.
    out = kmsg.collect(ProbeContext(env={}))
    validate_section("kernel_log", out)


# ---------------------------------------------------------------- device files and uptime


def test_device_nodes_in_a_fixture_root(tmp_path: Path) -> None:
    write_tree(tmp_path, {"dev/nvidia0": "", "dev/nvidia1": "", "dev/nvidiactl": "", "dev/nvidia-caps/x": ""})
    out = modules.collect(ProbeContext(root=tmp_path, env={}))
    validate_section("modules", out)
    assert out["nvidia_device_nodes"] == 2
    assert out["nvidiactl_present"] is True
    assert out["nvidia_uvm_present"] is False
    # Access is only meaningful on the live machine (a fixture's placeholder files say nothing).
    assert out["nvidia_device_nodes_accessible"].reason == "not_supported"
    assert out["nvidiactl_accessible"].reason == "not_supported"


def test_a_root_without_dev_is_not_supported(tmp_path: Path) -> None:
    write_tree(tmp_path, {"proc/modules": "nvidia 1 0 - Live 0x0\n"})
    out = modules.collect(ProbeContext(root=tmp_path, env={}))
    for key in ("nvidia_device_nodes", "nvidiactl_present", "nvidia_uvm_present", "nvidia_device_nodes_accessible"):
        assert isinstance(out[key], Unavailable) and out[key].reason == "not_supported", key


def test_live_device_nodes_count_access() -> None:
    out = modules.collect(ProbeContext(env={}))
    validate_section("modules", out)
    nodes = out["nvidia_device_nodes"]
    assert isinstance(nodes, int)
    accessible = out["nvidia_device_nodes_accessible"]
    assert isinstance(accessible, int) and 0 <= accessible <= nodes


def test_uptime(tmp_path: Path) -> None:
    write_tree(tmp_path, {"proc/uptime": "350735.47 234388.90\n"})
    assert host.collect(ProbeContext(root=tmp_path, env={}))["uptime_s"] == pytest.approx(350735.47)
    write_tree(tmp_path, {"proc/uptime": "garbage\n"})
    assert host.collect(ProbeContext(root=tmp_path, env={}))["uptime_s"].reason == "error"
    (tmp_path / "proc" / "uptime").unlink()
    assert host.collect(ProbeContext(root=tmp_path, env={}))["uptime_s"].reason == "not_found"
