"""Counts read right where they are printed: ``1 step``, ``1 thread``, ``2 steps``."""

from __future__ import annotations

import optuna
import pytest

from nas.commands.probe import format_table
from nas.commands.train import format_metrics
from nas.confirm.summary import _judge
from nas.plural import plural
from nas.search.reports.tables import format_leaderboard
from nas.spec.training import Budget


def test_plural_says_one_in_the_singular_and_every_other_count_in_the_plural() -> None:
    assert plural(1, "step") == "1 step"
    assert [plural(n, "step") for n in (0, 2)] == ["0 steps", "2 steps"]
    assert plural(1200, "token", fmt=",") == "1,200 tokens"
    assert plural(1.0, "token", fmt="g") == "1 token"


@pytest.mark.parametrize(
    ("budget", "text"),
    [
        (Budget("steps", 1), "1 step"),
        (Budget("steps", 2, (0.5,)), "2 steps (rungs 0.5)"),
        (Budget("tokens", 1), "1 token"),
        (Budget("seconds", 1), "1 second"),
        (Budget("seconds", 1.5), "1.5 seconds"),
        (Budget("flops", 1e12), "1e+12 flops"),
    ],
)
def test_a_budget_of_one_reads_in_the_singular(budget: Budget, text: str) -> None:
    assert str(budget) == text


METRICS = {
    "arch_id": "abc",
    "val_loss": 2.0,
    "val_ppl": 7.4,
    "params": 10,
    "non_embedding_params": 5,
    "flops_per_token": 1.0,
    "train_flops_per_token": 3.0,
    "steps": 1,
    "tokens": 256,
    "train_flops": 768.0,
    "tokens_per_s": 100.0,
    "device": "cpu",
    "threads": 1,
    "seconds": 2.0,
}


def test_trains_table_says_one_step_on_one_thread() -> None:
    text = format_metrics(METRICS)
    assert "1 step, 256 tokens" in text and "on cpu (1 thread)" in text, text
    assert "on cpu (2 threads)" in format_metrics({**METRICS, "threads": 2})
    # a record without its threads names the device alone, not "(None threads)"
    assert "tokens/s on cpu\n" in format_metrics({k: v for k, v in METRICS.items() if k != "threads"})


def test_probes_table_says_one_step_on_one_thread() -> None:
    m = {"arch_id": "abc", "probe_copy": 0.5, "probe_score": 0.5, "probe_steps": 1, "seconds": 1.0,
         "device": "cpu", "threads": 1}  # fmt: skip
    assert "abc: 1 step per task, 1.0 s on cpu (1 thread)" in format_table(m, ("copy",))


def test_a_comparison_over_one_seed_says_seed() -> None:
    one = {"lower_on": 1, "n": 1, "max": -0.1, "min": -0.1}
    assert _judge(one) == ("beats", "on 1/1 seed")
    assert _judge({**one, "n": 2, "lower_on": 2}) == ("beats", "on 2/2 seeds")


def test_a_leaderboard_of_one_trial_says_trial() -> None:
    study = optuna.create_study()
    study.enqueue_trial({})
    study.tell(study.ask(), 1.0)
    assert ": 1 trial (1 complete)" in format_leaderboard(study, [])
