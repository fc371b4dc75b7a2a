"""Scripts gpudoctor prints stay inert whatever a snapshot or a --root tree holds.

`fix --format shell`, `fix --numa` (shell by default) and `fix --torch --format shell` print
scripts a person reviews and runs, often as root, about a machine whose snapshot someone else may
have written. Every value from the facts must end up either on a comment line (with line breaks
and control characters escaped, so it cannot end the comment) or shell-quoted inside a command.

Each payload below would create a file if it ever became shell syntax: it is put into every string
of a real snapshot (tests/fixtures/snapshots/h200-x2.json) that can reach a script (hostname, OS,
kernel, GPU name, UUID, serial, bus ids, driver and CUDA versions, NVML's error, environment
values, torch version and paths, rule fix text rendered from facts, RDMA NIC names, "why unknown"
details...), each script is parsed with `bash -n` and `dash -n` and then run with PATH holding only
stubs that log their argv: no marker file may appear (payloads name /usr/bin/touch by absolute
path too), and the commands that ran must be exactly the script's own live lines, word for word.
The advice also has to survive hostile numbers and versions (item 2): driver versions that are no
version, digit strings longer than int() takes, other scripts' digits, impossible ids and sizes.
"""

from __future__ import annotations

import copy
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import unicodedata
from pathlib import Path
from typing import Any, Callable

import pytest

import gpudoctor.schemas
from gpudoctor.cli.root import run
from gpudoctor.schemas import validate_facts
from tests.conftest import SNAPSHOTS
from tests.hardening.roots import light_copy

SNAPSHOT = json.loads((SNAPSHOTS / "h200-x2.json").read_text())
TOUCH = shutil.which("touch") or "/usr/bin/touch"
SHELLS = [path for path in map(shutil.which, ("bash", "dash")) if path]

# {t}: touch by absolute path; {m}: the marker directory. Each makes a file in {m} if it runs.
PAYLOADS = {
    "newline": "\n{t} {m}/nl #",
    "newline-path-lookup": "\ntouch {m}/nl-path #",
    "cr": "\r{t} {m}/cr",
    "crlf": "\r\n{t} {m}/crlf",
    "subst": "$({t} {m}/subst)",
    "backticks": "`{t} {m}/bt`",
    "semicolon": "; {t} {m}/semi",
    "single-quote": "' ; {t} {m}/squote ; '",
    "double-quote": '" ; {t} {m}/dquote ; "',
    "nul": "\x00\n{t} {m}/nul",
    "vt-ff": "\x0b{t} {m}/vt\x0c{t} {m}/ff",
    "escape-sequences": "\x1b[2K\x1b[1A\n{t} {m}/esc",
    "unicode-separators": "\u2028{t} {m}/ls\u2029{t} {m}/ps\x85{t} {m}/nel",
    "backslash-newline": "\\\n{t} {m}/bsnl",
    "operators": " && {t} {m}/and || {t} {m}/or | {t} {m}/pipe & ",
    "newline-subst": "\n$({t} {m}/nlsubst)\n",
    "lone-surrogate": "\ud800\n{t} {m}/surrogate",
    "bidi-override": "\u202e\n{t} {m}/bidi",
}


def _enum_properties(schema: Any) -> set[str]:
    """Names of the facts schema's properties whose values are enums (the schema refuses others)."""
    found: set[str] = set()

    def has_enum(node: Any) -> bool:
        if not isinstance(node, dict):
            return False
        if "enum" in node or "const" in node:
            return True
        return any(has_enum(branch) for branch in node.get("anyOf", []))

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for name, sub in (node.get("properties") or {}).items():
                if has_enum(sub) and not (isinstance(sub, dict) and "$ref" in sub):
                    found.add(name)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return found


FACTS_SCHEMA = json.loads((Path(gpudoctor.schemas.__file__).parent / "facts.schema.json").read_text())

# String leaves left alone: the schema's enums, and the values the advice keys on (a GPU whose
# vendor is no longer "nvidia" would take most of the script with it). Everything else gets the
# payload appended.
KEEP = _enum_properties(FACTS_SCHEMA) | {"vendor", "unavailable", "build", "driver"}


def _append_everywhere(value: Any, payload: str, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: (v if k in KEEP else _append_everywhere(v, payload, k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_append_everywhere(v, payload, key) for v in value]
    if isinstance(value, str):
        return value + payload
    return value


def hostile(payload: str) -> dict[str, Any]:
    """The snapshot with the payload in every string that can reach a script."""
    data = copy.deepcopy(SNAPSHOT)
    for section in ("host", "pci", "numa", "modules", "rocm", "toolkit", "nvml", "torch"):
        data[section] = _append_everywhere(data[section], payload)
    host = data["host"]
    host["in_container"] = True  # the container notes too
    host["env"] = {
        name: "GPU-" + payload
        for name in (
            "CUDA_VISIBLE_DEVICES",
            "CUDA_DEVICE_ORDER",
            "NCCL_IB_HCA",
            "LD_LIBRARY_PATH",
            "PYTORCH_CUDA_ALLOC_CONF",
        )
    }
    data["nvml"]["error"] = "NVML says" + payload
    data["rocm"]["gfx_targets"] = ["gfx942" + payload]
    data["torch"]["arch_list"] = ["sm_90" + payload, "sm_" + "9" * 5000]
    data["pci"]["devices"].append(
        {
            "bus_id": "0000:00:08.0",
            "kind": "nic",
            "vendor": "mellanox",
            "numa_node": 0,
            "rdma_devices": ["mlx5_0" + payload],
            "net_devices": ["ib0" + payload],
            "path": "/sys/devices/pci0000:00/0000:00:08.0" + payload,
        }
    )
    return data


def hostile_visible(payload: str) -> dict[str, Any]:
    """Valid GPUs and versions, the payload in CUDA_VISIBLE_DEVICES entries and the "why unknown"
    details: the plan's warnings quote them."""
    data = copy.deepcopy(SNAPSHOT)
    data["host"]["env"] = {"CUDA_VISIBLE_DEVICES": "0,GPU-zz" + payload + ",1", "CUDA_DEVICE_ORDER": payload}
    data["host"]["allowed_cpus"] = {"unavailable": "error", "detail": "cannot read" + payload}
    data["host"]["cgroup_cpus"] = {"unavailable": "error", "detail": "no cgroup" + payload}
    data["host"]["allowed_mems"] = {"unavailable": "error", "detail": "no mems" + payload}
    data["host"]["python_version"] = {"unavailable": "error", "detail": "no python" + payload}
    data["modules"]["nvidia_version"] = "550.54.15" + payload
    data["nvml"]["driver_version"] = "550.54.15" + payload
    data["nvml"]["gpus"][1]["compute_capability"] = "9.0" + payload
    return data


def hostile_numa_unknown(payload: str) -> dict[str, Any]:
    data = copy.deepcopy(SNAPSHOT)
    data["numa"]["nodes"] = {"unavailable": "error", "detail": "sysfs said" + payload}
    data["host"]["hostname"] = payload
    return data


VARIANTS: dict[str, Callable[[str], dict[str, Any]]] = {
    "everywhere": hostile,
    "visible-devices": hostile_visible,
    "numa-unknown": hostile_numa_unknown,
}

# A rule that fails on every GPU and whose fix text interpolates facts strings, as the built-in
# rules' fix texts do ({gpu.bus_id}, {nvml.cuda_driver_version}, {toolkit.cuda_compat_path}...).
RULES = """\
- id: test-interpolates-facts
  title: A fix text made of facts
  area: env
  severity: error
  subject: gpu
  tags: [env, fix-root]
  fail_if: gpu.index >= 0
  message: "{gpu.label} {gpu.name}"
  fix: |
    nvidia-smi -i {gpu.index} # {gpu.name} {gpu.uuid} {gpu.serial} on {host.hostname}
    then run {host.os_name} {host.kernel_release} {nvml.driver_version} {torch.version}
  why: test
  refs: ["test"]
- id: test-interpolates-host
  title: A host fix text made of facts
  area: env
  severity: warning
  tags: [env, fix-config]
  fail_if: host.cpu_count > 0
  message: "x"
  fix: "export X={host.hostname} {toolkit.cuda_home} {torch.location}"
  why: test
  refs: ["test"]
"""


# ---------------------------------------------------------------------------- running a script safely


def _script_lines(text: str) -> list[str]:
    assert text.endswith("\n")
    # No line break of any kind but "\n", no control or format character anywhere.
    assert text.splitlines() == text[:-1].split("\n"), "a line break other than \\n"
    bad = sorted({repr(c) for c in text if c != "\n" and unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp", "Cs")})
    assert not bad, f"control characters in the script: {bad}"
    return text[:-1].split("\n")


def live_lines(text: str) -> list[str]:
    return [line for line in _script_lines(text) if line.strip() and not line.lstrip().startswith("#")]


def check_script(text: str, tmp: Path, allowed: set[str], marker: Path) -> None:
    """Parse with bash -n / dash -n, then run with stub commands only; nothing but the live lines runs."""
    live = live_lines(text)
    for line in live:
        words = shlex.split(line)
        assert words and words[0] in allowed, f"unexpected live line {line!r}"
        assert "touch" not in line, line
    script = tmp / "script.sh"
    script.write_text(text, encoding="utf-8")
    stubs = tmp / "stubs"
    stubs.mkdir(exist_ok=True)
    log = tmp / "log"
    for name in ("gpudoctor", "numactl", "pip", "uv", "touch", "id", "sh", "bash", "rm", "nvidia-smi", "export"):
        stub = stubs / name
        stub.write_text('#!/bin/sh\nprintf "%s\\n" "${0##*/} $*" >> "$STUB_LOG"\n')
        stub.chmod(0o755)
    # Every shell parses it; one runs it (the scripts are POSIX sh: dash where there is one). Two
    # runs per script, not four: this file runs a few thousand scripts.
    for shell in SHELLS:
        parsed = subprocess.run([shell, "-n", str(script)], capture_output=True, text=True, timeout=30)
        assert parsed.returncode == 0, f"{shell} -n: {parsed.stderr}"
    shell = SHELLS[-1]
    subprocess.run(
        [shell, str(script)],
        env={"PATH": str(stubs), "STUB_LOG": str(log), "HOME": str(tmp)},
        cwd=tmp,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    assert not any(marker.iterdir()), f"{shell} ran an injected command: {sorted(os.listdir(marker))}"
    ran = log.read_text().splitlines() if log.exists() else []
    assert ran == [" ".join(shlex.split(line)) for line in live], f"{shell} ran {ran}"


@pytest.fixture
def marker() -> Any:
    # tempfile names are lower case: bus ids are lower-cased on the way, and must still name it.
    path = Path(tempfile.mkdtemp(prefix="gdinj"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _write(tmp: Path, data: dict[str, Any]) -> str:
    problems = validate_facts(data)
    assert not problems, problems  # the schema allows every shape used here
    path = tmp / "facts.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


SHELL_OUTPUTS = {
    "fix": (["fix", "--format", "shell"], {"gpudoctor"}),
    "fix-rules": (["fix", "--format", "shell", "--rules", "RULES"], {"gpudoctor"}),
    "numa-node": (["fix", "--numa"], {"numactl"}),
    "numa-socket-membind": (["fix", "--numa", "--strategy", "socket", "--membind"], {"numactl"}),
    "numa-exclusive": (["fix", "--numa", "--strategy", "exclusive", "--format", "shell"], {"numactl"}),
    "numa-core-complex": (["fix", "--numa", "--strategy", "core-complex"], {"numactl"}),
    "torch": (["fix", "--torch", "--format", "shell"], {"pip"}),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("payload", sorted(PAYLOADS))
def test_no_facts_value_becomes_a_command(capsys, tmp_path, marker, payload, variant):
    text = PAYLOADS[payload].format(t=TOUCH, m=marker)
    facts = _write(tmp_path, VARIANTS[variant](text))
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "facts.yaml").write_text(RULES)
    for name, (args, allowed) in SHELL_OUTPUTS.items():
        argv = [str(rules) if a == "RULES" else a for a in args]
        code, out, err = _cli(capsys, *argv, "--facts", facts)
        assert code in (0, 1), f"{name}: exit {code}: {err}"
        assert "Traceback" not in err, f"{name}: {err}"
        work = tmp_path / name
        work.mkdir()
        check_script(out, work, allowed, marker)
    # The payload really reached the scripts (escaped), so the test is not vacuous.
    code, out, _ = _cli(capsys, "fix", "--format", "shell", "--rules", str(rules), "--facts", facts)
    assert "test-interpolates" in out and f"{marker}/" in out


def test_rule_fix_text_is_all_comments_and_the_payload_is_visible(capsys, tmp_path, marker):
    facts = _write(tmp_path, hostile(PAYLOADS["newline"].format(t=TOUCH, m=marker)))
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "facts.yaml").write_text(RULES)
    code, out, _ = _cli(
        capsys, "fix", "--format", "shell", "--no-builtin-rules", "--rules", str(rules), "--facts", facts
    )
    assert code == 0
    lines = out.splitlines()
    assert [ln for ln in lines if ln and not ln.startswith("#")] == [
        f"gpudoctor check --only test-interpolates-host --rules {rules}",  # fix-config comes first
        f"gpudoctor check --only test-interpolates-facts --rules {rules}",  # one item per GPU
        f"gpudoctor check --only test-interpolates-facts --rules {rules}",
    ]
    # The template's own two lines are two comment lines; the hostname's newline is escaped.
    fix_lines = [ln for ln in lines if ln.startswith("#    nvidia-smi") or ln.startswith("#    then run")]
    assert len(fix_lines) == 4  # two GPUs, two lines each
    assert all(f"\\n{TOUCH} {marker}/nl #" in ln for ln in fix_lines)


def test_root_tree_values_stay_comments(capsys, tmp_path, marker):
    """The same through --root: hostname, os-release, kernel release and NVML's answers."""
    root, sysfs = light_copy("healthy-2gpu", tmp_path / "host")
    payload = f"$({TOUCH} {marker}/root-subst);`{TOUCH} {marker}/root-bt`\r\x1b[1A"
    (root / "proc/sys/kernel/hostname").write_text(f"host{payload}\n")
    (root / "proc/sys/kernel/osrelease").write_text(f"6.8.0{payload}\n")
    release = (root / "etc/os-release").read_text()
    (root / "etc/os-release").write_text(
        "\n".join(
            f"PRETTY_NAME='Ubuntu{payload}'" if line.startswith("PRETTY_NAME=") else line
            for line in release.splitlines()
        )
        + "\n"
    )
    nvml = json.loads((root / "nvml.json").read_text())
    for device in nvml["devices"]:
        device["nvmlDeviceGetName"] = "NVIDIA H100\n" + payload
        device["nvmlDeviceGetUUID"] = device["nvmlDeviceGetUUID"] + "\n" + payload
        device["nvmlDeviceGetSerial"] = "S\n" + payload
    nvml["system"]["nvmlSystemGetDriverVersion"] = "550.90.07\n" + payload
    (root / "nvml.json").write_text(json.dumps(nvml))
    where = ["--root", str(root), "--sysfs-root", str(sysfs)]
    for name, (args, allowed) in SHELL_OUTPUTS.items():
        if "RULES" in args:
            continue
        code, out, err = _cli(capsys, *args, *where)
        assert code in (0, 1) and "Traceback" not in err, f"{name}: {code} {err}"
        work = tmp_path / name
        work.mkdir()
        check_script(out, work, allowed, marker)


# The renderers themselves, given the facts as a snapshot holds them: what `fix` does before
# calling them (cli/commands/fix.py may escape facts on the way too) must not be what keeps them safe.


@pytest.mark.parametrize("payload", sorted(PAYLOADS))
def test_renderers_keep_raw_facts_inert(tmp_path, marker, payload):
    from gpudoctor.advice.fix_list import collect
    from gpudoctor.advice.numa_plan import plan_numa
    from gpudoctor.advice.torch_build import recommend
    from gpudoctor.engine.loader import load_rules
    from gpudoctor.engine.runner import run_rules
    from gpudoctor.facts import parse_snapshot
    from gpudoctor.render import fix_list, torch_build
    from gpudoctor.render.numa_plan import render_numa_plan

    text = PAYLOADS[payload].format(t=TOUCH, m=marker)
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "facts.yaml").write_text(RULES)
    ruleset = load_rules([str(rules)], include_builtin=True)
    scripts: list[tuple[str, str, set[str]]] = []
    for variant, make in sorted(VARIANTS.items()):
        facts = parse_snapshot(json.dumps(make(text)))
        findings = run_rules(ruleset, facts)
        fixes = collect(findings, {r.id: r.tags for r in ruleset.rules}, rule_dirs=[str(rules)])
        assert any(item.rule_id.startswith("test-interpolates") for item in fixes.items)
        host = facts["host"]["hostname"] if isinstance(facts["host"].get("hostname"), str) else "h"
        scripts.append((f"{variant}-fix", fix_list.render_shell(fixes, f"{host} · facts: {text}"), {"gpudoctor"}))
        # each strategy, and the hostile CUDA_VISIBLE_DEVICES entries with one of them
        plans = [(strategy, None) for strategy in ("node", "socket", "exclusive", "core-complex")]
        for strategy, visible in plans + [("node", "0," + text), ("node", "GPU-" + text)]:
            plan = plan_numa(facts, strategy=strategy, membind=True, visible=visible)
            scripts.append((f"{variant}-numa-{strategy}", render_numa_plan(plan, facts, "shell"), {"numactl"}))
        scripts.append((f"{variant}-torch", torch_build.render_shell(recommend(facts)), {"pip"}))
    for n, (name, script, allowed) in enumerate(scripts):
        work = tmp_path / f"{n}-{name}"
        work.mkdir()
        check_script(script, work, allowed, marker)


# ---------------------------------------------------------------------------- the two helpers


def test_shell_comment_keeps_any_text_on_one_comment_line():
    from gpudoctor.render.shell import shell_comment

    every = "".join(chr(c) for c in range(0x0, 0x250)) + "\u2028\u2029\u202e\u200b\ufeff\ud800\U000e0001"
    line = shell_comment(every, "#   ")
    assert line.startswith("#   ") and len(line.splitlines()) == 1
    assert all(unicodedata.category(c) not in ("Cc", "Cf", "Zl", "Zp", "Cs") for c in line)
    assert shell_comment("a\nb\r\x00\x1b") == "# a\\nb\\r\\0\\x1b"
    assert shell_comment("plain · text ≥ 3") == "# plain · text ≥ 3"
    with pytest.raises(ValueError):
        shell_comment("x", "echo ")
    with pytest.raises(ValueError):
        shell_comment("x", "#\n")


@pytest.mark.parametrize("value", ["GPU-1", "$(id)", "`id`", "a b", "x;y", "'", '"', "--physcpubind=0-3,8", "*", ""])
def test_shell_word_is_one_literal_word(value):
    from gpudoctor.render.shell import shell_word

    assert shlex.split(f"cmd {shell_word(value)}") == ["cmd", value]


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "a\x00b", "\x1b[1m", "a\u2028b", "\u202e"])
def test_shell_word_refuses_control_characters(value):
    from gpudoctor.render.shell import shell_word

    with pytest.raises(ValueError):
        shell_word(value)


# ---------------------------------------------------------------------------- item 2: hostile numbers and versions

BAD_VERSIONS = [
    "550.54.15\n",
    "abc",
    "9" * 5000,
    "1e400",
    "…",
    "٥٥٠.٥٤",
    "550.54.15\ntouch x",
    "",
    " ",
    "5" * 4400 + ".1",
]


@pytest.mark.parametrize("fmt", ["text", "json", "shell"])
@pytest.mark.parametrize("version", BAD_VERSIONS, ids=range(len(BAD_VERSIONS)))
def test_torch_treats_a_driver_that_is_no_version_as_unknown(capsys, tmp_path, version, fmt):
    data = copy.deepcopy(SNAPSHOT)
    data["nvml"]["driver_version"] = version
    data["modules"]["nvidia_version"] = version
    data["torch"]["cuda_version"] = version
    data["torch"]["version"] = version
    data["host"]["python_version"] = version
    code, out, err = _cli(capsys, "fix", "--torch", "--format", fmt, "--facts", _write(tmp_path, data))
    assert code in (0, 1) and "Traceback" not in err, err
    if version.strip() == "550.54.15":
        return  # surrounding whitespace is trimmed: a real version
    if fmt == "json":
        rec = json.loads(out)
        assert rec["inputs"]["driver"] is None and rec["inputs"]["driver_source"] == "unknown"
        assert any("is not a version" in w for w in rec["warnings"])
    else:
        assert "is not a version" in out


def test_torch_uses_the_kernel_module_version_when_nvmls_is_no_version(capsys, tmp_path):
    data = copy.deepcopy(SNAPSHOT)
    data["nvml"]["driver_version"] = "garbage"
    code, out, _ = _cli(capsys, "fix", "--torch", "--format", "json", "--facts", _write(tmp_path, data))
    rec = json.loads(out)
    assert code == 0 and rec["inputs"]["driver"] == "580.159.04"
    assert rec["inputs"]["driver_source"].startswith("modules.nvidia_version")
    assert any("'garbage' is not a version number" in w for w in rec["warnings"])


@pytest.mark.parametrize(
    "args",
    [
        ["--driver-version", "٥٥٠.٥٤"],
        ["--driver-version", "9" * 5000],
        ["--torch-version", "2.11.٣"],
        ["--compute-capability", "٩.٠"],
        ["--python-version", "٣.١٢"],
    ],
)
def test_torch_options_in_other_digits_are_refused_not_a_traceback(capsys, args):
    code, _, err = _cli(capsys, "fix", "--torch", *args, "--facts", str(SNAPSHOTS / "h200-x2.json"))
    assert code == 2 and "Traceback" not in err and "expected" in err


def test_torch_ignores_hostile_compute_capabilities_gfx_and_arch_lists(capsys, tmp_path):
    data = copy.deepcopy(SNAPSHOT)
    data["nvml"]["gpus"][0]["compute_capability"] = "9.0\n"
    data["nvml"]["gpus"][1]["compute_capability"] = "٩.٠"
    data["torch"]["arch_list"] = ["sm_" + "9" * 5000, "sm_٩٠"]
    data["rocm"]["gfx_targets"] = ["gfx" + "9" * 5000]
    code, out, err = _cli(capsys, "fix", "--torch", "--format", "json", "--facts", _write(tmp_path, data))
    assert code in (0, 1) and "Traceback" not in err
    rec = json.loads(out)
    assert [g["cc"] for g in rec["inputs"]["nvidia_gpus"]] == [None, None]
    assert any("not MAJOR.MINOR" in w for w in rec["warnings"])


HUGE = 10**39  # the largest integer a snapshot may hold (40 digits)


def _numa_hostile(kind: str) -> dict[str, Any]:
    data = copy.deepcopy(SNAPSHOT)
    node = data["numa"]["nodes"][0]
    if kind == "huge-memory":
        node["memory_total_bytes"] = HUGE
        data["host"]["memory_total_bytes"] = HUGE
    elif kind == "negative-cpus":
        node["cpus"] = [-5, -1, 0, 1]
        data["host"]["allowed_cpus"] = [-3, 0, 1]
    elif kind == "huge-ids":
        node["cpus"] = node["cpus"] + [HUGE]
        data["numa"]["nodes"].append({"id": HUGE, "cpus": [HUGE - 1], "memory_total_bytes": 1})
        for dev in data["pci"]["devices"]:
            dev["numa_node"] = HUGE
        for gpu in data["nvml"]["gpus"]:
            gpu["index"] = HUGE
    elif kind == "negative-node":
        data["numa"]["nodes"][0]["id"] = -7
    return data


@pytest.mark.parametrize("kind", ["huge-memory", "negative-cpus", "huge-ids", "negative-node"])
@pytest.mark.parametrize("strategy", ["node", "socket", "exclusive", "core-complex"])
def test_numa_plan_survives_impossible_numbers(capsys, tmp_path, marker, kind, strategy):
    facts = _write(tmp_path, _numa_hostile(kind))
    for fmt in ("shell", "json"):
        code, out, err = _cli(
            capsys, "fix", "--numa", "--strategy", strategy, "--membind", "--format", fmt, "--facts", facts
        )
        assert code == 0 and "Traceback" not in err, err
    check_script(
        _cli(capsys, "fix", "--numa", "--strategy", strategy, "--facts", facts)[1], tmp_path, {"numactl"}, marker
    )
    for line in live_lines(_cli(capsys, "fix", "--numa", "--strategy", strategy, "--facts", facts)[1]):
        for word in shlex.split(line)[1:]:
            assert "-" not in word.split("=", 1)[1][:1], word  # no negative id reaches numactl
            assert len(word) < 200, word


@pytest.mark.parametrize(
    "visible",
    ["9" * 5000, "--5", "-1", "٣", "0,٣", "0," + "1" * 4400, "GPU-", " , ", "0\n1", "1" * 13],
)
def test_visible_devices_parsing_survives_odd_entries(capsys, tmp_path, visible):
    data = copy.deepcopy(SNAPSHOT)
    data["host"]["env"] = {"CUDA_VISIBLE_DEVICES": visible}
    facts = _write(tmp_path, data)
    code, out, err = _cli(capsys, "fix", "--numa", "--facts", facts)
    assert code == 0 and "Traceback" not in err, err
    code, out, err = _cli(
        capsys, "fix", "--numa", "--visible-devices", visible, "--facts", str(SNAPSHOTS / "h200-x2.json")
    )
    assert code == 0 and "Traceback" not in err, err
    code, out, err = _cli(capsys, "select", "-n", "1", "--facts", facts)
    assert code in (0, 1) and "Traceback" not in err, err


def test_select_prints_only_real_uuids_and_survives_impossible_memory(capsys, tmp_path):
    data = copy.deepcopy(SNAPSHOT)
    data["nvml"]["gpus"][0]["uuid"] = "GPU-1\ntouch /tmp/x,2"
    data["nvml"]["gpus"][1]["memory_total_bytes"] = HUGE
    code, out, err = _cli(capsys, "select", "-n", "1", "--uuid", "-v", "--facts", _write(tmp_path, data))
    assert code == 0 and "Traceback" not in err, err
    assert out == "0\n"  # GPU 1's memory is impossible; GPU 0's UUID is not one: its index
    assert "not a GPU UUID" in err and "memory unknown" in err
