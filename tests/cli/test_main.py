"""The console entry's early start of the NVML probe: which command lines probe this machine."""

from __future__ import annotations

import pytest

from gpudoctor.__main__ import _probes_live


@pytest.mark.parametrize(
    ("argv", "live"),
    [
        (["check"], True),
        (["gate", "--expect-gpus", "8"], True),
        (["select", "-n", "2"], True),
        (["check", "--root", "/tmp/x"], False),
        (["check", "--facts=host.json"], False),
        (["topo", "--sysfs-root", "/x/sys"], False),
        (["check", "--help"], False),
        (["rules", "list"], False),
        (["run", "--numa", "--", "python", "train.py"], False),
        (["report", "merge", "a.json"], False),
        (["--version"], False),
        ([], False),
    ],
)
def test_nvml_is_prestarted_only_for_a_live_probe(argv: list[str], live: bool) -> None:
    assert _probes_live(argv) is live
