"""The demo ends by saying how to confirm its winner, with a command the parser accepts."""

from __future__ import annotations

import shlex

import optuna

import nas.search.driver.loop
from nas.cli import build_parser, main
from nas.search.driver.weights import KeptWeights


class _NoSearch:
    """Stands in for the driver: the demo's closing lines are what is tested, not its 12 trainings."""

    def __init__(self, settings, *args, **kwargs) -> None:
        self.settings = settings
        self.kept = KeptWeights(0, None)  # what the summary reads: no weights kept

    def run(self) -> optuna.Study:
        return optuna.create_study(directions=["minimize", "minimize"])


def test_demo_prints_a_confirm_command_that_parses(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(nas.search.driver.loop, "Driver", _NoSearch)
    assert main(["search", "--demo", "--runs-dir", str(tmp_path), "--local"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("confirm:"))
    argv = shlex.split(line.removeprefix("confirm:").split("(")[0])
    args = build_parser().parse_args(argv[argv.index("confirm") :])  # after the program's name
    assert (args.command, args.study, args.runs_dir, args.top, args.seeds) == (
        "confirm",
        "default",
        str(tmp_path),
        3,
        3,
    )


def test_the_demo_over_a_study_run_otherwise_says_how_to_continue_it(monkeypatch, tmp_path, capsys):
    """After a small search of the default space with other settings, a plain ``nas search`` (the demo)
    is refused before its banner, naming the study and how to continue it; it used to print the banner
    and then say to leave out --space, which was never given (issue 36, new-user items)."""
    monkeypatch.chdir(tmp_path)
    assert (
        main(["search", "--trials", "1", "--evaluator", "proxy:params", "--local", "--no-tensorboard"]) == 0
    )
    monkeypatch.setattr(nas.search.driver.loop, "Driver", _NoSearch)
    capsys.readouterr()
    assert main(["search"]) == 2
    out, err = capsys.readouterr()
    assert "Demo search" not in out
    assert err.count("\n") == 1 and "the demo searches study 'default'" in err
    assert "search.evaluator: 'proxy:params' -> 'lm'" in err and "nas search --study default" in err
    assert "--space" not in err
