"""The two files counter rates added to the probes, fed garbage: proc/sys/kernel/random/boot_id
(host.boot_id) and sys/class/infiniband/<dev>/node_guid (rdma device node_guid). A bad one is
unavailable (error) with a short escaped excerpt, never a traceback and never a guess."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpudoctor.context import make_context
from gpudoctor.facts import Unavailable
from gpudoctor.probes import host, rdma
from gpudoctor.probes.files import read_parsed

BOOT_ID = "3b9e6c1a-52d4-4f0e-9a7b-1c2d3e4f5a60"


@pytest.mark.parametrize(
    ("data", "want"),
    [
        (f"{BOOT_ID}\n".encode(), BOOT_ID),
        (f"  {BOOT_ID.upper()}  \n".encode(), BOOT_ID),
        (b"\n", "not_found"),  # empty: as every empty file the probes read
        (b"3b9e6c1a52d44f0e9a7b1c2d3e4f5a60\n", "error"),  # no dashes: not how the kernel prints it
        (f"{BOOT_ID}{BOOT_ID}\n".encode(), "error"),
        (b"\x1b[31m" + BOOT_ID.encode() + b"\n", "error"),
        (b"\xff\xfe\x00garbage", "error"),
        (b"9" * 70000, "error"),  # longer than the read bound
    ],
)
def test_boot_id_formats(tmp_path: Path, data: bytes, want: Any) -> None:
    path = tmp_path / "proc" / "sys" / "kernel" / "random" / "boot_id"
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    got = boot_id(tmp_path)
    if want in ("error", "not_found"):
        assert isinstance(got, Unavailable) and got.reason == want and "\x1b" not in got.detail, got
    else:
        assert got == want


def boot_id(root: Path) -> Any:
    """What probes/host.py records as boot_id (the same read; the whole host probe starts the
    target interpreter, too slow to repeat here)."""
    return read_parsed(make_context(root=str(root)), "/proc/sys/kernel/random/boot_id", host.parse_boot_id)


def test_the_host_probe_records_it(tmp_path: Path) -> None:
    path = tmp_path / "proc" / "sys" / "kernel" / "random" / "boot_id"
    path.parent.mkdir(parents=True)
    path.write_text(BOOT_ID + "\n")
    assert host.collect(make_context(root=str(tmp_path)))["boot_id"] == BOOT_ID


def test_no_boot_id_is_not_found(tmp_path: Path) -> None:
    got = boot_id(tmp_path)
    assert isinstance(got, Unavailable) and got.reason == "not_found"


@pytest.mark.parametrize(
    ("data", "want"),
    [
        (b"0c42:a103:0045:6f80\n", "0c42:a103:0045:6f80"),
        (b"0C42:A103:0045:6F80\n", "0c42:a103:0045:6f80"),
        (b"0c42a10300456f80\n", "error"),
        (b"0c42:a103:0045\n", "error"),
        (b"0c42:a103:0045:6f80:0000\n", "error"),
        (b"\x00\x01\x02", "error"),
        (b"", "not_found"),
    ],
)
def test_node_guid_formats(tmp_path: Path, data: bytes, want: Any) -> None:
    device = tmp_path / "sys" / "class" / "infiniband" / "mlx5_0"
    (device / "ports").mkdir(parents=True)
    (device / "node_guid").write_bytes(data)
    got = rdma.collect(make_context(root=str(tmp_path)))["devices"][0]["node_guid"]
    if want in ("error", "not_found"):
        assert isinstance(got, Unavailable) and got.reason == want, got
    else:
        assert got == want
