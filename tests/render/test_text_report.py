"""The check text report as a tired reader uses it: problems first, passes one line per area,
identical findings said once, commands never wrapped, a verdict that does not call nothing OK."""

from __future__ import annotations

import re

import pytest

from gpudoctor.cli.root import run
from gpudoctor.engine.loader import load_rules
from gpudoctor.engine.runner import run_rules
from gpudoctor.findings import HOST, Finding, Report, Severity, Status, Subject
from gpudoctor.render import layout, text
from tests.conftest import HOSTS, probed

RULESET = load_rules(include_plugins=False)
WIDTHS = (60, 80, 120)


def _report(scenario: str) -> tuple[Report, dict]:
    facts = probed(scenario)
    return Report(findings=run_rules(RULESET, facts), facts_origin=f"fixture {scenario}"), facts


def _gpu(i: int) -> Subject:
    return Subject("gpu", f"GPU {i} (0000:{i:02x}:00.0)", index=i)


def _finding(subject: Subject, fix: str = "", status: Status = Status.FAIL, **kw) -> Finding:
    return Finding(
        rule_id=kw.pop("rule_id", "persistence-mode-off"),
        title="Persistence mode is off",
        area="health",
        severity=kw.pop("severity", Severity.WARNING),
        status=status,
        subject=subject,
        message=kw.pop("message", f"{subject.label}: persistence mode off"),
        evidence=kw.pop("evidence", [(f"nvml.gpus[{subject.index}].persistence_mode", False)]),
        fix=fix,
        **kw,
    )


def _filled(fix: str) -> str:
    """A rule's fix with its {templates} filled as the engine would (a value without spaces)."""
    while re.search(r"\{[^{}]*\}", fix):
        fix = re.sub(r"\{[^{}]*\}", "7", fix)
    return fix


def _message(rule) -> str:
    return str(getattr(rule.message, "source", rule.message) or "")


@pytest.mark.parametrize("width", WIDTHS)
def test_every_builtin_command_stays_on_one_line_and_the_prose_around_it_wraps(width):
    # every rule's message and fix, templates filled, as check prints them
    findings = [
        _finding(HOST, fix=_filled(rule.fix.source if rule.fix else ""), rule_id=rule.id,
                 message=_filled(_message(rule)), evidence=[])
        for rule in RULESET.rules
    ]
    out = text.render(Report(findings=findings), {}, width=width).splitlines()
    commands = {
        command.rstrip(".,;:)").lstrip("(")
        for f in findings
        for command in layout.commands(f.fix) + layout.commands(f.message)
    }
    for command in commands:
        assert any(command in line for line in out), f"{command!r} broken at {width}"
    assert len(commands) > 130  # the rules' texts are full of commands: a parser that finds none is broken
    for line in out:  # a line runs long only when it is a command or one piece that cannot break
        body = line.strip()
        body = body[len("fix:") :].lstrip() if body.startswith("fix:") else body
        assert len(line) <= width or body.rstrip(".,;:)").lstrip("(") in commands or len(body.split()) == 1, line


@pytest.mark.parametrize("scenario", ["no-driver", "healthy-2gpu", "h200-x2-real", "nvlink-down-8gpu"])
@pytest.mark.parametrize("width", WIDTHS)
def test_no_line_breaks_a_token_or_runs_long_without_need(scenario, width):
    if not (HOSTS / scenario).is_dir():
        pytest.skip("no such fixture host")
    report, facts = _report(scenario)
    wide = text.render(report, facts, width=10_000, verbose=True)
    out = text.render(report, facts, width=width, verbose=True)
    # the same words in the same order: wrapping only moved line breaks, never split a word
    assert out.split() == wide.split()
    for line in out.splitlines():
        if len(line) > width:
            # only a line holding one piece that cannot be broken may run long
            body = line.strip()
            body = body[len("fix:") :].lstrip() if body.startswith("fix:") else body
            assert layout.is_command(body) or len(layout.units(body)) <= 2, line


def test_problems_come_first_and_passes_fold_to_one_line_per_area():
    report, facts = _report("nvlink-down-8gpu")
    out = text.render(report, facts)
    assert out.index("Failed") < out.index("Passed")
    assert "  pass    PCIe: 5 checks passed on 8 GPUs and 16 ports\n" in out
    assert "  pass    Environment: 7 checks passed on the host\n" in out
    # the same failure on eight GPUs is one finding naming them, its fix said once
    assert out.count("FAIL    nvlink-links-below-spec") == 1
    assert "nvlink-links-below-spec · GPU 0-7\n" in out
    assert out.count("Look at the links") == 1
    assert "(these commands are for GPU 0 (0000:18:00.0); for the others, change -i to their index)" in " ".join(
        out.split()
    )


def test_verbose_lists_every_subject_and_quiet_only_problems():
    report, facts = _report("nvlink-down-8gpu")
    verbose = text.render(report, facts, verbose=True)
    assert verbose.count("FAIL    nvlink-links-below-spec") == 8
    assert "pass    pcie-width-degraded · GPU 3 (0000:3b:00.0)" in verbose
    quiet = text.render(report, facts, quiet=True)
    assert "Passed" not in quiet and "pass " not in quiet and "gpudoctor 0.1" not in quiet
    assert "FAIL    nvlink-links-below-spec · GPU 0-7" in quiet and "Verdict: FAIL" in quiet


def test_findings_that_differ_are_not_merged():
    findings = [
        _finding(_gpu(0)),
        _finding(_gpu(1)),
        _finding(_gpu(3)),
        _finding(_gpu(2), evidence=[("nvml.gpus[2].persistence_mode", "unknown value")]),
        _finding(_gpu(4), severity=Severity.INFO),
    ]
    out = text.render(Report(findings=findings), {})
    assert "persistence-mode-off · GPUs 0, 1, 3\n" in out
    assert "persistence-mode-off · GPU 2 (0000:02:00.0)\n" in out
    assert "persistence-mode-off · GPU 4 (0000:04:00.0)\n" in out
    assert "read: nvml.gpus[*].persistence_mode = no" in out
    # failures before what could not be judged; a warning before an info
    assert out.index("GPUs 0, 1, 3") < out.index("GPU 4 (")
    assert text.subjects_label([_gpu(0), _gpu(1), _gpu(2), _gpu(3)]) == "GPU 0-3"
    assert text.subjects_label([_gpu(5), _gpu(6)]) == "GPUs 5, 6"


def _verdict(findings: list[Finding]) -> str:
    out = text.render(Report(findings=findings), {})
    return next(line for line in out.splitlines() if line.startswith("Verdict:"))


def test_verdict_names_warnings_and_what_was_not_judged():
    unknown = _finding(HOST, status=Status.UNKNOWN, rule_id="x", message="could not read")
    warning = _finding(_gpu(0), rule_id="w")
    assert _verdict([warning, _finding(_gpu(1), rule_id="w2"), unknown]).startswith(
        "Verdict: OK, 2 warnings, 1 not judged — nothing failed at severity error"
    )
    passed = _finding(HOST, status=Status.PASS)
    assert _verdict([passed]).startswith("Verdict: OK — nothing failed")
    nothing = _verdict([unknown, _finding(_gpu(1), status=Status.UNKNOWN)])
    assert nothing == "Verdict: NOT JUDGED — no check could be judged (2 unknown); this is not a pass (exit status 3)"
    assert Report(findings=[unknown]).exit_code == 3
    assert Report(findings=[unknown, passed]).exit_code == 0


def test_check_exits_3_when_nothing_could_be_judged(capsys):
    # without a driver, persistence mode cannot be read on any GPU: nothing is judged
    code = run(["check", "--root", str(HOSTS / "no-driver"), "--only", "persistence-mode-off"])
    out, err = capsys.readouterr()
    assert code == 3, out + err
    assert "Verdict: NOT JUDGED" in out and "Verdict: OK" not in out
    code = run(["check", "--root", str(HOSTS / "no-driver"), "--only", "persistence-mode-off", "--format", "json"])
    out, _ = capsys.readouterr()
    assert code == 3 and '"verdict": "not_judged"' in out and '"exit_code": 3' in out


def test_layout_keeps_spans_and_inline_commands_whole():
    said = "Look (`apt-cache madison pkg` lists it): sudo systemctl restart x, then (docker rm -f c) again"
    pieces = layout.units(said)
    assert "(`apt-cache madison pkg`" in pieces and "sudo systemctl restart x," in pieces
    assert "(docker rm -f c)" in pieces
    assert layout.commands(said) == ["`apt-cache madison pkg`", "sudo systemctl restart x", "docker rm -f c"]
    # an indented fix line is a command: printed as it is, however narrow the terminal
    assert layout.fix_lines("Do this:\n  printf 'a b' | sudo tee /etc/x.conf", 20, "fix: ", "     ") == [
        "fix: Do this:",
        "       printf 'a b' | sudo tee /etc/x.conf",
    ]


def test_the_header_and_pass_lines_name_ascend_npus_as_npus() -> None:
    report, facts = _report("ascend-910b-healthy")
    assert "· 8 NPU(s) on PCI ·" in text.header(facts)
    out = text.render(report, facts, width=100)
    assert "8 NPUs" in out and "8 GPUs" not in out and "GPU(s) on PCI" not in out


def test_an_inline_command_is_found_wherever_it_stands_in_the_prose():
    # mid-sentence: `sudo` always starts one, another command word when an option or a pipe follows
    said = "Then run sudo systemctl restart nvidia-fabricmanager to reload it; then nvidia-smi -q -d ECC shows it."
    assert layout.commands(said) == ["sudo systemctl restart nvidia-fabricmanager", "nvidia-smi -q -d ECC"]
    assert layout.commands("check sudo dmesg -T | grep -i xid. Then reboot") == ["sudo dmesg -T | grep -i xid"]
    assert layout.commands("look at dmesg | grep amdgpu and retry") == ["dmesg | grep amdgpu"]
    # a command word used as a name is prose
    for prose in ("and gpudoctor never changes clocks for you", "or unset them to use every NPU",
                  "CUDA and nvidia-smi do not see it", "launched without torchrun (srun, mpirun)"):
        assert layout.units(prose) == prose.split(), prose


def test_prose_around_an_inline_command_still_wraps():
    said = (
        "When the counters climb, then nvidia-smi -q -d ECC shows which memory is at fault and whether "
        "the pages were retired since the last reset of the GPU"
    )
    lines = layout.wrap_units(said, 30)
    assert "nvidia-smi -q -d ECC" in lines[1] and len(lines) == 6
    assert all(len(line) <= 30 for line in lines)
    assert " ".join(lines) == said
    # a bullet of a fix wraps under its own text; an indented command line is printed as it is
    fix = "Either:\n  - inject the devices with CDI instead of the cgroup device list\n  sudo nvidia-ctk cdi generate"
    assert layout.fix_lines(fix, 40, "fix: ", "     ") == [
        "fix: Either:",
        "       - inject the devices with CDI",
        "         instead of the cgroup device",
        "         list",
        "       sudo nvidia-ctk cdi generate",
    ]
