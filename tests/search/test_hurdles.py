"""Hurdle thresholds from earlier trials."""

from __future__ import annotations

import pytest
from optuna.trial import TrialState, create_trial

from nas.search.samplers.hurdles import Hurdles, missed


def finished(loss_at_half, state=TrialState.COMPLETE):
    return create_trial(
        state=state,
        value=1.0 if state == TrialState.COMPLETE else None,
        user_attrs={"intermediate": {"0.5": loss_at_half}},
    )


def test_threshold_is_the_percentile_of_earlier_losses():
    trials = [finished(x) for x in (1.0, 2.0, 3.0, 4.0)] + [finished(10.0, TrialState.PRUNED)]
    h = Hurdles((0.5,), percentile=50, min_trials=3)
    th = h.thresholds(trials)
    assert th == {"0.5": pytest.approx(3.0)}
    assert missed(th, 0.5, 3.5) and not missed(th, 0.5, 3.0)
    assert Hurdles((0.5,), percentile=25).thresholds(trials)["0.5"] == pytest.approx(2.0)


def test_hurdle_waits_for_enough_trials_and_ignores_failures():
    trials = [
        finished(1.0),
        finished(2.0),
        create_trial(state=TrialState.FAIL, user_attrs={"intermediate": {"0.5": 0.1}}),
    ]
    assert Hurdles((0.5,), min_trials=3).thresholds(trials) == {}
    assert not missed({}, 0.5, 100.0)


def test_a_hurdle_can_stand_from_the_first_trial():
    # --hurdle-min-trials 1: the second candidate already meets the first one's loss at the hurdle
    th = Hurdles((0.5,), percentile=15, min_trials=1).thresholds([finished(3.0)])
    assert th == {"0.5": pytest.approx(3.0)} and missed(th, 0.5, 3.1)
    with pytest.raises(ValueError):
        Hurdles((0.5,), min_trials=0)


def test_each_architecture_counts_once_in_a_threshold():
    # Trial 3 re-proposed trial 1's architecture (a duplicate carries its twin's losses and arch_id):
    # counted twice, 4.0 would be the median and the architecture would pass its own hurdle.
    trials = [
        create_trial(
            state=TrialState.COMPLETE,
            value=1.0,
            user_attrs={"arch_id": arch, "intermediate": {"0.5": loss}, **extra},
        )
        for arch, loss, extra in [
            ("a", 1.0, {}),
            ("b", 4.0, {}),
            ("c", 2.0, {}),
            ("b", 4.0, {"duplicate_of": 1}),
        ]
    ]
    assert Hurdles((0.5,), percentile=50, min_trials=1).thresholds(trials) == {"0.5": pytest.approx(2.0)}
    assert Hurdles((0.5,), min_trials=4).thresholds(trials) == {}  # three architectures, not four trials


def test_stops_at_names_the_first_hurdle_the_recorded_losses_miss():
    h = Hurdles((0.25, 0.5))
    recorded = {"0.25": 3.0, "0.5": 2.5}
    assert h.stops_at(recorded, {"0.25": 3.5, "0.5": 2.0}) == 0.5
    assert h.stops_at(recorded, {"0.25": 2.9, "0.5": 2.0}) == 0.25  # a threshold moved: it stops sooner
    assert h.stops_at(recorded, {"0.25": 3.5, "0.5": 2.5}) is None  # passes both: only training tells
    assert h.stops_at({"0.25": 3.0}, {"0.25": 3.5, "0.5": 0.1}) is None  # no loss at 0.5 to judge
    assert h.stops_at({}, {"0.25": 0.1}) is None


def test_two_hurdles_on_one_step_are_both_recorded(tmp_path, text_corpus):
    # 0.25 and 0.5 of 2 steps are both measured after step 1: the worker kept only the nearer one (0.5),
    # so 0.25 had no value for `show` nor a check against its threshold
    from pathlib import Path

    import optuna

    from nas.cli import main

    space = Path(__file__).with_name("tiny_space.yaml")
    url = f"sqlite:///{tmp_path}/s.db"
    assert main(["search", "--space", str(space), "--study", "s", "--storage", url, "--runs-dir",
                 str(tmp_path / "runs"), "--data", str(text_corpus), "--local", "--no-tensorboard",
                 "--steps", "2", "--hurdles", "0.25,0.5", "--trials", "1"]) == 0  # fmt: skip
    trial = optuna.load_study(study_name="s", storage=url).trials[0]  # (the next seed waits in the queue)
    inter = trial.user_attrs["intermediate"]
    assert set(inter) == {"0.25", "0.5"} and inter["0.25"] == inter["0.5"], inter
