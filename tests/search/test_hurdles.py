"""Hurdle thresholds from earlier trials."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState, create_trial

from nas.search.hurdles import Hurdles, missed, parse_fractions


def finished(loss_at_half, state=TrialState.COMPLETE):
    return create_trial(state=state, value=1.0 if state == TrialState.COMPLETE else None,
                        user_attrs={"intermediate": {"0.5": loss_at_half}})


def test_threshold_is_the_percentile_of_earlier_losses():
    trials = [finished(x) for x in (1.0, 2.0, 3.0, 4.0)] + [finished(10.0, TrialState.PRUNED)]
    h = Hurdles((0.5,), percentile=50, min_trials=3)
    th = h.thresholds(trials)
    assert th == {"0.5": pytest.approx(3.0)}
    assert missed(th, 0.5, 3.5) and not missed(th, 0.5, 3.0)
    assert Hurdles((0.5,), percentile=25).thresholds(trials)["0.5"] == pytest.approx(2.0)


def test_hurdle_waits_for_enough_trials_and_ignores_failures():
    trials = [finished(1.0), finished(2.0), create_trial(state=TrialState.FAIL, user_attrs={"intermediate": {"0.5": 0.1}})]
    assert Hurdles((0.5,), min_trials=3).thresholds(trials) == {}
    assert not missed({}, 0.5, 100.0)


@pytest.mark.parametrize("text", ["", "0", "1", "0.5,0.25", "a,b", "0.3,0.3", "-0.1"])
def test_bad_fractions_are_refused(text):
    with pytest.raises(ValueError):
        parse_fractions(text)


def test_fractions_parse():
    assert parse_fractions("0.25, 0.5") == (0.25, 0.5)
    assert optuna  # the trials above are real Optuna FrozenTrials



def test_a_hurdle_can_stand_from_the_first_trial():
    # --hurdle-min-trials 1: the second candidate already meets the first one's loss at the hurdle
    th = Hurdles((0.5,), percentile=15, min_trials=1).thresholds([finished(3.0)])
    assert th == {"0.5": pytest.approx(3.0)} and missed(th, 0.5, 3.1)
    with pytest.raises(ValueError):
        Hurdles((0.5,), min_trials=0)
