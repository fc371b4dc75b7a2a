"""Tests for probes/kmsg.py (Xid events in the kernel log), plus the probe fields added with it:
the NVIDIA device files in the modules section and the uptime in the host section."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from gpudoctor.context import ProbeContext
from gpudoctor.facts import Unavailable
from gpudoctor.probes import host, kernel_messages, kmsg, modules
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
    parsed = kmsg.parse_syslog(text)
    assert parsed is not None and set(parsed) == set(kernel_messages.LISTS)
    assert all(found == [] for found in parsed.values())


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


# ---------------------------------------------------------------- driver messages beyond Xids

# The lines as the drivers print them (the sources are named in probes/kernel_messages.py); in
# /dev/kmsg a message printed over several lines is one record with each break escaped as \x0a.
API_MISMATCH = (
    "NVRM: API mismatch: the client 'python3' (pid 48213)\n"
    "NVRM: has the version 550.54.15, but this kernel module has\n"
    "NVRM: the version 550.90.07.  Please make sure that this\nNVRM: kernel module and all NVIDIA driver components\n"
    "NVRM: have the same version."
)
OLD_API_MISMATCH = (
    "NVRM: API mismatch: the client has the version 260.19.44, but\n"
    "NVRM: this kernel module has the version 260.19.06.  "
    "Please\nNVRM: make sure that this kernel module and all NVIDIA driver\nNVRM: components have the same version."
)
OPEN_REQUIRED = (
    "NVRM: The NVIDIA GPU 0000:02:00.0 (PCI ID: 10de:2c58)\n"
    "NVRM: installed in this system requires use of the NVIDIA open kernel modules."
)
UNSUPPORTED = (
    "NVRM: The NVIDIA GPU 0000:03:00.0 (PCI ID: 10de:1b80)\nNVRM: installed in this system is not supported by the\n"
    "NVRM: NVIDIA 580.95.05 driver release.\nNVRM: Please see 'Appendix A - Supported NVIDIA GPU Products'\n"
    "NVRM: in this release's README, available on the operating system\n"
    "NVRM: specific graphics driver download page at www.nvidia.com."
)
LEGACY = (
    "NVRM: The NVIDIA NVIDIA GeForce GTX 1050 GPU installed in this system is\nNVRM:  supported through the NVIDIA "
    "580.xx Legacy drivers. Please\nNVRM:  visit http://www.nvidia.com/object/unix.html for more\nNVRM:  information.  "
    "The 595.71.05 NVIDIA driver will ignore\nNVRM:  this GPU.  Continuing probe..."
)
INVALID_BAR = (
    "NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:\nNVRM: BAR1 is 0M @ 0x0 (PCI:0000:04:00.0)"
)
SINGLE_LINES = [
    "NVRM: GPU 0000:02:00.0: RmInitAdapter failed! (0x22:0x56:884)",
    "NVRM: GPU 0000:02:00.0: rm_init_adapter failed, device minor number 0",
    "nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 24004, Fatal, Link 44 sourcetrack TCEN0 crumbstore DBE (First)",
    "nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 24004, Severity 1 Engine instance 44 Sub-engine instance 00",
    "nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 24004, Data {0x00000000, 0x00000000, 0x00000000, 0x00000000, "
    "0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000}",
    "nvidia-nvswitch3: SXid (PCI:0000:08:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)",
    "nvidia-nvswitch3: SXid (PCI:0000:08:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error",
    "NVRM: Xid (PCI:0000:18:00): 74, pid=<unknown>, name=<unknown>, "
    "NVLink: failed to train link 3 to remote PCI:0000:1f:00",
    "Loading of unsigned module is rejected",
    "nvidia: module verification failed: signature and/or required key missing - tainting kernel",
]
MESSAGES = [API_MISMATCH, OLD_API_MISMATCH, OPEN_REQUIRED, UNSUPPORTED, LEGACY, INVALID_BAR, *SINGLE_LINES]

# What the real H200 VM (driver 580.159.04) logged this boot, as the lead's capture quotes it
# (the wave 4 brief): none of it is a fault.
H200_LINES = [
    "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ...",
    "NVRM: gpuClearFbhubPoisonIntrForBug2924523_GA100: FBHUB Interrupt detected. Clearing it.",
    "NVRM: Persistence mode is deprecated ...",
    "nvidia-nvlink: Nvlink Core is being initialized",
]


def kmsg_file(messages: list[str]) -> str:
    return "\n".join(
        ["5,0,0,-;Linux version 6.8.0-45-generic (buildd@lcy02) #45"]
        + [f"3,{i},{(i + 1) * 1_000_000},-;" + m.replace("\n", "\\x0a") for i, m in enumerate(messages, start=1)]
    ) + "\n"


def syslog_file(messages: list[str], earlier_boot: list[str] = ()) -> str:
    lines = ["Nov 20 08:00:01 node kernel: [    0.000000] Linux version 6.8.0-45-generic (buildd@lcy02) #45"]
    lines += [f"Nov 20 09:00:00 node kernel: [ 3600.100000] {part}" for m in earlier_boot for part in m.split("\n")]
    lines += ["Nov 21 07:30:02 node kernel: [    0.000000] Linux version 6.8.0-45-generic (buildd@lcy02) #45"]
    for i, m in enumerate(messages, start=1):
        lines += [f"Nov 21 07:31:{i:02d} node kernel: [   {i}.500000] {part}" for part in m.split("\n")]
    return "\n".join(lines) + "\n"


def summary(out: dict[str, Any]) -> dict[str, Any]:
    """The facts that matter per list, without the counts' timestamps and message texts."""
    return {
        "sxids": [(x["switch"], x["bus_id"], x["code"], x["severity"], x["count"]) for x in out["sxids"]],
        "nvlink": [(x["bus_id"], x["code"], x["link"], x["remote_bus_id"]) for x in out["nvlink_training_failures"]],
        "api": sorted((x["client"], x["client_version"], x["kernel_version"]) for x in out["api_mismatches"]),
        "rm": [(x["bus_id"], x["code"]) for x in out["rm_init_failures"]],
        "unsupported": [(x["bus_id"], x["pci_id"], x["driver_version"]) for x in out["unsupported_gpus"]],
        "open": [(x["bus_id"], x["pci_id"]) for x in out["open_module_required"]],
        "legacy": [(x["name"], x["legacy_branch"], x["driver_version"]) for x in out["legacy_gpus"]],
        "bars": [(x["bus_id"], x["bar"], x["size_mib"]) for x in out["invalid_bars"]],
        "signature": sorted((x["rejected"], x["module"]) for x in out["module_signature"]),
    }


EXPECTED = {
    "sxids": [("nvswitch2", "0000:07:00.0", 24004, "fatal", 1), ("nvswitch3", "0000:08:00.0", 12028, "non_fatal", 2)],
    "nvlink": [("0000:18:00.0", 74, "3", "0000:1f:00.0")],
    "api": [("", "260.19.44", "260.19.06"), ("python3", "550.54.15", "550.90.07")],
    "rm": [("0000:02:00.0", "0x22:0x56:884")],
    "unsupported": [("0000:03:00.0", "10de:1b80", "580.95.05")],
    "open": [("0000:02:00.0", "10de:2c58")],
    "legacy": [("NVIDIA GeForce GTX 1050", "580.xx", "595.71.05")],
    "bars": [("0000:04:00.0", 1, 0)],
    "signature": [(False, "nvidia"), (True, "")],
}


def test_driver_messages_from_kmsg_records(tmp_path: Path) -> None:
    write_tree(tmp_path, {"dev/kmsg": kmsg_file(MESSAGES)})
    out = collect(tmp_path)
    assert summary(out) == EXPECTED
    assert out["sxids"][0]["summary"] == (
        "SXid 24004 on nvswitch2 (0000:07:00.0) 1x: Fatal, Link 44 sourcetrack TCEN0 crumbstore DBE (First)"
    )
    assert out["api_mismatches"][1]["summary"] == "client python3 version 550.54.15 but kernel module 550.90.07 (1x)"
    assert out["xids"][0]["code"] == 74  # the training failure is an Xid too, judged by the Xid rules


def test_driver_messages_from_syslog_lines_of_this_boot_only(tmp_path: Path) -> None:
    # The same messages as a syslog file writes them: one line per printed line, each with its
    # prefix; the previous boot's copies are not counted.
    write_tree(tmp_path, {"var/log/kern.log": syslog_file(MESSAGES, earlier_boot=MESSAGES)})
    out = collect(tmp_path)
    assert out["source"] == "/var/log/kern.log"
    assert summary(out) == EXPECTED


def test_journal_lines_of_modprobe_and_systemd_modules_load(tmp_path: Path) -> None:
    log = syslog_file([]) + (
        "Nov 21 07:30:09 node systemd-modules-load[412]: "
        "Failed to insert module 'nvidia': Key was rejected by service\n"
    )
    log += "Nov 21 07:30:09 node kernel: [ 9.1] nvidia_uvm: loading of module with unavailable key is rejected\n"
    log += "Nov 21 07:30:09 node kernel: [ 9.2] vboxdrv: loading of unsigned module is rejected\n"  # not the driver
    write_tree(tmp_path, {"var/log/syslog": log})
    assert summary(collect(tmp_path))["signature"] == [(True, "nvidia"), (True, "nvidia_uvm")]


def test_the_real_h200_lines_are_no_fault(tmp_path: Path) -> None:
    write_tree(tmp_path, {"dev/kmsg": kmsg_file(H200_LINES)})
    out = collect(tmp_path)
    assert all(out[name] == [] for name in kernel_messages.LISTS)


def test_a_message_cut_short_is_not_guessed(tmp_path: Path) -> None:
    # The first line of a multi-line notice without the rest (the ring buffer wrapped, a line lost):
    # it names no driver version or reason, so nothing is recorded.
    write_tree(tmp_path, {"dev/kmsg": kmsg_file(["NVRM: The NVIDIA GPU 0000:03:00.0 (PCI ID: 10de:1b80)",
                                                "NVRM: API mismatch: the client 'x' (pid 1)"])})
    out = collect(tmp_path)
    assert all(out[name] == [] for name in kernel_messages.LISTS)


def test_garbage_huge_lines_and_bad_utf8_are_bounded(tmp_path: Path) -> None:
    garbage = b"\n".join([
        b"6,1,1,-;" + b"NVRM: " + b"\xff\xfe" * 300_000,  # a huge record of invalid UTF-8
        b"6,2,2,-;nvidia-nvswitch0: SXid (PCI:0000:07:00.0): " + b"9" * 5000 + b", Fatal",
        b"6,3,3,-;NVRM: API mismatch: the client '" + b"'" * 100_000,
        b"garbage without a header",
        b"6,4,notanumber,-;NVRM: GPU 0000:02:00.0: RmInitAdapter failed! (0x1:0x2:3)",
    ] + [
        b"6,%d,%d,-;nvidia-nvswitch1: SXid (PCI:0000:%02x:00.0): %d, Fatal, x" % (i, i, i % 256, i)
        for i in range(5, 300)
    ])
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "kmsg").write_bytes(garbage + b"\n")
    out = collect(tmp_path)
    assert len(out["sxids"]) == kernel_messages.MAX_ENTRIES
    assert out["rm_init_failures"][0]["code"] == "0x1:0x2:3"
    assert "seconds_after_boot" not in out["rm_init_failures"][0]
    assert all(len(e["message"]) <= kernel_messages.MAX_MESSAGE for name in kernel_messages.LISTS for e in out[name])
