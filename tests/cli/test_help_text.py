"""Help texts a newcomer reads: metavars in words, not Python annotations; units named."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from traincast.cli.app import app

COMMANDS = [["predict"], ["analyze"], ["diff"], ["convert"], ["bench"], ["fit"], ["demo"],
            ["calibrate", "comm"], ["plan", "dlrm"], ["plan", "transformer"]]


@pytest.mark.parametrize("cmd", COMMANDS, ids=" ".join)
def test_help_has_no_python_annotations(cmd: list[str]) -> None:
    res = CliRunner().invoke(app, [*cmd, "--help"], env={"COLUMNS": "120"})
    assert res.exit_code == 0, res.output
    assert "list[" not in res.output and "Path]" not in res.output, res.output


def test_repeatable_options_name_their_values() -> None:
    text = CliRunner().invoke(app, ["predict", "--help"], env={"COLUMNS": "120"}).output
    assert "--what-if KEY=VALUE" in text and "--rank-map FILE=RANK" in text


def test_link_speed_units_said() -> None:
    text = CliRunner().invoke(app, ["calibrate", "comm", "--help"],
                              env={"COLUMNS": "200"}).output
    assert "Gb/s (gigabits" in text and "GB/s (gigabytes)" in text


def test_analyze_help_says_what_the_default_shows() -> None:
    text = " ".join(CliRunner().invoke(app, ["analyze", "--help"],
                                       env={"COLUMNS": "200"}).output.split())
    assert "(default: all)" not in text
    assert "Default: the verdict" in text


def test_library_warnings_are_not_traincast_warnings(monkeypatch, capsys) -> None:
    """A pandas FutureWarning raised during a command is not printed as traincast's own."""
    import importlib
    import warnings

    from traincast.errors import TraincastWarning

    app_module = importlib.import_module("traincast.cli.app")

    def noisy() -> None:
        warnings.warn("Downcasting object dtype arrays is deprecated", FutureWarning,
                      stacklevel=1)
        warnings.warn("ranks disagree", TraincastWarning, stacklevel=1)

    monkeypatch.delenv("TRAINCAST_VERBOSE", raising=False)
    import typer

    t = typer.Typer()
    t.command()(noisy)
    t.command("other")(noisy)
    monkeypatch.setattr(app_module, "app", t)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert app_module.main(["noisy"]) == 0
    err = capsys.readouterr().err
    assert "traincast: warning: ranks disagree" in err
    assert "Downcasting" not in err and "1 warning of the libraries it uses hidden" in err
    monkeypatch.setenv("TRAINCAST_VERBOSE", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert app_module.main(["noisy"]) == 0
    err = capsys.readouterr().err
    assert "warning (FutureWarning" in err and "Downcasting" in err
    assert "traincast: warning: Downcasting" not in err
