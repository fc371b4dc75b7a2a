"""The NVIDIA container toolkit's config.toml in a root is outside data: garbage in it gives
unavailable settings or none, never a traceback, and what is kept fits the facts schema."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from gpudoctor.context import make_context
from gpudoctor.facts import Unavailable, walk
from gpudoctor.probes import device_access
from tests.hardening.test_sysfs_faults import CORRUPTIONS
from tests.helpers.sections import validate_section
from tests.probes.test_device_access import SHIPPED


def _config_of(tmp_path: Path) -> Path:
    etc = tmp_path / "etc/nvidia-container-runtime"
    etc.mkdir(parents=True)
    path = etc / "config.toml"
    path.write_text(SHIPPED)
    return path


def _checked(tmp_path: Path) -> object:
    ctx = make_context(root=str(tmp_path), timeout=10.0)
    out = device_access.collect(ctx)
    validate_section("modules", out)
    for _, leaf in walk(out):
        if isinstance(leaf, Unavailable):
            assert leaf.detail.strip()
    return out["container_toolkit_config"]


@pytest.mark.parametrize("mode", list(CORRUPTIONS))
def test_every_corruption(tmp_path: Path, mode: str) -> None:
    path = _config_of(tmp_path)
    CORRUPTIONS[mode](path, random.Random(mode))
    _checked(tmp_path)


@pytest.mark.parametrize("seed", range(8))
def test_random_bytes_and_hostile_lines(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    path = _config_of(tmp_path)
    lines = [
        "[nvidia-container-runtime]",
        'mode = "' + "\x1b[31m" * rng.randint(1, 50) + '"',
        "mode = " + "'" * rng.randint(1, 5000),
        "[" * rng.randint(1, 10000),
        "no-cgroups = " + "true" * rng.randint(1, 3),
        "ldconfig = \"" + "a" * rng.randint(200, 100000) + "\"",
    ]
    rng.shuffle(lines)
    path.write_bytes("\n".join(lines).encode() + bytes(rng.randrange(256) for _ in range(rng.randint(0, 4096))))
    config = _checked(tmp_path)
    if isinstance(config, dict):
        for key in ("mode", "ldconfig"):
            value = config[key]
            assert value is None or isinstance(value, Unavailable) or (value.isprintable() and len(value) <= 256)


def test_a_file_too_large_is_not_read(tmp_path: Path) -> None:
    path = _config_of(tmp_path)
    path.write_text("# pad\n" * 20000)
    config = _checked(tmp_path)
    assert isinstance(config, Unavailable) and config.reason == "error"
