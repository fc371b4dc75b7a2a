"""UserError, the one "you can fix this" error: exit status 2, one line on stderr, no traceback."""

from __future__ import annotations

import pytest

from gpudoctor.cli.errors import UserError
from gpudoctor.cli.root import run


def test_a_user_error_is_one_escaped_line_and_exit_status_2(capsys, tmp_path):
    missing = tmp_path / "no\nsuch\x1b[2Jdir"
    assert run(["check", "--rules", str(missing)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("gpudoctor: error: --rules ") and err.endswith(": no such directory\n")
    assert err.count("\n") == 1 and "\x1b" not in err and "Traceback" not in err


def test_click_itself_exits_2_on_a_user_error(capsys, tmp_path):
    # standalone, as click runs a command for an embedding program: the same line and status
    from gpudoctor.cli.commands.report import command

    with pytest.raises(SystemExit) as stopped:
        command.main(["merge", str(tmp_path)], prog_name="gpudoctor report", standalone_mode=True)
    assert stopped.value.code == 2
    assert capsys.readouterr().err == f"gpudoctor: error: {tmp_path}: no *.json reports in this directory\n"


def test_user_error_is_a_click_exception_with_status_2():
    import click

    assert issubclass(UserError, click.ClickException) and UserError("x").exit_code == 2
