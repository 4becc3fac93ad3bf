"""The demo ends by saying how to confirm its winner, with a command the parser accepts."""

from __future__ import annotations

import shlex

import optuna
import pytest

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


def test_the_demo_banner_says_what_the_shipped_space_runs(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(nas.search.driver.loop, "Driver", _NoSearch)
    assert main(["search", "--demo", "--workers", "2"]) == 0
    banner = capsys.readouterr().out.split("\n\n")[0]
    assert "Demo search: 12 candidate architectures from " in banner
    assert "each trained on Shakespeare for the same compute (1.2e+12 flops) on 2 local Ray worker(s);" in (
        banner
    )
    assert "worse than the median at half its budget stops there (a hurdle)." in banner
    assert "the Pareto front of loss vs FLOPs per token comes at the end" in banner


def test_the_demo_banner_follows_a_default_space_of_the_users(monkeypatch, tmp_path, capsys):
    """``nas`` alone searches ./search_spaces/default.yaml when there is one: the banner used to promise
    Shakespeare, local Ray workers and a hurdle at half the budget whatever that file said."""
    (tmp_path / "search_spaces").mkdir()
    notes = tmp_path / "search_spaces" / "notes.txt"  # beside the file, where its `data:` is read from
    notes.write_text("some text of the user's own\n" * 50)
    (tmp_path / "search_spaces" / "default.yaml").write_text(
        "globals: {d_model: 32, n_heads: 2, n_layers: 1, max_len: 16}\n"
        "layers: {attention: [mha]}\n"
        "data: notes.txt\n"
        "budget: {steps: 3}\n"
        "search: {objective: loss, trials: 2, hurdles: [0.25, 0.75], hurdle_percentile: 25}\n"
        "resources: {local: true}\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(nas.search.driver.loop, "Driver", _NoSearch)
    assert main([]) == 0
    banner = capsys.readouterr().out.split("\n\n")[0]
    assert "Demo search: 2 candidate architectures from search_spaces/default.yaml" in banner
    assert f"each trained on {notes} for the same compute (3 steps) in this process;" in banner
    assert "worse than the 25th percentile at 0.25, 0.75 of its budget stops there" in banner
    assert "the leaderboard comes at the end" in banner
    assert "Shakespeare" not in banner and "Ray" not in banner and "Pareto" not in banner


@pytest.mark.parametrize(
    ("evaluator", "said"),
    [
        ("proxy:params", "each scored by proxy:params without training (proxy:params value (ln params))"),
        ("probes@5", "each scored by probes@5 (probe score (mean accuracy); the budget is not used)"),
    ],
)
def test_the_demo_banner_of_a_space_scored_without_a_language_model_says_so(
    monkeypatch, tmp_path, capsys, evaluator, said
):
    """The banner said "each trained on Shakespeare for the same compute" of a space a proxy scores (no
    training at all) or the probes score (their own tasks and steps, neither the corpus nor the budget)."""
    (tmp_path / "search_spaces").mkdir()
    (tmp_path / "search_spaces" / "default.yaml").write_text(
        "globals: {d_model: 32, n_heads: 2, n_layers: 1, max_len: 16}\n"
        "layers: {attention: [mha]}\n"
        f"search: {{objective: loss+flops, trials: 2, hurdles: [0.5], evaluator: '{evaluator}'}}\n"
        "resources: {local: true}\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(nas.search.driver.loop, "Driver", _NoSearch)
    assert main([]) == 0
    banner = capsys.readouterr().out.split("\n\n")[0]
    assert said in banner and "trained on" not in banner and "compute (" not in banner
    value = (
        "proxy:params value (ln params)" if evaluator.startswith("proxy") else "probe score (mean accuracy)"
    )
    assert f"a candidate whose {value} is worse than the median" in banner and "validation loss" not in banner
    assert f"the Pareto front of {value} vs FLOPs per token comes at the end" in banner
