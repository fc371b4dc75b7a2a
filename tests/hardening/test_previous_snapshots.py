"""--previous FILE is as hostile as --facts: a file that is no snapshot (corrupt, huge, a FIFO, a
report) is refused in one line with exit status 2 before anything is probed; a snapshot that
cannot be compared (another boot, counters that went down, garbage counts) gives unavailable
rates or resets, never a traceback and never exit 2."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from gpudoctor.cli.root import run
from tests.conftest import HOSTS, SNAPSHOTS

A = SNAPSHOTS / "rates" / "rdma-errors-rising-a.json"
B = SNAPSHOTS / "rates" / "rdma-errors-rising-b.json"
PREVIOUS: dict[str, Any] = json.loads(A.read_text(encoding="utf-8"))


def check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = run(["check", *args])
    out, err = capsys.readouterr()
    return code, out, err


def refused(code: int, out: str, err: str, path: Path, needle: str) -> None:
    assert code == 2 and out == "", out
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpudoctor: error: --previous: "), err
    assert str(path) in lines[0] and needle in lines[0], err


def test_huge_previous_is_refused_unread(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    huge = tmp_path / "huge.json"
    with huge.open("wb") as f:
        f.truncate((16 << 20) + 1)  # one byte over the snapshot bound, sparse
    refused(*check(capsys, "--facts", str(B), "--previous", str(huge)), huge, "larger than")


def test_a_fifo_as_previous_does_not_hang(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fifo = tmp_path / "previous.fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    code, out, err = check(capsys, "--facts", str(B), "--previous", str(fifo))
    assert time.monotonic() - started < 5
    refused(code, out, err, fifo, "")


def test_a_truncated_previous_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cut = tmp_path / "cut.json"
    cut.write_text(A.read_text(encoding="utf-8")[:5000])
    refused(*check(capsys, "--facts", str(B), "--previous", str(cut)), cut, "invalid JSON")


def test_a_bad_previous_stops_a_live_run_before_it_probes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    seen: list[str] = []
    import gpudoctor.cli.load as load

    original = load.start_collect

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append("probed")
        return original(*args, **kwargs)

    load.start_collect = spy  # type: ignore[assignment]
    try:
        code, out, err = check(capsys, "--root", str(HOSTS / "healthy-2gpu"), "--previous", str(bad))
    finally:
        load.start_collect = original  # type: ignore[assignment]
    assert code == 2 and not seen, err


def _mutated(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    data = json.loads(json.dumps(PREVIOUS))
    change(data)
    return data


def _port(data: dict[str, Any]) -> dict[str, Any]:
    return data["rdma"]["devices"][4]["ports"][0]


def _gpu(data: dict[str, Any]) -> dict[str, Any]:
    return data["nvml"]["gpus"][1]


MUTATIONS: dict[str, Callable[[dict[str, Any]], None]] = {
    "another boot": lambda d: d["host"].__setitem__("boot_id", "00000000-0000-4000-8000-000000000000"),
    "no boot id, no uptime": lambda d: [d["host"].pop("boot_id"), d["host"].pop("uptime_s")],
    "boot id unavailable": lambda d: d["host"].__setitem__("boot_id", {"unavailable": "no_permission", "detail": "x"}),
    "from the future": lambda d: d["host"].__setitem__("uptime_s", 10.0**9),
    "counters went down": lambda d: _port(d)["counters"].__setitem__("symbol_error", 10**15),
    "huge counters": lambda d: _gpu(d)["nvlink_link_errors"][0].__setitem__("crc_flit", 10**18),
    "counters unavailable": lambda d: _port(d).__setitem__(
        "counters", {"symbol_error": {"unavailable": "not_found", "detail": "gone"}}
    ),
    "no per-link counters": lambda d: [g.pop("nvlink_link_errors") for g in d["nvml"]["gpus"]],
    "per-link counters unavailable": lambda d: _gpu(d).__setitem__(
        "nvlink_link_errors", {"unavailable": "timeout", "detail": "NVML hung"}
    ),
    "no GPUs": lambda d: d["nvml"].__setitem__("gpus", []),
    "no rdma section": lambda d: d.pop("rdma"),
    "a thousand duplicate links": lambda d: _gpu(d).__setitem__(
        "nvlink_link_errors", [{"link": 0, "replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}] * 64
    ),
    "collected_at garbage": lambda d: d["meta"].__setitem__("collected_at", "\x1b[31m" + "9" * 60),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_previous_that_cannot_be_compared_is_judged_not_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    path = tmp_path / "previous.json"
    path.write_text(json.dumps(_mutated(MUTATIONS[name])))
    code, out, err = check(capsys, "--facts", str(B), "--previous", str(path), "--format", "json")
    assert code in (0, 1), err
    assert "Traceback" not in err
    report = json.loads(out)
    assert not [f for f in report["findings"] if f["status"] == "error"], "a rule broke"


def test_a_hung_second_nvml_read_is_unavailable_within_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """--sample with an NVML child that never answers the second read: the run ends by its NVML
    deadline, the NVLink rates are unavailable (timeout), the RDMA ones computed."""
    from gpudoctor.context import make_context
    from gpudoctor.probes import collect_all
    from gpudoctor.probes.nvml import resample

    def hang(*_args: Any, **_kwargs: Any) -> None:
        threading.Event().wait(3600)

    monkeypatch.setattr(resample, "read_again", hang)
    ctx = make_context(root=str(HOSTS / "rdma-degraded"), timeout=8.0, nvml_timeout=1.0, sample_s=0.5)
    started = time.monotonic()
    facts = collect_all(ctx)
    assert time.monotonic() - started < 4.0
    rates = facts["counter_rates"]
    assert rates["source"] == "sample"
    assert getattr(rates["nvlink"], "reason", None) == "timeout"
    assert isinstance(rates["rdma"], list) and rates["rdma"]
