"""probes/device_access.py: opening the NVIDIA device files (a fake open stands in for the live
machine's) and the NVIDIA container toolkit's config.toml."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from gpudoctor.context import ProbeContext, make_context
from gpudoctor.engine.loader import load_rules
from gpudoctor.engine.runner import run_rules
from gpudoctor.facts import Unavailable
from gpudoctor.findings import Status
from gpudoctor.probes import device_access
from tests.conftest import host_root, probed
from tests.helpers.sections import validate_section

RULESET = load_rules(include_plugins=False)

# The shipped file's shape (commented lines show defaults and set nothing).
SHIPPED = """\
#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"

[nvidia-container-cli]
#debug = "/var/log/nvidia-container-toolkit.log"
environment = []
ldconfig = "@/sbin/ldconfig.real"
load-kmods = true
#no-cgroups = false

[nvidia-container-runtime]
log-level = "info"
mode = "auto"
runtimes = ["docker-runc", "runc", "crun"]

[nvidia-container-runtime.modes.cdi]
default-kind = "nvidia.com/gpu"
"""


def fake_root(tmp_path: Path, nodes: list[str], config: str | None = None) -> ProbeContext:
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in nodes:
        (dev / name).write_text("")
    if config is not None:
        etc = tmp_path / "etc/nvidia-container-runtime"
        etc.mkdir(parents=True)
        (etc / "config.toml").write_text(config)
    return make_context(root=str(tmp_path), timeout=10.0)


def refusing(code: int, only: str | None = None) -> Any:
    opened: list[str] = []

    def opener(path: str) -> None:
        opened.append(path)
        if only is None or path.endswith(only):
            raise OSError(code, os.strerror(code))

    opener.opened = opened  # type: ignore[attr-defined]
    return opener


def test_under_a_root_the_files_are_not_opened(tmp_path: Path) -> None:
    ctx = fake_root(tmp_path, ["nvidiactl", "nvidia0"])
    out = device_access.collect(ctx)
    assert out["nvidiactl_open"] == Unavailable("not_supported", "the device files are opened on the live machine only")
    assert out["nvidia_gpu_open"] == out["nvidiactl_open"]
    assert out["nvidia_gpu_open_path"] == "/dev/nvidia0"
    assert out["container_toolkit_config"].reason == "not_found"


def test_a_device_cgroup_refusal_is_recorded_as_eperm(tmp_path: Path) -> None:
    ctx = fake_root(tmp_path, ["nvidiactl", "nvidia10", "nvidia2", "nvidia-uvm", "nvidia-caps"])
    opener = refusing(errno.EPERM)
    out = device_access.collect(ctx, opener)
    assert out["nvidiactl_open"] == "EPERM"
    assert out["nvidia_gpu_open"] == "EPERM"
    assert out["nvidia_gpu_open_path"] == "/dev/nvidia2"  # the lowest number, not the first name
    assert opener.opened == [str(tmp_path / "dev/nvidiactl"), str(tmp_path / "dev/nvidia2")]


def test_mode_bits_and_a_working_open(tmp_path: Path) -> None:
    ctx = fake_root(tmp_path, ["nvidiactl", "nvidia0"])
    out = device_access.collect(ctx, refusing(errno.EACCES, only="nvidia0"))
    assert (out["nvidiactl_open"], out["nvidia_gpu_open"]) == ("ok", "EACCES")


def test_no_files_is_not_found(tmp_path: Path) -> None:
    ctx = fake_root(tmp_path, ["null"])
    out = device_access.collect(ctx, refusing(errno.EPERM))
    assert out["nvidiactl_open"] == "ENOENT"  # never handed to the (always refusing) opener
    assert out["nvidia_gpu_open"] == "ENOENT"
    assert out["nvidia_gpu_open_path"] == Unavailable("not_found", "no /dev/nvidia<N> file")


def test_the_real_open_refuses_anything_but_a_character_device(tmp_path: Path) -> None:
    regular = tmp_path / "nvidia0"
    regular.write_text("")
    link = tmp_path / "nvidiactl"
    link.symlink_to("/dev/null")
    assert device_access._open_result(str(regular), device_access.open_device).reason == "not_supported"
    result = device_access._open_result(str(link), device_access.open_device)
    assert result.reason == "not_supported" and "symbolic link" in result.detail
    assert device_access._open_result(str(tmp_path / "none"), device_access.open_device) == "ENOENT"
    if os.path.exists("/dev/null"):
        assert device_access._open_result("/dev/null", device_access.open_device) == "ok"  # a character device


def test_the_open_never_writes_and_closes_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    flags: list[int] = []
    real_open = os.open

    def spy(path: Any, flag: int, *args: Any) -> int:
        flags.append(flag)
        return real_open(path, flag, *args)

    monkeypatch.setattr(device_access.os, "open", spy)
    if not os.path.exists("/dev/null"):
        pytest.skip("no /dev/null")
    before = len(os.listdir("/proc/self/fd"))
    device_access.open_device("/dev/null")
    assert len(os.listdir("/proc/self/fd")) == before
    assert flags and flags[0] & os.O_ACCMODE == os.O_RDONLY and flags[0] & os.O_NONBLOCK and flags[0] & os.O_NOFOLLOW


def test_parse_config_reads_only_the_set_keys() -> None:
    found = device_access.parse_config(SHIPPED)
    assert found == {
        "accept_envvar_when_unprivileged": None,
        "accept_volume_mounts": None,
        "no_cgroups": None,  # commented out: the default applies
        "ldconfig": "@/sbin/ldconfig.real",
        "mode": "auto",
    }


def test_parse_config_tables_comments_and_bad_values() -> None:
    text = (
        'accept-nvidia-visible-devices-as-volume-mounts = true # for kind\n'
        '[nvidia-container-cli]\nno-cgroups = yes\nldconfig = "/sbin/ldconfig"\n'
        '[other]\nmode = "legacy"\n'  # another table's mode is not the runtime's
        '[nvidia-container-runtime]\nmode = \'cdi\'\n'
    )
    found = device_access.parse_config(text)
    assert found["accept_volume_mounts"] is True
    assert found["no_cgroups"].reason == "error"
    assert found["ldconfig"] == "/sbin/ldconfig"
    assert found["mode"] == "cdi"


def test_toolkit_config_in_a_root_fits_the_schema(tmp_path: Path) -> None:
    ctx = fake_root(tmp_path, ["nvidiactl", "nvidia0"], SHIPPED)
    out = device_access.collect(ctx, refusing(errno.EPERM))
    assert out["container_toolkit_config"]["path"] == "/etc/nvidia-container-runtime/config.toml"
    assert out["container_toolkit_config"]["mode"] == "auto"
    modules = probed("h200-x2-real")["modules"]
    modules.update(out)
    validate_section("modules", modules)


def test_a_container_whose_device_cgroup_denies_access_fails_the_rule() -> None:
    """The real H200 VM's captured tree, opened through a fake that answers EPERM as a device
    cgroup does after `systemctl daemon-reload` on a toolkit host."""
    ctx = make_context(root=str(host_root("h200-x2-real")), timeout=10.0)
    facts = probed("h200-x2-real")
    facts["modules"].update(device_access.collect(ctx, refusing(errno.EPERM)))
    rule = RULESET.by_id("nvidia-device-cgroup-refused")
    [finding] = run_rules(RULESET, facts, [rule])
    assert finding.status is Status.FAIL
    assert "EPERM" in finding.message and "device cgroup" in finding.message
    assert "restart the container" in finding.fix.lower() or "delete and restart" in finding.fix.lower()
    # the same tree opened fine: pass; not opened (under --root): not applicable
    facts["modules"].update(device_access.collect(ctx, lambda path: None))
    [finding] = run_rules(RULESET, facts, [rule])
    assert finding.status is Status.PASS
    [finding] = run_rules(RULESET, probed("h200-x2-real"), [rule])
    assert finding.status is Status.SKIP


def test_the_live_machine_gets_the_real_open(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the live root the real opener runs (here on whatever /dev this test host has)."""
    ctx = ProbeContext()
    assert ctx.live
    tried: list[str] = []
    real = device_access.open_device

    def watched(path: str) -> None:
        tried.append(path)
        real(path)

    monkeypatch.setattr(device_access, "open_device", watched)
    out = device_access.device_open_facts(ctx)
    for key in ("nvidiactl_open", "nvidia_gpu_open"):
        value = out[key]
        assert isinstance(value, str) or value.reason != "not_supported", (key, value)
    assert all(path.startswith("/dev/nvidia") for path in tried)
