"""A broken kernel log under a host root: the kernel_log section still fits its schema, no rule
breaks on it and `gpudoctor check` exits 0 or 1 without a traceback.

The log is the nvswitch-sxid-fatal fixture's dev/kmsg plus every driver message the probe knows
(tests/probes/test_kmsg.py), then broken each way tests/hardening/test_sysfs_faults.py breaks a
file, and also cut in the middle of a record, with invalid UTF-8, with huge lines and as a
syslog file of many boots.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from gpudoctor.engine.runner import run_rules
from gpudoctor.findings import Status
from gpudoctor.probes import kernel_messages
from tests.conftest import HOSTS
from tests.hardening.test_sysfs_faults import (
    CORRUPTIONS,
    RULES,
    assert_sound,
    check_exits_0_or_1,
    host_copy,
    probe,
)
from tests.probes.test_kmsg import MESSAGES, kmsg_file, syslog_file

FIXTURE_KMSG = (HOSTS / "nvswitch-sxid-fatal" / "dev" / "kmsg").read_bytes()
GOOD = FIXTURE_KMSG + kmsg_file(MESSAGES).encode()


def with_log(tmp_path: Path, rel: str, data: bytes) -> Path:
    root = host_copy(tmp_path / "host")
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return root


def assert_judged(root: Path) -> None:
    snapshot = probe(root)
    assert_sound(snapshot)
    broken = [f for f in run_rules(RULES, snapshot) if f.status is Status.ERROR]
    assert not broken, [(f.rule_id, f.message, f.detail) for f in broken]


@pytest.mark.parametrize("mode", sorted(CORRUPTIONS))
def test_kmsg_broken_each_way(tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str) -> None:
    root = with_log(tmp_path, "dev/kmsg", GOOD)
    CORRUPTIONS[mode](root / "dev" / "kmsg", random.Random(mode))
    assert_judged(root)
    check_exits_0_or_1(capsys, root)


@pytest.mark.parametrize("seed", range(4))
def test_kmsg_cut_and_garbled(tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: int) -> None:
    rng = random.Random(seed)
    data = bytearray(GOOD)
    for _ in range(40):  # flip bytes, drop a stretch, insert invalid UTF-8 and huge lines
        at = rng.randrange(len(data))
        choice = rng.randrange(4)
        if choice == 0:
            data[at] = rng.randrange(256)
        elif choice == 1:
            del data[at : at + rng.randrange(1, 200)]
        elif choice == 2:
            data[at:at] = b"\xc3\x28\xa0\xa1\xff"
        else:
            data[at:at] = b"NVRM: " + b"A" * rng.randrange(5000, 70000)
    root = with_log(tmp_path, "dev/kmsg", bytes(data[: rng.randrange(len(data) // 2, len(data))]))
    assert_judged(root)
    check_exits_0_or_1(capsys, root)


def test_syslog_of_many_boots_with_broken_lines(tmp_path: Path) -> None:
    boots = "".join(syslog_file(MESSAGES) for _ in range(30))
    noise = "".join(
        f"Nov 21 07:31:{i % 60:02d} node kernel: [ 1.5] NVRM: The NVIDIA GPU 0000:0{i % 9}:00.0 (PCI ID: 10de:\n"
        for i in range(2000)
    )
    root = with_log(tmp_path, "var/log/kern.log", (boots + noise).encode() + b"\xff\xfe kernel: \x00\n")
    snapshot = probe(root)
    assert_sound(snapshot)
    log = snapshot["kernel_log"]
    assert log["source"] == "/var/log/kern.log"
    # the last boot's messages only, once each
    assert [e["count"] for e in log["api_mismatches"]] == [1, 1]
    assert all(len(log[name]) <= kernel_messages.MAX_ENTRIES for name in kernel_messages.LISTS)
