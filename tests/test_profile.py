"""Golden-node profiles: `gpudoctor profile create`, `check --profile` and the gate policy's `profile:`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpudoctor.facts import dumps
from gpudoctor.fleet.profile import ProfileError, load_profile
from gpudoctor.model.profile_facts import FACTS
from tests.conftest import SNAPSHOTS, probed
from tests.helpers.golden import GOLDEN, check
from tests.preflight.helpers import cli

FLEET = Path(__file__).resolve().parent / "fixtures" / "fleet" / "snapshots"
OUT = GOLDEN / "profile"


@pytest.fixture
def real_profile(tmp_path, monkeypatch, capsys):
    """The profile made from the two real H200 captures: the snapshot and the probed host tree."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(SNAPSHOTS / "h200-x2.json", "h200-x2.json")
    Path("h200-x2-real.json").write_text(dumps(probed("h200-x2-real")))
    code, out, err = cli(capsys, "profile", "create", "h200-x2.json", "h200-x2-real.json", "-o", "node-profile.yaml")
    assert (code, out, err) == (0, "", "")
    return tmp_path / "node-profile.yaml"


def test_profile_of_the_real_h200_captures(real_profile):
    text = real_profile.read_text()
    check(OUT / "h200-x2.profile.yaml", text)
    profile = load_profile(real_profile)
    assert profile.data["host"]["gpu_model"] == "NVIDIA H200"
    assert [g["pcie_width"] for g in profile.data["gpus"]] == [16, 16]


def test_values_that_differ_become_sets_and_ranges(tmp_path, capsys):
    base = json.loads((SNAPSHOTS / "h200-x2.json").read_text())
    paths = []
    for number, (driver, memory) in enumerate([("580.159.04", 7880556544), ("580.126.09", 9 << 30)]):
        data = json.loads(json.dumps(base))
        data["nvml"]["driver_version"] = driver
        data["numa"]["nodes"][0]["memory_total_bytes"] = memory
        path = tmp_path / f"good-{number}.json"
        path.write_text(json.dumps(data))
        paths.append(str(path))
    out = tmp_path / "p.yaml"
    assert cli(capsys, "profile", "create", *paths, "-o", str(out))[0] == 0
    text = out.read_text()
    assert 'driver: {one_of: ["580.126.09", "580.159.04"]}' in text
    assert "memory_gib: {min: 7, max: 9}" in text
    assert f"# differed between the snapshots: 580.159.04 on {paths[0]}; 580.126.09 on {paths[1]}" in text
    data = load_profile(out).data
    assert data["host"]["driver"] == {"one_of": ["580.126.09", "580.159.04"]}
    # a node with either driver passes; the memory range holds both ends
    for path in paths:
        code, report, _ = cli(capsys, "check", "--facts", path, "--profile", str(out), "--format", "json")
        failed = [f["rule"] for f in json.loads(report)["findings"] if f["status"] == "fail"]
        assert not [r for r in failed if r.startswith("profile-")]


def test_check_against_the_profile_names_each_deviation(tmp_path, capsys):
    profile = tmp_path / "fleet.yaml"
    good = [str(FLEET / f"node-0{n}.json") for n in (1, 2, 3)]
    assert cli(capsys, "profile", "create", *good, "-o", str(profile))[0] == 0
    for node in ("node-07", "node-12"):
        code, report, _ = cli(
            capsys, "check", "--facts", str(FLEET / f"{node}.json"), "--profile", str(profile), "--format", "json"
        )
        assert code == 1
        failed = [
            f for f in json.loads(report)["findings"] if f["status"] == "fail" and f["rule"].startswith("profile-")
        ]
        if node == "node-07":
            assert [(f["rule"], f["subject"]["kind"]) for f in failed] == [("profile-driver", "host")]
            assert failed[0]["message"] == "driver version is 580.126.09; the profile (fleet.yaml) expects 580.159.04"
            assert {"fact": "host.driver", "value": "580.126.09"} in failed[0]["evidence"]
        else:
            assert [(f["rule"], f["subject"]["label"]) for f in failed] == [
                ("profile-gpu-pcie-width", "GPU 1 (0000:00:07.0)")
            ]
            assert failed[0]["subject"]["index"] == 1
            assert {"fact": "profile.gpus[1].pcie_width", "value": 16} in failed[0]["evidence"]
    code, text, _ = cli(capsys, "check", "--facts", str(FLEET / "node-12.json"), "--profile", str(profile), "-q")
    check(OUT / "node-12.check-profile.txt", text)


def test_without_a_profile_check_output_is_unchanged(capsys):
    node = str(FLEET / "node-01.json")
    code, plain, _ = cli(capsys, "check", "--facts", node, "--format", "json")
    assert "profile-" not in "".join(f["rule"] for f in json.loads(plain)["findings"])


def test_a_fact_the_node_does_not_give_is_unknown_and_a_missing_gpu_fails(tmp_path, capsys):
    profile = tmp_path / "p.yaml"
    profile.write_text("profile_version: 1\nhost:\n  rdma_nics: 2\ngpus:\n  - index: 5\n    pcie_width: 16\n")
    code, report, _ = cli(
        capsys, "check", "--facts", str(FLEET / "node-01.json"), "--profile", str(profile), "--format", "json"
    )
    found = {f["rule"]: f for f in json.loads(report)["findings"] if f["rule"].startswith("profile-")}
    assert found["profile-rdma-nics"]["status"] == "unknown"
    missing = found["profile-gpu-pcie-width"]
    assert (missing["status"], missing["subject"]["kind"]) == ("fail", "host")
    assert missing["message"].startswith("GPU 5 of the profile is not on this machine")


@pytest.mark.parametrize(
    "content, needle",
    [
        ("profile_version: 2\n", "p.yaml:1: profile_version"),
        ("profile_version: 1\nhost:\n  cuda: 13.0\n", "p.yaml:3: host.cuda: CUDA version of the driver is text"),
        ("profile_version: 1\ngpus:\n  - index: 0\n    widht: 16\n", "p.yaml:3: gpus[0]: must not contain {'widht'}"),
        ("profile_version: 1\ngpus:\n  - index: 0\n  - index: 0\n", "p.yaml:3: gpus: two entries with the same index"),
        ("profile_version: 1\nhost: {kernel: a, kernel: b}\n", "duplicate key"),
        ("- 1\n", "p.yaml: a profile is a mapping"),
        ("profile_version: 1\nhost:\n  gpu_count: {min: 1}\n", "p.yaml:3: host.gpu_count"),
        # values that would fail on every node, saying "x16; the profile expects x16"
        ('profile_version: 1\ngpus:\n  - index: 0\n    pcie_width: "16"\n', "p.yaml:3: gpus[0].pcie_width: PCIe"),
        ('profile_version: 1\nhost:\n  gpu_count: {one_of: [8, "8"]}\n', "p.yaml:3: host.gpu_count: GPU count is a"),
        (
            "profile_version: 1\nnuma_nodes:\n  - id: 0\n    memory_gib: {min: 9, max: 1}\n",
            "p.yaml:4: numa_nodes[0].memory_gib: min is above max",
        ),
    ],
)
def test_bad_profiles_are_refused_with_file_and_line(tmp_path, capsys, content, needle):
    path = tmp_path / "p.yaml"
    path.write_text(content)
    with pytest.raises(ProfileError):
        load_profile(path)
    code, out, err = cli(capsys, "check", "--facts", str(FLEET / "node-01.json"), "--profile", str(path))
    assert code == 2 and out == ""
    assert needle in err and err.count("\n") == 1


def test_profile_values_are_escaped_in_the_report(tmp_path, capsys):
    path = tmp_path / "p.yaml"
    path.write_text('profile_version: 1\nhost:\n  kernel: "6.1\\u001b[2J\\nFAKE OK"\n')
    code, out, _ = cli(capsys, "check", "--facts", str(FLEET / "node-01.json"), "--profile", str(path), "-q")
    assert code == 1
    assert "\x1b" not in out and "\\x1b[2J" in out and "\nFAKE OK" not in out


def test_snapshot_strings_cannot_add_yaml_to_the_profile(tmp_path, capsys):
    data = json.loads((SNAPSHOTS / "h200-x2.json").read_text())
    data["host"]["kernel_release"] = "6.1\nprofile_version: 2\n# "
    evil = tmp_path / "evil\nhost: {}.json"
    evil.write_text(json.dumps(data))
    out = tmp_path / "p.yaml"
    assert cli(capsys, "profile", "create", str(evil), str(SNAPSHOTS / "h200-x2.json"), "-o", str(out))[0] == 0
    profile = load_profile(out)
    assert profile.data["profile_version"] == 1
    assert profile.data["host"]["kernel"]["one_of"][0].startswith("6.1\nprofile_version")


def test_the_gate_policy_names_a_profile(tmp_path, capsys):
    profile = tmp_path / "profiles" / "h200.yaml"
    profile.parent.mkdir()
    assert cli(capsys, "profile", "create", str(FLEET / "node-01.json"), "-o", str(profile))[0] == 0
    policy = tmp_path / "policy.yaml"
    policy.write_text("profile: profiles/h200.yaml\n")
    target = tmp_path / "gate.json"
    code, out, _ = cli(
        capsys, "gate", "--facts", str(FLEET / "node-07.json"), "--policy", str(policy), "--json", str(target)
    )
    report = json.loads(target.read_text())
    assert code == 1 and report["verdict"] == "no-go"
    assert report["policy"]["profile"] == str(profile)
    assert [b["rule"] for b in report["blocking"]] == ["profile-driver"]
    code, out, _ = cli(capsys, "gate", "--facts", str(FLEET / "node-01.json"), "--policy", str(policy))
    assert code == 0
    assert f"node profile {profile}" in " ".join(out.split())
    policy.write_text("fail_on: error\nprofile: nowhere.yaml\n")
    code, out, err = cli(capsys, "gate", "--facts", str(FLEET / "node-01.json"), "--policy", str(policy))
    assert code == 2 and "policy.yaml:1: profile:" in err and "nowhere.yaml" in err


def test_nic_deviations_are_findings_on_the_nic(tmp_path, capsys):
    good, bad = tmp_path / "rdma-8nic.json", tmp_path / "rdma-degraded.json"
    good.write_text(dumps(probed("rdma-8nic")))
    bad.write_text(dumps(probed("rdma-degraded")))
    profile = tmp_path / "p.yaml"
    assert cli(capsys, "profile", "create", str(good), "-o", str(profile))[0] == 0
    assert '  - name: "mlx5_0"\n    rate_gbps: 400' in profile.read_text()
    code, report, _ = cli(capsys, "check", "--facts", str(bad), "--profile", str(profile), "--format", "json")
    failed = [f for f in json.loads(report)["findings"] if f["status"] == "fail" and f["rule"].startswith("profile-")]
    assert failed, "rdma-degraded differs from rdma-8nic"
    nic = [f for f in failed if f["rule"].startswith("profile-nic-")]
    assert nic and all(f["subject"]["kind"] == "nic" for f in nic)
    # the same node passes its own profile
    code, report, _ = cli(capsys, "check", "--facts", str(good), "--profile", str(profile), "--format", "json")
    mine = [f for f in json.loads(report)["findings"] if f["rule"].startswith("profile-")]
    assert mine and all(f["status"] == "pass" for f in mine)


GIB = 1 << 30


def _snapshot(tmp_path: Path, name: str, memory_bytes: int) -> str:
    """The H200 snapshot with NUMA node 0's MemTotal set, written to tmp_path/name."""
    data = json.loads((SNAPSHOTS / "h200-x2.json").read_text())
    data["numa"]["nodes"][0]["memory_total_bytes"] = memory_bytes
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def _memory_check(capsys, facts: str, profile: Path, *extra: str) -> tuple[int, dict]:
    code, report, _ = cli(capsys, "check", "--facts", facts, "--profile", str(profile), "--format", "json", *extra)
    [found] = [f for f in json.loads(report)["findings"] if f["rule"] == "profile-numa-memory"]
    return code, found


def test_numa_memory_at_a_gib_boundary_does_not_flap(tmp_path, capsys):
    # made just under 256 GiB (255 whole GiB), checked just over (256): the rounding flipped, nothing changed
    made = _snapshot(tmp_path, "made.json", 256 * GIB - (1 << 20))
    profile = tmp_path / "p.yaml"
    assert cli(capsys, "profile", "create", made, "-o", str(profile))[0] == 0
    assert "memory_gib: 255" in profile.read_text()
    code, found = _memory_check(capsys, _snapshot(tmp_path, "now.json", 256 * GIB + (1 << 20)), profile)
    assert (code, found["status"]) == (0, "pass")
    assert found["message"] == (
        "memory of the NUMA node is 256 GiB, within the tolerance: the profile expects 255 GiB, "
        "give or take 2 % of the profile's value, at least 1 GiB"
    )
    code, found = _memory_check(capsys, made, profile)
    assert found["message"] == "memory of the NUMA node is 255 GiB, as the profile expects"


def test_a_ballooning_vm_warns_and_does_not_fail_check_or_the_gate(tmp_path, capsys):
    # the flap seen: a profile made a minute before with 4 GiB, the check read 6 GiB
    profile = tmp_path / "p.yaml"
    assert cli(capsys, "profile", "create", _snapshot(tmp_path, "made.json", 4 * GIB + 5), "-o", str(profile))[0] == 0
    now = _snapshot(tmp_path, "now.json", 6 * GIB + 5)
    code, found = _memory_check(capsys, now, profile)
    assert (code, found["status"], found["severity"]) == (0, "fail", "warning")
    assert found["message"] == (
        "memory of the NUMA node is 6 GiB; the profile (p.yaml) expects 4 GiB, "
        "give or take 2 % of the profile's value, at least 1 GiB"
    )
    assert _memory_check(capsys, now, profile, "--fail-on", "warning")[0] == 1
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"profile: {profile}\n")
    target = tmp_path / "gate.json"
    code, _, _ = cli(capsys, "gate", "--facts", now, "--policy", str(policy), "--json", str(target))
    assert code == 0 and json.loads(target.read_text())["blocking"] == []
    # a policy that requires the check makes it block
    policy.write_text(f"profile: {profile}\nrequired: [profile-numa-memory]\n")
    code, _, _ = cli(capsys, "gate", "--facts", now, "--policy", str(policy), "--json", str(target))
    assert code == 1 and [b["rule"] for b in json.loads(target.read_text())["blocking"]] == ["profile-numa-memory"]


@pytest.mark.parametrize(
    "spec, node_gib, passes",
    [
        ("512", 503, True),  # 1.8 % less: reservations, not a DIMM (2 % of 512 is 10.24 GiB)
        ("512", 500, False),  # 2.3 % less
        ("512", 522, True),  # above by as much passes too: the band is either side
        ("4", 5, True),  # small nodes: 1 GiB at least
        ("4", 3, True),
        ("4", 6, False),
        ("{min: 250, max: 256}", 245, True),  # 250 - 5 (2 % of 250)
        ("{min: 250, max: 256}", 244, False),
        ("{min: 250, max: 256}", 261, True),  # 256 + 5.12
        ("{one_of: [128, 256]}", 127, True),
        ("{one_of: [128, 256]}", 200, False),
    ],
)
def test_numa_memory_passes_within_its_tolerance_of_each_kind_of_spec(tmp_path, capsys, spec, node_gib, passes):
    profile = tmp_path / "p.yaml"
    profile.write_text(f"profile_version: 1\nnuma_nodes:\n  - id: 0\n    memory_gib: {spec}\n")
    code, found = _memory_check(capsys, _snapshot(tmp_path, "n.json", node_gib * GIB), profile)
    assert found["status"] == ("pass" if passes else "fail")
    assert code == 0  # a warning: check fails on error by default


def test_only_numa_memory_has_a_tolerance_and_is_a_warning():
    from gpudoctor.findings import Severity

    tolerant = {
        f.rule_id: (f.severity, f.tolerance)
        for f in FACTS
        if f.tolerance is not None or f.severity is not Severity.ERROR
    }
    assert tolerant == {"profile-numa-memory": (Severity.WARNING, (0.02, 1))}
