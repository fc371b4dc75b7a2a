"""The fix list as text, JSON and a script: what `gpudoctor fix` prints."""

from __future__ import annotations

import json

from gpudoctor.advice.fix_list import collect
from gpudoctor.findings import HOST, Finding, Severity, Status
from gpudoctor.render.fix_list import render_json, render_shell, render_text


def finding(rule, status=Status.FAIL, fix="do it"):
    return Finding(rule, f"title of {rule}", "pcie", Severity.ERROR, status, HOST, "m", fix=fix)


def test_renderers_say_nothing_to_fix_and_never_make_fix_text_runnable():
    empty = collect([finding("p", status=Status.PASS)], {})
    assert "Nothing to fix" in render_text(empty)
    fixes = collect([finding("x", fix="sudo reboot\nthen check")], {"x": ["fix-reboot"]})
    script = render_shell(fixes)
    assert "#    sudo reboot" in script
    assert [line for line in script.splitlines() if line and not line.startswith("#")] == ["gpudoctor check --only x"]


def test_the_re_check_is_shown_quoted_and_run_as_quoted_words():
    fixes = collect([finding("bare", fix="")], {}, rule_dirs=["my rules"])
    assert "     then: gpudoctor check --only bare --rules 'my rules'" in render_text(fixes)
    assert render_shell(fixes).splitlines()[-1] == "gpudoctor check --only bare --rules 'my rules'"
    (item,) = json.loads(render_json(fixes))["groups"][0]["items"]
    assert item["verify"] == "gpudoctor check --only bare --rules 'my rules'"


def test_a_re_check_that_cannot_be_a_command_line_stays_a_comment():
    fixes = collect([finding("bare")], {}, rule_dirs=["bad\ndir"])
    assert render_shell(fixes).splitlines()[-1] == "#    then: gpudoctor check --only bare --rules 'bad\\ndir'"
