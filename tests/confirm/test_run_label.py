"""How a confirm or ladder run is named on its progress line and in ``show``."""

from __future__ import annotations

from nas.confirm.plan import Run, run_label


def test_a_runs_label_says_its_budget_and_seed_in_words() -> None:
    # it read '[vanilla x0.35 7.24138x seed 0]': two numbers with an x, one of them the size
    run = Run(0, 7.24138, 0, 1e-3)
    assert run_label("vanilla size 0.35", run, 1e-3) == "vanilla size 0.35, budget 7.241x, seed 0"
    assert run_label("trial 3", Run(1, 4.0, 2, 1e-3), 1e-3) == "trial 3, budget 4x, seed 2"
    # a run of an --lrs sweep says its learning rate, or two runs would read the same
    assert run_label("trial 3", Run(1, 1.0, 0, 3e-3), 1e-3) == "trial 3, budget 1x, seed 0, lr 0.003"
