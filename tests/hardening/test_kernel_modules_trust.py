"""probes/kernel_modules.py under a hostile --root: links out of the root (the headers' build link,
a module file, a module directory, the DKMS build log) lead nowhere outside it; a huge make.log is
read from its tail only; truncated or garbage module files, and a /lib/modules of thousands of
kernels, end in unavailable facts within the deadline, never a traceback."""

from __future__ import annotations

import json
import lzma
import os
import random
import shutil
import time
import uuid
from pathlib import Path

import pytest

from gpudoctor.cli.root import run
from gpudoctor.context import ProbeContext
from gpudoctor.facts import Unavailable
from gpudoctor.probes import kernel_modules as km
from tests.conftest import HOSTS
from tests.fixtures.make_kernel_hosts import DRIVER, NEW_KERNEL, OLD_KERNEL, tiny_module
from tests.hardening.roots import climbing, host_copy, replace_with_link

SOURCE = HOSTS / "kernel-upgrade-no-module"
TAG = uuid.uuid4().hex[:12]
MARK = f"OUTSIDE{TAG}"
LOG = f"var/lib/dkms/nvidia/{DRIVER}/build/make.log"


def collect(root: Path) -> dict:
    return km.collect(ProbeContext(root=root, env={}))


def test_links_out_of_the_root_lead_nowhere(tmp_path: Path, mechanism: str, capsys: pytest.CaptureFixture[str]) -> None:
    root = host_copy(SOURCE, tmp_path / "root")
    outside = tmp_path / "outside"
    (outside / "headers").mkdir(parents=True)
    (outside / "headers/Makefile").write_text("VERSION = 6\n")
    (outside / "modules").mkdir()
    (outside / "modules/nvidia.ko").write_bytes(tiny_module("999.99.99"))
    (outside / "make.log").write_text(f"x.c:1:1: error: {MARK}\n")
    # the headers' build link: absolute, as the packages make it
    replace_with_link(root / f"lib/modules/{NEW_KERNEL}/build", outside / "headers")
    # a module directory and a DKMS module file climbing out; the build log absolute
    kernel_dir = root / f"lib/modules/{NEW_KERNEL}"
    replace_with_link(kernel_dir / "updates", climbing(kernel_dir, outside / "modules"))
    replace_with_link(root / LOG, outside / "make.log")
    facts = collect(root)
    assert facts["headers_present"] is not True
    assert facts["running_has_module"] is False
    assert MARK not in json.dumps(facts, default=str)
    assert "999.99.99" not in json.dumps(facts, default=str)
    assert run(["check", "--root", str(root), "-v"]) in (0, 1)
    out = capsys.readouterr()
    assert MARK not in out.out + out.err and "Traceback" not in out.err


def test_the_module_file_itself_links_out(tmp_path: Path, mechanism: str) -> None:
    root = host_copy(SOURCE, tmp_path / "root")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "nvidia.ko").write_bytes(tiny_module("999.99.99"))
    shutil.rmtree(root / "var/lib/dkms")  # so the version comes from the module file
    replace_with_link(root / f"lib/modules/{OLD_KERNEL}/updates/dkms/nvidia.ko", outside / "nvidia.ko")
    facts = collect(root)
    assert facts["nvidia_installed_version"] != "999.99.99"
    assert isinstance(facts["nvidia_installed_version"], Unavailable)


def test_a_huge_make_log_is_read_from_its_tail(tmp_path: Path) -> None:
    root = host_copy(SOURCE, tmp_path / "root")
    (root / LOG).unlink()
    with open(root / LOG, "wb") as fh:
        fh.truncate(4 << 30)  # 4 GiB, sparse
        fh.seek(0, os.SEEK_END)
        fh.write(b"\nz.c:9:9: error: the last line\n")
    t0 = time.monotonic()
    facts = collect(root)
    assert time.monotonic() - t0 < 5
    assert facts["dkms_make_log_error"] == "z.c:9:9: error: the last line"


@pytest.mark.parametrize("content", [
    b"",
    b"\x7fELF",
    tiny_module(DRIVER)[:100],
    tiny_module(DRIVER)[:-1],
    b"\x7fELF\x02\x01\x01" + b"\xff" * 200,
    random.Random(4096).randbytes(4096),  # the same noise in every pytest-xdist worker
], ids=["empty", "elf-magic", "truncated-header", "short-by-one", "bad-sections", "noise"])
@pytest.mark.parametrize("suffix", ["", ".xz"])
def test_truncated_or_garbage_modules(tmp_path: Path, content: bytes, suffix: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    root = host_copy(SOURCE, tmp_path / "root")
    shutil.rmtree(root / "var/lib/dkms")
    module = root / f"lib/modules/{OLD_KERNEL}/updates/dkms/nvidia.ko"
    module.unlink()
    data = content if not suffix else lzma.compress(content)[: max(len(content) // 2, 12)]
    (module.parent / f"nvidia.ko{suffix}").write_bytes(data)
    facts = collect(root)
    assert isinstance(facts["nvidia_installed_version"], Unavailable)
    assert run(["check", "--root", str(root)]) in (0, 1)
    assert "Traceback" not in capsys.readouterr().err


def test_thousands_of_kernels_are_bounded(tmp_path: Path) -> None:
    root = host_copy(SOURCE, tmp_path / "root")
    for i in range(3000):
        (root / f"lib/modules/5.15.0-{i:04d}-generic/updates/dkms").mkdir(parents=True)
    t0 = time.monotonic()
    facts = collect(root)
    assert time.monotonic() - t0 < 10
    assert len(facts["other_kernels_with_module"]) <= km.MAX_KERNELS


def test_a_deep_module_tree_is_bounded(tmp_path: Path) -> None:
    root = host_copy(SOURCE, tmp_path / "root")
    deep = root / f"lib/modules/{NEW_KERNEL}/extra"
    for i in range(40):
        deep = deep / f"d{i}"
    deep.mkdir(parents=True)
    (deep / "nvidia.ko").write_bytes(tiny_module(DRIVER))
    wide = root / f"lib/modules/{NEW_KERNEL}/updates"
    for i in range(5000):
        (wide / f"f{i}").mkdir(parents=True)
    facts = collect(root)
    assert facts["running_has_module"] is not True
