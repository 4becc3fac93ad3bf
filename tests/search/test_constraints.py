"""Candidates over the space's caps: the samplers learn from them, and no result-side view shows them."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import optuna
import pytest

from nas.cli import main
from nas.search.reports.lookup import state_counts
from nas.search.reports.tables import best_trial, leaderboard
from nas.search.reports.trial import format_trial, trial_detail
from nas.search.space.candidate import constraint_values, tell_infeasible
from nas.search.storage.records import is_infeasible

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from constraints import over_cap_flags  # noqa: E402  (the benchmark's own search loop)


@pytest.mark.parametrize("sampler", ["nsga2", "evolution"])
def test_share_of_over_cap_proposals_falls(sampler):
    # default.yaml with a cap at its median parameter count: about half of it is over the cap.
    flags = over_cap_flags(sampler, seed=0, trials=100)
    first, last = sum(flags[:20]), sum(flags[-20:])
    assert first >= 8  # the first generation is random: about half
    assert last <= first // 3


def test_tpe_learns_the_cap_from_the_constraint_values():
    # TPE needs few trials to learn where the over-cap half lies, so its first fifth is not random;
    # against the same TPE told FAIL for an over-cap candidate (which it ignores), after its five
    # random start-up trials it proposes at most half as many over the cap.
    learned = over_cap_flags("tpe", seed=0, trials=100)
    ignored = over_cap_flags("tpe, over-cap FAIL", seed=0, trials=100)
    assert sum(ignored[5:]) >= 15
    assert sum(learned[5:]) <= sum(ignored[5:]) // 2


def test_constraint_values_are_relative_excess():
    caps = {"max_params": 1000.0, "max_flops_per_token": 50.0}
    assert constraint_values(caps, 1500, 25.0) == {"max_params": 0.5, "max_flops_per_token": -0.5}
    assert constraint_values({}, 1500, 25.0) == {}


def _study(tmp_path: Path) -> tuple[optuna.Study, str]:
    storage = f"sqlite:///{tmp_path}/s.db"
    study = optuna.create_study(study_name="s", storage=storage, directions=["minimize", "minimize"])
    for params, loss, flops in ((100, 3.0, 10.0), (900, None, 5.0), (200, 2.5, 20.0)):
        trial = study.ask()
        trial.suggest_int("x", 0, 10)
        trial.set_user_attr("arch_id", f"a{params}")
        for key, v in constraint_values({"max_params": 500.0}, params, flops).items():
            trial.set_constraint(key, v)
        if loss is None:
            tell_infeasible(study, trial, "over cap: params 900 > max_params 500", flops, "loss+flops")
        else:
            study.tell(trial, [loss, flops])
    return study, storage


def test_infeasible_trials_stay_out_of_every_result_view(tmp_path, capsys):
    study, storage = _study(tmp_path)
    infeasible = study.trials[1]
    assert is_infeasible(infeasible) and infeasible.values[0] == math.inf
    assert not any(is_infeasible(t) for t in (study.trials[0], study.trials[2]))
    # Its low FLOPs would put it on an unconstrained front; it must be on none.
    assert [r["trial"] for r in leaderboard(study)] == [2, 0]
    assert best_trial(study).number == 2
    assert state_counts(study) == {"COMPLETE": 2, "INFEASIBLE": 1}
    detail = trial_detail(study, infeasible)
    assert detail["state"] == "INFEASIBLE" and detail["values"] is None
    assert "not trained: over cap" in format_trial(detail)
    out = tmp_path / "x.yaml"
    rc = main(["export", "--study", "s", "--storage", storage, "--trial", "1", "--out", str(out)])
    assert rc == 2 and not out.exists()
    assert "INFEASIBLE (over cap" in capsys.readouterr().err


AT_SPACE = """
name: atcap
globals: {d_model: 32, n_heads: 2, n_layers: 2, max_len: 64}
layers:
  attention: {mha: {}}
  ffn: {activation: relu, mult: 2}
  at:
    - layers: -1
      attention: %s
constraints: {%s}
"""


@pytest.mark.parametrize(
    ("block", "cap", "refused"),
    [
        ("synth_random", "max_params: 30000", True),  # the last layer's only choice: every candidate is over
        ("synth_random", "max_params: 40000", False),  # the same candidates under a cap they meet
        ("[synth_random, mha]", "max_params: 30000", False),  # the position may still choose mha
        ("synth_random", "max_flops_per_token: 50000", True),
    ],
)
def test_a_per_position_menu_that_breaks_the_caps_is_refused_at_once(tmp_path, capsys, block, cap, refused):
    """The caps were checked against the main menu only: a `layers.at` menu whose every choice breaks
    them was accepted, and every trial was told INFEASIBLE."""
    space = tmp_path / "space.yaml"
    space.write_text(AT_SPACE % (block, cap))
    argv = ["search", "--space", str(space), "--evaluator", "proxy:params", "--trials", "1", "--local",
            "--runs-dir", str(tmp_path / "runs"), "--no-tensorboard"]  # fmt: skip
    assert main(argv) == (2 if refused else 0)
    err = capsys.readouterr().err
    if refused:
        assert err.count("\n") == 1 and "no candidate of the space meets them: the smallest has" in err
        assert not (tmp_path / "runs").exists()  # nothing made
    else:
        assert "no candidate" not in err
