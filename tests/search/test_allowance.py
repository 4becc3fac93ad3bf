"""--max-flops: a search bounded by the training compute it spends (real tiny training, no Ray)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

import nas
from nas.cli import main
from nas.search.driver.allowance import IDLE_LIMIT, Allowance, planned_flops, spent_flops, trained_flops
from nas.search.samplers.build import default_population

TINY_SPACE = Path(__file__).with_name("tiny_space.yaml")


def test_a_launch_needs_room_for_the_running_trials_budgets():
    a = Allowance(trials=None, max_flops=10.0)
    assert a.may_launch(0, 0)
    a.reserve(0, 6.0)
    assert a.may_launch(0, 1)  # 6 of 10 reserved
    a.reserve(1, 6.0)
    assert not a.may_launch(0, 2)  # 12 > 10: wait for one to finish
    a.settle(0, {"train_flops": 1.5})  # stopped early at a hurdle: only what it spent counts
    assert a.spent == 1.5 and a.may_launch(1, 1)
    a.settle(1, {"train_flops": 9.0})
    assert not a.may_launch(2, 0)


def test_a_prescreens_cost_is_reserved_beside_the_training_budget():
    """A screen's FLOPs are known once a candidate is sampled: reserved with it, and the next launch needs
    room for the costliest screen so far as well as a whole training budget."""
    a = Allowance(trials=None, max_flops=10.0, per_trial=4.0)
    assert a.may_launch(0, 0)  # no screen seen yet: a budget of 4 fits
    a.reserve(0, 4.0 + 2.0, screen=2.0)
    assert not a.may_launch(0, 1)  # 6 committed + 4 + a screen of 2 > 10
    a.settle(0, {"train_flops": 0.0, "prescreen_flops": 2.0})  # screened out: only the screen was spent
    assert a.spent == 2.0 and a.may_launch(1, 0)  # 2 + 4 + 2 fits


def test_with_a_flops_budget_the_limit_is_never_passed():
    a = Allowance(trials=None, max_flops=10.0, per_trial=4.0)
    a.settle(0, {"train_flops": 4.0})
    a.settle(1, {"train_flops": 1.0})  # stopped at a hurdle
    assert a.may_launch(2, 0)  # 5 spent: another whole budget of 4 fits
    a.reserve(2, 4.0)
    assert not a.may_launch(2, 1)  # 9 committed: a fourth would pass 10
    a.settle(2, {"train_flops": 4.0})
    assert not a.may_launch(3, 0) and a.spent == 9.0


def test_rungs_cooldowns_are_reserved_and_bound_what_a_flops_budget_may_cost():
    """A wsd run's rungs train their cooldowns beside the run: a trial reserves them, and a FLOPs budget
    per candidate counts the most they can add to a run of any length."""
    from evaluators.budget import rung_cooldowns
    from nas.models.cost import compute
    from nas.spec import Spec
    from nas.spec.sections import SearchSection
    from nas.spec.training import Budget, TrainRecipe

    recipe = TrainRecipe(schedule="wsd")
    budget = Budget("flops", 1e9, (0.25, 0.5))
    spec = Spec(space={}, recipe=recipe, budget=budget, search=SearchSection(max_flops=1e12))
    a = Allowance.of(spec, None)
    for n in range(1, 3000):  # a candidate that buys n steps spends n * per_step <= 1e9 on them
        assert a.per_trial >= 1e9 * (n + rung_cooldowns(budget, recipe, n)) / n, n
    assert a.per_trial < 1e9 * 1.25  # not a bound that stops searches for nothing
    arch = {"d_model": 32, "n_heads": 2, "max_len": 16, "layers": [{"attention": "mha"}]}
    cost = compute(nas.ArchConfig.from_dict(arch))
    step = 64 * cost.train_flops_per_token
    steps = Budget("steps", 20, (0.5,))  # rung of 10 steps: a cooldown of 2
    assert planned_flops(steps, cost, 64, recipe) == 22 * step
    assert planned_flops(Budget("steps", 20), cost, 64, recipe) == 20 * step
    assert planned_flops(Budget("flops", 20.5 * step, (0.5,)), cost, 64, recipe) == 22 * step


def test_trials_and_flops_limit_together_and_duplicates_cost_nothing():
    a = Allowance(trials=2, max_flops=100.0)
    a.settle(0, {"train_flops": 1.0})
    assert a.may_launch(1, 0) and not a.may_launch(2, 0)
    assert trained_flops({"train_flops": 5.0, "duplicate_of": 3}) == 0.0
    assert trained_flops({"infeasible": "over cap"}) == 0.0
    with pytest.raises(ValueError):
        Allowance(trials=None, max_flops=None)


def test_a_search_bounded_by_compute_alone_ends_in_an_exhausted_space():
    a = Allowance(trials=None, max_flops=1e30)
    for _ in range(IDLE_LIMIT - 1):
        a.settle_untrained()
    assert a.may_launch(0, 0)
    a.settle_untrained()
    assert not a.may_launch(0, 0) and a.stalled()
    a.settle(7, {"train_flops": 1.0})  # a trial that trained resets the count
    assert a.may_launch(0, 0) and not a.stalled()


def test_without_trials_the_default_population_is_twenty():
    assert default_population(None) == 20 and default_population(24) == 8


def _search(tmp_path, corpus, *extra, space=TINY_SPACE):
    args = [
        "search",
        "--space",
        str(space),
        "--study",
        "s",
        "--storage",
        f"sqlite:///{tmp_path}/s.db",
        "--runs-dir",
        str(tmp_path / "runs"),
        "--data",
        str(corpus),
        "--local",
        "--no-tensorboard",
        "--sampler",
        "random",
        "--steps",
        "6",
        *extra,
    ]
    return main(args)


def _study(tmp_path):
    return optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db")


def _trained(study):
    """(trial, FLOPs it trained) in trial order, for the trials that trained."""
    out = [(t, trained_flops(t.user_attrs)) for t in sorted(study.trials, key=lambda t: t.number)]
    return [(t, f) for t, f in out if f > 0]


def _check_stopped_on_compute(study, limit):
    trained = _trained(study)
    flops = [f for _, f in trained]
    # the last trial started while the spent compute was under the limit, and took it over
    assert sum(flops[:-1]) < limit <= sum(flops)
    assert spent_flops(study.trials) == pytest.approx(sum(flops))


def test_max_flops_ends_the_search_and_a_continued_counts_what_was_spent(tmp_path, text_corpus, capsys):
    # what one trial of the tiny space costs (6 steps): the limit is set in trials' worth
    assert _search(tmp_path, text_corpus, "--trials", "1") == 0
    one = trained_flops(
        optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db").trials[0].user_attrs
    )
    (tmp_path / "s.db").unlink()

    limit = 3.5 * one
    assert (
        _search(
            tmp_path, text_corpus, "--max-flops", f"{limit}", "--hurdles", "0.5", "--hurdle-percentile", "30"
        )
        == 0
    )
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db")
    _check_stopped_on_compute(study, limit)
    first = len(study.trials)
    assert "of " in capsys.readouterr().out  # the progress line shows the compute spent

    # the same limit again: nothing to do, nothing added
    assert (
        _search(
            tmp_path, text_corpus, "--max-flops", f"{limit}", "--hurdles", "0.5", "--hurdle-percentile", "30"
        )
        == 0
    )
    assert "nothing to do" in capsys.readouterr().out
    assert len(optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db").trials) == first

    # a larger limit continues from what the first run spent
    assert (
        _search(
            tmp_path,
            text_corpus,
            "--max-flops",
            f"{2 * limit}",
            "--hurdles",
            "0.5",
            "--hurdle-percentile",
            "30",
        )
        == 0
    )
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db")
    assert len(study.trials) > first
    _check_stopped_on_compute(study, 2 * limit)
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in study.trials)


def test_with_rungs_a_flops_budget_still_never_passes_the_limit(tmp_path, text_corpus):
    # Each trial spends its budget and its rungs' cooldowns (~10% more here); the launch rule counted the
    # budget alone, so with room for two budgets but not two trials the second one passed the limit
    # ('1.06e+09 of 1.03e+09 FLOPs').
    budget = 2e8
    limit = 2.15 * budget
    args = ["search", "--space", str(TINY_SPACE), "--study", "s", "--storage", f"sqlite:///{tmp_path}/s.db",
            "--runs-dir", str(tmp_path / "runs"), "--data", str(text_corpus), "--local", "--no-tensorboard",
            "--sampler", "random", "--budget.flops", f"{budget}", "--recipe.schedule", "wsd",
            "--budget.rungs", "0.5", "--max-flops", f"{limit}"]  # fmt: skip
    assert main(args) == 0
    trained = _trained(_study(tmp_path))
    assert trained and all(t.user_attrs["rung_flops"] > 0 for t, _ in trained)
    assert spent_flops(_study(tmp_path).trials) <= limit
    # a limit that holds one budget but not the cooldowns it may add: no trial could start, said so
    low = [*args[:-1], f"{1.05 * budget}"]
    low[low.index("s")] = "low"
    assert main(low) == 2
    assert optuna.get_all_study_names(f"sqlite:///{tmp_path}/s.db") == ["s"]


def test_trials_still_bound_a_search_with_max_flops(tmp_path, text_corpus):
    assert _search(tmp_path, text_corpus, "--trials", "3", "--max-flops", "1e30") == 0
    assert len(optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db").trials) == 3


def test_diverged_trials_count_what_they_trained_and_a_continued_search_reads_it_back(
    tmp_path, text_corpus, capsys
):
    # every candidate diverges within its first steps: each FAIL trial spent those steps' FLOPs
    space = tmp_path / "diverging.yaml"
    space.write_text(TINY_SPACE.read_text().replace("  log_every: 2\n", "  log_every: 2\n  lr: 1.0e+6\n"))
    assert _search(tmp_path, text_corpus, "--trials", "1", space=space) == 0
    one = trained_flops(_study(tmp_path).trials[0].user_attrs)
    assert one > 0
    (tmp_path / "s.db").unlink()

    limit = 2.5 * one  # without --trials: before, a search of such trials ran until IDLE_LIMIT of them
    assert _search(tmp_path, text_corpus, "--max-flops", f"{limit}", space=space) == 0
    study = _study(tmp_path)
    assert all(t.state == TrialState.FAIL and t.user_attrs["fail_reason"] == "diverged" for t in study.trials)
    _check_stopped_on_compute(study, limit)
    first = len(study.trials)
    assert first < IDLE_LIMIT

    assert _search(tmp_path, text_corpus, "--max-flops", f"{limit}", space=space) == 0
    assert "nothing to do" in capsys.readouterr().out and len(_study(tmp_path).trials) == first
    assert _search(tmp_path, text_corpus, "--max-flops", f"{2 * limit}", space=space) == 0
    study = _study(tmp_path)
    assert len(study.trials) > first
    _check_stopped_on_compute(study, 2 * limit)  # it went on from what the first run spent, not from 0
