"""`gpudoctor bench` on the CPU: the worker's timing arithmetic on a fake device, the runner's
deadline and event stream with fake worker processes, the analysis (datasheet, peers), the
merge into a snapshot and the verdicts of rules/performance.yaml."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from gpudoctor.bench import analysis, runner
from gpudoctor.children import MARKER
from gpudoctor.cli.root import run
from gpudoctor.facts import Unavailable, load_snapshot, to_jsonable
from gpudoctor.schemas import validate_facts
from gpudoctor.workers import bench as worker
from gpudoctor.workers import bench_method as method
from tests.helpers.processes import gone_within

SNAPSHOT = str(Path(__file__).resolve().parents[1] / "fixtures" / "snapshots" / "h200-x2.json")
BUSES = ("0000:00:06.0", "0000:00:07.0")
GIB = 1 << 30


# ------------------------------------------------------------------ a fake device for the worker


class Op:
    """A prepared operation whose every call takes `ms` on the fake device."""

    def __init__(self, ms: float) -> None:
        self.ms = ms
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


class FakeBackend:
    """Per-call times by test; the worker's arithmetic must turn them into the expected rates."""

    def __init__(self, ms: dict[str, float], unsupported=(), broken=(), load=None) -> None:
        self.ms = ms
        self.unsupported = set(unsupported)
        self.broken = set(broken)
        self.load = load
        self.timed: list[tuple[object, int]] = []
        self.during_calls = 0
        self.recovered = 0

    @contextmanager
    def _op(self, key: str):
        if key in self.unsupported:
            raise method.Unsupported(f"no {key} here")
        if key in self.broken:
            raise RuntimeError(f"CUDA error in {key}")
        yield Op(self.ms[key])

    def fit_matmul_n(self, gpu, n, dtype):
        return n

    def fit_copy_bytes(self, gpu, nbytes):
        return nbytes

    def matmul(self, gpu, dtype, n):
        return self._op(f"matmul_{dtype}" if n % 8 == 0 else "matmul_unaligned")

    def device_copy(self, gpu, nbytes):
        return self._op("copy")

    def host_copy(self, gpu, nbytes, direction):
        return self._op(direction)

    @contextmanager
    def peer_copy(self, src, dst, nbytes):
        yield (Op(self.ms["p2p"]), True)

    def allreduce(self, devices, nbytes):
        return self._op("allreduce")

    def time_calls(self, gpu, fn, count, during=None):
        for _ in range(count):
            fn()
        if during:
            self.during_calls += 1
            during()
        self.timed.append((fn, count))
        return fn.ms * count

    def sample_load(self, gpu):
        return dict(self.load) if self.load else None

    def recover(self, gpu):
        self.recovered += 1


H200_MS = {
    # per-call milliseconds chosen so the rates come out like a 2xH200 host's
    "matmul_fp32": 2 * 8192**3 / 51.3e12 * 1e3,
    "matmul_tf32": 2 * 8192**3 / 378e12 * 1e3,
    "matmul_fp16": 2 * 8192**3 / 770e12 * 1e3,
    "matmul_bf16": 2 * 8192**3 / 784e12 * 1e3,
    "matmul_fp8": 2 * 8192**3 / 1290e12 * 1e3,
    "matmul_unaligned": 2 * 8191**3 / 500e12 * 1e3,
    "copy": 2 * 2 * GIB / 4210e9 * 1e3,
    "h2d": GIB / 55.1e9 * 1e3,
    "d2h": GIB / 55.3e9 * 1e3,
    "p2p": GIB / 368e9 * 1e3,
    "allreduce": 256 * (1 << 20) / 355e9 * 1e3,
}


def collect(backend, devices, mode="quick"):
    events = []
    method.run(backend, devices, mode, events.append)
    return events


def results_of(events):
    return {(e["gpu"], e["test"]): e for e in events if e["event"] == "result"}


# ------------------------------------------------------------------ worker arithmetic


def test_rate_arithmetic():
    assert method.matmul_flops(8192, 8192, 8192) == 2 * 8192**3
    assert method.tflops(2 * 8192**3, 1.4) == pytest.approx(785.4, abs=0.1)
    assert method.gbps(2 * 2 * GIB, 1.0) == pytest.approx(4294.97, abs=0.01)
    assert method.median([3.0, 1.0, 2.0]) == 2.0
    assert method.median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert method.spread_pct([9.0, 10.0, 11.0]) == pytest.approx(20.0)


def test_measure_warms_up_sizes_the_batch_and_takes_the_median():
    backend = FakeBackend({})
    op = Op(2.0)
    now = [0.0]

    def clock():
        now[0] += 0.1  # every look at the clock: 100 ms later
        return now[0]

    settings = method.Settings(warmup_s=0.5, repeats=5, batch_ms=25.0)
    timing = method.measure(backend, 0, op, settings, clock=clock)
    assert timing["inner"] == math.ceil(25.0 / 2.0)  # batches of at least batch_ms
    assert timing["ms"] == pytest.approx(2.0)
    assert timing["repeats"] == 5 and timing["spread_pct"] == 0.0
    warmups = [count for fn, count in backend.timed[:-5] if count == 1]
    assert len(warmups) >= 3, "warm-up calls happen before anything is timed"
    assert all(count == 13 for _, count in backend.timed[-5:])


def test_measure_reports_the_median_of_uneven_batches():
    class Uneven(FakeBackend):
        def __init__(self):
            super().__init__({})
            self.batch_ms = iter([1.0, 1.0, 30.0, 10.0, 20.0, 30.0, 10.0, 25.0])  # warm-up, probe, 5 repeats

        def time_calls(self, gpu, fn, count, during=None):
            return next(self.batch_ms) * (count if count > 1 else 1)

    timing = method.measure(Uneven(), 0, Op(1.0), method.Settings(warmup_s=0.0, repeats=5, batch_ms=25.0))
    assert timing["ms"] == pytest.approx(20.0)  # median of 10, 20, 30, 10, 25 per call
    assert timing["spread_pct"] == pytest.approx((30 - 10) / 20 * 100)


def test_worker_run_turns_device_times_into_rates_per_gpu_and_between_gpus():
    load = {"clocks_event_reasons": 4, "sm_clock_mhz": 1755, "sm_clock_max_mhz": 1980, "temperature_c": 61}
    backend = FakeBackend(H200_MS, load=load)
    events = collect(backend, [0, 1])
    kinds = [e["event"] for e in events]
    assert kinds[0] == "plan" and kinds[-1] == "done"
    plan = events[0]
    steps = [e for e in events if e["event"] == "step"]
    assert steps[-1]["done"] == steps[-1]["total"] == plan["steps"] == 2 * 8 + 2 + 1
    res = results_of(events)
    assert res[(0, "matmul_bf16")]["value"] == pytest.approx(784.0)
    assert res[(0, "matmul_bf16")]["unit"] == "TFLOP/s" and res[(0, "matmul_bf16")]["n"] == 8192
    assert res[(1, "matmul_fp32")]["value"] == pytest.approx(51.3)
    assert res[(0, "copy")]["value"] == pytest.approx(4210.0), "a copy counts read and write bytes"
    assert res[(0, "h2d")]["value"] == pytest.approx(55.1)
    assert res[(None, "p2p_0_1")]["value"] == pytest.approx(368.0)
    assert res[(None, "p2p_1_0")]["peer_access"] is True
    ar = res[(None, "allreduce")]
    assert ar["algbw_gbs"] == pytest.approx(355.0) and ar["value"] == pytest.approx(355.0 * 2 * 1 / 2)
    assert (0, "matmul_bf16_unaligned") not in res, "only --full measures the unaligned shape"
    loads = [e for e in events if e["event"] == "load"]
    assert [e["gpu"] for e in loads] == [0, 1] and loads[0]["samples"] == 5  # one per matmul
    assert backend.during_calls == 10


def test_worker_full_mode_measures_the_unaligned_shape_and_all_pairs():
    events = collect(FakeBackend(H200_MS), [0, 1, 2], mode="full")
    res = results_of(events)
    assert res[(2, "matmul_bf16_unaligned")]["n"] == 8191
    assert res[(2, "matmul_bf16_unaligned")]["value"] == pytest.approx(500.0)
    assert {k[1] for k in res if k[1].startswith("p2p_")} == {
        f"p2p_{a}_{b}" for a in range(3) for b in range(3) if a != b
    }
    # --full reduces 1 GiB (4x the quick size) in the time the fake gives 256 MiB: 4x the bandwidth
    assert res[(None, "allreduce")]["value"] == pytest.approx(4 * 355.0 * 2 * 2 / 3)


def test_worker_reports_unsupported_and_broken_tests_and_carries_on():
    backend = FakeBackend(H200_MS, unsupported={"matmul_fp8"}, broken={"copy"})
    res = results_of(collect(backend, [0]))
    assert res[(0, "matmul_fp8")]["unsupported"] == "no matmul_fp8 here"
    assert res[(0, "copy")]["error"].startswith("RuntimeError: CUDA error in copy")
    assert res[(0, "h2d")]["value"] == pytest.approx(55.1), "the tests after a failure still run"
    assert backend.recovered == 1
    assert not any(k[1].startswith("p2p") for k in res), "one GPU: no peer copies, no all-reduce"


def test_merge_load_keeps_the_worst_reading():
    acc: dict = {}
    method.merge_load(
        acc, {"clocks_event_reasons": 0x4, "sm_clock_mhz": 1900, "temperature_c": 60, "power_draw_w": 650}
    )
    method.merge_load(
        acc, {"clocks_event_reasons": 0x40, "sm_clock_mhz": 1300, "temperature_c": 88, "power_draw_w": 600}
    )
    assert acc == {
        "clocks_event_reasons": 0x44,
        "sm_clock_mhz": 1300,
        "temperature_c": 88,
        "power_draw_w": 650,
        "samples": 2,
    }


# ------------------------------------------------------------------ fake worker processes


def fake_worker(
    tmp_path: Path, events: list[dict], exit_code: int = 0, sleep_after: float = 0.0, noise=True
) -> list[str]:
    """argv of a worker stand-in that prints these events, then sleeps, then exits."""
    data = tmp_path / "events.json"
    data.write_text(json.dumps(events), encoding="utf-8")
    pid_file = tmp_path / "worker.pid"
    script = tmp_path / "fake_worker.py"
    script.write_text(
        "import json, os, sys, time\n"
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        + ("print('a library writes to stdout', flush=True)\n" if noise else "")
        + f"for e in json.load(open({str(data)!r})):\n"
        f"    sys.stdout.write({MARKER!r} + ' ' + json.dumps(e) + '\\n'); sys.stdout.flush()\n"
        "sys.stderr.write('some warning\\n')\n"
        f"time.sleep({sleep_after})\n"
        f"sys.exit({exit_code})\n",
        encoding="utf-8",
    )
    return [sys.executable, str(script)]


def start_event(buses=BUSES, names=("NVIDIA H200", "NVIDIA H200")):
    return {
        "event": "start",
        "devices": [
            {"index": i, "name": n, "bus_id": b, "compute_capability": "9.0", "memory_total_bytes": 150754820096}
            for i, (b, n) in enumerate(zip(buses, names))
        ],
        "torch_version": "2.11.0+cu130",
        "cuda_version": "13.0",
        "hip_version": None,
        "python": "/opt/torch/.venv/bin/python",
        "float32_matmul_precision_default": "highest",
        "tf32_matmul_default": False,
        "cuda_visible_devices": None,
        "cuda_device_order": "PCI_BUS_ID",
    }


def healthy_events(slow_gpu: int | None = None, buses=BUSES) -> list[dict]:
    events = [start_event(buses)]
    worker_events = collect(FakeBackend(H200_MS, load={"clocks_event_reasons": 4, "sm_clock_mhz": 1755}), [0, 1])
    for e in worker_events:
        if slow_gpu is not None and e.get("gpu") == slow_gpu and e.get("test") == "matmul_bf16":
            e["value"] = 560.0
        if slow_gpu is not None and e.get("event") == "load" and e.get("gpu") == slow_gpu:
            e.update({"clocks_event_reasons": 0x48, "sm_clock_mhz": 1200, "temperature_c": 90})
    return events + worker_events


def test_runner_streams_events_and_progress(tmp_path):
    seen = []
    result = runner.run_worker(
        fake_worker(tmp_path, healthy_events()), 30, progress=lambda d, t, label: seen.append((d, t, label))
    )
    assert result.status == "ok" and result.done and result.exit_code == 0
    assert result.start["torch_version"] == "2.11.0+cu130"
    assert len(result.results) == 19 and result.planned == 19
    assert seen[0][:2] == (0, 19) and seen[-1] == (19, 19, "done")
    assert result.loads[0]["clocks_event_reasons"] == 4
    assert "a library writes to stdout" in result.stderr_tail or "some warning" in result.stderr_tail


def test_runner_deadline_kills_the_worker_and_keeps_what_it_measured(tmp_path):
    events = healthy_events()[:6]  # start, plan, two steps and results, then it hangs
    argv = fake_worker(tmp_path, events, sleep_after=60)
    t0 = time.monotonic()
    result = runner.run_worker(argv, timeout=2.0)
    assert time.monotonic() - t0 < 6
    assert result.status == "timeout" and "did not finish within 2 s" in result.error
    assert [r["test"] for r in result.results] == ["matmul_fp32", "matmul_tf32"]
    pid = int((tmp_path / "worker.pid").read_text())
    assert gone_within(pid, 2.5), "the worker outlived its deadline"


def test_runner_reports_a_worker_that_dies_early(tmp_path):
    result = runner.run_worker(fake_worker(tmp_path, healthy_events()[:4], exit_code=3), 30)
    assert result.status == "error" and "stopped early (exit status 3)" in result.error


def test_runner_without_torch_in_the_target_python():
    # `python -S` cannot import site-packages: exactly what an interpreter without torch looks like
    argv = [sys.executable, "-S", runner.worker_path(), json.dumps({"mode": "quick"})]
    result = runner.run_worker(argv, 30)
    assert result.status == "no_torch", (result.status, result.error, result.stderr_tail)


def test_runner_cannot_start_the_program():
    result = runner.run_worker(["/nonexistent/python"], 5)
    assert result.status == "error" and "cannot start" in result.error


# ------------------------------------------------------------------ analysis into facts


def bench_run(events) -> runner.BenchRun:
    result = runner.BenchRun()
    for e in events:
        runner.handle_event(result, e, None)
    result.duration_s = 17.4
    return result


def test_analysis_puts_each_figure_beside_the_datasheet_and_the_peers():
    facts = load_snapshot(SNAPSHOT)
    section = analysis.build_section(bench_run(healthy_events(slow_gpu=1)), facts)
    g0, g1 = section["gpus"]
    assert (g0["bus_id"], g0["spec_id"], g0["nvml_index"]) == (BUSES[0], "h200-sxm-141gb", 0)
    bf16 = g0["matmul_bf16"]
    assert bf16["spec"] == pytest.approx(989.5)
    assert bf16["efficiency_pct"] == pytest.approx(784 / 989.5 * 100, abs=0.1)
    assert bf16["peer_median"] == pytest.approx(560.0) and bf16["vs_peers_pct"] == pytest.approx(140.0)
    assert g1["matmul_bf16"]["vs_peers_pct"] == pytest.approx(560 / 784 * 100, abs=0.1)
    assert g0["copy"]["spec"] == 4800 and g0["h2d"]["spec"] == pytest.approx(63.0)
    assert g0["bf16_speedup_vs_fp32"] == pytest.approx(784 / 51.3, abs=0.01)
    assert g0["tf32_speedup_vs_fp32"] == pytest.approx(378 / 51.3, abs=0.01)
    unaligned = g0["matmul_bf16_unaligned"]
    assert isinstance(unaligned, Unavailable) and unaligned.reason == "not_supported"
    assert g1["under_load"]["clocks_event_reasons"] == 0x48
    links = section["p2p"]
    assert [(link["src"], link["dst"]) for link in links] == [(0, 1), (1, 0)]
    assert links[0]["bandwidth"]["spec"] == 450.0  # NVLink 4, 900 GB/s both ways
    assert section["allreduce"]["value"] == pytest.approx(355.0)
    assert section["float32_matmul_precision_default"] == "highest"
    merged = dict(facts)
    merged["bench"] = section
    assert validate_facts(to_jsonable(merged)) is None


def test_analysis_without_peers_or_datasheet_says_why():
    facts = load_snapshot(SNAPSHOT)
    events = [e for e in healthy_events() if e.get("gpu") in (0, None) or e["event"] != "result"]
    start = events[0]
    start["devices"] = [dict(start["devices"][0], name="NVIDIA Future GPU", bus_id="0000:00:09.0")]
    events = [e for e in events if not str(e.get("test", "")).startswith(("p2p", "allreduce"))]
    section = analysis.build_section(bench_run(events), facts)
    (g0,) = section["gpus"]
    assert isinstance(g0["spec_id"], Unavailable)
    assert g0["matmul_bf16"]["spec"].reason == "not_found"
    assert g0["matmul_bf16"]["peer_median"].reason == "not_supported"
    assert section["allreduce"].reason == "not_supported"


def test_analysis_of_a_run_cut_off_by_its_deadline():
    events = healthy_events()[:6]
    result = bench_run(events)
    result.status, result.error = "timeout", "the bench did not finish within 120 s and was stopped"
    section = analysis.build_section(result, load_snapshot(SNAPSHOT))
    g0 = section["gpus"][0]
    assert g0["matmul_fp32"]["value"] == pytest.approx(51.3)
    assert g0["matmul_bf16"].reason == "timeout" and "120 s" in g0["matmul_bf16"].detail
    assert section["status"] == "timeout"


# ------------------------------------------------------------------ the command


@pytest.fixture
def fake_bench(monkeypatch, tmp_path):
    """Make `gpudoctor bench` run a fake worker printing these events."""

    def install(events, **kw):
        argv = fake_worker(tmp_path, events, **kw)
        monkeypatch.setattr(runner, "worker_argv", lambda python, config: argv)

    return install


def test_bench_writes_a_snapshot_that_check_judges(fake_bench, tmp_path, capsys):
    fake_bench(healthy_events())
    out = tmp_path / "host+bench.json"
    assert run(["bench", "--facts", SNAPSHOT, "-o", str(out), "--no-color"]) == 0
    text = capsys.readouterr().out
    assert "GPU 0 (0000:00:06.0) NVIDIA H200 → h200-sxm-141gb" in text
    bf16 = next(line for line in text.splitlines() if line.startswith("  bf16 matmul "))
    # measured (with its unit), datasheet, efficiency, the other GPU, vs it, spread
    assert bf16.split()[3:] == ["784", "TFLOP/s", "990", "79", "%", "784", "100", "%", "0", "%"]
    assert "TF32 in this torch's defaults: off" in text
    snap = load_snapshot(out)
    original = load_snapshot(SNAPSHOT)
    assert snap["nvml"] == original["nvml"] and snap["host"] == original["host"], "the merge keeps the snapshot"
    assert snap["bench"]["gpus"][1]["matmul_bf16"]["vs_peers_pct"] == pytest.approx(100.0)
    assert run(["check", "--facts", str(out), "--only", "bench", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    statuses = {(f["rule"], f["subject"]["bus_id"]): f["status"] for f in report["findings"]}
    assert statuses[("bench-gpu-slower-than-peers", BUSES[1])] == "pass"
    assert statuses[("bench-tf32-off-by-default", BUSES[0])] == "fail"  # info: TF32 off, 7x on the table


def test_bench_finds_the_slow_gpu_and_says_why(fake_bench, tmp_path, capsys):
    fake_bench(healthy_events(slow_gpu=1))
    assert run(["bench", "--facts", SNAPSHOT, "--no-color"]) == 1
    text = capsys.readouterr().out
    lines = [x for x in text.splitlines() if "bench-gpu-slower-than-peers" in x]
    assert [x.split()[0] for x in lines] == ["pass", "warn"]
    assert "GPU 1 (0000:00:07.0)" in lines[1]
    assert "HwSlowdown, HwThermalSlowdown" in text
    assert "71% of their median 784" in text


def test_bench_json_output(fake_bench, capsys):
    fake_bench(healthy_events())
    assert run(["bench", "--facts", SNAPSHOT, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["bench"]["gpus"][0]["matmul_fp16"]["value"] == pytest.approx(770.0)
    assert {f["rule"] for f in doc["findings"]} >= {"bench-gpu-slower-than-peers", "bench-gpu-below-datasheet"}


def test_bench_refuses_to_merge_into_another_machines_snapshot(fake_bench, tmp_path, capsys):
    fake_bench(healthy_events(buses=("0000:3b:00.0", "0000:86:00.0")))
    out = tmp_path / "x.json"
    assert run(["bench", "--facts", SNAPSHOT, "-o", str(out)]) == 2
    assert "is not a snapshot of this machine" in capsys.readouterr().err
    assert not out.exists()


def test_bench_without_torch_says_how_to_get_it(monkeypatch, capsys):
    monkeypatch.setattr(
        runner, "worker_argv", lambda python, config: [sys.executable, "-S", runner.worker_path(), json.dumps(config)]
    )
    assert run(["bench", "--facts", SNAPSHOT]) == 2
    err = capsys.readouterr().err
    assert "needs torch" in err and "pip install torch" in err and "gpudoctor fix --torch" in err
    assert "Traceback" not in err


def test_bench_that_times_out_before_any_result(fake_bench, capsys):
    fake_bench(healthy_events()[:2], sleep_after=30)
    assert run(["bench", "--facts", SNAPSHOT, "--bench-timeout", "1.5"]) == 2
    assert "raise --bench-timeout" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, words",
    [
        (["--gpus", "zero"], "--gpus zero"),
        (["--root", "/"], "bench measures this machine"),
        (["--python", "/nonexistent/python"], "not an executable file"),
    ],
)
def test_bench_bad_options(args, words, capsys):
    assert run(["bench", *args]) == 2
    assert words in capsys.readouterr().err


def test_gpus_option_parsing():
    from gpudoctor.cli.commands.bench import _parse_gpus

    assert _parse_gpus(None) is None and _parse_gpus("all") is None
    assert _parse_gpus("0,1") == [0, 1]
    assert _parse_gpus("0-3,1") == [0, 1, 2, 3]


def test_bench_end_to_end_with_torch_on_the_cpu(tmp_path, capsys):
    """The real worker with a real torch, on the CPU (tiny sizes): catches mistakes in the torch code
    paths that the fake backend cannot. Skipped where this interpreter has no torch."""
    pytest.importorskip("torch")
    out = tmp_path / "cpu.json"
    status = run(["bench", "--device", "cpu", "--facts", SNAPSHOT, "-o", str(out), "--no-progress", "--format", "json"])
    assert status in (0, 1)
    doc = json.loads(capsys.readouterr().out)
    g0 = doc["bench"]["gpus"][0]
    for test in ("matmul_fp32", "matmul_fp16", "matmul_bf16", "copy"):
        assert g0[test]["value"] > 0, (test, g0[test])
    assert g0["matmul_tf32"]["unavailable"] == "not_supported"
    assert g0["h2d"]["unavailable"] == "not_supported"
    assert load_snapshot(out)["bench"]["status"] == "ok"


def test_progress_bar_draws_only_on_a_terminal():
    import io

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    tty, pipe = Terminal(), io.StringIO()
    for stream in (tty, pipe):
        bar = runner.ProgressBar(stream, width=10)
        bar(0, 4, "GPU 0: fp32 matmul")
        bar(2, 4, "GPU 0: fp16 matmul")
        bar.close()
    assert pipe.getvalue() == ""
    drawn = tty.getvalue()
    assert "[.........." in drawn and "[#####.....] 2/4" in drawn and "GPU 0: fp16 matmul" in drawn
    assert drawn.endswith("\r"), "the bar is wiped before the report is printed"


def test_bench_cut_short_reports_and_writes_what_it_measured(fake_bench, tmp_path, capsys):
    fake_bench(healthy_events()[:12], exit_code=3)
    out = tmp_path / "partial.json"
    assert run(["bench", "--facts", SNAPSHOT, "-o", str(out), "--no-color"]) == 2
    captured = capsys.readouterr()
    assert "incomplete" in captured.err and "stopped early (exit status 3)" in captured.err
    assert "784 TFLOP/s" in captured.out
    snap = load_snapshot(out)
    assert snap["bench"]["status"] == "error"
    assert snap["bench"]["gpus"][0]["matmul_bf16"]["value"] == pytest.approx(784.0)
    assert snap["bench"]["gpus"][1]["matmul_bf16"].reason == "error"


def test_worker_loads_gpudoctors_nvml_binding_from_a_file(tmp_path):
    module = tmp_path / "fake_nvml.py"
    module.write_text("ANSWER = 42\n", encoding="utf-8")
    loaded = worker._load_module_file("fake_nvml_for_test", str(module))
    assert loaded.ANSWER == 42
    with pytest.raises(ImportError):
        worker._load_module_file("nothing_here", None)
    config = json.loads(runner.worker_argv("/usr/bin/python3", {"mode": "quick"})[-1])
    binding = runner.pynvml_file()
    assert config.get("pynvml_file") == binding and (binding is None or binding.endswith("pynvml.py"))


def test_the_worker_script_runs_alone_where_its_directory_is_not_on_the_path(tmp_path):
    # A worker runs in the target interpreter, maybe with -I or PYTHONSAFEPATH: bench.py loads
    # bench_method.py beside it by path, never by import (and never imports gpudoctor).
    import shutil

    for name in ("bench.py", "bench_method.py"):
        shutil.copy(Path(runner.worker_path()).with_name(name), tmp_path / name)
    config = {"mode": "cpu-smoke", "device_type": "cpu"}
    argv = [sys.executable, "-I", "-u", str(tmp_path / "bench.py"), json.dumps(config)]
    result = runner.run_worker(argv, 120, env=dict(os.environ, PYTHONSAFEPATH="1"))
    assert result.status in ("no_torch", "ok"), (result.status, result.error, result.stderr_tail)
    if result.status == "ok":  # torch is there: the CPU smoke run measured something
        assert result.done and result.results
    else:
        assert "torch" in result.error and result.start.get("python") is None


# ------------------------------------------------------------------ torch that sees no GPU


def fake_torch(tmp_path: Path, cuda: str | None, hip: str | None = None, count: int = 0) -> Path:
    """A `torch` package that imports, has this build, and sees no device (what a CPU-only wheel,
    or a CUDA wheel without a driver, looks like to the worker)."""
    package = tmp_path / "faketorch" / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "import sys, types\n"
        # numpy's warning on stderr at import, the line the bench once showed as the reason
        "sys.stderr.write('  cpu = _conversion_method_template(device=torch.device(\"cpu\"))\\n')\n"
        f"__version__ = {('2.5.1+cpu' if cuda is None and hip is None else '2.5.1+cu124')!r}\n"
        f"version = types.SimpleNamespace(cuda={cuda!r}, hip={hip!r})\n"
        "def get_float32_matmul_precision():\n    return 'highest'\n"
        "backends = types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=types.SimpleNamespace(allow_tf32=False)))\n"
        "class cuda:\n"
        "    @staticmethod\n    def is_available():\n        return False\n"
        f"    @staticmethod\n    def device_count():\n        return {count}\n",
        encoding="utf-8",
    )
    return package.parent


def bench_error_with(monkeypatch, tmp_path, capsys, cuda, visible=None, hip=None) -> str:
    path = fake_torch(tmp_path, cuda, hip)
    monkeypatch.setenv("PYTHONPATH", str(path))
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setattr(
        runner, "worker_argv", lambda python, config: [sys.executable, "-u", runner.worker_path(), json.dumps(config)]
    )
    assert run(["bench", "--facts", SNAPSHOT, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def test_bench_with_a_cpu_only_torch_names_the_build_and_the_fix(monkeypatch, tmp_path, capsys):
    err = bench_error_with(monkeypatch, tmp_path, capsys, cuda=None)
    assert f"torch 2.5.1+cpu in {sys.executable} is a CPU-only build, 0 device(s)" in err
    assert "gpudoctor fix --torch" in err
    assert "some warning" not in err and "_conversion" not in err, "no stray stderr line as the reason"


def test_bench_with_every_gpu_hidden_by_cuda_visible_devices(monkeypatch, tmp_path, capsys):
    err = bench_error_with(monkeypatch, tmp_path, capsys, cuda="12.4", visible="")
    assert "is a CUDA 12.4 build, 0 device(s), CUDA_VISIBLE_DEVICES=''" in err
    assert "CUDA_VISIBLE_DEVICES hides every GPU: unset it" in err and "fix --torch" not in err


@pytest.mark.parametrize("cuda, hip, build", [("12.4", None, "CUDA 12.4"), (None, "6.2.4", "ROCm 6.2.4")])
def test_bench_with_a_gpu_build_that_finds_no_device_points_at_the_driver(
    monkeypatch, tmp_path, capsys, cuda, hip, build
):
    err = bench_error_with(monkeypatch, tmp_path, capsys, cuda=cuda, hip=hip)
    assert f"is a {build} build, 0 device(s);" in err and "CUDA_VISIBLE_DEVICES" not in err
    assert "check the driver" in err and "nvidia-smi or rocm-smi" in err
