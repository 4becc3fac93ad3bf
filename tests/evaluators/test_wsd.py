"""WSD schedules and rungs (docs/training.md): the schedule's shape, the rungs' exact semantics, their checks.

A rung's loss equals an independent wsd run to the rung's steps with the same warmup
steps (same seed, same batches); rungs leave the main run as it was; their cooldowns
are the only extra compute, and the FLOPs say so.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import optuna
import pytest

import nas
from evaluators.budget import cooldown_steps, lr_at, lr_for_step, plan_rungs
from evaluators.lm import train_lm
from nas.cli import main
from nas.data import Corpus, load_corpus
from nas.errors import ConfigError
from nas.spec import Spec
from nas.spec.training import Budget, TrainRecipe

pytestmark = pytest.mark.usefixtures("single_thread")

TINY = nas.ArchConfig.from_dict(
    {"d_model": 32, "n_heads": 2, "max_len": 32, "layers": {"repeat": 2, "attention": "mha", "ffn": "relu"}}
)
WSD = TrainRecipe(batch_size=4, lr=3e-3, eval_batches=2, log_every=5, seed=0, schedule="wsd")
SPACE = Path(__file__).resolve().parents[1] / "search" / "tiny_space.yaml"


@pytest.fixture(scope="module")
def corpus(corpus_dir: Path) -> Corpus:
    return load_corpus(corpus_dir)


def train(corpus: Corpus, steps: int, rungs=(), **recipe):
    recipe_ = dataclasses.replace(WSD, **recipe)
    return train_lm(TINY, recipe_, Budget("steps", steps, rungs), corpus, device="cpu")


# -- the schedule -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        ("linear", [1.0, 1.0, 0.775, 0.55, 0.325, 0.1]),  # 0.1 + 0.9 * (1 - k/4)
        (
            "1-sqrt",
            [1.0, 1.0, 0.55, 0.1 + 0.9 * (1 - math.sqrt(0.5)), 0.1 + 0.9 * (1 - math.sqrt(0.75)), 0.1],
        ),
    ],
)
def test_wsd_schedule_shape(shape: str, expected: list[float]) -> None:
    recipe = TrainRecipe(lr=1.0, warmup_frac=0.1, schedule="wsd", cooldown_shape=shape)  # cooldown 0.2
    n = 20  # warmup: step 0 (lr 0.5); constant through step 15; cooldown steps 16..19
    assert lr_for_step(recipe, 0, n) == pytest.approx(0.5)
    got = [lr_for_step(recipe, s, n) for s in (1, 15, 16, 17, 18, 19)]
    assert got == pytest.approx(expected)
    # the continuous form (seconds budgets) agrees where the cooldown is whole steps
    assert [lr_at(recipe, (s + 1) / n) for s in (1, 15, 16, 17, 18, 19)] == pytest.approx(expected)


def test_cosine_stays_the_default_and_unchanged() -> None:
    recipe = TrainRecipe(lr=1.0)
    assert recipe.schedule == "cosine"
    assert "schedule" not in recipe.to_dict() and "cooldown_frac" not in recipe.to_dict()
    assert all(lr_for_step(recipe, s, 37) == lr_at(recipe, (s + 1) / 37) for s in range(37))


def test_rungs_are_placed_by_rounding() -> None:
    plan = plan_rungs(Budget("steps", 40, (0.25, 0.5)), WSD, 40)
    assert [(r.steps, r.cooldown, r.start) for r in plan] == [(10, 2, 8), (20, 4, 16)]
    assert cooldown_steps(WSD, 30) == 6 and cooldown_steps(WSD, 25) == 5


# -- exact semantics -------------------------------------------------------------------------------


def test_a_rung_equals_an_independent_run_and_leaves_the_run_unchanged(corpus: Corpus) -> None:
    with_rungs = train(corpus, 40, (0.25, 0.5))
    without = train(corpus, 40)
    # bit for bit: the snapshot (in host memory) puts back exactly what the branch changed
    assert with_rungs.val_loss == without.val_loss and with_rungs.train_loss == without.train_loss
    assert [r["steps"] for r in with_rungs.rungs] == [10, 20]
    for rung, warmup_frac in zip(with_rungs.rungs, (0.2, 0.1), strict=True):  # the same 2 warmup steps
        alone = train(corpus, rung["steps"], warmup_frac=warmup_frac)
        assert rung["val_loss"] == alone.val_loss
        assert rung["tokens"] == alone.tokens and rung["flops"] == pytest.approx(alone.train_flops)
    # the extra compute is the cooldowns only, and train_flops counts it
    per_step = without.train_flops / 40
    assert with_rungs.rung_flops == pytest.approx((2 + 4) * per_step)
    assert with_rungs.train_flops == pytest.approx(without.train_flops + with_rungs.rung_flops)
    assert with_rungs.tokens == without.tokens and with_rungs.steps == 40
    assert sum(r["cooldown_flops"] for r in with_rungs.rungs) == pytest.approx(with_rungs.rung_flops)


def test_a_hurdle_at_a_rung_sees_the_cooled_down_loss(corpus: Corpus) -> None:
    seen = {}

    def callback(progress):
        if progress.val_loss is not None:
            seen[progress.step] = progress.val_loss

    result = train_lm(TINY, WSD, Budget("steps", 20, (0.5,)), corpus, device="cpu", callback=callback,
                      eval_at=(0.25, 0.5))  # fmt: skip
    assert seen[10] == result.rungs[0]["val_loss"] == result.intermediate[0.5]
    assert 0.25 in result.intermediate  # a hurdle off the rungs: the run's own (constant-rate) loss


# -- checks -----------------------------------------------------------------------------------------


def test_budget_round_trip() -> None:
    budget = Budget.from_dict({"steps": 40, "rungs": [0.25, 0.5]})
    assert budget == Budget("steps", 40, (0.25, 0.5))
    assert budget.to_dict() == {"steps": 40, "rungs": [0.25, 0.5]}
    assert Budget.from_dict(budget.to_dict()) == budget
    assert Budget.from_dict({"steps": 40}).to_dict() == {"steps": 40}  # stored as before


@pytest.mark.parametrize(
    ("rungs", "words"),
    [((0.0,), "between 0 and 1"), ((1.0,), "between 0 and 1"), ((0.5, 0.25), "increasing"),
     ((0.5, 0.5), "distinct")],
)  # fmt: skip
def test_bad_rungs_are_refused(rungs, words) -> None:
    with pytest.raises(ConfigError, match=words):
        Budget("steps", 40, rungs)


def test_rungs_need_wsd_and_a_rung_must_buy_a_cooldown_after_the_warmup() -> None:
    with pytest.raises(ConfigError, match="budget.rungs.*recipe.schedule: wsd"):
        Spec(space={}, recipe=TrainRecipe(), budget=Budget("steps", 40, (0.5,)))
    with pytest.raises(ConfigError, match="needs recipe.schedule: wsd"):
        plan_rungs(Budget("steps", 40, (0.5,)), TrainRecipe(), 40)
    with pytest.raises(ConfigError, match="buys 0 steps"):
        plan_rungs(Budget("steps", 40, (0.01,)), WSD, 40)
    with pytest.raises(ConfigError, match="inside the warmup"):
        # warmup 8 of 40 steps; the rung: 8 steps, cooling down from step 6
        plan_rungs(Budget("steps", 40, (0.2,)), dataclasses.replace(WSD, warmup_frac=0.2), 40)
    with pytest.raises(ConfigError, match="the whole run"):
        plan_rungs(Budget("steps", 40, (0.99,)), WSD, 40)
    with pytest.raises(ConfigError, match="seconds budget"):
        Budget("seconds", 5, (0.5,))


def test_train_refuses_rungs_with_cosine_in_one_line(capsys) -> None:
    assert main(["train", "--arch", "vanilla", "--budget.steps", "40", "--budget.rungs", "0.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "budget.rungs" in err[0] and "recipe.schedule" in err[0]


# -- the Done-when check, as typed, and a search ---------------------------------------------------


def _train_json(capsys, *flags: str) -> dict:
    assert main(["train", "--arch", "vanilla", "--json", "--threads", "1", *flags]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.slow
def test_done_when_train_json_prints_the_rung(capsys) -> None:
    rung_run = _train_json(
        capsys, "--budget.steps", "40", "--recipe.schedule", "wsd", "--budget.rungs", "0.5"
    )
    alone = _train_json(
        capsys, "--budget.steps", "20", "--recipe.schedule", "wsd", "--recipe.warmup_frac", "0.1"
    )
    plain = _train_json(capsys, "--budget.steps", "40", "--recipe.schedule", "wsd")
    (rung,) = rung_run["rungs"]
    assert {"fraction", "steps", "tokens", "flops", "val_loss"} <= set(rung) and rung["steps"] == 20
    assert rung["val_loss"] == pytest.approx(alone["val_loss"], abs=1e-6)
    assert rung_run["val_loss"] == pytest.approx(plain["val_loss"], abs=1e-6)


def test_a_search_records_each_trials_rungs(tmp_path: Path, corpus_dir: Path) -> None:
    storage = f"sqlite:///{tmp_path}/s.db"
    args = ["search", "--space", str(SPACE), "--study", "w", "--storage", storage, "--runs-dir",
            str(tmp_path / "runs"), "--data", str(corpus_dir), "--local", "--workers", "1", "--trials", "2",
            "--steps", "10", "--recipe.schedule", "wsd", "--budget.rungs", "0.5",
            "--no-tensorboard"]  # fmt: skip
    assert main(args) == 0
    study = optuna.load_study(study_name="w", storage=storage)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert done
    for t in done:
        (rung,) = t.user_attrs["rungs"]
        assert rung["steps"] == 5 and math.isfinite(rung["val_loss"])
        assert t.user_attrs["rung_flops"] > 0
