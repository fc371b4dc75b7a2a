"""`check` and `gate` with --previous FILE and --sample SECONDS: the counter rates as users see
them (goldens in tests/golden/rates/ for `check --facts B --previous A` on the pairs of
tests/fixtures/make_rate_snapshots.py), and the usage errors (exit status 2)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpudoctor.cli.root import run
from tests.conftest import HOSTS, SNAPSHOTS
from tests.helpers.golden import GOLDEN, check

PAIRS = SNAPSHOTS / "rates"
HEALTHY = str(HOSTS / "healthy-2gpu")
RDMA = str(HOSTS / "rdma-degraded")


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def pair(name: str) -> tuple[str, str]:
    return str(PAIRS / f"{name}-a.json"), str(PAIRS / f"{name}-b.json")


# rdma-rebooted: the only rate check is unknown (another boot), so nothing was judged: exit 3
@pytest.mark.parametrize(
    "name, status",
    [("nvlink-crc-rising", 1), ("rdma-errors-rising", 1), ("rdma-rebooted", 3), ("rdma-reset", 0)],
)
def test_check_previous_goldens(capsys, name, status):
    a, b = pair(name)
    code, out, err = cli(capsys, "check", "--facts", b, "--previous", a, "--only", "rates")
    assert code == status, out + err
    check(GOLDEN / "rates" / f"{name}.txt", out.replace(str(PAIRS), "<pairs>"))
    code, out, _ = cli(capsys, "check", "--facts", b, "--previous", a, "--only", "rates", "--format", "json")
    assert code == status
    # generated_at is when this test ran: the golden holds a placeholder
    shown = re.sub(r'"generated_at": "[^"]*"', '"generated_at": "<now>"', out.replace(str(PAIRS), "<pairs>"))
    check(GOLDEN / "rates" / f"{name}.json", shown)


def test_the_pairs_are_what_the_generator_writes():
    from tests.fixtures.make_rate_snapshots import main

    assert main(["--check"]) == 0, "run python tests/fixtures/make_rate_snapshots.py"


def test_without_previous_or_sample_the_rate_checks_do_not_apply(capsys):
    _, b = pair("nvlink-crc-rising")
    code, out, _ = cli(capsys, "check", "--facts", b, "--only", "rates", "-v")
    assert code == 0 and "nvlink-errors-rising" in out and "FAIL" not in out and "unknown " not in out


def test_the_real_h200_snapshot_against_itself_passes(capsys):
    real = str(SNAPSHOTS / "h200-x2.json")
    code, out, err = cli(capsys, "check", "--facts", real, "--previous", real)
    # the capture predates the boot id and the per-link counters: the rates are not compared, no failure
    assert code == 0, out + err
    assert "counter-rates-comparable" in out and "no rates were judged" in out


def test_gate_blocks_on_rising_counters_not_on_a_previous_of_another_boot(capsys):
    a, b = pair("rdma-errors-rising")
    code, out, _ = cli(capsys, "gate", "--facts", b, "--previous", a)
    assert code == 1 and "NO-GO  rdma-port-errors-rising" in out and "mlx5_4 port 1" in out
    a, b = pair("rdma-rebooted")
    code, out, _ = cli(capsys, "gate", "--facts", b, "--previous", a)
    assert code == 0, out


def test_sample_on_a_fixture_root_reads_twice(capsys):
    code, out, err = cli(capsys, "check", "--root", RDMA, "--sample", "0.3", "--only", "rates", "--format", "json")
    data = json.loads(out)
    ids = {f["rule"] for f in data["findings"]}
    assert {"nvlink-errors-rising", "rdma-port-errors-rising", "counter-rates-comparable"} <= ids, err
    comparable = next(f for f in data["findings"] if f["rule"] == "counter-rates-comparable")
    assert comparable["status"] == "fail" and "0.3 s apart" in comparable["message"]  # under 10 s: said so
    rising = [f for f in data["findings"] if f["rule"].endswith("-rising")]
    assert rising and all(f["status"] == "pass" for f in rising)  # recorded answers do not change


def test_gate_sample_on_a_fixture_root(capsys):
    code, out, err = cli(capsys, "gate", "--root", HEALTHY, "--sample", "0.2")
    assert code == 0, out + err


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--facts", "{b}", "--sample", "5"], "--sample reads this machine's counters twice"),
        (["--root", HEALTHY, "--sample", "5", "--previous", "{a}"], "give one of them"),
        (["--root", HEALTHY, "--sample", "30", "--timeout", "10"], "must be shorter than the run's deadline"),
        (["--root", HEALTHY, "--sample", "0"], "--sample"),
        (["--root", HEALTHY, "--sample", "61"], "--sample"),
        (["--root", HEALTHY, "--sample", "nan"], "--sample"),
    ],
)
@pytest.mark.parametrize("command", ["check", "gate"])
def test_usage_errors_exit_2(capsys, command, args, needle):
    a, b = pair("rdma-errors-rising")
    code, out, err = cli(capsys, command, *[x.format(a=a, b=b) for x in args])
    assert code == 2, out + err
    assert needle in err and "Traceback" not in err


@pytest.mark.parametrize(
    "content, needle",
    [
        (b"{not json", "invalid JSON"),
        (b'{"report_schema_version": 1, "findings": []}', "a check or gate report holds no counters"),
        (b'{"schema_version": 99}', "newer than this gpudoctor understands"),
        (b"[]", "top level is"),
    ],
)
@pytest.mark.parametrize("command", ["check", "gate"])
def test_an_unusable_previous_file_exits_2(capsys, tmp_path: Path, command, content, needle):
    _, b = pair("rdma-errors-rising")
    bad = tmp_path / "previous.json"
    bad.write_bytes(content)
    code, out, err = cli(capsys, command, "--facts", b, "--previous", str(bad))
    assert code == 2 and out == "", out
    assert "--previous" in err and needle in err and "Traceback" not in err


def test_the_python_api_takes_previous_and_sample():
    from gpudoctor import GateError, gate

    a, b = pair("rdma-errors-rising")
    report = gate(facts=b, previous=a, raise_on_no_go=False)
    assert not report.go and any(f.rule_id == "rdma-port-errors-rising" for f in report.blocking)
    assert gate(root=HEALTHY, sample=0.2, raise_on_no_go=False).go
    with pytest.raises(GateError):
        gate(facts=b, sample=1.0)
