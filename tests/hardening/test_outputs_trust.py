"""What gpudoctor writes, as root, to paths and streams it does not control.

1. Every output option goes through one writer (gpudoctor.outputs.write_file): a regular or
   missing file is replaced atomically; a character device or FIFO is written in place and stays
   what it is; a symbolic link is followed only to this process's own descriptors, a character
   device or a FIFO; a failed write is exit status 2 with one line.
2. Values from snapshots, rule packs and reports reach the terminal without control characters.
3. A stream whose encoding cannot hold a character gets an ASCII stand-in, never a traceback.
4. A closed or full stdout is exit status 2 with one line on stderr.
5. nan and inf are refused by every float option.
6. Messages name the kind of thing ("a list", "not a regular file"), not an internal class.

Device nodes are made with mknod in a temporary directory (the tests run as root); the two tests
that write to the real /dev/null and /dev/full put them back if they were replaced.
"""

from __future__ import annotations

import copy
import json
import os
import re
import select
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gpudoctor.cli.root import run
from gpudoctor.escaping import printable, terminal_safe
from gpudoctor.outputs import OutputError, write_file
from tests.conftest import HOSTS, REPO, SNAPSHOTS

SNAPSHOT = SNAPSHOTS / "h200-x2.json"
HEALTHY = str(HOSTS / "healthy-2gpu")
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
ROOT = os.geteuid() == 0


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> bool:
    return err.count("\n") == 1 and err.endswith("\n") and "Traceback" not in err


def chardev(path: Path, minor: int) -> Path:
    """A copy of a memory device (/dev/null is 1,3; /dev/full is 1,7) at path."""
    if not ROOT:
        pytest.skip("needs root to make device nodes")
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    return path


def is_chardev(path: Path | str) -> bool:
    return stat.S_ISCHR(os.lstat(path).st_mode)


def leftovers(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.endswith(".tmp")]


@pytest.fixture
def restore_dev():
    """Put /dev/null and /dev/full back as character devices if a test replaced them."""
    yield
    for name, minor in (("null", 3), ("full", 7)):
        path = f"/dev/{name}"
        if not is_chardev(path):
            os.unlink(path)
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
            os.chmod(path, 0o666)


# --- 1. the writer ---------------------------------------------------------------------------


@pytest.mark.skipif(not ROOT, reason="as root only: the bug replaced /dev/null")
def test_real_dev_null_stays_a_character_device(capsys, restore_dev):
    before = os.stat("/dev/null")
    code, out, err = cli(capsys, "topo", "--facts", str(SNAPSHOT), "-o", "/dev/null")
    after = os.lstat("/dev/null")
    assert code == 0 and out == "" and err == ""
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev
    assert stat.S_IMODE(after.st_mode) == stat.S_IMODE(before.st_mode)


@pytest.mark.skipif(not ROOT, reason="as root only: the bug replaced /dev/full")
def test_real_dev_full_is_exit_2_with_one_line(capsys, restore_dev):
    code, _, err = cli(capsys, "check", "--facts", str(SNAPSHOT), "-o", "/dev/full")
    assert code == 2 and one_line(err)
    assert err == "gpudoctor: error: cannot write /dev/full: No space left on device\n"
    assert is_chardev("/dev/full")


def test_a_character_device_is_written_in_place(capsys, tmp_path):
    null = chardev(tmp_path / "null", 3)
    code, _, err = cli(capsys, "check", "--facts", str(SNAPSHOT), "-o", str(null))
    assert code == 0 and err == ""
    assert is_chardev(null) and os.listdir(tmp_path) == ["null"]


def test_a_full_device_is_exit_2_and_leaves_nothing(capsys, tmp_path):
    full = chardev(tmp_path / "full", 7)
    code, _, err = cli(capsys, "topo", "--facts", str(SNAPSHOT), "-o", str(full))
    assert code == 2 and one_line(err) and err.endswith(f"cannot write {full}: No space left on device\n")
    assert is_chardev(full) and os.listdir(tmp_path) == ["full"]


def _drain(fd: int, got: list[bytes], deadline: float) -> None:
    """Read a FIFO opened non-blocking until its writer has come and gone."""
    while time.monotonic() < deadline:
        select.select([fd], [], [], 0.1)
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            continue
        if chunk:
            got.append(chunk)
        elif got:
            return  # end of file after the text
        else:
            time.sleep(0.01)  # no writer yet


def test_a_fifo_with_a_reader_gets_the_text_and_stays_a_fifo(capsys, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    got: list[bytes] = []
    reader = threading.Thread(target=_drain, args=(fd, got, time.monotonic() + 20))
    reader.start()
    try:
        code, _, err = cli(capsys, "topo", "--facts", str(SNAPSHOT), "-o", str(fifo))
    finally:
        reader.join()
        os.close(fd)
    expected = cli(capsys, "topo", "--facts", str(SNAPSHOT))[1]
    assert code == 0 and err == ""
    assert b"".join(got).decode() == expected
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and os.listdir(tmp_path) == ["pipe"]


def test_a_fifo_without_a_reader_fails_at_once(capsys, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    started = time.monotonic()
    code, _, err = cli(capsys, "topo", "--facts", str(SNAPSHOT), "-o", str(fifo))
    assert time.monotonic() - started < 10
    assert code == 2 and one_line(err) and "no process is reading" in err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("command", [["check", "--facts"], ["profile", "create"]], ids=" ".join)
def test_a_symlink_to_a_regular_file_is_refused_and_the_file_kept(capsys, tmp_path, command):
    precious = tmp_path / "shadow"
    precious.write_text("root:secret\n")
    link = tmp_path / "report.txt"
    link.symlink_to(precious)
    code, _, err = cli(capsys, *command, str(SNAPSHOT), "-o", str(link))
    assert code == 2 and one_line(err)
    assert f"cannot write {link}: it is a symbolic link" in err and "give the file it points to" in err
    assert precious.read_text() == "root:secret\n" and link.is_symlink()
    assert sorted(os.listdir(tmp_path)) == ["report.txt", "shadow"]


def test_a_dangling_symlink_is_refused_and_nothing_created(capsys, tmp_path):
    link = tmp_path / "report.json"
    link.symlink_to(tmp_path / "planted")
    code, _, err = cli(capsys, "gate", "--facts", str(SNAPSHOT), "--json", str(link))
    assert code == 2 and one_line(err) and "symbolic link" in err and "does not exist" in err
    assert not (tmp_path / "planted").exists() and link.is_symlink()


def test_a_symlink_to_a_fifo_or_device_is_followed(capsys, tmp_path):
    null = chardev(tmp_path / "null", 3)
    link = tmp_path / "out"
    link.symlink_to(null)
    code, _, err = cli(capsys, "topo", "--facts", str(SNAPSHOT), "-o", str(link))
    assert code == 0 and err == "" and link.is_symlink() and is_chardev(null)


def test_a_link_to_this_process_stdout_writes_to_stdout(tmp_path):
    """/dev/stdout is /proc/self/fd/1: written through the descriptor (here a pipe), the link kept."""
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")
    args = ["topo", "--facts", str(SNAPSHOT)]
    direct = gpudoctor(*args)
    through = gpudoctor(*args, "-o", str(link))
    assert through.returncode == 0 and through.stderr == b""
    assert through.stdout == direct.stdout and link.is_symlink()
    assert os.readlink(link) == "/proc/self/fd/1"


def test_a_missing_directory_is_exit_2(capsys, tmp_path):
    target = tmp_path / "no" / "such" / "dir" / "r.json"
    code, _, err = cli(capsys, "check", "--facts", str(SNAPSHOT), "--format", "json", "-o", str(target))
    assert code == 2 and one_line(err) and err.endswith("No such file or directory\n")


def test_a_read_only_directory_is_exit_2_and_leaves_nothing(capsys, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    # root ignores permission bits; an immutable directory refuses even root
    if subprocess.run(["chattr", "+i", str(locked)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here")
    try:
        code, _, err = cli(capsys, "tiers", "--facts", str(SNAPSHOT), "-o", str(locked / "tiers.txt"))
        assert code == 2 and one_line(err) and "cannot write" in err
        assert os.listdir(locked) == []
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=True)


def test_directories_and_block_devices_are_refused(tmp_path):
    with pytest.raises(OutputError, match="it is a directory"):
        write_file(tmp_path, "x")
    if ROOT:
        disk = tmp_path / "disk"
        os.mknod(disk, stat.S_IFBLK | 0o600, os.makedev(240, 0))
        with pytest.raises(OutputError, match="it is a block device"):
            write_file(disk, "x")
        assert stat.S_ISBLK(os.lstat(disk).st_mode)


def test_a_regular_file_is_replaced_atomically_with_the_usual_mode(tmp_path):
    target = tmp_path / "r.txt"
    target.write_text("old")
    other = tmp_path / "hardlink"
    os.link(target, other)
    old = os.umask(0o027)
    try:
        write_file(target, "new\n")
    finally:
        os.umask(old)
    assert target.read_text() == "new\n" and other.read_text() == "old"  # the hard link is not written through
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640
    assert leftovers(tmp_path) == []


def test_a_failed_write_removes_its_temporary_file(tmp_path, monkeypatch):
    def broken(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(OutputError, match="No space left on device"):
        write_file(tmp_path / "r.txt", "x")
    assert os.listdir(tmp_path) == []


def _report(tmp_path: Path) -> str:
    path = tmp_path / "node.json"
    assert run(["check", "--facts", str(SNAPSHOT), "--format", "json", "-o", str(path)]) == 0
    return str(path)


OUTPUT_OPTIONS = {
    "check -o": lambda p, t: ["check", "--facts", str(SNAPSHOT), "-o", p],
    "check json -o": lambda p, t: ["check", "--facts", str(SNAPSHOT), "--format", "json", "-o", p],
    "probe -o": lambda p, t: ["probe", "--root", HEALTHY, "-o", p],
    "fix -o": lambda p, t: ["fix", "--facts", str(SNAPSHOT), "-o", p],
    "fix --numa -o": lambda p, t: ["fix", "--numa", "--facts", str(SNAPSHOT), "-o", p],
    "fix --torch -o": lambda p, t: ["fix", "--torch", "--facts", str(SNAPSHOT), "-o", p],
    "topo -o": lambda p, t: ["topo", "--facts", str(SNAPSHOT), "-o", p],
    "tiers -o": lambda p, t: ["tiers", "--facts", str(SNAPSHOT), "-o", p],
    "tiers --plot": lambda p, t: ["tiers", "--facts", str(SNAPSHOT), "--plot", p],
    "report merge -o": lambda p, t: ["report", "merge", _report(t), "-o", p],
    "report merge --drift -o": lambda p, t: ["report", "merge", "--drift", _report(t), "-o", p],
    "profile create -o": lambda p, t: ["profile", "create", str(SNAPSHOT), "-o", p],
    "gate --json": lambda p, t: ["gate", "--facts", str(SNAPSHOT), "--json", p],
    "gate --junit": lambda p, t: ["gate", "--facts", str(SNAPSHOT), "--junit", p],
    "gate --prometheus": lambda p, t: ["gate", "--facts", str(SNAPSHOT), "--prometheus", p],
    "gate --nfd-features": lambda p, t: ["gate", "--facts", str(SNAPSHOT), "--nfd-features", p],
}


@pytest.mark.parametrize("option", sorted(OUTPUT_OPTIONS))
def test_every_output_option_writes_a_device_in_place(capsys, tmp_path, option):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    null = chardev(out_dir / ("null.svg" if option == "tiers --plot" else "null"), 3)
    full = chardev(out_dir / ("full.svg" if option == "tiers --plot" else "full"), 7)
    code, _, err = cli(capsys, *OUTPUT_OPTIONS[option](str(null), tmp_path))
    assert code in (0, 1) and "error" not in err, err
    code, _, err = cli(capsys, *OUTPUT_OPTIONS[option](str(full), tmp_path))
    assert code == 2 and "No space left on device" in err and "Traceback" not in err
    assert is_chardev(null) and is_chardev(full) and sorted(os.listdir(out_dir)) == sorted([null.name, full.name])


def test_write_file_on_a_full_device_says_so(tmp_path):
    from gpudoctor.outputs import OutputError, write_file

    full = chardev(tmp_path / "full", 7)
    with pytest.raises(OutputError, match="No space left on device"):
        write_file(full, "x")  # what gate --distributed writes its --json with
    assert is_chardev(full)


# --- 2. control characters -------------------------------------------------------------------

EVIL = "ev\x1b]0;pwned\x07il\x1b]52;c;ZWNobyBwd25lZA==\x07 \x9b31m\rCR\nFORGED LINE \u202e \x7f"


def evil_snapshot(tmp_path: Path) -> str:
    data = json.loads(SNAPSHOT.read_text())
    data["host"]["hostname"] = EVIL
    data["nvml"]["gpus"][0]["name"] = "NVIDIA H200 " + EVIL
    data["nvml"]["gpus"][1]["name"] = EVIL
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(data))
    return str(path)


def evil_rules(tmp_path: Path) -> str:
    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "evil.yaml").write_text(
        "- id: evil-rule\n"
        '  title: "Evil \\e]0;pwned\\a title \\x9b31m \\r FORGED"\n'
        "  area: driver\n"
        "  severity: error\n"
        "  tags: [driver, fix-config]\n"
        "  fail_if: \"host.hostname != ''\"\n"
        '  message: "evil \\e]52;c;eA==\\a on {host.hostname}"\n'
        '  pass_message: "ok"\n'
        '  fix: "run \\e[2J this"\n'
        '  why: "because \\e]0;x\\a"\n'
        "  refs:\n"
        '    - "ref \\e]8;;http://x\\a"\n'
    )
    return str(pack)


def assert_clean(text: str) -> None:
    assert CONTROL.search(text) is None, repr(CONTROL.findall(text)[:5])
    assert not any(line.startswith(("FORGED", "CR")) for line in text.splitlines())


ESCAPED = [
    ["check"],
    ["check", "-v"],
    ["check", "--format", "json"],
    ["topo"],
    ["topo", "--format", "json"],
    ["tiers"],
    ["fix"],
    ["fix", "--format", "shell"],
    ["fix", "--numa"],
    ["fix", "--numa", "--format", "json"],
    ["fix", "--torch"],
    ["fix", "--torch", "--format", "shell"],
    ["select", "-n", "2", "-v"],
    ["gate"],
    ["gate", "--format", "markdown"],
    ["gate", "--format", "json"],
    ["gate", "--expect-model", "A100"],
    ["gate", "--expect-model", "A100", "--format", "json"],
]


@pytest.mark.parametrize("args", ESCAPED, ids=" ".join)
def test_values_from_a_snapshot_reach_the_terminal_escaped(capsys, tmp_path, args):
    code, out, err = cli(capsys, *args, "--facts", evil_snapshot(tmp_path))
    assert code in (0, 1), err
    assert_clean(out)
    assert_clean(err)
    if "json" not in args and (args[0] in ("check", "topo", "tiers", "gate") or args == ["fix", "--numa"]):
        assert "\\x1b]0;pwned\\x07" in out + err  # shown as a visible escape, not dropped


@pytest.mark.parametrize(
    "args", [["check"], ["check", "-v"], ["fix"], ["fix", "--format", "shell"], ["gate"]], ids=" ".join
)
def test_a_rule_pack_reaches_the_terminal_escaped(capsys, tmp_path, args):
    code, out, err = cli(capsys, *args, "--facts", evil_snapshot(tmp_path), "--rules", evil_rules(tmp_path))
    assert code in (0, 1), err
    assert_clean(out)
    assert_clean(err)


@pytest.mark.parametrize(
    "args", [["rules", "list"], ["rules", "show", "evil-rule"], ["rules", "list", "--format", "json"]]
)
def test_rules_list_and_show_escape_a_rule_pack(capsys, tmp_path, args):
    code, out, err = cli(capsys, *args, "--rules", evil_rules(tmp_path))
    assert code == 0 and err == ""
    assert_clean(out)
    if "json" not in args:
        # the title may wrap to the output width: compared with the line breaks as spaces
        assert "Evil \\x1b]0;pwned\\x07 title \\u009b31m \\r FORGED" in " ".join(out.split())


def test_json_stays_valid_and_faithful(capsys, tmp_path):
    code, out, _ = cli(capsys, "topo", "--format", "json", "--facts", evil_snapshot(tmp_path))
    assert code == 0 and CONTROL.search(out) is None
    assert json.loads(out)["hostname"] == EVIL  # escaped in JSON's own syntax, the same string


def test_forced_colour_lets_only_the_renderers_sgr_through(capsys, tmp_path):
    code, out, _ = cli(capsys, "check", "--color", "--facts", evil_snapshot(tmp_path), "--rules", evil_rules(tmp_path))
    assert code == 1 and "\x1b[" in out  # coloured
    assert_clean(re.sub("\x1b\\[[0-9;]*m", "", out))


def test_merged_reports_reach_the_terminal_escaped(capsys, tmp_path):
    path = _report(tmp_path)
    data = json.loads(Path(path).read_text())
    data["host"] = f"{EVIL} (Ubuntu) · 2× NVIDIA {EVIL}"
    data["envelope"]["host"]["hostname"] = EVIL  # what report merge names the node by
    data["envelope"]["gpus"][0]["name"] = f"NVIDIA {EVIL}"
    data["verdict"], data["exit_code"] = "fail", 1
    data["findings"][0].update(status="fail", severity="error", message=EVIL)
    Path(path).write_text(json.dumps(data))
    code, out, err = cli(capsys, "report", "merge", path)
    assert code == 1, err
    assert_clean(out)
    assert_clean(err)
    assert "NVIDIA ev\\x1b]0;pwned" in out
    code, out, err = cli(capsys, "report", "merge", path, "--format", "json")
    assert code == 1 and CONTROL.search(out) is None and json.loads(out)


def test_a_profile_made_from_hostile_snapshots_holds_their_text_as_values_only(capsys, tmp_path):
    """A snapshot's host name, GPU names and file name carry newlines, quotes, YAML and escapes:
    the profile holds them as strings, adds no key, and its comments carry no control character."""
    from gpudoctor.fleet.profile import load_profile

    forged = 'x"\n  gpu_count: 99\nnics: []\n# ' + EVIL
    data = json.loads(Path(evil_snapshot(tmp_path)).read_text())
    data["host"]["hostname"] = forged
    data["nvml"]["gpus"][1]["name"] = forged
    one = tmp_path / "one.json"
    one.write_text(json.dumps(data))
    two = tmp_path / 'two\n  gpu_count: 7\n" \x1b[2J.json'
    two.write_text(SNAPSHOT.read_text())
    profile = tmp_path / "node.yaml"
    code, out, err = cli(capsys, "profile", "create", str(one), str(two), "-o", str(profile))
    assert code == 0 and out == "" and err == "", err
    text = profile.read_text()
    assert_clean(text)
    loaded = load_profile(profile).data
    assert [m["snapshot"] for m in loaded["made_from"]] == [str(one), str(two)]
    assert loaded["made_from"][0]["hostname"] == forged
    assert loaded["host"]["gpu_count"] == 2 and "nics" in loaded and loaded["nics"] == []
    mixed = " + ".join(sorted(["NVIDIA H200 " + EVIL, forged]))  # one snapshot's two GPU names
    assert loaded["host"]["gpu_model"] == {"one_of": sorted([mixed, "NVIDIA H200"])}
    # the note on the differing model names both, escaped, on one comment line
    notes = [line for line in text.splitlines() if "differed" in line]
    assert len(notes) == 1 and notes[0].startswith("  # differed between the snapshots:"), notes
    assert "\\x1b]0;pwned" in notes[0] and "gpu_count: 99" in notes[0]


PROFILE_EVIL = (
    "profile_version: 1\n"
    'host: {gpu_model: "\\e]0;pwned\\a\\u202e", driver: {one_of: ["\\x9b31m", "\\r\\nFORGED"]}}\n'
    'nics: [{name: "mlx5_\\e[2J", rate_gbps: 400}]\n'
    'gpus: [{index: 0, nic: "\\e]52;c;eA==\\a"}]\n'
)


PROFILE_COMMANDS = [["check"], ["check", "-v"], ["check", "--format", "json"], ["gate"], ["gate", "--npd"]]


@pytest.mark.parametrize("args", [*PROFILE_COMMANDS, ["gate", "--format", "json"]], ids=" ".join)
def test_a_hostile_profile_reaches_the_terminal_escaped(capsys, tmp_path, args):
    profile = tmp_path / "evil\x1b]0;t\x07.yaml"
    profile.write_text(PROFILE_EVIL)
    if args[0] == "gate":
        policy = tmp_path / "policy.yaml"
        policy.write_text(f"profile: {json.dumps(str(profile))}\n")
        extra = ["--policy", str(policy)]
    else:
        extra = ["--profile", str(profile)]
    code, out, err = cli(capsys, *args, "--facts", str(SNAPSHOT), *extra)
    assert code == 1, err
    assert_clean(out)
    assert_clean(err)
    if "json" in args:
        assert json.loads(out)
    elif "--npd" in args:
        assert out.count("\n") == 1 and out.isascii() and "\\x1b]0;pwned" in out
    else:
        assert "\\x1b]0;pwned" in out + err


def test_gate_npd_gives_one_ascii_line_whatever_the_snapshot_holds(capsys, tmp_path):
    from gpudoctor.render.npd import MAX_REASON_CHARS

    data = json.loads(Path(evil_snapshot(tmp_path)).read_text())
    data["nvml"]["gpus"][0]["name"] = ("\u2028\n" + EVIL + " ü ☃ " * 200) * 3  # long, wide and many lines
    path = tmp_path / "wide.json"
    path.write_text(json.dumps(data))
    code, out, err = cli(capsys, "gate", "--npd", "--facts", str(path), "--expect-model", "A100")
    assert code == 1, err
    line = out[:-1]
    assert out.endswith("\n") and "\n" not in line and line.isascii() and line.isprintable()
    assert len(line) <= MAX_REASON_CHARS and line.startswith("no-go: ")
    # a gate that cannot run is NPD's Unknown (2), never OK (0) or NonOK (1), on one line too
    code, out, err = cli(capsys, "gate", "--npd", "--facts", str(tmp_path / ("gone\n" + EVIL + ".json")))
    assert code == 2 and out.count("\n") == 1 and out.startswith("could not run: ") and out.isascii()
    assert_clean(out)


def test_gate_npd_that_breaks_is_unknown_not_a_node_problem(capsys, monkeypatch):
    # a bug anywhere in the gate: NPD reads exit status 1 as NonOK, so it must be 2 (Unknown)
    import gpudoctor.render.npd

    def broken(report):
        raise RuntimeError("a bug\x1b[2J\nFORGED")

    monkeypatch.setattr(gpudoctor.render.npd, "render", broken)
    code, out, err = cli(capsys, "gate", "--npd", "--facts", str(SNAPSHOT))
    assert code == 2 and out == "could not run: internal error: RuntimeError: a bug\\x1b[2J FORGED\n"
    assert "Traceback" in err  # NPD logs stderr: the bug is reported there
    monkeypatch.undo()
    assert cli(capsys, "gate", "--npd", "--facts", str(SNAPSHOT))[0] == 0


def test_drift_over_hostile_reports_reaches_the_terminal_escaped(capsys, tmp_path):
    reports = []
    for number in range(3):
        path = Path(_report(tmp_path)).rename(tmp_path / f"node{number}.json")
        data = json.loads(path.read_text())
        data["envelope"]["host"]["hostname"] = f"node{number}{EVIL if number == 2 else ''}"
        if number == 2:
            facts = data["envelope"]["profile"]
            facts["host"]["gpu_model"] = EVIL
            facts["nics"] = [{"name": EVIL, "rate_gbps": 400, "link_layer": EVIL, "numa_node": 0}]
        path.write_text(json.dumps(data))
        reports.append(str(path))
    code, out, err = cli(capsys, "report", "merge", "--drift", *reports)
    assert code == 1, err  # the model differs on one node: a blocking fact
    assert_clean(out)
    assert_clean(err)
    assert "ev\\x1b]0;pwned" in out and "FORGED LINE" in out and not any(
        line.startswith("FORGED") for line in out.splitlines()
    )
    code, out, err = cli(capsys, "report", "merge", "--drift", "--format", "json", *reports)
    assert code == 1 and CONTROL.search(out) is None
    assert EVIL in {fact["differs"][0]["value"] for fact in json.loads(out)["facts"] if fact["differs"]}


def test_error_messages_are_one_line_without_control_characters(capsys):
    code, _, err = cli(capsys, "check", "--facts", "/nonexistent/x\x1b]0;t\x07\nFORGED.json")
    assert code == 2 and one_line(err) and CONTROL.search(err) is None
    assert "\\x1b]0;t\\x07\\nFORGED.json" in err
    code, _, err = cli(capsys, "check", "--format", "x\x1b]0;t\x07")
    assert code == 2 and CONTROL.search(err) is None and "Traceback" not in err


def test_printable_and_terminal_safe():
    assert printable("H200 NVL") == "H200 NVL"
    assert (
        printable("a\x1b]0;t\x07\n\r\t\x9b\x7f\ud800\u202e") == "a\\x1b]0;t\\x07\\n\\r\\t\\u009b\\u007f\\ud800\\u202e"
    )
    assert terminal_safe("a\n\tb\x1b[31mc\x1b[0m\x9b") == "a\n\tb\\x1b[31mc\\x1b[0m\\u009b"
    assert terminal_safe("a\x1b[31mc\x1b[0m\x1b]0;t\x07", colour=True) == "a\x1b[31mc\x1b[0m\\x1b]0;t\\x07"
    assert json.loads(terminal_safe(json.dumps({"k": "\x9b\ud800"}, ensure_ascii=False))) == {"k": "\x9b\ud800"}


# --- 3 and 4: encodings and standard streams (a real process) ---------------------------------


def gpudoctor(*args: str, env: dict[str, str] | None = None, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    full = dict(os.environ)
    full.pop("PYTHONIOENCODING", None)
    full.update(env or {})
    full["PYTHONPATH"] = str(REPO / "src") + os.pathsep + full.get("PYTHONPATH", "")
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    return subprocess.run([sys.executable, "-m", "gpudoctor", *args], env=full, timeout=120, **kwargs)


ENCODED = [
    ["check", "--facts", str(SNAPSHOT)],
    ["tiers", "--facts", str(SNAPSHOT)],
    ["topo", "--facts", str(SNAPSHOT)],
    ["fix", "--numa", "--facts", str(SNAPSHOT)],
    ["fix", "--torch", "--facts", str(SNAPSHOT)],
    ["rules", "list"],
    ["rules", "show", "pcie-width-degraded"],
]


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
@pytest.mark.parametrize("args", ENCODED, ids=" ".join)
def test_a_narrow_stdout_encoding_gets_ascii_stand_ins(args, encoding):
    done = gpudoctor(*args, env={"PYTHONIOENCODING": encoding})
    assert done.returncode in (0, 1), done.stderr.decode(errors="replace")
    assert b"Traceback" not in done.stderr and b"UnicodeEncodeError" not in done.stderr
    text = done.stdout.decode(encoding)
    if encoding == "ascii":
        assert "->" in text or "--" in text or "-" in text
    assert len(text) > 100


def test_undecodable_environment_bytes_and_the_c_locale(tmp_path):
    """os.environ holds lone surrogates for bytes that are not UTF-8 (\\xff, and \\x9b, which is an
    8-bit CSI to a terminal); a live probe records them and check -v shows them."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONIOENCODING"}
    env_bytes = {k.encode(): v.encode("utf-8", "surrogateescape") for k, v in env.items()}
    env_bytes[b"PYTHONPATH"] = str(REPO / "src").encode()
    env_bytes[b"CUDA_VISIBLE_DEVICES"] = b"0,\xff\x9b1"
    for locale in (b"C", b"C.UTF-8"):
        env_bytes[b"LC_ALL"] = locale
        for args in (["check", "-v"], ["fix", "--numa"], ["fix", "--numa", "--format", "json"], ["topo"]):
            done = subprocess.run(
                [sys.executable, "-m", "gpudoctor", *args], env=env_bytes, capture_output=True, timeout=120
            )
            assert done.returncode in (0, 1), done.stderr
            assert b"Traceback" not in done.stderr
            assert b"\x9b" not in done.stdout and b"\x1b" not in done.stdout and b"\xff" not in done.stdout
        assert (
            b"CUDA_VISIBLE_DEVICES = 0,\\udcff\\udc9b1"
            in subprocess.run(
                [sys.executable, "-m", "gpudoctor", "check", "-v"], env=env_bytes, capture_output=True, timeout=120
            ).stdout
        )


CLOSED = [
    ["check", "--root", HEALTHY],
    ["rules", "list"],
    ["tiers", "--facts", str(SNAPSHOT)],
    ["topo", "--facts", str(SNAPSHOT)],
    ["select", "--facts", str(SNAPSHOT)],
]


def _closed(*args: str, also_stderr: bool = False) -> subprocess.CompletedProcess[bytes]:
    """Run with stdout (and stderr) closed, as `cmd >&-` does."""
    redirect = ">&- 2>&-" if also_stderr else ">&-"
    script = f'exec "$0" -m gpudoctor "$@" {redirect}'
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    return subprocess.run(["sh", "-c", script, sys.executable, *args], env=env, capture_output=True, timeout=120)


@pytest.mark.parametrize("args", CLOSED, ids=" ".join)
def test_a_closed_stdout_is_exit_2_with_one_line(args):
    done = _closed(*args)
    assert done.returncode == 2
    assert done.stderr == b"gpudoctor: error: cannot write standard output: it is closed\n"
    assert _closed(*args, also_stderr=True).returncode == 2


@pytest.mark.parametrize("args", CLOSED, ids=" ".join)
def test_stdout_on_a_full_disk_is_exit_2_with_one_line(args):
    with open("/dev/full", "wb") as full:
        done = gpudoctor(*args, stdout=full)
    assert done.returncode == 2
    assert done.stderr == b"gpudoctor: error: cannot write standard output: No space left on device\n"


def test_a_reader_that_went_away_is_exit_2():
    """A pipe with no reader (EPIPE): not exit 0, which a gate would read as go."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = gpudoctor("gate", "--facts", str(SNAPSHOT), "--expect-gpus", "8", stdout=write_end)
    finally:
        os.close(write_end)
    assert done.returncode == 2 and b"Broken pipe" in done.stderr and b"Traceback" not in done.stderr


def test_help_on_a_full_stdout_is_exit_2():
    with open("/dev/full", "wb") as full:
        done = gpudoctor("--help", stdout=full)
    assert done.returncode == 2 and b"Traceback" not in done.stderr


# --- 5. float options ------------------------------------------------------------------------

FLOATS = [
    (["check", "--facts", str(SNAPSHOT)], "--timeout"),
    (["check"], "--nvml-timeout"),
    (["probe"], "--timeout"),
    (["topo"], "--nvml-timeout"),
    (["tiers"], "--timeout"),
    (["fix"], "--timeout"),
    (["gate", "--facts", str(SNAPSHOT)], "--timeout"),
    (["gate", "--facts", str(SNAPSHOT)], "--nvml-timeout"),
    (["gate", "--facts", str(SNAPSHOT)], "--min-free-memory"),
    (["gate", "--facts", str(SNAPSHOT), "--distributed"], "--min-busbw"),
    (["select", "--facts", str(SNAPSHOT)], "--min-free-memory"),
    (["select"], "--timeout"),
    (["bench"], "--bench-timeout"),
    (["bench"], "--timeout"),
    (["run", "--numa"], "--nvml-timeout"),
]


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e999", "infinity"])
@pytest.mark.parametrize(("args", "option"), FLOATS, ids=lambda x: x if isinstance(x, str) else x[0])
def test_float_options_refuse_nan_and_infinity(capsys, args, option, value):
    tail = ["--", "true"] if args[0] == "run" else []
    code, out, err = cli(capsys, *args, f"{option}={value}", *tail)
    assert code == 2 and "is not a finite number" in err and option in err, err


@pytest.mark.parametrize(
    ("args", "option"), [(a, o) for a, o in FLOATS if o in ("--timeout", "--nvml-timeout", "--bench-timeout")]
)
def test_timeouts_have_a_maximum_of_a_day(capsys, args, option):
    tail = ["--", "true"] if args[0] == "run" else []
    code, _, err = cli(capsys, *args, f"{option}=86401", *tail)
    assert code == 2 and "86400" in err


def test_finite_values_still_work(capsys, tmp_path):
    code, _, err = cli(capsys, "gate", "--facts", str(SNAPSHOT), "--min-free-memory", "1.5", "--timeout", "86400")
    assert code == 0, err
    code, out, _ = cli(capsys, "select", "--facts", str(SNAPSHOT), "--min-free-memory", "1e3")
    assert code == 1 and out == ""  # nobody has 1000 GiB free: the threshold is applied


# --- 6. messages -----------------------------------------------------------------------------


def test_a_policy_that_is_a_fifo_is_not_called_missing(capsys, tmp_path):
    fifo = tmp_path / "policy.yaml"
    os.mkfifo(fifo)
    code, _, err = cli(capsys, "gate", "--facts", str(SNAPSHOT), "--policy", str(fifo))
    assert code == 2 and one_line(err)
    assert "not a regular file" in err and "no such" not in err


def test_type_messages_name_the_kind_not_the_class(capsys, tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text("- fail_on: error\n- deep: true\n")
    code, _, err = cli(capsys, "gate", "--facts", str(SNAPSHOT), "--policy", str(policy))
    assert code == 2 and "list" in err and "_LineList" not in err and "_Line" not in err
    snap = tmp_path / "snap.json"
    snap.write_text("[1, 2]")
    code, _, err = cli(capsys, "check", "--facts", str(snap))
    assert code == 2 and "list" in err and "_" not in err.split(":")[-1]


def test_a_copy_of_the_facts_is_not_changed_by_escaping():
    from gpudoctor.escaping import printable_tree

    data = json.loads(SNAPSHOT.read_text())
    assert printable_tree(copy.deepcopy(data)) == data


def test_a_unix_socket_is_refused(capsys, tmp_path):
    import socket

    path = tmp_path / "collector.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    try:  # a listener that never reads must not hang gpudoctor; a socket is not a file
        code, _, err = cli(capsys, "topo", "--facts", str(SNAPSHOT), "-o", str(path))
    finally:
        server.close()
    assert code == 2 and one_line(err) and "it is a socket" in err
    assert stat.S_ISSOCK(os.lstat(path).st_mode)


def _as_other_user(path: Path) -> None:
    os.chown(path, 12345, 12345, follow_symlinks=False)


@pytest.mark.skipif(not ROOT, reason="needs root to make a link owned by another user")
def test_another_users_directory_link_is_not_followed(capsys, tmp_path):
    target = tmp_path / "etc"
    target.mkdir()
    (target / "passwd").write_text("root:x:0:0\n")
    shared = tmp_path / "shared"
    shared.mkdir()
    link = shared / "reports"
    link.symlink_to(target)
    _as_other_user(link)  # planted by someone else: -o shared/reports/passwd must not reach etc/passwd
    code, _, err = cli(capsys, "topo", "--facts", str(SNAPSHOT), "-o", str(link / "passwd"))
    assert code == 2 and one_line(err) and "owned by uid 12345, not followed" in err
    assert (target / "passwd").read_text() == "root:x:0:0\n" and sorted(os.listdir(target)) == ["passwd"]
    os.chown(link, 0, 0, follow_symlinks=False)  # root's own link (like /var/run -> /run) is followed
    code, _, err = cli(capsys, "topo", "--facts", str(SNAPSHOT), "-o", str(link / "topo.txt"))
    assert code == 0 and (target / "topo.txt").read_text().startswith("gpu-host")


@pytest.mark.skipif(not ROOT, reason="needs root to make a link owned by another user")
def test_another_users_link_to_a_device_is_not_followed(capsys, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "out"
    link.symlink_to(fifo)
    _as_other_user(link)
    code, _, err = cli(capsys, "topo", "--facts", str(SNAPSHOT), "-o", str(link))
    assert code == 2 and one_line(err) and "owned by uid 12345, not followed" in err


def test_a_fifo_reader_that_never_reads_cannot_hang_the_writer(tmp_path, monkeypatch):
    from gpudoctor import outputs

    monkeypatch.setattr(outputs, "WRITE_TIMEOUT_S", 0.5)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # held open, never read
    try:
        started = time.monotonic()
        with pytest.raises(OutputError, match="its reader took nothing for 0.5 s"):
            write_file(fifo, "x" * (1 << 20))  # more than a pipe holds
        assert time.monotonic() - started < 10
    finally:
        os.close(reader)


def test_bidi_marks_and_unicode_line_separators_are_escaped_too():
    # they reorder or break a line for some readers; found missing by review
    for ch in ("\u061c", "\u200e", "\u200f", "\u2028", "\u2029"):
        assert ch not in printable(f"gpu{ch}host") and ch not in terminal_safe(f"gpu{ch}host")
    assert printable("héllo ✓ 日本") == "héllo ✓ 日本"
